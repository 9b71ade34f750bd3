"""The PostgreSQL store's fold snapshots (persistence.md §2.7, §10): the `snapshots` table
(one row per session, its latest), written right after the rows it covers; and a load —
a new owner's claim and replay included — from the latest valid one plus the rows after
it, the rows before it read on first access through the pool. The store's methods
`save_snapshot` and `load_folded` call these."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, TypeVar, cast

import psycopg
from psycopg import errors as pg_errors

from ....codecs.rows import READ_COLUMNS, event_from_row
from ....codecs.snapshots import SnapshotUnusable, encode_snapshot, snapshot_crc
from ...control.collector import gc_paused
from ...errors import SessionCorruptError, SessionFormatError
from ...log.session import Session
from ...model.events import SessionEvent
from ...model.meta import SessionMeta
from ...model.snapshot import SNAPSHOT_VERSION, FoldSnapshot
from ..base import (
    Loaded,
    RowSource,
    parent_of,
    plan_repair,
    read_rows,
    refuse_live_repair,
    validate_stored,
)
from ..ids import check_session_id
from ..leases import Lease
from ..snapshots import SnapshotCounters, checked_snapshot, checked_tail, restored_session
from .claims import Claim, Claims
from .connections import Connections
from .stored import StoredRow

T = TypeVar("T")


class SnapshotHost(Protocol):
    """What these functions use of the store they are the snapshot methods of (the
    `PostgresStore` of store.py, which derives from `FoldSnapshots`)."""

    node: str | None
    snapshot_state: SnapshotState
    _claims: Claims
    _connections: Connections

    @property
    def snapshots(self) -> bool: ...

    async def execute(self, work: Callable[[psycopg.Connection], T]) -> T: ...

    async def load(
        self, session_id: str, *, lease: Lease | None = None, repair: bool = True
    ) -> Loaded: ...

    def _where(self, session_id: str, seq: int | None = None) -> str: ...

    def _stored(
        self, conn: psycopg.Connection, session_id: str, *, lock: bool = False
    ) -> StoredRow | None: ...

    def _need(
        self, conn: psycopg.Connection, session_id: str, *, lock: bool = False
    ) -> StoredRow: ...

    def _take(
        self, conn: psycopg.Connection, session_id: str, claim: Claim
    ) -> tuple[StoredRow, int]: ...

    def _taken(self, claim: Claim | None, epoch: int, started: float) -> None: ...

    def _load_all(self, conn: psycopg.Connection, stored: StoredRow) -> list[SessionEvent]: ...

    def _append_fixes(
        self,
        conn: psycopg.Connection,
        session_id: str,
        fixes: Sequence[SessionEvent],
        epoch: int,
        owner: str | None,
    ) -> None: ...


SNAPSHOTS_TABLE = """CREATE TABLE IF NOT EXISTS actorloop.snapshots (
    session_id text PRIMARY KEY,
    seq bigint NOT NULL,
    row_crc bigint NOT NULL,
    version integer NOT NULL,
    body bytea NOT NULL,
    crc bigint NOT NULL
)"""
"""Derived data beside schema 1 (no version change: a build without snapshots ignores the
table). Created by the first snapshot a store instance writes."""

SAVE_SNAPSHOT = """
INSERT INTO actorloop.snapshots (session_id, seq, row_crc, version, body, crc)
SELECT session_id, seq, crc, %s, %s, %s FROM actorloop.events
WHERE session_id = %s AND seq = %s AND crc = %s
ON CONFLICT (session_id) DO UPDATE SET
    seq = excluded.seq, row_crc = excluded.row_crc, version = excluded.version,
    body = excluded.body, crc = excluded.crc
WHERE excluded.seq >= actorloop.snapshots.seq"""

_SEQS_PER_QUERY = 1000


class SnapshotState:
    """A store instance's fold-snapshot settings and counters (`store.snapshots`,
    `store.snapshot_state.counters`) and whether it has made sure the table exists."""

    def __init__(self) -> None:
        self.enabled = True
        self.counters = SnapshotCounters()
        self.table = False


class FoldSnapshots:
    """The fold-snapshot methods of `PostgresStore` (its base class)."""

    snapshot_state: SnapshotState

    @property
    def snapshots(self) -> bool:
        """Fold snapshots written and trusted (persistence.md §2.7); off: full replays."""
        return self.snapshot_state.enabled

    @property
    def snapshot_counters(self) -> SnapshotCounters:
        """What this instance did with fold snapshots."""
        return self.snapshot_state.counters

    async def save_snapshot(self, session_id: str, snapshot: FoldSnapshot) -> None:
        """Keep `snapshot` as the session's latest, keyed to its last row."""
        if self.snapshots:
            await save(cast(SnapshotHost, self), session_id, snapshot)

    async def load_folded(
        self, session_id: str, *, lease: Lease | None = None, repair: bool = True
    ) -> Session:
        """`load` as a `Session`, from the latest valid fold snapshot when there is one."""
        check_session_id(session_id)
        store = cast(SnapshotHost, self)
        return await load_folded(store, session_id, lease=lease, repair=repair)


async def save(store: SnapshotHost, session_id: str, snapshot: FoldSnapshot) -> None:
    """`SAVE_SNAPSHOT`, keyed to the stored row at the snapshot's last seq."""
    body = encode_snapshot(snapshot)
    values = (SNAPSHOT_VERSION, body, snapshot_crc(session_id, body), session_id)

    def write(conn: psycopg.Connection) -> int:
        with conn.transaction():
            key = (snapshot.length - 1, snapshot.key_crc)
            return conn.execute(SAVE_SNAPSHOT, (*values, *key)).rowcount

    if not store.snapshot_state.table:
        await store.execute(_create_table)
        store.snapshot_state.table = True
    if await store.execute(write):
        store.snapshot_state.counters.written += 1


def _create_table(conn: psycopg.Connection) -> None:
    try:
        with conn.transaction():
            conn.execute(SNAPSHOTS_TABLE)
    except (pg_errors.UniqueViolation, pg_errors.DuplicateTable):
        pass  # another process created it at the same moment: it is there


async def load_folded(
    store: SnapshotHost, session_id: str, *, lease: Lease | None, repair: bool
) -> Session:
    """`store.load` as a `Session`, from the latest valid snapshot when there is one."""

    def folded(conn: psycopg.Connection, stored: StoredRow, repair_now: bool) -> Session | None:
        return _restored(store, conn, stored, repair=repair_now)

    def full(conn: psycopg.Connection, stored: StoredRow) -> tuple[Session, Sequence[SessionEvent]]:
        events = store._load_all(conn, stored)
        fixes = plan_repair(stored.meta, events, lambda seq: store._where(session_id, seq))
        session = Session.from_loaded(session_id, (*events, *fixes), stored.meta)
        return session, fixes

    def read_only(conn: psycopg.Connection) -> Session:
        with conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            stored = store._need(conn, session_id)
            session = folded(conn, stored, False)
            if session is None:
                events = store._load_all(conn, stored)
                validate_stored(stored.meta, events, lambda seq: store._where(session_id, seq))
                session = Session.from_loaded(session_id, events, stored.meta)
        return session

    def with_lease(claim: Claim, conn: psycopg.Connection) -> tuple[Session, int]:
        with conn.transaction():
            stored, epoch = store._take(conn, session_id, claim)
            fixes: Sequence[SessionEvent]
            session = folded(conn, stored, True)
            if session is None:
                session, fixes = full(conn, stored)
            else:
                fixes = session.events_since(stored.head)
            if fixes:
                store._append_fixes(conn, session_id, fixes, epoch, store.node)
        return session, epoch

    def without_lease(conn: psycopg.Connection) -> Session:
        with conn.transaction():
            stored = store._need(conn, session_id, lock=True)
            fixes: Sequence[SessionEvent]
            session = folded(conn, stored, True)
            if session is None:
                session, fixes = full(conn, stored)
            else:
                fixes = session.events_since(stored.head)
            if fixes:
                claims = store._claims
                if claims.of(session_id) is not None or not claims.claimable(stored.owner):
                    raise refuse_live_repair(session_id, "its last turn has no turn/end")
                # A temporary claim: the closers are written under a new epoch.
                store._append_fixes(conn, session_id, fixes, stored.owner.epoch + 1, None)
        return session

    with gc_paused():
        if not repair:
            return await store.execute(read_only)
        if lease is None:
            return await store.execute(without_lease)
        claim = store._claims.held(lease, session_id)
        started = time.monotonic()
        session, epoch = await store.execute(lambda conn: with_lease(claim, conn))
        store._taken(claim, epoch, started)
        return session


def _restored(
    store: SnapshotHost, conn: psycopg.Connection, stored: StoredRow, *, repair: bool
) -> Session | None:
    """The session from its snapshot (closers appended, not written, when `repair`); None
    (reported) when there is none or it does not check out."""
    if not store.snapshot_state.enabled:
        return None
    meta, head = stored.meta, stored.head
    table = conn.execute("SELECT to_regclass('actorloop.snapshots')").fetchone()
    if table is None or table[0] is None:
        return None
    record = conn.execute(
        "SELECT seq, row_crc, version, body, crc FROM actorloop.snapshots WHERE session_id = %s",
        (meta.id,),
        binary=True,
    ).fetchone()
    if record is None:
        return None
    where = store._where(meta.id)
    loading: list[psycopg.Connection] = []
    try:
        snapshot, row_crc = checked_snapshot(meta, head, tuple(record), where)
        key = snapshot.length - 1
        rows = conn.execute(
            f"SELECT {READ_COLUMNS} FROM actorloop.events WHERE session_id = %s AND seq >= %s "
            "ORDER BY seq",
            (meta.id, key),
            binary=True,
        )
        tail = checked_tail(rows, meta, head, key, row_crc, lambda seq: store._where(meta.id, seq))
        lineage = _lineage(store, conn, meta)
        # While this load runs, an event it needs from before the snapshot (a `Replace` in
        # the rows after it) is read on its own connection, not a second one of the pool.
        loading.append(conn)
        session, _fixes = restored_session(
            meta,
            snapshot,
            tail,
            lambda: _lazy_read(store, meta, head, snapshot.length, loading),
            lambda seqs: _lazy_pick(store, lineage, seqs, loading),
            repair=repair,
            where=where,
        )
    except SnapshotUnusable as exc:
        store.snapshot_state.counters.ignore(meta.id, exc)
        return None
    finally:
        loading.clear()
    store.snapshot_state.counters.restored += 1
    return session


def _lineage(
    store: SnapshotHost, conn: psycopg.Connection, meta: SessionMeta
) -> tuple[tuple[str, int], ...]:
    """Per session of the fork chain, child first: its id and its first own seq."""
    chain = [(meta.id, meta.seed_length or 0)]
    seen: frozenset[str] = frozenset({meta.id})
    current = meta
    while current.parent_session is not None:
        parent = parent_of(current, seen, store._where(current.id))
        current = store._need(conn, parent).meta
        seen = seen | {current.id}
        chain.append((current.id, current.seed_length or 0))
    return tuple(chain)


def _lazy_read(
    store: SnapshotHost,
    meta: SessionMeta,
    head: int,
    length: int,
    loading: list[psycopg.Connection],
) -> list[Any]:
    """The first `length` events, read now on the caller's thread: on the connection of the
    load still running (`loading`), else on a pooled one."""

    def work(conn: psycopg.Connection) -> list[SessionEvent]:
        def meta_head(session_id: str) -> tuple[SessionMeta, int] | None:
            found = store._stored(conn, session_id)
            return None if found is None else (found.meta, found.head)

        def rows(of: SessionMeta, first: int, end: int | None) -> Iterable[Any]:
            return conn.execute(
                f"SELECT {READ_COLUMNS} FROM actorloop.events WHERE session_id = %s "
                "AND seq >= %s AND seq < %s ORDER BY seq",
                (of.id, first, head if end is None else end),
                binary=True,
            )

        with conn.transaction():
            source = RowSource(store._where, meta_head, rows)
            return read_rows(source, meta, head, length)

    with gc_paused():
        return work(loading[0]) if loading else store._connections.call(work)


def _lazy_pick(
    store: SnapshotHost,
    lineage: tuple[tuple[str, int], ...],
    seqs: Sequence[int],
    loading: list[psycopg.Connection],
) -> list[SessionEvent]:
    """The events at `seqs`, each from the session of the chain that holds it (on the
    running load's connection, as `_lazy_read`)."""
    owners: dict[str, list[int]] = {}
    for seq in seqs:
        owners.setdefault(next(sid for sid, first in lineage if seq >= first), []).append(seq)

    def work(conn: psycopg.Connection) -> dict[int, SessionEvent]:
        found: dict[int, SessionEvent] = {}
        for owner, wanted in owners.items():
            for start in range(0, len(wanted), _SEQS_PER_QUERY):
                rows = conn.execute(
                    f"SELECT {READ_COLUMNS} FROM actorloop.events WHERE session_id = %s "
                    "AND seq = ANY(%s)",
                    (owner, wanted[start : start + _SEQS_PER_QUERY]),
                    binary=True,
                )
                for row in rows:
                    where = store._where(owner, row[0])
                    try:
                        event = event_from_row(owner, tuple(row), where)
                    except SessionFormatError as exc:
                        raise SessionCorruptError(exc.where, exc.problem) from exc
                    found[event.seq] = event
        return found

    with gc_paused():
        found = work(loading[0]) if loading else store._connections.call(work)
    missing = [seq for seq in seqs if seq not in found]
    if missing:
        raise SessionCorruptError(
            store._where(lineage[0][0], missing[0]),
            "a row before the snapshot is missing",
        )
    return [found[seq] for seq in seqs]
