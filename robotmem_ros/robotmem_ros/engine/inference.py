"""
Auto-inference of category, confidence, kind and tags for robot experience.

Manipulation nodes rarely label what they learn; the engine labels it from the text and the
context (task outcome, params, robot), and explicit values in the context always win. The
result is reported back to the caller so a wrong guess is visible, not silent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
import re
from typing import Any

from robotmem_ros.engine.validation import check_text, MAX_CATEGORY_CHARS
from robotmem_ros.errors import ValidationError

KINDS = ('episodic', 'semantic')

# First matching rule wins; order goes from the most to the least specific signal.
_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (category, re.compile(pattern, re.IGNORECASE)) for category, pattern in (
        ('gotcha', r'\b(gotcha|watch out|beware|careful|caveat|unexpected(ly)?|surprising(ly)?)\b'
                   r'|注意|小心|坑'),
        ('postmortem', r'\b(root cause|failed because|failure was|post-?mortem|crash(ed)?|'
                       r'collid(ed|es)|collision|dropped|slipped|broke)\b|失败|原因|碰撞|掉落'),
        ('constraint', r'\b(must|never|always|do not|don\'t|shall|required?|forbidden|'
                       r'not allowed|at most|at least|limit(ed)?)\b|必须|禁止|不要|不能|务必|始终'),
        ('preference', r'\b(prefer(s|red)?|rather than|likes?|favou?rite)\b|偏好|喜欢|更好'),
        ('decision', r'\b(decided|chose|choose|we will|switch(ed)? to|instead of|going with)\b'
                     r'|决定|选择|改用'),
        ('procedure', r'\b(step \d|first\b.*\bthen|procedure|how to|sequence|to (pick|place|'
                      r'grasp|open|calibrate)\b.*,)|步骤|首先|然后'),
        ('profile', r'\b(this robot|i am a|my (gripper|arm|camera)|robot has|equipped with)\b'
                    r'|本机|我的'),
    ))

_BASE_CONFIDENCE = {'constraint': 0.95, 'postmortem': 0.85, 'gotcha': 0.85, 'profile': 0.9}
_EPISODIC = frozenset({'event', 'observation', 'postmortem'})


@dataclass
class Inferred:
    """Labels for one learned fact, and which of them were inferred (not given)."""

    category: str
    confidence: float
    kind: str
    tags: list[str] = field(default_factory=list)
    inferred: dict[str, Any] = field(default_factory=dict)


def infer(text: str, context: dict[str, Any], *, has_session: bool) -> Inferred:
    """Label ``text``; explicit ``category``/``confidence``/``kind``/``tags`` in context win."""
    inferred: dict[str, Any] = {}
    category = context.get('category')
    if category is None:
        category = _category_of(text, context)
        inferred['category'] = category
    elif not isinstance(category, str):
        raise ValidationError('context.category must be a non-empty string')
    category = check_text('context.category', category, max_chars=MAX_CATEGORY_CHARS).lower()

    confidence = context.get('confidence')
    if confidence is None:
        confidence = _confidence_of(category, context)
        inferred['confidence'] = confidence
    elif (isinstance(confidence, bool) or not isinstance(confidence, (int, float))
          or not 0.0 <= confidence <= 1.0):
        raise ValidationError('context.confidence must be a number in [0, 1]')

    kind = context.get('kind')
    if kind is None:
        kind = 'episodic' if category in _EPISODIC and has_session else 'semantic'
        inferred['kind'] = kind
    elif kind not in KINDS:
        raise ValidationError(f'context.kind must be one of {", ".join(KINDS)}')

    tags = _tags_of(category, context)
    explicit = context.get('tags')
    if explicit is not None:
        if not isinstance(explicit, list) or not all(isinstance(t, str) for t in explicit):
            raise ValidationError('context.tags must be a list of strings')
        tags = sorted(set(tags) | {t.strip().lower() for t in explicit if t.strip()})
    else:
        inferred['tags'] = tags
    return Inferred(category, float(confidence), kind, tags, inferred)


def _category_of(text: str, context: dict[str, Any]) -> str:
    task = context.get('task')
    if isinstance(task, dict) and task.get('success') is False:
        return 'postmortem'
    for category, pattern in _RULES:
        if pattern.search(text):
            return category
    return 'observation'


def _confidence_of(category: str, context: dict[str, Any]) -> float:
    confidence = _BASE_CONFIDENCE.get(category, 0.8)
    task = context.get('task')
    if isinstance(task, dict) and task.get('success') is True:
        confidence = max(confidence, 0.9)
    env = context.get('env')
    if isinstance(env, dict) and env.get('sim_or_real') == 'sim':
        confidence = min(confidence, 0.75)
    return round(confidence, 3)


def _tags_of(category: str, context: dict[str, Any]) -> list[str]:
    tags = {category}
    robot = context.get('robot')
    if isinstance(robot, dict):
        for key in ('type', 'id', 'name'):
            if isinstance(robot.get(key), str) and robot[key]:
                tags.add(f'robot:{robot[key].lower()}')
    task = context.get('task')
    if isinstance(task, dict):
        if isinstance(task.get('name'), str) and task['name']:
            tags.add(f'task:{task["name"].lower()}')
        if isinstance(task.get('success'), bool):
            tags.add('success' if task['success'] else 'failure')
    params = context.get('params')
    if isinstance(params, dict):
        tags.update(f'param:{name.lower()}' for name in params if isinstance(name, str))
    env = context.get('env')
    if isinstance(env, dict) and env.get('sim_or_real') in ('sim', 'real'):
        tags.add(env['sim_or_real'])
    return sorted(tags)
