"""
Perception ingest through real DDS into the memory node subprocess: rate and loss.

For each QoS (and publish rate; 0 = as fast as rclpy publishes) a fresh node is started on a
fresh database, a publisher streams PerceptionData to ``<ns>/perception`` for ``--seconds``,
then the run waits until the stored row count stops growing. Reported: messages published per
second, rows stored per second over publish + drain time, end-to-end loss (published vs rows in
the DB) and the node's own counters (received / dropped by its bounded buffer).

    python bench/bench_ingest.py [--seconds 30] [--qos reliable,best_effort] [--rates 500,1000,0]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import sqlite3
import tempfile
import threading
import time
from typing import Any, Sequence

from common import print_table, RESULTS_DIR, write_run
from robotmem_ros.config import MemoryConfig
from robotmem_ros.testing import NodeSubprocess

os.environ.setdefault('ROS_DOMAIN_ID', str(random.Random(os.getpid()).randint(101, 200)))
os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'

READY_TIMEOUT_S = 60.0
DRAIN_QUIET_S = 3.0
DRAIN_MAX_S = 120.0


class Node(NodeSubprocess):
    """The memory node as a subprocess under a unique namespace."""

    def __init__(self, db_path: pathlib.Path, log_path: pathlib.Path, **params: Any) -> None:
        super().__init__(db_path, log_path, ns_prefix='bench', **params)

    def rows(self) -> int:
        """Perception rows in the node's database (read-only connection)."""
        try:
            with sqlite3.connect(f'file:{self.db_path}?mode=ro', uri=True, timeout=5) as conn:
                return conn.execute('SELECT COUNT(*) FROM memories '
                                    "WHERE type = 'perception'").fetchone()[0]
        except sqlite3.OperationalError:
            return 0


class Client:
    """Rclpy node spinning in a thread: publishes perceptions, watches the node's status."""

    def __init__(self) -> None:
        import rclpy
        from rclpy.executors import SingleThreadedExecutor
        self.rclpy = rclpy
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node(f'robotmem_bench_{os.getpid()}', context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.status: Any = None
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        while self.context.ok():
            try:
                self.executor.spin_once(timeout_sec=0.1)
            except Exception:  # noqa: BLE001 - context shut down while spinning
                return

    def watch_status(self, namespace: str) -> Any:
        """Keep the latest NodeStatus of the node in ``self.status``."""
        from robotmem_msgs.msg import NodeStatus
        from robotmem_ros.wire import LATCHED
        self.status = None
        return self.node.create_subscription(
            NodeStatus, f'{namespace}/robotmem/status',
            lambda msg: setattr(self, 'status', msg), LATCHED)

    def close(self) -> None:
        """Stop the spin thread (its next wait raises once shut down), then tear down."""
        self.executor.shutdown()
        self._thread.join(timeout=5)
        self.node.destroy_node()
        self.rclpy.shutdown(context=self.context)


def wait(predicate: Any, timeout: float) -> bool:
    """Poll until true or the hang guard expires."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


def qos_profile(name: str, depth: int) -> Any:
    """Return the publisher QoS matching the node's perception_qos parameter."""
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    reliability = (ReliabilityPolicy.RELIABLE if name == 'reliable'
                   else ReliabilityPolicy.BEST_EFFORT)
    return QoSProfile(depth=depth, reliability=reliability)


def publish_for(client: Client, topic: str, qos: Any, seconds: float, rate: float) -> int:
    """Stream perceptions for ``seconds`` (paced at ``rate``/s when > 0); return the count."""
    from robotmem_msgs.msg import PerceptionData
    pub = client.node.create_publisher(PerceptionData, topic, qos)
    if not wait(lambda: pub.get_subscription_count() > 0, READY_TIMEOUT_S):
        raise RuntimeError(f'no subscriber on {topic}')
    msg = PerceptionData(perception_type='vision', session_id='bench', collection='perception')
    msg.header.frame_id = 'bench_camera'
    start = time.monotonic()
    sent = 0
    while True:
        now = time.monotonic()
        if now - start >= seconds:
            break
        if rate > 0 and sent >= (now - start) * rate:
            time.sleep(min(0.001, 1.0 / rate))
            continue
        sent += 1
        msg.seq = sent
        msg.description = f'object {sent % 997} seen in bin {sent % 13} at {sent % 360} deg'
        msg.data = json.dumps({'bin': sent % 13, 'score': (sent % 100) / 100})
        stamp = time.time()
        msg.header.stamp.sec = int(stamp)
        msg.header.stamp.nanosec = int((stamp % 1) * 1e9)
        _publish_with_backoff(pub, msg)
    client.node.destroy_publisher(pub)
    return sent


def _publish_with_backoff(pub: Any, msg: Any) -> None:
    """
    Publish, waiting while a RELIABLE writer's history is full of unacknowledged samples.

    Fast DDS refuses the write ("cannot publish data") once its blocking time runs out; a real
    sensor driver would back off too, and the message then counts as published when it goes.
    """
    from rclpy._rclpy_pybind11 import RCLError
    while True:
        try:
            pub.publish(msg)
            return
        except RCLError:
            time.sleep(0.005)


def run_case(client: Client, work: pathlib.Path, qos: str, rate: float,
             args: argparse.Namespace) -> dict[str, Any]:
    """One node, one stream, one result row."""
    tag = f'{qos}_{int(rate)}'
    node = Node(work / f'{tag}.db', work / f'{tag}.log', embed_backend=args.embed_backend,
                perception_qos=qos, perception_depth=args.depth,
                perception_batch_size=args.batch_size, status_period=1.0)
    sub = client.watch_status(node.namespace)
    try:
        if not wait(lambda: client.status is not None and client.status.ready, READY_TIMEOUT_S):
            raise RuntimeError('node not ready:\n' + (work / f'{tag}.log').read_text()[-2000:])
        start = time.monotonic()
        published = publish_for(client, f'{node.namespace}/perception',
                                qos_profile(qos, args.depth), args.seconds, rate)
        publish_s = time.monotonic() - start
        last, last_change = -1, time.monotonic()
        while time.monotonic() - last_change < DRAIN_QUIET_S and \
                time.monotonic() - start < args.seconds + DRAIN_MAX_S:
            rows = node.rows()
            if rows != last:
                last, last_change = rows, time.monotonic()
            if rows >= published:
                break
            time.sleep(0.2)
        total_s = (last_change if last < published else time.monotonic()) - start
        status = client.status
    finally:
        client.node.destroy_subscription(sub)
        node.stop()
    rows = node.rows()
    return {'qos': qos, 'target_rate': rate, 'depth': args.depth, 'published': published,
            'publish_rate': published / publish_s, 'rows': rows,
            'stored_rate': rows / total_s, 'seconds_to_store': total_s,
            'loss': 1.0 - rows / published if published else float('nan'),
            'node_received': status.perception_received, 'node_written':
                status.perception_written, 'node_dropped': status.perception_dropped,
            'node_failed': status.perception_failed}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--seconds', type=float, default=30.0, help='publish window per case')
    parser.add_argument('--qos', default='reliable,best_effort')
    parser.add_argument('--rates', default='500,1000,0',
                        help='publish rates /s, 0 = unthrottled')
    parser.add_argument('--depth', type=int, default=MemoryConfig().perception_depth,
                        help='KEEP_LAST depth on both ends (default: the node default)')
    parser.add_argument('--batch-size', type=int, default=200)
    parser.add_argument('--embed-backend', default='none', choices=('none', 'onnx'))
    parser.add_argument('--results', type=pathlib.Path, default=RESULTS_DIR)
    parser.add_argument('--name', default='ingest')
    parser.add_argument('--smoke', action='store_true', help='3 s per case, one rate')
    args = parser.parse_args(argv)
    if args.smoke:
        args.seconds, args.rates = min(args.seconds, 3.0), '0'
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run every (QoS, rate) case and write NAME.json."""
    args = parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix='robotmem-ingest-') as tmp:
        for qos in args.qos.split(','):
            for rate in (float(r) for r in args.rates.split(',')):
                # A fresh participant per case: a flooded reliable writer keeps its DDS
                # threads busy after the publisher is gone and would slow the next case.
                client = Client()
                try:
                    rows.append(run_case(client, pathlib.Path(tmp), qos, rate, args))
                finally:
                    client.close()
                print(f'{qos} rate {rate:g}: done', flush=True)
    print_table(f'perception ingest through DDS ({args.seconds:g} s per case, depth '
                f'{args.depth}, embed_backend {args.embed_backend})',
                ['qos', 'target/s', 'published', 'pub/s', 'rows', 'stored/s', 'loss',
                 'node recv', 'node dropped'],
                [[r['qos'], r['target_rate'] or 'max', r['published'], r['publish_rate'],
                  r['rows'], r['stored_rate'], r['loss'], r['node_received'],
                  r['node_dropped']] for r in rows])
    return write_run(args, cases=rows)


if __name__ == '__main__':
    raise SystemExit(main())
