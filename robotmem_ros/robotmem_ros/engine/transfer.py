"""
JSONL export and import: moving experience between robots, or a store to another machine.

A file is a header line, then one line per session, then one line per memory in id order. What a
memory is and how it aged travels (text, type, collection, session, category, kind, confidence,
context, status, tags, every timestamp and counter, the store time retention counts from); ids are
remapped on import, and ``superseded_by`` follows its target. What the importing store derives or
owns does not: vectors (embedded again by the importer's model), history (the import is its first
event), each EndSession's outcome record (a session keeps its last score) and the fleet identity
(``origin``, ``gid``: an imported memory is the importer's own). Import is idempotent: an active
fact whose normalized text is already active in the collection, or any memory identical in text,
type, session and creation time to a stored one, is skipped and reported. Only that exact layer
applies: near-duplicate folding stays end_session's job, so a round trip into an empty store is
exact.

Every line is parsed and checked before anything is written, so a bad line (named by file:line
and field) never leaves half an import: numbers must be finite (``NaN``, ``Infinity`` and an
overflowing ``1e999`` are refused), every stored string must be storable as UTF-8 (no lone
surrogates), and every JSON object stored (a memory's or session's context, a session's summary)
passes the checks Learn applies, within the importing engine's size and depth limits (a
memory's context with the room a perception's data and metadata take side by side). Texts are
taken as any earlier version may have stored them (an invisible session id, a long category),
so a store's own export always imports.
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any, Callable, Iterator, NamedTuple

from robotmem_ros.engine import schema, store, transfer_store
from robotmem_ros.engine.context import EngineContext
from robotmem_ros.engine.database import snapshot
from robotmem_ros.engine.transfer_store import COUNTERS, TIMES
from robotmem_ros.engine.validation import (check_count, check_encodable, check_finite,
                                            check_range, check_text, check_timestamp, json_object,
                                            json_object_from_text)
from robotmem_ros.errors import StorageError, ValidationError


FORMAT = 'robotmem-jsonl'
VERSION = 1
BATCH = 500
Progress = Callable[[int, int], None]
_SESSION_FIELDS = ('id', 'collection', 'started_at', 'ended_at', 'outcome_score')


# --- export ----------------------------------------------------------------------------------

def export_jsonl(ctx: EngineContext, path: str | os.PathLike, *, collection: str = '',
                 include_forgotten: bool = False, progress: Progress | None = None
                 ) -> dict[str, int]:
    """Write the store (or one collection) to ``path`` atomically; return the counts."""
    target = pathlib.Path(path)
    partial = target.with_name(target.name + '.partial')
    try:
        with ctx.db.read() as reader, snapshot(reader) as conn:
            with open(partial, 'w', encoding='utf-8') as out:
                counts = _write(conn, out, collection, include_forgotten, progress)
        os.replace(partial, target)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise StorageError(f'cannot write {target}: {exc.strerror or exc}') from exc
    except StorageError:
        partial.unlink(missing_ok=True)
        raise
    return counts


def _write(conn: Any, out: Any, collection: str, include_forgotten: bool,
           progress: Progress | None) -> dict[str, int]:
    total = transfer_store.count_exported(conn, collection, include_forgotten=include_forgotten)
    sessions = transfer_store.exported_sessions(conn, collection,
                                                include_forgotten=include_forgotten)
    _line(out, {'record': 'header', 'format': FORMAT, 'version': VERSION,
                'model_id': store.get_meta(conn, 'embed_model_id') or '',
                'sessions': len(sessions), 'memories': total})
    for row in sessions:
        item = {name: row[name] for name in _SESSION_FIELDS}
        item['context'] = json.loads(row['context_json'] or '{}')
        item['summary'] = json.loads(row['summary_json']) if row['summary_json'] else None
        _line(out, {'record': 'session', **item})
    done = 0
    last_id = 0
    while True:
        rows = transfer_store.exported_page(conn, collection, include_forgotten=include_forgotten,
                                            after=last_id, limit=BATCH)
        if not rows:
            break
        tags = store.tags_of(conn, [r['id'] for r in rows])
        for row in rows:
            _line(out, {'record': 'memory', **_memory_item(row, tags.get(row['id'], []))})
        done += len(rows)
        last_id = rows[-1]['id']
        if progress is not None:
            progress(done, total)
    return {'sessions': len(sessions), 'memories': done}


def _memory_item(row: Any, tags: list[str]) -> dict[str, Any]:
    item = {name: row[name] for name in (
        'id', 'type', 'content', 'collection', 'session_id', 'category', 'perception_type',
        'kind', 'confidence', 'status', 'superseded_by', 'created_at', *TIMES, *COUNTERS)}
    item['context'] = json.loads(row['context_json'] or '{}')
    item['tags'] = tags
    return item


def _line(out: Any, obj: dict[str, Any]) -> None:
    out.write(json.dumps(obj, ensure_ascii=False, allow_nan=False) + '\n')


# --- import ----------------------------------------------------------------------------------

def import_jsonl(ctx: EngineContext, path: str | os.PathLike, *, collection: str = '',
                 progress: Progress | None = None) -> dict[str, Any]:
    """
    Import a file written by export_jsonl; every line is validated before anything is written.

    ``collection`` (if given) replaces the collection of every imported session and memory.
    Returns counts and the skipped duplicates as ``{'line', 'existing_id'}``.
    """
    source = pathlib.Path(path)
    sessions, memories = _read(source, collection, _Limits(ctx.config.max_json_bytes,
                                                           ctx.config.max_json_depth))
    report: dict[str, Any] = {'sessions': 0, 'imported': 0, 'skipped': []}
    id_map: dict[int, int] = {}
    superseded: list[tuple[int, int]] = []
    now = ctx.clock()
    with ctx.db.write() as conn:
        for item in sessions:
            report['sessions'] += transfer_store.restore_session(conn, item)
    for start in range(0, len(memories), BATCH):
        with ctx.db.write() as conn:
            for line, item in memories[start:start + BATCH]:
                existing = _existing(conn, item)
                if existing is not None:
                    id_map[item['id']] = existing
                    report['skipped'].append({'line': line, 'existing_id': existing})
                else:
                    id_map[item['id']] = _insert(conn, item, now)
                    report['imported'] += 1
                if item['superseded_by'] is not None:
                    superseded.append((id_map[item['id']], item['superseded_by']))
        if progress is not None:
            progress(min(start + BATCH, len(memories)), len(memories))
    # Links are resolved once every id is known. Rows that an interrupted earlier run of
    # the same file stored are skipped as existing above, so they are linked here too; only
    # a missing link is filled, never one the store already holds.
    with ctx.db.write() as conn:
        transfer_store.link_superseded(conn, [(id_map.get(old), new) for new, old in superseded])
    return report


def _existing(conn: Any, item: dict[str, Any]) -> int | None:
    if item['type'] == 'fact' and item['status'] == 'active':
        found = store.find_active_by_hash(conn, item['collection'], item['content'])
        if found is not None:
            return found
    return transfer_store.find_identical(conn, item)


def _insert(conn: Any, item: dict[str, Any], now: float) -> int:
    """
    Restore one row as it was, status included.

    A superseded fact must never pass through 'active', where the unique index would refuse
    it next to its keeper.
    """
    if item['session_id']:
        store.ensure_session(conn, item['session_id'], item['collection'], item['created_at'])
    valid_from = item['valid_from'] if item['valid_from'] is not None else item['created_at']
    memory_id = transfer_store.restore_memory(conn, {**item, 'valid_from': valid_from})
    store.add_history(conn, memory_id, 'import', created_at=now, new_content=item['content'],
                      actor='import', details={'source_id': item['id']})
    return memory_id


# --- validation ------------------------------------------------------------------------------

class _Limits(NamedTuple):
    """The importing engine's JSON limits (``max_json_bytes``, ``max_json_depth``)."""

    max_bytes: int
    max_depth: int

    def context(self, obj: dict[str, Any], name: str, where: str) -> dict[str, Any]:
        """Return a memory's context as Learn or SavePerceptions could have stored it."""
        # A perception keeps its data and metadata (each within the limits) one level down,
        # side by side, so its stored context may be twice as large and one level deeper.
        return _object(obj, name, where, max_bytes=2 * self.max_bytes + 1024,
                       max_depth=self.max_depth + 1)

    def plain(self, obj: dict[str, Any], name: str, where: str) -> dict[str, Any]:
        """Return a session's context or summary as start_session or end_session stored it."""
        return _object(obj, name, where, max_bytes=self.max_bytes, max_depth=self.max_depth)


def _read(path: pathlib.Path, collection: str, limits: _Limits
          ) -> tuple[list[dict[str, Any]], list[tuple[int, dict[str, Any]]]]:
    """
    Parse and check the whole file first, so a bad line never leaves half an import.

    Every value that will be stored is checked here as the write would need it (type, range,
    finite numbers, UTF-8-storable text, JSON objects within ``limits``), so no stored value
    can make a later write fail, and a bad line is refused, by file:line and field, before the
    first session or batch is committed.
    """
    if collection:
        collection = check_text('collection', collection, max_chars=128)
    sessions: list[dict[str, Any]] = []
    memories: list[tuple[int, dict[str, Any]]] = []
    try:
        lines = _lines(path, limits)
        first = next(lines, None)
        if first is None or first[1].get('record') != 'header' \
                or first[1].get('format') != FORMAT:
            raise ValidationError(f'{path} is not a robotmem export (no {FORMAT} header line)')
        if first[1].get('version') != VERSION:
            raise ValidationError(f'{path}: export version {first[1].get("version")!r} is not '
                                  f'supported (expected {VERSION})')
        for number, obj in lines:
            kind = obj.get('record')
            where = f'{path}:{number}'
            if kind == 'session':
                sessions.append(_session(obj, where, collection, limits))
            elif kind == 'memory':
                memories.append((number, _memory(obj, where, collection, limits)))
            else:
                raise ValidationError(f'{where}: unknown record {kind!r}')
    except OSError as exc:
        raise StorageError(f'cannot read {path}: {exc.strerror or exc}') from exc
    return sessions, memories


def _lines(path: pathlib.Path, limits: _Limits) -> Iterator[tuple[int, dict[str, Any]]]:
    with open(path, 'rb') as src:  # decoded line by line, so a bad byte names its own line
        for number, raw in enumerate(src, 1):
            where = f'{path}:{number}'
            try:
                line = raw.decode('utf-8')
            except UnicodeDecodeError as exc:
                raise ValidationError(f'{where}: not valid UTF-8 ({exc})') from None
            if line.strip():
                yield number, json_object_from_text(line, what=where,
                                                    max_depth=limits.max_depth + 1)


def _session(obj: dict[str, Any], where: str, collection: str, limits: _Limits
             ) -> dict[str, Any]:
    item = {'id': _text(obj, 'id', where, stored=True),
            'collection': collection or _text(obj, 'collection', where),
            'started_at': _time(obj, 'started_at', where),
            'ended_at': _time(obj, 'ended_at', where, optional=True),
            'outcome_score': _number(obj, 'outcome_score', where, optional=True),
            'context': limits.plain(obj, 'context', where),
            # What end_session wrote: a JSON object (counts, duration, outcome), or None.
            'summary': limits.plain(obj, 'summary', where) if obj.get('summary') is not None
            else None}
    return item


def _memory(obj: dict[str, Any], where: str, collection: str, limits: _Limits
            ) -> dict[str, Any]:
    item = {'id': _int(obj, 'id', where),
            'type': _choice(obj, 'type', ('fact', 'perception'), where),
            'content': _text(obj, 'content', where),
            'collection': collection or _text(obj, 'collection', where),
            'session_id': obj.get('session_id') or None,
            'category': _text(obj, 'category', where, required=False, stored=True),
            'perception_type': _text(obj, 'perception_type', where, required=False,
                                     stored=True),
            'kind': _choice(obj, 'kind', ('episodic', 'semantic'), where),
            'confidence': _confidence(obj, where),
            'status': _choice(obj, 'status', schema.STATUSES, where),
            'superseded_by': obj.get('superseded_by'),
            'created_at': _time(obj, 'created_at', where),
            'context': limits.context(obj, 'context', where)}
    if item['session_id'] is not None:
        item['session_id'] = _text(obj, 'session_id', where, stored=True)
    if item['superseded_by'] is not None:
        item['superseded_by'] = _int(obj, 'superseded_by', where)
    for name in TIMES:
        item[name] = _time(obj, name, where, optional=True)
    for name in COUNTERS:
        item[name] = _int(obj, name, where, minimum=0)
    item['tags'] = _tags(obj, where, limits.max_bytes)
    return item


def _tags(obj: dict[str, Any], where: str, max_chars: int) -> list[str]:
    """
    Return the tags: non-empty strings that SQLite can store.

    Learn derives tags from the context (a task name, a parameter name), so one is bounded by
    the context limit, and may hold what a context string may (a NUL); only a lone surrogate,
    which no UTF-8 column can hold, is refused besides.
    """
    tags = obj.get('tags', [])
    if not isinstance(tags, list) or not all(isinstance(t, str) and t for t in tags):
        raise ValidationError(f'{where}: tags must be a list of non-empty strings')
    for index, tag in enumerate(tags):
        if len(tag) > max_chars:
            raise ValidationError(f'{where}: tags[{index}] is too long: {len(tag)} characters '
                                  f'(max {max_chars})')
        check_encodable(f'{where}: tags[{index}]', tag)
    return tags


def _text(obj: dict[str, Any], name: str, where: str, required: bool = True,
          stored: bool = False) -> str:
    """
    Return a text field; ``stored``: as an earlier version may have stored it.

    Session ids, categories and perception types made only of invisible characters were once
    taken (``check_text(stored=True)``); texts and collections never were.
    """
    value = obj.get(name, None if required else '')
    if not isinstance(value, str) or (required and not value.strip()):
        raise ValidationError(f'{where}: {name} must be a non-empty string')
    check_text(f'{where}: {name}', value, max_chars=100_000, required=required, stored=stored)
    return value


def _number(obj: dict[str, Any], name: str, where: str, optional: bool = False,
            check: Callable[[str, Any], float] = check_finite) -> float | None:
    """Return a finite number, None when ``optional`` and absent; ``check`` may narrow it."""
    value = obj.get(name)
    if value is None and optional:
        return None
    return check(f'{where}: {name}', value)


def _time(obj: dict[str, Any], name: str, where: str, optional: bool = False
          ) -> float | None:
    """Epoch seconds that a message can carry (a larger one broke every later recall)."""
    return _number(obj, name, where, optional, check_timestamp)


def _confidence(obj: dict[str, Any], where: str) -> float:
    return check_range(f'{where}: confidence', obj.get('confidence'), 0.0, 1.0)


def _int(obj: dict[str, Any], name: str, where: str, minimum: int = 1) -> int:
    return check_count(f'{where}: {name}', obj.get(name), minimum)


def _choice(obj: dict[str, Any], name: str, allowed: tuple[str, ...], where: str) -> str:
    value = obj.get(name)
    if value not in allowed:
        raise ValidationError(f'{where}: {name} must be one of {allowed}, got {value!r}')
    return value


def _object(obj: dict[str, Any], name: str, where: str, *, max_bytes: int, max_depth: int
            ) -> dict[str, Any]:
    """Return a JSON object field (absent → {}) checked as Learn checks a context."""
    value = obj.get(name, {})
    if not isinstance(value, dict):
        raise ValidationError(f'{where}: {name} must be a JSON object')
    return json_object(f'{where}: {name}', value, max_bytes=max_bytes, max_depth=max_depth)
