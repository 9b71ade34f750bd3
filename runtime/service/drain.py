"""The drain before shutdown: from its start the service takes no new work, stops listening
and ends its event streams; running turns get a grace period (docs/spec/runtime.md §15.6)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import trio

from .errors import ServiceDraining


class Drain:
    """Shutdown state shared by the service, its streams and the server."""

    def __init__(self) -> None:
        self.draining = False
        self.stop_listening = trio.Event()
        """Set when the drain begins: the HTTP server stops accepting connections."""
        self._streams: set[trio.CancelScope] = set()
        """The producers of the open event streams, which the drain cancels."""
        self._responses = 0
        """The event-stream responses under way, from their start to their last byte."""
        self._stream_ended = trio.lowlevel.ParkingLot()
        self._grace: trio.CancelScope | None = None
        self._forced = False

    def refuse(self) -> None:
        """Raise `ServiceDraining` once the drain has begun."""
        if self.draining:
            raise ServiceDraining("the server is shutting down; it takes no new work")

    @contextmanager
    def stream_scope(self) -> Iterator[trio.CancelScope]:
        """A scope the drain cancels: an event stream runs inside it and ends cleanly."""
        with trio.CancelScope() as scope:
            if self.draining:
                scope.cancel()
            self._streams.add(scope)
            try:
                yield scope
            finally:
                self._streams.discard(scope)

    @contextmanager
    def stream_response(self) -> Iterator[None]:
        """Counts an event stream as open while its response runs: from its start, through
        its backlog, to its last frame written (its producer ends before that frame is)."""
        self._responses += 1
        try:
            yield
        finally:
            self._responses -= 1
            self._stream_ended.unpark_all()

    @property
    def open_streams(self) -> int:
        """How many event-stream responses are under way."""
        return self._responses

    async def until_streams_at_most(self, count: int) -> None:
        """Wait until at most `count` event streams are open (a client that went away has
        its stream ended by the server)."""
        while self._responses > count:
            await self._stream_ended.park()

    def begin(self) -> None:
        """Start the drain: refuse new work, stop listening, end every stream."""
        self.draining = True
        self.stop_listening.set()
        for scope in tuple(self._streams):
            scope.cancel()

    @contextmanager
    def grace(self, seconds: float) -> Iterator[trio.CancelScope]:
        """The grace period for running turns; `force()` cuts it short."""
        with trio.move_on_after(seconds) as scope:
            self._grace = scope
            if self._forced:
                scope.cancel()
            try:
                yield scope
            finally:
                self._grace = None

    def force(self) -> None:
        """End the grace period now (a second SIGINT/SIGTERM)."""
        self._forced = True
        if self._grace is not None:
            self._grace.cancel()
