"""
The Chinese segmenter before and after (issue 15): jieba 0.42.1 against rjieba 0.2.2.

engine/text.py hands every run of CJK ideographs to the segmenter, and the FTS rows, the text
index and the Jaccard layer hold the words it returns: a segmenter that cut a run differently
would leave stored rows unmatched until a reindex. This reads every sentence of the Chinese
sets in the eval folder (zh_pairs: ATEC, BQ, LCQMC, PAWS-X, STS-B; stsb_zh), takes their runs
as the engine does, and reports how many runs the two cut into different words, the time each
takes for all runs, and what each adds to a fresh process's RSS with its import and a first cut.
jieba is a benchmark dependency only: ``pip install -r requirements/bench-segmenter.txt``.

Usage::

    python bench/bench_segmenter.py --eval ../shared/eval [--name segmenter]
"""

from __future__ import annotations

import argparse
import csv
import json
import pathlib
import subprocess
import sys
import time
from typing import Callable
import unicodedata

from common import print_table, RESULTS_DIR, write_run  # noqa: I100

SETS = ('zh_pairs/zh_pairs.csv', 'stsb_zh/stsb_zh.csv')
# A fresh process: RSS before the import, after it, after one cut (the dictionary may load then).
_LOAD = '''
import json, sys, time, psutil
rss = lambda: psutil.Process().memory_info().rss / 2**20
before = rss(); start = time.perf_counter()
{setup}
imported = rss()
cut("机器人抓取红色杯子时使用十二牛顿的力")
print(json.dumps({{"import_and_first_cut_s": time.perf_counter() - start,
                  "rss_before_mib": before, "rss_added_mib": rss() - before,
                  "rss_added_by_import_mib": imported - before}}))
'''
SEGMENTERS = {
    'jieba 0.42.1': 'import jieba, logging; jieba.setLogLevel(logging.WARNING); cut = jieba.lcut',
    'rjieba 0.2.2': 'import rjieba; cut = rjieba.cut',
}


def chinese_runs(eval_dir: pathlib.Path) -> list[str]:
    """Every distinct CJK run of the sets' sentences, folded as engine/text.tokenize folds."""
    from robotmem_ros.engine import text as textmod
    runs: set[str] = set()
    for name in SETS:
        with open(eval_dir / name, newline='', encoding='utf-8') as handle:
            for row in csv.DictReader(handle):
                for sentence in (row['sentence1'], row['sentence2']):
                    folded = unicodedata.normalize('NFC', sentence).casefold()
                    runs.update(m.group() for m in textmod.CJK_RUN.finditer(folded))
    return sorted(runs)


def segment(cut: Callable[[str], list[str]], runs: list[str]) -> tuple[list[tuple], float]:
    """Words of every run (blank ones dropped, as the engine drops them) and the seconds taken."""
    cut(runs[0])  # a dictionary that loads lazily loads outside the timing
    start = time.perf_counter()
    words = [tuple(w for w in cut(run) if w.strip()) for run in runs]
    return words, time.perf_counter() - start


def load_cost(setup: str) -> dict[str, float]:
    """Import time and RSS added by one segmenter, in a fresh interpreter."""
    out = subprocess.run([sys.executable, '-c', _LOAD.format(setup=setup)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--eval', type=pathlib.Path, required=True,
                        help='the eval folder (zh_pairs/, stsb_zh/)')
    parser.add_argument('--results', type=pathlib.Path, default=RESULTS_DIR)
    parser.add_argument('--name', default='segmenter')
    args = parser.parse_args()
    import jieba
    import rjieba
    runs = chinese_runs(args.eval)
    before, before_s = segment(jieba.lcut, runs)
    after, after_s = segment(rjieba.cut, runs)
    differ = [(run, a, b) for run, a, b in zip(runs, before, after) if a != b]
    loads = {label: load_cost(setup) for label, setup in SEGMENTERS.items()}
    rows = [{'segmenter': label, 'runs_s': seconds, **loads[label]}
            for label, seconds in zip(SEGMENTERS, (before_s, after_s))]
    print_table(f'{len(runs)} distinct Chinese runs; cut differently: {len(differ)}',
                ['segmenter', 'all runs s', 'import + first cut s', 'RSS added MiB'],
                [[r['segmenter'], r['runs_s'], r['import_and_first_cut_s'], r['rss_added_mib']]
                 for r in rows])
    return write_run(args, runs=len(runs), differ=len(differ),
                     differ_examples=[list(d) for d in differ[:20]], segmenters=rows)


if __name__ == '__main__':
    sys.exit(main())
