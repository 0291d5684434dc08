"""
Accuracy of the rule decider on hand-written (old fact, new fact) pairs.

Each pair in ``bench/data/decision_pairs.tsv`` (the development set: the rules were written
against it) and ``decision_pairs_heldout.tsv`` (written after the rules were frozen, never
tuned on) has a known relation; the expected outcome is
same → SKIP, refines → MERGE into the old fact, contradicts → DELETE the old fact and CREATE,
unrelated → CREATE. The pairs are run twice: in their own (knowledge) category, where those
expectations hold, and as events, where history rules apply (only SKIP or CREATE, never a
rewrite of a record).

Two sets nobody here tuned the pairs of: ``decision_update_kinds.tsv`` — one correct update per
kind (a number, a state, a location, a negation, a key: value, a value with a reason, a pose, a
named setting), each must supersede; and every pair of consecutive turns of one speaker in the
LoCoMo conversations (``--eval``), stored as users store them (``Speaker: text``), each must be
kept (no SKIP, MERGE or DELETE). Prints tables and writes bench/results/decision_accuracy.json.

Run: ``python bench/decision_accuracy.py [--eval ../shared/eval] [--show-errors]``
"""

from __future__ import annotations

import argparse
import collections
import csv
import json
import pathlib
import sys
import time

from robotmem_ros.engine import text as textmod
from robotmem_ros.engine.decision import Candidate, Existing, RuleDecider

ROOT = pathlib.Path(__file__).resolve().parent
PAIRS = ROOT / 'data' / 'decision_pairs.tsv'
HELDOUT = ROOT / 'data' / 'decision_pairs_heldout.tsv'
UPDATE_KINDS = ROOT / 'data' / 'decision_update_kinds.tsv'
DEFAULT_EVAL = ROOT.parent.parent / 'shared' / 'eval'
RESULT = ROOT / 'results' / 'decision_accuracy.json'
RELATIONS = ('same', 'refines', 'contradicts', 'unrelated')
EXPECTED = {'same': 'SKIP', 'refines': 'MERGE', 'contradicts': 'DELETE+CREATE',
            'unrelated': 'CREATE'}
EXPECTED_HISTORY = {'same': 'SKIP', 'refines': 'CREATE', 'contradicts': 'CREATE',
                    'unrelated': 'CREATE'}
OLD_ID, OLD_TIME, NEW_TIME = 1, 1_000.0, 2_000.0


def load_pairs(path: pathlib.Path) -> list[tuple[str, str, str, str]]:
    """Return (relation, category, old, new) rows, skipping '#' comments."""
    with path.open(encoding='utf-8') as f:
        rows = [r for r in csv.reader(f, delimiter='\t') if r and not r[0].startswith('#')]
    return [(r[0], r[1], r[2], r[3]) for r in rows]


def load_update_kinds(path: pathlib.Path) -> list[tuple[str, str, str]]:
    """Return (kind, old, new) rows."""
    with path.open(encoding='utf-8') as f:
        return [(r[0], r[1], r[2]) for r in csv.reader(f, delimiter='\t')
                if r and not r[0].startswith('#')]


def locomo_pairs(eval_dir: pathlib.Path) -> list[tuple[str, str]]:
    """(older turn, newer turn) of each speaker, consecutive within a conversation session."""
    path = eval_dir / 'locomo' / 'turns.jsonl'
    if not path.exists():
        return []
    last: dict[tuple[str, str, str], str] = {}
    pairs = []
    with path.open(encoding='utf-8') as f:
        for line in f:
            row = json.loads(line)
            key = (row['sample_id'], str(row['session']), row['speaker'])
            text = f'{row["speaker"]}: {row["text"]}'
            if key in last:
                pairs.append((last[key], text))
            last[key] = text
    return pairs


def kept_or_superseded(pairs, category: str) -> tuple[collections.Counter, list[dict]]:
    """Outcome labels of (old, new) pairs in ``category``, and the pairs themselves."""
    decider = RuleDecider()
    counts: collections.Counter = collections.Counter()
    decided = []
    for old, new in pairs:
        outcome = decider.decide(Candidate(new, category, {}, NEW_TIME),
                                 [Existing(OLD_ID, old, category, {}, OLD_TIME, 0.9)])
        got = label(outcome)
        counts[got] += 1
        decided.append({'old': old, 'new': new, 'got': got, 'reason': outcome.reason})
    return counts, decided


def label(outcome) -> str:
    """Collapse an outcome into the vocabulary of EXPECTED."""
    kinds = sorted({a.kind for a in outcome.actions if a.target_id == OLD_ID})
    if outcome.decision == 'CREATE' and kinds == ['DELETE']:
        return 'DELETE+CREATE'
    if outcome.decision == 'NONE' and kinds == ['MERGE']:
        return 'MERGE'
    return outcome.decision if not kinds else f'{outcome.decision}+{"+".join(kinds)}'


def run(pairs, category_override: str | None, expected: dict[str, str]):
    """Decide every pair; return per-relation counts, errors and seconds per decision."""
    decider = RuleDecider()
    hits: dict[str, int] = collections.Counter()
    totals: dict[str, int] = collections.Counter()
    confusion: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    errors = []
    start = time.perf_counter()
    for relation, category, old, new in pairs:
        category = category_override or category
        outcome = decider.decide(Candidate(new, category, {}, NEW_TIME),
                                 [Existing(OLD_ID, old, category, {}, OLD_TIME, 0.9)])
        got = label(outcome)
        totals[relation] += 1
        confusion[relation][got] += 1
        if got == expected[relation]:
            hits[relation] += 1
        else:
            errors.append({'relation': relation, 'old': old, 'new': new, 'got': got,
                           'reason': outcome.reason, 'notes': list(outcome.notes)})
    seconds = (time.perf_counter() - start) / max(1, len(pairs))
    return hits, totals, confusion, errors, seconds


def table(title: str, hits, totals, confusion, expected) -> list[str]:
    """Format one accuracy table."""
    lines = [title, f'{"relation":<12} {"expected":<14} {"n":>3} {"correct":>7} '
             f'{"accuracy":>8}  outcomes']
    for rel in RELATIONS:
        acc = hits[rel] / totals[rel] if totals[rel] else 0.0
        seen = ', '.join(f'{k} {v}' for k, v in confusion[rel].most_common())
        lines.append(f'{rel:<12} {expected[rel]:<14} {totals[rel]:>3} {hits[rel]:>7} '
                     f'{acc:>8.3f}  {seen}')
    n, ok = sum(totals.values()), sum(hits.values())
    lines.append(f'{"all":<12} {"":<14} {n:>3} {ok:>7} {ok / max(1, n):>8.3f}')
    return lines


def summary(hits, totals, confusion, seconds) -> dict:
    """JSON-ready numbers of one run."""
    return {
        'per_relation': {rel: {'n': totals[rel], 'correct': hits[rel],
                               'accuracy': round(hits[rel] / max(1, totals[rel]), 4),
                               'outcomes': dict(confusion[rel])} for rel in RELATIONS},
        'overall_accuracy': round(sum(hits.values()) / max(1, sum(totals.values())), 4),
        'microseconds_per_decision': round(seconds * 1e6, 1),
    }


def main(argv: list[str] | None = None) -> int:
    """Run both category settings, print the tables, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--pairs', type=pathlib.Path, default=PAIRS)
    parser.add_argument('--heldout', type=pathlib.Path, default=HELDOUT)
    parser.add_argument('--out', type=pathlib.Path, default=RESULT)
    parser.add_argument('--updates', type=pathlib.Path, default=UPDATE_KINDS)
    parser.add_argument('--eval', type=pathlib.Path, default=DEFAULT_EVAL)
    parser.add_argument('--show-errors', action='store_true')
    args = parser.parse_args(argv)
    textmod.tokenize('预热')  # load the segmenter's dictionary outside the timed runs
    pairs = load_pairs(args.pairs)
    heldout_pairs = load_pairs(args.heldout)
    knowledge = run(pairs, None, EXPECTED)
    history = run(pairs, 'event', EXPECTED_HISTORY)
    heldout = run(heldout_pairs, None, EXPECTED)
    print('\n'.join(table('rule decider, development pairs in their own category (knowledge)',
                          *knowledge[:3], EXPECTED)))
    print()
    print('\n'.join(table('rule decider, development pairs as category "event" (history)',
                          *history[:3], EXPECTED_HISTORY)))
    print()
    print('\n'.join(table('rule decider, held-out pairs (knowledge)', *heldout[:3], EXPECTED)))
    kinds = load_update_kinds(args.updates)
    update_counts, updates = kept_or_superseded([(o, n) for _, o, n in kinds], 'observation')
    for (kind, _, _), decided in zip(kinds, updates):
        decided['kind'] = kind
    superseded = sum(d['got'] == 'DELETE+CREATE' for d in updates)
    print(f'\ncorrect updates superseded: {superseded} of {len(kinds)} kinds')
    for d in updates:
        print(f'  {d["kind"]:<28} {d["got"]:<14} {d["reason"]}')
    turns = locomo_pairs(args.eval)
    turn_counts, turn_decided = kept_or_superseded(turns, 'observation')
    kept = turn_counts['CREATE']
    print(f'LoCoMo consecutive same-speaker turns (Speaker: text): {kept} of {len(turns)} kept; '
          f'outcomes {dict(turn_counts)}')
    print(f'\n{knowledge[4] * 1e6:.1f} us per decision')
    if args.show_errors:
        for e in knowledge[3] + heldout[3]:
            print(f'[{e["relation"]} -> {e["got"]}] {e["old"]!r} / {e["new"]!r}: {e["reason"]}')
    result = {
        'decider': 'rules',
        'pairs_file': str(args.pairs.relative_to(ROOT.parent)),
        'pairs': len(pairs),
        'expected': EXPECTED,
        'knowledge': summary(*knowledge[:3], knowledge[4]),
        'history': summary(*history[:3], history[4]),
        'heldout_file': str(args.heldout.relative_to(ROOT.parent)),
        'heldout_pairs': len(heldout_pairs),
        'heldout': summary(*heldout[:3], heldout[4]),
        'update_kinds_file': str(args.updates.relative_to(ROOT.parent)),
        'update_kinds': {'n': len(kinds), 'superseded': superseded, 'outcomes': updates},
        'locomo_turn_pairs': {'n': len(turns), 'kept': kept, 'outcomes': dict(turn_counts),
                              'not_kept': [d for d in turn_decided if d['got'] != 'CREATE']},
        'knowledge_errors': knowledge[3],
        'heldout_errors': heldout[3],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + '\n',
                        encoding='utf-8')
    print(f'wrote {args.out}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
