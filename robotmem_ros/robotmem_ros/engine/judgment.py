"""
Whether two facts are one fact: what differs between them, and whether it carries content.

Every layer that can hide a fact — exact/Jaccard/cosine/session dedup, end-of-session
consolidation, a decider's SKIP or MERGE — asks :func:`difference` before it acts. Similarity
scores cannot answer this: "pick up the book and place it in the caddy" and "... the cup ..."
share 0.75 Jaccard and a high cosine, and swapping the two mugs of "put the white mug on the
left plate and the yellow mug on the right plate" keeps every word (Jaccard 1.0). So the texts are
aligned as sequences of content words (articles, auxiliaries and pronouns dropped, verbs and
spatial words of one meaning mapped to one word: pick up / lift / grab, place / put / set,
beside / near / next to, turn on the stove / turn the stove on; an owner in one place, the
cabinet's drawer / the drawer of the cabinet; a compound written as one word or two, tool box /
toolbox, is one word) and the difference is read off the alignment:

* a different number, a flipped negation or an opposite word (left/right, open/closed);
* a word only one text has in a *protected* class — colour, material, size, place or spatial
  relation, ordinal — whatever the other text says there;
* another verb where one text's action stands (pick up the cup / wash the cup);
* a content word replaced by another (an object, a name, an attribute), unless the caller's
  span judge (the embedder on the two differing spans) finds the spans say the same;
* more than ``MAX_ADDED`` content words added on one side (new detail is a new fact);
* the shared attribute and place words in another order, or a relation on another landmark
  (roles swapped: who or what goes where).

Per-fact features are derived once per text (an LRU cache): end_session compares each fact with
hundreds of others, and re-deriving numbers, negation and token sets per pair was most of its
time.

A leading ``name:`` that names a speaker, a sensor, a robot or another source is not an
attribute of the fact; :func:`split_source` separates it, and facts that are records
(conversation turns, detections, events) are never superseded or merged by another record.
"""

from __future__ import annotations

from dataclasses import dataclass
from difflib import SequenceMatcher
import functools
import itertools
import re
from typing import Callable, Sequence

from robotmem_ros.engine import text as textmod

# A span judge: similarity of the two differing spans (e.g. the embedder's cosine), or None.
SpanJudge = Callable[[str, str], float]

MAX_ADDED = 2
SPAN_SIMILARITY_MIN = 0.80

# Words that carry no content of their own; dropping or changing them is wording.
FUNCTION_WORDS = (textmod.JACCARD_STOPWORDS | frozenset("""
up it them its one ones some any there here please just also very really now currently then
from at into onto to of for with about over out off can could should would will shall may might
must let lets let's me us him her their yours mine which who whom what while
today again still already
""".split())) - frozenset({'on', 'in'})

# One meaning, one word (values are canonical; keys are stemmed tokens).
SYNONYMS = {
    **dict.fromkeys('lift grab take grasp get pickup'.split(), 'pick'),
    **dict.fromkeys('put set move drop insert'.split(), 'place'),
    'shut': 'close', 'switch': 'turn', 'rear': 'back',
    **dict.fromkeys('beside near nearby adjacent'.split(), 'next_to'),
    **dict.fromkeys('center centre central'.split(), 'middle'),
    **dict.fromkeys('inside into within'.split(), 'in'),
    **dict.fromkeys('onto atop upon'.split(), 'on'),
    **dict.fromkeys('underneath beneath'.split(), 'under'),
    **dict.fromkeys('layer level tier'.split(), 'layer'),
    'maximum': 'max', 'minimum': 'min', 'never': 'not',
}

# Words of protected classes: a text that says one where the other says another is always
# a different fact (a red cup is not a blue cup; the top drawer is not the middle one).
COLOURS = frozenset("""
red green blue yellow white black grey gray orange purple pink brown cyan magenta silver gold
golden beige violet transparent dark
""".split())
MATERIALS = frozenset("""
wooden wood metal metallic steel iron aluminium aluminum plastic glass ceramic paper cardboard
rubber cotton leather stone porcelain foam fabric
""".split())
SIZES = frozenset('small large big tiny huge tall short long wide narrow thin thick heavy light '
                  'little medium full empty half'.split())
ATTRIBUTES = COLOURS | MATERIALS | SIZES
# Places and spatial relations. 'in' / 'on' are also goal prepositions ("put it on / to / into
# the plate"), so saying one where the other says nothing is wording; swapping them is not.
SPATIAL = frozenset("""
under above below behind front back left right top middle bottom between next_to outside
upper lower side corner edge far close north south east west rear leftmost rightmost
""".split())
GOAL_PREPOSITIONS = frozenset({'in', 'on'})
# 'next' alone is an ordinal ("the next cup", "next week"); "next to" is a relation.
ORDINALS = frozenset('first second third fourth fifth previous next other another both'
                     .split())
# Actions are implied by each other ("move X to Y" is pick and place): a text that names one
# the other leaves implicit says no more; naming another action does.
ACTIONS = frozenset({'pick', 'place', 'open', 'close', 'push', 'pull', 'turn', 'turn_on',
                     'turn_off', 'stack', 'pour', 'wipe', 'press'})
SUBSTITUTION_PROTECTED = ATTRIBUTES | SPATIAL | GOAL_PREPOSITIONS | ORDINALS | ACTIONS
# A switching verb's particle, how far after the verb it may stand (its object between), and
# what may follow it at the end of a clause (the end of the text is '').
PARTICLES = frozenset({'on', 'off'})
_PARTICLE_REACH = 4
CLAUSE_ENDS = frozenset({'', 'and', 'then'})
# "both the X and the Y": articles open both halves; X is this many words at most.
ARTICLES = frozenset({'the', 'a', 'an'})
_CORRELATIVE_REACH = 4
ADDITION_PROTECTED = SPATIAL | ORDINALS

_CLAUSE = re.compile(r'\s*(?:[,;!?。；，]|\.(?=\s|$)|\band\b|\bthen\b)\s*')
ROLE_WORDS = ATTRIBUTES | SPATIAL | GOAL_PREPOSITIONS | ORDINALS
# Prepositions whose landmark (the next word) says where or on what: "on the book".
RELATIONS = GOAL_PREPOSITIONS | frozenset('under above below behind between next_to'.split())
# Prepositions whose object says where a thing comes from or goes, or what it is measured
# against: "from the kitchen to the office", "gave the book to Bob", "heavier than the glass",
# "to the left of the bowl". ``content_words`` drops them, so their objects are compared
# apart (``path_objects``).
PATH_PREPOSITIONS = frozenset('from to into onto toward towards than of with after before'
                              .split())
_PHRASE_ENDS = (FUNCTION_WORDS | RELATIONS | PATH_PREPOSITIONS
                | frozenset('during around near'.split()))
# "the cabinet's top drawer": an owner word, how many words it may own, and the words that
# end what it owns (besides the end of a phrase).
_OWNER = re.compile(r"([^\W\d_][\w-]*)['’]s", re.IGNORECASE)
_OWNED_REACH = 3
_OWNED_ENDS = FUNCTION_WORDS | CLAUSE_ENDS | RELATIONS
_PHRASE_END = re.compile(r'[,;:.!?]+$')

# A ``name:`` prefix is a source (not an attribute) when it is a known source, or a name
# followed by a statement of its own.
SOURCES = frozenset("""
vision camera lidar sonar radar imu sensor sensors gps odometry odom perception detector
detection robot user operator system log logger planner controller agent assistant human
speaker note event alert warning error info debug audio microphone mic tactile force_sensor
obstacle 视觉 相机 摄像头 激光雷达 雷达 传感器 机器人 用户 系统 日志
""".split())
# ``name: statement``; a full-width colon needs no space after it (Chinese writes none).
_PREFIX = re.compile(r'^\s*([^\W\d][\w .\'-]{0,39}?)\s*(?::\s+|：\s*)(?=\S)')
_STATEMENT_MIN_WORDS = 3
_PRONOUNS = frozenset('i we you he she they it my our your his her their me us'.split())

# Verbs that make a text a record of something that happened or was sensed, as stems (the
# tokens are stemmed: "detected" is "detect").
EVENT_WORDS = frozenset('detect saw seen heard went came said told met'.split())
# Past tenses that tell an event where they are the verb, matched as written: their stems are
# also an instruction's verbs ("stop at the door", "drop the cup"). Before a noun they describe
# it ("a failed grasp needs 8N", "the released version", "stopped robots must wait"): no event.
EVENT_PAST = frozenset("""
observed spotted noticed happened occurred asked visited dropped bumped collided arrived
reached stopped started finished completed failed exceeded triggered pressed released
""".split())
_EVENT_PAST_ANYWHERE = re.compile(r'\b(?:' + '|'.join(sorted(EVENT_PAST)) + r')\b')
_DETERMINERS = frozenset('a an the this that these those every each any no some its their our '
                         'my your his her'.split())
_WORDS = re.compile(r'[^\W\d_]+')


@dataclass(frozen=True)
class Features:
    """What the guards compare about one fact, derived once per text."""

    text: str
    content: tuple[str, ...]
    bag: frozenset[str]
    numbers: frozenset[float]
    number_order: tuple[float, ...]
    measures: frozenset[str]
    jaccard: frozenset[str]
    negated: bool
    tokens: frozenset[str]
    clauses: tuple[tuple[str, ...], ...]
    source: str
    record: bool
    statement: str  # the text without its source prefix


def _canonical(token: str) -> str:
    if token.endswith('ie') and len(token) > 4:  # 'cookies' stems to 'cooky'
        token = token[:-2] + 'y'
    return SYNONYMS.get(token, token)


def content_words(text: str) -> tuple[str, ...]:
    """
    Canonical content words of ``text`` in order (numbers are compared apart).

    Phrases of one meaning are read as one word or in one order: ``next to`` is a relation,
    ``the cabinet's top drawer`` is ``the top drawer of the cabinet``, a switching verb
    and its particle are one action wherever the particle stands (``turn on the stove`` /
    ``turn the stove on``); the ``top`` of ``on (the) top of X`` or ``on the X top`` and the
    ``both`` of ``both the X and the Y`` say nothing the phrase without them does not.
    """
    tokens = list(textmod.tokenize(_of_genitive(text)))
    _join_particles(tokens)
    out = []
    for i, token in enumerate(tokens):
        if not token or token in FUNCTION_WORDS or token[0].isdigit() or _idle(tokens, i):
            continue
        if token == 'next' and _at(tokens, i + 1) == 'to':
            token = 'next_to'
        out.append(_canonical(token))
    return tuple(out)


def _of_genitive(text: str) -> str:
    """
    Write each ``X's Y`` of ``text`` as ``Y of X``: one order for the owner and what it owns.

    Without it the owner stands before the place words in one text and after them in the
    other, and the guard reads "in the cabinet's bottom drawer" / "in the bottom drawer of the
    cabinet" as other roles. The owned words run to a function word, the end of a phrase or
    ``_OWNED_REACH`` words; ``it's``, ``that's`` and ``let's`` own nothing. A chain ("Caroline's
    dog's name") is rewritten one owner at a time.
    """
    words = text.split()
    i = 0
    while i < len(words):
        owner = _OWNER.fullmatch(words[i])
        name = owner.group(1) if owner else ''
        owned = 0
        if name and name.casefold() not in _OWNED_ENDS and name.casefold() not in _PRONOUNS:
            for follower in words[i + 1:i + 1 + _OWNED_REACH]:
                bare = _PHRASE_END.sub('', follower)
                if not bare or bare.casefold() in _OWNED_ENDS:
                    break
                owned += 1
                if bare != follower:
                    break
        if not owned:
            i += 1
            continue
        last = words[i + owned]
        tail = _PHRASE_END.search(last)
        end = tail.group() if tail else ''
        # the first owned word may own in its turn: it is read next, at the same i
        words[i:i + 1 + owned] = [*words[i + 1:i + owned], last[:len(last) - len(end)], 'of',
                                  name + end]
    return ' '.join(words)


def _at(tokens: list[str], i: int) -> str:
    return tokens[i] if 0 <= i < len(tokens) else ''


def _join_particles(tokens: list[str]) -> None:
    """
    Fold a switching verb's ``on`` / ``off`` into the verb, in place (the particle becomes '').

    The particle follows the verb (``switch on the light``) or ends its clause after the
    object (``switch the light on``, ``... on and ...``); in ``turn the cup on the tray`` the
    ``on`` names a place and stays.
    """
    for i, token in enumerate(tokens):
        if token not in PARTICLES:
            continue
        verb = next((j for j in range(i - 1, max(i - 1 - _PARTICLE_REACH, -1), -1)
                     if _canonical(tokens[j]) == 'turn'), None)
        if verb is not None and (verb == i - 1 or _at(tokens, i + 1) in CLAUSE_ENDS):
            tokens[verb], tokens[i] = f'turn_{token}', ''


def _idle(tokens: list[str], i: int) -> bool:
    """Is ``tokens[i]`` the ``top`` of 'on (the) top of' / 'on (the) X top' or 'both ... and'."""
    token = tokens[i]
    if token == 'top':
        if _at(tokens, i + 1) == 'of':  # "on (the) top of the cabinet"
            return _on_landmark(tokens, i)
        # "on (the) cabinet top", where the phrase ends as an owner's would: the top drawer
        # keeps its top, and so does the left top
        owner = _at(tokens, i - 1)
        return (_at(tokens, i + 1) in _OWNED_ENDS and owner not in _OWNED_ENDS
                and owner not in ROLE_WORDS and _on_landmark(tokens, i - 1))
    if token != 'both' or _at(tokens, i + 1) not in ARTICLES:
        return False
    # "both the X and the Y": a pair of things, not a quantity ("both cups" stays)
    span = tokens[i + 2:i + 3 + _CORRELATIVE_REACH]
    return 'and' in span and _at(tokens, i + 3 + span.index('and')) in ARTICLES


def _on_landmark(tokens: list[str], i: int) -> bool:
    """Tell whether ``tokens[i]`` follows ``on`` or ``on the`` (its landmark, if a noun)."""
    before = (_at(tokens, i - 2), _at(tokens, i - 1))
    return before[1] == 'on' or before == ('on', 'the')


def split_source(text: str) -> tuple[str, str]:
    """
    Return (source, statement): ``vision: red cup detected`` → ('vision', 'red cup detected').

    A prefix is a source when it is a known source word (``vision``, ``lidar``, ``robot``) or a
    name, written with a capital, followed by a statement of its own (``Caroline: I went to the
    park``, ``Gina: Wow!``: three words or more, a pronoun, an exclamation or question, or no
    word at all) rather than a short value. ``grip_force: 12 N`` or ``gripper status: closed``
    keep their prefix: it is the attribute the fact states.
    """
    match = _PREFIX.match(text)
    if not match:
        return '', text
    name, rest = match.group(1).strip(), text[match.end():]
    words = [re.sub(r"'(?:s|m|re|ll|ve|d)$", '', w.strip('.,!?;:()"').casefold())
             for w in rest.split()]
    statement = (len(words) >= _STATEMENT_MIN_WORDS or rest.rstrip().endswith(('!', '?'))
                 or any(w in _PRONOUNS for w in words)
                 or not any(w.isalpha() for w in words))
    key = name.casefold()
    if key in SOURCES or (' ' not in key and key.split('_')[0] in SOURCES and statement):
        return name, rest
    speaker = all(w[:1].isupper() for w in name.split()) and len(name.split()) <= 3
    return (name, rest) if speaker and statement else ('', text)


# Consolidation reads each session fact's features in three passes and then per similar pair:
# a session that fits is derived once (end_session of 5 000 facts took the same time with
# 4 096 entries as with 16 384, twice as long with 2 048). An entry holds 8 KB on LoCoMo
# turns, 27 KB on Cranfield abstracts (docs/performance.md).
@functools.lru_cache(maxsize=4096)
def features(text: str) -> Features:
    """Derive the features of one fact (cached: consolidation compares each fact many times)."""
    source, statement = split_source(text)
    tokens = textmod.tokenize(statement)
    parts = _CLAUSE.split(statement.casefold())
    clauses = tuple(c for c in (content_words(part) for part in parts) if c)
    content = content_words(statement)
    folded = statement.casefold()
    record = (bool(source) or any(t in EVENT_WORDS for t in textmod.tokenize(text.casefold()))
              or (_EVENT_PAST_ANYWHERE.search(folded) is not None
                  and _tells_an_event(_WORDS.findall(folded))))
    measures = frozenset(t for t in tokens if t[0].isdigit() and not t[-1].isdigit())
    order = textmod.numbers_in_order(text)
    return Features(text, content, frozenset(content), frozenset(order), order, measures,
                    textmod.jaccard_tokens(text), textmod.is_negated(tokens),
                    frozenset(tokens), clauses, source, record, statement)


def _tells_an_event(words: Sequence[str]) -> bool:
    """Return True when a word of ``EVENT_PAST`` stands as the verb of ``words``."""
    for i, word in enumerate(words):
        if word not in EVENT_PAST:
            continue
        describes = (i > 0 and words[i - 1] in _DETERMINERS) or (
            i == 0 and i + 1 < len(words) and words[i + 1] not in FUNCTION_WORDS)
        if not describes:
            return True
    return False


def conflict(a: Features, b: Features) -> str:
    """Name a number, negation or opposite-word conflict between two facts; '' when none."""
    if a.numbers != b.numbers:
        return 'different numbers'
    if a.number_order != b.number_order:  # "worker 2 call 0" / "worker 0 call 2"
        return 'numbers in other roles'
    if a.negated != b.negated:
        return 'one negates the other'
    if textmod.opposite_swap(a.tokens - b.tokens, b.tokens - a.tokens):
        return 'an opposite word'
    return ''


def difference(a: str | Features, b: str | Features,
               span_judge: SpanJudge | None = None) -> str:
    """
    Say why ``a`` and ``b`` are different facts; '' when what differs is only wording.

    ``span_judge`` (optional) scores two differing spans of ordinary words; a substitution of
    non-protected words whose spans score at least ``SPAN_SIMILARITY_MIN`` counts as wording.
    """
    fa = a if isinstance(a, Features) else features(a)
    fb = b if isinstance(b, Features) else features(b)
    if fa.source.casefold() != fb.source.casefold():
        return f'different sources ({fa.source or "none"} / {fb.source or "none"})'
    why = conflict(fa, fb)
    if why:
        return why
    only_a, only_b = fa.bag - fb.bag, fb.bag - fa.bag
    if not (only_a & ACTIONS and only_b & ACTIONS):  # one action implied by the other
        replaced = _verb_replaced(fa, fb, only_a, only_b) or _verb_replaced(fb, fa, only_b, only_a)
        if replaced:
            return f'differs in the action ({replaced})'
        only_a, only_b = only_a - ACTIONS, only_b - ACTIONS
    if only_a and only_b:  # a compound needs words on both sides
        only_a, only_b = _without_compounds(fa.content, only_a, only_b)
        only_b, only_a = _without_compounds(fb.content, only_b, only_a)
    if only_a and only_b:
        why = _substitution(only_a, only_b, span_judge)
    else:
        why = _addition(fa, fb, only_a) if only_a else _addition(fb, fa, only_b)
    if why:
        return why
    if not _same_roles(fa, fb):
        return 'same words in other roles'
    return ''


def _verb_replaced(fa: Features, fb: Features, only_a: frozenset[str],
                   only_b: frozenset[str]) -> str:
    """
    Name an action only ``fa`` has that opens a clause ``fb`` opens with a word of its own.

    That word stands where the verb stands: another verb (``pick the cup`` / ``wash the cup``),
    not a modifier of the object, and not an action ``fb`` leaves implicit.
    """
    for clause_a, clause_b in zip(fa.clauses, fb.clauses):
        if clause_a[0] in only_a & ACTIONS and clause_b[0] in only_b:
            return f'{clause_a[0]} / {clause_b[0]}'
    return ''


def _without_compounds(words: tuple[str, ...], only: frozenset[str], other: frozenset[str]
                       ) -> tuple[frozenset[str], frozenset[str]]:
    """
    Drop a compound that ``words`` writes as two words and the other text as one.

    "the tool box" / "the toolbox", "key-board" / "keyboard": both words of the pair are only
    in ``words``' text and their concatenation only in the other's. Any other split (a word
    shared, a different compound) is left for the guards to judge.
    """
    for first, second in zip(words, words[1:]):
        joined = first + second
        if first in only and second in only and first != second and joined in other:
            only, other = only - {first, second}, other - {joined}
    return only, other


def _substitution(only_a: frozenset[str], only_b: frozenset[str],
                  span_judge: SpanJudge | None) -> str:
    """Words replaced by others: content, unless ordinary words a span judge equates."""
    span_a, span_b = ' '.join(sorted(only_a)), ' '.join(sorted(only_b))
    protected = (only_a | only_b) & SUBSTITUTION_PROTECTED
    if protected:
        return f'differs in {span_a} / {span_b}'
    if span_judge is None or span_judge(span_a, span_b) < SPAN_SIMILARITY_MIN:
        return f'differs in {span_a} / {span_b}'
    return ''


def _addition(longer: Features, shorter: Features, added: frozenset[str]) -> str:
    """
    Words only ``longer`` has (``added``): wording when each is an attribute-like modifier.

    A modifier sits before a word both texts share, inside one clause ("the akita black bowl"
    / "the bowl"); a place, an ordinal, or a word that ends its clause ("pick the cup and the
    book") is content.
    """
    if not added:
        return ''
    if added & ADDITION_PROTECTED:
        return 'adds ' + ', '.join(sorted(added & ADDITION_PROTECTED))
    if len(added) > MAX_ADDED:
        return 'adds ' + ', '.join(sorted(added))
    for clause in longer.clauses:
        modifies = False  # walking right to left: does the next word make this a modifier?
        for token in reversed(clause):
            if token in added and not modifies:
                return f'adds {token}'
            modifies = token in added or (token in shorter.bag and token not in ACTIONS)
    return ''


def protected_difference(a: Features, b: Features) -> str:
    """Name protected words (attribute, place, ordinal) that only one of the texts has."""
    only = (a.bag ^ b.bag) & (ATTRIBUTES | SPATIAL | ORDINALS)
    return ', '.join(sorted(only))


def narrowed_within(short: Sequence[str], long: Sequence[str]) -> list[str]:
    """
    Return the place and ordinal words ``long`` sets among ``short``'s words.

    Set before the end of ``short`` ("the middle black bowl", "the right moka pot", "put the
    bowl at the back on the plate") they pick another thing than ``short`` names; after its
    end they add detail to it ("pick up the cup from the left shelf"). An added attribute is
    a modifier, as ``difference`` reads it ("the akita black bowl" / "the bowl").
    """
    ops = SequenceMatcher(None, short, long, autojunk=False).get_opcodes()
    return [token for tag, i1, _, j1, j2 in ops if tag == 'insert' and i1 < len(short)
            for token in long[j1:j2] if SYNONYMS.get(token, token) in ADDITION_PROTECTED]


def restates(old: str, new: str) -> bool:
    """
    Return True when ``new`` says nothing ``old`` does not: hiding ``new`` loses nothing.

    Every content word of ``new`` is in ``old``, each clause of ``new`` within one clause of
    ``old``, nothing conflicts, the source is the same and the shared words keep their roles.
    "pick up the cup" restates "pick up the cup from the left shelf"; the swapped-mugs
    instruction restates nothing, nor does "close the top drawer" restate "close the bottom
    drawer and open the top drawer", whose words it takes from two clauses, nor "put the bowl
    on the plate" restate "put the bowl at the back on the plate" (``narrowed_within``).
    """
    fo, fn = features(old), features(new)
    return (fo.source.casefold() == fn.source.casefold() and fn.numbers <= fo.numbers
            and fo.negated == fn.negated and fn.bag <= fo.bag
            and all(any(set(part) <= set(whole) for whole in fo.clauses)
                    for part in fn.clauses)
            and not narrowed_within(fn.content, fo.content)
            and not textmod.opposite_swap(fo.tokens - fn.tokens, fn.tokens - fo.tokens)
            and _same_roles(fo, fn))


def _same_roles(a: Features, b: Features) -> bool:
    """
    Shared attribute and place words in the same order, each relation on the same landmark.

    Swapping the mugs of "put the white mug on the left plate and the yellow mug on the right
    plate" keeps every word but reorders white / left / yellow / right; "the cup is on the
    book" and "the book is on the cup" put 'on' before another word. A preposition both texts
    use takes the same shared words in both ("from the kitchen to the office" / "from the
    office to the kitchen" does not). Other reorderings ("under full load the battery lasts 4
    hours") keep both and are wording.
    """
    shared = a.bag & b.bag
    return (_roles(a.content, shared) == _roles(b.content, shared)
            and not _paths_swapped(path_objects(a.statement), path_objects(b.statement),
                                   shared))


def _paths_swapped(a: tuple[tuple[str, str], ...], b: tuple[tuple[str, str], ...],
                   shared: frozenset[str]) -> bool:
    """
    Tell whether a preposition both texts use takes other shared words in each.

    Only disjoint sets count: a phrase one text adds ("sitting at a table of the restaurant")
    gives a preposition one more word, not another one.
    """
    for preposition in {p for p, _ in a} & {p for p, _ in b}:
        words_a = {w for p, w in a if p == preposition and w in shared}
        words_b = {w for p, w in b if p == preposition and w in shared}
        if words_a and words_b and not words_a & words_b:
            return True
    return False


@functools.lru_cache(maxsize=4096)
def path_objects(statement: str) -> tuple[tuple[str, str], ...]:
    """
    Return (preposition, the head of what it takes) for each ``PATH_PREPOSITIONS`` word.

    The head is the last content word of the phrase ("with a blue tennis ball": ``ball``),
    read on the tokens ``content_words`` reads (``X's Y`` as ``Y of X``); ``to`` of ``next
    to`` is a relation's, and a number is no object ("with 5N"). Derived only for the pairs
    that reach the role test, not with every text's features: consolidation derives a
    session's features in bulk (1 000 facts took 20-30 % longer with it there).
    """
    out = []
    for part in _CLAUSE.split(_of_genitive(statement)):  # a phrase ends with its clause
        tokens = textmod.tokenize(part)
        for i, token in enumerate(tokens):
            if token not in PATH_PREPOSITIONS or (token == 'to' and i and tokens[i - 1] == 'next'):
                continue
            phrase = list(itertools.takewhile(
                lambda t: t not in _PHRASE_ENDS,
                itertools.dropwhile(lambda t: t in FUNCTION_WORDS, tokens[i + 1:])))
            if phrase and not phrase[-1][0].isdigit():
                out.append((token, _canonical(phrase[-1])))
    return tuple(out)


def _roles(words: tuple[str, ...], shared: frozenset[str]) -> tuple[tuple[str, ...], list]:
    order = tuple(t for t in words if t in shared and t in ROLE_WORDS)
    landmarks = sorted((t, nxt) for t, nxt in zip(words, words[1:])
                       if t in RELATIONS and t in shared and nxt in shared)
    return order, landmarks


def same_fact(a: str | Features, b: str | Features,
              span_judge: SpanJudge | None = None) -> bool:
    """Return True when nothing that differs between the texts carries content."""
    return not difference(a, b, span_judge)


def is_record(text: str) -> bool:
    """Return True for records — source-prefixed lines, detections, events, turns."""
    return features(text).record
