"""A stored log replayed into a new session's folds, each rule checked as an append checks
it but with its per-event look-ups made once; and the slot through which
`Session.from_loaded` adopts the fold of a store's validating replay."""

from __future__ import annotations

import operator
import threading
import weakref
from collections.abc import Iterable, Sequence

from ...codecs.jsonvalue import MAX_SAFE_INT
from ..errors import SessionValidationError
from ..model.events import (
    DATA_BY_TYPE,
    SURFACE_TYPES,
    Append,
    IgnorableData,
    SessionEvent,
)
from .admission import HEADER_DATA, envelope_problem, preview_header
from .event_log import EventLog, FoldState
from .structure import ADVANCING, Rule, TurnStructure, rule_of
from .usage import USAGE_DATA

_ENVELOPES: dict[str, tuple[type, bool | None]] = {
    name: (cls, name in SURFACE_TYPES) for name, cls in DATA_BY_TYPE.items()
}
"""Per known event type: the exact class of its data, and whether it is a surface event."""
FOLD_STEPS: dict[type, tuple[Rule, bool, bool]] = {
    cls: (rule_of(cls), issubclass(cls, tuple(ADVANCING)), cls in HEADER_DATA)
    for cls in (*DATA_BY_TYPE.values(), IgnorableData)
}
"""Per exact data class of an event whose envelope holds: its structure rule, whether the
structure advances on it, whether the header fold takes it."""


def checked_structure(structure: TurnStructure, event: SessionEvent, _data: object) -> None:
    """The structure rule of data no entry of `FOLD_STEPS` names (a subclass of
    IgnorableData): `TurnStructure.check` decides."""
    structure.check(event)


# One function on purpose: the look-ups hoisted into locals before the loop are what
# makes a load fast; a helper called per event would pay for them again.
def replay(log: EventLog, state: FoldState, events: Iterable[SessionEvent]) -> None:
    """`Session._commit(event, detach=False)` of each event in turn, with the look-ups it
    makes per event made once: what a load of thousands of events spends most time on. Only
    for a session of its own events (no fork) that nobody observes (no notification is
    made): a load's new one, or the dev invariant's rebuild, extended at each check.

    The envelope is checked inline for the shapes nearly every event has (a known type and
    its exact data class, not ignorable, an Append or no surface op as its type requires,
    at most one earlier source seq); that test passes only events `envelope_problem`
    passes, and any other event is judged by `envelope_problem` itself, so a rule broken
    is reported with the same words either way. The structure rule is called by the data's
    class (`rule_of`, what `TurnStructure.check` dispatches to), and the steps `_commit`
    makes that cannot do anything for an event are left out: the surface check of an
    Append (only a Replace is checked against the nodes), `advance` on data it passes over
    (`ADVANCING`) and the header fold of data that is no header.
    """
    own = log.replay_target()
    structure, surface, header = state.structure, state.surface, state.header
    usage_add, usage_data = state.usage.add, USAGE_DATA
    advance = structure.advance
    surface_check, surface_apply, header_feed = surface.check, surface.apply, header.feed
    lookup = log.__getitem__
    envelopes, fold_steps, header_data = _ENVELOPES, FOLD_STEPS, HEADER_DATA
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
            problem = envelope_problem(event, seq)
            if problem is not None:
                raise SessionValidationError(seq, f"{event.type}: {problem}")
        steps = fold_steps.get(type(data))
        if steps is None:  # a subclass of IgnorableData: the generic calls decide
            steps = (checked_structure, True, type(data) in header_data)
        rule, advances, feeds_header = steps
        rule(structure, event, data)
        if op is not None and type(op) is not append_op:
            surface_check(event, lookup)
        if feeds_header:
            preview_header(header, event, seq)
        own.append(event)
        if advances:
            advance(event)
        if op is not None:
            surface_apply(event)
        if feeds_header:
            header_feed(event)
        if type(data) in usage_data:
            usage_add(event)
        seq += 1


class Replays:
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
        self._slot: tuple[str, weakref.ref[object], EventLog, FoldState] | None = None

    def offer(self, session_id: str, owner: object, log: EventLog, state: FoldState) -> None:
        """Keep the fold `state` of `log`, replayed by the session `owner`, for adoption."""
        with self._lock:
            self._slot = (session_id, weakref.ref(owner), log, state)

    def take(self, session_id: str, events: Sequence[SessionEvent]) -> FoldState | None:
        """The kept fold if it is that of exactly `events` of `session_id` and its session
        is gone; None otherwise. Either way the slot is emptied."""
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
