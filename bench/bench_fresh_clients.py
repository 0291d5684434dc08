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
never saw the server within the timeout (discovery, no request sent: what the node's Fast DDS
profile, robotmem_ros/node/middleware.py, brought from about 5 % to 0), client processes that
failed, calls that needed a second copy, Learn copies that the node applied twice (must be
0), "failed to send response" lines in the node log, and what the first failures saw.

    python bench/bench_fresh_clients.py [--workers 8] [--calls 250] [--no-resend]
"""

from __future__ import annotations

import argparse
import pathlib
import sqlite3
import sys
import tempfile
import time
from typing import Any, Sequence

from bench_ingest import Node, READY_TIMEOUT_S
from common import print_table, write_result
from robotmem_ros.testing import fresh_client_lanes


def run(workers: int, calls: int, resend: bool, work: pathlib.Path) -> dict[str, Any]:
    """Start a node and the worker processes; gather and check their results."""
    node = Node(work / 'memory.db', work / 'node.log')
    prefix = f'{node.namespace}/robotmem'
    try:
        _wait_ready(prefix)
        started = time.monotonic()
        results = fresh_client_lanes(prefix, workers, calls, resend)
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
            'teardown_stuck': sum(r['teardown_stuck'] for r in results),
            'setup_stuck': sum(r['setup_stuck'] for r in results),
            'needed_second_copy': sum(1 for c in copies if c > 1),
            'max_copies': max(copies, default=0),
            'learn_created': len(learned),
            'learn_rows_twice': sum(1 for text in learned if rows.get(text, 0) > 1),
            'learn_rows_missing': sum(1 for text in learned if rows.get(text, 0) == 0),
            'failed_to_send_response_logged': log.count('failed to send response'),
            'seconds': round(elapsed, 1),
            'failures': [f for r in results for f in r['failures']][:20],
            'setup_failures': [f for r in results for f in r['setup_failures']][:20]}


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
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    workers, calls = (2, 10) if args.smoke else (args.workers, args.calls)
    with tempfile.TemporaryDirectory(prefix='robotmem_fresh_') as tmp:
        result = run(workers, calls, not args.no_resend, pathlib.Path(tmp))
    table = {k: v for k, v in result.items() if k not in ('failures', 'setup_failures')}
    print_table('Fresh-client calls', list(table), [list(table.values())])
    for failure in result['failures']:
        print('failed call:', failure)
    for failure in result['setup_failures']:
        print('client process that never called (made again):', failure)
    if not args.smoke:
        name = 'fresh_clients' + ('' if result['resend'] else '_no_resend')
        print('wrote', write_result(name, {'result': result}))
    missed = result['unanswered'] + result['no_server_seen'] + result['client_failed']
    return 0 if missed == 0 and result['learn_rows_twice'] == 0 else 1


if __name__ == '__main__':
    sys.exit(main())
