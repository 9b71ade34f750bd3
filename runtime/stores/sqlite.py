"""`SqliteStore` (`sqlite:PATH`): the embedded default store. WAL journal, one connection,
tail-checked appends and one transaction per group commit.

The connection is driven from one long-lived writer thread (`WriterThread`), except that in
NORMAL mode a small write (a create, a group commit of a few steps) runs inline on the trio
thread when the connection is idle and SQLite's write lock is free: there a commit only
appends to the WAL, it neither waits for a lock nor fsyncs. Checkpoints then run only on the
writer thread, posted after an estimated number of WAL pages.

Every event row carries a CRC-32 of its stored bytes and every session row the acknowledged
head of its log, updated in the transaction that appends; a load checks both, so a missing,
reordered or altered row is `SessionCorruptError` naming the seq, never a shorter log.
Writer leases are byte-range locks in lock files beside the database (`leases.RangeLocks`),
and the file may be open through one path only (SQLite keeps a WAL per path).

The tail of a session this instance has written under its lease is kept in memory, so a
commit reads nothing back: its head update is conditional on the head it remembers, and a
session whose head moved anyway (or whose rows collide) is committed again through the
checked path, which reads every head and tail from the database.

`synchronous=NORMAL` (default) makes every committed append survive a process crash;
`FULL` also fsyncs the WAL on each commit, so it survives power loss.

Schema versions (`PRAGMA user_version`): 3 is written by this build; a version-1 database
(no checksums, no heads) or a version-2 one (leases locked on the database file itself) is
migrated in place on first open, in one transaction (no older build can have it open: the
path binding keeps them apart, `leases.FileIdentity.bind`).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import trio

from ...codecs.jsonvalue import FrozenDict
from ...codecs.rows import (
    READ_COLUMNS,
    EventRow,
    event_crc,
    event_rows,
    head_of,
    meta_crc,
    meta_from_row,
    session_row,
)
from ..errors import (
    ErrorCode,
    GroupCommitError,
    SessionCorruptError,
    SessionError,
    SessionExists,
    SessionForkError,
    SessionFormatError,
    SessionFormatUnsupported,
    SessionNotFound,
    StoreError,
    StoreUrlError,
)
from ..log.session import SessionMeta
from ..model.events import SessionEvent
from ..model.meta import FORMAT_VERSION, DamagedSession
from .base import (
    Batch,
    Failures,
    InlineCommits,
    Listing,
    Loaded,
    RowSource,
    check_seqs,
    parent_of,
    plan_repair,
    raise_failures,
    read_rows,
    refuse_live_repair,
    sole_failure,
    validate_stored,
    write_rights,
)
from .ids import check_session_id
from .leases import (
    OFD_LOCKS,
    FileIdentity,
    FlockFiles,
    Lease,
    LeaseTable,
    Locker,
    RangeLocks,
)
from .writer import WriterThread

T = TypeVar("T")


class _RowRefused(Exception):
    """A group commit's statement failed for some session's rows: roll back, isolate."""


class _StaleTail(Exception):
    """A remembered head no longer matches the database: roll back, commit checked."""


class _Busy(Exception):
    """An inline commit found the write lock held: nothing was written, use the thread."""


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

_SCHEMA = f"""
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
_SESSION_COLUMNS = "id, meta, parent, seed_length, version, head, crc"
_EVENT_COLUMNS = "session_id, seq, type, time, body, crc"
_INSERT_EVENTS = f"INSERT INTO events ({_EVENT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)"
_SET_HEAD = "UPDATE sessions SET head = ? WHERE id = ?"
_MOVE_HEAD = "UPDATE sessions SET head = ? WHERE id = ? AND head = ?"
_INSERT_SESSION = f"INSERT INTO sessions ({_SESSION_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)"
_IDS_PER_QUERY = 500
_BUSY_WAIT_MS = 10000

INLINE_EVENTS = 64
"""Most events a group commit may hold to run inline on the trio thread (NORMAL only)."""
INLINE_BYTES = 256 * 1024
"""Most encoded bytes a group commit may hold to run inline (a few WAL pages' writes)."""
CHECKPOINT_PAGES = 1000
"""WAL pages (estimated) after which a passive checkpoint is posted to the writer thread:
SQLite's own automatic threshold, which NORMAL mode turns off (see `_note_wal`)."""

log = logging.getLogger("actorloop.store")


def _migrate_from_1(db: sqlite3.Connection) -> None:
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


def plain_meta(meta: SessionMeta) -> bool:
    """Whether `meta` is plainly one `meta_from_row` reads back from its own row: fields of
    exactly the types it accepts, this build's version and no labels (labels are left to
    the round trip: one nested past the JSON parser's depth would not read back). False
    decides nothing: `create` then asks `meta_from_row`."""
    parent, seed = meta.parent_session, meta.seed_length
    return (
        type(meta.labels) is FrozenDict
        and not meta.labels
        and type(meta.version) is int
        and meta.version == FORMAT_VERSION
        and type(meta.created_at) is int
        and meta.created_at >= 0
        and (parent is None) == (seed is None)
        and (parent is None or type(parent) is str)
        and (seed is None or (type(seed) is int and seed >= 0))
    )


class SqliteStore:
    """A `Store` in one SQLite file (WAL): a `sessions` row per session (meta, lineage,
    acknowledged head, checksum) and checksummed `events` rows (persistence.md §5)."""

    inline_commits: InlineCommits = "alone"

    def __init__(self, path: str | Path, *, synchronous: str = "NORMAL") -> None:
        mode = synchronous.upper()
        if mode not in ("NORMAL", "FULL"):
            raise StoreUrlError(f"sqlite synchronous must be NORMAL or FULL, got {synchronous!r}")
        self.path = Path(path)
        self.synchronous = mode
        self.url = f"sqlite:{self.path}?synchronous={mode}"
        # The database is opened (and its WAL named) through the resolved path, so symlinks
        # to one file are one database; a hard link is refused while another path is open.
        self._real = self.path.resolve()
        locker: Locker
        if OFD_LOCKS:
            locker = RangeLocks(self._identity)
        else:
            locks = self._real.with_name(self._real.name + ".locks")
            locker = FlockFiles(lambda session_id: locks / f"{session_id}.lock")
        self._leases = LeaseTable(locker)
        # Reentrant: a group commit holds it across its transactions and its tail memory.
        self._lock = threading.RLock()
        self._inline_now = False
        self._busy_ms = _BUSY_WAIT_MS
        """The connection's busy timeout now: 0 while inline commits run (they must not
        wait), set back only when thread work needs it (not twice per inline commit)."""
        self._inline_commits = 0
        self._wal_pages = 0
        self._identity_lock = threading.Lock()
        self._file: FileIdentity | None = None
        self._db: sqlite3.Connection | None = None
        self._closed = False
        self._writer = WriterThread(self, f"sqlite store {self.path}")
        self._tails: dict[str, tuple[Lease, int]] = {}
        """Per session written under a lease of this instance: that lease and the head its
        last commit left. Touched only under `_lock`."""

    # connection and transactions ------------------------------------------------------

    def _identity(self) -> FileIdentity:
        """This process's handle on the database file, bound to this store's path."""
        with self._identity_lock:
            if self._closed:
                raise StoreError(f"sqlite store {self.path} is closed")
            if self._file is None:
                identity = FileIdentity.open(self._real)
                try:
                    identity.bind(str(self._real))
                except BaseException:
                    identity.close()
                    raise
                self._file = identity
            return self._file

    def _connect(self) -> sqlite3.Connection:
        if self._db is not None:
            return self._db
        if OFD_LOCKS:
            self._identity()
        self._real.parent.mkdir(parents=True, exist_ok=True)
        # Autocommit mode: every transaction below is an explicit BEGIN ... COMMIT.
        db = sqlite3.connect(self._real, isolation_level=None, check_same_thread=False)
        try:
            db.execute(f"PRAGMA busy_timeout = {_BUSY_WAIT_MS}")
            self._busy_ms = _BUSY_WAIT_MS
            mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(f"sqlite {self.path}: cannot enable WAL (journal_mode={mode})")
            db.execute(f"PRAGMA synchronous = {self.synchronous}")
            if db.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
                self._prepare_schema(db)
            if self.synchronous == "NORMAL":
                # Checkpoints are posted to the writer thread (`_note_wal`), never run by
                # a commit: an inline commit must not fsync on the trio thread.
                db.execute("PRAGMA wal_autocheckpoint = 0")
        except BaseException:
            db.close()
            raise
        self._db = db
        return db

    def _prepare_schema(self, db: sqlite3.Connection) -> None:
        """Create the schema in an empty database, or migrate a version-1 or -2 one (re-read
        under the write lock: another process may have done it meanwhile). No build of
        schema <= 2 has the file open meanwhile: the path binding excludes them
        (`FileIdentity.bind`)."""
        db.execute("BEGIN IMMEDIATE")
        try:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            tables = db.execute("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table'")
            if version > SCHEMA_VERSION:
                raise SessionFormatUnsupported(
                    f"sqlite {self.path}: schema version {version} is newer than this build "
                    f"reads ({SCHEMA_VERSION}); refusing to open it"
                )
            if version == 1:
                _migrate_from_1(db)
            elif version == 0 and tables.fetchone()[0] == 0:
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        db.execute(statement)
            elif version not in (2, SCHEMA_VERSION):
                raise SessionFormatUnsupported(
                    f"sqlite {self.path}: schema version {version} with tables present is "
                    "not a database this build wrote; refusing to open it"
                )
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    def _locked(self, work: Callable[[sqlite3.Connection], T]) -> T:
        with self._lock:
            if self._closed:
                raise StoreError(f"sqlite store {self.path} is closed")
            try:
                db = self._connect()
                wanted = 0 if self._inline_now else _BUSY_WAIT_MS
                if self._busy_ms != wanted:
                    db.execute(f"PRAGMA busy_timeout = {wanted}")
                    self._busy_ms = wanted
                return work(db)
            except sqlite3.Error as exc:
                raise StoreError(f"sqlite {self.path}: {exc}") from exc
            except UnicodeDecodeError as exc:
                # The sqlite3 module decodes SQLite's messages and TEXT values as UTF-8: a
                # damaged file can hold neither (e.g. a mangled schema in the message).
                raise StoreError(f"sqlite {self.path}: undecodable text ({exc})") from exc

    def _transaction(self, work: Callable[[sqlite3.Connection], T], *, write: bool) -> T:
        def run(db: sqlite3.Connection) -> T:
            # IMMEDIATE takes the write lock up front, so a tail check and the insert that
            # follows it cannot be split by another writer.
            try:
                db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            except sqlite3.OperationalError as exc:
                if self._inline_now and exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY:
                    raise _Busy from exc
                raise
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
        return await self._writer.run(lambda: self._transaction(work, write=write))

    # reads ----------------------------------------------------------------------------

    def _where(self, session_id: str, seq: int | None = None) -> str:
        place = f"sqlite {self.path} session {session_id!r}"
        return place if seq is None else f"{place} seq {seq}"

    def _row(self, db: sqlite3.Connection, session_id: str) -> tuple[Any, ...] | None:
        row: tuple[Any, ...] | None = db.execute(
            f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id = ?", (session_id,)
        ).fetchone()
        return row

    def _meta_head(self, db: sqlite3.Connection, session_id: str) -> tuple[SessionMeta, int] | None:
        row = self._row(db, session_id)
        if row is None:
            return None
        try:
            meta = meta_from_row(row, self._where(session_id))
            head = head_of(row, self._where(session_id))
        except SessionFormatError as exc:
            raise SessionCorruptError(exc.where, exc.problem) from exc
        if meta.id != session_id:
            raise SessionCorruptError(self._where(session_id), f"row names {meta.id!r}")
        if head < (meta.seed_length or 0):
            raise SessionCorruptError(
                self._where(session_id), f"acknowledged head {head} is below its fork seed"
            )
        return meta, head

    def _meta(self, db: sqlite3.Connection, session_id: str) -> SessionMeta | None:
        found = self._meta_head(db, session_id)
        return None if found is None else found[0]

    def _need(self, db: sqlite3.Connection, session_id: str) -> tuple[SessionMeta, int]:
        found = self._meta_head(db, session_id)
        if found is None:
            raise SessionNotFound(session_id)
        return found

    def _heads(self, db: sqlite3.Connection, session_ids: Sequence[str]) -> dict[str, Any]:
        """Per session of a group commit: (recorded head, next seq the rows end at), read in
        the caller's transaction (a few queries for the whole commit, not two per session)."""
        ids = sorted(session_ids)
        found: dict[str, Any] = {}
        for start in range(0, len(ids), _IDS_PER_QUERY):
            chunk = ids[start : start + _IDS_PER_QUERY]
            rows = db.execute(
                "SELECT id, head, seed_length, "
                "(SELECT MAX(seq) FROM events WHERE session_id = sessions.id) "
                f"FROM sessions WHERE id IN ({', '.join('?' * len(chunk))})",
                chunk,
            )
            for session_id, head, seed_length, last in rows:
                rows_end = (seed_length or 0) if last is None else last + 1
                found[session_id] = (head, rows_end)
        return found

    def _events(self, db: sqlite3.Connection, meta: SessionMeta, head: int) -> list[SessionEvent]:
        """Every event of the session (its fork seed read through its parents), checked."""

        def rows(of: SessionMeta, first: int, _end: int | None) -> Iterable[Any]:
            # No upper bound: a row past the head is damage, not something to skip.
            return db.execute(
                f"SELECT {READ_COLUMNS} FROM events WHERE session_id = ? AND seq >= ? ORDER BY seq",
                (of.id, first),
            )

        return read_rows(RowSource(self._where, partial(self._meta_head, db), rows), meta, head)

    def _load_all(self, db: sqlite3.Connection, session_id: str) -> Loaded:
        meta, head = self._need(db, session_id)
        return meta, tuple(self._events(db, meta, head))

    # the Store API --------------------------------------------------------------------

    async def create(self, meta: SessionMeta) -> None:
        check_session_id(meta.id)
        row = session_row(meta)

        def insert(db: sqlite3.Connection) -> None:
            # One statement, its own transaction (autocommit: no BEGIN and COMMIT round
            # trips); the key constraint is the existence check. A refused statement wrote
            # nothing, and rows are never deleted, so a row found after it is the reason.
            try:
                db.execute(_INSERT_SESSION, row)
            except sqlite3.IntegrityError:
                if self._row(db, meta.id) is None:
                    raise
                raise SessionExists(meta.id) from None
            except sqlite3.OperationalError as exc:
                if self._inline_now and exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY:
                    raise _Busy from exc
                raise

        if not plain_meta(meta):
            # Refuse writing what a load could not read back (an unsupported version, a
            # field of the wrong type), with the load's own error.
            meta_from_row(row, self._where(meta.id))

        def run() -> None:
            with self._lock:
                self._locked(insert)
                self._note_wal(2)

        if not self._inline(run):
            await self._writer.run(run)

    async def append(self, session_id: str, events: Sequence[SessionEvent]) -> None:
        try:
            await self.append_batch(((session_id, events),))
        except GroupCommitError as exc:
            raise sole_failure(exc) from None

    def _merged(self, batch: Batch, failures: Failures) -> dict[str, tuple[SessionEvent, ...]]:
        """Each session's events of a batch (in order); invalid ids go to `failures`."""
        merged: dict[str, tuple[SessionEvent, ...]] = {}
        tails = self._tails
        for session_id, events in batch:
            # A session with a remembered tail passed this check when it was first written
            # (a read of the dict outside `_lock` is atomic; a stale miss only checks again).
            if type(session_id) is not str or session_id not in tails:
                try:
                    check_session_id(session_id)
                except SessionError as exc:
                    failures[session_id] = exc
                    continue
            known = merged.get(session_id)
            merged[session_id] = tuple(events) if known is None else (*known, *events)
        return merged

    @staticmethod
    def _encode(
        merged: dict[str, tuple[SessionEvent, ...]], failures: Failures
    ) -> dict[str, list[EventRow]]:
        rows: dict[str, list[EventRow]] = {}
        for session_id, events in merged.items():
            if not events:
                continue
            try:
                rows[session_id] = event_rows(session_id, events)
            except Exception as exc:
                failures[session_id] = exc
        return rows

    def _write_rows(self, rows: dict[str, list[EventRow]], written: Failures) -> None:
        # Only a lease held before the commit lets its tail be remembered (not the
        # temporary one `write_rights` takes for a session leased nowhere).
        owned = {session_id: self._leases.lease_of(session_id) for session_id in rows}
        with self._lock:
            if None not in owned.values():
                # Every session is leased here (the loops' case): `write_rights` would
                # take nothing and refuse nothing.
                written.update(self._commit(rows, owned))
                return
            with write_rights(self._leases, rows) as refused:
                written.update(refused)
                writable = {sid: r for sid, r in rows.items() if sid not in refused}
                if writable:
                    written.update(self._commit(writable, owned))

    def _write_inline(self, rows: dict[str, list[EventRow]], failures: Failures) -> bool:
        """Commit `rows` here if they are small enough and `_inline` can run; False (nothing
        written) otherwise."""
        size = sum(len(row[4]) for part in rows.values() for row in part)
        inline: Failures = {}
        if size <= INLINE_BYTES and self._inline(lambda: self._write_rows(rows, inline)):
            failures.update(inline)
            return True
        return False

    async def append_batch(self, batch: Batch) -> None:
        failures: Failures = {}
        merged = self._merged(batch, failures)
        count = sum(len(events) for events in merged.values())
        if count > INLINE_EVENTS:
            # Encoded on the writer thread too: a large commit keeps the trio thread free.
            await self._writer.run(
                lambda: self._write_rows(self._encode(merged, failures), failures)
            )
        elif count:
            rows = self._encode(merged, failures)
            if not self._write_inline(rows, failures):  # the attempt, if any, wrote nothing
                await self._writer.run(lambda: self._write_rows(rows, failures))
        raise_failures(failures)

    def append_batch_now(self, batch: Batch) -> bool:
        """`append_batch` here and now when it can commit inline (see `_inline`): True once
        committed (or raising its GroupCommitError), False when it would have to wait for
        the writer thread — then nothing was written and the caller uses `append_batch`."""
        failures: Failures = {}
        merged = self._merged(batch, failures)
        count = sum(len(events) for events in merged.values())
        if count > INLINE_EVENTS:
            return False
        if count and not self._write_inline(self._encode(merged, failures), failures):
            return False
        raise_failures(failures)
        return True

    def _inline(self, run: Callable[[], None]) -> bool:
        """Run a small write (a create, a group commit of at most INLINE_EVENTS events and
        INLINE_BYTES bytes) here on the trio thread when that cannot block: NORMAL mode (a
        commit appends to the WAL, no fsync), the connection open and idle (no writer
        thread job holds `_lock`), the write lock free (no busy wait: `_Busy`) and no
        checkpoint (those run on the writer thread). False when it did not run: nothing
        was written and the caller uses the thread. Same code and SQL either way."""
        if self.synchronous != "NORMAL" or self._db is None or self._closed:
            return False
        if not self._lock.acquire(blocking=False):
            return False
        try:
            db = self._db
            if db is None or self._closed:
                return False
            self._inline_now = True  # `_locked` turns the busy timeout off for it
            try:
                run()
            except _Busy:
                return False
            finally:
                self._inline_now = False
            self._inline_commits += 1
            return True
        finally:
            self._lock.release()

    def _note_wal(self, pages: int) -> None:
        """Count the WAL pages a commit wrote (an estimate on the high side: twice its rows'
        bytes in pages, two pages per session, two for the head table and the b-tree
        above); past SQLite's own threshold, post a checkpoint."""
        if self.synchronous != "NORMAL":
            return  # FULL keeps SQLite's automatic checkpoints: it commits on the thread
        self._wal_pages += pages
        if self._wal_pages >= CHECKPOINT_PAGES:
            self._wal_pages = 0
            self._writer.post(self._checkpoint)

    def _checkpoint(self) -> None:
        """A passive WAL checkpoint on the writer thread (inline commits skip SQLite's)."""
        try:
            self._locked(lambda db: db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall())
        except StoreError as exc:
            # Not a durability matter: the commits are in the WAL; the next one retries.
            log.warning("sqlite %s: checkpoint failed: %s", self.path, exc)

    def _commit(self, rows: dict[str, list[EventRow]], leases: dict[str, Lease | None]) -> Failures:
        """One group commit, under `_lock`: trusting remembered tails first, then
        (when one turned out stale) checked against the database, then (when SQLite refused
        some session's rows) checked and isolated session by session. `leases`: the lease
        each session was held under before the commit (None: not leased here)."""

        def attempt(*, trust: bool, isolate: bool) -> tuple[Failures, dict[str, int]]:
            checked: Failures = {}
            heads: dict[str, int] = {}
            self._transaction(
                lambda db: self._write(db, rows, checked, heads, trust=trust, isolate=isolate),
                write=True,
            )
            return checked, heads

        try:
            try:
                try:
                    checked, heads = attempt(trust=True, isolate=False)
                except _StaleTail:
                    self._forget(rows)
                    checked, heads = attempt(trust=False, isolate=False)
            except _RowRefused:
                # A statement SQLite refused for one session's rows (e.g. a value over its
                # length limit, or a key a remembered tail did not expect) rolled the commit
                # back: redo it session by session, so only that session is refused.
                # Savepoints cost too much to pay on every commit.
                self._forget(rows)
                checked, heads = attempt(trust=False, isolate=True)
        except BaseException:
            self._forget(rows)
            raise
        # Remembered only once committed, and only under the lease held for the commit.
        for session_id, head in heads.items():
            lease = leases[session_id]
            if lease is not None and self._leases.holds(lease, session_id):
                self._tails[session_id] = (lease, head)
            else:
                self._tails.pop(session_id, None)
        written = sum(len(row[4]) for session_id in heads for row in rows[session_id])
        self._note_wal(written // 2048 + 2 * len(heads) + 2)
        return checked

    def _forget(self, session_ids: Iterable[str]) -> None:
        for session_id in session_ids:
            self._tails.pop(session_id, None)

    def _trusted_heads(self, session_ids: Iterable[str]) -> dict[str, int]:
        """Remembered heads of the sessions still under the lease they were written with."""
        trusted: dict[str, int] = {}
        for session_id in session_ids:
            remembered = self._tails.get(session_id)
            if remembered is not None and self._leases.holds(remembered[0], session_id):
                trusted[session_id] = remembered[1]
        return trusted

    def _write(
        self,
        db: sqlite3.Connection,
        rows: dict[str, list[EventRow]],
        failures: Failures,
        written: dict[str, int],
        *,
        trust: bool,
        isolate: bool,
    ) -> None:
        """Insert each session's rows and move its head (into `written`). Sessions failing a
        check are put in `failures`; with `isolate`, each session's statements run in a
        savepoint so one that SQLite refuses is rolled back alone (without, such a refusal
        raises _RowRefused). With `trust`, a remembered head stands in for reading it; a
        head update that then finds another head raises _StaleTail."""
        trusted = self._trusted_heads(rows) if trust else {}
        heads = (
            self._heads(db, [sid for sid in rows if sid not in trusted])
            if len(trusted) < len(rows)
            else {}
        )
        ready: dict[str, tuple[int, list[EventRow]]] = {}
        for session_id, session_rows in rows.items():
            try:
                if session_id in trusted:
                    head = trusted[session_id]
                elif session_id not in heads:
                    raise SessionNotFound(session_id)
                else:
                    head, rows_end = heads[session_id]
                    if head != rows_end:
                        raise SessionCorruptError(
                            self._where(session_id),
                            f"acknowledged head {head!r} disagrees with the stored rows (they "
                            f"end before seq {rows_end}); load the session to see the damage",
                        )
                check_seqs(session_id, [row[1] for row in session_rows], head)
            except SessionError as exc:
                if session_id in trusted:
                    raise _StaleTail from exc  # the checked path says what is wrong
                failures[session_id] = exc
                continue
            ready[session_id] = (head, session_rows)

        def insert(chunk: dict[str, tuple[int, list[EventRow]]]) -> None:
            # In key order: each insert then lands next to the one before it in the b-tree
            # (str order is the UTF-8 byte order SQLite's BINARY collation compares).
            # The body goes in as a bytearray: the sqlite3 module binds it as the same BLOB
            # but, unlike bytes, skips its adaptation lookup (a registry probe and two
            # attribute lookups per row, more than the copy costs).
            db.executemany(
                _INSERT_EVENTS,
                [
                    (sid, seq, kind, time, bytearray(body), crc)
                    for key in sorted(chunk)
                    for sid, seq, kind, time, body, crc in chunk[key][1]
                ],
            )
            moved = db.executemany(
                _MOVE_HEAD,
                [(part[-1][1] + 1, session_id, head) for session_id, (head, part) in chunk.items()],
            )
            if moved.rowcount != len(chunk):
                raise _StaleTail  # only a remembered head can miss: the others were just read
            for session_id, (_, part) in chunk.items():
                written[session_id] = part[-1][1] + 1

        if not isolate:
            try:
                insert(ready)
            except sqlite3.Error as exc:
                if not db.in_transaction:
                    raise  # SQLite rolled the whole transaction back: a store-wide failure
                raise _RowRefused from exc
            return
        for session_id, entry in ready.items():
            db.execute("SAVEPOINT one_session")
            try:
                insert({session_id: entry})
            except sqlite3.Error as exc:
                if not db.in_transaction:
                    raise
                db.execute("ROLLBACK TO one_session")
                failures[session_id] = StoreError(f"sqlite {self.path}: {exc}")
                failures[session_id].__cause__ = exc
            db.execute("RELEASE one_session")

    async def flush(self, session_id: str | None = None) -> None:
        # Every append commits before it returns; durability is the `synchronous` mode's.
        if session_id is not None:
            check_session_id(session_id)
            await self._in_thread(lambda db: self._need(db, session_id), write=False)
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
            meta, events = self._load_all(db, session_id)
            validate_stored(meta, events, locate)
            return meta, events

        def read(db: sqlite3.Connection, may_write: bool) -> Loaded:
            meta, events = self._load_all(db, session_id)
            fixes = plan_repair(meta, events, locate)
            if fixes:
                if not may_write:
                    raise refuse_live_repair(session_id, "its last turn has no turn/end")
                self._tails.pop(session_id, None)
                db.executemany(_INSERT_EVENTS, event_rows(session_id, fixes))
                db.execute(_SET_HEAD, (fixes[-1].seq + 1, session_id))
            return meta, (*events, *fixes)

        def run() -> Loaded:
            with self._leases.writer_right(session_id, lease) as may_write:
                return self._transaction(lambda db: read(db, may_write), write=may_write)

        if not repair:
            return await self._in_thread(read_only, write=False)
        return await self._writer.run(run)

    async def exists(self, session_id: str) -> bool:
        check_session_id(session_id)
        return await self._in_thread(
            lambda db: (
                db.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone()
                is not None
            ),
            write=False,
        )

    async def list(self) -> Listing:
        def run(db: sqlite3.Connection) -> Listing:
            listing: list[SessionMeta | DamagedSession] = []
            for row in db.execute(f"SELECT {_SESSION_COLUMNS} FROM sessions ORDER BY rowid"):
                shown = row[0] if isinstance(row[0], str) else repr(row[0])
                try:
                    listing.append(meta_from_row(row, self._where(shown)))
                except (SessionFormatError, SessionFormatUnsupported) as exc:
                    listing.append(DamagedSession(shown, str(exc)))
            return tuple(listing)

        return await self._in_thread(run, write=False)

    async def check_integrity(self) -> tuple[str, ...]:
        """`PRAGMA integrity_check`, then every session's rows (checksums, heads, seqs)."""

        def run(db: sqlite3.Connection) -> tuple[str, ...]:
            problems = [
                f"sqlite {self.path}: {row[0]}"
                for row in db.execute("PRAGMA integrity_check")
                if row[0] != "ok"
            ]
            for (session_id,) in db.execute("SELECT id FROM sessions ORDER BY rowid").fetchall():
                try:
                    if not isinstance(session_id, str):
                        raise SessionCorruptError(f"sqlite {self.path}", "a session id is damaged")
                    self._load_all(db, session_id)
                except (SessionError, StoreError) as exc:
                    problems.append(str(exc))
            return tuple(problems)

        return await self._in_thread(run, write=False)

    async def fork(self, parent_id: str, boundary: int, child_id: str) -> SessionMeta:
        check_session_id(parent_id)
        check_session_id(child_id)
        valid = not isinstance(boundary, bool) and isinstance(boundary, int) and boundary >= 0

        def run(db: sqlite3.Connection) -> SessionMeta:
            parent = self._meta_head(db, parent_id)
            if parent is None:
                raise SessionForkError(
                    ErrorCode.SESSION_NOT_FOUND, f"parent {parent_id!r} not found"
                )
            if self._row(db, child_id) is not None:
                raise SessionForkError(
                    ErrorCode.SESSION_ALREADY_EXISTS, f"session {child_id!r} exists"
                )
            owner, head = parent
            if not valid or boundary >= head:
                raise SessionForkError.not_a_seq(parent_id, boundary)
            seen: frozenset[str] = frozenset()
            while owner.parent_session is not None and boundary < (owner.seed_length or 0):
                seen = seen | {owner.id}
                owner = self._need(db, parent_of(owner, seen, self._where(owner.id)))[0]
            row = db.execute(
                "SELECT type FROM events WHERE session_id = ? AND seq = ?", (owner.id, boundary)
            ).fetchone()
            if row is None:
                raise SessionForkError.not_a_seq(parent_id, boundary)
            if row[0] != "turn/end":
                raise SessionForkError.inside_a_turn(parent_id, boundary, row[0])
            child = SessionMeta(child_id, parent_session=parent_id, seed_length=boundary + 1)
            db.execute(_INSERT_SESSION, session_row(child))
            return child

        return await self._in_thread(run, write=True)

    def claim(self, session_id: str) -> Lease:
        return self._leases.claim(check_session_id(session_id))

    async def close(self) -> None:
        def run() -> None:
            with self._lock:
                self._closed = True
                self._tails.clear()
                if self._db is not None:
                    self._db.close()
                    self._db = None

        if not self._writer.closed:
            try:
                await self._writer.run(run)
            finally:
                await self._writer.close()
        # After the connection: the leases and the path binding live on the descriptor
        # `FileIdentity` keeps, closed only once no store of this process uses the file.
        self._leases.release_all()
        with self._identity_lock:
            identity, self._file = self._file, None
        if identity is not None:
            identity.unbind(str(self._real))
            identity.close()
