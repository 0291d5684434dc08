"""The rule decider on concrete robot facts: facets, numbers, negation, categories, time."""

import pytest

from robotmem_ros.engine.decision import (
    Candidate, CREATE, DELETE, Existing, MERGE, NONE, RuleDecider, SKIP,
)
from robotmem_ros.engine.decision.facet import facet_key, parse
from robotmem_ros.engine.decision.merge import merge_text
from robotmem_ros.engine.decision.quantity import Quantity
from robotmem_ros.engine.decision.relation import (
    classify, CONTRADICTS, REFINES, SAME, UNRELATED,
)

OLD_T, NEW_T = 1_000.0, 2_000.0


def decide(old, new, category='observation', old_ctx=None, new_ctx=None, old_t=OLD_T):
    peer = Existing(1, old, category, old_ctx or {}, old_t, 0.9)
    return RuleDecider().decide(Candidate(new, category, new_ctx or {}, NEW_T), [peer])


def kinds(outcome):
    return [(a.kind, a.target_id) for a in outcome.actions]


@pytest.mark.parametrize('text,key', [
    ('grip force for ceramic cups is 12.5N', 'grip force | ceramic cups'),
    ('max joint speed of the arm is 1.2 rad/s', 'max joint speed | arm'),
    ('camera_wrist calibration offset: x=0.012 m', 'camera_wrist calibration offset'),
    ('Python：擅长 Web 开发', 'python'),
    ('always calibrate before grasping anything at all', 'always calibrate before'),
])
def test_facet_key(text, key):
    assert facet_key(text) == key


def test_quantities_are_si_and_names_are_not_numbers():
    p = parse('place at 50 mm, speed 0.5 m/s; use M4 screws on shelf_1 with the ur5e')
    assert Quantity(0.05, 'length') in p.quantities
    assert any(q.same_as(Quantity(0.5, 'speed')) for q in p.quantities)
    assert len(p.quantities) == 2
    assert {'m4', 'shelf_1', 'ur5e'} <= set(p.content)


def test_units_convert_before_comparing():
    assert classify(parse('place height above the tray is 5 cm'),
                    parse('place height above tray = 50 mm'))[0] == SAME
    assert classify(parse('max TCP speed in cell 2 is 250 mm/s'),
                    parse('max TCP speed in cell 2 is 0.4 m/s'))[0] == CONTRADICTS


@pytest.mark.parametrize('old,new,relation', [
    ('grip force for ceramic cups is 12.5N', 'ceramic cups need 12.5 N of grip force', SAME),
    ('grip force for ceramic cups is 12.5N', 'grip force for ceramic cups is 14N', CONTRADICTS),
    ('grip force for ceramic cups is 12.5N', 'grip force for glass bottles is 12.5N', UNRELATED),
    ('grip force for ceramic cups is 12.5N',
     'grip force for ceramic cups is 12.5N, applied at the handle', REFINES),
    ('the red mug is on shelf 2', 'the red mug is on shelf 3', CONTRADICTS),
    ('table height in cell 4 is 0.75 m', 'table height in cell 5 is 0.9 m', UNRELATED),
    ('the tcp z offset is 0.145 m', 'the tcp x offset is 0.002 m', UNRELATED),
    ('cardboard boxes need 8 N grip force', 'cardboard boxes need 8 N grip force, or 12 N wet',
     REFINES),
    ('the door to lab B opens inward', 'the door to lab B opens outward', CONTRADICTS),
    ('the left finger pad slips on wet surfaces',
     'the left finger pad no longer slips on wet surfaces', CONTRADICTS),
    ('do not grasp knives by the blade', 'never grasp knives by the blade', SAME),
    ('spray bottles are picked by the neck',
     'spray bottles are picked by the neck, never by the trigger', REFINES),
    ('the coffee machine is in kitchen A', 'the coffee machine is in kitchen C', CONTRADICTS),
    ('the coffee machine is in kitchen A', 'the coffee machine needs descaling monthly',
     UNRELATED),
    ('陶瓷杯夹取力是12.5N', '陶瓷杯夹取力是14N', CONTRADICTS),
    ('陶瓷杯夹取力是12.5N', '玻璃瓶夹取力是8N', UNRELATED),
    # Detail after an instruction refines it; a place or an ordinal set inside it names
    # another thing (LIBERO's libero_90 tasks of one scene).
    ('wipe the suction cup every 200 picks',
     'wipe the suction cup every 200 picks with isopropyl alcohol', REFINES),
    ('pick up the cup', 'pick up the cup from the left shelf', REFINES),
    ('put the black bowl on top of the cabinet',
     'put the middle black bowl on top of the cabinet', UNRELATED),
    ('put the moka pot on the stove', 'put the right moka pot on the stove', UNRELATED),
    ('put the black bowl on the plate', 'put the black bowl at the back on the plate', UNRELATED),
])
def test_relation(old, new, relation):
    assert classify(parse(old), parse(new))[0] == relation


def test_newer_value_supersedes_the_old_fact():
    out = decide('grip force for ceramic cups is 12.5N',
                 'grip force for ceramic cups is 14N after the gripper pad change')
    assert out.decision == CREATE and kinds(out) == [(DELETE, 1)]
    assert out.decider == 'rules' and out.actions[0].before.endswith('12.5N')


def test_older_value_does_not_supersede_a_newer_fact():
    out = decide('grip force for ceramic cups is 12.5N', 'grip force for ceramic cups is 14N',
                 old_t=NEW_T + 1)
    assert out.decision == CREATE and out.actions == ()


def test_new_detail_merges_with_merged_text():
    new = 'grip force for ceramic cups is 12.5N, applied at the handle'
    out = decide('grip force for ceramic cups is 12.5N', new)
    assert out.decision == NONE and kinds(out) == [(MERGE, 1)]
    assert out.actions[0].merged_text == new


def test_restatement_is_skipped():
    out = decide('optimal grip force for cardboard boxes is 8 N',
                 'cardboard boxes: optimal grip force 8 N')
    assert out.decision == SKIP and out.actions == ()


def test_unrelated_fact_is_created():
    out = decide('grip force for ceramic cups is 12.5N', 'grip force for glass bottles is 8N')
    assert out.decision == CREATE and out.actions == ()


def test_different_scope_never_conflicts():
    out = decide('grip force for ceramic cups is 12.5N', 'grip force for ceramic cups is 14N',
                 old_ctx={'env': {'sim_or_real': 'sim'}},
                 new_ctx={'env': {'sim_or_real': 'real'}})
    assert out.decision == CREATE and out.actions == ()


@pytest.mark.parametrize('new,decision', [
    ('grasp of cup_3 failed at 14:02', SKIP),
    ('grasp of cup_3 failed at 14:02 because the pad slipped', CREATE),
    ('grasp of cup_3 failed at 14:05', CREATE),
])
def test_history_categories_only_skip_or_create(new, decision):
    out = decide('grasp of cup_3 failed at 14:02', new, category='event')
    assert out.decision == decision and out.actions == ()


def test_merge_is_only_allowed_in_mergeable_categories():
    for category in ('preference', 'entity', 'procedure', 'gotcha'):
        out = decide('use the suction tool for flat boxes',
                     'use the suction tool for flat boxes, with the 40 mm cup', category)
        assert out.decision == NONE and kinds(out) == [(MERGE, 1)], category


def test_supersedes_every_contradicted_peer_and_ignores_other_categories():
    peers = [
        Existing(1, 'conveyor belt speed is 0.3 m/s', 'observation', {}, OLD_T, 0.9),
        Existing(2, 'conveyor belt speed: 0.35 m/s', 'observation', {}, OLD_T, 0.8),
        Existing(3, 'conveyor belt speed is 0.2 m/s', 'constraint', {}, OLD_T, 0.95),
        Existing(4, 'conveyor belt length is 4 m', 'observation', {}, OLD_T, 0.7),
    ]
    out = RuleDecider().decide(
        Candidate('conveyor belt speed is 0.45 m/s', 'observation', {}, NEW_T), peers)
    assert out.decision == CREATE and kinds(out) == [(DELETE, 1), (DELETE, 2)]


def test_only_the_top_five_peers_are_considered():
    peers = [Existing(i, f'note {i} about the tray', 'observation', {}, OLD_T, 0.9 - i / 100)
             for i in range(1, 6)]
    peers.append(Existing(6, 'grip force for eggs is 2 N', 'observation', {}, OLD_T, 0.1))
    out = RuleDecider().decide(
        Candidate('grip force for eggs is 1.5 N', 'observation', {}, NEW_T), peers)
    assert out.decision == CREATE and out.actions == ()


@pytest.mark.parametrize('old,new,merged', [
    ('payload: 5 kg; reach: 850 mm', 'payload: 3 kg', 'payload: 3 kg; reach: 850 mm'),
    ('payload: 5 kg', 'reach: 850 mm', 'payload: 5 kg; reach: 850 mm'),
    ('payload: 5 kg. reach: 850 mm.', 'reach: 850 mm', None),
])
def test_merge_text_replaces_the_clause_of_the_same_facet(old, new, merged):
    assert merge_text(old, new) == merged
