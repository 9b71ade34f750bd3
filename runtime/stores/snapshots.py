"""The fold-snapshot seam of a store (persistence.md §2.7): `SnapshotStore` (a store that
keeps fold snapshots and loads a session from its latest valid one), the counters it
reports, and what every such store checks of a stored snapshot before trusting it."""

from __future__ import annotations

import logging
from typing import Protocol, cast

from attrs import define

from ...codecs.snapshots import SnapshotUnusable, decode_snapshot, snapshot_crc
from ..log.session import Session
from ..log.snapshots import snapshot_problem
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
