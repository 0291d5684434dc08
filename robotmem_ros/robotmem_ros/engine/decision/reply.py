"""
Parse the LLM's reply into a Proposal, strictly.

The reply must contain one JSON object (bare or in a ``` fence); anything else raises
ValueError, which the decider's fail-safe turns into CREATE. Memories may be referred to by
"id" (the stored id) or "index" (1-based as the prompt numbers them; 0 is read as the first,
for models that count from zero). A reference to nothing becomes target -1, which the
normalization rules drop with a note.
"""

from __future__ import annotations

import json
import re
from typing import Any, Sequence

from robotmem_ros.engine.decision.types import Action, Existing, Proposal

_FENCE_RE = re.compile(r'^\s*```[a-zA-Z]*\s*(.*?)\s*```\s*$', re.DOTALL)
UNRESOLVED = -1


def reply_content(response: Any) -> str:
    """Return the assistant text of an OpenAI-style chat completion."""
    try:
        content = response['choices'][0]['message']['content']
    except (KeyError, IndexError, TypeError) as exc:
        raise ValueError(f'not a chat completion: {exc!r}') from exc
    if not isinstance(content, str):
        raise ValueError('chat completion without text content')
    return content


def json_object(text: str) -> dict[str, Any]:
    """Return the single JSON object in ``text`` (a fence around it is allowed)."""
    fenced = _FENCE_RE.match(text)
    body = (fenced.group(1) if fenced else text).strip()
    data = json.loads(body)
    if not isinstance(data, dict):
        raise ValueError(f'reply is JSON {type(data).__name__}, not an object')
    return data


def _target(item: dict[str, Any], peers: Sequence[Existing]) -> int:
    for key in ('id', 'memory_id'):
        if key in item:
            ref = str(item[key]).strip()
            return next((p.id for p in peers if str(p.id) == ref), UNRESOLVED)
    index = item.get('index')
    if isinstance(index, str) and index.strip().isdigit():
        index = int(index)
    if isinstance(index, int) and not isinstance(index, bool):
        position = max(index, 1) - 1
        if position < len(peers):
            return peers[position].id
    return UNRESOLVED


def _action(item: Any, peers: Sequence[Existing]) -> Action:
    if not isinstance(item, dict):
        raise ValueError(f'list item is not an object: {item!r}')
    kind = item.get('decide', item.get('action', item.get('kind', '')))
    merged = item.get('merged_text')
    return Action(str(kind), _target(item, peers),
                  merged if isinstance(merged, str) else None, str(item.get('reason', '')))


def parse_reply(text: str, peers: Sequence[Existing]) -> Proposal:
    """Turn the model's text into a Proposal for the normalization rules."""
    data = json_object(text)
    decision = data.get('decision')
    if not isinstance(decision, str):
        raise ValueError(f'"decision" must be a string, got {decision!r}')
    items = data.get('list', data.get('actions', []))
    if not isinstance(items, list):
        raise ValueError(f'"list" must be an array, got {items!r}')
    actions = tuple(_action(item, peers) for item in items)
    return Proposal(decision, actions, str(data.get('reason', '')))
