"""The bounded hand-off of a session's events from a trio reader of `agent.events()` to
one asyncio consumer (`EventFeed`)."""

from __future__ import annotations

import asyncio
from collections import deque
from contextlib import aclosing

import trio

from ..control.handle import Agent as TrioAgent
from ..errors import sole_error
from ..model.events import SessionEvent
from .aio_futures import fail, resolve

EVENTS_BUFFER = 64
"""Default bound of the hand-off between a trio events reader and its asyncio consumer."""


def first_seq(after: int | None) -> int:
    """The first seq `agent.events(after)` yields (`after` checked to be a seq or None)."""
    if after is not None and (isinstance(after, bool) or not isinstance(after, int)):
        raise TypeError(f"after must be a seq (int) or None, got {after!r}")
    return 0 if after is None else max(after + 1, 0)


class EventFeed:
    """The bounded hand-off between a trio reader of `agent.events()` and one asyncio
    consumer. Both run on the loop's thread, so the deque needs no lock; the reader waits
    while it is full and, since the trio iterator only keeps a position in the log, that
    wait never holds the loop up, drops or reorders anything."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.buffer: deque[SessionEvent] = deque()
        self.scope = trio.CancelScope()
        self.arrived = asyncio.Event()
        self.ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.cut_short = False
        """The reader was stopped by the runtime's end, not by the log's: every agent is
        closed by then, so the consumer reads the rest from the in-memory log."""
        self._room = trio.Event()

    async def pump(self, agent: TrioAgent, after: int | None) -> None:
        """The trio side: read `agent.events(after)` into the buffer until the log ends,
        the reader is cancelled or it fails (`ended` then says which)."""
        try:
            with self.scope:
                async with aclosing(agent.events(after)) as events:
                    async for event in events:
                        while len(self.buffer) >= self.capacity:
                            self._room = trio.Event()
                            await self._room.wait()
                        self.buffer.append(event)
                        self.arrived.set()
        except trio.Cancelled:
            self.cut_short = True
            raise
        except BaseException as exc:
            fail(self.ended, sole_error(exc))
            if not isinstance(exc, Exception):
                raise
        finally:
            resolve(self.ended, None)
            self.arrived.set()

    def take(self) -> SessionEvent:
        """The asyncio side: the oldest buffered event, making room for the reader."""
        event = self.buffer.popleft()
        self._room.set()
        return event
