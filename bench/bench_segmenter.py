"""
The Chinese segmenters side by side (issue 15): jieba 0.42.1, rjieba 0.2.2 and the engine's own.

engine/text.py hands every run of CJK ideographs to the segmenter, and the FTS rows, the text
index and the Jaccard layer hold the words it returns: a segmenter that cut a run differently
would leave stored rows unmatched until a reindex. This reads every sentence of the Chinese
sets in the eval folder (zh_pairs: ATEC, BQ, LCQMC, PAWS-X, STS-B; stsb_zh), takes their runs
as the engine does, and reports for each segmenter how many runs it cuts into other words than
jieba, the time it takes for all runs, and what it adds to a fresh process's RSS with its
import and a first cut (numpy, which the engine always holds, is loaded before; the RSS after
``malloc_trim`` is what the engine's periodic trim leaves). rjieba (the segmenter before
engine/segmenter.py) is a benchmark dependency only:
``pip install -r requirements/bench-segmenter.txt``.

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
import ctypes, json, sys, time, numpy, psutil
rss = lambda: psutil.Process().memory_info().rss / 2**20
before = rss(); start = time.perf_counter()
{setup}
imported = rss()
cut("机器人抓取红色杯子时使用十二牛顿的力")
seconds = time.perf_counter() - start
added = rss() - before
ctypes.CDLL('libc.so.6').malloc_trim(0)
print(json.dumps({{"import_and_first_cut_s": seconds, "rss_before_mib": before,
                  "rss_added_mib": added, "rss_added_trimmed_mib": rss() - before,
                  "rss_added_by_import_mib": imported - before}}))
'''
# The first is the reference the others are compared with.
SEGMENTERS = {
    'jieba 0.42.1': 'import jieba, logging; jieba.setLogLevel(logging.WARNING); cut = jieba.lcut',
    'rjieba 0.2.2': 'import rjieba; cut = rjieba.cut',
    'engine/segmenter.py': ('from robotmem_ros.engine import segmenter; '
                            'cut = segmenter.shared().cut'),
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
    runs = chinese_runs(args.eval)
    rows, reference = [], None
    for label, setup in SEGMENTERS.items():
        names: dict = {}
        exec(setup, names)  # noqa: S102 - this file's own constant imports
        words, seconds = segment(names['cut'], runs)
        reference = reference or words
        differ = [[run, a, b] for run, a, b in zip(runs, reference, words) if a != b]
        rows.append({'segmenter': label, 'runs_s': seconds, 'differ_from_jieba': len(differ),
                     'differ_examples': differ[:20], **load_cost(setup)})
    print_table(f'{len(runs)} distinct Chinese runs',
                ['segmenter', 'cut unlike jieba', 'all runs s', 'import + first cut s',
                 'RSS added MiB', 'after malloc_trim'],
                [[r['segmenter'], r['differ_from_jieba'], r['runs_s'],
                  r['import_and_first_cut_s'], r['rss_added_mib'], r['rss_added_trimmed_mib']]
                 for r in rows])
    return write_run(args, runs=len(runs), differ=max(r['differ_from_jieba'] for r in rows),
                     segmenters=rows)


if __name__ == '__main__':
    sys.exit(main())
