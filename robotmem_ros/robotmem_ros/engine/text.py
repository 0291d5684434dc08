"""
Text normalization and tokenization shared by dedup, FTS indexing and consolidation.

One tokenizer serves the FTS index, the FTS query and the Jaccard layer, so a token that
matches in one place matches in all (docs/memory.md, Tokens). A whitespace split would make
``grip_force=12.5N`` a single token and the consolidation example there impossible; here
identifiers are split on ``_ = : /``, numbers keep their attached unit (``12.5n``), English words
get a light plural/-ing stem, and Chinese runs are segmented by engine/segmenter.py (jieba's
dictionary and algorithm over a compact table: the same words as jieba and rjieba on 188 443
natural Chinese runs, in 11 instead of 80 or 33 MiB; docs/performance.md).
"""

from __future__ import annotations

import functools
import hashlib
import re
from typing import Iterable
import unicodedata

from robotmem_ros.engine import segmenter

# A run of CJK ideographs: what the segmenter is handed (bench/bench_segmenter.py takes them too).
CJK_RUN = re.compile(r'[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+')
# Letters to Python that FTS5's unicode61 tokenizer (its Unicode 6.1 tables) splits words at:
# New Tai Lue vowel signs and two Vedic signs. Readers split FTS bodies at spaces and take the
# words for FTS5's tokens (the postings of a small store, the term counts, the Jaccard layer),
# so these split tokens here too.
_UNICODE61_BREAKS = '\u19b0-\u19c0\u19c8\u19c9\u1cf2\u1cf3'
# Numbers with an attached unit ("12.5n", "90deg", "5%"), or words starting with a letter that
# may carry digits ("ur5e").
_LATIN_TOKEN = re.compile(rf'\d+(?:\.\d+)?[^\W\d_{_UNICODE61_BREAKS}]*%?'
                          rf'|[^\W\d_{_UNICODE61_BREAKS}][^\W_{_UNICODE61_BREAKS}]*')
# A number starts after no letter or digit (``ur5e`` holds none) or, in a text with Han, kana
# or Hangul characters, right after one: Chinese writes ``第2层``, ``12牛`` without a space. The
# second form costs three times the first, so only such texts take it.
_CJK = '\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af'
_HAS_CJK = re.compile(f'[{_CJK}]')
_NUMBER = re.compile(r'(?<![\w.])[-+]?\d+(?:\.\d+)?')
_NUMBER_CJK = re.compile(rf'(?:(?<![\w.])|(?<=[{_CJK}]))[-+]?\d+(?:\.\d+)?')
_WS = re.compile(r'\s+')
_QUOTED = re.compile(r'"((?:[^"]|"")*)"')  # a term of fts_match's expressions

# Stopwords (EN + ZH + category words, so that sharing a category keyword alone never
# makes two facts look alike) plus common English function words.
JACCARD_STOPWORDS = frozenset(
    '的 了 在 是 把 被 给 和 与 从 到 也 都 就 对 又 所 而 且 但 或 '
    'a an the is are was were be to of and in for on with '
    'preference constraint decision observation code config pattern '
    'architecture root_cause tradeoff revert '
    'it its this that these those at by as or if then than so do does did has have had '
    'i we you he she they them our my your his her'.split())
# Query-side stopwords for BM25: function words only (IDF handles the rest).
QUERY_STOPWORDS = frozenset(
    'a an the is are was were be to of and in for on with how what which when where who why '
    'do does did it its this that at by as or 的 了 在 是 和 与 吗 呢 如何 怎么 什么'.split())


def normalize_for_hash(text: str) -> str:
    """Collapse whitespace, case-fold and NFC-normalize: what "the same text" means."""
    return _WS.sub(' ', unicodedata.normalize('NFC', text)).strip().casefold()


def content_hash(text: str) -> str:
    """SHA-256 of the normalized text (full digest: collisions must not merge facts)."""
    return hashlib.sha256(normalize_for_hash(text).encode('utf-8')).hexdigest()


def _stem(word: str) -> str:
    """Strip English plural / -ing / -ed endings; deliberately light to stay predictable."""
    if not word.isascii() or not word.isalpha() or len(word) <= 3:
        return word
    if word.endswith('ies') and len(word) > 4:
        return word[:-3] + 'y'
    if word.endswith('ing') and len(word) > 5:
        return _undouble(word[:-3])
    if word.endswith('ed') and len(word) > 4:
        return _undouble(word[:-2])
    if word.endswith('sses'):
        return word[:-2]
    if word.endswith('s') and not word.endswith(('ss', 'us', 'is')):
        return word[:-1]
    return word


def _undouble(stem: str) -> str:
    if len(stem) > 2 and stem[-1] == stem[-2] and stem[-1] not in 'lsz':
        return stem[:-1]
    return stem


@functools.lru_cache(maxsize=4096)
def _cut_cjk(run: str) -> tuple[str, ...]:
    # The segmenter builds its table at the first Chinese text (0.6 s, 11 MiB), which a store
    # that holds no Chinese never needs.
    return tuple(w for w in segmenter.shared().cut(run) if w.strip())


# A learn and a recall tokenize their text several times, consolidation each session fact
# once: a few thousand entries serve them. A full cache holds its texts and their tokens for
# the node's life: 1.5 KB an entry on LoCoMo turns, 9.6 KB on Cranfield abstracts (65 536
# entries held 94 and 597 MiB; docs/performance.md).
@functools.lru_cache(maxsize=4096)
def tokenize(text: str) -> tuple[str, ...]:
    """Return all tokens of ``text`` in order: case-folded, stemmed, CJK segmented."""
    folded = unicodedata.normalize('NFC', text).casefold()
    out: list[str] = []
    pos = 0
    for match in CJK_RUN.finditer(folded):
        out.extend(_latin_tokens(folded[pos:match.start()]))
        out.extend(_cut_cjk(match.group()))
        pos = match.end()
    out.extend(_latin_tokens(folded[pos:]))
    return tuple(out)


def _latin_tokens(chunk: str) -> Iterable[str]:
    for match in _LATIN_TOKEN.finditer(chunk):
        token = match.group()
        if len(token) == 1 and not token.isdigit():
            continue
        yield _stem(token)


def jaccard_tokens(text: str) -> frozenset[str]:
    """Token set for the Jaccard layers (stopwords removed)."""
    return jaccard_set(tokenize(text))


def body_jaccard_tokens(body: str) -> frozenset[str]:
    """Jaccard token set of an FTS body (fts_index_text): a split, not a tokenizer run."""
    return jaccard_set(body.split())


def jaccard_set(tokens: Iterable[str]) -> frozenset[str]:
    """Return the Jaccard token set of tokens already made: the distinct ones, no stopwords."""
    return frozenset(tokens) - JACCARD_STOPWORDS


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """Return |a ∩ b| / |a ∪ b|; 0.0 for two empty sets."""
    union = a | b
    return len(a & b) / len(union) if union else 0.0


def fts_index_text(text: str) -> str:
    """Text stored in the FTS5 index: the same tokens the queries use, space separated."""
    return ' '.join(tokenize(text))


def query_terms(text: str) -> list[str]:
    """Return the distinct tokens of ``text`` a BM25 query searches for (no stopwords)."""
    return [t for t in dict.fromkeys(tokenize(text)) if t not in QUERY_STOPWORDS]


def fts_query(text: str) -> str | None:
    """Build a safe FTS5 MATCH expression of ``text``'s query terms; None if it has none."""
    return fts_match(query_terms(text))


def fts_match(terms: Iterable[str]) -> str | None:
    """
    Build a safe FTS5 MATCH expression: OR of quoted tokens, no operators; None if empty.

    Tokens contain only word characters, '.' and '%', so quoting makes every one a literal
    phrase; raw user text never reaches MATCH, so no query is a syntax error.
    """
    return ' OR '.join('"' + t.replace('"', '""') + '"' for t in terms) or None


def match_terms(match: str) -> list[str]:
    """Return the terms of a MATCH expression built by fts_match (quoted, OR-joined)."""
    return [term.replace('""', '"') for term in _QUOTED.findall(match)]


def numbers_in_order(text: str) -> tuple[float, ...]:
    """Numeric values of ``text`` in the order of their first mention (12.5 and 12.50 are one)."""
    numbers = _NUMBER_CJK if _HAS_CJK.search(text) else _NUMBER
    return tuple(dict.fromkeys(float(m.group())
                               for m in numbers.finditer(text.replace('_', ' '))))


# Pairs of words whose swap turns a fact into a different fact. States exclude each other
# (a door cannot open both inward and outward): the decision layer reads such a swap as an
# update. Positions and directions may both hold (a cup on the left shelf and one on the right):
# never a duplicate, and never an update either.
STATE_OPPOSITES = tuple(pair.split('/') for pair in (
    'inward/outward open/closed opened/closed on/off enabled/disabled locked/unlocked '
    'clockwise/counterclockwise full/empty true/false success/failure works/fails work/fail '
    'safe/unsafe allowed/forbidden required/optional').split())
DIRECTION_OPPOSITES = tuple(pair.split('/') for pair in (
    'left/right up/down top/bottom front/back above/below before/after inside/outside '
    'min/max minimum/maximum high/low higher/lower fast/slow faster/slower increase/decrease '
    'more/less north/south east/west').split())
_OPPOSITES = frozenset(frozenset(_stem(w.casefold()) for w in pair)
                       for pair in STATE_OPPOSITES + DIRECTION_OPPOSITES)
_NEGATIONS = frozenset('not no never cannot without nor don doesn didn isn aren wasn weren '
                       'won shouldn mustn couldn wouldn 未 勿 别 无 非 不'.split())


def is_negated(tokens: Iterable[str]) -> bool:
    """Return True when the tokens hold a negation word (EN or ZH)."""
    return any(t in _NEGATIONS or t.startswith(('不', '没')) for t in tokens)


def opposite_swap(only_a: Iterable[str], only_b: Iterable[str]) -> bool:
    """
    Return True when a word one text alone has is the opposite of one the other alone has.

    Near-identical wording is exactly where Jaccard and cosine fail: "the cup is on the left
    shelf" and "... right shelf" score 0.78 Jaccard and 0.985 MiniLM cosine, yet they are two
    facts (measured by the dedup benchmark).
    """
    only_b = list(only_b)
    return any(frozenset((x, y)) in _OPPOSITES for x in only_a for y in only_b)
