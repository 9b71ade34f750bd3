"""Stored sessions outside any loop instance: load one (repaired) into a `Session` with the
cyclic GC paused (`control.collector.gc_paused`), and settle where a fork of a stored
session starts (docs/spec/fork-resume.md §4)."""

from __future__ import annotations

from attrs import frozen

from ..control.collector import gc_paused as gc_paused  # re-exported: its old home
from ..errors import ErrorCode, SessionForkError, SessionNotFound
from ..log.session import Session, new_session_id
from .base import Store
from .leases import Lease
from .snapshots import snapshot_store


async def load_session(
    store: Store, session_id: str, *, repair: bool = True, folded: bool = False
) -> Session:
    """Load a stored session for inspection; `repair=False` reads the durable part only
    (nothing written, no lease needed, so a session live elsewhere can be looked at).

    `folded=True` lets a store that keeps fold snapshots start from its latest one
    (`load_stored`): the events before it are then read from the store on first access,
    so the store must stay open while the session is used."""
    if not await store.exists(session_id):
        raise SessionNotFound(session_id)
    if folded:
        return await load_stored(store, session_id, repair=repair)
    with gc_paused():
        meta, events = await store.load(session_id, repair=repair)
        return Session.from_loaded(session_id, events, meta)


async def load_stored(
    store: Store, session_id: str, *, lease: Lease | None = None, repair: bool = True
) -> Session:
    """The stored session as a `Session`, as `store.load` then `Session.from_loaded` give
    it; a store keeping fold snapshots starts from its latest valid one (persistence.md
    §2.7) and reads the events before it lazily, from the store, on first access."""
    folding = snapshot_store(store)
    with gc_paused():
        if folding is not None:
            return await folding.load_folded(session_id, lease=lease, repair=repair)
        meta, events = await store.load(session_id, lease=lease, repair=repair)
        return Session.from_loaded(session_id, events, meta)


@frozen
class ForkPoint:
    """Where a fork of a stored session starts: the boundary seq and the child's id, and the
    child already seeded in memory when finding the boundary needed the whole log."""

    boundary: int
    child_id: str
    seeded: Session | None = None


async def fork_point(
    store: Store, session_id: str, boundary: int | None, child_id: str | None
) -> ForkPoint:
    """Check a fork of the stored `session_id` and settle its boundary and child id.

    With an explicit boundary only the store's own check reads the log (the source may be
    live in another process, mid-turn); the default boundary is the last event, which needs
    the whole repaired log, and then seeds the child in memory so it is not read twice.
    """
    if not await store.exists(session_id):
        raise SessionForkError(ErrorCode.SESSION_NOT_FOUND, f"session {session_id!r} not found")
    if child_id == session_id:
        raise SessionForkError(
            ErrorCode.SESSION_ALREADY_EXISTS, f"child id {child_id!r} is the parent's"
        )
    if child_id is not None and await store.exists(child_id):
        raise SessionForkError(ErrorCode.SESSION_ALREADY_EXISTS, f"session {child_id!r} exists")
    seeded: Session | None = None
    if boundary is None:
        meta, events = await store.load(session_id)
        seeded = Session.from_loaded(session_id, events, meta).fork(None, child_id)
        assert seeded.meta.seed_length is not None
        boundary, child_id = seeded.meta.seed_length - 1, seeded.id
    child_id = new_session_id() if child_id is None else child_id
    return ForkPoint(boundary, child_id, seeded)
