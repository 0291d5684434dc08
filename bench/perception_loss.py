"""
Perceptions lost when the memory node is killed (SIGKILL) in the middle of a stream.

For each (rate, batch size, flush interval) a fresh node on a fresh database receives a paced
stream; after ``--kill-after`` seconds the node is killed with SIGKILL while the publisher keeps
going. Reported per round: messages published before the kill, rows stored after it, the loss
(published − stored), and the largest node backlog (received − written) seen in ~/status, which
is what a crash can lose inside the node. docs/reliability.md states the bound from these runs.

    python bench/perception_loss.py [--rates 200,1000,2000] [--batch-sizes 200]
                                    [--flush-intervals 0.5] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import signal
import tempfile
import threading
import time
from typing import Any, Sequence

from bench_ingest import Client, Node, qos_profile, READY_TIMEOUT_S, wait
from common import print_table, RESULTS_DIR, write_run


def stream(client: Client, topic: str, rate: float, stop: threading.Event,
           sent: list[int]) -> None:
    """Publish at ``rate``/s until ``stop``; ``sent[0]`` counts what went out."""
    from robotmem_msgs.msg import PerceptionData
    pub = client.node.create_publisher(PerceptionData, topic, qos_profile('reliable', 1000))
    msg = PerceptionData(perception_type='vision', session_id='loss')
    start = time.monotonic()
    while not stop.is_set():
        if sent[0] >= (time.monotonic() - start) * rate:
            time.sleep(0.0005)
            continue
        msg.seq = sent[0] + 1
        msg.description = f'object {msg.seq % 997} seen in bin {msg.seq % 13}'
        pub.publish(msg)
        sent[0] += 1
    client.node.destroy_publisher(pub)


def run_round(work: pathlib.Path, rate: float, batch: int, flush: float,
              args: argparse.Namespace, index: int) -> dict[str, Any]:
    """One node, one stream, one SIGKILL."""
    tag = f'r{int(rate)}_b{batch}_f{flush:g}_{index}'
    client = Client()
    node = Node(work / f'{tag}.db', work / f'{tag}.log', embed_backend='none',
                perception_batch_size=batch, perception_flush_interval=flush,
                status_period=0.2)
    backlog = [0]

    def on_status(msg: Any) -> None:
        client.status = msg
        backlog[0] = max(backlog[0], msg.perception_received - msg.perception_written)

    from robotmem_msgs.msg import NodeStatus
    from robotmem_ros.wire import LATCHED
    sub = client.node.create_subscription(NodeStatus, f'{node.namespace}/robotmem/status',
                                          on_status, LATCHED)
    stop, sent = threading.Event(), [0]
    try:
        if not wait(lambda: client.status is not None and client.status.ready, READY_TIMEOUT_S):
            raise RuntimeError('node not ready')
        topic = f'{node.namespace}/perception'
        thread = threading.Thread(target=stream, args=(client, topic, rate, stop, sent))
        thread.start()
        time.sleep(args.kill_after)
        published = sent[0]
        node.proc.send_signal(signal.SIGKILL)
        node.proc.wait()
        stop.set()
        thread.join()
        written = client.status.perception_written
    finally:
        client.node.destroy_subscription(sub)
        node.stop()
        client.close()
    rows = node.rows()
    return {'rate': rate, 'batch_size': batch, 'flush_interval': flush, 'round': index,
            'published_before_kill': published, 'written_reported': written, 'stored': rows,
            'lost': published - rows, 'max_node_backlog': backlog[0],
            'bound_min_rF_B': min(rate * flush, batch)}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--rates', default='200,1000,2000')
    parser.add_argument('--batch-sizes', default='200')
    parser.add_argument('--flush-intervals', default='0.5')
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--kill-after', type=float, default=5.0)
    parser.add_argument('--results', type=pathlib.Path, default=RESULTS_DIR)
    parser.add_argument('--name', default='perception_loss')
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run every case ``--rounds`` times and write NAME.json."""
    args = parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix='robotmem-loss-') as tmp:
        for rate in (float(r) for r in args.rates.split(',')):
            for batch in (int(b) for b in args.batch_sizes.split(',')):
                for flush in (float(f) for f in args.flush_intervals.split(',')):
                    for index in range(args.rounds):
                        rows.append(run_round(pathlib.Path(tmp), rate, batch, flush, args,
                                              index))
                        print(f'rate {rate:g} batch {batch} flush {flush:g} round {index}: '
                              f'lost {rows[-1]["lost"]}', flush=True)
    print_table(f'perceptions lost on SIGKILL after {args.kill_after:g} s of stream '
                f'(load {os.getloadavg()[0]:.1f})',
                ['rate/s', 'batch', 'flush s', 'published', 'written (status)', 'stored',
                 'lost', 'max node backlog', 'min(R*F, B)'],
                [[r['rate'], r['batch_size'], r['flush_interval'], r['published_before_kill'],
                  r['written_reported'], r['stored'], r['lost'], r['max_node_backlog'],
                  r['bound_min_rF_B']] for r in rows])
    return write_run(args, rounds=rows)


if __name__ == '__main__':
    raise SystemExit(main())
