"""
Seeded synthetic robot memories for the speed and size benchmarks.

Sentences come from templates over object, place, robot and task vocabularies with numbers and
units (forces, speeds, angles, durations, percentages), so the FTS index sees a realistic
long-tailed vocabulary and the number-aware dedup rules are exercised. Contexts carry task /
robot / params / spatial / env fields the recall filters use. About 5% of the memories are
near-duplicates of earlier ones (same facts reworded, numbers kept) and a few are Chinese.
Texts are unique after the store's normalization, so a fill never trips the unique index.
"""

from __future__ import annotations

from dataclasses import dataclass
import random
from typing import Any, Iterator

from common import PACKAGE_DIR  # noqa: F401 - puts the package on sys.path
from robotmem_ros.engine.text import normalize_for_hash

COLORS = ('red', 'blue', 'green', 'yellow', 'black', 'white', 'grey', 'orange', 'purple',
          'transparent', 'metal', 'wooden')
OBJECTS = ('cup', 'mug', 'bottle', 'plate', 'bowl', 'screwdriver', 'wrench', 'hammer', 'box',
           'can', 'sponge', 'towel', 'book', 'phone', 'remote', 'apple', 'banana', 'orange',
           'knife', 'fork', 'spoon', 'pan', 'pot', 'lid', 'jar', 'cable', 'charger', 'drill',
           'glove', 'tape', 'marker', 'tray', 'basket', 'bin', 'chair', 'door handle', 'drawer',
           'valve', 'switch', 'peg', 'gear', 'bolt', 'nut', 'tube', 'bag', 'shoe', 'toy car',
           'keyboard', 'laptop', 'plant pot', 'vase', 'candle', 'brush', 'bucket', 'ladle')
PLACES = ('left shelf', 'right shelf', 'top shelf', 'kitchen counter', 'dining table',
          'workbench', 'sink', 'dishwasher', 'fridge', 'drawer 3', 'tool rack', 'charging dock',
          'conveyor', 'bin area', 'loading bay', 'hallway', 'living room table',
          'assembly station', 'inspection table', 'storage rack B', 'pallet', 'window sill',
          'cabinet', 'floor near the door', 'cart')
ROOMS = ('kitchen', 'lab', 'warehouse', 'office', 'living room', 'workshop', 'garage',
         'bedroom', 'corridor', 'cleanroom')
ROBOTS = ('ur5e', 'franka', 'fetch', 'tiago', 'spot', 'stretch', 'kinova gen3', 'xarm7',
          'turtlebot4', 'husky', 'g1 humanoid', 'aloha')
TASKS = ('pick', 'place', 'pour', 'open', 'close', 'wipe', 'stack', 'insert', 'hand over',
         'push', 'sort', 'fold', 'carry', 'inspect', 'scan')
SIDES = ('left', 'right', 'front', 'back', 'middle')
PEOPLE = ('Alice', 'Bob', 'Chen', 'Dana', 'Emil', 'Fatima', 'the night operator',
          'the lab manager')
CAUSES = ('the gripper pads were worn', 'the lighting was too dim', 'the object was wet',
          'the map was outdated', 'a person stood in the way', 'the battery was low',
          'the camera was miscalibrated', 'the floor was slippery', 'the lid was stuck',
          'the grasp pose was too high')
ZH_OBJECTS = ('杯子', '盘子', '螺丝刀', '瓶子', '盒子', '抹布', '钥匙', '遥控器')
ZH_PLACES = ('左边的架子', '厨房台面', '工作台', '水槽旁边', '充电座', '抽屉里')

TEMPLATES = (
    'a grip force of {force:.1f}N worked well for the {color} {obj} on the {place}',
    'grasping the {color} {obj} needs at least {force:.1f} N or it slips',
    '{robot} needed {n} attempts to {task} the {obj} at the {place}',
    'approach speed above {speed:.2f} m/s made the {color} {obj} tip over',
    'the {color} {obj} is usually kept on the {place} in the {room}',
    '{person} prefers the {obj} placed on the {side} side of the {place}',
    'tilt the wrist {angle} degrees before you {task} the {obj}',
    'battery dropped {pct}% after {minutes} minutes of {task} tasks in the {room}',
    '{task} of the {obj} failed because {cause}',
    'camera exposure of {ms} ms was too dark near the {place}',
    'the {obj} weighs about {grams} g, use the {side} gripper finger first',
    'path through the {room} is blocked after {hour}:00, go around via the {place}',
    'never {task} the {obj} faster than {speed:.2f} m/s, it spills',
    'the {place} is {cm} cm high, lower the arm before releasing the {obj}',
    '{robot} localization drifts by {cm} cm in the {room} when {cause}',
    'success rate for {task} with the {color} {obj} rose to {pct}% after re-calibration',
    'the {obj} handle faces {side}, rotate {angle} degrees to grasp it',
    'store spare {obj}s in the {place}, {person} asked for it',
    'torque limit {torque:.1f} Nm on joint {joint} avoids collisions at the {place}',
    'wait {sec} s after opening the {place} before reaching for the {obj}',
)
ZH_TEMPLATES = (
    '{zh_obj}通常放在{zh_place}，抓取力度{force:.1f}牛比较合适',
    '在{zh_place}拿{zh_obj}时要慢一点，速度不超过{speed:.2f}米每秒',
)
REWORDINGS = ((' worked well for ', ' was fine for '), (' is usually kept ', ' usually sits '),
              ('needs at least', 'requires at least'), (' made the ', ' caused the '),
              (' prefers ', ' likes '), (' before you ', ' prior to trying to '),
              (' failed because ', ' did not work since '), (' was too dark ', ' was too dim '),
              (' never ', ' do not '), (' avoids ', ' prevents '), (' asked for it', ' wants it'))


@dataclass(frozen=True)
class Memory:
    """One synthetic memory: text, context, and whether it rewords an earlier one."""

    text: str
    context: dict[str, Any]
    near_duplicate_of: int = -1


def _values(rng: random.Random) -> dict[str, Any]:
    return {'color': rng.choice(COLORS), 'obj': rng.choice(OBJECTS), 'place': rng.choice(PLACES),
            'room': rng.choice(ROOMS), 'robot': rng.choice(ROBOTS), 'task': rng.choice(TASKS),
            'side': rng.choice(SIDES), 'person': rng.choice(PEOPLE), 'cause': rng.choice(CAUSES),
            'force': rng.uniform(2, 60), 'speed': rng.uniform(0.05, 1.5),
            'n': rng.randint(2, 12), 'angle': rng.choice(range(5, 180, 5)),
            'pct': rng.randint(3, 99), 'minutes': rng.randint(5, 240), 'ms': rng.randint(2, 60),
            'grams': rng.randint(20, 3000), 'hour': rng.randint(6, 23),
            'cm': rng.randint(1, 150), 'torque': rng.uniform(1, 80), 'joint': rng.randint(1, 7),
            'sec': rng.randint(1, 30), 'zh_obj': rng.choice(ZH_OBJECTS),
            'zh_place': rng.choice(ZH_PLACES)}


def _context(rng: random.Random, values: dict[str, Any]) -> dict[str, Any]:
    return {
        'task': {'name': values['task'], 'success': rng.random() < 0.7,
                 'steps': rng.randint(1, 40)},
        'robot': {'id': values['robot'], 'type': 'mobile_manipulator'
                  if values['robot'] in ('fetch', 'tiago', 'stretch') else 'arm'},
        'params': {'grip_force': round(values['force'], 1), 'speed': round(values['speed'], 2),
                   'attempts': values['n']},
        'spatial': {'object_position': [round(rng.uniform(-5, 5), 3),
                                        round(rng.uniform(-5, 5), 3),
                                        round(rng.uniform(0, 2), 3)],
                    'frame': 'map', 'room': values['room']},
        'env': {'sim_or_real': 'real' if rng.random() < 0.4 else 'sim'},
    }


def reword(rng: random.Random, text: str) -> str:
    """Reword a fact: keep it the same, a synonym swap when one applies, else a filler word."""
    for old, new in rng.sample(REWORDINGS, len(REWORDINGS)):
        if old in text:
            return text.replace(old, new, 1)
    words = text.split(' ')
    pos = rng.randint(1, max(1, len(words) - 1))
    return ' '.join(words[:pos] + [rng.choice(('really', 'always', 'also', 'again'))]
                    + words[pos:])


def memories(count: int, seed: int = 0, dup_rate: float = 0.05,
             zh_rate: float = 0.03) -> Iterator[Memory]:
    """
    Yield ``count`` unique memories; the same seed always yields the same sequence.

    Earlier memories are kept only when a rewording may copy one (``dup_rate`` > 0): a 1M fill
    kept 4M objects alive for nothing, and the bench process's garbage collector walking them
    added milliseconds to the calls the scale bench measures.
    """
    rng = random.Random(seed)
    seen: set[str] = set()
    made: list[Memory] = []
    yielded = 0
    while yielded < count:
        if yielded and rng.random() < dup_rate:
            index = rng.randrange(yielded)
            memory = Memory(reword(rng, made[index].text), made[index].context, index)
        else:
            values = _values(rng)
            pool = ZH_TEMPLATES if rng.random() < zh_rate else TEMPLATES
            memory = Memory(rng.choice(pool).format(**values), _context(rng, values))
        key = normalize_for_hash(memory.text)
        if key in seen:
            continue
        seen.add(key)
        yielded += 1
        if dup_rate:
            made.append(memory)
        yield memory


def queries(count: int, seed: int = 1) -> list[str]:
    """Recall queries in the vocabulary of the memories (distinct, so no cache hides costs)."""
    rng = random.Random(seed)
    forms = ('how much grip force for the {color} {obj}', 'where is the {obj} kept',
             'why did {task} of the {obj} fail', '{robot} attempts to {task} the {obj}',
             'safe speed to {task} the {obj} in the {room}', 'what does {person} prefer',
             'battery use during {task} in the {room}', 'obstacles near the {place}')
    out: dict[str, None] = {}
    while len(out) < count:
        text = rng.choice(forms).format(**_values(rng))
        out[text if text not in out else f'{text} {len(out)}'] = None
    return list(out)


def context_filter(seed: int = 2) -> dict[str, Any]:
    """Return a selective, realistic filter: successful real-world runs of one task."""
    rng = random.Random(seed)
    return {'task.name': rng.choice(TASKS), 'task.success': True,
            'env.sim_or_real': 'real'}


def spatial_sort(seed: int = 3) -> dict[str, Any]:
    """Nearest-first by object position around a random point of the map."""
    rng = random.Random(seed)
    return {'field': 'spatial.object_position',
            'target': [round(rng.uniform(-5, 5), 2), round(rng.uniform(-5, 5), 2), 1.0]}
