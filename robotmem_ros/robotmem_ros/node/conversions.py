"""
Engine results <-> ROS messages, in one place.

The engine speaks plain Python (epoch floats, dicts); messages speak builtin_interfaces/Time
and JSON strings. Keeping every translation here lets the service adapters stay one line each
and keeps ROS types out of the engine. A request's JSON text is parsed here (and the CLI's,
through ``parse_json_object``), with the engine's one strict parser
(``validation.json_object_from_text``, which import uses too); the engine checks the dicts.
"""

from __future__ import annotations

from typing import Any, Iterable

from robotmem_msgs.msg import Memory, PerceptionData
from robotmem_ros.config import MemoryConfig
from robotmem_ros.engine.validation import json_object_from_text
from robotmem_ros.errors import ValidationError
from robotmem_ros.types import (EndSessionResult, LearnResult, MemoryRecord, PerceptionInput,
                                RecallResult)
from robotmem_ros.wire import from_time, to_json, to_time


def parse_json_object(text: str, *, what: str, max_bytes: int,
                      max_depth: int) -> dict[str, Any] | None:
    """
    JSON object text -> dict; empty or blank text -> None (nothing).

    The text's size is checked before parsing, so an oversized request costs no parse. NaN and
    Infinity are refused (JSON has no such numbers); depth beyond ``max_depth`` and non-JSON
    values inside are refused by the engine's check of the dict, with the same messages.
    """
    if len(text.encode('utf-8', 'surrogatepass')) > max_bytes:
        raise ValidationError(f'{what}: larger than {max_bytes} bytes')
    if not text.strip():
        return None
    return json_object_from_text(text, what=what, max_depth=max_depth)


def json_field(text: str, what: str, config: MemoryConfig) -> dict[str, Any] | None:
    """Parse one JSON field of a request under the configured size and depth limits."""
    return parse_json_object(text, what=what, max_bytes=config.max_json_bytes,
                             max_depth=config.max_json_depth)


def to_memory(record: MemoryRecord) -> Memory:
    """Build a Memory message from an engine record."""
    return Memory(
        id=record.id, content=record.content, type=record.type, category=record.category,
        perception_type=record.perception_type, confidence=float(record.confidence),
        rrf_score=float(record.rrf_score), context_json=to_json(record.context),
        session_id=record.session_id, collection=record.collection,
        access_count=int(record.access_count), created_at=to_time(record.created_at),
        last_accessed=to_time(record.last_accessed))


def to_memories(records: Iterable[MemoryRecord]) -> list[Memory]:
    """Build Memory messages from engine records, order kept."""
    return [to_memory(r) for r in records]


def fill_learn(response: Any, result: LearnResult) -> Any:
    """Fill a Learn response from the engine result."""
    response.success = True
    response.memory_id = result.memory_id
    response.status = result.status
    response.method = result.method
    response.existing_id = result.existing_id
    response.similarity = float(result.similarity)
    response.similar_facts = to_memories(result.similar_facts)
    response.auto_inferred_json = to_json(result.auto_inferred)
    return response


def recall_limits(request: Any) -> dict[str, Any]:
    """Wire defaults of a Recall request -> engine defaults: n = 0 and a negative floor -> None."""
    return {'n': request.n or None,
            'min_confidence': None if request.min_confidence < 0 else request.min_confidence}


def recall_json(request: Any, config: MemoryConfig) -> dict[str, Any]:
    """Parse the JSON fields of a Recall request: context_filter and spatial_sort."""
    return {name: json_field(getattr(request, name), name, config)
            for name in ('context_filter', 'spatial_sort')}


def fill_recall(response: Any, result: RecallResult) -> Any:
    """Fill a Recall response from the engine result."""
    response.success = True
    response.memories = to_memories(result.memories)
    response.total = result.total
    response.mode = result.mode
    response.query_ms = float(result.query_ms)
    return response


def fill_end_session(response: Any, result: EndSessionResult) -> Any:
    """Fill an EndSession response from the engine result."""
    response.success = True
    response.merged_groups = result.merged_groups
    response.superseded_count = result.superseded_count
    response.compression_ratio = float(result.compression_ratio)
    response.avg_similarity = float(result.avg_similarity)
    response.decayed_count = result.decayed_count
    response.related_memories = to_memories(result.related_memories)
    response.summary_json = to_json(result.summary)
    response.consolidated_json = to_json(result.consolidated)
    return response


def perception_from_msg(msg: PerceptionData, config: MemoryConfig) -> PerceptionInput:
    """Convert a topic message to engine input; the header stamp is the perception time."""
    return _perception(msg, config, created_at=from_time(msg.header.stamp))


def perception_from_request(request: Any, config: MemoryConfig) -> PerceptionInput:
    """Convert a SavePerception request to engine input (time = now)."""
    return _perception(request, config)


def _perception(source: Any, config: MemoryConfig, created_at: float | None = None
                ) -> PerceptionInput:
    return PerceptionInput(description=source.description,
                           perception_type=source.perception_type,
                           data=json_field(source.data, 'data', config),
                           metadata=json_field(source.metadata, 'metadata', config),
                           session_id=source.session_id, collection=source.collection,
                           created_at=created_at)
