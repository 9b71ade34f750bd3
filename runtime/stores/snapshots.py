"""The fold-snapshot seam of a store (persistence.md §2.7): `SnapshotStore` (a store that
keeps fold snapshots and loads a session from its latest valid one), the counters it
reports, and what every such store checks of a stored snapshot before trusting it."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, cast

from attrs import define

from ...codecs.rows import event_from_row
from ...codecs.snapshots import SnapshotUnusable, decode_snapshot, snapshot_crc
from ..errors import SessionFormatError, SessionValidationError
from ..log.event_log import LazyPrefix
from ..log.repair import closers
from ..log.session import Session
from ..log.snapshots import restore, snapshot_problem
from ..model.events import SessionEvent
from ..model.meta import SessionMeta
from ..model.snapshot import SNAPSHOT_VERSION, FoldSnapshot
from .base import Store
from .leases import Lease

log = logging.getLogger("actorloop.store")


@define
class SnapshotCounters:
    """What one store instance did with fold snapshots: `written`, `restored` (loads that
    trusted one), `ignored` (snapshots that did not check out: the load replayed the whole
    log) and the last reason one was ignored."""

    written: int = 0
    restored: int = 0
    ignored: int = 0
    last_problem: str | None = None

    def ignore(self, session_id: str, problem: SnapshotUnusable) -> None:
        """Count and report a snapshot a load did not trust (a warning in the log)."""
        self.ignored += 1
        self.last_problem = str(problem)
        log.warning(
            "session %s: fold snapshot ignored, replaying the whole log: %s", session_id, problem
        )


class SnapshotStore(Store, Protocol):
    """A store that keeps fold snapshots; `snapshots` False turns them off (loads replay
    the whole log, nothing is written)."""

    snapshots: bool
    snapshot_counters: SnapshotCounters

    async def save_snapshot(self, session_id: str, snapshot: FoldSnapshot) -> None:
        """Keep `snapshot` as the session's latest, keyed by its last seq and that row's
        checksum; the row must be stored already (nothing is written otherwise)."""
        ...

    async def load_folded(
        self, session_id: str, *, lease: Lease | None = None, repair: bool = True
    ) -> Session:
        """`load` as a `Session`: from the latest valid snapshot and the rows after it (the
        rows before it read on first access), or by replaying the whole log."""
        ...


def snapshot_store(store: Store) -> SnapshotStore | None:
    """`store`, when its class keeps fold snapshots and they are on; else None."""
    if "load_folded" not in dir(type(store)) or not getattr(store, "snapshots", False):
        return None
    return cast("SnapshotStore", store)


def checked_snapshot(
    meta: SessionMeta, head: int, stored: tuple[object, ...], where: str
) -> tuple[FoldSnapshot, int]:
    """The snapshot of a stored `(seq, row_crc, version, body, crc)` record and the row
    checksum it is keyed to; SnapshotUnusable when it does not check out."""
    seq, row_crc, version, body, crc = stored
    if type(version) is not int or version != SNAPSHOT_VERSION:
        raise SnapshotUnusable(where, f"snapshot version {version!r:.20} is not this build's")
    if isinstance(body, memoryview):
        body = bytes(body)
    if not isinstance(body, bytes) or type(crc) is not int or type(row_crc) is not int:
        raise SnapshotUnusable(where, "snapshot record is damaged")
    if crc != snapshot_crc(meta.id, body):
        raise SnapshotUnusable(where, "snapshot checksum mismatch")
    snapshot = decode_snapshot(body, where)
    if type(seq) is not int or snapshot.length != seq + 1:
        raise SnapshotUnusable(where, f"snapshot of {snapshot.length} events is keyed to {seq!r}")
    problem = snapshot_problem(meta, snapshot, head)
    if problem is not None:
        raise SnapshotUnusable(where, f"snapshot does not fit the log: {problem}")
    return snapshot, row_crc


def checked_tail(
    rows: Iterable[Sequence[Any]],
    meta: SessionMeta,
    head: int,
    key: int,
    row_crc: int,
    locate: Callable[[int | None], str],
) -> list[SessionEvent]:
    """The events of `rows` (`READ_COLUMNS`, from seq `key`, the snapshot's last, whose
    row checksum must be `row_crc`, to the head), each row checked; SnapshotUnusable if
    anything is off (the whole log's load then reports it as the damage it is)."""
    events: list[SessionEvent] = []
    for row in rows:
        expected = key + len(events)
        where = locate(expected)
        if row[0] != expected or expected >= head:
            raise SnapshotUnusable(where, "the rows after the snapshot are not contiguous")
        if expected == key and row[4] != row_crc:
            raise SnapshotUnusable(where, "the snapshot's row is not the one it was keyed to")
        try:
            events.append(event_from_row(meta.id, tuple(row), where))
        except SessionFormatError as exc:
            raise SnapshotUnusable(where, f"a row after the snapshot: {exc.problem}") from exc
    if key + len(events) != head:
        raise SnapshotUnusable(locate(None), "the rows after the snapshot end before the head")
    return events


def restored_session(
    meta: SessionMeta,
    snapshot: FoldSnapshot,
    tail: Sequence[SessionEvent],
    read: Callable[[], Sequence[SessionEvent]],
    pick: Callable[[Sequence[int]], Sequence[SessionEvent]],
    *,
    repair: bool,
    where: str,
) -> tuple[Session, tuple[SessionEvent, ...]]:
    """The session from `snapshot` and `tail` (the snapshot's last event, then the rest),
    its events before read by `read`/`pick` on first access; and, with `repair`, the
    closers of an open last turn, already appended (the caller writes them). The tail
    breaking a rule on top of the snapshot is SnapshotUnusable."""
    session = restore(meta, snapshot, LazyPrefix(snapshot.length, read, pick, tail[:1]))
    try:
        session.extend_loaded(tail[1:])
    except (SessionValidationError, SessionFormatError) as exc:
        problem = f"the rows after it break a rule on top of it: {exc}"
        raise SnapshotUnusable(where, problem) from exc
    fixes = closers(tail[1:], snapshot.length) if repair else ()
    for event in fixes:
        session.append_event(event)
    return session, fixes
