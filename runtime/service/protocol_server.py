"""One connection's protocol server: Hypercorn's `TCPServer` with a sized response written
in one write (without a scheduling point when the socket takes it at once), request
messages handed to the app without one when its queue has room, a keep-alive timer that
moves a deadline instead of restarting a task per request, no cancel scope per read, and
the `ConnectionWatch` that cancels the requests waiting on it when it ends."""

from __future__ import annotations

import math
import os
from collections.abc import Awaitable, Callable

import h11
import trio
from hypercorn.config import Config
from hypercorn.events import Closed, Event, RawData
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.trio.task_group import TaskGroup
from hypercorn.trio.tcp_server import MAX_RECV, TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import (
    AppWrapper,
    ASGIReceiveEvent,
    ASGISendEvent,
    ConnectionState,
    Scope,
)

from .disconnects import WATCH_KEY, ConnectionWatch

HOLD_LIMIT = 64 * 1024
"""The most bytes of one sized response held back to be written together (a larger one,
a file say, goes out as it comes)."""


def _sized_head(data: bytes) -> bool:
    """Whether `data` is an HTTP/1.x response head announcing a Content-Length."""
    end = data.find(b"\r\n\r\n")
    if not data.startswith(b"HTTP/1.") or end < 0:
        return False
    # h11 writes header names as the app gave them: Starlette's are lower-case, so the head
    # is copied and lowered only for a name spelled otherwise (or no Content-Length).
    return (
        data.find(b"\r\ncontent-length:", 0, end) >= 0
        or b"\r\ncontent-length:" in data[:end].lower()
    )


def _write_now(stream: trio.SocketStream, data: bytes) -> bytes:
    """Write what the socket takes without blocking; the bytes left. Any error leaves all of
    them to trio's `send_all`, which reports it as Hypercorn expects (a closed stream)."""
    try:
        sent = os.write(stream.socket.fileno(), data)
    except OSError:
        return data
    return data[sent:]


class _AppTaskGroup(TaskGroup):
    """Hypercorn's task group for one connection's requests, whose `app_put` (how the
    connection hands the app its body, and the disconnect after the answer) queues the
    message without a scheduling point when the app's channel has room. A memory channel's
    `send` always yields: the reader then gave the app task its body in two turns, so the app
    often woke to half a body and slept again, and the answer's end (the disconnect put
    from the app's own task) resumed the whole ASGI await chain once more. A full channel
    still waits."""

    async def spawn_app(
        self,
        app: AppWrapper,
        config: Config,
        scope: Scope,
        send: Callable[[ASGISendEvent | None], Awaitable[None]],
    ) -> Callable[[ASGIReceiveEvent], Awaitable[None]]:
        put = await super().spawn_app(app, config, scope, send)
        channel = getattr(put, "__self__", None)
        if not isinstance(channel, trio.MemorySendChannel):
            return put

        async def put_now(message: ASGIReceiveEvent) -> None:
            try:
                channel.send_nowait(message)
            except trio.WouldBlock:
                await put(message)

        return put_now


class _IdleDeadline:
    """Hypercorn's keep-alive timer (its `TrioSingleTask`, started anew at every idle
    moment) as one watcher task per connection whose deadline moves: idle, it is
    `keep_alive_timeout` away; busy, it is never."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.busy = False
        self.running = False
        self.scope = trio.CancelScope()

    async def restart(self, task_group: TaskGroup, action: Callable[[], Awaitable[None]]) -> None:
        """The connection went idle: the timer runs (the watcher starts if it is not on)."""
        self.busy = False
        if not self.running:
            self.scope = trio.CancelScope()
            self.running = True
            task_group.spawn(action)
        self.scope.deadline = trio.current_time() + self.seconds

    async def stop(self) -> None:
        """A request began: no timeout until the connection is idle again."""
        self.busy = True
        self.scope.deadline = math.inf


class ServiceConnection(TCPServer):
    """Hypercorn's protocol server for one accepted connection, serving `app`."""

    def __init__(
        self, app: AppWrapper, config: Config, context: WorkerContext, stream: trio.SocketStream
    ) -> None:
        self.watch = ConnectionWatch()
        super().__init__(app, config, context, ConnectionState({WATCH_KEY: self.watch}), stream)  # type: ignore[arg-type]
        self.idle_task = _IdleDeadline(config.keep_alive_timeout)  # type: ignore[assignment]
        self._held: list[bytes] = []
        self._held_bytes = 0

    @property
    def _task_group(self) -> TaskGroup:
        """The task group of this connection's requests."""
        return self._requests

    @_task_group.setter
    def _task_group(self, group: TaskGroup) -> None:
        # Hypercorn's `run` makes the group and sets it here just before it hands the group
        # to the protocol, so before any request is spawned in it: it becomes the kind whose
        # puts do not yield (`_AppTaskGroup` adds behaviour, no state).
        if type(group) is TaskGroup:
            group.__class__ = _AppTaskGroup
        self._requests = group

    async def protocol_send(self, event: Event) -> None:
        """Hypercorn writes a response's head, body and end separately: the parts of a sized
        HTTP/1.1 response are held until its end and written once (one syscall, one lock)."""
        if isinstance(event, RawData):
            if self._holds(event.data):
                return
            if self._held:
                event = RawData(data=self._take(event.data))
            stream = self.stream
            if isinstance(stream, trio.SocketStream) and self._request_read():
                await self._write(stream, event.data)
                return
        elif self._held:
            await super().protocol_send(RawData(data=self._take(b"")))
        await super().protocol_send(event)

    async def _write(self, stream: trio.SocketStream, data: bytes) -> None:
        """Hypercorn's write (under the send lock, shielded) with its two scheduling points
        (the lock's and the socket's) left out when the socket takes the bytes at once, as
        it does but for a full send buffer; the rest goes through trio's `send_all`."""
        self.send_lock.acquire_nowait()
        try:
            rest = _write_now(stream, data)
            if rest:
                try:
                    with trio.CancelScope(shield=True):
                        await stream.send_all(rest)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    await self.protocol.handle(Closed())
        finally:
            self.send_lock.release()

    def _request_read(self) -> bool:
        """Whether the request was read whole over HTTP/1.1, no other write under way: the
        write may skip its scheduling points. Not when a refusal answers before the body came: the
        connection closes next, and a client still sending its body would be reset before
        it read the answer unless it gets to run first."""
        protocol = self.protocol.protocol
        return (
            not self.send_lock.locked()
            and isinstance(protocol, H11Protocol)
            and getattr(protocol.connection, "their_state", None) is h11.DONE
        )

    def _holds(self, data: bytes) -> bool:
        protocol = self.protocol.protocol
        if not isinstance(protocol, H11Protocol):
            return False
        if getattr(protocol.connection, "our_state", None) is not h11.SEND_BODY:
            return False  # the response ended (or is no response): write everything now
        if not self._held and not _sized_head(data):
            return False  # a streamed (chunked) response goes out as it comes
        if self._held_bytes + len(data) > HOLD_LIMIT:
            return False
        self._held.append(data)
        self._held_bytes += len(data)
        return True

    def _take(self, last: bytes) -> bytes:
        data = b"".join((*self._held, last))
        self._held.clear()
        self._held_bytes = 0
        return data

    async def _read_data(self) -> None:
        try:
            if self.config.read_timeout is not None:
                await super()._read_data()
                return
            # Hypercorn's loop less its `fail_after(inf)`, a cancel scope per read for no
            # timeout (the service sets none: keep-alive and body timeouts bound a client).
            while True:
                try:
                    data = await self.stream.receive_some(MAX_RECV)
                except (trio.ClosedResourceError, trio.BrokenResourceError):
                    break
                await self.protocol.handle(RawData(bytes(data)))
                if data == b"":
                    break
            await self.protocol.handle(Closed())
        finally:
            self.watch.close()

    async def _idle_timeout(self) -> None:
        idle = self.idle_task
        assert isinstance(idle, _IdleDeadline)
        try:
            with idle.scope:
                await self.context.terminated.wait()
        finally:
            idle.running = False
        if idle.busy:
            return  # a request began as the timer ran out: its end decides (Hypercorn's own)
        with trio.CancelScope(shield=True):
            await self._initiate_server_close()
