"""
Hub schema, versioned like the local one: ``robotmem fleet migrate`` applies what is missing.

Run by the hub's owner (an administrator role), never by a robot. Layout:

* ``robotmem.memories``: one row per (robot, memory), keyed by a global id. ``seq`` and
  ``txid`` are assigned by the hub on every insert or change; robots pull by the watermark
  ``(txid, seq)`` below the oldest running transaction, so a row committed late is never
  skipped (a bare sequence can commit out of order) and no robot clock is ever compared.
* ``robotmem.robots`` maps database roles to robot ids; ``robotmem.grants`` lists the
  collections a robot may read. Row-level security lets a robot role insert and change only
  rows with its own robot id and read its own rows plus granted collections.
* A statement trigger sends ``NOTIFY robotmem_fleet`` so listening robots pull at once.
"""

from __future__ import annotations

from typing import Any

from robotmem_ros.errors import ConfigError, StorageError

ROBOT_GROUP = 'robotmem_robot'
CHANNEL = 'robotmem_fleet'
DEFAULT_DIM = 384


def _v1(dim: int) -> list[str]:
    return [
        'CREATE EXTENSION IF NOT EXISTS vector',
        'CREATE SCHEMA IF NOT EXISTS robotmem',
        'CREATE TABLE robotmem.robots (robot_id text PRIMARY KEY, role name UNIQUE NOT NULL)',
        """CREATE TABLE robotmem.grants (
               robot_id text NOT NULL REFERENCES robotmem.robots ON DELETE CASCADE,
               collection text NOT NULL, PRIMARY KEY (robot_id, collection))""",
        'CREATE SEQUENCE robotmem.change_seq',
        f"""CREATE TABLE robotmem.memories (
               gid text PRIMARY KEY,
               robot_id text NOT NULL,
               collection text NOT NULL,
               type text NOT NULL,
               content text NOT NULL,
               category text NOT NULL DEFAULT '',
               kind text NOT NULL DEFAULT 'semantic',
               confidence real NOT NULL,
               context jsonb NOT NULL DEFAULT '{{}}',
               status text NOT NULL CHECK (status IN ('active', 'superseded', 'forgotten')),
               superseded_by text,
               created_at double precision NOT NULL,
               model text NOT NULL DEFAULT '',
               embedding vector({int(dim)}),
               txid xid8 NOT NULL DEFAULT pg_current_xact_id(),
               seq bigint NOT NULL DEFAULT 0,
               tsv tsvector GENERATED ALWAYS AS (to_tsvector('simple', content)) STORED)""",
        'CREATE INDEX memories_watermark ON robotmem.memories (txid, seq)',
        'CREATE INDEX memories_robot ON robotmem.memories (robot_id)',
        'CREATE INDEX memories_tsv ON robotmem.memories USING gin (tsv)',
        """CREATE INDEX memories_embedding ON robotmem.memories
               USING hnsw (embedding vector_cosine_ops)""",
        # The hub, not the robot, orders changes: every write gets a fresh (txid, seq).
        """CREATE FUNCTION robotmem.stamp() RETURNS trigger LANGUAGE plpgsql
               SECURITY DEFINER SET search_path = robotmem, pg_temp AS $$
           BEGIN
               NEW.seq := nextval('robotmem.change_seq');
               NEW.txid := pg_current_xact_id();
               RETURN NEW;
           END $$""",
        """CREATE TRIGGER memories_stamp BEFORE INSERT OR UPDATE ON robotmem.memories
               FOR EACH ROW EXECUTE FUNCTION robotmem.stamp()""",
        f"""CREATE FUNCTION robotmem.announce() RETURNS trigger LANGUAGE plpgsql AS $$
           BEGIN PERFORM pg_notify('{CHANNEL}', ''); RETURN NULL; END $$""",
        """CREATE TRIGGER memories_announce AFTER INSERT OR UPDATE ON robotmem.memories
               FOR EACH STATEMENT EXECUTE FUNCTION robotmem.announce()""",
        # Security definer: a robot role cannot read robots/grants, but its policies can.
        """CREATE FUNCTION robotmem.robot_of(who name) RETURNS text LANGUAGE sql STABLE
               SECURITY DEFINER SET search_path = robotmem, pg_temp AS $$
           SELECT robot_id FROM robotmem.robots WHERE role = who $$""",
        """CREATE FUNCTION robotmem.readable(who name) RETURNS SETOF text LANGUAGE sql STABLE
               SECURITY DEFINER SET search_path = robotmem, pg_temp AS $$
           SELECT g.collection FROM robotmem.grants g
           JOIN robotmem.robots r USING (robot_id) WHERE r.role = who $$""",
        'ALTER TABLE robotmem.memories ENABLE ROW LEVEL SECURITY',
        # Sub-selects make the lookups one-time (hashed) subplans instead of one call per row.
        """CREATE POLICY own_insert ON robotmem.memories FOR INSERT
               WITH CHECK (robot_id = (SELECT robotmem.robot_of(current_user)))""",
        """CREATE POLICY own_update ON robotmem.memories FOR UPDATE
               USING (robot_id = (SELECT robotmem.robot_of(current_user)))
               WITH CHECK (robot_id = (SELECT robotmem.robot_of(current_user)))""",
        """CREATE POLICY granted_read ON robotmem.memories FOR SELECT
               USING (robot_id = (SELECT robotmem.robot_of(current_user))
                      OR collection IN (SELECT robotmem.readable(current_user)))""",
        f"""DO $$ BEGIN
               IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{ROBOT_GROUP}') THEN
                   CREATE ROLE {ROBOT_GROUP} NOLOGIN;
               END IF;
           END $$""",
        f'GRANT USAGE ON SCHEMA robotmem TO {ROBOT_GROUP}',
        f'GRANT SELECT, INSERT, UPDATE ON robotmem.memories TO {ROBOT_GROUP}',
        f'GRANT SELECT ON robotmem.schema_version TO {ROBOT_GROUP}',
        f'GRANT EXECUTE ON FUNCTION robotmem.robot_of(name), robotmem.readable(name) '
        f'TO {ROBOT_GROUP}',
    ]


MIGRATIONS = [_v1]
SCHEMA_VERSION = len(MIGRATIONS)


def hub_version(conn: Any) -> int:
    """Return the schema version of the hub (0 = not created)."""
    row = conn.execute("SELECT to_regclass('robotmem.schema_version') IS NOT NULL").fetchone()
    if not row[0]:
        return 0
    return conn.execute('SELECT max(version) FROM robotmem.schema_version').fetchone()[0] or 0


def migrate(conn: Any, dim: int = DEFAULT_DIM) -> tuple[int, int]:
    """Bring the hub to SCHEMA_VERSION in one transaction; return (old, new) versions."""
    with conn.transaction():
        conn.execute('SELECT pg_advisory_xact_lock(16016016)')  # one migrator at a time
        old = hub_version(conn)
        if old > SCHEMA_VERSION:
            raise StorageError(f'hub schema version {old} is newer than this robotmem '
                               f'({SCHEMA_VERSION}); upgrade robotmem_ros')
        if old == 0:
            conn.execute('CREATE SCHEMA IF NOT EXISTS robotmem')
            conn.execute('CREATE TABLE robotmem.schema_version (version int NOT NULL, '
                         'applied_at timestamptz NOT NULL DEFAULT now())')
        for number in range(old, SCHEMA_VERSION):
            for statement in MIGRATIONS[number](dim):
                conn.execute(statement)
            conn.execute('INSERT INTO robotmem.schema_version(version) VALUES (%s)',
                         (number + 1,))
    return old, SCHEMA_VERSION


def add_robot(conn: Any, robot_id: str, role: str, password: str | None,
              collections: list[str]) -> None:
    """Create the robot's login role (member of the robot group), register it, grant reads."""
    from psycopg import sql
    if not role.replace('_', '').isalnum():
        raise ConfigError(f'role must be letters, digits and "_", got {role!r}')
    with conn.transaction():
        exists = conn.execute('SELECT 1 FROM pg_roles WHERE rolname = %s', (role,)).fetchone()
        if not exists:
            conn.execute(sql.SQL('CREATE ROLE {} LOGIN IN ROLE {}').format(
                sql.Identifier(role), sql.Identifier(ROBOT_GROUP)))
        if password is not None:
            conn.execute(sql.SQL('ALTER ROLE {} PASSWORD {}').format(
                sql.Identifier(role), sql.Literal(password)))
        conn.execute('INSERT INTO robotmem.robots(robot_id, role) VALUES (%s, %s) '
                     'ON CONFLICT (robot_id) DO UPDATE SET role = excluded.role',
                     (robot_id, role))
        grant(conn, robot_id, collections)


def grant(conn: Any, robot_id: str, collections: list[str]) -> None:
    """Let ``robot_id`` read ``collections`` (its own rows it can always read)."""
    conn.execute('INSERT INTO robotmem.grants(robot_id, collection) '
                 'SELECT %s, unnest(%s::text[]) ON CONFLICT DO NOTHING',
                 (robot_id, list(collections)))
