"""
robotmem_replay on bags no one here wrote: every rosbag2 test bag in ../shared/ros2-tools/bags.

None of them holds robotmem messages, so each must be refused before any ROS traffic with one
line on stderr and the documented exit code (docs/client.md): 3 not a readable bag, 4 nothing
to replay (empty, or no PerceptionData), 5 another serialization format.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import pytest
from robotmem_ros import replay

REPO = pathlib.Path(__file__).resolve().parents[2]
TOOLS = pathlib.Path(os.environ.get('ROBOTMEM_ROS2_TOOLS', REPO.parent / 'shared' / 'ros2-tools'))
BAGS = TOOLS / 'bags'


def bag_dirs() -> list[pathlib.Path]:
    """Every directory under bags/ that holds bag files or a metadata.yaml, or nothing."""
    if not BAGS.is_dir():
        return []
    found = set()
    for path in BAGS.rglob('*'):
        if path.is_file() and (path.suffix in ('.db3', '.mcap') or path.name == 'metadata.yaml'):
            found.add(path.parent)
        elif path.is_dir() and not any(p.is_dir() for p in path.iterdir()) and not any(
                p.suffix in ('.db3', '.mcap', '.yaml') for p in path.iterdir()):
            found.add(path)  # e.g. empty_dir: a directory with no bag in it
    return sorted(found)


def expected_code(bag: pathlib.Path) -> int:
    """Exit code the bag must get, from its own metadata (not from what replay says)."""
    import yaml
    meta_path = bag / 'metadata.yaml'
    if not meta_path.is_file():
        return replay.EXIT_UNREADABLE
    info = yaml.safe_load(meta_path.read_text())['rosbag2_bagfile_information']
    if not info.get('message_count'):
        return replay.EXIT_NOTHING_TO_REPLAY
    formats = {t['topic_metadata']['serialization_format']
               for t in info['topics_with_message_count']}
    if formats != {'cdr'}:
        return replay.EXIT_SERIALIZATION
    return replay.EXIT_NOTHING_TO_REPLAY  # no robotmem_msgs types in any rosbag2 test bag


BAG_DIRS = bag_dirs()


@pytest.mark.skipif(not BAG_DIRS, reason=f'no rosbag2 test bags at {BAGS}')
@pytest.mark.parametrize('bag', BAG_DIRS, ids=lambda p: str(p.relative_to(BAGS)))
def test_replay_refuses_foreign_bags_with_one_line_and_its_exit_code(bag, capsys, caplog):
    code = replay.main(['robotmem_replay', str(bag), '--timeout', '5'])
    lines = [r.getMessage() for r in caplog.records if r.name == 'robotmem_replay']
    assert code == expected_code(bag), lines
    assert len(lines) == 1 and str(bag) in lines[0], lines
    assert capsys.readouterr().out == ''


def test_bag_kinds_cover_what_the_issue_names():
    """The shared bags include an empty one, a wrong-format one and foreign types."""
    if not BAG_DIRS:
        pytest.skip(f'no rosbag2 test bags at {BAGS}')
    codes = {expected_code(bag) for bag in BAG_DIRS}
    assert {replay.EXIT_NOTHING_TO_REPLAY, replay.EXIT_SERIALIZATION} <= codes


@pytest.mark.skipif(not BAG_DIRS or shutil.which('robotmem_replay') is None,
                    reason='needs the rosbag2 test bags and robotmem_replay on PATH')
def test_installed_robotmem_replay_command_on_an_empty_bag():
    """`robotmem_replay BAG` as docs show it: on PATH after `source scripts/ros_env.sh`."""
    empty = next(b for b in BAG_DIRS if expected_code(b) == replay.EXIT_NOTHING_TO_REPLAY
                 and 'empty' in b.name)
    done = subprocess.run(['robotmem_replay', str(empty)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == replay.EXIT_NOTHING_TO_REPLAY, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and 'empty' in done.stderr, done.stderr
