"""
The memory node as a subprocess, for tests and benchmarks.

A subprocess is the node exactly as a robot runs it (its own DDS participant, its own signal
handling, a real crash when killed), under a unique namespace and on its own database, with its
log in a file. The test suite and the benchmarks share this one harness, and the fresh-client
processes that call it (below).
"""

from __future__ import annotations

import faulthandler
import importlib
import json
import os
import pathlib
import select
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any
import uuid

PACKAGE_DIR = pathlib.Path(__file__).resolve().parents[1]


class NodeSubprocess:
    """``python -m robotmem_ros.node.memory_node`` under ``/<ns_prefix><random>``."""

    def __init__(self, db_path: pathlib.Path, log_path: pathlib.Path, *, ns_prefix: str,
                 **params: Any) -> None:
        self.db_path = db_path
        self.log_path = log_path
        self.namespace = f'/{ns_prefix}{uuid.uuid4().hex[:10]}'
        self.prefix = f'{self.namespace}/robotmem'
        args = [sys.executable, '-m', 'robotmem_ros.node.memory_node', '--ros-args',
                '-r', f'__ns:={self.namespace}', '-p', f'db_path:={db_path}']
        for name, value in params.items():
            if isinstance(value, bool):
                value = 'true' if value else 'false'
            args += ['-p', f'{name}:={value}']
        env = dict(os.environ, PYTHONUNBUFFERED='1')
        env['PYTHONPATH'] = os.pathsep.join([str(PACKAGE_DIR), env.get('PYTHONPATH', '')])
        self._log = open(log_path, 'ab')
        self.proc = subprocess.Popen(args, env=env, stdout=self._log, stderr=subprocess.STDOUT)

    def log(self) -> str:
        """Return everything the node wrote so far."""
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors='replace')

    def stop(self, sig: int = signal.SIGINT, timeout: float = 60.0) -> int:
        """Signal the node (SIGINT: it flushes its buffer), wait, kill past ``timeout``."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


# --- fresh client processes -----------------------------------------------------------------
# A client process that calls at once is where DDS loses answers and where discovery can stall
# (docs/reliability.md, "Fresh clients"). ``fresh_client_lanes`` reproduces it: each lane is a
# process that forks one short-lived client process per call.

FRESH_CALL_TIMEOUT_S = 30.0
FRESH_ATTEMPT_S = 1.0
_CHILD_GRACE_S = 30.0  # start-up of a client process, beyond the call's own timeout
# A client process closes its DDS participant before it exits, as a well-behaved process does:
# one that dies with its shared-memory ports open can leave a port that its successor cannot
# use (docs/reliability.md, "A dead client's shared-memory port"). Fast DDS 3.2 can deadlock
# in that teardown (DomainParticipant::set_listener spinning until a discovery callback ends
# that waits on a lock the spinning thread holds, about once in 2 000 calls), and it spins
# holding the GIL, so no Python timer can end it: an alarm does (SIGALRM's default action
# ends the process, counted as a stuck teardown).
_TEARDOWN_S = 10
# A child that gives no result in time is asked for every thread's Python stack (faulthandler
# on SIGUSR1) and given this long to write it before it is killed; one that crashes writes them
# itself (faulthandler on SIGSEGV and the like). The tally reports them with the exit status.
_STACK_DUMP_S = 2.0
_MODULE = 'robotmem_ros.testing'  # this module, as client processes import it
# What starts a child's result line on its stdout. Other lines can come first: Fast DDS's
# default log consumer writes its warnings and errors to stdout, and in a Jazzy run one client
# process's first stdout line was not its result (its JSON parse failed the lane).
_RESULT = 'fresh client result: '
# What a fresh client process writes to stderr once its node and client exist, just before its
# call. A process that gives no result without having written it never called: Fast DDS 3.2
# once hung a fresh process inside ``rclpy.create_node`` (its /parameter_events publisher) for
# over a minute, and a forked one crashed there (docs/reliability.md, "The harness's own
# failures"). Such a call is made again by a new process, at most _SETUP_RETRIES times, and
# counted as ``setup_stuck``; only a process that got to call can fail the node.
_READY = 'fresh client: ready to call'
_SETUP_RETRIES = 2
# The client process's node: destroyed by ``_close_dds`` and nowhere else.
_client_nodes: list[Any] = []


def fresh_client_lanes(prefix: str, lanes: int, calls: int, resend: bool = True,
                       timeout: float = FRESH_CALL_TIMEOUT_S) -> list[dict[str, Any]]:
    """Run ``lanes`` processes of ``calls`` fresh-client calls each at ``prefix``; tally each."""
    env = dict(os.environ)
    env['PYTHONPATH'] = os.pathsep.join([str(PACKAGE_DIR), env.get('PYTHONPATH', '')])
    procs = [subprocess.Popen(
        [sys.executable, '-m', _MODULE, prefix, str(lane), str(calls),
         '1' if resend else '0', str(timeout)], env=env, stdout=subprocess.PIPE, text=True)
        for lane in range(lanes)]
    return [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]


def _lane(prefix: str, lane: int, calls: int, resend: bool, timeout: float) -> dict[str, Any]:
    """Make ``calls`` calls, each from a client process of its own; tally what they saw."""
    tally: dict[str, Any] = {'unanswered': 0, 'no_server_seen': 0, 'client_failed': 0,
                             'teardown_stuck': 0, 'setup_stuck': 0, 'setup_failures': [],
                             'copies': [], 'learned': {}, 'failures': []}
    for i in range(calls):
        for retry in range(_SETUP_RETRIES + 1):
            outcome, stuck = _in_child(f'{_MODULE}:_fresh_call',
                                       [prefix, lane, i, resend, timeout], timeout)
            tally['teardown_stuck'] += stuck
            if 'error' not in outcome or outcome['ready'] or retry == _SETUP_RETRIES:
                break
            tally['setup_stuck'] += 1  # never called: made again by a new process
            tally['setup_failures'].append(outcome['error'])
        if 'error' in outcome:
            tally['client_failed'] += 1
            tally['failures'].append(outcome['error'])
        elif outcome['response'] is None:  # copies sent and none answered, or none could be
            tally['unanswered' if outcome['copies'] else 'no_server_seen'] += 1
            tally['failures'].append(outcome['graph'])
        else:
            tally['copies'].append(outcome['copies'])
            if outcome['response']['status'] == 'created':
                tally['learned'][outcome['insight']] = outcome['response']['memory_id']
    return tally


def _fresh_call(prefix: str, lane: int, i: int, resend: bool,
                timeout: float) -> dict[str, Any]:
    """Create a participant, a node and a client, and call at once (Learn or Recall)."""
    import rclpy
    from robotmem_msgs.srv import Learn, Recall
    from robotmem_ros.client.resend import send_until_answered, stamp_request_id
    from robotmem_ros.client.waiting import Waiter

    rclpy.init()
    node = rclpy.create_node(f'fresh_client_{lane}_{os.getpid()}')
    _client_nodes.append(node)
    insight = f'lane {lane} call {i}: fresh clients lose answers sometimes'
    if i % 2 == 0:
        service = f'{prefix}/learn'
        client = node.create_client(Learn, service)
        request = stamp_request_id(Learn.Request(insight=insight))
    else:
        service = f'{prefix}/recall'
        client = node.create_client(Recall, service)
        request = Recall.Request(query=f'lane {lane} fresh clients')
    print(_READY, file=sys.stderr, flush=True)
    attempt = FRESH_ATTEMPT_S if resend else timeout
    response, copies = send_until_answered(
        client, request, Waiter(node), time.monotonic() + timeout, attempt)
    answer = None if response is None else {
        'status': getattr(response, 'status', ''), 'memory_id': getattr(response, 'memory_id', 0)}
    # What this participant knew of the service when it gave up: which half was missing.
    graph = None if response is not None else {
        'service': service,
        'request_readers': len(node.get_subscriptions_info_by_topic(
            f'rq{service}Request', no_mangle=True)),
        'response_writers': len(node.get_publishers_info_by_topic(
            f'rr{service}Reply', no_mangle=True))}
    return {'response': answer, 'copies': copies, 'insight': insight, 'graph': graph}


def _in_child(body: str, args: list[Any], timeout: float) -> tuple[dict[str, Any], bool]:
    """
    Run ``body(*args)`` (``module:function``) in a new process; return its result and stuck.

    A new process per call is what the lost-answer race needs (participant and endpoint
    discovery under way during the first request). It is started afresh, as a client process
    on a robot is, not forked: a fork of a process that has imported rclpy copies the threads'
    state of LTTng-UST (loaded with rclpy's tracing) and OpenBLAS, and one such fork crashed
    with SIGSEGV before its call. The child prints its result first, then closes its
    participant (``_close_dds``) and exits; ``stuck`` says that closing did not finish. Lines
    the child writes to stdout before its result (the middleware's log) are reported with its
    stderr when no result comes.
    """
    env = dict(os.environ)
    env['PYTHONPATH'] = os.pathsep.join(p for p in sys.path if p)  # what the caller imports
    with tempfile.TemporaryFile() as stderr:
        proc = subprocess.Popen(
            [sys.executable, '-m', _MODULE, 'child', body, json.dumps(args)],
            env=env, stdout=subprocess.PIPE, stderr=stderr)
        line, before = _result_line(proc.stdout, time.monotonic() + timeout + _CHILD_GRACE_S)
        if not line:
            proc.send_signal(signal.SIGUSR1)  # every thread's stack to stderr, then kill
            time.sleep(_STACK_DUMP_S)
            proc.kill()
        status = proc.wait()
        proc.stdout.close()
        stderr.seek(0)
        logged = stderr.read().decode(errors='replace')
    stuck = status == -signal.SIGALRM
    if line:
        return json.loads(line), stuck
    why = (f'no result from the child (exit status {status}); its stdout:\n{before[-4000:]}\n'
           f'its stderr:\n{logged[-8000:]}')
    return {'response': None, 'copies': 0, 'error': why, 'ready': _READY in logged}, stuck


def _result_line(stream: Any, deadline: float) -> tuple[str, str]:
    """
    Read ``stream`` up to the child's result line; return (its JSON, the lines before it).

    The JSON is '' at end of file or past ``deadline``.
    """
    data = b''
    while True:
        lines = data.decode(errors='replace').split('\n')
        for at, line in enumerate(lines[:-1]):  # whole lines only
            if line.startswith(_RESULT):
                return line[len(_RESULT):], '\n'.join(lines[:at])
        ready, _, _ = select.select([stream], [], [], max(0.0, deadline - time.monotonic()))
        chunk = os.read(stream.fileno(), 65536) if ready else b''
        if not chunk:
            return '', data.decode(errors='replace')
        data += chunk


def _child(body: str, args: list[Any]) -> None:
    """Print ``_RESULT`` and ``body(*args)`` as JSON on one line, close DDS, exit."""
    faulthandler.enable(all_threads=True)  # a crash leaves its stacks on stderr
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    module, function = body.split(':')
    try:
        result = getattr(importlib.import_module(module), function)(*args)
    except BaseException as exc:  # report it as the result
        result = {'response': None, 'copies': 0, 'error': repr(exc)}
    print(_RESULT + json.dumps(result), flush=True)
    signal.alarm(_TEARDOWN_S)
    _close_dds()
    os._exit(0)


def _close_dds() -> None:
    """Destroy this process's client nodes and shut rclpy down."""
    import rclpy
    for node in _client_nodes:
        node.destroy_node()
    rclpy.try_shutdown()


if __name__ == '__main__':
    # Through the imported module, not this __main__ copy of it: a body (``_fresh_call`` or a
    # test's) records its nodes in that module's ``_client_nodes``.
    _testing = importlib.import_module(_MODULE)
    if sys.argv[1] == 'child':  # one client process of a lane
        _testing._child(sys.argv[2], json.loads(sys.argv[3]))
    else:  # one lane of fresh_client_lanes
        _prefix, _lane_id, _calls, _resend, _timeout = sys.argv[1:6]
        print(json.dumps(_testing._lane(_prefix, int(_lane_id), int(_calls), _resend == '1',
                                        float(_timeout))), flush=True)
