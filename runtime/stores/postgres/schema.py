"""The PostgreSQL schema of the store (all in the `actorloop` schema namespace) and its
version: created in an empty database, checked on every first connection, and a database
written by a newer build refused.

* `sessions`: the meta record (checksummed as in SQLite), lineage, the acknowledged head
  (its event count), and ownership: `owner_node`, `owner_epoch` (bumped by every claim; a
  commit of events is conditional on it) and `lease_expires` (the database's clock).
* `events`: one row per event, `PRIMARY KEY (session_id, seq)`, the canonical bytes and
  their CRC-32, and `epoch`, the owner epoch the row was committed under.
* `nodes`: each live store instance's heartbeat (routing asks whether an owner is alive).
* `inbox`: requests handed to the instance that owns their session, and their answers.
* `idempotency_keys`: the keys of state-changing requests (runtime/stores/idempotency.py;
  also created on first use in a database made before it existed).
"""

from __future__ import annotations

import psycopg
from psycopg import errors as pg_errors

from ...errors import SessionFormatUnsupported
from ..idempotency import CREATE_KEYS

SCHEMA_VERSION = 1
NAMESPACE = "actorloop"

_DDL = (
    "CREATE SCHEMA IF NOT EXISTS actorloop",
    """CREATE TABLE actorloop.schema_version (
        version integer NOT NULL
    )""",
    """CREATE TABLE actorloop.sessions (
        id text PRIMARY KEY,
        meta bytea NOT NULL,
        parent text,
        seed_length bigint,
        version integer NOT NULL,
        head bigint NOT NULL,
        crc bigint NOT NULL,
        owner_node text,
        owner_epoch bigint NOT NULL DEFAULT 0,
        lease_expires timestamptz,
        listed bigserial NOT NULL
    )""",
    "CREATE INDEX sessions_by_owner ON actorloop.sessions (owner_node)",
    """CREATE TABLE actorloop.events (
        session_id text NOT NULL,
        seq bigint NOT NULL,
        type text NOT NULL,
        time bigint NOT NULL,
        body bytea NOT NULL,
        crc bigint NOT NULL,
        epoch bigint NOT NULL,
        PRIMARY KEY (session_id, seq)
    )""",
    """CREATE TABLE actorloop.nodes (
        id text PRIMARY KEY,
        expires timestamptz NOT NULL
    )""",
    """CREATE TABLE actorloop.inbox (
        id bigserial PRIMARY KEY,
        session_id text NOT NULL,
        target_node text NOT NULL,
        origin_node text NOT NULL,
        request bytea NOT NULL,
        body bytea NOT NULL,
        state text NOT NULL DEFAULT 'pending',
        cancel_requested boolean NOT NULL DEFAULT false,
        status integer,
        response bytea,
        created timestamptz NOT NULL DEFAULT now()
    )""",
    "CREATE INDEX inbox_pending ON actorloop.inbox (target_node) WHERE state = 'pending'",
    CREATE_KEYS.format(table="actorloop.idempotency_keys"),
)


def prepare(conn: psycopg.Connection) -> None:
    """Create the schema in a database that has none, or check the one it has (another
    process may be creating it at the same moment: a lost race is retried as a check)."""
    for attempt in range(3):
        try:
            with conn.transaction():
                if _installed(conn):
                    return
                for statement in _DDL:
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO actorloop.schema_version (version) VALUES (%s)", (SCHEMA_VERSION,)
                )
            return
        except (pg_errors.UniqueViolation, pg_errors.DuplicateTable, pg_errors.DuplicateObject):
            if attempt == 2:
                raise


def _installed(conn: psycopg.Connection) -> bool:
    tables = {
        row[0]
        for row in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
            (NAMESPACE,),
        )
    }
    if not tables:
        return False
    if "schema_version" not in tables:
        raise SessionFormatUnsupported(
            f"postgres: schema {NAMESPACE!r} holds tables {sorted(tables)[:5]} but no "
            "schema_version: not a store this build wrote; refusing to use it"
        )
    rows = conn.execute("SELECT version FROM actorloop.schema_version").fetchall()
    if len(rows) != 1:
        raise SessionFormatUnsupported(
            f"postgres: {len(rows)} schema_version rows (one expected); refusing to use it"
        )
    version = rows[0][0]
    if version != SCHEMA_VERSION:
        newer = "newer than this build reads" if version > SCHEMA_VERSION else "unknown"
        raise SessionFormatUnsupported(
            f"postgres: schema version {version} is {newer} ({SCHEMA_VERSION}); refusing to use it"
        )
    return True
