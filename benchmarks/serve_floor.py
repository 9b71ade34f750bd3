"""The service benchmark's HTTP floor: a bare Starlette app (`GET /healthz`, a small JSON
answer) behind six pass-through ASGI middlewares (what `actorloop serve` had before
decision 0021), served by stock Hypercorn's trio worker or by uvicorn, in its own process.

    python -m benchmarks.serve_floor hypercorn|uvicorn

Prints `listening on http://127.0.0.1:PORT` once serving; runs until it is terminated.
"""

from __future__ import annotations

import signal
import socket
import sys
from functools import partial

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

MIDDLEWARES = 6
"""The ASGI layers the service had in front of its Starlette app with a token set (HTTP/2
policy, nosniff, cross-site guard, drain gate, bearer auth, body limit) until decision 0021
made them one: kept at six so the floor compares with the runs before it."""


class PassThrough:
    """A pure ASGI middleware that only calls through (what a layer costs at the least)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


async def health(_request: Request) -> Response:
    return Response(
        b'{"status":"ok","live_agents":0,"open_streams":0}', media_type="application/json"
    )


def floor_app() -> ASGIApp:
    """The bare app behind `MIDDLEWARES` pass-through layers."""
    app: ASGIApp = Starlette(routes=[Route("/healthz", health)])
    for _ in range(MIDDLEWARES):
        app = PassThrough(app)
    return app


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def serve_hypercorn(port: int) -> None:
    import trio
    from hypercorn.config import Config
    from hypercorn.trio import serve

    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.accesslog = None
    config.keep_alive_max_requests = 1_000_000

    async def run() -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:

            async def stop() -> None:
                async for _ in signals:
                    return

            async with trio.open_nursery() as nursery:
                await nursery.start(partial(serve, floor_app(), config, shutdown_trigger=stop))  # type: ignore[arg-type]
                print(f"listening on http://127.0.0.1:{port}", flush=True)

    trio.run(run)


def serve_uvicorn(port: int) -> None:
    import uvicorn

    config = uvicorn.Config(
        floor_app(), host="127.0.0.1", port=port, log_level="warning", lifespan="off"
    )
    server = uvicorn.Server(config)
    sock = config.bind_socket()
    sock.listen(config.backlog)  # bound is not listening: a client could come too early
    print(f"listening on http://127.0.0.1:{port}", flush=True)
    server.run(sockets=[sock])


def main() -> None:
    kind = sys.argv[1] if len(sys.argv) > 1 else "hypercorn"
    port = free_port()
    {"hypercorn": serve_hypercorn, "uvicorn": serve_uvicorn}[kind](port)


if __name__ == "__main__":
    main()
