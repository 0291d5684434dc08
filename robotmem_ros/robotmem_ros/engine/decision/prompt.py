"""
The chat messages the LLM decider sends: the candidate, its top peers, the hard rules.

Peers are numbered from 1 and carry their id and facet, so the model can answer by index or
by id; the hard rules restate the normalization the reply will go through anyway, which
keeps a well-behaved model from having its answer rewritten.
"""

from __future__ import annotations

import json
from typing import Sequence

from robotmem_ros.engine.categories import category_class, HISTORY
from robotmem_ros.engine.decision.facet import facet_key
from robotmem_ros.engine.decision.types import Candidate, Existing

SYSTEM = ('You maintain the long-term memory of a robot. You decide whether a new fact '
          'repeats, refines or overrides facts already stored. Reply with one JSON object '
          'and nothing else.')

RULES = """Decide one of:
- "skip": the new fact adds nothing to the stored memories. "list" must be empty.
- "create": store the new fact as a memory of its own. "list" may only hold
  {"index": n, "decide": "delete"} for stored memories that the new fact makes obsolete
  (same subject and attribute, changed value).
- "none": do not store the new fact, act on stored memories instead: {"index": n,
  "decide": "merge", "merged_text": "<memory n rewritten to include the new detail>"} or
  {"index": n, "decide": "delete"}.
Hard rules: any "merge" means the decision is "none"; never name one memory twice; delete only
what the new fact overrides; when unsure, "create".
Reply exactly: {"decision": "skip|create|none", "reason": "<one sentence>", "list": [...]}"""

NO_MERGE = 'Memories of this category are records of events: never "merge".'


def _peer_line(i: int, peer: Existing) -> str:
    return (f'{i}. id={peer.id} facet={json.dumps(facet_key(peer.text), ensure_ascii=False)} '
            f'similarity={peer.similarity:.2f} created_at={peer.created_at:.0f}\n'
            f'   text: {peer.text}')


def build_messages(candidate: Candidate, peers: Sequence[Existing]) -> list[dict[str, str]]:
    """Return the OpenAI-style message list for one decision."""
    lines = [
        f'New fact (category {candidate.category!r}, created_at '
        f'{candidate.created_at:.0f}):',
        f'   text: {candidate.text}',
        '',
        'Stored memories of the same category, most similar first:',
        *(_peer_line(i, p) for i, p in enumerate(peers, 1)),
        '',
        RULES,
    ]
    if category_class(candidate.category) == HISTORY:
        lines.append(NO_MERGE)
    return [{'role': 'system', 'content': SYSTEM}, {'role': 'user', 'content': '\n'.join(lines)}]
