"""Connections: Hypercorn's per-connection protocol servers run under the service's own
accept loop, so a failure inside one connection (a protocol library's bug, a broken peer)
closes that connection alone, is logged once, and never reaches the runtime."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import partial

import trio
from hypercorn.config import Config
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.utils import repr_socket_addr, wrap_app
from starlette.types import ASGIApp

from ..errors import sole_error
from .protocol_server import ServiceConnection

log = logging.getLogger("actorloop.http")

ConnectionHandler = Callable[[trio.SocketStream], Awaitable[None]]
"""Serves one accepted connection until it closes."""

ConnectionWrapper = Callable[[ConnectionHandler], ConnectionHandler]
"""Wraps the handler of every connection (what a test injects to make one fail)."""


def hypercorn_connection(app: ASGIApp, config: Config, context: WorkerContext) -> ConnectionHandler:
    """Hypercorn's protocol server (HTTP/1.1, and HTTP/2 when the client asks) for one
    connection, serving `app` (`ServiceConnection`)."""
    wrapped = wrap_app(app, config.wsgi_max_body_size, "asgi")  # type: ignore[arg-type]

    async def serve_connection(stream: trio.SocketStream) -> None:
        await ServiceConnection(wrapped, config, context, stream)

    return serve_connection


def contained(handler: ConnectionHandler) -> ConnectionHandler:
    """`handler` with its failures kept to its connection: logged once (with the peer and
    the traceback), the socket closed; cancellation still goes through."""

    async def serve_contained(stream: trio.SocketStream) -> None:
        peer = _peer(stream)
        try:
            await handler(stream)
        except* Exception as group:
            error = sole_error(group)
            log.error(
                "connection from %s failed and was closed (%s); the server goes on",
                peer,
                type(error).__name__,
                exc_info=error,
            )
        finally:
            await trio.aclose_forcefully(stream)

    return serve_contained


def _peer(stream: trio.SocketStream) -> str:
    try:
        host, port, *_ = stream.socket.getpeername()
    except (OSError, ValueError):
        return "an unknown peer"
    return f"{host}:{port}"


async def serve_connections(
    app: ASGIApp,
    config: Config,
    *,
    shutdown_trigger: Callable[[], Awaitable[object]],
    wrap: ConnectionWrapper | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Listen on `config.bind`, serve every connection (each one `contained`), report the
    URLs through `task_status`; once `shutdown_trigger` returns, stop accepting and give
    open connections `config.graceful_timeout` to finish. No ASGI lifespan: the runtime's
    own scope opens and closes what the app uses."""
    context = WorkerContext(None)
    handler = hypercorn_connection(app, config, context)
    handler = contained(handler if wrap is None else wrap(handler))
    sockets = config.create_sockets()
    listeners: list[trio.SocketListener] = []
    urls: list[str] = []
    for sock in sockets.insecure_sockets:
        sock.listen(config.backlog)
        listeners.append(trio.SocketListener(trio.socket.from_stdlib_socket(sock)))
        urls.append(f"http://{repr_socket_addr(sock.family, sock.getsockname())}")
    async with trio.open_nursery() as connections:
        async with trio.open_nursery() as accepting:
            accepting.start_soon(
                partial(trio.serve_listeners, handler, listeners, handler_nursery=connections)
            )
            task_status.started(urls)
            await shutdown_trigger()
            accepting.cancel_scope.cancel()
        await context.terminated.set()
        connections.cancel_scope.deadline = trio.current_time() + config.graceful_timeout
