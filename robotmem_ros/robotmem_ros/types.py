"""
Plain result types of the memory API (engine and client alike).

They carry Python values only (no ROS types), so the node, the CLI and the benchmarks share
them; the node converts them to messages in one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class MemoryRecord:
    """One stored memory as the engine returns it."""

    id: int
    content: str
    type: str                      # "fact" | "perception"
    category: str
    perception_type: str
    confidence: float
    context: dict[str, Any]
    session_id: str
    collection: str
    access_count: int
    created_at: float              # epoch seconds
    last_accessed: float | None    # epoch seconds
    kind: str = 'semantic'         # "episodic" | "semantic"
    status: str = 'active'         # "active" | "superseded" | "forgotten"
    rrf_score: float = 0.0
    tags: list[str] = field(default_factory=list)
    valid_from: float | None = None
    valid_until: float | None = None
    superseded_by: int | None = None
    origin: str = ''               # '' = this robot; else the fleet robot it was pulled from

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict (CLI ``--json``, export)."""
        return dict(self.__dict__)


@dataclass
class LearnResult:
    """Outcome of ``learn``: what was stored or which memory it duplicated."""

    memory_id: int
    status: str                    # created | duplicate | merged | superseded_existing
    method: str = ''               # "" | exact | jaccard | cosine | session_cosine
    existing_id: int = 0
    similarity: float = 0.0
    similar_facts: list[MemoryRecord] = field(default_factory=list)
    auto_inferred: dict[str, Any] = field(default_factory=dict)


@dataclass
class RecallResult:
    """Ranked memories and what ran to find them."""

    memories: list[MemoryRecord]
    total: int
    mode: str                      # hybrid | bm25_only | vector_only | all
    query_ms: float


@dataclass
class SessionInfo:
    """A started session."""

    session_id: str
    collection: str
    active_memories_count: int


@dataclass
class EndSessionResult:
    """Consolidation, decay and proactive recall at the end of an episode."""

    merged_groups: int = 0
    superseded_count: int = 0
    compression_ratio: float = 0.0
    avg_similarity: float = 0.0
    decayed_count: int = 0
    pruned_perceptions: int = 0
    related_memories: list[MemoryRecord] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    consolidated: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class UpdateResult:
    """Old and new text of an updated memory."""

    old_content: str
    new_content: str


@dataclass
class PerceptionInput:
    """One perception to store (from the topic, the service or a bag)."""

    description: str
    perception_type: str = ''
    data: dict | None = None       # JSON object (parsed at the ROS boundary)
    metadata: dict | None = None   # JSON object
    session_id: str = ''
    collection: str = ''
    created_at: float | None = None  # epoch seconds (header stamp); None = now


@dataclass
class EngineStatus:
    """What the node publishes in NodeStatus and diagnostics."""

    db_path: str
    embed_backend: str             # onnx | none
    embed_device: str              # what actually runs (cpu after a fallback)
    model_id: str
    collection: str
    active_memories_count: int
    db_bytes: int
    reindex_needed: bool = False
    embed_error: str = ''
    embed_failures: int = 0
    pending_embeddings: int = 0
    embed_skipped: int = 0          # perceptions left BM25-only by the bounded backlog
    stamps_replaced: int = 0       # perception stamps outside the plausible window
    index_vectors: int = 0         # live vectors the search index holds
    ann_vectors: int = 0           # of which the IVF stage covers (0: the scan answers)
    ann_building: bool = False     # a background (re)build of that stage is running
    ann_error: str = ''            # why the stage could not be built (the scan answers)
    checkpoint_error: str = ''     # why the last WAL checkpoint failed (the WAL grows)
