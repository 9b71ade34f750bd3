"""`SqliteStore` (`sqlite:PATH`): the embedded default store. WAL journal, one connection
driven from worker threads, tail-checked appends and one transaction per group commit.

`synchronous=NORMAL` (default) makes every committed append survive a process crash;
`FULL` also fsyncs the WAL on each commit, so it survives power loss.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import trio

from actorloop.codecs.rows import (
    EventRow,
    event_from_row,
    event_row,
    meta_from_row,
    session_row,
)
from actorloop.runtime.errors import (
    ErrorCode,
    SessionCorruptError,
    SessionExists,
    SessionForkError,
    SessionFormatError,
    SessionFormatUnsupported,
    SessionNotFound,
    StoreError,
    StoreUrlError,
)
from actorloop.runtime.events import SessionEvent
from actorloop.runtime.session import SessionMeta
from actorloop.runtime.stores.base import (
    Batch,
    Lease,
    LeaseTable,
    Loaded,
    check_continues,
    parent_of,
    plan_repair,
    refuse_live_repair,
    validate_stored,
    write_guard,
)
from actorloop.runtime.stores.ids import check_session_id

T = TypeVar("T")

SCHEMA_VERSION = 1
"""`PRAGMA user_version` of a database this build created; a newer one is refused."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    meta BLOB NOT NULL,
    parent TEXT,
    seed_length INTEGER,
    version INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    time INTEGER NOT NULL,
    body BLOB NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
"""
_SESSION_COLUMNS = "id, meta, parent, seed_length, version"
_IDS_PER_QUERY = 500
_EVENT_COLUMNS = "session_id, seq, type, time, body"


class SqliteStore:
    def __init__(self, path: str | Path, *, synchronous: str = "NORMAL") -> None:
        mode = synchronous.upper()
        if mode not in ("NORMAL", "FULL"):
            raise StoreUrlError(f"sqlite synchronous must be NORMAL or FULL, got {synchronous!r}")
        self.path = Path(path)
        self.synchronous = mode
        self.url = f"sqlite:{self.path}?synchronous={mode}"
        # Beside the real file: two paths (symlinks) to one database share one lease table.
        real = self.path.resolve()
        locks = real.with_name(real.name + ".locks")
        self._leases = LeaseTable(lambda session_id: locks / f"{session_id}.lock")
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self._closed = False

    # connection and transactions ------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        if self._db is not None:
            return self._db
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Autocommit mode: every transaction below is an explicit BEGIN ... COMMIT.
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            db.execute("PRAGMA busy_timeout = 10000")
            mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(f"sqlite {self.path}: cannot enable WAL (journal_mode={mode})")
            db.execute(f"PRAGMA synchronous = {self.synchronous}")
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise SessionFormatUnsupported(
                    f"sqlite {self.path}: schema version {version} is newer than this build "
                    f"reads ({SCHEMA_VERSION}); refusing to open it"
                )
            db.executescript(
                f"BEGIN IMMEDIATE; {_SCHEMA} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
            )
        except BaseException:
            db.close()
            raise
        self._db = db
        return db

    def _locked(self, work: Callable[[sqlite3.Connection], T]) -> T:
        with self._lock:
            if self._closed:
                raise StoreError(f"sqlite store {self.path} is closed")
            try:
                return work(self._connect())
            except sqlite3.Error as exc:
                raise StoreError(f"sqlite {self.path}: {exc}") from exc

    def _transaction(self, work: Callable[[sqlite3.Connection], T], *, write: bool) -> T:
        def run(db: sqlite3.Connection) -> T:
            # IMMEDIATE takes the write lock up front, so a tail check and the insert that
            # follows it cannot be split by another writer.
            db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                result = work(db)
                db.execute("COMMIT")
            except BaseException:
                # Also after a failed COMMIT (e.g. SQLITE_FULL): leaving the transaction
                # open would keep the write lock and block every later BEGIN.
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            return result

        return self._locked(run)

    async def _in_thread(self, work: Callable[[sqlite3.Connection], T], *, write: bool) -> T:
        return await trio.to_thread.run_sync(lambda: self._transaction(work, write=write))

    # reads ----------------------------------------------------------------------------

    def _where(self, session_id: str, seq: int | None = None) -> str:
        place = f"sqlite {self.path} session {session_id!r}"
        return place if seq is None else f"{place} seq {seq}"

    def _meta(self, db: sqlite3.Connection, session_id: str) -> SessionMeta | None:
        row = db.execute(
            f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id = ?", (session_id,)
        ).fetchone()
        if row is None:
            return None
        try:
            return meta_from_row(row, self._where(session_id))
        except SessionFormatError as exc:
            raise SessionCorruptError(exc.where, exc.problem) from exc

    def _need_meta(self, db: sqlite3.Connection, session_id: str) -> SessionMeta:
        meta = self._meta(db, session_id)
        if meta is None:
            raise SessionNotFound(session_id)
        return meta

    def _next_seqs(self, db: sqlite3.Connection, session_ids: set[str]) -> dict[str, int]:
        """The next seq of each session, read in the caller's transaction (a few queries
        for a whole group commit rather than two per session)."""
        ids = sorted(session_ids)
        next_seqs: dict[str, int] = {}
        for start in range(0, len(ids), _IDS_PER_QUERY):
            chunk = ids[start : start + _IDS_PER_QUERY]
            rows = db.execute(
                "SELECT id, seed_length, "
                "(SELECT MAX(seq) FROM events WHERE session_id = sessions.id) "
                f"FROM sessions WHERE id IN ({', '.join('?' * len(chunk))})",
                chunk,
            )
            for session_id, seed_length, last in rows:
                next_seqs[session_id] = (seed_length or 0) if last is None else last + 1
        for session_id in ids:
            if session_id not in next_seqs:
                raise SessionNotFound(session_id)
        return next_seqs

    def _events(
        self,
        db: sqlite3.Connection,
        meta: SessionMeta,
        length: int | None = None,
        seen: frozenset[str] = frozenset(),
    ) -> list[SessionEvent]:
        """The first `length` events (all if None), reading fork parents' seeds recursively."""
        first = meta.seed_length or 0
        events: list[SessionEvent] = []
        if meta.parent_session is not None:
            seen = seen | {meta.id}
            parent = self._meta(db, parent_of(meta, seen, self._where(meta.id)))
            if parent is None:
                raise SessionCorruptError(
                    self._where(meta.id), f"fork parent {meta.parent_session!r} is missing"
                )
            events = self._events(db, parent, first if length is None else min(length, first), seen)
        if length is not None and length <= first:
            return events
        upper = -1 if length is None else length
        rows = db.execute(
            f"SELECT {_EVENT_COLUMNS} FROM events WHERE session_id = ? AND seq >= ? "
            "AND (? < 0 OR seq < ?) ORDER BY seq",
            (meta.id, first, upper, upper),
        )
        for row in rows:
            expected = len(events)
            where = self._where(meta.id, row[1])
            if row[1] != expected:
                raise SessionCorruptError(where, f"seq {row[1]} where seq {expected} belongs")
            try:
                events.append(event_from_row(row, where))
            except SessionFormatError as exc:
                raise SessionCorruptError(where, exc.problem) from exc
        if length is not None and len(events) != length:
            raise SessionCorruptError(
                self._where(meta.id),
                f"holds {len(events)} of the {length} seed events a fork needs",
            )
        return events

    # the Store API --------------------------------------------------------------------

    async def create(self, meta: SessionMeta) -> None:
        check_session_id(meta.id)
        row = session_row(meta)

        def insert(db: sqlite3.Connection) -> None:
            if self._meta(db, meta.id) is not None:
                raise SessionExists(meta.id)
            db.execute(f"INSERT INTO sessions ({_SESSION_COLUMNS}) VALUES (?, ?, ?, ?, ?)", row)

        meta_from_row(row, self._where(meta.id))  # refuse writing an unsupported version
        await self._in_thread(insert, write=True)

    async def append(self, session_id: str, events: Sequence[SessionEvent]) -> None:
        await self.append_batch(((session_id, events),))

    async def append_batch(self, batch: Batch) -> None:
        entries = [(session_id, events) for session_id, events in batch if events]
        for session_id, _events in batch:
            check_session_id(session_id)

        def write(db: sqlite3.Connection, rows: list[EventRow]) -> None:
            next_seqs = self._next_seqs(db, {session_id for session_id, _ in entries})
            for session_id, events in entries:
                check_continues(session_id, events, next_seqs[session_id])
                next_seqs[session_id] += len(events)
            db.executemany(f"INSERT INTO events ({_EVENT_COLUMNS}) VALUES (?, ?, ?, ?, ?)", rows)

        def run() -> None:
            # Encoded outside the connection lock: encoding needs no database.
            rows = [
                event_row(session_id, event) for session_id, events in entries for event in events
            ]
            with write_guard(self._leases, {session_id for session_id, _ in entries}):
                self._transaction(lambda db: write(db, rows), write=True)

        if entries:
            await trio.to_thread.run_sync(run)

    async def flush(self, session_id: str | None = None) -> None:
        # Every append commits before it returns; durability is the `synchronous` mode's.
        if session_id is not None:
            check_session_id(session_id)
            await self._in_thread(lambda db: self._need_meta(db, session_id), write=False)
        elif self._closed:
            raise StoreError(f"sqlite store {self.path} is closed")
        else:
            await trio.lowlevel.checkpoint()

    async def load(
        self, session_id: str, *, lease: Lease | None = None, repair: bool = True
    ) -> Loaded:
        check_session_id(session_id)

        def locate(seq: int) -> str:
            return self._where(session_id, seq)

        def read_only(db: sqlite3.Connection) -> Loaded:
            meta = self._need_meta(db, session_id)
            events = self._events(db, meta)
            validate_stored(meta, events, locate)
            return meta, tuple(events)

        def read(db: sqlite3.Connection, may_write: bool) -> Loaded:
            meta = self._need_meta(db, session_id)
            events = self._events(db, meta)
            fixes = plan_repair(meta, events, locate)
            if fixes:
                if not may_write:
                    raise refuse_live_repair(session_id, "its last turn has no turn/end")
                db.executemany(
                    f"INSERT INTO events ({_EVENT_COLUMNS}) VALUES (?, ?, ?, ?, ?)",
                    [event_row(session_id, event) for event in fixes],
                )
            return meta, (*events, *fixes)

        def run() -> Loaded:
            with self._leases.writer_right(session_id, lease) as may_write:
                return self._transaction(lambda db: read(db, may_write), write=may_write)

        if not repair:
            return await self._in_thread(read_only, write=False)
        return await trio.to_thread.run_sync(run)

    async def exists(self, session_id: str) -> bool:
        check_session_id(session_id)
        return await self._in_thread(
            lambda db: (
                db.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone()
                is not None
            ),
            write=False,
        )

    async def list(self) -> tuple[SessionMeta, ...]:
        def run(db: sqlite3.Connection) -> tuple[SessionMeta, ...]:
            rows = db.execute(f"SELECT {_SESSION_COLUMNS} FROM sessions ORDER BY rowid")
            return tuple(meta_from_row(row, self._where(row[0])) for row in rows)

        return await self._in_thread(run, write=False)

    async def fork(self, parent_id: str, boundary: int, child_id: str) -> SessionMeta:
        check_session_id(parent_id)
        check_session_id(child_id)
        if isinstance(boundary, bool) or not isinstance(boundary, int) or boundary < 0:
            raise SessionForkError(
                ErrorCode.INVALID_BOUNDARY, f"boundary {boundary!r} is not a seq"
            )
        child = SessionMeta(child_id, parent_session=parent_id, seed_length=boundary + 1)

        def run(db: sqlite3.Connection) -> SessionMeta:
            parent = self._meta(db, parent_id)
            if parent is None:
                raise SessionForkError(
                    ErrorCode.SESSION_NOT_FOUND, f"parent {parent_id!r} not found"
                )
            if self._meta(db, child_id) is not None:
                raise SessionForkError(
                    ErrorCode.SESSION_ALREADY_EXISTS, f"session {child_id!r} exists"
                )
            owner = parent
            seen: frozenset[str] = frozenset()
            while owner.parent_session is not None and boundary < (owner.seed_length or 0):
                seen = seen | {owner.id}
                owner = self._need_meta(db, parent_of(owner, seen, self._where(owner.id)))
            row = db.execute(
                "SELECT type FROM events WHERE session_id = ? AND seq = ?", (owner.id, boundary)
            ).fetchone()
            if row is None:
                raise SessionForkError(
                    ErrorCode.INVALID_BOUNDARY,
                    f"boundary {boundary} is not a stored seq of {parent_id!r}",
                )
            if row[0] != "turn/end":
                raise SessionForkError(
                    ErrorCode.INVALID_BOUNDARY, f"boundary {boundary} is a {row[0]}, not a turn/end"
                )
            db.execute(
                f"INSERT INTO sessions ({_SESSION_COLUMNS}) VALUES (?, ?, ?, ?, ?)",
                session_row(child),
            )
            return child

        return await self._in_thread(run, write=True)

    def claim(self, session_id: str) -> Lease:
        return self._leases.claim(check_session_id(session_id))

    async def close(self) -> None:
        def run() -> None:
            with self._lock:
                self._closed = True
                if self._db is not None:
                    self._db.close()
                    self._db = None

        await trio.to_thread.run_sync(run)
        self._leases.release_all()
