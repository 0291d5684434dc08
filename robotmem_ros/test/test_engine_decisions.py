"""The decision layer inside learn: supersede, merge, skip, history, belief at time T."""

from engine_helpers import FakeClock, make_engine
import pytest
from robotmem_ros.engine.decision import LLMDecider
from robotmem_ros.engine.decision.types import Action, CREATE, DELETE, MERGE, NONE, Proposal


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def engine(tmp_path, clock):
    eng = make_engine(tmp_path, clock=clock)
    yield eng
    eng.close()


def _row(engine, memory_id):
    return engine.db.reader().execute('SELECT * FROM memories WHERE id = ?',
                                      (memory_id,)).fetchone()


def test_contradiction_supersedes_and_keeps_history(engine, clock):
    old = engine.learn('grip force for ceramic cups is 12.5N').memory_id
    clock.advance_days(1)
    result = engine.learn('grip force for ceramic cups is 14N after the gripper pad change')
    assert result.status == 'superseded_existing'
    assert result.existing_id == old
    assert result.auto_inferred['superseded_ids'] == [old]
    assert result.auto_inferred['decision']['decider'] == 'rules'
    row = _row(engine, old)
    assert (row['status'], row['superseded_by'], row['valid_until']) == (
        'superseded', result.memory_id, clock.now)
    history = engine.db.reader().execute(
        'SELECT event, actor, old_content FROM history WHERE memory_id = ? ORDER BY id',
        (old,)).fetchall()
    assert [tuple(h) for h in history][-1] == (
        'supersede', 'rules', 'grip force for ceramic cups is 12.5N')
    hits = engine.recall('grip force ceramic cups', n=10).memories
    assert [m.id for m in hits] == [result.memory_id]
    new_events = engine.db.reader().execute(
        'SELECT event, actor FROM history WHERE memory_id = ? ORDER BY id',
        (result.memory_id,)).fetchall()
    assert [tuple(e) for e in new_events] == [('create', 'engine'), ('decide', 'rules')]


def test_belief_at_time_t(engine, clock):
    engine.learn('max speed in aisle 3 is 1.5 m/s')
    before = clock.now + 3600
    clock.advance_days(1)
    engine.learn('max speed in aisle 3 is 0.8 m/s')
    then = engine.recall('max speed aisle', context_filter={'as_of': before}).memories
    now = engine.recall('max speed aisle').memories
    assert [m.content for m in then] == ['max speed in aisle 3 is 1.5 m/s']
    assert [m.content for m in now] == ['max speed in aisle 3 is 0.8 m/s']
    both = engine.recall('max speed aisle', context_filter={'include_superseded': True})
    assert both.total == 2


def test_refinement_merges_into_existing(engine, clock):
    old = engine.learn('payload: 5 kg').memory_id
    clock.advance_days(1)
    result = engine.learn('payload: 5 kg with the vacuum gripper mounted')
    assert (result.status, result.memory_id) == ('merged', old)
    assert _row(engine, old)['content'] != 'payload: 5 kg'
    assert engine.db.reader().execute(
        "SELECT COUNT(*) FROM history WHERE memory_id = ? AND event = 'merge'",
        (old,)).fetchone()[0] == 1


def test_a_task_on_another_thing_is_not_merged(engine, clock):
    """A place set inside an instruction names another object: both tasks stay."""
    old = engine.learn('put the black bowl on top of the cabinet').memory_id
    clock.advance_days(1)
    result = engine.learn('put the middle black bowl on top of the cabinet')
    assert result.status == 'created'
    assert _row(engine, old)['content'] == 'put the black bowl on top of the cabinet'


def test_scope_keeps_sim_and_real_apart(engine, clock):
    engine.learn('grip force for ceramic cups is 12.5N', {'env': {'sim_or_real': 'sim'}})
    clock.advance_days(1)
    result = engine.learn('grip force for ceramic cups is 14N', {'env': {'sim_or_real': 'real'}})
    assert result.status == 'created'


def test_events_are_never_superseded(engine, clock):
    engine.learn('dropped the cup at 10:00', {'category': 'event'})
    clock.advance_days(1)
    assert engine.learn('dropped the cup at 11:00', {'category': 'event'}).status == 'created'


def test_decider_none_keeps_both(tmp_path):
    engine = make_engine(tmp_path, decider='none')
    engine.learn('grip force for ceramic cups is 12.5N')
    assert engine.learn('grip force for ceramic cups is 14N').status == 'created'
    engine.close()


def test_decider_failure_creates(engine, monkeypatch):
    engine.learn('conveyor speed is 0.3 m/s')

    def explode(candidate, peers):
        raise RuntimeError('boom')
    monkeypatch.setattr(engine.learner.decider, 'propose', explode)
    result = engine.learn('conveyor speed is 0.5 m/s')
    assert result.status == 'created'
    assert 'decider failed' in result.auto_inferred['decision']['reason']


class Reply(LLMDecider):
    """An LLM decider's reply, without a server; ``meanwhile`` runs while it "thinks"."""

    def __init__(self, decision, actions, meanwhile=lambda: None):
        super().__init__('http://127.0.0.1:9/v1', 'model', 1.0)
        self.proposal, self.meanwhile = Proposal(decision, actions, 'llm'), meanwhile

    def propose(self, candidate, peers):
        self.meanwhile()  # outside the write lock, as a remote decider runs
        return self.proposal


def test_none_with_a_merge_and_a_delete_applies_both(engine, clock):
    # Only the LLM decider proposes this: refine one memory, retire another that the candidate
    # contradicts. The candidate gets no row, so the retired one points at the merged one.
    engine.learner.decider = None
    refined = engine.learn('the gripper force for the cup is 11 N').memory_id
    clock.advance_days(0.01)
    retired = engine.learn('the gripper force for the cup is 10 N').memory_id
    clock.advance_days(0.01)

    engine.learner.decider = Reply(NONE, (Action(MERGE, refined, reason='refines'),
                                          Action(DELETE, retired, reason='contradicts')))
    result = engine.learn('the gripper force for the cup is 12 N')
    assert (result.status, result.memory_id) == ('merged', refined)
    assert result.auto_inferred['superseded_ids'] == [retired]
    assert _row(engine, refined)['content'] == 'the gripper force for the cup is 12 N'
    row = _row(engine, retired)
    assert (row['status'], row['superseded_by']) == ('superseded', refined)


@pytest.mark.parametrize('kind', [MERGE, DELETE])
def test_an_action_on_a_memory_rewritten_while_deciding_is_not_applied(engine, clock, kind):
    # Another writer (the CLI, the fleet sync) rewrites the target while a remote decider
    # works: a merged text built from the old one would drop that change, and a DELETE was
    # decided against a text the memory no longer holds. The candidate is stored instead.
    engine.learner.decider = None
    target = engine.learn('the gripper force for the cup is 11 N').memory_id
    clock.advance_days(0.01)
    rewritten = 'the gripper force for the cup is 11 N with a rubber pad'
    engine.learner.decider = Reply(NONE if kind == MERGE else CREATE, (Action(kind, target),),
                                   meanwhile=lambda: engine.update(target, rewritten))
    result = engine.learn('the gripper force for the cup is 12 N')
    assert result.status == 'created' and result.memory_id != target
    row = _row(engine, target)
    assert (row['status'], row['content']) == ('active', rewritten)
