"""The validating replay of a load (`Session.from_events`) checks most envelopes inline: it
must accept and refuse exactly what appending the same events one by one does, with the same
typed error, seq and rule, however an event's envelope is broken."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs
import pytest
from session_logs import closed_log

import actorloop.runtime.log.replay as replay_module
from actorloop.codecs.converter import encode_event
from actorloop.codecs.jsonvalue import FrozenDict
from actorloop.runtime.errors import ActorloopError
from actorloop.runtime.log.session import Session
from actorloop.runtime.log.structure import ADVANCING, TurnStructure
from actorloop.runtime.model.events import APPEND, IgnorableData, Replace, SessionEvent

Mutation = Callable[[SessionEvent], SessionEvent]


@attrs.frozen
class _Opaque(IgnorableData):
    """Opaque data of a class the replay's tables do not list."""


def _with(**changes: Any) -> Mutation:
    # attrs.evolve runs the plain __init__: no validator stands between a test and a bad value.
    return lambda event: attrs.evolve(event, **changes)


def _retyped(event: SessionEvent) -> SessionEvent:
    other = "step/end" if event.type != "step/end" else "step/start"
    return attrs.evolve(event, type=other)


MUTATIONS: dict[str, Mutation] = {
    "seq ahead": lambda event: attrs.evolve(event, seq=event.seq + 1),
    "seq behind": lambda event: attrs.evolve(event, seq=event.seq - 1),
    "seq as float": lambda event: attrs.evolve(event, seq=float(event.seq)),
    "seq as string": lambda event: attrs.evolve(event, seq=str(event.seq)),
    "negative time": _with(time=-1),
    "time past 2^53": _with(time=2**53),
    "time as float": _with(time=1.5),
    "time as bool": _with(time=True),
    "unknown type": _with(type="no/such"),
    "unhashable type": _with(type=["turn/start"]),
    "type of other data": _retyped,
    "ignorable known type": _with(ignorable=True),
    "ignorable as 1": _with(ignorable=1),
    "ignorable as 0": _with(ignorable=0),
    "no data": _with(data=None),
    "no data, unknown type": _with(data=None, type="no/such"),
    "opaque data": _with(data=IgnorableData(FrozenDict({"x": 1}))),
    "opaque subclass, ignorable": _with(data=_Opaque(FrozenDict({"x": 1})), ignorable=True),
    "opaque ignorable": _with(data=IgnorableData(FrozenDict({"x": 1})), ignorable=True),
    "no surface op": _with(surface_op=None),
    "append op": _with(surface_op=APPEND),
    "replace op": _with(surface_op=Replace(0, 0)),
    "replace with bool": _with(surface_op=Replace(True, 0)),
    "op as string": _with(surface_op="append"),
    "empty sources": _with(source_event_seqs=()),
    "source zero": _with(source_event_seqs=(0,)),
    "source itself": lambda event: attrs.evolve(event, source_event_seqs=(event.seq,)),
    "source before": lambda event: attrs.evolve(event, source_event_seqs=(event.seq - 1,)),
    "sources repeated": _with(source_event_seqs=(0, 0)),
    "two sources": _with(source_event_seqs=(0, 1)),
    "sources as list": _with(source_event_seqs=[0]),
    "source as bool": _with(source_event_seqs=(True,)),
    "source as string": _with(source_event_seqs=("0",)),
    "negative source": _with(source_event_seqs=(-1,)),
}


def _outcome(run: Callable[[], Session]) -> tuple[Any, ...]:
    """What a way of building a session ends in: the error's type, code, seq and rule, or the
    log's bytes and the folds of a session built (the append stores a detached copy, the
    replay the event given: a list of seqs comes back a tuple from one, so bytes compare)."""
    try:
        session = run()
    except ActorloopError as exc:
        return (type(exc), exc.code, getattr(exc, "seq", None), getattr(exc, "rule", str(exc)))
    logged = tuple(encode_event(event) for event in session.events)
    return (logged, session.derive_messages(), session.header(), session.open_turn)


def _appended(events: Sequence[SessionEvent], at: int) -> Session:
    session = Session.from_events("s", events[:at])
    for event in events[at:]:
        session.append_event(event)
    return session


LOG = closed_log("s", 2).events


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_replay_judges_every_envelope_like_the_append(name: str) -> None:
    mutate = MUTATIONS[name]
    refused = 0
    for at in range(1, len(LOG)):
        events = (*LOG[:at], mutate(LOG[at]), *LOG[at + 1 :])
        replayed = _outcome(lambda events=events: Session.from_events("s", events))
        appended = _outcome(lambda events=events, at=at: _appended(events, at))
        assert replayed == appended, (name, at, LOG[at].type)
        refused += isinstance(replayed[0], type) and issubclass(replayed[0], ActorloopError)
    accepted_somewhere = ("ignorable as 0", "source zero", "source before", "two sources")
    if name not in (*accepted_somewhere, "opaque subclass, ignorable"):
        assert refused, f"{name} should break a rule somewhere in the log"


def test_a_plain_log_needs_no_full_envelope_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """The events the loop writes take the inline test: the full rule is not consulted."""
    consulted: list[int] = []
    full = replay_module.envelope_problem

    def counting(event: SessionEvent, expected_seq: int) -> str | None:
        consulted.append(expected_seq)
        return full(event, expected_seq)

    monkeypatch.setattr(replay_module, "envelope_problem", counting)
    replayed = Session.from_events("s", LOG)
    assert replayed.events == LOG
    assert consulted == []
    with pytest.raises(ActorloopError):
        Session.from_events("s", (*LOG[:3], attrs.evolve(LOG[3], time=-1)))
    assert consulted == [3]


def test_advance_changes_nothing_for_data_outside_advancing() -> None:
    """The replay calls `advance` only for `ADVANCING` classes: for any other it is a no-op."""
    structure = TurnStructure()
    passed_over = 0
    for event in (*LOG, attrs.evolve(LOG[0], data=IgnorableData(FrozenDict()), ignorable=True)):
        before = attrs.evolve(
            structure,
            calls_in_step=dict(structure.calls_in_step),
            results_in_step=dict(structure.results_in_step),
        )
        structure.advance(event)
        if type(event.data) not in ADVANCING:
            passed_over += 1
            assert structure == before, event.type
    assert passed_over >= len(LOG) // 3
