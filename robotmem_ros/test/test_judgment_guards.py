"""
The judgment guards: distinct facts stay distinct in every layer that could hide one.

One test per difference class (object, attribute, place, quantity, roles, action), the
paraphrases that must still count as one fact, the ``source:`` prefix, records that never
supersede each other, the updates that must still supersede, and the guard rails around any
decider's proposal.
"""

from engine_helpers import make_engine
import pytest
from robotmem_ros.engine import judgment
from robotmem_ros.engine.decision import (
    Action, Candidate, CREATE, DELETE, Existing, MERGE, Proposal, RuleDecider, SKIP,
)
from robotmem_ros.engine.decision.base import Decider
from robotmem_ros.engine.decision.normalize import normalize

# (a, b, class of the difference): never the same fact.
DIFFERENT = [
    ('pick up the book and place it in the back compartment of the caddy',
     'pick up the cup and place it in the back compartment of the caddy', 'object'),
    ('Pick the alphabet soup and place it in the basket',
     'Pick the cream cheese and place it in the basket', 'object'),
    ('pick up the red cup from the table', 'pick up the blue cup from the table', 'colour'),
    ('place the wooden bowl on the tray', 'place the plastic bowl on the tray', 'material'),
    ('grab the small box next to the sink', 'grab the large box next to the sink', 'size'),
    ('open the top layer of the drawer', 'open the middle layer of the drawer', 'place'),
    ('put the bowl inside the cabinet', 'put the bowl next to the cabinet', 'relation'),
    ('Pick the akita black bowl in the top layer of the wooden cabinet and place it on the plate',
     'Pick the akita black bowl on the top of the wooden cabinet and place it on the plate',
     'relation'),
    ('place the bowl on the cabinet', 'place the bowl on the stove', 'place'),
    ('stack 2 cups on the tray', 'stack 3 cups on the tray', 'quantity'),
    ('put the white mug on the left plate and put the yellow and white mug on the right plate',
     'put the yellow and white mug on the left plate and put the white mug on the right plate',
     'roles'),
    ('the cup is on the book', 'the book is on the cup', 'roles'),
    ('worker 2 call 0: fresh clients lose answers', 'worker 0 call 2: fresh clients lose answers',
     'numbers in other roles'),
    ('obstacle at x=1.2 y=0.4', 'obstacle at x=0.4 y=1.2', 'numbers in other roles'),
    ('Pick the akita black bowl between the plate and the ramekin and place it on the plate',
     'Pick the akita black bowl not between the plate and the ramekin and place it on the plate',
     'negation'),
    ('the gripper is open', 'the gripper is closed', 'opposite'),
    ('pick up the cup', 'pick up the cup and the book', 'added object'),
    ('pick up the bowl', 'pick up the bowl on the left', 'added place'),
    ('pick up the next cup', 'pick up the first cup', 'ordinal'),
    ('pick up the next cup', 'pick up the cup nearby', 'ordinal'),
    ('put the cup in the toolbox', 'put the cup in the tool', 'object'),
    ('vision: red cup detected on the table', 'vision: blue box detected near the sink', 'source'),
    ('vision: red cup detected on the table', 'lidar: red cup detected on the table', 'source'),
    ('pick up the cup', 'wash the cup', 'action'),
    ('open the drawer', 'clean the drawer', 'action'),
    ('switch on the stove', 'clean the stove', 'action'),
    ('turn on the stove', 'turn off the stove', 'opposite'),
    ('turn the cup on the tray', 'turn the cup', 'added place'),
    ('pick both cups', 'pick the cup', 'quantity'),
    ('put both cups on the tray and close the drawer',
     'put the cup on the tray and close the drawer', 'quantity'),
    ('put the bowl on the top shelf', 'put the bowl on the shelf', 'place'),
    ('put the bowl on top of the cabinet', 'put the bowl in the cabinet', 'relation'),
    ('put the bowl on the cabinet top', 'put the bowl on the top drawer of the cabinet', 'place'),
    ('put the bowl on the cabinet top', 'put the bowl on the left top', 'place'),
    ("put the cup's lid on the box", "put the box's lid on the cup", 'roles'),
    ("put the cup in the cabinet's top drawer", 'put the cup in the top drawer', 'added owner'),
    ("Caroline's dog is Max", "Melanie's dog is Max", 'owner'),
    ('move the box from the kitchen to the office',
     'move the box from the office to the kitchen', 'roles'),
    ('Alice gave the book to Bob', 'Bob gave the book to Alice', 'roles'),
    ('the cup is to the left of the bowl', 'the bowl is to the left of the cup', 'roles'),
    ('the mug is heavier than the glass', 'the glass is heavier than the mug', 'roles'),
    ('货架第2层放着螺丝刀', '货架第3层放着螺丝刀', 'quantity'),
    ('桌子上有3个杯子', '桌子上有5个杯子', 'quantity'),
]

# Paraphrases that differ only in wording: one fact.
SAME = [
    ('lift the black bowl between the plate and ramekin and set it on the plate',
     'pick the black bowl between plate and ramekin and put it on plate'),
    ('lift the black bowl from the table center and put it on the plate',
     'pick up the black bowl in the middle of the table and place it on plate'),
    ('grab cream cheese and put into basket', 'Pick the cream cheese and place it in the basket'),
    ('Pick the akita black bowl next to the ramekin and place it on the plate',
     'take black bowl next to ramekin and place on plate'),
    ('the night operator prefers silent mode', 'silent mode is preferred by the night operator'),
    ('The red cup is on the left shelf', 'the red cup is on the left shelf.'),
    ('put the mug in the tool box', 'Put the mug in the toolbox.'),
    ('wipe the key-board', 'wipe the keyboard'),
    ('Next to the sink, put the cup', 'put the cup beside the sink'),
    ('turn on the stove', 'turn the stove on'),
    ('switch on the stove and put the moka pot on it',
     'turn the stove on and put the moka pot on it'),
    ('place the bowl on top of the plate', 'put the bowl on the plate'),
    ('put the wine bottle on the top of the cabinet', 'put the wine bottle on the cabinet'),
    ('place the wine bottle on top of the cabinet', 'set the wine bottle on the cabinet top'),
    ('put the pan on the stove top and turn it on', 'put the pan on the stove and turn it on'),
    ('put both the alphabet soup and the cream cheese box in the basket',
     'put alphabet soup and cream cheese box in basket'),
    ('insert the bowl into the drawer', 'put the bowl in the drawer'),
    ('shut the microwave', 'close the microwave'),
    ('put the book in the rear compartment', 'put the book in the back compartment'),
    ('put the black bowl in the bottom drawer of the cabinet and close it',
     'place black bowl in cabinet’s bottom drawer and shut'),
    ("the robot's gripper is open.", 'the gripper of the robot is open'),
    ("Caroline's dog's name is Max", 'the name of the dog of Caroline is Max'),
    ("it's on the table", 'it is on the table'),
]


@pytest.mark.parametrize('a,b,kind', DIFFERENT)
def test_difference_classes_keep_facts_apart(a, b, kind):
    assert judgment.difference(a, b), f'{kind}: {a!r} / {b!r} judged the same fact'
    assert judgment.difference(b, a), 'the guard must be symmetric'


@pytest.mark.parametrize('a,b', SAME)
def test_paraphrases_are_one_fact(a, b):
    assert judgment.difference(a, b) == ''


def test_span_judge_can_only_equate_ordinary_words():
    def always(a, b):
        return 1.0
    assert judgment.same_fact('the robot uses the old planner',
                              'the robot uses the legacy planner', always)
    # a protected word (colour) is never equated, whatever the span judge says
    assert not judgment.same_fact('pick the red cup', 'pick the blue cup', always)


@pytest.mark.parametrize('text,source,statement', [
    ('vision: red cup detected on the table', 'vision', 'red cup detected on the table'),
    ('Caroline: I went to the LGBTQ support group yesterday', 'Caroline',
     'I went to the LGBTQ support group yesterday'),
    ('camera_front: a person is standing in the doorway', 'camera_front',
     'a person is standing in the doorway'),
    ('grip_force: 12 N', '', 'grip_force: 12 N'),
    ('gripper status: closed', '', 'gripper status: closed'),
    ('camera_wrist offset: x=0.012 m', '', 'camera_wrist offset: x=0.012 m'),
    ('视觉：检测到2个人', '视觉', '检测到2个人'),  # no space after '：'
    ('夹爪力度：12牛', '', '夹爪力度：12牛'),
    ('nav_speed: 0.5m/s', '', 'nav_speed: 0.5m/s'),
])
def test_source_prefix_is_not_an_attribute(text, source, statement):
    assert judgment.split_source(text) == (source, statement)


def test_features_are_derived_once_per_text():
    text = 'grip force for the ceramic mug is 12N'
    assert judgment.features(text) is judgment.features(text)


def _decide(old, new, category='observation'):
    return RuleDecider().decide(Candidate(new, category, {}, 2000.0),
                                [Existing(1, old, category, {}, 1000.0, 0.9)])


def _superseded(outcome):
    return outcome.decision == CREATE and [a.kind for a in outcome.actions] == [DELETE]


# Updates of one attribute of one subject: still superseded.
UPDATES = [
    ('grip force for the ceramic mug is 12N', 'grip force for the ceramic mug is 14N'),
    ('the lab door is locked', 'the lab door is unlocked'),
    ('the red cup is on the left shelf', 'the red cup is now on the right shelf'),
    ('the charger in room 3 is working', 'the charger in room 3 is not working'),
    ('payload: 5 kg', 'payload: 7 kg'),
    ('grip force for ceramic cups is 12.5N',
     'grip force for ceramic cups is 14N after the gripper pad change'),
    ('pose of shelf_1 is x=1.2 y=0.5 yaw=90 deg', 'pose of shelf_1 is x=1.4 y=0.5 yaw=90 deg'),
    ('the default planner is RRT', 'the default planner is PRM'),
    ('夹爪力度为12牛', '夹爪力度为15牛'),  # a number written against Chinese characters
    ('a failed grasp needs 8N of grip force', 'a failed grasp needs 10N of grip force'),
    ('stopped robots must wait 30 s before restarting',
     'stopped robots must wait 60 s before restarting'),
    ('nav_speed: 0.5m/s', 'nav_speed: 0.8m/s'),
]

# Never an update: another object, a source line, a detection, a conversation turn.
NOT_UPDATES = [
    ('grip_force=5.5N works for cups of batch 0', 'grip_force=6.0N works for mugs of batch 1'),
    ('vision: red cup detected on the table', 'vision: blue box detected near the sink'),
    ('sensor: lidar noise high near the window',
     'sensor: sonar reading unstable near the glass wall'),
    ('obstacle: box at x=1.2 y=0.4', 'obstacle: chair at x=3.0 y=2.1'),
    ('the red cup was detected on the left shelf', 'the red cup was detected on the right shelf'),
    ('Caroline: I went to a LGBTQ support group yesterday and it was so powerful.',
     'Caroline: The transgender stories were so inspiring! I was so happy and thankful.'),
    ('Melanie: I am swamped with the kids and work these days.',
     'Melanie: I am taking the kids camping next month, they love it.'),
    ('base: stopped at 14:02', 'base: stopped at 14:07'),  # events, by the verb as written
    ('the grasp failed at 14:02', 'the grasp failed at 14:05'),
    ('[14:02] nav: reached waypoint 4', '[14:05] nav: reached waypoint 4'),
    ('视觉：检测到2个人', '视觉：检测到4个人'),
]


def test_an_event_is_told_by_the_verb_as_written():
    # "stop" is the stem of "stopped" and an instruction's verb as well; before a noun the
    # past tense describes it.
    assert judgment.is_record('the arm stopped at the door')
    assert not judgment.is_record('stop the arm at the door')
    assert not judgment.is_record('use the released version 2.3 of the arm driver')
    assert not judgment.is_record('the pressed button stays lit for 5 seconds')


@pytest.mark.parametrize('old,new', UPDATES)
def test_updates_of_one_attribute_supersede(old, new):
    assert _superseded(_decide(old, new)), _decide(old, new)


@pytest.mark.parametrize('old,new', NOT_UPDATES)
def test_different_facts_and_records_never_supersede(old, new):
    outcome = _decide(old, new)
    assert outcome.decision == CREATE and outcome.actions == (), outcome


def test_records_never_merge():
    outcome = _decide('vision: red cup detected on the table',
                      'vision: red cup detected on the table near the edge')
    assert outcome.decision == CREATE and outcome.actions == ()


def test_swapped_roles_are_not_skipped():
    old = 'put the white mug on the left plate and put the yellow and white mug on the right plate'
    new = 'put the yellow and white mug on the left plate and put the white mug on the right plate'
    assert _decide(old, new).decision == CREATE


def test_a_restatement_is_skipped():
    assert _decide('the red cup is on the left shelf next to the window',
                   'the red cup is on the left shelf').decision == SKIP
    assert _decide('turn on the stove and put the frying pan on it',
                   'turn on the stove').decision == SKIP


def test_words_from_two_clauses_restate_neither():
    """Closing the top drawer is not what the older task says of it (LIBERO's libero_90)."""
    old = 'close the bottom drawer of the cabinet and open the top drawer'
    new = 'close the top drawer of the cabinet'
    assert not judgment.restates(old, new)
    assert _decide(old, new).decision == CREATE


@pytest.mark.parametrize('old,new', [
    ('put the black bowl in the middle on the plate', 'put the black bowl on the plate'),
    ('put the middle black bowl on top of the cabinet',
     'put the black bowl on top of the cabinet'),
])
def test_a_text_without_the_place_inside_the_other_is_another_thing(old, new):
    """The older text's place or ordinal picks one thing; the newer one names another."""
    assert not judgment.restates(old, new)
    assert _decide(old, new).decision == CREATE


PEER = Existing(1, 'vision: red cup detected on the table', 'observation', {}, 1000.0, 0.9)
CAND = Candidate('vision: blue box detected near the sink', 'observation', {}, 2000.0)


@pytest.mark.parametrize('proposal', [
    Proposal('create', (Action(DELETE, 1),)),
    Proposal('none', (Action(MERGE, 1, 'vision: red cup and blue box detected'),)),
])
def test_guard_rails_refuse_an_unfounded_proposal(proposal):
    outcome = normalize(proposal, CAND, [PEER], 'llm')
    assert outcome.decision == CREATE and outcome.actions == ()
    assert outcome.withheld == (1,)
    assert any('refused' in n for n in outcome.notes)


def test_guard_rails_turn_an_unfounded_skip_into_create():
    outcome = normalize(Proposal('skip'), CAND, [PEER], 'llm')
    assert outcome.decision == CREATE
    assert any('SKIP refused' in n for n in outcome.notes)


class Overeager(Decider):
    """A decider that wants every peer gone: what a careless language model might answer."""

    name = 'overeager'

    def propose(self, candidate, peers):
        return Proposal('create', tuple(Action(DELETE, p.id) for p in peers))


def test_engine_keeps_a_withheld_memory_and_reports_it_as_similar(tmp_path):
    engine = make_engine(tmp_path)
    first = engine.learn('vision: red cup detected on the table near the sink')
    engine.learner.decider = Overeager()
    second = engine.learn('vision: blue box detected on the table near the sink')
    assert second.status == 'created'
    assert first.memory_id in [m.id for m in second.similar_facts]
    status = engine.db.reader().execute('SELECT status FROM memories WHERE id = ?',
                                        (first.memory_id,)).fetchone()[0]
    assert status == 'active'
    assert second.auto_inferred['decision']['withheld'] == [first.memory_id]
    engine.close()


@pytest.mark.parametrize('a,b,kind', DIFFERENT[:12])
def test_dedup_never_folds_a_different_fact(tmp_path, a, b, kind):
    engine = make_engine(tmp_path, embed=True, dedup_cosine_threshold=0.0,
                         dedup_jaccard_threshold=0.0, decider='none')
    engine.learn(a)
    assert engine.learn(b).status == 'created', kind
    engine.close()


def test_consolidation_never_merges_records_or_distinct_facts(tmp_path):
    engine = make_engine(tmp_path, embed=True, consolidation_threshold=0.0,
                         consolidation_cosine_threshold=0.0, decider='none',
                         dedup_cosine_threshold=1.0, dedup_jaccard_threshold=1.0)
    session = engine.start_session().session_id
    for text in ('vision: red cup detected on the table', 'vision: red mug detected on the table',
                 'pick up the book and place it in the caddy',
                 'pick up the cup and place it in the caddy',
                 'open the top layer of the drawer', 'open the middle layer of the drawer'):
        engine.learn(text, {'confidence': 0.5}, session_id=session)
    assert engine.end_session(session).superseded_count == 0
    engine.close()


def test_consolidation_by_a_shared_value_keeps_a_one_word_edit_apart(tmp_path):
    # The same measured value merges reworded facts from a low cosine (the consolidation
    # example, test_engine_session.py); a text that replaces one word is another subject.
    engine = make_engine(tmp_path, embed=True)
    session = engine.start_session().session_id
    for text in ('the mug weighs 350g', 'the bowl weighs 350g', 'press the button with 5N',
                 'press the switch with 5N', 'tighten the bolt to 25Nm',
                 'loosen the bolt at 25Nm'):
        assert engine.learn(text, session_id=session).status == 'created'
    assert engine.end_session(session).superseded_count == 0
    engine.close()
