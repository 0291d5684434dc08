"""
EngineContext: what the engine's parts (learn, recall, maintenance, ...) are given.

The parts get the store, the embedder state, the clock and the current settings, and nothing
of the facade: validation and parsing stay in ``MemoryEngine``, so a part never reaches back
into the object that owns it (no import cycle, no private calls).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from robotmem_ros.config import MemoryConfig
from robotmem_ros.engine.access_counts import AccessCounts
from robotmem_ros.engine.database import Database
from robotmem_ros.engine.embedding_state import EmbeddingState
from robotmem_ros.engine.side_threads import SideThreads


@dataclass
class EngineContext:
    """The shared state of one open store; ``config`` is replaced on a run-time change."""

    db: Database
    embedding: EmbeddingState
    clock: Callable[[], float]
    config: MemoryConfig
    side: SideThreads  # a search beside another within one call (engine/side_threads.py)
    access: AccessCounts  # recall hit counts not yet written (engine/access_counts.py)
