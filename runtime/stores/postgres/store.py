"""`PostgresStore` (`postgresql://...`): session logs in PostgreSQL, shared by several
processes and hosts, each session owned by one writer at a time (fenced ownership).

psycopg 3 (sync) with a `psycopg_pool` connection pool; every database call runs in a
worker thread (`trio.to_thread.run_sync`) under a `CapacityLimiter` sized to the pool, so
nothing blocks the trio thread. Rows are checksummed and every session row carries its
acknowledged head, as in SQLite (`codecs.rows`): a missing, reordered or altered row is
`SessionCorruptError` naming the seq, never a shorter log.

Ownership (`claims`): a claim bumps the session's owner epoch; every commit of events is
one transaction conditional on (owner epoch, expected head) (`commit`), so a writer that
lost its lease gets `SessionFenced` and never lands another event. Leases are renewed by
a background task the store owns (`keeper`, cancelled when it closes); their TTL is
`?lease_s=`. Session rows are locked in one order (`locks`); a transaction PostgreSQL
still rolls back as a deadlock victim or serialization failure is run again.

A commit the server did not confirm (connection lost, server restarting) fails every
session of that group commit with `StoreUnavailable` but not the store: it reconnects, so
one outage does not fail the store closed; such a commit landed whole or not at all.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any, TypeVar

import psycopg
import trio

from ....codecs.rows import (
    READ_COLUMNS,
    head_of,
    meta_from_row,
    session_row,
)
from ...control.collector import gc_paused
from ...errors import (
    ActorloopError,
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
    StoreUnavailable,
)
from ...log.session import SessionMeta
from ...model.events import SessionEvent
from ...model.meta import DamagedSession
from ..base import (
    Batch,
    Failures,
    Listing,
    Loaded,
    RowSource,
    parent_of,
    plan_repair,
    raise_failures,
    read_rows,
    refuse_live_repair,
    sole_failure,
    validate_stored,
)
from ..ids import check_session_id
from ..leases import Lease
from . import snapshots as pg_snapshots
from .claims import Claim, Claims, Owner
from .commit import GroupCommit, Pending, RowRefused, Write
from .config import parse_url
from .connections import Connections
from .keeper import LeaseKeeper
from .locks import rolled_back
from .stored import StoredRow
from .sweep import Swept, sweep

T = TypeVar("T")
log = logging.getLogger("actorloop.stores.postgres")

_SESSION_COLUMNS = "id, meta, parent, seed_length, version, head, crc"
_OWNER_COLUMNS = "owner_node, owner_epoch, coalesce(lease_expires > now(), false)"
_INSERT_SESSION = (
    "INSERT INTO actorloop.sessions "
    "(id, meta, parent, seed_length, version, head, crc, owner_node, owner_epoch, lease_expires) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, "
    "CASE WHEN %s THEN now() + %s * interval '1 second' END) "
    "ON CONFLICT (id) DO NOTHING RETURNING owner_epoch"
)
IN_DOUBT = 0.5
"""A lease not renewed for this share of `lease_s` (the process was paused, or cut off from
the database) may have been taken over: `owns` asks the database before it answers."""


class PostgresStore(pg_snapshots.FoldSnapshots):
    """The `Store` seam over PostgreSQL; see the module docstring. Open with
    `open_store("postgresql://user@host/db?lease_s=15")` or `PostgresStore(url)`."""

    def __init__(self, url: str) -> None:
        self.settings = parse_url(url)
        self.url = self.settings.display
        self.node = self.settings.node
        self._claims = Claims(self.node, self.url, on_release=self._wake_keeper)
        self._limiter = trio.CapacityLimiter(self.settings.pool_max)
        self._connections = Connections(self.settings)
        self._closed = False
        self._keeper = LeaseKeeper(self._claims, self.settings, self._run)
        self._group_commit = GroupCommit(self._claims, self.settings, self._corrupt)
        self._fence_listeners: list[Callable[[str], None]] = []
        self.snapshot_state = pg_snapshots.SnapshotState()

    # connections (connections.py) ------------------------------------------------------

    async def execute(self, work: Callable[[psycopg.Connection], T]) -> T:
        """Run `work(connection)` on a pooled connection in a worker thread (for the other
        modules of this package, e.g. the inbox); errors typed as the store's own. `work`
        is one transaction or one statement: it is run again if PostgreSQL rolls it back
        as a deadlock victim or serialization failure."""
        return await self._run(work)

    def connect(self) -> psycopg.Connection:
        """A new connection of its own, outside the pool (blocking: call it in a worker
        thread), e.g. to LISTEN; the caller closes it."""
        return self._connections.connect()

    async def _run(self, work: Callable[[psycopg.Connection], T]) -> T:
        if self._closed:
            raise StoreError(f"postgres store {self.url} is closed")
        try:
            call = partial(self._connections.call, work)
            return await trio.to_thread.run_sync(call, limiter=self._limiter)
        finally:
            self._report_fences()

    # reads -----------------------------------------------------------------------------

    def _where(self, session_id: str, seq: int | None = None) -> str:
        place = f"postgres session {session_id!r}"
        return place if seq is None else f"{place} seq {seq}"

    def _corrupt(self, session_id: str, problem: str) -> SessionCorruptError:
        return SessionCorruptError(self._where(session_id), problem)

    def _stored(
        self, conn: psycopg.Connection, session_id: str, *, lock: bool = False
    ) -> StoredRow | None:
        row = conn.execute(
            f"SELECT {_SESSION_COLUMNS}, {_OWNER_COLUMNS} FROM actorloop.sessions WHERE id = %s"
            + (" FOR UPDATE" if lock else ""),
            (session_id,),
            binary=True,
        ).fetchone()
        if row is None:
            return None
        where = self._where(session_id)
        try:
            meta = meta_from_row(row[:7], where)
            head = head_of(row[:7], where)
        except SessionFormatError as exc:
            raise SessionCorruptError(exc.where, exc.problem) from exc
        if meta.id != session_id:
            raise SessionCorruptError(where, f"row names {meta.id!r}")
        if head < (meta.seed_length or 0):
            raise SessionCorruptError(where, f"acknowledged head {head} is below its fork seed")
        return StoredRow(meta, head, Owner(row[7], row[8], bool(row[9]), head))

    def _need(self, conn: psycopg.Connection, session_id: str, *, lock: bool = False) -> StoredRow:
        found = self._stored(conn, session_id, lock=lock)
        if found is None:
            raise SessionNotFound(session_id)
        return found

    def _events(self, conn: psycopg.Connection, meta: SessionMeta, head: int) -> list[SessionEvent]:
        """Every event of the session (its fork seed read through its parents), checked."""

        def meta_head(session_id: str) -> tuple[SessionMeta, int] | None:
            stored = self._stored(conn, session_id)
            return None if stored is None else (stored.meta, stored.head)

        def rows(of: SessionMeta, first: int, end: int | None) -> Iterable[Any]:
            # A fork seed reads only what it needs; a whole log reads past its head too,
            # since a row there is damage, not something to skip.
            bound = "" if end is None else "AND seq < %s"
            params: tuple[Any, ...] = (of.id, first) if end is None else (of.id, first, end)
            return conn.execute(
                f"SELECT {READ_COLUMNS} FROM actorloop.events WHERE session_id = %s "
                f"AND seq >= %s {bound} ORDER BY seq",
                params,
                binary=True,
            )

        return read_rows(RowSource(self._where, meta_head, rows), meta, head)

    # ownership -------------------------------------------------------------------------

    def _take(
        self, conn: psycopg.Connection, session_id: str, claim: Claim
    ) -> tuple[StoredRow, int]:
        """Inside a transaction: lock the session row and hold `claim`'s epoch on it."""
        stored = self._need(conn, session_id, lock=True)
        epoch = self._claims.epoch_for(claim, session_id, stored.owner)
        if claim.epoch is None:
            conn.execute(
                "UPDATE actorloop.sessions SET owner_epoch = %s, owner_node = %s, "
                "lease_expires = now() + %s * interval '1 second' WHERE id = %s",
                (epoch, self.node, self.settings.lease_s, session_id),
            )
        return stored, epoch

    def _taken(self, claim: Claim | None, epoch: int, started: float) -> None:
        """After a commit that started at `started`: `claim` holds `epoch` in the database
        and its lease was renewed (renewed from now on by the keeper)."""
        if claim is None:
            return
        claim.unconfirmed = None
        if claim.epoch is None:
            self._claims.taken(claim, epoch, started)
            self._keeper.ensure()
        else:
            self._claims.renewed([claim], started)

    def on_fenced(self, listener: Callable[[str], None]) -> None:
        """Call `listener(session_id)` (on the trio thread) once for every lease of this
        store that is fenced from now on: its session was taken over, its writer stops."""
        self._fence_listeners.append(listener)

    def _report_fences(self) -> None:
        for session_id in self._claims.take_fenced():
            for listener in self._fence_listeners:
                try:
                    listener(session_id)
                except Exception:
                    log.exception("postgres %s: a fence listener failed", self.url)

    async def owns(self, session_id: str) -> bool:
        """Whether this store still holds the claim on `session_id` (a lease of it, not
        fenced). A claim whose lease was not renewed for `IN_DOUBT` of `lease_s` (this
        process was paused, or cut off from the database) is checked first by a keeper
        round, which fences it if another node took the session over."""
        claim = self._claims.of(session_id)
        if claim is None:
            return False
        lapsed = time.monotonic() - claim.renewed >= IN_DOUBT * self.settings.lease_s
        if claim.epoch is not None and claim.fenced is None and lapsed:
            await self._run(self._keeper.round)
        self._report_fences()  # a round in a worker thread may have fenced it just now
        return claim.fenced is None

    async def owner(self, session_id: str) -> Owner | None:
        """Who owns `session_id` now (None: no such session)."""
        check_session_id(session_id)

        def read(conn: psycopg.Connection) -> Owner | None:
            row = conn.execute(
                f"SELECT {_OWNER_COLUMNS}, head FROM actorloop.sessions WHERE id = %s",
                (session_id,),
            ).fetchone()
            return None if row is None else Owner(row[0], row[1], bool(row[2]), row[3])

        return await self._run(read)

    # the Store API ---------------------------------------------------------------------

    async def create(self, meta: SessionMeta) -> None:
        check_session_id(meta.id)
        row = session_row(meta)
        meta_from_row(row, self._where(meta.id))  # refuse writing an unsupported version
        claim = self._claims.of(meta.id)
        owned = claim is not None and claim.epoch is None

        def insert(conn: psycopg.Connection) -> int:
            with conn.transaction():
                done = conn.execute(
                    _INSERT_SESSION,
                    (
                        *row,
                        self.node if owned else None,
                        1 if owned else 0,
                        owned,
                        self.settings.lease_s,
                    ),
                ).fetchone()
            if done is None:
                raise SessionExists(meta.id)
            return int(done[0])

        started = time.monotonic()
        epoch = await self._run(insert)
        if owned:
            self._taken(claim, epoch, started)

    async def append(self, session_id: str, events: Sequence[SessionEvent]) -> None:
        try:
            await self.append_batch(((session_id, events),))
        except GroupCommitError as exc:
            failure = sole_failure(exc)
            raise failure from failure.__cause__  # the group is noise; the cause is not

    async def append_batch(self, batch: Batch) -> None:
        failures: Failures = {}
        merged: dict[str, list[SessionEvent]] = {}
        for session_id, events in batch:
            try:
                check_session_id(session_id)
            except SessionError as exc:
                failures[session_id] = exc
                continue
            merged.setdefault(session_id, []).extend(events)
        if self._closed:
            raise StoreError(f"postgres store {self.url} is closed")
        pending: dict[str, Sequence[SessionEvent]] = {}
        for session_id, events in merged.items():
            if not events:
                continue
            claim = self._claims.of(session_id)
            if claim is not None and claim.fenced is not None:
                failures[session_id] = claim.fenced  # fenced for good: no database call
                continue
            pending[session_id] = events
        if pending:
            written: dict[str, Write] = {}
            try:
                commit = partial(self._group_commit.commit, Pending(pending), failures)
                written = await self._run(commit)
            except StoreError as exc:
                if not (isinstance(exc, StoreUnavailable) or rolled_back(exc)):
                    raise
                # Not confirmed, or rolled back: every session of the commit failed (it
                # landed whole or not at all); the store goes on with the next one.
                for session_id, session_events in pending.items():
                    failures.setdefault(session_id, exc)
                    claim = self._claims.of(session_id)
                    if claim is not None and claim.unconfirmed is None:
                        claim.unconfirmed = (session_events[0].seq, exc)
            for write in written.values():
                self._taken(write.claim, write.epoch, write.started)
        raise_failures(failures)

    async def flush(self, session_id: str | None = None) -> None:
        # Every append commits before it returns (synchronous_commit decides durability).
        if session_id is not None:
            check_session_id(session_id)
            await self._run(lambda conn: self._need(conn, session_id))
        elif self._closed:
            raise StoreError(f"postgres store {self.url} is closed")
        else:
            await trio.lowlevel.checkpoint()

    def _load_all(self, conn: psycopg.Connection, stored: StoredRow) -> list[SessionEvent]:
        return self._events(conn, stored.meta, stored.head)

    async def load(
        self, session_id: str, *, lease: Lease | None = None, repair: bool = True
    ) -> Loaded:
        check_session_id(session_id)

        def locate(seq: int) -> str:
            return self._where(session_id, seq)

        def read_only(conn: psycopg.Connection) -> Loaded:
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                stored = self._need(conn, session_id)
                events = self._load_all(conn, stored)
            validate_stored(stored.meta, events, locate)
            return stored.meta, tuple(events)

        def with_lease(claim: Claim, conn: psycopg.Connection) -> tuple[Loaded, int]:
            with conn.transaction():
                stored, epoch = self._take(conn, session_id, claim)
                events = self._load_all(conn, stored)
                fixes = plan_repair(stored.meta, events, locate)
                if fixes:
                    self._append_fixes(conn, session_id, fixes, epoch, self.node)
            return (stored.meta, (*events, *fixes)), epoch

        def without_lease(conn: psycopg.Connection) -> Loaded:
            with conn.transaction():
                stored = self._need(conn, session_id, lock=True)
                events = self._load_all(conn, stored)
                fixes = plan_repair(stored.meta, events, locate)
                if fixes:
                    claimable = self._claims.claimable(stored.owner)
                    if self._claims.of(session_id) is not None or not claimable:
                        raise refuse_live_repair(session_id, "its last turn has no turn/end")
                    # A temporary claim: the closers are written under a new epoch, and the
                    # session is left unowned.
                    self._append_fixes(conn, session_id, fixes, stored.owner.epoch + 1, None)
            return stored.meta, (*events, *fixes)

        with gc_paused():  # every caller's load pauses the collector (control/collector.py)
            if not repair:
                return await self._run(read_only)
            if lease is None:
                return await self._run(without_lease)
            claim = self._claims.held(lease, session_id)
            started = time.monotonic()
            loaded, epoch = await self._run(partial(with_lease, claim))
            self._taken(claim, epoch, started)
            return loaded

    def _append_fixes(
        self,
        conn: psycopg.Connection,
        session_id: str,
        fixes: Sequence[SessionEvent],
        epoch: int,
        owner: str | None,
    ) -> None:
        try:
            self._group_commit.write_fixes(conn, session_id, fixes, epoch, owner)
        except RowRefused as exc:
            raise StoreError(
                f"postgres {self.url}: repair of {session_id!r}: {exc.__cause__}"
            ) from exc

    async def exists(self, session_id: str) -> bool:
        check_session_id(session_id)
        return await self._run(
            lambda conn: (
                conn.execute(
                    "SELECT 1 FROM actorloop.sessions WHERE id = %s", (session_id,)
                ).fetchone()
                is not None
            )
        )

    async def list(self) -> Listing:
        def run(conn: psycopg.Connection) -> Listing:
            listing: list[SessionMeta | DamagedSession] = []
            for row in conn.execute(
                f"SELECT {_SESSION_COLUMNS} FROM actorloop.sessions ORDER BY listed", binary=True
            ):
                try:
                    listing.append(meta_from_row(row, self._where(row[0])))
                except (SessionFormatError, SessionFormatUnsupported) as exc:
                    listing.append(DamagedSession(row[0], str(exc)))
            return tuple(listing)

        return await self._run(run)

    async def check_integrity(self) -> tuple[str, ...]:
        """The schema version, events whose session row is missing, then every session's
        rows (checksums, heads, seqs, lineage); changes nothing. PostgreSQL checks its own
        pages (with data checksums enabled by `initdb --data-checksums`)."""

        def run(conn: psycopg.Connection) -> tuple[str, ...]:
            problems: list[str] = []
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                orphans = conn.execute(
                    "SELECT DISTINCT e.session_id FROM actorloop.events e WHERE NOT EXISTS "
                    "(SELECT 1 FROM actorloop.sessions s WHERE s.id = e.session_id) "
                    "ORDER BY 1 LIMIT 100"
                ).fetchall()
                problems.extend(
                    f"postgres: events of session {sid!r} have no session row" for (sid,) in orphans
                )
                ids = conn.execute("SELECT id FROM actorloop.sessions ORDER BY listed").fetchall()
                for (session_id,) in ids:
                    try:
                        stored = self._need(conn, session_id)
                        self._load_all(conn, stored)
                    except (SessionError, StoreError) as exc:
                        problems.append(str(exc))
            return tuple(problems)

        return await self._run(run)

    async def fork(self, parent_id: str, boundary: int, child_id: str) -> SessionMeta:
        check_session_id(parent_id)
        check_session_id(child_id)
        valid = not isinstance(boundary, bool) and isinstance(boundary, int) and boundary >= 0
        claim = self._claims.of(child_id)
        owned = claim is not None and claim.epoch is None

        def run(conn: psycopg.Connection) -> tuple[int, SessionMeta]:
            with conn.transaction():
                parent = self._stored(conn, parent_id)
                if parent is None:
                    raise SessionForkError(
                        ErrorCode.SESSION_NOT_FOUND, f"parent {parent_id!r} not found"
                    )
                if self._stored(conn, child_id) is not None:
                    raise SessionForkError(
                        ErrorCode.SESSION_ALREADY_EXISTS, f"session {child_id!r} exists"
                    )
                if not valid or boundary >= parent.head:
                    raise SessionForkError.not_a_seq(parent_id, boundary)
                owner = parent.meta
                seen: frozenset[str] = frozenset()
                while owner.parent_session is not None and boundary < (owner.seed_length or 0):
                    seen = seen | {owner.id}
                    owner = self._need(conn, parent_of(owner, seen, self._where(owner.id))).meta
                row = conn.execute(
                    "SELECT type FROM actorloop.events WHERE session_id = %s AND seq = %s",
                    (owner.id, boundary),
                ).fetchone()
                if row is None:
                    raise SessionForkError.not_a_seq(parent_id, boundary)
                if row[0] != "turn/end":
                    raise SessionForkError.inside_a_turn(parent_id, boundary, row[0])
                child = SessionMeta(child_id, parent_session=parent_id, seed_length=boundary + 1)
                done = conn.execute(
                    _INSERT_SESSION,
                    (
                        *session_row(child),
                        self.node if owned else None,
                        1 if owned else 0,
                        owned,
                        self.settings.lease_s,
                    ),
                ).fetchone()
                if done is None:
                    raise SessionForkError(
                        ErrorCode.SESSION_ALREADY_EXISTS, f"session {child_id!r} exists"
                    )
                return int(done[0]), child

        started = time.monotonic()
        epoch, child = await self._run(run)
        if owned:
            self._taken(claim, epoch, started)
        return child

    def claim(self, session_id: str) -> Lease:
        """Reserve the session for a writer of this process; the database claim is taken by
        the lease's first use (claims module docstring). SessionBusy if reserved here."""
        if self._closed:
            raise StoreError(f"postgres store {self.url} is closed")
        return self._claims.claim(check_session_id(session_id))

    async def acquire(self, lease: Lease) -> int:
        """Take `lease`'s claim in the database now (where its first use would): its owner
        epoch. SessionBusy if another live owner holds the session, SessionNotFound if
        there is none; a fenced lease raises SessionFenced."""
        claim = self._claims.held(lease, lease.session_id)

        def run(conn: psycopg.Connection) -> int:
            with conn.transaction():
                return self._take(conn, lease.session_id, claim)[1]

        started = time.monotonic()
        epoch = await self._run(run)
        self._taken(claim, epoch, started)
        return epoch

    # the lease keeper (keeper.py) ------------------------------------------------------

    async def start_keeper(self) -> None:
        """Heartbeat this node and renew its leases from now on (routing needs the
        heartbeat before this store owns anything); the first round is done on return."""
        await self._run(self._keeper.round)
        self._keeper.ensure()

    async def write_releases(self) -> None:
        """Write the lease releases owed to the database now. `Lease.release()` is
        synchronous, so the keeper writes them in the background (woken at once); a caller
        that needs the session unowned in the database before it goes on awaits this."""
        await self._run(self._keeper.round)

    def _wake_keeper(self) -> None:
        self._keeper.wake()

    async def sweep(self) -> Swept:
        """Remove the rows of dead nodes now (`sweep`; the keeper does it every minute)."""
        return await self._run(sweep)

    async def close(self) -> None:
        if self._closed:
            return
        await self._keeper.stop()
        # Every lease still held is given back now, so another instance can claim its
        # session at once instead of waiting for the lease to expire.
        self._claims.release_all()
        if self._connections.opened:
            try:
                await self._run(self._keeper.final_round())
            except ActorloopError as exc:
                log.warning("postgres %s: leases not released on close: %s", self.url, exc)
        self._closed = True
        await trio.to_thread.run_sync(self._connections.close)
