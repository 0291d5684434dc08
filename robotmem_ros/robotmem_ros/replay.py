"""
robotmem_replay: play the episodes of a rosbag2 directory into a running memory node.

Bags are what users record on the robot. This replays their PerceptionData messages on the
node's perception topic with the recorded timing (or scaled, or as fast as delivery allows),
and turns messages of type ``robotmem_msgs/srv/Learn_Request`` (our convention for recording
learned facts) into Learn calls, in bag order. It then waits until the node reports every
perception written, so a caller knows the episode is stored, and optionally ends the sessions
it saw (consolidation needs the whole episode, so this comes last).

The bag is read with ``rosbags`` (sqlite3 and mcap, no ROS install needed) and the raw CDR is
decoded with rclpy against the installed message types, so header stamps, the perception
times, pass through unchanged. On a full ROS install ``ros2 bag play`` does the same job.

Exit codes (docs/client.md): 0 everything stored; 1 replayed, but the node did not store
everything or a call failed; 2 usage error; 3 not a readable rosbag2 directory; 4 nothing to
replay (an empty bag, or no PerceptionData / Learn_Request messages on the selected topics);
5 the messages use another serialization format than CDR; 6 no ready memory node. Every
refusal is one line on stderr.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
import logging
import pathlib
import sys
import threading
import time
from typing import Iterable, Iterator, Sequence

import rclpy
from rclpy.duration import Duration
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.serialization import deserialize_message
from robotmem_msgs.msg import NodeStatus, PerceptionData
from robotmem_msgs.srv import Learn
from robotmem_ros.bag_types import LEARN_REQUEST_TYPE, PERCEPTION_TYPE, robotmem_typestore
from robotmem_ros.client import MemoryClient, MemoryClientError
from robotmem_ros.client.memory_client import DEFAULT_NAMESPACE
from robotmem_ros.ros_session import ros_session
from rosbags.rosbag2 import Reader, ReaderError
import yaml

log = logging.getLogger('robotmem_replay')

# Reliable publisher deep enough to hold a burst; every ACK_EVERY messages we wait until the
# node's reader acknowledged them, so an untimed replay cannot outrun a KEEP_LAST reader.
PUBLISH_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1000,
                         reliability=ReliabilityPolicy.RELIABLE,
                         durability=DurabilityPolicy.VOLATILE)
ACK_EVERY = 50
DEFAULT_TIMEOUT_S = 60.0
_MSG_CLASSES = {PERCEPTION_TYPE: PerceptionData, LEARN_REQUEST_TYPE: Learn.Request}
SERIALIZATION_FORMAT = 'cdr'

EXIT_INCOMPLETE = 1
EXIT_UNREADABLE = 3
EXIT_NOTHING_TO_REPLAY = 4
EXIT_SERIALIZATION = 5
EXIT_NO_NODE = 6


class ReplayError(RuntimeError):
    """The bag cannot be replayed or the node is absent; ``exit_code`` says which (see top)."""

    def __init__(self, message: str, exit_code: int = EXIT_UNREADABLE) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass
class BagEvent:
    """One message to replay: bag time (ns) and the decoded message."""

    time_ns: int
    topic: str
    msg: PerceptionData | Learn.Request


@dataclass
class ReplayReport:
    """What was sent and what the node confirmed."""

    perceptions_sent: int = 0
    perceptions_written: int = 0
    perceptions_lost: int = 0          # dropped or failed by the node, as its counters say
    learned: int = 0
    learn_errors: list[str] = field(default_factory=list)
    sessions: list[str] = field(default_factory=list)
    ended: dict[str, str] = field(default_factory=dict)   # session -> '' or error text
    complete: bool = False             # every perception written, every call succeeded

    def summary(self) -> str:
        """Return one line for the terminal."""
        ended = sum(1 for error in self.ended.values() if not error)
        return (f'perceptions sent {self.perceptions_sent}, written {self.perceptions_written}'
                f', lost {self.perceptions_lost}; learned {self.learned}'
                f' ({len(self.learn_errors)} failed); sessions {len(self.sessions)}'
                f', ended {ended}; {"complete" if self.complete else "INCOMPLETE"}')


class BagEpisode:
    """
    The perceptions and Learn requests of one bag, checked on open, iterated in bag order.

    ``topics`` / ``learn_topics`` restrict to those topics; empty means every connection of
    the type. A connection whose recorded type hash differs from the installed type is still
    read (rclpy decodes it or fails loudly), with a warning.
    """

    def __init__(self, bag_dir: pathlib.Path, topics: Sequence[str] = (),
                 learn_topics: Sequence[str] = ()) -> None:
        self.bag_dir = bag_dir
        topics_meta = _checked_topics(bag_dir)
        wanted = {PERCEPTION_TYPE: set(topics), LEARN_REQUEST_TYPE: set(learn_topics)}
        store = robotmem_typestore()
        try:
            with Reader(bag_dir) as reader:
                self.connections = [c for c in reader.connections if c.msgtype in wanted and (
                    not wanted[c.msgtype] or c.topic in wanted[c.msgtype])]
        except (ReaderError, OSError, ValueError, KeyError) as exc:
            raise ReplayError(f'{bag_dir} is not a readable rosbag2 bag: {exc}') from None
        if not self.connections:
            found = ', '.join(sorted({t['type'] for t in topics_meta})) or 'none'
            raise ReplayError(f'{bag_dir} has no {PERCEPTION_TYPE} or {LEARN_REQUEST_TYPE} '
                              f'messages on the selected topics (it holds: {found})',
                              EXIT_NOTHING_TO_REPLAY)
        for conn in self.connections:
            expected = store.hash_rihs01(conn.msgtype)
            if conn.digest.startswith('RIHS01_') and conn.digest != expected:
                log.warning('%s: recorded %s definition differs from the installed one '
                            '(%s != %s)', conn.topic, conn.msgtype, conn.digest, expected)

    def __iter__(self) -> Iterator[BagEvent]:
        selected = {(c.topic, c.msgtype) for c in self.connections}
        with Reader(self.bag_dir) as reader:
            connections = [c for c in reader.connections if (c.topic, c.msgtype) in selected]
            for conn, time_ns, raw in reader.messages(connections=connections):
                yield BagEvent(time_ns, conn.topic,
                               deserialize_message(bytes(raw), _MSG_CLASSES[conn.msgtype]))


def _checked_topics(bag_dir: pathlib.Path) -> list[dict]:
    """
    Read the topic list of metadata.yaml, refusing empty bags and non-CDR serialization.

    These two are told apart from the metadata itself, before the bag is opened, so each gets
    its own exit code and a line that names the cause.
    """
    meta = bag_dir / 'metadata.yaml'
    if not meta.is_file():
        raise ReplayError(f'{bag_dir} is not a rosbag2 directory (no metadata.yaml)')
    try:
        info = yaml.safe_load(meta.read_text(encoding='utf-8'))['rosbag2_bagfile_information']
        topics = [t['topic_metadata'] for t in info.get('topics_with_message_count') or []]
        count = int(info.get('message_count') or 0)
    except (yaml.YAMLError, OSError, UnicodeDecodeError, KeyError, TypeError,
            ValueError) as exc:
        raise ReplayError(f'{bag_dir}: unreadable metadata.yaml ({exc})') from None
    if not count:
        raise ReplayError(f'{bag_dir} is empty (no messages)', EXIT_NOTHING_TO_REPLAY)
    ours = [t for t in topics if t.get('type') in _MSG_CLASSES] or topics
    formats = {t.get('serialization_format', SERIALIZATION_FORMAT) for t in ours}
    if formats != {SERIALIZATION_FORMAT}:
        raise ReplayError(f'{bag_dir} uses serialization format {", ".join(sorted(formats))}; '
                          f'robotmem_replay reads {SERIALIZATION_FORMAT} only',
                          EXIT_SERIALIZATION)
    return topics


class Replayer:
    """Plays bag events into one memory node through a publisher and a MemoryClient."""

    def __init__(self, node: Node, namespace: str = DEFAULT_NAMESPACE,
                 rate: float | None = 1.0, session_id: str = '',
                 timeout: float = DEFAULT_TIMEOUT_S, perception_topic: str = '') -> None:
        if rate is not None and rate <= 0:
            raise ValueError(f'rate must be > 0, got {rate}')
        self.rate = rate
        self.session_id = session_id
        self.timeout = timeout
        self.client = MemoryClient(node, namespace, timeout=timeout)
        self._publisher = node.create_publisher(
            PerceptionData, perception_topic or self.client.perception_topic,
            PUBLISH_QOS)

    def run(self, events: Iterable[BagEvent], end_sessions: bool = False) -> ReplayReport:
        """Replay ``events``; wait for the node to store them; optionally end their sessions."""
        if not self.client.wait_ready(self.timeout):
            raise ReplayError(f'no ready memory node under {self.client.namespace}',
                              EXIT_NO_NODE)
        self._wait_subscribed()
        before = self.client.status
        report = ReplayReport()
        start_wall = time.monotonic()
        first_ns: int | None = None
        for event in events:
            first_ns = event.time_ns if first_ns is None else first_ns
            self._sleep_until(start_wall, (event.time_ns - first_ns) / 1e9)
            if self.session_id:
                event.msg.session_id = self.session_id
            if event.msg.session_id and event.msg.session_id not in report.sessions:
                report.sessions.append(event.msg.session_id)
            if isinstance(event.msg, PerceptionData):
                self._publish(event.msg, report)
            else:
                self._learn(event.msg, report)
        self._wait_stored(before, report)
        if end_sessions:
            for session in report.sessions:
                report.ended[session] = self._end(session)
        report.complete = (report.perceptions_written >= report.perceptions_sent
                           and not report.learn_errors and not any(report.ended.values()))
        return report

    def _wait_subscribed(self) -> None:
        deadline = time.monotonic() + self.timeout
        while self._publisher.get_subscription_count() == 0:
            if time.monotonic() > deadline:
                raise ReplayError(f'nobody subscribes to {self._publisher.topic_name}',
                                  EXIT_NO_NODE)
            time.sleep(0.05)

    def _sleep_until(self, start_wall: float, bag_offset_s: float) -> None:
        if self.rate is not None:
            delay = start_wall + bag_offset_s / self.rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)

    def _publish(self, msg: PerceptionData, report: ReplayReport) -> None:
        self._publisher.publish(msg)
        report.perceptions_sent += 1
        if report.perceptions_sent % ACK_EVERY == 0:
            self._publisher.wait_for_all_acked(Duration(seconds=self.timeout))

    def _learn(self, req: Learn.Request, report: ReplayReport) -> None:
        try:
            self.client.learn(req.insight, req.context, req.collection, req.session_id)
            report.learned += 1
        except MemoryClientError as exc:
            report.learn_errors.append(str(exc))
            log.warning('learn failed: %s', exc)

    def _wait_stored(self, before: NodeStatus, report: ReplayReport) -> None:
        """Wait until the node's counters account for every perception sent."""
        def progress(status: NodeStatus) -> tuple[int, int]:
            written = status.perception_written - before.perception_written
            lost = (status.perception_dropped - before.perception_dropped
                    + status.perception_failed - before.perception_failed)
            return written, lost

        self.client.wait_status(lambda s: sum(progress(s)) >= report.perceptions_sent,
                                self.timeout)
        report.perceptions_written, report.perceptions_lost = progress(self.client.status)

    def _end(self, session: str) -> str:
        try:
            self.client.end_session(session)
            return ''
        except MemoryClientError as exc:
            log.warning('end_session %s failed: %s', session, exc)
            return str(exc)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Command line of robotmem_replay (ROS arguments already removed)."""
    parser = argparse.ArgumentParser(
        prog='robotmem_replay', description=__doc__.split('\n\n')[0].strip())
    parser.add_argument('bag_dir', type=pathlib.Path, help='rosbag2 directory (sqlite3 or mcap)')
    timing = parser.add_mutually_exclusive_group()
    timing.add_argument('--rate', type=float, default=1.0,
                        help='playback speed factor of the recorded timing (default 1.0)')
    timing.add_argument('--no-timing', action='store_true',
                        help='publish as fast as the node acknowledges')
    parser.add_argument('--topic', action='append', default=[],
                        help='recorded PerceptionData topic(s) to play, e.g. /perception '
                        '(default: all of that type)')
    parser.add_argument('--learn-topic', action='append', default=[],
                        help=f'{LEARN_REQUEST_TYPE} topic(s) to call Learn with '
                        '(default: all of that type)')
    parser.add_argument('--namespace', default=DEFAULT_NAMESPACE,
                        help='services/topics prefix of the memory node (default /robotmem)')
    parser.add_argument('--perception-topic', default='',
                        help='topic the node subscribes to (default: perception next to '
                        'the node, /perception for /robotmem)')
    parser.add_argument('--session-id', default='',
                        help='store everything under this session instead of the recorded ones')
    parser.add_argument('--end-session', action='store_true',
                        help='call EndSession for every session seen, after all is stored')
    parser.add_argument('--timeout', type=float, default=DEFAULT_TIMEOUT_S,
                        help='seconds to wait for the node, each call and the final write')
    return parser.parse_args(argv)


def _spin(executor: SingleThreadedExecutor, stop: threading.Event) -> None:
    """Spin until ``stop``; the main thread publishes and blocks on client calls meanwhile."""
    while not stop.is_set():
        executor.spin_once(timeout_sec=0.1)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; exit codes as listed at the top of this module."""
    logging.basicConfig(level=logging.INFO, format='[robotmem_replay] %(message)s')
    argv = list(sys.argv if argv is None else argv)
    args = parse_args(rclpy.utilities.remove_ros_args(argv)[1:])
    try:
        episode = BagEpisode(args.bag_dir, args.topic, args.learn_topic)
    except ReplayError as exc:
        log.error('%s', exc)
        return exc.exit_code
    with ros_session(argv):
        node = rclpy.create_node('robotmem_replay')
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        stop = threading.Event()
        spinner = threading.Thread(target=_spin, args=(executor, stop))
        spinner.start()
        try:
            replayer = Replayer(node, args.namespace, None if args.no_timing else args.rate,
                                args.session_id, args.timeout, args.perception_topic)
            report = replayer.run(episode, end_sessions=args.end_session)
        except ReplayError as exc:
            log.error('%s', exc)
            return exc.exit_code
        finally:
            stop.set()
            spinner.join()
            executor.shutdown()
            node.destroy_node()
    print(report.summary())
    return 0 if report.complete else EXIT_INCOMPLETE


if __name__ == '__main__':
    sys.exit(main())
