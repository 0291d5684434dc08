"""
Chinese word segmentation: jieba's algorithm over a compact table of jieba's dictionary.

Why not a segmenter package: jieba holds its 349 046 words in Python dicts (80 MiB), rjieba
(jieba-rs) in a Rust hash map (33 MiB), and either stays for the node's life once a first
Chinese text arrives, which put the ROS node over its 600 MiB budget in a 1M session
(docs/performance.md, "The Chinese segmenter, compact"). Here the words and every prefix of
them are one sorted array of 64-bit hashes with a parallel array of frequencies (12 bytes an
entry, 6 MiB), and the hidden Markov model for words outside the dictionary is one tuple of
four log-probabilities per character. The data are jieba 0.42.1's own files (dict.txt and the
finalseg tables), read from the installed package without importing it.

The algorithm is jieba's ``cut`` with HMM: a graph of the dictionary words starting at each
character, the route of highest summed log-frequency through it (ties to the longer word), and
runs of single characters that do not form a dictionary word re-cut by Viterbi over the
B(egin) / M(iddle) / E(nd) / S(ingle) states. Same words as jieba and rjieba on all 188 443
natural Chinese runs of the eval sets (bench/bench_segmenter.py), so stores written before need
no reindex. Slower than both (55 µs a run against jieba's 29 and rjieba's 2.5): a lookup is a
hash and a binary search where they look up a hash map.

The hashes are Python's own ``hash`` of the strings, salted per process: the table is built in
the process that uses it (0.6 s at the first Chinese text) and never saved. Two of the 498 107
entries sharing a 64-bit hash, or a fragment hashing like an entry, is a 1-in-10^7 event per
start; its only effect would be one run cut differently.
"""

from __future__ import annotations

import array
import ast
import importlib.util
import math
import pathlib
import re
import threading
from typing import Iterator

import numpy as np

from robotmem_ros.engine import heap
from robotmem_ros.errors import SegmenterError

STATES = 'BMES'
# The states that may precede each one: a word begins after a word ends, and so on.
PREVIOUS = {'B': 'ES', 'M': 'MB', 'S': 'SE', 'E': 'BM'}
MIN_LOG = -3.14e100  # jieba's log-probability of what its tables leave out
# What the model segments: jieba's Han range; any other character in a run stays whole.
_HAN = re.compile('([\u4e00-\u9fd5]+)')
_EMIT_STATE = re.compile(r"^\s*(?:P=\{)?'([BEMS])': \{")
_EMIT_ENTRY = re.compile(r"'\\u([0-9a-f]{4})': (-?[0-9.]+(?:e[-+]?[0-9]+)?)")


class _Dictionary:
    """Sorted hashes of the words and their prefixes, with each word's frequency (0: prefix)."""

    def __init__(self, path: pathlib.Path) -> None:
        # Streamed into arrays: lists of 850 000 strings would leave their freed memory
        # with the process (34 MiB measured against 6 MiB of arrays).
        words, counts, prefixes = array.array('q'), array.array('q'), array.array('q')
        with open(path, encoding='utf-8') as handle:
            for number, line in enumerate(handle, 1):
                try:
                    word, count = line.split(' ', 2)[:2]
                    counts.append(int(count))
                except ValueError:
                    raise SegmenterError(f'{path}, line {number}: not "word count"') from None
                words.append(hash(word))
                prefixes.extend(hash(word[:end]) for end in range(1, len(word)))
        if not words:
            raise SegmenterError(f'{path} holds no words')
        values = np.concatenate([np.frombuffer(counts, dtype=np.int64),
                                 np.zeros(len(prefixes), dtype=np.int64)])
        keys, first = np.unique(np.concatenate([np.frombuffer(words, dtype=np.int64),
                                                np.frombuffer(prefixes, dtype=np.int64)]),
                                return_index=True)  # first: a word's count beats a prefix's 0
        self.keys = keys
        self.counts = values[first].astype(np.int32)
        self.log_total = math.log(int(values.sum()))

    def count(self, fragment: str) -> int | None:
        """Return the word's count: 0 for a prefix of words only, None for neither."""
        key = hash(fragment)
        at = int(np.searchsorted(self.keys, key))
        if at < len(self.keys) and self.keys[at] == key:
            return int(self.counts[at])
        return None


class _Model:
    """jieba's hidden Markov model: start, transition and per-character emission log-probs."""

    def __init__(self, folder: pathlib.Path) -> None:
        self.start = _literal(folder / 'prob_start.py')
        self.trans = _literal(folder / 'prob_trans.py')
        emit: dict[str, list[float]] = {}
        column = -1
        with open(folder / 'prob_emit.py', encoding='utf-8') as handle:
            for line in handle:
                state = _EMIT_STATE.match(line)
                if state:
                    column = STATES.index(state.group(1))
                for code, value in _EMIT_ENTRY.findall(line):
                    emit.setdefault(chr(int(code, 16)), [MIN_LOG] * 4)[column] = float(value)
        if column < 0 or not emit:
            raise SegmenterError(f'{folder / "prob_emit.py"} holds no emission table')
        self.emit = {char: tuple(row) for char, row in emit.items()}

    def states(self, text: str) -> str:
        """Return the likeliest B/M/E/S state of each character (Viterbi, ties as jieba's)."""
        missing = (MIN_LOG,) * 4
        first = self.emit.get(text[0], missing)
        score = {s: self.start[s] + first[at] for at, s in enumerate(STATES)}
        path = {s: s for s in STATES}
        for char in text[1:]:
            emitted = self.emit.get(char, missing)
            new_score, new_path = {}, {}
            for at, s in enumerate(STATES):
                best = max((score[p] + self.trans[p].get(s, MIN_LOG) + emitted[at], p)
                           for p in PREVIOUS[s])
                new_score[s], new_path[s] = best[0], path[best[1]] + s
            score, path = new_score, new_path
        return path[max((score[s], s) for s in 'ES')[1]]

    def words(self, text: str) -> Iterator[str]:
        """Cut Han characters by their states; other characters come out as they stand."""
        for block in _HAN.split(text):
            if not block:
                continue
            if not _HAN.fullmatch(block):
                yield block
                continue
            begin = 0
            for at, state in enumerate(self.states(block)):
                if state in 'ES':
                    yield block[begin:at + 1]
                    begin = at + 1
                elif state == 'B':
                    begin = at
            if begin < len(block):
                yield block[begin:]


class Segmenter:
    """jieba's ``cut`` (with HMM) of one run of CJK characters."""

    def __init__(self, folder: pathlib.Path) -> None:
        try:
            self._words = _Dictionary(folder / 'dict.txt')
            self._model = _Model(folder / 'finalseg')
        except OSError as exc:
            raise SegmenterError(f'cannot read the segmenter data in {folder}: {exc}') from exc

    def cut(self, run: str) -> list[str]:
        """Return the words of ``run`` in order; their concatenation is ``run``."""
        route = self._route(run, [self._words_from(run, start) for start in range(len(run))])
        out: list[str] = []
        singles = ''
        start = 0
        while start < len(run):
            stop = route[start] + 1
            if stop - start == 1:
                singles += run[start]
            else:
                self._flush(singles, out)
                singles = ''
                out.append(run[start:stop])
            start = stop
        self._flush(singles, out)
        return out

    def _words_from(self, run: str, start: int) -> list[tuple[int, int]]:
        """Return (last position, count) of the dictionary words from ``start``, else the char."""
        found = []
        for stop in range(start + 1, len(run) + 1):
            count = self._words.count(run[start:stop])
            if count is None:
                break
            if count:
                found.append((stop - 1, count))
        return found or [(start, 0)]

    def _route(self, run: str, words: list[list[tuple[int, int]]]) -> list[int]:
        """Return, for each position, the end of the word on the best route from it."""
        score = [0.0] * (len(run) + 1)
        best_end = [0] * len(run)
        log_total = self._words.log_total
        for start in range(len(run) - 1, -1, -1):
            score[start], best_end[start] = max(
                (math.log(count or 1) - log_total + score[end + 1], end)
                for end, count in words[start])
        return best_end

    def _flush(self, singles: str, out: list[str]) -> None:
        """Single characters between words: one word, the model's words, or each alone."""
        if len(singles) == 1:
            out.append(singles)
        elif len(singles) > 1:
            if self._words.count(singles):
                out.extend(singles)
            else:
                out.extend(self._model.words(singles))


def _literal(path: pathlib.Path) -> dict:
    """Return the dict literal assigned to ``P`` in one of jieba's small table modules."""
    text = path.read_text(encoding='utf-8')
    try:
        return ast.literal_eval(text[text.index('P=') + 2:])
    except (ValueError, SyntaxError) as exc:
        raise SegmenterError(f'{path} holds no table P: {exc}') from exc


def data_folder() -> pathlib.Path:
    """Return where the installed jieba package keeps its data (without importing it)."""
    spec = importlib.util.find_spec('jieba')
    if spec is None or not spec.submodule_search_locations:
        raise SegmenterError('the jieba package (its dictionary) is not installed: '
                             'pip install -r requirements/runtime.txt')
    return pathlib.Path(next(iter(spec.submodule_search_locations)))


_LOCK = threading.Lock()
_SHARED: list[Segmenter] = []


def shared() -> Segmenter:
    """Return the process's segmenter, built at the first call (no Chinese, no cost)."""
    with _LOCK:
        if not _SHARED:
            _SHARED.append(Segmenter(data_folder()))
            heap.return_freed()  # the build's temporaries: 8 MiB of heap left free otherwise
        return _SHARED[0]
