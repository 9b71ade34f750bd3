"""`SnapshotKeeper`: a loop's fold snapshots (persistence.md §2.7) — taken at a turn boundary
when enough events have been appended since the last one, saved right after the barrier
that made their rows durable."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from ...runtime.log.session import Session
from ...runtime.log.snapshots import snapshot_due, take_snapshot
from ...runtime.log.tokens import TokenMeter
from ...runtime.model.snapshot import FoldSnapshot

log = logging.getLogger("actorloop.loop")

SaveSnapshot = Callable[[str, FoldSnapshot], Awaitable[None]]
"""`store.save_snapshot` of a store that keeps fold snapshots."""


class SnapshotKeeper:
    """Decides when a loop's session is snapshotted, and saves what it took."""

    __slots__ = ("_save", "_taken_at")

    def __init__(self, save: SaveSnapshot, session: Session) -> None:
        self._save = save
        restored = session.snapshot
        self._taken_at = 0 if restored is None else restored.length
        """The length the last snapshot covers (0: none yet, so a long log loaded by
        replaying it gets one at its first turn boundary)."""

    def due(self, session: Session) -> bool:
        """Whether the next barrier takes a snapshot (so its hand-off must wait to save it)."""
        return snapshot_due(session, self._taken_at)

    def take(self, session: Session, meter: Callable[[], TokenMeter]) -> FoldSnapshot | None:
        """The snapshot to save once the events so far are durable, or None (not due, or
        inside a turn)."""
        if not snapshot_due(session, self._taken_at):
            return None
        snapshot = take_snapshot(session, meter())
        if snapshot is not None:
            self._taken_at = snapshot.length
        return snapshot

    async def save(self, session_id: str, snapshot: FoldSnapshot) -> None:
        """Save `snapshot`; a failure is reported and the turn goes on (a snapshot only
        saves a later load time: without it the load replays more of the log)."""
        try:
            await self._save(session_id, snapshot)
        except Exception:
            log.warning("session %s: fold snapshot not saved", session_id, exc_info=True)
