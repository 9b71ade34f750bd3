"""`Session`: the validated append-only event log with its surface, derivation and header fold.

Appends are synchronous and transactional; forks share the parent's events structurally.
"""

from __future__ import annotations

import logging
import operator
import threading
import uuid
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import NoneType
from typing import Any

from ...codecs.converter import is_canonical, structure_as, unstructure
from ...codecs.jsonvalue import (
    MAX_SAFE_INT,
    freeze_json,
    freeze_object,
)
from ..errors import (
    ErrorCode,
    HeaderFoldError,
    SessionForkError,
    SessionFormatError,
    SessionValidationError,
)
from ..model.events import (
    DATA_BY_TYPE,
    SURFACE_TYPES,
    Append,
    AssistantMessage,
    EventData,
    IgnorableData,
    Replace,
    RequestHeaderEvent,
    SessionEvent,
    SurfaceOp,
    TurnEnd,
)
from ..model.header import EpochHeader, HeaderDelta
from ..model.messages import Message
from ..model.meta import SessionMeta, now_ms
from .header_algebra import HeaderFold
from .structure import ADVANCING, Rule, TurnStructure, rule_of
from .surface import SurfaceFold

log = logging.getLogger("actorloop.session")

SessionObserver = Callable[[SessionEvent], None]

_HEADER_DATA = frozenset(
    cls for cls in DATA_BY_TYPE.values() if issubclass(cls, (RequestHeaderEvent, HeaderDelta))
)
"""The data classes the header fold takes (`HeaderFold.feed` passes over every other)."""
_ENVELOPES: dict[str, tuple[type, bool | None]] = {
    name: (cls, name in SURFACE_TYPES) for name, cls in DATA_BY_TYPE.items()
}
"""Per known event type: the exact class of its data, and whether it is a surface event."""
_FOLD_STEPS: dict[type, tuple[Rule, bool, bool]] = {
    cls: (rule_of(cls), issubclass(cls, tuple(ADVANCING)), cls in _HEADER_DATA)
    for cls in (*DATA_BY_TYPE.values(), IgnorableData)
}
"""Per exact data class of an event whose envelope holds: its structure rule, whether the
structure advances on it, whether the header fold takes it."""


def _checked_structure(structure: TurnStructure, event: SessionEvent, _data: object) -> None:
    structure.check(event)


class EventLog:
    """Append-only event storage; a fork points at its parent's storage instead of copying.

    The parent's list only ever grows, so `parent[0:base_len]` stays valid forever.
    """

    __slots__ = ("_base", "_base_len", "_own", "_snapshot")

    def __init__(
        self,
        base: EventLog | None = None,
        base_len: int = 0,
        events: Iterable[SessionEvent] = (),
    ) -> None:
        self._base = base
        self._base_len = base_len
        self._own: list[SessionEvent] = list(events)
        self._snapshot: tuple[SessionEvent, ...] | None = None

    def __len__(self) -> int:
        return self._base_len + len(self._own)

    def __getitem__(self, index: int) -> SessionEvent:
        if index < 0:
            index += len(self)
        if index < self._base_len:
            assert self._base is not None
            return self._base[index]
        return self._own[index - self._base_len]

    def __iter__(self) -> Iterator[SessionEvent]:
        if self._base is not None:
            for index in range(self._base_len):
                yield self._base[index]
        yield from self._own

    def append(self, event: SessionEvent) -> None:
        self._own.append(event)
        self._snapshot = None

    def snapshot(self) -> tuple[SessionEvent, ...]:
        if self._snapshot is None:
            if self._base is None:
                self._snapshot = tuple(self._own)
            else:
                self._snapshot = self._base.snapshot()[: self._base_len] + tuple(self._own)
        return self._snapshot

    def since(self, start: int) -> list[SessionEvent]:
        """Events from `start` to the end (used to hand new events to the store)."""
        if start >= self._base_len:
            return self._own[start - self._base_len :]
        return [self[index] for index in range(start, len(self))]


def _preview_header(header: HeaderFold, event: SessionEvent, seq: int) -> None:
    try:
        header.preview(event)
    except HeaderFoldError as exc:
        problem = str(exc).removeprefix(f"event {seq}: ")
        raise SessionValidationError(seq, f"{event.type}: {problem}") from exc


def _check_envelope(event: SessionEvent, expected_seq: int) -> None:
    problem = _envelope_problem(event, expected_seq)
    if problem is not None:
        raise SessionValidationError(expected_seq, f"{event.type}: {problem}")


def _envelope_problem(event: SessionEvent, expected_seq: int) -> str | None:
    """The first envelope rule `event` breaks as the event at `expected_seq`, or None."""
    if type(event.seq) is not int or event.seq != expected_seq:
        return f"seq {event.seq!r} is not the next index {expected_seq}"
    if type(event.time) is not int or not 0 <= event.time <= MAX_SAFE_INT:
        return f"time must be an int >= 0 (epoch ms), got {event.time!r}"
    if event.ignorable or isinstance(event.data, IgnorableData):
        if not (event.ignorable and isinstance(event.data, IgnorableData)):
            return "only unknown event types marked ignorable carry opaque data"
        if event.surface_op is not None or event.source_event_seqs is not None:
            return "an ignorable event takes no part in the surface"
        return None
    # A type that is no string (an unhashable one included) is no known type either.
    expected = DATA_BY_TYPE.get(event.type) if isinstance(event.type, str) else None
    if expected is None:
        return "unknown event type (not marked ignorable)"
    if type(event.data) is not expected:
        return f"data must be {expected.__name__}, got {type(event.data).__name__}"
    surface = event.type in SURFACE_TYPES
    op = event.surface_op
    if surface and op is None:
        return "surface_op is required on surface events"
    if not surface and op is not None:
        return "surface_op is forbidden on non-surface events"
    if isinstance(op, Replace):
        if type(op.start) is not int or type(op.end) is not int:
            return f"replace start/end must be int seqs, got {op.start!r}, {op.end!r}"
    elif surface and not isinstance(op, Append):
        return f"surface_op must be Append or Replace, got {type_name(op)}"
    seqs = event.source_event_seqs
    if seqs is None:
        return None
    if not surface:
        return "source_event_seqs are allowed only on surface events"
    if not seqs and not isinstance(event.data, AssistantMessage):
        return "source_event_seqs must be non-empty"
    if len(set(seqs)) != len(seqs):
        return "source_event_seqs must be unique"
    for seq in seqs:
        if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq < expected_seq:
            return f"source_event_seqs entry {seq!r} does not refer to an earlier event"
    return None


class _State:
    """Everything folded from the log; replaceable as a unit so appends stay transactional."""

    __slots__ = ("header", "structure", "surface")

    def __init__(self) -> None:
        self.structure = TurnStructure()
        self.surface = SurfaceFold()
        self.header = HeaderFold()


class Session:
    """One conversation's append-only log. The loop that owns it is its only writer."""

    def __init__(self, meta: SessionMeta, log: EventLog | None = None) -> None:
        self.meta = meta
        self._log = log if log is not None else EventLog()
        self._state: _State | None = _State() if log is None else None
        self._observers: list[SessionObserver] = []
        self._undelivered: deque[SessionEvent] = deque()
        self._delivering = False

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
        _replays.offer(session)
        return session

    @classmethod
    def from_loaded(
        cls, session_id: str, events: Sequence[SessionEvent], meta: SessionMeta
    ) -> Session:
        """A session over events a store's `load` has just validated and repaired.

        The store checked every rule already, by replaying the log (`from_events`): when
        that replay's fold is there to be taken over (see `_Replays`), it is adopted instead
        of folding again; otherwise the state is folded lazily on first use, as for a fork.
        """
        session = cls(_make_meta(session_id, meta), EventLog(events=events))
        session._state = _replays.take(session_id, events)
        return session

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
            data = _structure_data(freeze_json(dict(data), f"$[{seq}].data"), cls, seq, type)
            data_detached = True
        seqs = None if source_event_seqs is None else tuple(source_event_seqs)
        event = SessionEvent(
            type,
            seq,
            now_ms() if time is None else time,
            data,  # type: ignore[arg-type]
            seqs,
            surface_op,
        )
        return self._commit(event, detach=True, data_detached=data_detached)

    def append_event(self, event: SessionEvent) -> SessionEvent:
        """Append an already-built event (its seq must be the next index).

        The committed event is a detached, normalized copy (deeply frozen, strictly typed),
        so later mutation of anything the caller holds changes nothing in the log.
        """
        return self._commit(event, detach=True)

    def _commit(
        self, event: SessionEvent, *, detach: bool, data_detached: bool = False
    ) -> SessionEvent:
        state = self._folded()
        seq = len(self._log)
        _check_envelope(event, seq)
        if detach:
            event = _detached(event, seq, data_detached=data_detached)
        state.structure.check(event)
        state.surface.check(event, self._log.__getitem__)
        if type(event.data) in _HEADER_DATA:
            _preview_header(state.header, event, seq)
        # All checks passed: commit without any further possibility of failure.
        self._log.append(event)
        state.structure.advance(event)
        if event.surface_op is not None:
            state.surface.apply(event)
        state.header.feed(event)
        self._notify(event)
        return event

    def _replay(self, events: Iterable[SessionEvent]) -> None:
        """`_commit(event, detach=False)` of each event in turn, with the look-ups it makes
        per event made once: what a load of thousands of events spends most time on. Only
        for a session of its own events (no fork) that nobody observes (no notification is
        made): a load's new one, or the dev invariant's rebuild, extended at each check.

        The envelope is checked inline for the shapes nearly every event has (a known type and
        its exact data class, not ignorable, an Append or no surface op as its type requires,
        at most one earlier source seq); that test passes only events `_envelope_problem`
        passes, and any other event is judged by `_envelope_problem` itself, so a rule broken
        is reported with the same words either way. The structure rule is called by the data's
        class (`rule_of`, what `TurnStructure.check` dispatches to), and the steps `_commit`
        makes that cannot do anything for an event are left out: the surface check of an
        Append (only a Replace is checked against the nodes), `advance` on data it passes over
        (`ADVANCING`) and the header fold of data that is no header.
        """
        assert not self._observers
        state = self._folded()
        log = self._log
        assert log._base is None  # a new session: its events are all its own
        own = log._own
        log._snapshot = None  # nothing reads a snapshot while the replay runs
        structure, surface, header = state.structure, state.surface, state.header
        advance = structure.advance
        surface_check, surface_apply, header_feed = surface.check, surface.apply, header.feed
        lookup = log.__getitem__
        envelopes, fold_steps, header_data = _ENVELOPES, _FOLD_STEPS, _HEADER_DATA
        append_op, most = Append, MAX_SAFE_INT
        seq = len(own)
        kind: type | None
        surface_event: bool | None
        for event in events:
            data, op, seqs, time = event.data, event.surface_op, event.source_event_seqs, event.time
            try:
                kind, surface_event = envelopes[event.type]
            except (KeyError, TypeError):  # unknown or unhashable type: the full rule decides
                kind, surface_event = None, None
            if not (
                type(data) is kind
                and event.ignorable is False
                and event.seq == seq
                and type(event.seq) is int
                and type(time) is int
                and 0 <= time <= most
                and (op is None) is not surface_event
                and (op is None or type(op) is append_op)
                and (
                    seqs is None
                    or (
                        surface_event
                        and type(seqs) is tuple
                        and len(seqs) == 1
                        and type(seqs[0]) is int
                        and 0 <= seqs[0] < seq
                    )
                )
            ):
                problem = _envelope_problem(event, seq)
                if problem is not None:
                    raise SessionValidationError(seq, f"{event.type}: {problem}")
            steps = fold_steps.get(type(data))
            if steps is None:  # a subclass of IgnorableData: the generic calls decide
                steps = (_checked_structure, True, type(data) in header_data)
            rule, advances, feeds_header = steps
            rule(structure, event, data)
            if op is not None and type(op) is not append_op:
                surface_check(event, lookup)
            if feeds_header:
                _preview_header(header, event, seq)
            own.append(event)
            if advances:
                advance(event)
            if op is not None:
                surface_apply(event)
            if feeds_header:
                header_feed(event)
            seq += 1

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

    def _folded(self) -> _State:
        """The folded state; a forked child replays its shared seed on first use."""
        if self._state is None:
            state = _State()
            for event in self._log:
                state.structure.advance(event)
                if event.surface_op is not None:
                    state.surface.apply(event)
                state.header.feed(event)
            self._state = state
        return self._state


class _Replays:
    """The fold of the latest log replayed by `from_events`, for `from_loaded` to adopt.

    A store's load validates the stored log by replaying it into a session it then drops
    (with any repair closers appended), and returns the events; the session built from them
    needs that same fold. The fold is adopted only when nothing else can touch it any more
    (the replaying session is gone) and it is the fold of exactly these events (the same
    event objects, or equal ones: the closers were appended as detached copies). One slot,
    taken once: a replay nobody adopts is dropped by the next one.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._slot: tuple[str, weakref.ref[Session], EventLog, _State] | None = None

    def offer(self, session: Session) -> None:
        assert session._state is not None
        with self._lock:
            self._slot = (session.id, weakref.ref(session), session._log, session._state)

    def take(self, session_id: str, events: Sequence[SessionEvent]) -> _State | None:
        with self._lock:
            slot, self._slot = self._slot, None
        if slot is None:
            return None
        replayed_id, replaying, log, state = slot
        if replayed_id != session_id or replaying() is not None or len(log) != len(events):
            return None
        own = log.since(0)
        if all(map(operator.is_, own, events)):
            return state
        return state if all(a is b or a == b for a, b in zip(own, events, strict=True)) else None


_replays = _Replays()


def _structure_data(value: object, cls: type, seq: int, event_type: str) -> Any:
    try:
        return structure_as(value, cls)
    except SessionFormatError as exc:
        raise SessionValidationError(seq, f"{event_type}: invalid data: {exc.problem}") from exc


def _detached(event: SessionEvent, seq: int, *, data_detached: bool = False) -> SessionEvent:
    """A deep, strictly typed copy of `event` (docs/spec/session-log.md §2.3: appends are
    deep-copied; §9: the data must be losslessly JSON-representable, i.e. the codec can decode
    what it encodes).

    Data that is already deeply immutable, exactly typed and canonical (what the loop builds
    from values it has validated) would come out of the copy equal to itself: it is kept.
    """
    data = event.data
    if data_detached or is_canonical(data):
        pass
    elif isinstance(data, IgnorableData):
        data = IgnorableData(freeze_object(data.payload, f"$[{seq}].data"))
    else:
        path = f"$[{seq}].data"
        data = _structure_data(freeze_json(unstructure(data), path), type(data), seq, event.type)
    seqs = event.source_event_seqs
    if data is event.data and type(event) is SessionEvent and type(seqs) in (tuple, NoneType):
        return event  # every part already immutable and normalized: the copy would be equal
    return SessionEvent(
        event.type,
        event.seq,
        event.time,
        data,
        None if seqs is None else tuple(seqs),
        event.surface_op,
        event.ignorable,
    )


def type_name(value: object) -> str:
    return type(value).__name__


def new_session_id() -> str:
    return uuid.uuid4().hex


def _make_meta(session_id: str, meta: SessionMeta | Mapping[str, Any] | None) -> SessionMeta:
    if isinstance(meta, SessionMeta):
        if meta.id != session_id:
            raise ValueError(f"meta id {meta.id!r} differs from session id {session_id!r}")
        return meta
    return SessionMeta(session_id, labels=freeze_object(meta or {}, "$.meta"))
