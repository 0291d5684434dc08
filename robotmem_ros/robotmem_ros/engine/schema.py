"""
Schema and forward migrations (``PRAGMA user_version``).

Each migration is a list of statements applied in one transaction; a database newer than this
code refuses to open rather than being written by code that does not know its tables.
"""

from __future__ import annotations

from typing import Any

from robotmem_ros.errors import StorageError

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
    # never both insert the same active fact (seed 003 accepts that race; we do not).
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

MIGRATIONS: list[list[str]] = [_V1, _V2]
SCHEMA_VERSION = len(MIGRATIONS)


def migrate(conn: Any) -> int:
    """Bring the schema to SCHEMA_VERSION inside the caller's transaction; return the old one."""
    version = conn.execute('PRAGMA user_version').fetchone()[0]
    if version > SCHEMA_VERSION:
        raise StorageError(
            f'database schema version {version} is newer than this robotmem '
            f'({SCHEMA_VERSION}); upgrade robotmem_ros')
    for number in range(version, SCHEMA_VERSION):
        for statement in MIGRATIONS[number]:
            conn.execute(statement)
        conn.execute(f'PRAGMA user_version={number + 1}')
    return version
