"""The SQLite store's schema (`PRAGMA user_version` 3), its statements, and the schema made
ready on open: created in an empty database, a version-1 or -2 one migrated in place."""

from __future__ import annotations

import sqlite3

from ...codecs.rows import event_crc, meta_crc
from ..errors import SessionFormatUnsupported

SCHEMA_VERSION = 3
"""`PRAGMA user_version` of a database this build writes; 1 and 2 are migrated, newer
refused. 3 has the tables of 2; it moved the writer leases into lock files (leases.py)."""

EVENTS_TABLE = """
CREATE TABLE events (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    time INTEGER NOT NULL,
    body BLOB NOT NULL,
    crc INTEGER NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID"""
"""The events table of schemas 2 and 3 (one clustered b-tree per session's seqs)."""

SCHEMA = f"""
CREATE TABLE sessions (
    id TEXT PRIMARY KEY,
    meta BLOB NOT NULL,
    parent TEXT,
    seed_length INTEGER,
    version INTEGER NOT NULL,
    head INTEGER NOT NULL,
    crc INTEGER NOT NULL
);
{EVENTS_TABLE};
"""
SESSION_COLUMNS = "id, meta, parent, seed_length, version, head, crc"
EVENT_COLUMNS = "session_id, seq, type, time, body, crc"
INSERT_EVENTS = f"INSERT INTO events ({EVENT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)"
SET_HEAD = "UPDATE sessions SET head = ? WHERE id = ?"
MOVE_HEAD = "UPDATE sessions SET head = ? WHERE id = ? AND head = ?"
INSERT_SESSION = f"INSERT INTO sessions ({SESSION_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)"


def prepare_schema(db: sqlite3.Connection, name: str) -> None:
    """Create the schema in an empty database, or migrate a version-1 or -2 one (re-read
    under the write lock: another process may have done it meanwhile). No build of
    schema <= 2 has the file open meanwhile: the path binding excludes them
    (`FileIdentity.bind`). `name` is the database as error messages show it."""
    db.execute("BEGIN IMMEDIATE")
    try:
        version = db.execute("PRAGMA user_version").fetchone()[0]
        tables = db.execute("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table'")
        if version > SCHEMA_VERSION:
            raise SessionFormatUnsupported(
                f"sqlite {name}: schema version {version} is newer than this build "
                f"reads ({SCHEMA_VERSION}); refusing to open it"
            )
        if version == 1:
            migrate_from_1(db)
        elif version == 0 and tables.fetchone()[0] == 0:
            for statement in SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
        elif version not in (2, SCHEMA_VERSION):
            raise SessionFormatUnsupported(
                f"sqlite {name}: schema version {version} with tables present is "
                "not a database this build wrote; refusing to open it"
            )
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


def migrate_from_1(db: sqlite3.Connection) -> None:
    """Schema 1 → 2 inside the caller's transaction: add the checksum and head columns and
    fill them from the stored bytes (a v1 row is trusted as it is: it had no checksum)."""
    db.execute("ALTER TABLE sessions ADD COLUMN head INTEGER")
    db.execute("ALTER TABLE sessions ADD COLUMN crc INTEGER")
    db.execute("ALTER TABLE events ADD COLUMN crc INTEGER")
    # A row whose stored types are already wrong gets no checksum: a load reports it.
    rows = db.execute("SELECT session_id, seq, body FROM events").fetchall()
    db.executemany(
        "UPDATE events SET crc = ? WHERE session_id = ? AND seq = ?",
        [
            (event_crc(sid, seq, body) if _typed(sid, seq, body) else None, sid, seq)
            for sid, seq, body in rows
        ],
    )
    sessions = db.execute(
        "SELECT id, meta, seed_length, (SELECT MAX(seq) FROM events WHERE session_id = id) "
        "FROM sessions"
    ).fetchall()
    db.executemany(
        "UPDATE sessions SET head = ?, crc = ? WHERE id = ?",
        [
            (
                (seed or 0) if last is None else last + 1,
                meta_crc(sid, raw) if _typed(sid, 0, raw) else None,
                sid,
            )
            for sid, raw, seed, last in sessions
        ],
    )


def _typed(session_id: object, seq: object, raw: object) -> bool:
    return isinstance(session_id, str) and type(seq) is int and isinstance(raw, bytes)
