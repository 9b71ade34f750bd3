"""The reconstructability invariant (docs/spec/session-log.md §8.3): a loop-built request must
equal what a fresh replay of the log rebuilds. Used as the outermost wrapper around provider
calls."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence

from actorloop.codecs.converter import canonical_bytes
from actorloop.runtime.chunks import StreamChunk
from actorloop.runtime.errors import InvariantViolation
from actorloop.runtime.events import SessionEvent, StepStart
from actorloop.runtime.header_algebra import canonical, fold
from actorloop.runtime.providers.base import ModelInfo, Provider, opened_stream
from actorloop.runtime.request import Request
from actorloop.runtime.session import Session


def check_request(events: Sequence[SessionEvent], request: Request) -> None:
    """Raise InvariantViolation naming what diverged between `request` and the log."""
    step_start = next(
        (i for i in range(len(events) - 1, -1, -1) if isinstance(events[i].data, StepStart)),
        None,
    )
    if step_start is None:
        raise InvariantViolation("request has no step/start in the log")
    header = fold(events)
    if header is None:
        raise InvariantViolation("request has no request/header in the log")
    header = canonical(header)
    rebuilt_history = Session.from_events("rebuild", events[:step_start]).derive_messages()
    prefix = header.message_prefix or ()
    if canonical_bytes(request.messages) != canonical_bytes(prefix + rebuilt_history):
        raise InvariantViolation(
            f"request messages diverge from the boundary derivation at step/start seq {step_start}"
        )
    if request.prefix_length != len(prefix):
        raise InvariantViolation("request prefix length diverges from the folded request header")
    for name, ours, logged in (
        ("config", request.config, header.config),
        ("system", request.system, header.system),
        ("tools", request.tools or None, header.tools),
    ):
        if canonical_bytes(ours) != canonical_bytes(logged):
            raise InvariantViolation(f"request {name} diverges from the folded request header")


class InvariantCheckedProvider:
    """Wraps a provider; checks every loop-built request against the log before dispatch."""

    def __init__(self, inner: Provider, events_of: Callable[[str], Sequence[SessionEvent]]) -> None:
        self.inner = inner
        self.name = inner.name
        self._events_of = events_of
        self.checks_passed = 0

    def model_info(self, model: str) -> ModelInfo | None:
        return self.inner.model_info(model)

    async def stream(self, request: Request) -> AsyncIterator[StreamChunk]:
        if not request.one_shot:
            check_request(self._events_of(request.session_id), request)
            self.checks_passed += 1
        async with opened_stream(self.inner, request) as stream:
            async for chunk in stream:
                yield chunk
