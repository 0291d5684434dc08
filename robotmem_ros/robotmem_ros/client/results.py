"""
Service responses -> the engine's plain result types.

A manipulation node gets the same dataclasses it would get from an in-process MemoryEngine
(contexts parsed from JSON, times as epoch seconds), so code can move between the two.
"""

from __future__ import annotations

from typing import Any

from robotmem_msgs.msg import Memory
from robotmem_ros.types import (EndSessionResult, LearnResult, MemoryRecord, RecallResult,
                                SessionInfo, UpdateResult)
from robotmem_ros.wire import from_json, from_time


def to_record(msg: Memory) -> MemoryRecord:
    """Build an engine MemoryRecord from a Memory message."""
    return MemoryRecord(
        id=msg.id, content=msg.content, type=msg.type, category=msg.category,
        perception_type=msg.perception_type, confidence=msg.confidence,
        context=from_json(msg.context_json), session_id=msg.session_id,
        collection=msg.collection, access_count=msg.access_count,
        created_at=from_time(msg.created_at) or 0.0, last_accessed=from_time(msg.last_accessed),
        rrf_score=msg.rrf_score)


def learn_result(res: Any) -> LearnResult:
    """Learn response -> LearnResult."""
    return LearnResult(memory_id=res.memory_id, status=res.status, method=res.method,
                       existing_id=res.existing_id, similarity=res.similarity,
                       similar_facts=[to_record(m) for m in res.similar_facts],
                       auto_inferred=from_json(res.auto_inferred_json))


def recall_result(res: Any) -> RecallResult:
    """Recall response -> RecallResult (memories in the node's order)."""
    return RecallResult(memories=[to_record(m) for m in res.memories], total=res.total,
                        mode=res.mode, query_ms=res.query_ms)


def session_info(res: Any) -> SessionInfo:
    """Convert a StartSession response to SessionInfo."""
    return SessionInfo(session_id=res.session_id, collection=res.collection,
                       active_memories_count=res.active_memories_count)


def end_session_result(res: Any) -> EndSessionResult:
    """Convert an EndSession response to EndSessionResult."""
    return EndSessionResult(
        merged_groups=res.merged_groups, superseded_count=res.superseded_count,
        compression_ratio=res.compression_ratio, avg_similarity=res.avg_similarity,
        decayed_count=res.decayed_count,
        related_memories=[to_record(m) for m in res.related_memories],
        summary=from_json(res.summary_json), consolidated=from_json(res.consolidated_json) or [])


def update_result(res: Any) -> UpdateResult:
    """Update response -> UpdateResult."""
    return UpdateResult(old_content=res.old_content, new_content=res.new_content_out)
