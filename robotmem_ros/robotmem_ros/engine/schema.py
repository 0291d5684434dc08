"""
Schema and forward migrations (``PRAGMA user_version``).

Each migration is a list of statements applied in one transaction; a database newer than this
code refuses to open rather than being written by code that does not know its tables.
"""

from __future__ import annotations

from typing import Any

from robotmem_ros.errors import StorageError

# The values memories.status takes (its CHECK in _V1; migrations are never rewritten).
STATUSES = ('active', 'superseded', 'forgotten')

_V1 = [
    """
    CREATE TABLE meta (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL)""",
    """
    CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        collection TEXT NOT NULL,
        context_json TEXT NOT NULL DEFAULT '{}',
        started_at REAL NOT NULL,
        ended_at REAL,
        outcome_score REAL,
        summary_json TEXT)""",
    """
    CREATE TABLE session_outcomes (
        id INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL REFERENCES sessions(id),
        outcome_score REAL,
        recorded_at REAL NOT NULL)""",
    """
    CREATE TABLE memories (
        id INTEGER PRIMARY KEY,
        type TEXT NOT NULL CHECK (type IN ('fact', 'perception')),
        content TEXT NOT NULL,
        content_hash TEXT NOT NULL,
        collection TEXT NOT NULL,
        session_id TEXT REFERENCES sessions(id),
        category TEXT NOT NULL DEFAULT '',
        perception_type TEXT NOT NULL DEFAULT '',
        kind TEXT NOT NULL DEFAULT 'semantic' CHECK (kind IN ('episodic', 'semantic')),
        confidence REAL NOT NULL,
        context_json TEXT NOT NULL DEFAULT '{}',
        status TEXT NOT NULL DEFAULT 'active'
            CHECK (status IN ('active', 'superseded', 'forgotten')),
        superseded_by INTEGER REFERENCES memories(id),
        access_count INTEGER NOT NULL DEFAULT 0,
        reinforce_count INTEGER NOT NULL DEFAULT 0,
        created_at REAL NOT NULL,
        last_accessed REAL,
        last_seen REAL,
        decay_ref REAL,
        valid_from REAL NOT NULL,
        valid_until REAL,
        embedded INTEGER NOT NULL DEFAULT 0)""",
    # Exact dedup is enforced by the database, not by a read-then-write check: two writers can
    # never both insert the same active fact (docs/memory.md): no check-then-insert race.
    """
    CREATE UNIQUE INDEX uq_memories_active_fact
        ON memories(collection, content_hash) WHERE status = 'active' AND type = 'fact'""",
    'CREATE INDEX idx_memories_session ON memories(session_id, created_at)',
    'CREATE INDEX idx_memories_collection ON memories(collection, status, created_at)',
    'CREATE INDEX idx_memories_pending ON memories(embedded) WHERE embedded = 0',
    """
    CREATE TABLE tags (
        memory_id INTEGER NOT NULL REFERENCES memories(id),
        tag TEXT NOT NULL,
        PRIMARY KEY (memory_id, tag))""",
    'CREATE INDEX idx_tags_tag ON tags(tag)',
    """
    CREATE TABLE history (
        id INTEGER PRIMARY KEY,
        memory_id INTEGER NOT NULL REFERENCES memories(id),
        event TEXT NOT NULL,
        old_content TEXT,
        new_content TEXT,
        reason TEXT NOT NULL DEFAULT '',
        actor TEXT NOT NULL DEFAULT 'engine',
        details_json TEXT NOT NULL DEFAULT '{}',
        created_at REAL NOT NULL)""",
    'CREATE INDEX idx_history_memory ON history(memory_id, id)',
    # Keep accents (remove_diacritics 0); '.' and '%' belong to tokens such as "12.5n".
    """
    CREATE VIRTUAL TABLE memories_fts USING fts5(
        body, tokenize = "unicode61 remove_diacritics 0 tokenchars '.%'")""",
]

# Vectors live in ordinary tables (docs/performance.md): the vec0 virtual table cost one
# 1.67 MB chunk per collection and scanned every float per query. memory_vectors is narrow —
# what the in-process index loads at start (sign-bit code, filter columns, copied from the
# memory: they never change) in ``seq`` order (AUTOINCREMENT, never reused, so the index catches
# up with any writer); the float vectors used for exact rescoring sit apart in
# memory_embeddings. Rows of an old vec0 table are moved by store.adopt_legacy_vectors.
_V2 = [
    """
    CREATE TABLE memory_vectors (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        memory_id INTEGER NOT NULL UNIQUE REFERENCES memories(id),
        collection TEXT NOT NULL,
        session_id TEXT NOT NULL,
        is_fact INTEGER NOT NULL,
        code BLOB NOT NULL)""",
    """
    CREATE TABLE memory_embeddings (
        memory_id INTEGER PRIMARY KEY REFERENCES memories(id),
        embedding BLOB NOT NULL)""",
    # Every collection ever written, kept by a trigger so the max_collections cap is one
    # lookup, not a DISTINCT over the whole store.
    """
    CREATE TABLE collections (
        name TEXT PRIMARY KEY,
        created_at REAL NOT NULL)""",
    """
    INSERT INTO collections(name, created_at)
        SELECT collection, MIN(created_at) FROM memories GROUP BY collection""",
    """
    CREATE TRIGGER memories_collection AFTER INSERT ON memories BEGIN
        INSERT OR IGNORE INTO collections(name, created_at) VALUES (NEW.collection,
                                                                     NEW.created_at);
    END""",
]

# Fleet (docs/fleet.md): where a memory came from, and the outbox of own changes to push.
# ``origin`` is '' for this robot's memories and the origin robot's id for pulled ones; ``gid``
# is the hub's global id of a pulled row (own rows derive theirs from the store id). The
# triggers queue an own fact's row id whenever it is created or its shared fields change, in the
# same transaction as the change (``version`` counts changes, so a push acknowledges only what
# it sent), but only once fleet sync was enabled on this store and while the outbox is under
# its limit; a change that finds it full counts in the overflow mark instead, and the sync
# catches up by comparing with the hub (nothing is lost, the queue stays bounded).
_FLEET_QUEUE = """
    INSERT INTO fleet_outbox(memory_id) SELECT NEW.id
    WHERE EXISTS (SELECT 1 FROM fleet_outbox WHERE memory_id = NEW.id)
       OR (SELECT COUNT(*) FROM fleet_outbox) <
          (SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'fleet_outbox_limit')
    ON CONFLICT(memory_id) DO UPDATE SET version = version + 1;
    INSERT INTO meta(key, value) SELECT 'fleet_overflow', '1'
    WHERE NOT EXISTS (SELECT 1 FROM fleet_outbox WHERE memory_id = NEW.id)
    ON CONFLICT(key) DO UPDATE SET value = CAST(value AS INTEGER) + 1;"""
_FLEET_WHEN = ("NEW.origin = '' AND NEW.type = 'fact' "
               "AND EXISTS (SELECT 1 FROM meta WHERE key = 'fleet_robot_id')")
_V3 = [
    "ALTER TABLE memories ADD COLUMN origin TEXT NOT NULL DEFAULT ''",
    'ALTER TABLE memories ADD COLUMN gid TEXT',
    'CREATE UNIQUE INDEX uq_memories_gid ON memories(gid) WHERE gid IS NOT NULL',
    """
    CREATE TABLE fleet_outbox (
        memory_id INTEGER PRIMARY KEY,
        version INTEGER NOT NULL DEFAULT 0)""",
    f"""
    CREATE TRIGGER fleet_queue_insert AFTER INSERT ON memories WHEN {_FLEET_WHEN}
    BEGIN {_FLEET_QUEUE}
    END""",
    f"""
    CREATE TRIGGER fleet_queue_update
    AFTER UPDATE OF content, context_json, status, category, kind, superseded_by, embedded
    ON memories
    WHEN {_FLEET_WHEN}
    BEGIN {_FLEET_QUEUE}
    END""",
]

# The time decay counts idle days from (engine/decay.py): the latest of creation, last recall,
# last reinforcement and the time up to which decay was already applied. Indexed as this
# expression (store.decay_candidates names it in the same words, so SQLite uses the index): an
# end of session visits only the memories a whole day idle, not every active row (about 100 ms
# per 100 000 memories, docs/performance.md).
DECAY_REF = ('MAX(created_at, COALESCE(last_accessed, 0), COALESCE(last_seen, 0), '
             'COALESCE(decay_ref, 0))')
_V4 = [
    f'CREATE INDEX idx_memories_decay ON memories(collection, {DECAY_REF}) '
    "WHERE status = 'active'",
]

# Filter ids (docs/memory.md, "Vector search"): the context paths recall filters on most, copied
# into memory_vectors when a vector is written (a context that changes takes a new vector row),
# so the in-process index tests them with an array compare before ranking instead of reading
# each candidate's JSON. ``filters`` packs one little-endian int32 per path of CONTEXT_PATHS:
# the id of the (path, value) pair in ``context_values``, 0 where the path is missing or holds
# no scalar. One blob, not a column per path: a column per path cost +0.2 s of index load per
# 100k rows (docs/performance.md). Values compare as SQLite's: one id for 1 and 1.0, and
# ``true`` is 1, as in the SQL equalities this replaces (engine/context_filter.py,
# ContextFilter.sql_equalities); Python's test still decides. Pairs are never deleted: one row
# per distinct value, as collections. Rows of an older store are filled by store.fill_filters.
CONTEXT_PATHS = ('robot', 'robot.id', 'task.name', 'task.success', 'env.sim_or_real')
# The values at CONTEXT_PATHS of ``m``'s context as one JSON array (null where missing), or NULL
# for a context that is not JSON; one parse per row (store.py decodes it into ids).
CONTEXT_VALUES_SQL = ('CASE WHEN json_valid(m.context_json) THEN json_extract(m.context_json, '
                      + ', '.join(repr(f'$.{path}') for path in CONTEXT_PATHS) + ') END')

_V5 = [
    """
    CREATE TABLE context_values (
        id INTEGER PRIMARY KEY,
        path TEXT NOT NULL,
        value NOT NULL,
        UNIQUE (path, value))""",
    'ALTER TABLE memory_vectors ADD COLUMN filters BLOB',
    # Empty once filled (every writer sets filters): the check at each open is one seek.
    'CREATE INDEX idx_vectors_unfiltered ON memory_vectors(seq) WHERE filters IS NULL',
    # The active memories the index does not hold (embedding pending or left BM25-only): a
    # filtered BM25 search adds them to the index's matches (store.filter_candidates).
    'CREATE INDEX idx_memories_unembedded ON memories(collection) '
    "WHERE embedded != 1 AND status = 'active'",
]

# Adjacent memories (engine/adjacency.py): the active memories stored just before and after one
# in the same collection and session, by id (storage order: the index's rowid order within a
# key), one seek each way whatever the store's size.
_V6 = [
    'CREATE INDEX idx_memories_adjacent ON memories(collection, session_id) '
    "WHERE status = 'active'",
]

# The text index's log (engine/text_index.py): once a store has a text index (meta
# ``text_index``), every memory whose text, status, collection or (from version 8) context
# changes is logged here in the transaction of the change, by any process; the index applies
# the log and deletes what it holds.
_TEXT_LOG_WHEN = "EXISTS (SELECT 1 FROM meta WHERE key = 'text_index')"
_V7 = [
    """
    CREATE TABLE text_changes (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        memory_id INTEGER NOT NULL)""",
    f"""
    CREATE TRIGGER text_log_insert AFTER INSERT ON memories WHEN {_TEXT_LOG_WHEN}
    BEGIN INSERT INTO text_changes(memory_id) VALUES (NEW.id); END""",
    f"""
    CREATE TRIGGER text_log_update AFTER UPDATE OF content, status, collection ON memories
    WHEN {_TEXT_LOG_WHEN}
    BEGIN INSERT INTO text_changes(memory_id) VALUES (NEW.id); END""",
    f"""
    CREATE TRIGGER text_log_delete AFTER DELETE ON memories WHEN {_TEXT_LOG_WHEN}
    BEGIN INSERT INTO text_changes(memory_id) VALUES (OLD.id); END""",
]

# The text index holds the values at CONTEXT_PATHS (filtered BM25 searches): a context that
# changes is logged too.
_V8 = [
    'DROP TRIGGER text_log_update',
    f"""
    CREATE TRIGGER text_log_update
    AFTER UPDATE OF content, status, collection, context_json ON memories
    WHEN {_TEXT_LOG_WHEN}
    BEGIN INSERT INTO text_changes(memory_id) VALUES (NEW.id); END""",
]

# When a row whose created_at is a stamp of its own (a perception) was written: one replayed
# from an old bag keeps its header stamp, and retention counts its days from the store time
# (engine/retention.py). NULL: written at created_at (facts, every row of an older store).
_V9 = [
    'ALTER TABLE memories ADD COLUMN stored_at REAL',
]

# Retention (engine/retention.py) asks for the untouched perceptions stored before a time, oldest
# first. Indexed as this expression over just those rows (store.untouched_perceptions names the
# same words, so SQLite uses the index): a prune reads the rows it deletes, not every memory of
# the store (a scan and a sort, 302 ms at 1M, docs/performance.md). A recall's first hit moves a
# perception out of the index; facts are never in it.
STORED = 'COALESCE(stored_at, created_at)'
UNTOUCHED_PERCEPTION = "type = 'perception' AND access_count = 0"
_V10 = [
    f'CREATE INDEX idx_memories_retention ON memories({STORED}) WHERE {UNTOUCHED_PERCEPTION}',
]

# Fleet (docs/fleet.md, "Copies folded into one memory"): another robot's copy of a fact that
# local dedup folded into a memory here, with its latest text and context. The memory follows
# its origin's changes; when that origin forgets or supersedes its copy, a copy still held by
# another robot takes over as the memory's origin (and gives it its text) instead of the memory
# following it out. A copy's own end removes its row.
_V11 = [
    """
    CREATE TABLE fleet_copies (
        gid TEXT PRIMARY KEY,
        memory_id INTEGER NOT NULL REFERENCES memories(id),
        robot_id TEXT NOT NULL,
        content TEXT NOT NULL,
        context_json TEXT NOT NULL)""",
    'CREATE INDEX idx_fleet_copies_memory ON fleet_copies(memory_id)',
]

MIGRATIONS: list[list[str]] = [_V1, _V2, _V3, _V4, _V5, _V6, _V7, _V8, _V9, _V10, _V11]
SCHEMA_VERSION = len(MIGRATIONS)


def version(conn: Any) -> int:
    """Return the schema version the file is at (SQLite's user_version)."""
    return conn.execute('PRAGMA user_version').fetchone()[0]


def migrate(conn: Any) -> int:
    """Bring the schema to SCHEMA_VERSION inside the caller's transaction; return the old one."""
    current = version(conn)
    if current > SCHEMA_VERSION:
        raise StorageError(
            f'database schema version {current} is newer than this robotmem '
            f'({SCHEMA_VERSION}); upgrade robotmem_ros')
    for number in range(current, SCHEMA_VERSION):
        for statement in MIGRATIONS[number]:
            conn.execute(statement)
        conn.execute(f'PRAGMA user_version={number + 1}')
    return current
