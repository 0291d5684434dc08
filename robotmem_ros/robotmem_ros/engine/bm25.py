"""
BM25 with a tunable length normalization, scored on the candidates FTS5 found.

FTS5's ``bm25()`` fixes k1 = 1.2 and b = 0.75. With b = 0.75 a long conversation turn that
answers the question loses to a short one that shares a single word: on LoCoMo stored as
``Speaker: text`` (dev half) b = 0.3 lifts MRR@10 from 0.471 to 0.504 and R@10 from 0.660 to
0.673 (docs/performance.md, "BM25 length normalization"). FTS5 still finds the candidates
(its own ranking, ``fusion_depth`` deep); this module re-scores them with the same IDF and the
same corpus statistics FTS5 uses (row count, average length, row counts per term), so
``bm25_k1 = 1.2, bm25_b = 0.75`` gives FTS5's own scores back (``test_bm25.py`` holds that).
"""

from __future__ import annotations

from dataclasses import dataclass
import math
from typing import Mapping, Sequence

# FTS5's floor for the IDF of a term in more than half the rows (its log goes negative).
MIN_IDF = 1e-6


@dataclass(frozen=True)
class CorpusStats:
    """What BM25 needs of the whole index: rows, tokens in all rows, rows per query term."""

    rows: int
    tokens: int
    term_rows: Mapping[str, int]

    def idf(self, term: str) -> float:
        """
        Return FTS5's IDF: ``log((N - n + 0.5) / (n + 0.5))``, at least MIN_IDF.

        The totals and the term counts are read by separate statements, so a commit between
        them can make n exceed N; that reads as a term in every row, never as a math error.
        """
        held = self.term_rows.get(term, 0)
        return max(MIN_IDF, math.log((max(self.rows - held, 0) + 0.5) / (held + 0.5)))


def rescore(bodies: Mapping[int, str], terms: Sequence[str], stats: CorpusStats,
            k1: float, b: float) -> list[tuple[int, float]]:
    """
    Return (id, BM25 score) for every body, best first (ties by id); higher is better.

    ``bodies`` are FTS bodies (a text's tokens joined by single spaces: text.fts_index_text),
    the tokens FTS5 counted. A term's count is a substring count of `` term `` in the body with
    every separator doubled (so that adjacent repeats both count): a few C-level scans per body
    instead of splitting and counting all of its tokens (1.9 vs 2.5 ms for 50 of Cranfield's
    165-token abstracts and an 11-term query; a robot's short facts take a fraction of that).
    """
    idf = {f' {term} ': stats.idf(term) for term in dict.fromkeys(terms)}
    average = stats.tokens / stats.rows if stats.rows and stats.tokens else 1.0
    scored = []
    for memory_id, body in bodies.items():
        spaced = '  ' + body.replace(' ', '  ') + '  '
        norm = k1 * (1.0 - b + b * (body.count(' ') + 1) / average)
        parts = []
        for needle, weight in idf.items():
            count = spaced.count(needle)
            if count:
                parts.append(weight * count * (k1 + 1.0) / (count + norm))
        scored.append((memory_id, math.fsum(parts)))
    scored.sort(key=lambda hit: (-hit[1], hit[0]))
    return scored
