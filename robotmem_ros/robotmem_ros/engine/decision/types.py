"""
Value types of the decision layer.

They hold plain Python values only, so the engine can write an ``Outcome`` straight into its
audit history and the deciders stay free of SQLite and rclpy.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
import time
from typing import Any

CREATE = 'CREATE'
SKIP = 'SKIP'
NONE = 'NONE'
DECISIONS = (CREATE, SKIP, NONE)

MERGE = 'MERGE'
DELETE = 'DELETE'
ACTION_KINDS = (MERGE, DELETE)


@dataclass(frozen=True)
class Candidate:
    """A fact about to be stored."""

    text: str
    category: str
    context: dict[str, Any] = field(default_factory=dict)
    created_at: float = field(default_factory=time.time)


@dataclass(frozen=True)
class Existing:
    """A stored, active memory the engine found similar to the candidate."""

    id: int
    text: str
    category: str
    context: dict[str, Any] = field(default_factory=dict)
    created_at: float = 0.0
    similarity: float = 0.0


@dataclass(frozen=True)
class Action:
    """
    What to do to one existing memory.

    ``before`` is the memory's text when the decision was made and ``merged_text`` the text it
    becomes (MERGE only), so the engine can audit the change without another read.
    """

    kind: str
    target_id: int
    merged_text: str | None = None
    reason: str = ''
    before: str = ''


@dataclass(frozen=True)
class Proposal:
    """A decider's raw answer, before the normalization rules make it consistent."""

    decision: str
    actions: tuple[Action, ...] = ()
    reason: str = ''


@dataclass(frozen=True)
class Outcome:
    """
    The normalized decision the engine executes.

    ``withheld`` are the memories a proposal wanted to hide or rewrite without evidence: the
    guard kept them, and the engine reports them to the caller as similar facts. ``repeats``
    is the memory a SKIP found already saying the candidate (the one to reinforce).
    """

    decision: str
    actions: tuple[Action, ...] = ()
    decider: str = ''
    reason: str = ''
    candidate_text: str = ''
    notes: tuple[str, ...] = ()
    withheld: tuple[int, ...] = ()
    repeats: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict for the audit history."""
        return {
            'decision': self.decision,
            'actions': [asdict(a) for a in self.actions],
            'decider': self.decider,
            'reason': self.reason,
            'candidate_text': self.candidate_text,
            'notes': list(self.notes),
            'withheld': list(self.withheld),
            'repeats': self.repeats,
        }
