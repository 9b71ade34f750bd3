"""A client that disconnects cancels the request waiting for it: on HTTP/1.1 the connection
itself cancels the scopes of its waiting requests when it closes (no watcher task per
request); elsewhere (HTTP/2, another ASGI server) a task watches for `http.disconnect`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import trio
from starlette.requests import Request
from starlette.types import Receive, Scope

WATCH_KEY = "actorloop.connection_watch"
"""Where an HTTP/1.1 connection puts its `ConnectionWatch` in the ASGI scope's `state`."""


class ConnectionWatch:
    """One HTTP/1.1 connection's end, told to the requests that wait on it: `close()` (the
    connection stopped reading: the client left or the server closed it) cancels every
    scope registered with `cancels`."""

    def __init__(self) -> None:
        self.closed = False
        self._scopes: set[trio.CancelScope] = set()

    def close(self) -> None:
        """The connection ended: cancel every waiting request's scope."""
        self.closed = True
        for scope in self._scopes:
            scope.cancel()

    def cancels(self, scope: trio.CancelScope) -> Callable[[], None]:
        """Cancel `scope` when the connection ends (at once if it already did); returns the
        function that forgets it."""
        if self.closed:
            scope.cancel()
        self._scopes.add(scope)
        return lambda: self._scopes.discard(scope)


def connection_watch(scope: Scope) -> ConnectionWatch | None:
    """The `ConnectionWatch` of the HTTP/1.x connection serving `scope`, or None (HTTP/2,
    whose streams end without their connection; an ASGI server that is not ours)."""
    if scope.get("http_version") not in ("1.0", "1.1"):
        return None
    state = scope.get("state")
    watch = state.get(WATCH_KEY) if isinstance(state, dict) else None
    return watch if isinstance(watch, ConnectionWatch) else None


async def _until_disconnected(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def unless_disconnected(request: Request, work: Callable[[], Awaitable[Any]]) -> Any:
    """Run `work` as the request's caller: a client that disconnects cancels it (and, for a
    send, its turn only: caller cancellation). None when the client went away."""
    watch = connection_watch(request.scope)
    if watch is not None:
        with trio.CancelScope() as cancel:
            forget = watch.cancels(cancel)
            try:
                return await work()
            finally:
                forget()
        return None
    result: Any = None
    async with trio.open_nursery() as nursery:

        async def watch_receive() -> None:
            await _until_disconnected(request.receive)
            nursery.cancel_scope.cancel()

        nursery.start_soon(watch_receive)
        result = await work()
        nursery.cancel_scope.cancel()
    return result
