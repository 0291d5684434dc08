"""
Split a short fact into its facet (what it is about) and its value (what it says).

A facet key is the text before ':' / '-' / '—', else the first 24 characters
(docs/decisions.md). Robot facts are mostly "<attribute> for <subject> is <value>", so the
split here also stops at copulas ("is", "needs", "是", "为"), keeps names with digits ("M4",
"shelf_1", "ur5e") as words, turns numbers with units into SI quantities, and records negation,
which is how the rules tell "the same fact said again" from "the same facet with a new value".
"""

from __future__ import annotations

from dataclasses import dataclass
import re
import unicodedata

from robotmem_ros.engine.decision.quantity import parse_quantity, Quantity, QUANTITY_PATTERN

_TOKEN_RE = re.compile(
    QUANTITY_PATTERN
    + r"|(?P<word>[a-z0-9_]+(?:['\-.][a-z0-9_]+)*)"
    + r'|(?P<cjk>[\u3400-\u9fff])'
    + r'|(?P<sep>[:=]|\s-\s|—)'
)

# Words that carry no facet or value: articles, copulas, auxiliaries, linking prepositions.
LIGHT_WORDS = frozenset("""
a an the is are was were be been being am do does did of for to at by with from and as than
that which it its this these those there now currently need needs require requires has have
had located equals should must will shall can may also then
""".split()) | frozenset('的了是为和与及着')

NEGATIONS = frozenset("""
not no never cannot can't don't doesn't didn't isn't aren't wasn't weren't won't shouldn't
mustn't without nor
""".split()) | frozenset('不没未无别勿非')

# Tokens after which the rest of the fact is its value.
COPULAS = frozenset("""
is are was were equals need needs require requires has have
""".split()) | frozenset('是为')

# Which relation a copula states: "X is 5" and "X: 5" say the same kind of thing, "X needs 5"
# another.
COPULA_KINDS = {'need': 'need', 'needs': 'need', 'require': 'need', 'requires': 'need',
                'has': 'have', 'have': 'have'}

_PREPOSITIONS = (' for ', ' of ', ' on ', ' in ', ' at ')
_FALLBACK_CHARS = 24


@dataclass(frozen=True)
class Parsed:
    """
    A fact as the rules compare it.

    ``content`` is the sequence of meaningful tokens (stemmed words, quantity tokens, single
    CJK characters); ``split`` is how many of them form the facet (None when the fact has no
    copula or separator) and ``copula`` the kind of relation it states ('be', 'need',
    'have'); ``quantities`` are every number, ``head_quantities`` those inside the facet.
    """

    text: str
    content: tuple[str, ...]
    split: int | None
    quantities: tuple[Quantity, ...]
    head_quantities: tuple[Quantity, ...]
    negated: bool
    copula: str = ''

    @property
    def head(self) -> tuple[str, ...]:
        """Facet tokens (empty when there is no split)."""
        return self.content[:self.split] if self.split else ()

    @property
    def value(self) -> tuple[str, ...]:
        """Value tokens (the whole content when there is no split)."""
        return self.content[self.split:] if self.split else self.content

    @property
    def value_quantities(self) -> tuple[Quantity, ...]:
        """Quantities with a unit that sit in the value part."""
        head = list(self.head_quantities)
        rest = []
        for q in self.quantities:
            if head and q in head:
                head.remove(q)
            else:
                rest.append(q)
        return tuple(q for q in rest if q.dimension)


def normalize_text(text: str) -> str:
    """NFKC (full-width ':' and digits become ASCII), lower case, 'no longer' -> 'not'."""
    text = unicodedata.normalize('NFKC', text).lower().strip()
    text = re.sub(r'\bno longer\b', 'not', text)
    # "kitchen A": an 'a' that no word follows is a name, not the article.
    return re.sub(r'\ba\b(?=\s*(?:$|[^\w\s]))', 'a_', text)


def stem(word: str) -> str:
    """Strip possessives and plurals so 'cups' matches 'cup' and 'robot's' matches 'robot'."""
    if word.endswith("'s"):
        word = word[:-2]
    if not word.isalpha() or len(word) <= 3:
        return word
    if word.endswith('ies'):
        return word[:-3] + 'y'
    if word.endswith(('sses', 'xes', 'zes', 'ches', 'shes')):
        return word[:-2]
    if word.endswith('s') and not word.endswith(('ss', 'us', 'is')):
        return word[:-1]
    return word


def parse(text: str) -> Parsed:
    """Tokenize ``text`` and find its facet/value split."""
    normalized = normalize_text(text)
    content: list[str] = []
    quantities: list[Quantity] = []
    split: int | None = None
    head_quantities: tuple[Quantity, ...] = ()
    negated = False
    copula = ''
    for m in _TOKEN_RE.finditer(normalized):
        token = m.group('word') or m.group('cjk')
        marks_split = bool(m.group('sep')) or token in COPULAS
        if marks_split and split is None and content:
            split = len(content)
            head_quantities = tuple(quantities)
            copula = COPULA_KINDS.get(token or '', 'be')
        if m.group('num'):
            q = parse_quantity(m.group('num'), m.group('unit'))
            quantities.append(q)
            content.append(q.token())
        elif token in NEGATIONS:
            negated = not negated
        elif token and token not in LIGHT_WORDS:
            content.append(stem(token))
    if split == len(content):
        split, copula = None, ''
    return Parsed(text, tuple(content), split, tuple(quantities), head_quantities, negated,
                  copula)


def facet_key(text: str) -> str:
    """
    Human-readable facet, "attribute | subject" when the head says "<attr> for <subject>".

    Shown to the LLM next to each memory and written to the audit history; the rules compare
    token sets instead, so word order does not matter to them.
    """
    normalized = normalize_text(text)
    m = re.search(r'[:=]|\s-\s|—|\b(?:is|are|was|were|equals|needs?|requires?)\b|[是为]',
                  normalized)
    if not m or m.start() == 0:
        short = re.match(r'^(.{1,%d})\s' % _FALLBACK_CHARS, normalized)
        return (short.group(1) if short else normalized[:_FALLBACK_CHARS]).strip()
    head = re.sub(r'\b(?:the|a|an)\b\s*', '', normalized[:m.start()]).strip()
    padded = f' {head} '
    for prep in _PREPOSITIONS:
        attribute, found, subject = padded.partition(prep)
        if found and attribute.strip() and subject.strip():
            return f'{attribute.strip()} | {subject.strip()}'
    return head
