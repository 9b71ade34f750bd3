"""The SQLite store's fold snapshots (persistence.md §2.7): the `snapshots` table (one row
per session, its latest), written right after the rows it covers; a load from the latest
valid one plus the rows after it, the rows before it read on first access; and the
repaired full load every other path (and a snapshot that does not check out) takes."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from ...codecs.rows import READ_COLUMNS, event_from_row, event_rows
from ...codecs.snapshots import SnapshotUnusable, encode_snapshot, snapshot_crc
from ..control.collector import gc_paused
from ..errors import SessionCorruptError, SessionFormatError
from ..log.session import Session
from ..model.events import SessionEvent
from ..model.meta import SessionMeta
from ..model.snapshot import SNAPSHOT_VERSION, FoldSnapshot
from .base import (
    Loaded,
    RowSource,
    parent_of,
    plan_repair,
    read_rows,
    refuse_live_repair,
    validate_stored,
)
from .ids import check_session_id
from .leases import Lease, LeaseTable
from .snapshots import SnapshotCounters, checked_snapshot, checked_tail, restored_session
from .sqlite_reads import SqliteReads
from .sqlite_schema import INSERT_EVENTS, SET_HEAD

SNAPSHOTS_TABLE = """
CREATE TABLE IF NOT EXISTS snapshots (
    session_id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    row_crc INTEGER NOT NULL,
    version INTEGER NOT NULL,
    body BLOB NOT NULL,
    crc INTEGER NOT NULL
) WITHOUT ROWID"""
"""Derived data beside schema 3 (no version change: a build without snapshots ignores the
table, and dropping it loses nothing but speed). Created by the first snapshot written."""

SAVE_SNAPSHOT = """
INSERT INTO snapshots (session_id, seq, row_crc, version, body, crc)
SELECT session_id, seq, crc, ?, ?, ? FROM events WHERE session_id = ? AND seq = ? AND crc = ?
ON CONFLICT (session_id) DO UPDATE SET
    seq = excluded.seq, row_crc = excluded.row_crc, version = excluded.version,
    body = excluded.body, crc = excluded.crc
WHERE excluded.seq >= snapshots.seq"""
"""Keyed to the stored row at the snapshot's last seq, only if that row is the one the
snapshot was taken over (its checksum is the snapshot's `key_crc`): otherwise, or with no
such row, nothing is written."""

_SEQS_PER_QUERY = 500
T = TypeVar("T")


class SqliteSnapshots(SqliteReads):
    """Fold snapshots and the loads of a `SqliteStore` (its base class)."""

    _leases: LeaseTable
    _tails: dict[str, tuple[Lease, int]]

    def _init_snapshots(self, enabled: bool) -> None:
        self.snapshots = enabled
        """Whether snapshots are written and trusted (off: every load replays the log)."""
        self.snapshot_counters = SnapshotCounters()

    async def save_snapshot(self, session_id: str, snapshot: FoldSnapshot) -> None:
        """Keep `snapshot` as the session's latest (see `SAVE_SNAPSHOT`); one statement."""
        if not self.snapshots:
            return
        body = encode_snapshot(snapshot)
        values = (SNAPSHOT_VERSION, body, snapshot_crc(session_id, body))
        key = (session_id, snapshot.length - 1, snapshot.key_crc)

        def write(db: sqlite3.Connection) -> None:
            db.execute(SNAPSHOTS_TABLE)
            if db.execute(SAVE_SNAPSHOT, (*values, *key)).rowcount:
                self.snapshot_counters.written += 1

        def run() -> None:
            with self._lock:
                self._transaction(write, write=True)
                self._note_wal(len(body) // 2048 + 2)

        if not self._inline(run):
            await self._writer.run(run)

    def _read_repaired(self, db: sqlite3.Connection, session_id: str, may_write: bool) -> Loaded:
        """The whole log, validated, and repaired when it has an open last turn (the
        closers written in the caller's transaction, which must be a write one)."""
        meta, events = self._load_all(db, session_id)
        fixes = plan_repair(meta, events, lambda seq: self._where(session_id, seq))
        if fixes:
            if not may_write:
                raise refuse_live_repair(session_id, "its last turn has no turn/end")
            self._tails.pop(session_id, None)
            db.executemany(INSERT_EVENTS, event_rows(session_id, fixes))
            db.execute(SET_HEAD, (fixes[-1].seq + 1, session_id))
        return meta, (*events, *fixes)

    async def load_folded(
        self, session_id: str, *, lease: Lease | None = None, repair: bool = True
    ) -> Session:
        """The session from its latest valid snapshot and the rows after it (`load`'s
        checks and repair for those rows), else by replaying the whole log."""
        check_session_id(session_id)

        def full(db: sqlite3.Connection, may_write: bool) -> Session:
            if repair:
                meta, events = self._read_repaired(db, session_id, may_write)
            else:
                meta, events = self._load_all(db, session_id)
                validate_stored(meta, events, lambda seq: self._where(session_id, seq))
            return Session.from_loaded(session_id, events, meta)

        def read(db: sqlite3.Connection, may_write: bool) -> Session:
            restored = self._restored(db, session_id, may_write, repair=repair)
            return full(db, may_write) if restored is None else restored

        def run() -> Session:
            with self._leases.writer_right(session_id, lease) as may_write:
                return self._transaction(lambda db: read(db, may_write), write=may_write)

        with gc_paused():
            if not repair:
                return await self._in_thread(lambda db: read(db, False), write=False)
            return await self._writer.run(run)

    def _restored(
        self, db: sqlite3.Connection, session_id: str, may_write: bool, *, repair: bool
    ) -> Session | None:
        """The session from its snapshot, repaired when `repair`; None (reported) when
        there is none or it does not check out."""
        if not self.snapshots:
            return None
        meta, head = self._need(db, session_id)
        try:
            stored = db.execute(
                "SELECT seq, row_crc, version, CAST(body AS BLOB), crc FROM snapshots "
                "WHERE session_id = ?",
                (session_id,),
            ).fetchone()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return None  # no snapshot was ever written to this database
            raise
        if stored is None:
            return None
        where = self._where(session_id)
        try:
            snapshot, row_crc = checked_snapshot(meta, head, stored, where)
            key = snapshot.length - 1
            rows = db.execute(
                f"SELECT {READ_COLUMNS} FROM events WHERE session_id = ? AND seq >= ? ORDER BY seq",
                (session_id, key),
            )
            tail = checked_tail(
                rows, meta, head, key, row_crc, lambda seq: self._where(session_id, seq)
            )
            lineage = self._lineage(db, meta)
            session, fixes = restored_session(
                meta,
                snapshot,
                tail,
                lambda: self._lazy_read(meta, head, snapshot.length),
                lambda seqs: self._lazy_pick(lineage, seqs),
                repair=repair,
                where=where,
            )
        except SnapshotUnusable as exc:
            self.snapshot_counters.ignore(session_id, exc)
            return None
        if fixes:
            if not may_write:
                raise refuse_live_repair(session_id, "its last turn has no turn/end")
            self._tails.pop(session_id, None)
            db.executemany(INSERT_EVENTS, event_rows(session_id, fixes))
            db.execute(SET_HEAD, (fixes[-1].seq + 1, session_id))
        self.snapshot_counters.restored += 1
        return session

    def _lineage(self, db: sqlite3.Connection, meta: SessionMeta) -> tuple[tuple[str, int], ...]:
        """Per session of the fork chain, child first: its id and its first own seq."""
        chain = [(meta.id, meta.seed_length or 0)]
        seen: frozenset[str] = frozenset({meta.id})
        current = meta
        while current.parent_session is not None:
            current = self._need(db, parent_of(current, seen, self._where(current.id)))[0]
            seen = seen | {current.id}
            chain.append((current.id, current.seed_length or 0))
        return tuple(chain)

    def _read_now(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """`work` in a read transaction on the caller's thread, or in the transaction this
        thread has open (a load that needs an event before the snapshot it restored)."""
        with self._lock:
            db = self._db
            if db is not None and db.in_transaction:
                return self._locked(work)
            return self._transaction(work, write=False)

    def _lazy_read(self, meta: SessionMeta, head: int, length: int) -> list[SessionEvent]:
        """The first `length` events, read now (on the caller's thread), every row checked."""

        def work(db: sqlite3.Connection) -> list[SessionEvent]:
            def rows(of: SessionMeta, first: int, end: int | None) -> Iterable[Any]:
                return db.execute(
                    f"SELECT {READ_COLUMNS} FROM events WHERE session_id = ? AND seq >= ? "
                    "AND seq < ? ORDER BY seq",
                    (of.id, first, head if end is None else end),
                )

            source = RowSource(self._where, lambda sid: self._meta_head(db, sid), rows)
            return read_rows(source, meta, head, length)

        with gc_paused():
            return self._read_now(work)

    def _lazy_pick(
        self, lineage: tuple[tuple[str, int], ...], seqs: Sequence[int]
    ) -> list[SessionEvent]:
        """The events at `seqs`, each read from the session of the chain that holds it."""
        owners: dict[str, list[int]] = {}
        for seq in seqs:
            owner = next(sid for sid, first in lineage if seq >= first)
            owners.setdefault(owner, []).append(seq)

        def work(db: sqlite3.Connection) -> dict[int, SessionEvent]:
            found: dict[int, SessionEvent] = {}
            for owner, wanted in owners.items():
                for start in range(0, len(wanted), _SEQS_PER_QUERY):
                    chunk = wanted[start : start + _SEQS_PER_QUERY]
                    for row in db.execute(
                        f"SELECT {READ_COLUMNS} FROM events WHERE session_id = ? "
                        f"AND seq IN ({', '.join('?' * len(chunk))})",
                        (owner, *chunk),
                    ):
                        try:
                            event = event_from_row(owner, row, self._where(owner, row[0]))
                        except SessionFormatError as exc:
                            raise SessionCorruptError(exc.where, exc.problem) from exc
                        found[event.seq] = event
            return found

        with gc_paused():
            found = self._read_now(work)
        missing = [seq for seq in seqs if seq not in found]
        if missing:
            raise SessionCorruptError(
                self._where(lineage[0][0], missing[0]), "a row before the snapshot is missing"
            )
        return [found[seq] for seq in seqs]
