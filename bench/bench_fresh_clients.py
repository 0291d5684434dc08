"""
Fresh-client calls: how often DDS loses a service answer, and whether a caller ever notices.

N worker processes each make ``--calls`` calls (Learn and Recall alternating) against one
memory node, every call from a client process of its own (forked: a new DDS participant, node
and client that call at once) — the case in which the node's response writer may not yet be
matched with the client's response reader, so the answer is lost although the request ran.
Each call goes through the client library's re-send loop (``robotmem_ros.client.resend``,
what MemoryClient uses) and reports how many copies it took; ``--no-resend`` sends one copy
and waits the whole timeout, which measures the raw loss rate. Reported: unanswered calls
(copies sent, none answered: what re-sending must bring to 0), calls whose new participant
never saw the server within the timeout (discovery, no request sent), client processes that
failed, calls that needed a second copy, Learn copies that the node applied twice (must be
0), "failed to send response" lines in the node log.

    python bench/bench_fresh_clients.py [--workers 8] [--calls 250] [--no-resend]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import select
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from typing import Any, Sequence

from bench_ingest import Node, READY_TIMEOUT_S
from common import PACKAGE_DIR, print_table, write_result

CALL_TIMEOUT_S = 30.0
ATTEMPT_S = 1.0
CHILD_GRACE_S = 30.0  # start-up of a client process, beyond the call's own timeout


def worker(prefix: str, worker_id: int, calls: int, resend: bool) -> dict[str, Any]:
    """Make ``calls`` calls, each from a client process of its own; gather what they saw."""
    import rclpy  # noqa: F401  imported once here, so each forked client starts at once
    import robotmem_msgs.srv  # noqa: F401
    import robotmem_ros.client.resend  # noqa: F401
    copies_needed: list[int] = []
    misses = {'unanswered': 0, 'no_server_seen': 0, 'client_failed': 0}
    learned: dict[str, int] = {}  # facts the node said it created
    for i in range(calls):
        outcome = _in_child(lambda: one_call(prefix, worker_id, i, resend))
        if outcome is None or 'error' in outcome:
            misses['client_failed'] += 1
            continue
        if outcome['response'] is None:  # copies sent and none answered, or none could be
            misses['unanswered' if outcome['copies'] else 'no_server_seen'] += 1
            continue
        copies_needed.append(outcome['copies'])
        if outcome['response'].get('status') == 'created':
            learned[outcome['insight']] = outcome['response']['memory_id']
    return {**misses, 'copies': copies_needed, 'learned': learned}


def one_call(prefix: str, worker_id: int, i: int, resend: bool) -> dict[str, Any]:
    """Create a participant, a node and a client, and call at once (Learn or Recall)."""
    import rclpy
    from robotmem_msgs.srv import Learn, Recall
    from robotmem_ros.client.resend import send_until_answered, stamp_request_id
    from robotmem_ros.client.waiting import Waiter

    rclpy.init()
    node = rclpy.create_node(f'fresh_client_{worker_id}_{os.getpid()}')
    insight = f'worker {worker_id} call {i}: fresh clients lose answers sometimes'
    if i % 2 == 0:
        client = node.create_client(Learn, f'{prefix}/learn')
        request = stamp_request_id(Learn.Request(insight=insight))
    else:
        client = node.create_client(Recall, f'{prefix}/recall')
        request = Recall.Request(query=f'worker {worker_id} fresh clients')
    attempt = ATTEMPT_S if resend else CALL_TIMEOUT_S
    response, copies = send_until_answered(
        client, request, Waiter(node), time.monotonic() + CALL_TIMEOUT_S, attempt)
    answer = None if response is None else {
        'status': getattr(response, 'status', ''), 'memory_id': getattr(response, 'memory_id', 0)}
    return {'response': answer, 'copies': copies, 'insight': insight}


def _in_child(body: Any) -> dict[str, Any] | None:
    """
    Run ``body`` in a forked process that exits without tearing DDS down; return its result.

    A fresh process per call is what the lost-answer race needs (participant and endpoint
    discovery under way during the first request). Creating and destroying hundreds of
    participants inside one process instead deadlocked Fast DDS 3.2 in DataWriter teardown
    under load, so the child leaves with ``os._exit`` and the kernel cleans up.
    """
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            payload = json.dumps(body()).encode()
        except BaseException as exc:  # report, never fall back into the parent's loop
            payload = json.dumps({'response': None, 'copies': 0, 'error': repr(exc)}).encode()
        os.write(write_end, payload)
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, 'rb') as pipe:
        ready, _, _ = select.select([pipe], [], [], CALL_TIMEOUT_S + CHILD_GRACE_S)
        data = pipe.read() if ready else b''
    if not ready:
        os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return json.loads(data) if data else None


def run(workers: int, calls: int, resend: bool, work: pathlib.Path) -> dict[str, Any]:
    """Start a node and the worker processes; gather and check their results."""
    node = Node(work / 'memory.db', work / 'node.log')
    env = dict(os.environ)
    here = pathlib.Path(__file__).resolve().parent
    env['PYTHONPATH'] = os.pathsep.join([str(PACKAGE_DIR), str(here),
                                         env.get('PYTHONPATH', '')])
    prefix = f'{node.namespace}/robotmem'
    try:
        _wait_ready(prefix)
        started = time.monotonic()
        procs = [subprocess.Popen(
            [sys.executable, __file__, '--worker', prefix, str(w), str(calls),
             '1' if resend else '0'], env=env, stdout=subprocess.PIPE, text=True)
            for w in range(workers)]
        results = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
        elapsed = time.monotonic() - started
    finally:
        node.stop()
    copies = [c for r in results for c in r['copies']]
    learned = {text: mid for r in results for text, mid in r['learned'].items()}
    with sqlite3.connect(f'file:{node.db_path}?mode=ro', uri=True) as conn:
        rows = dict(conn.execute("SELECT content, COUNT(*) FROM memories WHERE type = 'fact' "
                                 'GROUP BY content').fetchall())
    log = (work / 'node.log').read_text(errors='replace')
    return {'workers': workers, 'calls': workers * calls, 'resend': resend,
            'unanswered': sum(r['unanswered'] for r in results),
            'no_server_seen': sum(r['no_server_seen'] for r in results),
            'client_failed': sum(r['client_failed'] for r in results),
            'needed_second_copy': sum(1 for c in copies if c > 1),
            'max_copies': max(copies, default=0),
            'learn_created': len(learned),
            'learn_rows_twice': sum(1 for text in learned if rows.get(text, 0) > 1),
            'learn_rows_missing': sum(1 for text in learned if rows.get(text, 0) == 0),
            'failed_to_send_response_logged': log.count('failed to send response'),
            'seconds': round(elapsed, 1)}


def _wait_ready(prefix: str) -> None:
    """Block until the node's services answer (a throwaway client in this process)."""
    import rclpy
    from robotmem_ros.client import MemoryClient
    rclpy.init()
    try:
        node = rclpy.create_node('fresh_client_bench_probe')
        if not MemoryClient(node, namespace=prefix).wait_ready(READY_TIMEOUT_S):
            raise SystemExit('memory node did not become ready')
        node.destroy_node()
    finally:
        rclpy.shutdown()


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--workers', type=int, default=8)
    parser.add_argument('--calls', type=int, default=250, help='calls per worker')
    parser.add_argument('--no-resend', action='store_true',
                        help='one copy per call: measures the raw loss rate')
    parser.add_argument('--smoke', action='store_true', help='2 workers x 10 calls')
    parser.add_argument('--worker', nargs=4, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        prefix, worker_id, calls, resend = args.worker
        print(json.dumps(worker(prefix, int(worker_id), int(calls), resend == '1')), flush=True)
        return 0
    workers, calls = (2, 10) if args.smoke else (args.workers, args.calls)
    with tempfile.TemporaryDirectory(prefix='robotmem_fresh_') as tmp:
        result = run(workers, calls, not args.no_resend, pathlib.Path(tmp))
    print_table('Fresh-client calls', list(result), [list(result.values())])
    if not args.smoke:
        name = 'fresh_clients' + ('' if result['resend'] else '_no_resend')
        print('wrote', write_result(name, {'result': result}))
    return 0 if result['unanswered'] == 0 and result['learn_rows_twice'] == 0 else 1


if __name__ == '__main__':
    sys.exit(main())
