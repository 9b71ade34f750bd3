"""The dev invariant checked incrementally: a replay kept between a session's requests
accepts exactly what a from-scratch replay accepts, and still catches a divergence that
appears late in a long log."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest
import trio
from attrs import evolve
from helpers import open_runtime

from actorloop.runtime import AgentOptions
from actorloop.runtime.errors import InvariantViolation
from actorloop.runtime.host.checked_provider import InvariantCheckedProvider
from actorloop.runtime.log.invariants import EventSource, ReplayCheck, check_request
from actorloop.runtime.log.request import Request
from actorloop.runtime.log.session import Session
from actorloop.runtime.model.chunks import StreamChunk
from actorloop.runtime.model.events import SessionEvent
from actorloop.runtime.model.messages import Message
from actorloop.runtime.providers.base import ModelInfo
from actorloop.runtime.testing import EchoProvider

OPTIONS = AgentOptions(model="m", system="You are a test.")


class Recording:
    """Inner provider: records each dispatched request with the log length at dispatch."""

    name = "echo"

    def __init__(self) -> None:
        self.inner = EchoProvider()
        self.log_length: Callable[[], int] = lambda: 0
        self.dispatched: list[tuple[Request, int]] = []

    def model_info(self, model: str) -> ModelInfo | None:
        return self.inner.model_info(model)

    async def stream(self, request: Request) -> AsyncIterator[StreamChunk]:
        self.dispatched.append((request, self.log_length()))
        async for chunk in self.inner.stream(request):
            yield chunk


def _grown(target_events: int) -> tuple[Session, list[tuple[Request, int]], int]:
    """A real session grown to `target_events` by one-step turns (dev invariants on)."""
    recording = Recording()
    out: list[tuple[Session, int]] = []

    async def main() -> None:
        async with open_runtime(recording) as rt:
            agent = await rt.spawn(OPTIONS)
            recording.log_length = lambda: len(agent.session)
            while len(agent.session) < target_events:
                result = await agent.send(f"message {len(agent.session)}")
                assert result.reason == "completed", result
            out.append((agent.session, rt.invariant_checks))

    trio.run(main)
    ((session, checks),) = out
    return session, recording.dispatched, checks


@pytest.fixture(scope="module")
def long_log() -> tuple[Session, list[tuple[Request, int]], int]:
    return _grown(10_000)


def _replayed(
    events: tuple[SessionEvent, ...], dispatched: list[tuple[Request, int]]
) -> ReplayCheck:
    replay = ReplayCheck()
    for request, length in dispatched:
        replay.check(EventSource.of_sequence(events[:length]), request)
    return replay


def test_runtime_checked_every_request_of_a_long_log(long_log) -> None:
    session, dispatched, checks = long_log
    assert len(session) >= 10_000
    assert checks == len(dispatched) > 800


def test_incremental_and_from_scratch_agree_on_every_request(long_log) -> None:
    session, dispatched, _ = long_log
    events = session.events
    replay = ReplayCheck()
    for index, (request, length) in enumerate(dispatched):
        replay.check(EventSource.of_sequence(events[:length]), request)
        if index % 97 == 0 or index == len(dispatched) - 1:
            check_request(events[:length], request)


def _tampered_early_message(request: Request) -> Request:
    messages = list(request.messages)
    first = messages[request.prefix_length]
    messages[request.prefix_length] = Message.user(first.text + " (changed)")
    return evolve(request, messages=tuple(messages))


@pytest.mark.parametrize(
    "tamper, expected",
    [
        (_tampered_early_message, "request messages diverge"),
        (lambda r: evolve(r, messages=r.messages[:-1]), "request messages diverge"),
        (lambda r: evolve(r, messages=(*r.messages, Message.user("extra"))), "messages diverge"),
        (lambda r: evolve(r, system="another system"), "request system diverges"),
        (lambda r: evolve(r, config=evolve(r.config, temperature=0.5)), "request config"),
        (lambda r: evolve(r, prefix_length=r.prefix_length + 1), "prefix length"),
    ],
)
def test_a_late_divergence_in_a_10k_event_log_is_caught(long_log, tamper, expected) -> None:
    session, dispatched, _ = long_log
    events = session.events
    *earlier, (last, length) = dispatched
    assert length > 9_900
    replay = _replayed(events, earlier)
    bad = tamper(last)
    with pytest.raises(InvariantViolation, match=expected):
        replay.check(EventSource.of_sequence(events[:length]), bad)
    with pytest.raises(InvariantViolation, match=expected):
        check_request(events[:length], bad)


def test_a_request_built_from_a_stale_boundary_is_caught(long_log) -> None:
    """The previous step's request sent again once the log has grown: the history is one
    turn short of the boundary the log now derives."""
    session, dispatched, _ = long_log
    events = session.events
    *earlier, (_last, length) = dispatched
    replay = _replayed(events, earlier)
    stale, _ = earlier[-1]
    with pytest.raises(InvariantViolation, match="request messages diverge"):
        replay.check(EventSource.of_sequence(events[:length]), stale)


def test_the_provider_wrapper_checks_a_live_session_and_recovers_after_a_failure(
    long_log,
) -> None:
    session, dispatched, _ = long_log
    events = session.events
    *earlier, (last, length) = dispatched
    live = Session.from_events(session.id, events[: earlier[0][1]])
    checked = InvariantCheckedProvider(EchoProvider(), lambda _id: live)
    for request, at in earlier:
        for event in events[len(live) : at]:
            live.append_event(event)
        checked.check(request)
    for event in events[len(live) : length]:
        live.append_event(event)
    with pytest.raises(InvariantViolation, match="request messages diverge"):
        checked.check(_tampered_early_message(last))
    checked.check(last)  # a fresh replay after the failure accepts the right request
    assert checked.checks_passed == len(dispatched)
