"""`MemoryStore`: the in-process store (`memory:`), same contract as the durable ones but
nothing survives the process; events are kept as the frozen objects they are."""

from __future__ import annotations

from collections.abc import Sequence

import trio

from ...codecs.rows import check_version
from ..control.collector import gc_paused
from ..errors import (
    ErrorCode,
    GroupCommitError,
    SessionExists,
    SessionForkError,
    SessionNotFound,
    StoreError,
)
from ..log.session import SessionMeta
from ..model.events import SessionEvent, TurnEnd
from .base import (
    Batch,
    Failures,
    InlineCommits,
    Lease,
    LeaseTable,
    Listing,
    Loaded,
    check_continues,
    plan_repair,
    raise_failures,
    refuse_live_repair,
    sole_failure,
    validate_stored,
)
from .ids import check_session_id


class _Record:
    __slots__ = ("events", "meta")

    def __init__(self, meta: SessionMeta) -> None:
        self.meta = meta
        self.events: list[SessionEvent] = []
        """Own events only; a fork child's seed lives in its parent's record."""

    @property
    def first_seq(self) -> int:
        return self.meta.seed_length or 0

    @property
    def next_seq(self) -> int:
        return self.first_seq + len(self.events)


class MemoryStore:
    """A `Store` in this process's memory (`memory:`): the same rules as the durable
    stores, nothing kept after the process ends."""

    url = "memory:"
    inline_commits: InlineCommits = "always"

    def __init__(self) -> None:
        self._records: dict[str, _Record] = {}
        self._leases = LeaseTable()
        self._closed = False

    def _record(self, session_id: str) -> _Record:
        if self._closed:
            raise StoreError("memory store is closed")
        record = self._records.get(check_session_id(session_id))
        if record is None:
            raise SessionNotFound(session_id)
        return record

    async def create(self, meta: SessionMeta) -> None:
        await trio.lowlevel.checkpoint()
        check_session_id(meta.id)
        check_version(meta.version, f"session {meta.id!r}")
        if self._closed:
            raise StoreError("memory store is closed")
        if meta.id in self._records:
            raise SessionExists(meta.id)
        self._records[meta.id] = _Record(meta)

    async def append(self, session_id: str, events: Sequence[SessionEvent]) -> None:
        try:
            await self.append_batch(((session_id, events),))
        except GroupCommitError as exc:
            raise sole_failure(exc) from None

    async def append_batch(self, batch: Batch) -> None:
        await trio.lowlevel.checkpoint()
        self.append_batch_now(batch)

    def append_batch_now(self, batch: Batch) -> bool:
        """`append_batch` without its checkpoint: nothing here waits, so a caller on the trio
        thread can commit without a schedule point (the codec actor's inline barrier).
        Always True: committed (as `SqliteStore.append_batch_now`, which may decline)."""
        if self._closed:
            raise StoreError("memory store is closed")
        if len(batch) == 1:
            # One session (an inline barrier's round): no merge. A stored session's id was
            # checked when it was created, so finding its record is the whole look-up.
            session_id, events = batch[0]
            record = self._records.get(session_id) if type(session_id) is str else None
            if record is not None:
                try:
                    check_continues(session_id, events, record.next_seq)
                except Exception as exc:
                    raise_failures({session_id: exc})
                record.events.extend(events)
                return True
        # Check each session before changing it: a refused session leaves no trace, the
        # others are written.
        merged: dict[str, list[SessionEvent]] = {}
        for session_id, events in batch:
            merged.setdefault(session_id, []).extend(events)
        failures: Failures = {}
        for session_id, events in merged.items():
            try:
                record = self._record(session_id)
                check_continues(session_id, events, record.next_seq)
            except Exception as exc:
                failures[session_id] = exc
                continue
            record.events.extend(events)
        raise_failures(failures)
        return True

    async def flush(self, session_id: str | None = None) -> None:
        await trio.lowlevel.checkpoint()
        if session_id is not None:
            self._record(session_id)

    def _chain(self, record: _Record, length: int | None = None) -> list[SessionEvent]:
        """The first `length` events of a session (all if None), following fork parents."""
        own_end = len(record.events) if length is None else length - record.first_seq
        events = record.events[: max(own_end, 0)]
        if record.meta.parent_session is None:
            return events
        parent = self._record(record.meta.parent_session)
        seed = record.first_seq if length is None else min(length, record.first_seq)
        return self._chain(parent, seed) + events

    async def load(
        self, session_id: str, *, lease: Lease | None = None, repair: bool = True
    ) -> Loaded:
        await trio.lowlevel.checkpoint()
        record = self._record(session_id)
        with gc_paused():  # every caller's load pauses the collector (control/collector.py)
            return self._load(record, session_id, lease, repair)

    def _load(self, record: _Record, session_id: str, lease: Lease | None, repair: bool) -> Loaded:
        def locate(seq: int) -> str:
            return f"memory:{session_id}#{seq}"

        if not repair:
            events = self._chain(record)
            validate_stored(record.meta, events, locate)
            return record.meta, tuple(events)
        with self._leases.writer_right(session_id, lease) as may_write:
            events = self._chain(record)
            fixes = plan_repair(record.meta, events, locate)
            if fixes:
                if not may_write:
                    raise refuse_live_repair(session_id, "its last turn has no turn/end")
                record.events.extend(fixes)
                events.extend(fixes)
        return record.meta, tuple(events)

    async def exists(self, session_id: str) -> bool:
        await trio.lowlevel.checkpoint()
        return check_session_id(session_id) in self._records

    async def list(self) -> Listing:
        await trio.lowlevel.checkpoint()
        return tuple(record.meta for record in self._records.values())

    async def check_integrity(self) -> tuple[str, ...]:
        """Nothing to check: events are kept as the frozen objects they were appended as."""
        await trio.lowlevel.checkpoint()
        if self._closed:
            raise StoreError("memory store is closed")
        return ()

    async def fork(self, parent_id: str, boundary: int, child_id: str) -> SessionMeta:
        await trio.lowlevel.checkpoint()
        check_session_id(child_id)
        try:
            parent = self._record(parent_id)
        except SessionNotFound:
            raise SessionForkError(
                ErrorCode.SESSION_NOT_FOUND, f"parent session {parent_id!r} not found"
            ) from None
        if child_id in self._records:
            raise SessionForkError(ErrorCode.SESSION_ALREADY_EXISTS, f"session {child_id!r} exists")
        if isinstance(boundary, bool) or not isinstance(boundary, int):
            raise SessionForkError.not_a_seq(parent_id, boundary)
        if not 0 <= boundary < parent.next_seq:
            raise SessionForkError.not_a_seq(parent_id, boundary)
        event = self._event_at(parent, boundary)
        if not isinstance(event.data, TurnEnd):
            raise SessionForkError.inside_a_turn(parent_id, boundary, event.type)
        meta = SessionMeta(child_id, parent_session=parent_id, seed_length=boundary + 1)
        self._records[child_id] = _Record(meta)
        return meta

    def _event_at(self, record: _Record, seq: int) -> SessionEvent:
        while seq < record.first_seq:
            assert record.meta.parent_session is not None
            record = self._record(record.meta.parent_session)
        return record.events[seq - record.first_seq]

    def claim(self, session_id: str) -> Lease:
        return self._leases.claim(check_session_id(session_id))

    async def close(self) -> None:
        await trio.lowlevel.checkpoint()
        self._closed = True
        self._leases.release_all()
