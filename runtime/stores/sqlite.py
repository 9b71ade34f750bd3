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

The class is built in layers: `sqlite_connection` (the connection, where its work runs,
checkpoints), `sqlite_reads` (checked reads), this module (the Store API, the group
commit); the schema and its migrations are `sqlite_schema`'s.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path

import trio

from ...codecs.rows import (
    EventRow,
    event_rows,
    meta_from_row,
    session_row,
)
from ..control.collector import gc_paused
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
)
from ..log.session import SessionMeta
from ..model.events import SessionEvent
from ..model.meta import DamagedSession
from .base import (
    Batch,
    Failures,
    InlineCommits,
    Listing,
    Loaded,
    check_seqs,
    parent_of,
    raise_failures,
    sole_failure,
    validate_stored,
    write_rights,
)
from .ids import check_session_id
from .leases import OFD_LOCKS, FlockFiles, Lease, LeaseTable, Locker, RangeLocks
from .sqlite_connection import CHECKPOINT_PAGES as CHECKPOINT_PAGES  # re-exported
from .sqlite_connection import Busy
from .sqlite_reads import plain_meta
from .sqlite_schema import EVENTS_TABLE as EVENTS_TABLE  # re-exported
from .sqlite_schema import INSERT_EVENTS, INSERT_SESSION, MOVE_HEAD, SESSION_COLUMNS
from .sqlite_schema import SCHEMA_VERSION as SCHEMA_VERSION  # re-exported
from .sqlite_snapshots import SqliteSnapshots


class _RowRefused(Exception):
    """A group commit's statement failed for some session's rows: roll back, isolate."""


class _StaleTail(Exception):
    """A remembered head no longer matches the database: roll back, commit checked."""


INLINE_EVENTS = 64
"""Most events a group commit may hold to run inline on the trio thread (NORMAL only)."""
INLINE_BYTES = 256 * 1024
"""Most encoded bytes a group commit may hold to run inline (a few WAL pages' writes)."""


class SqliteStore(SqliteSnapshots):
    """A `Store` in one SQLite file (WAL): a `sessions` row per session (meta, lineage,
    acknowledged head, checksum) and checksummed `events` rows (persistence.md §5)."""

    inline_commits: InlineCommits = "alone"

    def __init__(
        self, path: str | Path, *, synchronous: str = "NORMAL", snapshots: bool = True
    ) -> None:
        super().__init__(path, synchronous=synchronous)
        self._init_snapshots(snapshots)
        self.url = f"sqlite:{self.path}?synchronous={self.synchronous}"
        locker: Locker
        if OFD_LOCKS:
            locker = RangeLocks(self._identity)
        else:
            locks = self._real.with_name(self._real.name + ".locks")
            locker = FlockFiles(lambda session_id: locks / f"{session_id}.lock")
        self._leases = LeaseTable(locker)
        self._tails: dict[str, tuple[Lease, int]] = {}
        """Per session written under a lease of this instance: that lease and the head its
        last commit left. Touched only under `_lock`."""

    # the Store API --------------------------------------------------------------------

    async def create(self, meta: SessionMeta) -> None:
        check_session_id(meta.id)
        row = session_row(meta)

        def insert(db: sqlite3.Connection) -> None:
            # One statement, its own transaction (autocommit: no BEGIN and COMMIT round
            # trips); the key constraint is the existence check. A refused statement wrote
            # nothing, and rows are never deleted, so a row found after it is the reason.
            try:
                db.execute(INSERT_SESSION, row)
            except sqlite3.IntegrityError:
                if self._row(db, meta.id) is None:
                    raise
                raise SessionExists(meta.id) from None
            except sqlite3.OperationalError as exc:
                if self._inline_now and exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY:
                    raise Busy from exc
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
        ready = self._checked_heads(db, rows, failures, trust=trust)
        if not isolate:
            try:
                _insert(db, ready, written)
            except sqlite3.Error as exc:
                if not db.in_transaction:
                    raise  # SQLite rolled the whole transaction back: a store-wide failure
                raise _RowRefused from exc
            return
        for session_id, entry in ready.items():
            db.execute("SAVEPOINT one_session")
            try:
                _insert(db, {session_id: entry}, written)
            except sqlite3.Error as exc:
                if not db.in_transaction:
                    raise
                db.execute("ROLLBACK TO one_session")
                failures[session_id] = StoreError(f"sqlite {self.path}: {exc}")
                failures[session_id].__cause__ = exc
            db.execute("RELEASE one_session")

    def _checked_heads(
        self,
        db: sqlite3.Connection,
        rows: dict[str, list[EventRow]],
        failures: Failures,
        *,
        trust: bool,
    ) -> dict[str, tuple[int, list[EventRow]]]:
        """Per session whose rows continue its head: (that head, the rows). The others are
        put in `failures`; a remembered head (`trust`) the rows do not continue raises
        _StaleTail."""
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
        return ready

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

        def run() -> Loaded:
            with self._leases.writer_right(session_id, lease) as may_write:
                return self._transaction(
                    lambda db: self._read_repaired(db, session_id, may_write), write=may_write
                )

        with gc_paused():  # every caller's load, not only a resume's (its objects survive)
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
            for row in db.execute(f"SELECT {SESSION_COLUMNS} FROM sessions ORDER BY rowid"):
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
            db.execute(INSERT_SESSION, session_row(child))
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


def _insert(
    db: sqlite3.Connection,
    chunk: dict[str, tuple[int, list[EventRow]]],
    written: dict[str, int],
) -> None:
    """Insert the rows of `chunk`'s sessions and move each head from the one checked (into
    `written`); a head that moved meanwhile raises _StaleTail."""
    # In key order: each insert then lands next to the one before it in the b-tree
    # (str order is the UTF-8 byte order SQLite's BINARY collation compares).
    # The body goes in as a bytearray: the sqlite3 module binds it as the same BLOB
    # but, unlike bytes, skips its adaptation lookup (a registry probe and two
    # attribute lookups per row, more than the copy costs).
    db.executemany(
        INSERT_EVENTS,
        [
            (sid, seq, kind, time, bytearray(body), crc)
            for key in sorted(chunk)
            for sid, seq, kind, time, body, crc in chunk[key][1]
        ],
    )
    moved = db.executemany(
        MOVE_HEAD,
        [(part[-1][1] + 1, session_id, head) for session_id, (head, part) in chunk.items()],
    )
    if moved.rowcount != len(chunk):
        raise _StaleTail  # only a remembered head can miss: the others were just read
    for session_id, (_, part) in chunk.items():
        written[session_id] = part[-1][1] + 1
