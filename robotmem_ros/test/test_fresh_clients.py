"""
Brand-new client processes reach the memory node, also while other new clients come and go.

Under Fast DDS 3 a new participant held the node's service endpoints back while it waited for
a type lookup that a client process which had already exited would never answer: the service
stayed unavailable to it for good. In the fresh-client benchmark 14 to 20 of 320 such calls
(about 5 %) never saw the node; a node announcing its endpoints without type information
(robotmem_ros/node/middleware.py) removed them. 96 calls from 8 lanes of short-lived client
processes: the old node passed this less than 1 time in 100 (0.95 ** 96).

Each client process closes its participant before it exits. When they left with ``os._exit``
instead, a dead process's shared-memory port could stay in the node's use after a later
process had recreated it, and every process that then got that participant id was never
answered: under a CPU hog about 1 run in 6 of this test failed that way (docs/reliability.md,
"A dead client's shared-memory port").

Two more failures were the harness's: a client process forked from a lane that had imported
rclpy crashed (SIGSEGV) before its call, and a client process whose participant teardown hit
Fast DDS 3.2's deadlock spun for ever holding the GIL, so its Python-timed bound never fired.
Client processes are now started afresh and their teardown is bounded by an alarm; the tests
below check that a hung, a crashed and a stuck client process are each reported, with stacks.
A client process that hangs or crashes before its call (once inside ``rclpy.create_node``) is
made again by a new process and counted apart: it never reached the node.
"""

from __future__ import annotations

import faulthandler
import re
from signal import SIGKILL, SIGSEGV
import sys
import time
import xml.etree.ElementTree as ET

from conftest import module_node, wait_until
import pytest
from robotmem_ros import testing
from robotmem_ros.node import middleware
from robotmem_ros.testing import fresh_client_lanes

LANES = 8
CALLS_PER_LANE = 12
# Generous: a failure here is a call that never saw the node, not a slow one.
CALL_TIMEOUT_S = 60.0


@pytest.fixture(scope='module')
def node(ros, tmp_path_factory):
    """One node with its embedder, as a robot runs it (Learn then embeds at once)."""
    yield from module_node(ros, tmp_path_factory, 'fresh', embed_backend='onnx')


def test_every_fresh_client_process_reaches_the_node(node):
    tallies = fresh_client_lanes(node.prefix, LANES, CALLS_PER_LANE, timeout=CALL_TIMEOUT_S)
    failures = [failure for tally in tallies for failure in tally['failures']]
    assert failures == [], failures
    assert sum(len(tally['copies']) for tally in tallies) == LANES * CALLS_PER_LANE


def _hang_in_a_named_place() -> dict:
    time.sleep(120)
    return {}


def test_a_client_process_that_hangs_is_reported_with_its_stack(monkeypatch):
    monkeypatch.setattr(testing, '_CHILD_GRACE_S', 1.0)
    outcome, stuck = testing._in_child(f'{__name__}:_hang_in_a_named_place', [], 0.5)
    assert not stuck
    assert outcome['error'].startswith(f'no result from the child (exit status -{SIGKILL})')
    assert '_hang_in_a_named_place' in outcome['error'], outcome['error']


def _ready_then_hang() -> dict:
    print(testing._READY, file=sys.stderr, flush=True)
    time.sleep(120)
    return {}


def test_a_hung_client_process_says_whether_it_got_to_call(monkeypatch):
    monkeypatch.setattr(testing, '_CHILD_GRACE_S', 1.0)
    before, _ = testing._in_child(f'{__name__}:_hang_in_a_named_place', [], 0.5)
    after, _ = testing._in_child(f'{__name__}:_ready_then_hang', [], 0.5)
    assert (before['ready'], after['ready']) == (False, True)


# What Fast DDS's default log consumer writes to a client process's stdout.
MIDDLEWARE_LINE = '2026-12-04 19:18:58.123 [RTPS_TRANSPORT_SHM Error] Failed init_port'


def _log_to_stdout_then_answer() -> dict:
    print(MIDDLEWARE_LINE, flush=True)
    return {'response': 'answered'}


def _log_to_stdout_then_hang() -> dict:
    print(MIDDLEWARE_LINE, flush=True)
    time.sleep(120)
    return {}


def test_a_client_process_that_logs_to_stdout_still_gives_its_result(monkeypatch):
    outcome, stuck = testing._in_child(f'{__name__}:_log_to_stdout_then_answer', [], 30.0)
    assert (outcome, stuck) == ({'response': 'answered'}, False)
    monkeypatch.setattr(testing, '_CHILD_GRACE_S', 1.0)
    outcome, _ = testing._in_child(f'{__name__}:_log_to_stdout_then_hang', [], 0.5)
    assert f'its stdout:\n{MIDDLEWARE_LINE}\n' in outcome['error'], outcome['error']


def _never_called(error: str = 'no result from the child (exit status -9)') -> dict:
    return {'response': None, 'copies': 0, 'error': error, 'ready': False}


ANSWERED = {'response': {'status': 'created', 'memory_id': 7}, 'copies': 1, 'insight': 'x',
            'graph': None}


@pytest.mark.parametrize('outcomes, setup_stuck, failed', [
    ([_never_called(), ANSWERED], 1, 0),                       # made again, then answered
    ([_never_called()] * (testing._SETUP_RETRIES + 1), 2, 1),  # never got to call: a failure
    ([dict(_never_called(), ready=True)], 0, 1),               # called and got no answer
])
def test_a_client_process_that_never_called_is_made_again(monkeypatch, outcomes, setup_stuck,
                                                          failed):
    left = list(outcomes)
    monkeypatch.setattr(testing, '_in_child', lambda body, args, timeout: (left.pop(0), False))
    tally = testing._lane('/ns/robotmem', 0, 1, True, 1.0)
    assert left == []
    assert (tally['setup_stuck'], len(tally['setup_failures'])) == (setup_stuck, setup_stuck)
    assert (tally['client_failed'], len(tally['failures'])) == (failed, failed)
    assert len(tally['copies']) == 1 - failed


def _crash_in_a_named_place() -> dict:
    faulthandler._sigsegv()
    return {}


def test_a_client_process_that_crashes_is_reported_with_its_stack():
    outcome, stuck = testing._in_child(f'{__name__}:_crash_in_a_named_place', [], 30.0)
    assert not stuck
    assert outcome['error'].startswith(f'no result from the child (exit status -{SIGSEGV})')
    assert '_crash_in_a_named_place' in outcome['error'], outcome['error']


class _NodeThatSpinsHoldingTheGil:
    """Stands in for a node whose destroy_node deadlocks the way Fast DDS 3.2's can."""

    def destroy_node(self) -> None:
        # A regular expression that backtracks for ever runs in C and never lets go of the
        # GIL, as rcl_node_fini does while Fast DDS 3.2 spins in DomainParticipant::set_listener.
        re.match(r'(a+)+$', 'a' * 64 + 'b')


def _answer_then_spin_at_teardown() -> dict:
    testing._client_nodes.append(_NodeThatSpinsHoldingTheGil())
    return {'response': 'answered'}


def test_a_teardown_that_spins_holding_the_gil_is_ended_and_counted():
    outcome, stuck = testing._in_child(f'{__name__}:_answer_then_spin_at_teardown', [], 30.0)
    assert outcome == {'response': 'answered'}
    assert stuck


def test_the_node_says_which_fast_dds_profile_it_uses(node):
    line = f'Fast DDS profile: {middleware.NODE_PROFILE} (type propagation disabled)'
    assert wait_until(lambda: line in node.log()), node.log()  # logged just after ready


def test_the_node_profile_disables_type_propagation():
    root = ET.parse(middleware.NODE_PROFILE).getroot()
    properties = {prop.findtext('{*}name'): prop.findtext('{*}value')
                  for prop in root.iter('{http://www.eprosima.com}property')}
    assert properties == {'fastdds.type_propagation': 'disabled'}


def test_a_profile_the_user_chose_is_left_alone():
    environ = {middleware.PROFILE_ENV: '/etc/robot/fastdds.xml'}
    note = middleware.use_node_profile(environ)
    assert environ == {middleware.PROFILE_ENV: '/etc/robot/fastdds.xml'}
    assert '/etc/robot/fastdds.xml' in note and 'chosen by the user' in note


def test_without_a_user_profile_the_node_profile_is_used():
    environ: dict[str, str] = {}
    middleware.use_node_profile(environ)
    assert environ == {middleware.PROFILE_ENV: str(middleware.NODE_PROFILE)}
