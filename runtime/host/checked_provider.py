"""The provider wrapper of `Runtime.open(dev_invariants=True)`: every loop-built request is
checked against its session's log (docs/spec/session-log.md §8.3) before it leaves."""

from __future__ import annotations

import weakref
from collections.abc import AsyncIterator, Callable

from ..log.invariants import EventSource, ReplayCheck, check_request
from ..log.request import Request
from ..log.session import Session
from ..model.chunks import StreamChunk
from ..providers.base import ModelInfo, Provider, opened_stream

__all__ = ["InvariantCheckedProvider", "check_request"]


class InvariantCheckedProvider:
    """Wraps a provider; checks every loop-built request against the log before dispatch.

    The replay of each live session is kept between its requests (dropped with the session),
    so a check costs the new events, not the whole log.
    """

    def __init__(self, inner: Provider, session_of: Callable[[str], Session]) -> None:
        self.inner = inner
        self.name = inner.name
        self._session_of = session_of
        self._replays: weakref.WeakKeyDictionary[Session, ReplayCheck] = weakref.WeakKeyDictionary()
        self.checks_passed = 0

    def model_info(self, model: str) -> ModelInfo | None:
        return self.inner.model_info(model)

    def check(self, request: Request) -> None:
        """Check `request` against its session's log (InvariantViolation if it diverges)."""
        session = self._session_of(request.session_id)
        replay = self._replays.get(session)
        if replay is None:
            replay = self._replays[session] = ReplayCheck()
        try:
            replay.check(EventSource.of_session(session), request)
        except BaseException:
            # A failed check may have consumed part of the log: start over next time.
            del self._replays[session]
            raise
        self.checks_passed += 1

    async def stream(self, request: Request) -> AsyncIterator[StreamChunk]:
        if not request.one_shot:
            self.check(request)
        async with opened_stream(self.inner, request) as stream:
            async for chunk in stream:
                yield chunk
