"""The `Store` seam every durable session store implements, the write rights and
per-session isolation of a group commit, the load-time repair plan shared by all stores,
and `open_store(url)`."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any, Literal, Protocol, TypeAlias, cast

from attrs import frozen

from ...codecs.rows import event_from_row, take_checked_rows
from ..errors import (
    GroupCommitError,
    InvalidSessionId,
    SessionBusy,
    SessionCorruptError,
    SessionFormatError,
    SessionValidationError,
    StoreError,
)
from ..lazy import lazy_exports
from ..log.repair import closers
from ..log.session import Session, SessionMeta
from ..model.events import SessionEvent
from ..model.meta import DamagedSession
from .ids import check_session_id
from .leases import Lease, LeaseTable, busy_error

Synchronous: TypeAlias = Literal["NORMAL", "FULL"]
Batch: TypeAlias = Sequence[tuple[str, Sequence[SessionEvent]]]
Loaded: TypeAlias = tuple[SessionMeta, tuple[SessionEvent, ...]]
Listing: TypeAlias = tuple[SessionMeta | DamagedSession, ...]
Failures: TypeAlias = dict[str, Exception]
"""Sessions of one group commit that were not written, with the error each one met."""


class Store(Protocol):
    """Durable append-only session logs. Every method is async except `claim`.

    * `append_batch` is a group commit: one transaction / one fsync round for all sessions,
      durable when it returns. Seqs must continue each stored tail exactly (checked in the
      same transaction as the write). Sessions are isolated: one whose events cannot be
      written (tail check, lease, unknown session, damaged tail, I/O on its own file) writes
      nothing, every other session is committed, and the call then raises GroupCommitError
      naming the failed sessions. A failure of the store as a whole (closed, the commit
      itself failing) raises plain StoreError.
    * `append` writes one session (durable once `flush` returns) and raises that
      session's own error (SessionValidationError, SessionBusy, SessionNotFound, ...).
    * `load` truncates a torn tail, validates, and appends and persists repair closers for
      an open last turn. Repair needs the writer's right: pass the caller's `lease`, or
      the store takes a temporary one; if someone else holds it, repair is refused with
      SessionBusy ("live turn is open"). With `repair=False` it is a read-only look at
      the durable part of the log: validated, nothing cut or appended, no lease needed
      (a live session's open turn stays open; a torn tail is left out, not cut). Damage
      (a missing, reordered or altered event, a log shorter than its acknowledged head)
      raises SessionCorruptError naming where; a load never returns fewer events silently.
    * `list` reports every stored session: its `SessionMeta`, or a `DamagedSession` in its
      place when its record cannot be read, so one damaged session hides no other.
    * `check_integrity` is the offline check behind `sessions verify`: the engine's own
      check (SQLite `PRAGMA integrity_check`) and a scan of every session's stored bytes;
      it returns the problems found (empty: none) and changes nothing.
    * `fork` is O(1): the child stores a parent pointer and seed length, nothing is copied.
    * `claim` grants the single-writer lease (across processes too); SessionBusy if held.
    """

    url: str

    async def create(self, meta: SessionMeta) -> None:
        """Record a new, empty session; SessionExists if its id is taken."""
        ...

    async def append(self, session_id: str, events: Sequence[SessionEvent]) -> None:
        """Write one session's events (durable once `flush` returns); raises that session's
        own error."""
        ...

    async def append_batch(self, batch: Batch) -> None:
        """Group commit: every session in one durable round, each isolated from the others
        (GroupCommitError names the ones not written)."""
        ...

    async def flush(self, session_id: str | None = None) -> None:
        """Make what `append` wrote for `session_id` (or every session) durable."""
        ...

    async def load(
        self, session_id: str, *, lease: Lease | None = None, repair: bool = True
    ) -> Loaded:
        """The session's meta and validated events (through its fork ancestors), repaired
        unless `repair=False`; damage raises SessionCorruptError naming where."""
        ...

    async def exists(self, session_id: str) -> bool:
        """Whether a session of that id is stored."""
        ...

    async def list(self) -> Listing:
        """Every stored session: its meta, or a DamagedSession where it cannot be read."""
        ...

    async def check_integrity(self) -> tuple[str, ...]:
        """The problems an offline scan of the stored bytes finds (empty: none)."""
        ...

    async def fork(self, parent_id: str, boundary: int, child_id: str) -> SessionMeta:
        """Record `child_id` seeded with the parent's events up to `boundary` (a turn/end),
        in O(1); SessionForkError with its code otherwise (fork-resume.md §6)."""
        ...

    def claim(self, session_id: str) -> Lease:
        """The single writer lease of `session_id` (across processes); SessionBusy if held."""
        ...

    async def close(self) -> None:
        """Release every lease and close the store's files or connections."""
        ...


InlineCommits: TypeAlias = Literal["always", "alone"]
"""When a store's small group commit may run where it is asked (`append_batch_now`):
"always" when it costs nothing (memory); "alone" when it has a fixed cost, so only while
sessions write one at a time and concurrent writers still share one commit (SQLite)."""


class InlineStore(Store, Protocol):
    """A store that can commit a small group commit on the trio thread, with no schedule
    point; it says when that pays (`inline_commits`)."""

    inline_commits: InlineCommits

    def append_batch_now(self, batch: Batch) -> bool:
        """`append_batch` here and now: True once committed (or raising its
        GroupCommitError), False when it would have to wait (nothing was written)."""
        ...


def inline_store(store: Store) -> InlineStore | None:
    """`store`, when its own class declares `inline_commits`; else None. Declared, not
    inherited: a subclass may make `append_batch` wait, and an inline commit would skip it."""
    return cast("InlineStore", store) if "inline_commits" in vars(type(store)) else None


def raise_failures(failures: Failures) -> None:
    """End a group commit that committed everything else: GroupCommitError if any failed."""
    if failures:
        raise GroupCommitError(tuple(failures.items()))


def sole_failure(error: GroupCommitError) -> Exception:
    """The one session's own error of a group commit of one session (what `append` raises)."""
    assert len(error.failures) == 1
    return error.failures[0][1]


@contextmanager
def write_rights(leases: LeaseTable, session_ids: Iterable[str]) -> Iterator[Failures]:
    """Hold every session's writer right for a group commit: this store's own lease, or a
    temporary one. Yields the sessions another writer (process or store instance) holds,
    each with its SessionBusy: those must not be written."""
    refused: Failures = {}
    with ExitStack() as stack:
        for session_id in session_ids:
            if leases.held_here(session_id):
                continue
            try:
                may_write = stack.enter_context(leases.writer_right(session_id, None))
            except StoreError as exc:  # its lock file could not even be opened
                refused[session_id] = exc
                continue
            if not may_write:
                refused[session_id] = busy_error(
                    session_id, "; refusing to append without its lease"
                )
        yield refused


def check_continues(session_id: str, events: Sequence[SessionEvent], next_seq: int) -> None:
    """Appended seqs must continue the stored tail exactly (no gap, no overlap)."""
    check_seqs(session_id, [event.seq for event in events], next_seq)


def check_seqs(session_id: str, seqs: Sequence[int], next_seq: int) -> None:
    for offset, seq in enumerate(seqs):
        if seq != next_seq + offset:
            raise SessionValidationError(
                seq,
                f"session {session_id!r}: seq {seq} does not continue the stored tail "
                f"(expected seq {next_seq + offset}); another writer may own this session",
            )


def parent_of(meta: SessionMeta, seen: frozenset[str], where: str) -> str:
    """The fork parent to read next; a stored lineage that names an invalid id or loops back
    is corruption, never a path outside the store or an endless walk."""
    parent = meta.parent_session
    assert parent is not None
    try:
        check_session_id(parent)
    except InvalidSessionId as exc:
        raise SessionCorruptError(where, f"fork parent id is invalid: {exc}") from None
    if parent in seen or parent == meta.id:
        raise SessionCorruptError(where, f"fork lineage loops back to {parent!r}")
    return parent


Row: TypeAlias = tuple[Any, ...]
"""A stored event row as a load reads it: seq, type, time, body, checksum
(`codecs.rows.READ_COLUMNS`)."""


@frozen
class RowSource:
    """How a row store (SQLite, PostgreSQL) reads a fork chain: `where(id, seq)` names a
    place, `meta_head(id)` is a session's meta and acknowledged head (None if absent),
    `rows(meta, first, end)` its rows from seq `first` in seq order (`end`, when given, is
    where a fork seed stops; a whole log passes None, so a row past its head shows)."""

    where: Callable[[str, int | None], str]
    meta_head: Callable[[str], tuple[SessionMeta, int] | None]
    rows: Callable[[SessionMeta, int, int | None], Iterable[Row]]


def read_rows(
    source: RowSource,
    meta: SessionMeta,
    head: int,
    length: int | None = None,
    seen: frozenset[str] = frozenset(),
) -> list[SessionEvent]:
    """The first `length` events of a session (all `head` if None), reading fork parents'
    seeds recursively; every row checksummed, contiguous, and as many as the head says —
    anything else is SessionCorruptError naming the seq."""
    first = meta.seed_length or 0
    want = head if length is None else length
    place = source.where(meta.id, None)
    if want > head:
        raise SessionCorruptError(
            place, f"a fork needs {want} of its events but its acknowledged head is {head}"
        )
    events: list[SessionEvent] = []
    if meta.parent_session is not None:
        seen = seen | {meta.id}
        parent = source.meta_head(parent_of(meta, seen, place))
        if parent is None:
            raise SessionCorruptError(place, f"fork parent {meta.parent_session!r} is missing")
        events = read_rows(source, *parent, min(want, first), seen)
    if want <= first:
        return events
    rows = iter(source.rows(meta, first, want if length is not None else None))
    while True:
        # Rows that pass every check on the plainest path are taken in one tight loop; the
        # first one that does not (or the one past `want`) goes through the checks below,
        # which report it or take it, and the tight loop resumes after it.
        row = take_checked_rows(rows, meta.id, events, want)
        if row is None:
            break
        expected = len(events)
        if expected == want:
            if length is not None:
                break  # a fork seed: later events are the parent's own business
            raise SessionCorruptError(
                source.where(meta.id, row[0]),
                f"row seq {row[0]!r} lies past the acknowledged head ({head} events)",
            )
        where = f"{place} seq {expected}"
        if row[0] != expected:
            raise SessionCorruptError(
                where, f"row seq {row[0]!r} where seq {expected} belongs (missing or moved)"
            )
        try:
            events.append(event_from_row(meta.id, row, where))
        except SessionFormatError as exc:
            raise SessionCorruptError(where, exc.problem) from exc
    if len(events) != want:
        raise SessionCorruptError(
            source.where(meta.id, len(events)),
            f"missing: the log holds {len(events)} events, its acknowledged head is {want}",
        )
    return events


def validate_stored(
    meta: SessionMeta, events: Sequence[SessionEvent], locate: Callable[[int], str]
) -> Session:
    """Replay a stored log through every append rule; a rule broken is corruption, and
    `locate(seq)` names where."""
    try:
        return Session.from_events(meta.id, events, meta)
    except SessionValidationError as exc:
        raise SessionCorruptError(locate(exc.seq), exc.rule) from exc


def plan_repair(
    meta: SessionMeta, events: Sequence[SessionEvent], locate: Callable[[int], str]
) -> tuple[SessionEvent, ...]:
    """Validate a stored log and return the closers for an open last turn (maybe none)."""
    session = validate_stored(meta, events, locate)
    fixes = closers(events)
    for event in fixes:
        session.append_event(event)
    return fixes


def refuse_live_repair(session_id: str, what: str) -> SessionBusy:
    return busy_error(
        session_id, f": live turn is open ({what}); refusing to repair it from a second loader"
    )


# `open_store` lived here before the URL table left the seam (decision 0010): the old
# import still works for one release, with a DeprecationWarning.
__getattr__, _ = lazy_exports(globals(), {}, moved={"open_store": "actorloop.runtime.stores.urls"})
