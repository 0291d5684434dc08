"""
Pseudo-relevance feedback: long memories that match a query lend it their distinctive words.

A question names a topic in few words ("what similarity laws must be obeyed when constructing
aeroelastic models of heated high speed aircraft"), while the memories that answer it use the
field's other words too (``flutter``, ``thermal``, ``stiffness``). After fusion the best
``feedback_docs`` candidates are read as a sample of what the matches are about, if they hold
at least ``feedback_min_tokens`` tokens on average. Their words that are not query words are
weighted by frequency in the sample times IDF (the relevance-model expansion of Lavrenko and
Croft, RM3), and the best ``feedback_terms`` are added to the query's BM25 terms at
``feedback_weight``:

    bm25'(m) = bm25(m, query terms) + feedback_weight · bm25(m, expansion terms)

Only candidates are re-scored; nothing enters the results that no channel found, and no
second full-text query runs. Short memories are no sample: a 19-token conversation turn or a
robot's one-line fact gives a handful of incidental words, and on LoCoMo (turns stored as
``Speaker: text``) expanding from them costs R@10 and MRR@10 (docs/performance.md,
"Pseudo-relevance feedback"), so a store of short memories never expands.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, Iterable, Mapping, Sequence

from robotmem_ros.engine import bm25

# Words weighed by IDF, per expansion term kept: the IDF lookups are limited to the words that
# are frequent in the sample, the way RM3 keeps its best terms by frequency first.
CANDIDATES_PER_TERM = 3


def sample_weights(bodies: Iterable[str], query_terms: Iterable[str],
                   stopwords: frozenset[str], min_tokens: int) -> Counter[str]:
    """
    Return each word's summed relative frequency over the sample's bodies; empty if short.

    ``bodies`` are FTS bodies (text.fts_index_text: tokens joined by spaces). A sample whose
    bodies hold fewer than ``min_tokens`` tokens on average gives nothing. Query terms and
    stopwords are no expansion words, nor are tokens that are no word (see _is_word).
    """
    sample = [body.split() for body in bodies]
    if not sample or sum(map(len, sample)) < min_tokens * len(sample):
        return Counter()
    exclude = set(query_terms) | stopwords
    weights: Counter[str] = Counter()
    for tokens in sample:
        for word, count in Counter(tokens).items():
            if word not in exclude and _is_word(word):
                weights[word] += count / len(tokens)
    return weights


def _is_word(token: str) -> bool:
    """
    Return whether a token can carry a topic: a letter in it, three characters (two in CJK).

    Numbers name no topic; two-letter Latin tokens are mostly units and abbreviations (``cm``,
    ``et``, ``al``) where a stopword list leaves them. A CJK word of two characters is a
    word, one character mostly a particle.
    """
    return any(c.isalpha() for c in token) and len(token) > (2 if token.isascii() else 1)


def candidates(weights: Counter[str], count: int) -> list[str]:
    """Return the sample's most frequent words: the ones worth an IDF lookup for ``count``."""
    ranked = sorted(weights, key=lambda word: (-weights[word], word))
    return ranked[:CANDIDATES_PER_TERM * count]


def best_terms(weights: Counter[str], words: Iterable[str], idf: Callable[[str], float],
               count: int) -> list[str]:
    """Return the ``count`` of ``words`` with the highest weight x IDF (ties by word), > 0."""
    scored = {word: weights[word] * idf(word) for word in words}
    best = sorted(scored, key=lambda word: (-scored[word], word))[:count]
    return [word for word in best if scored[word] > 0.0]


def rescored(bodies: Mapping[int, str], known: Mapping[int, float], query_terms: Sequence[str],
             expansion: Sequence[str], stats: bm25.CorpusStats, k1: float, b: float,
             weight: float) -> list[tuple[int, float]]:
    """
    Return (id, BM25 of the query terms + weight x BM25 of the expansion), best first.

    ``known`` holds the query terms' BM25 of the candidates the BM25 channel scored already
    (the same statistics), so only the others' bodies are scored for the query terms again.
    """
    fresh = dict(bm25.rescore({i: body for i, body in bodies.items() if i not in known},
                              query_terms, stats, k1, b))
    scored = [(memory_id, (known[memory_id] if memory_id in known else fresh[memory_id])
               + weight * score)
              for memory_id, score in bm25.rescore(bodies, expansion, stats, k1, b)]
    scored.sort(key=lambda hit: (-hit[1], hit[0]))
    return scored
