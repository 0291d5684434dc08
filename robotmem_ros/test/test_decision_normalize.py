"""The normalization and category rules of docs/decisions.md, one test per rule."""

import pytest

from robotmem_ros.config import MemoryConfig
from robotmem_ros.engine.categories import category_class, HISTORY, KNOWLEDGE, PROFILE
from robotmem_ros.engine.decision import (Action, Candidate, CREATE, Decider, DELETE, Existing,
                                          make_decider, MERGE, NONE, Proposal, RuleDecider, SKIP)
from robotmem_ros.engine.decision.normalize import normalize
from robotmem_ros.errors import ConfigError

# The candidate updates both peers (same attribute, new value), so the guard rails let every
# MERGE / DELETE through and these tests see the normalization rules alone.
CAND = Candidate('grip force for ceramic cups is 14N', 'observation', {}, 2000.0)
PEERS = [
    Existing(1, 'grip force for ceramic cups is 12.5N', 'observation', {}, 1000.0, 0.9),
    Existing(2, 'grip force for ceramic cups is 13N', 'observation', {}, 1000.0, 0.7),
]
REPEAT = Candidate('grip force for ceramic cups is 12.5N', 'observation', {}, 2000.0)


def run(decision, *actions, candidate=CAND, peers=PEERS):
    return normalize(Proposal(decision, tuple(actions), 'test'), candidate, peers, 'test')


def merge(target, text='merged text'):
    return Action(MERGE, target, text)


def delete(target):
    return Action(DELETE, target)


def test_skip_carries_no_actions():
    out = run('skip', delete(2), candidate=REPEAT)
    assert out.decision == SKIP and out.actions == ()
    assert any('SKIP carries no actions' in n for n in out.notes)


def test_any_merge_forces_none():
    out = run('create', merge(1))
    assert out.decision == NONE
    assert [(a.kind, a.target_id) for a in out.actions] == [(MERGE, 1)]


def test_create_carries_only_delete_actions():
    out = run('create', delete(1), Action('RENAME', 2))
    assert out.decision == CREATE
    assert [(a.kind, a.target_id) for a in out.actions] == [(DELETE, 1)]


def test_conflicting_actions_on_one_memory_drop_both(caplog):
    out = run('none', merge(1), delete(1), delete(2))
    assert [(a.kind, a.target_id) for a in out.actions] == [(DELETE, 2)]
    assert 'conflicting actions' in caplog.text
    assert any('conflicting' in n for n in out.notes)


def test_conflict_that_empties_none_keeps_the_candidate():
    out = run('none', merge(1), delete(1))
    assert out.decision == CREATE and out.actions == ()


def test_repeated_identical_action_is_kept_once():
    out = run('create', delete(1), delete(1))
    assert [(a.kind, a.target_id) for a in out.actions] == [(DELETE, 1)]


@pytest.mark.parametrize('raw', ['maybe', '', 'CREATE ', 'Create'])
def test_unknown_decision_becomes_create(raw):
    out = run(raw)
    assert out.decision == CREATE


def test_legacy_merge_decision_merges_into_top_match():
    out = run('merge')
    assert out.decision == NONE
    assert [(a.kind, a.target_id) for a in out.actions] == [(MERGE, 1)]
    assert out.actions[0].merged_text == CAND.text


def test_actions_on_unknown_memories_are_dropped():
    out = run('create', delete(99))
    assert out.decision == CREATE and out.actions == ()
    assert any('unknown memory #99' in n for n in out.notes)


def test_category_isolation_drops_actions_on_other_categories():
    peers = PEERS + [Existing(3, 'grip force for ceramic cups is 9N', 'constraint', {}, 0.0)]
    out = run('create', delete(3), peers=peers)
    assert out.actions == ()


def test_history_category_turns_merge_into_skip():
    # Worded without an event verb ("failed" makes a text a record, which no MERGE rewrites
    # whatever its category): the category alone turns the merge into a SKIP here.
    cand = Candidate('grasp of cup_3 slipped at 14:02 because the pad was wet', 'event', {}, 2.0)
    peers = [Existing(7, 'grasp of cup_3 slipped at 14:02', 'event', {}, 1.0, 0.9)]
    out = run('none', merge(7), candidate=cand, peers=peers)
    # MERGE -> SKIP, and the guard keeps the candidate: #7 does not already say why it slipped.
    assert out.decision == CREATE and out.actions == ()
    assert any('MERGE -> SKIP' in n for n in out.notes)
    assert any('SKIP refused' in n for n in out.notes)


def test_merge_without_text_gets_merged_text_and_audit_before():
    out = run('none', Action(MERGE, 1))
    action = out.actions[0]
    assert action.before == PEERS[0].text
    assert action.merged_text == CAND.text


def test_merge_that_adds_nothing_is_dropped_and_candidate_kept():
    out = run('none', Action(MERGE, 1), candidate=REPEAT)
    assert out.decision == CREATE and out.actions == ()


def test_outcome_records_decider_reason_and_texts():
    out = run('create', delete(1))
    data = out.to_dict()
    assert data['decider'] == 'test' and data['reason'] == 'test'
    assert data['candidate_text'] == CAND.text
    assert data['actions'][0]['before'] == PEERS[0].text


@pytest.mark.parametrize('category,expected', [
    ('profile', PROFILE),
    ('preference', KNOWLEDGE), ('entity', KNOWLEDGE), ('procedure', KNOWLEDGE),
    ('observation', KNOWLEDGE), ('constraint', KNOWLEDGE), ('decision', KNOWLEDGE),
    ('gotcha', KNOWLEDGE), ('calibration', KNOWLEDGE),
    ('event', HISTORY), ('episode', HISTORY), ('postmortem', HISTORY),
    ('visual', HISTORY), ('tactile', HISTORY), (' Event ', HISTORY),
])
def test_category_classes(category, expected):
    assert category_class(category) == expected


class Exploding(Decider):
    name = 'exploding'

    def propose(self, candidate, peers):
        raise RuntimeError('boom')


def test_fail_safe_exception_becomes_create():
    out = Exploding().decide(CAND, PEERS)
    assert out.decision == CREATE and out.actions == ()
    assert out.decider == 'exploding' and 'boom' in out.reason


def test_fail_safe_covers_bad_input():
    out = RuleDecider().decide(CAND, [None])
    assert out.decision == CREATE and 'decider failed' in out.reason


def test_no_peer_in_the_category_creates_without_asking():
    out = Exploding().decide(CAND, [Existing(1, 'x', 'event', {}, 0.0, 0.9)])
    assert out.decision == CREATE and out.reason == 'no similar memory in this category'


def test_profile_always_merges_into_the_closest_profile_memory():
    peers = [Existing(4, 'I am a UR5e arm; payload: 5 kg; reach: 850 mm', 'profile', {}, 1.0,
                      0.8),
             Existing(5, 'I work in cell 2', 'profile', {}, 1.0, 0.5)]
    cand = Candidate('payload: 3 kg', 'profile', {}, 2.0)
    out = Exploding().decide(cand, peers)
    assert out.decision == NONE
    assert [(a.kind, a.target_id) for a in out.actions] == [(MERGE, 4)]
    assert out.actions[0].merged_text == 'I am a UR5e arm; payload: 3 kg; reach: 850 mm'
    same = Exploding().decide(Candidate('reach: 850 mm', 'profile', {}, 2.0), peers)
    assert same.decision == SKIP


def test_make_decider_follows_config():
    assert make_decider(MemoryConfig(decider='none')) is None
    assert isinstance(make_decider(MemoryConfig()), RuleDecider)
    llm = make_decider(MemoryConfig(decider='llm', llm_url='http://127.0.0.1:9/v1',
                                    llm_model='m', llm_timeout=0.5))
    assert llm.url == 'http://127.0.0.1:9/v1/chat/completions' and llm.timeout == 0.5
    with pytest.raises(ConfigError):
        make_decider(MemoryConfig(decider='llm'))
