"""`Session`: the validated append-only event log with its surface, derivation and header fold.

Appends are synchronous and transactional; forks share the parent's events structurally.
"""

from __future__ import annotations

import logging
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ...codecs.jsonvalue import freeze_json, freeze_object
from ..errors import ErrorCode, SessionForkError, SessionValidationError
from ..model.events import (
    DATA_BY_TYPE,
    SURFACE_TYPES,
    Append,
    EventData,
    SessionEvent,
    SurfaceOp,
    TurnEnd,
)
from ..model.header import EpochHeader
from ..model.messages import Message
from ..model.meta import SessionMeta, now_ms
from ..model.snapshot import FoldSnapshot
from .admission import (
    HEADER_DATA,
    check_envelope,
    detached,
    preview_header,
    structure_data,
    type_name,
)
from .event_log import EventLog, FoldState
from .replay import FOLD_STEPS, Replays, checked_structure, replay
from .surface import SurfaceFold
from .usage import USAGE_DATA, UsageTotals

log = logging.getLogger("actorloop.session")

SessionObserver = Callable[[SessionEvent], None]

_type_of = type
"""`type`, under a name `Session.append`'s parameter `type` does not shadow."""


class Session:
    """One conversation's append-only log. The loop that owns it is its only writer."""

    def __init__(self, meta: SessionMeta, log: EventLog | None = None) -> None:
        self.meta = meta
        self._log = log if log is not None else EventLog()
        self._state: FoldState | None = FoldState(meta.seed_length or 0) if log is None else None
        self._observers: list[SessionObserver] = []
        self._undelivered: deque[SessionEvent] = deque()
        self._delivering = False
        self.snapshot: FoldSnapshot | None = None
        """The fold snapshot this session was restored from (`log/snapshots.py`), if any:
        its token meter starts from the snapshot's instead of scanning the log."""

    # construction ---------------------------------------------------------------------

    @property
    def id(self) -> str:
        """The session id."""
        return self.meta.id

    @classmethod
    def create(
        cls, session_id: str, meta: SessionMeta | Mapping[str, Any] | None = None
    ) -> Session:
        """An empty session; `meta` is a `SessionMeta` or a mapping of labels."""
        return cls(_make_meta(session_id, meta))

    @classmethod
    def from_events(
        cls,
        session_id: str,
        events: Iterable[SessionEvent],
        meta: SessionMeta | Mapping[str, Any] | None = None,
    ) -> Session:
        """Seed (or load) a session: every event is re-validated as if appended."""
        session = cls(_make_meta(session_id, meta))
        session._replay(events)
        _replays.offer(session.id, session, session._log, session._folded())
        return session

    @classmethod
    def from_loaded(
        cls, session_id: str, events: Sequence[SessionEvent], meta: SessionMeta
    ) -> Session:
        """A session over events a store's `load` has just validated and repaired.

        The store checked every rule already, by replaying the log (`from_events`): when
        that replay's fold is there to be taken over (see `Replays`), it is adopted instead
        of folding again; otherwise the state is folded lazily on first use, as for a fork.
        """
        session = cls(_make_meta(session_id, meta), EventLog(events=events))
        session._state = _replays.take(session_id, events)
        return session

    @classmethod
    def restored(
        cls, meta: SessionMeta, log: EventLog, state: FoldState, snapshot: FoldSnapshot
    ) -> Session:
        """A session over `log` (its prefix read lazily) whose folds are `state`, rebuilt
        from `snapshot` by `log/snapshots.restore`; no event is replayed here."""
        session = cls(meta, log)
        session._state = state
        session.snapshot = snapshot
        return session

    def extend_loaded(self, events: Iterable[SessionEvent]) -> None:
        """Commit stored events (decoded, so already detached) through every append rule,
        as a load's replay does; for the events after a restored snapshot. Nobody
        observes a session being loaded, so no observer is told."""
        for event in events:
            self._commit(event, len(self._log), detach=False)

    @property
    def folds(self) -> FoldState:
        """The folded state (structure, surface, header, usage), for a fold snapshot: read
        it, never change it."""
        return self._folded()

    # reading --------------------------------------------------------------------------

    @property
    def events(self) -> tuple[SessionEvent, ...]:
        """Every event, in seq order; the same tuple until the next append."""
        return self._log.snapshot()

    def __len__(self) -> int:
        return len(self._log)

    def event(self, seq: int) -> SessionEvent:
        """The event at `seq` (O(1), no snapshot)."""
        return self._log[seq]

    def events_since(self, start: int) -> list[SessionEvent]:
        """The events from seq `start` on."""
        return self._log.since(start)

    def derive_messages(self) -> tuple[Message, ...]:
        """The conversation the surface derives to (never the session prefix); frozen,
        shared, incrementally maintained (docs/spec/session-log.md §5)."""
        return self._folded().surface.messages()

    def header(self) -> EpochHeader | None:
        """The request header folded over the log (None before the first snapshot)."""
        return self._folded().header.current

    @property
    def surface(self) -> tuple[int, ...]:
        """The seqs of the current surface nodes, in order."""
        return self._folded().surface.nodes

    @property
    def surface_fold(self) -> SurfaceFold:
        """The incremental surface fold (positions, projections, hash chain)."""
        return self._folded().surface

    @property
    def replace_generation(self) -> int:
        """How many `Replace` ops the surface has seen (compaction and pruning count)."""
        return self._folded().surface.generation

    @property
    def open_turn(self) -> int | None:
        """The number of the open turn, or None."""
        return self._folded().structure.open_turn

    @property
    def open_step(self) -> int | None:
        """The number of the open step of the open turn, or None."""
        return self._folded().structure.open_step

    @property
    def last_turn(self) -> int:
        """The number of the latest turn started (0 for none)."""
        return self._folded().structure.last_turn

    def usage(self) -> UsageTotals:
        """What this session's own model and summarizer calls used (a fork child's seed is
        its parent's and not counted), kept as events are appended: O(1) per read."""
        return self._folded().usage.totals()

    def history_chain(self) -> bytes:
        """The hash chain over the current derivation (decision 0002)."""
        return self._folded().surface.history_chain()

    # observers ------------------------------------------------------------------------

    def observe(self, observer: SessionObserver) -> Callable[[], None]:
        """Call `observer(event)` synchronously after each append; returns an unsubscribe."""
        self._observers.append(observer)

        def unsubscribe() -> None:
            if observer in self._observers:
                self._observers.remove(observer)

        return unsubscribe

    # writing --------------------------------------------------------------------------

    def append(
        self,
        type: str,
        data: EventData | Mapping[str, Any],
        *,
        surface_op: SurfaceOp | None = None,
        source_event_seqs: Iterable[int] | None = None,
        time: int | None = None,
    ) -> SessionEvent:
        """Validate and append one event; a rejected append changes nothing."""
        seq = len(self._log)
        cls = DATA_BY_TYPE.get(type) if isinstance(type, str) else None
        if cls is None:
            raise SessionValidationError(seq, f"unknown event type {type!r}")
        data_detached = False
        if not isinstance(data, cls):
            if not isinstance(data, Mapping):
                raise SessionValidationError(
                    seq, f"{type}: data must be {cls.__name__} or a mapping, got {type_name(data)}"
                )
            data = structure_data(freeze_json(dict(data), f"$[{seq}].data"), cls, seq, type)
            data_detached = True
        seqs = None if source_event_seqs is None else tuple(source_event_seqs)
        surface = type in SURFACE_TYPES
        # The envelope this append built is checked here when it has the usual shape (its
        # seq and clock time are right by construction); any other goes to `check_envelope`.
        envelope_checked = (
            time is None
            and _type_of(data) is cls
            and (surface_op is None) is not surface
            and (surface_op is None or _type_of(surface_op) is Append)
            and (
                seqs is None
                or (surface and len(seqs) == 1 and _type_of(seqs[0]) is int and 0 <= seqs[0] < seq)
            )
        )
        event = SessionEvent(
            type,
            seq,
            now_ms() if time is None else time,
            data,  # type: ignore[arg-type]
            seqs,
            surface_op,
        )
        return self._commit(
            event,
            seq,
            detach=True,
            data_detached=data_detached,
            envelope_checked=envelope_checked,
        )

    def append_event(self, event: SessionEvent) -> SessionEvent:
        """Append an already-built event (its seq must be the next index).

        The committed event is a detached, normalized copy (deeply frozen, strictly typed),
        so later mutation of anything the caller holds changes nothing in the log.
        """
        return self._commit(event, len(self._log), detach=True)

    def _commit(
        self,
        event: SessionEvent,
        seq: int,
        *,
        detach: bool,
        data_detached: bool = False,
        envelope_checked: bool = False,
    ) -> SessionEvent:
        """Check and append `event` as the event at `seq` (the log's length)."""
        state = self._state
        if state is None:
            state = self._folded()
        if not envelope_checked:
            check_envelope(event, seq)
        if detach:
            event = detached(event, seq, data_detached=data_detached)
        # Dispatched by the data's exact class, as the load's replay does (`replay.py`):
        # its structure rule, and only the folds that can do anything with it.
        data, op = event.data, event.surface_op
        steps = FOLD_STEPS.get(_type_of(data))
        if steps is None:  # a subclass of IgnorableData: the generic calls decide
            steps = (checked_structure, True, _type_of(data) in HEADER_DATA)
        rule, advances, feeds_header = steps
        structure = state.structure
        rule(structure, event, data)
        if op is not None and _type_of(op) is not Append:
            state.surface.check(event, self._log.__getitem__)
        if feeds_header:
            preview_header(state.header, event, seq)
        # All checks passed: commit without any further possibility of failure.
        self._log.append(event)
        if advances:
            structure.advance(event)
        if op is not None:
            state.surface.apply(event)
        if feeds_header:
            state.header.feed(event)
        if _type_of(data) in USAGE_DATA:
            state.usage.add(event)
        self._notify(event)
        return event

    def _replay(self, events: Iterable[SessionEvent]) -> None:
        """Commit each of `events` as `_commit(event, detach=False)` would, the fast way
        (`replay.replay`): only for a session of its own events (no fork) that nobody
        observes (no notification is made)."""
        assert not self._observers
        replay(self._log, self._folded(), events)

    def _notify(self, event: SessionEvent) -> None:
        """Deliver to observers in seq order: an append made by an observer is queued and
        delivered once the current event has reached every observer."""
        if not self._observers and not self._delivering:
            return  # nobody to deliver to, and no delivery under way to queue behind
        self._undelivered.append(event)
        if self._delivering:
            return
        self._delivering = True
        try:
            while self._undelivered:
                current = self._undelivered.popleft()
                for observer in tuple(self._observers):
                    try:
                        observer(current)
                    except Exception:
                        log.exception(
                            "session/event observer failed for %s seq %d",
                            current.type,
                            current.seq,
                        )
        finally:
            self._delivering = False

    # fork -----------------------------------------------------------------------------

    def fork(self, boundary: int | None = None, child_id: str | None = None) -> Session:
        """A child seeded with `events[0..boundary]` (inclusive), sharing them structurally."""
        child_id = new_session_id() if child_id is None else child_id
        if child_id == self.id:
            raise SessionForkError(
                ErrorCode.SESSION_ALREADY_EXISTS, f"child id {child_id!r} is the parent's"
            )
        length = len(self._log)
        if boundary is None:
            # Open turn <=> the last non-ignorable event is not a turn/end (O(1), no fold).
            last = length - 1
            while last >= 0 and self._log[last].ignorable:
                last -= 1
            if last >= 0 and not isinstance(self._log[last].data, TurnEnd):
                raise SessionForkError(
                    ErrorCode.OPEN_TURN,
                    f"session {self.id!r} has an open turn; pass a turn/end boundary",
                )
            boundary = length - 1
        if (
            isinstance(boundary, bool)
            or not isinstance(boundary, int)
            or not 0 <= boundary < length
        ):
            raise SessionForkError.not_a_seq(self.id, boundary)
        if not isinstance(self._log[boundary].data, TurnEnd):
            raise SessionForkError.inside_a_turn(self.id, boundary, self._log[boundary].type)
        meta = SessionMeta(child_id, parent_session=self.id, seed_length=boundary + 1)
        return Session(meta, EventLog(self._log, boundary + 1))

    def _folded(self) -> FoldState:
        """The folded state; a forked child replays its shared seed on first use."""
        if self._state is None:
            state = FoldState(self.meta.seed_length or 0)
            for event in self._log:
                state.structure.advance(event)
                if event.surface_op is not None:
                    state.surface.apply(event)
                state.header.feed(event)
                state.usage.add(event)
            self._state = state
        return self._state


_replays = Replays()


def new_session_id() -> str:
    return uuid.uuid4().hex


def _make_meta(session_id: str, meta: SessionMeta | Mapping[str, Any] | None) -> SessionMeta:
    if isinstance(meta, SessionMeta):
        if meta.id != session_id:
            raise ValueError(f"meta id {meta.id!r} differs from session id {session_id!r}")
        return meta
    return SessionMeta(session_id, labels=freeze_object(meta or {}, "$.meta"))
