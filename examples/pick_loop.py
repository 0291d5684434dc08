#!/usr/bin/env python3
"""
A manipulation node that learns grip forces across picks, using robotmem through MemoryClient.

Before each pick it recalls "how to grasp <object>" among this robot's *successful* grasps and
reuses the remembered grip force (else explores around a default); it "executes" the grasp in a
small simulation, publishes what it perceived, learns the outcome with its context (task,
params, spatial) and, after the last pick, ends the session. Run it twice: the second run finds
the forces that worked in the first.

    make run                                  # terminal 1: the memory node
    source scripts/ros_env.sh                 # terminal 2
    python examples/pick_loop.py --objects red_mug blue_block --rounds 3

The picks run in a timer callback of a node spun by a MultiThreadedExecutor: the client's
blocking calls are safe there (with a SingleThreadedExecutor they would raise instead).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading

import rclpy
from rclpy.executors import MultiThreadedExecutor
from rclpy.node import Node
from robotmem_msgs.msg import PerceptionData
from robotmem_ros.client import MemoryClient, MemoryClientError
from robotmem_ros.ros_session import ros_session

DEFAULT_FORCE_N = 10.0
# Hidden truth of the simulation: grip forces (N) that hold each object without crushing it.
GOOD_FORCE_N = {'red_mug': (11.0, 14.0), 'blue_block': (6.0, 9.0), 'glass': (4.0, 5.5)}


class PickLoop(Node):
    """Picks each object ``rounds`` times, learning which grip force works."""

    def __init__(self, robot: str, objects: list[str], rounds: int, namespace: str,
                 seed: int) -> None:
        super().__init__('pick_loop')
        self.robot = robot
        self.queue = [obj for _ in range(rounds) for obj in objects]
        self.rng = random.Random(seed)
        self.memory = MemoryClient(self, namespace)
        self.perceptions = self.create_publisher(PerceptionData, self.memory.perception_topic,
                                                 100)
        self.session_id = ''
        self.seq = 0
        self.successes = 0
        self.finished = threading.Event()
        self.exit_code = 0
        self.timer = self.create_timer(0.2, self.step)

    def step(self) -> None:
        """One pick per tick; a MemoryClientError ends the loop with a clear message."""
        try:
            if not self.session_id:
                self.start()
            elif self.queue:
                self.pick(self.queue.pop(0))
            else:
                self.finish()
        except MemoryClientError as exc:
            self.get_logger().error(f'memory: {exc}')
            self.exit_code = 1
            self.finished.set()

    def start(self) -> None:
        """Wait for the memory node, then open this run's episode."""
        if not self.memory.wait_ready(30.0):
            raise MemoryClientError('status', f'no memory node under {self.memory.namespace}')
        session = self.memory.start_session({'robot': self.robot, 'task': 'pick'})
        self.session_id = session.session_id
        self.get_logger().info(f'session {self.session_id} '
                               f'({session.active_memories_count} memories available)')

    def grip_force(self, obj: str) -> tuple[float, str]:
        """Force from the best-ranked successful grasp of ``obj`` by this robot, else explore."""
        found = self.memory.recall(f'how to grasp {obj}', n=5, min_confidence=0.0,
                                   context_filter={'robot': self.robot, 'task.success': True,
                                                   'task.object': obj})
        for memory in found.memories:
            force = memory.context.get('params', {}).get('grip_force')
            if force is not None:
                return float(force), f'memory #{memory.id}'
        return DEFAULT_FORCE_N + self.rng.uniform(-6.0, 6.0), 'exploring'

    def pick(self, obj: str) -> None:
        """Choose a force, simulate the grasp, perceive and learn its outcome."""
        force, source = self.grip_force(obj)
        position = [round(self.rng.uniform(0.3, 0.6), 3), round(self.rng.uniform(-0.2, 0.2), 3),
                    0.02]
        self.perceive(f'{obj} detected on the table', 'visual', {'position': position})
        low, high = GOOD_FORCE_N.get(obj, (8.0, 12.0))
        success = low <= force <= high
        outcome = 'held' if success else ('slipped' if force < low else 'crushed')
        self.perceive(f'gripper closed on {obj} at {force:.1f} N: {outcome}', 'tactile',
                      {'grip_force': force, 'success': success})
        self.memory.learn(
            f'Grasp {obj} with {force:.1f} N grip force: {outcome}',
            context={'robot': self.robot,
                     'task': {'name': 'pick', 'object': obj, 'success': success},
                     'params': {'grip_force': round(force, 2)},
                     'spatial': {'object_position': position}},
            session_id=self.session_id)
        self.successes += success
        self.get_logger().info(f'pick {obj}: {force:.1f} N ({source}) -> {outcome}')

    def perceive(self, description: str, kind: str, data: dict) -> None:
        """Stream a perception (stored in batches by the node, stamped now)."""
        msg = PerceptionData(seq=self.seq, perception_type=kind, description=description,
                             data=json.dumps(data), session_id=self.session_id)
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.header.frame_id = self.get_name()
        self.perceptions.publish(msg)
        self.seq += 1

    def finish(self) -> None:
        """End the episode with the success rate as its outcome score."""
        self.timer.cancel()
        picks = self.seq // 2
        ended = self.memory.end_session(self.session_id, outcome_score=self.successes / picks)
        self.get_logger().info(
            f'{self.successes}/{picks} picks held; session ended '
            f'({ended.merged_groups} groups consolidated, '
            f'{len(ended.related_memories)} related memories)')
        self.finished.set()


def main() -> int:
    """Run the loop until every pick is done; exit 1 if the memory node failed us."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--robot', default='ur5e')
    parser.add_argument('--objects', nargs='+', default=['red_mug', 'blue_block'])
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--namespace', default='/robotmem')
    parser.add_argument('--seed', type=int, default=0)
    args = parser.parse_args(rclpy.utilities.remove_ros_args(sys.argv)[1:])
    with ros_session():  # rclpy.init()/try_shutdown(), on Jazzy too
        node = PickLoop(args.robot, args.objects, args.rounds, args.namespace, args.seed)
        executor = MultiThreadedExecutor(num_threads=2)
        executor.add_node(node)
        try:
            while not node.finished.is_set():
                executor.spin_once(timeout_sec=0.1)
        except KeyboardInterrupt:
            return 130
        finally:
            executor.shutdown()
            node.destroy_node()
    return node.exit_code


if __name__ == '__main__':
    sys.exit(main())
