"""
Fresh-client calls: how often DDS loses a service answer, and whether a caller ever notices.

N worker processes each make ``--calls`` calls (Learn and Recall alternating) against one
memory node, every call through a brand-new rclpy service client created just before it —
the case in which the node's response writer may not yet be matched with the client's
response reader, so the answer is lost although the request ran. Each call goes through the
client library's re-send loop (``robotmem_ros.client.resend``, what MemoryClient uses) and
reports how many copies it took; ``--no-resend`` sends one copy and waits the whole timeout,
which measures the raw loss rate. Reported: unanswered calls, calls that needed a second copy,
Learn copies that the node applied twice (must be 0), "failed to send response" lines in the
node log.

    python bench/bench_fresh_clients.py [--workers 8] [--calls 250] [--no-resend]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
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


def worker(prefix: str, worker_id: int, calls: int, resend: bool) -> dict[str, Any]:
    """Make ``calls`` fresh-client calls; return counts of copies and unanswered calls."""
    import rclpy
    from robotmem_msgs.srv import Learn, Recall
    from robotmem_ros.client.resend import send_until_answered, stamp_request_id
    from robotmem_ros.client.waiting import Waiter

    rclpy.init()
    node = rclpy.create_node(f'fresh_client_{worker_id}_{os.getpid()}')
    waiter = Waiter(node)
    copies_needed: list[int] = []
    unanswered = 0
    learned: dict[str, int] = {}
    for i in range(calls):
        srv, name = (Learn, 'learn') if i % 2 == 0 else (Recall, 'recall')
        client = node.create_client(srv, f'{prefix}/{name}')
        if srv is Learn:
            text = f'worker {worker_id} call {i}: fresh clients lose answers sometimes'
            request = stamp_request_id(Learn.Request(insight=text))
        else:
            request = Recall.Request(query=f'worker {worker_id} fresh clients')
        attempt = ATTEMPT_S if resend else CALL_TIMEOUT_S
        response, copies = send_until_answered(
            client, request, waiter, time.monotonic() + CALL_TIMEOUT_S, attempt)
        node.destroy_client(client)
        if response is None:
            unanswered += 1
            continue
        copies_needed.append(copies)
        if srv is Learn:
            learned[request.insight] = response.memory_id
    node.destroy_node()
    rclpy.shutdown()
    return {'unanswered': unanswered, 'copies': copies_needed, 'learned': learned}


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
            'needed_second_copy': sum(1 for c in copies if c > 1),
            'max_copies': max(copies, default=0),
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
