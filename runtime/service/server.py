"""Serving: Hypercorn's trio worker in the same trio run as the `Runtime`, so agents and
requests share one event loop; the drain on SIGINT/SIGTERM (stop accepting, let running
turns end or abort them after the grace period, flush, exit) — docs/spec/runtime.md §15.6."""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING

import trio
from attrs import frozen
from hypercorn.config import Config
from starlette.routing import BaseRoute

from ..host.runtime import Runtime
from .access_log import AccessLog
from .app import (
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_MESSAGE_CHARS,
    create_app,
)
from .auth import check_bind
from .connections import ConnectionWrapper, serve_connections
from .idempotency import DEFAULT_TTL_S, IdempotencyKeys
from .profiles import AppConfig
from .schemas import TurnOutcome
from .service import SessionService

if TYPE_CHECKING:
    from .routing import Router

log = logging.getLogger("actorloop.serve")


@frozen
class ServeSettings:
    """How to serve: where to listen, the store, the API token (None: no auth, loopback
    only), the drain's grace period, the body limit, the runtime's dev invariants, whether
    HTTP/2 is on, how long a request body may take to arrive, and the host names a
    tokenless server answers besides the loopback ones, and the largest message."""

    host: str = "127.0.0.1"
    port: int = 8765
    store: str = "sqlite:actorloop.db"
    token: str | None = None
    grace_seconds: float = 10.0
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    dev_invariants: bool = False
    access_log: bool = False
    idempotency_ttl_seconds: float = DEFAULT_TTL_S
    http2: bool = False
    body_timeout_seconds: float = DEFAULT_BODY_TIMEOUT_S
    allowed_hosts: tuple[str, ...] = ()
    max_message_chars: int = DEFAULT_MAX_MESSAGE_CHARS

    @property
    def bind(self) -> str:
        """The address in Hypercorn's bind syntax."""
        host = f"[{self.host}]" if ":" in self.host and not self.host.startswith("[") else self.host
        return f"{host}:{self.port}"


class ServerControl:
    """Ask a running server to drain and stop (`drain`), or to cut the grace period short
    (`force`: running turns are cancelled at once)."""

    def __init__(self) -> None:
        self.drain_requested = trio.Event()
        self._service: SessionService | None = None
        self._forced = False

    def drain(self) -> None:
        """Begin the drain; the server returns once it is done."""
        self.drain_requested.set()

    def force(self) -> None:
        """End the grace period now."""
        self._forced = True
        if self._service is not None:
            self._service.drain.force()

    @property
    def service(self) -> SessionService | None:
        """The service of the running server (None before it started)."""
        return self._service

    def attach(self, service: SessionService) -> None:
        """Wire the service the control acts on (done by `serve`)."""
        self._service = service
        if self._forced:
            service.drain.force()


KEEP_ALIVE_MAX_REQUESTS = 1_000_000
"""Requests one keep-alive connection may carry before the server closes it."""


def hypercorn_config(settings: ServeSettings) -> Config:
    """Hypercorn's configuration: our bind, our error logger, and a graceful timeout past
    the drain's grace period (turns cancelled after it still close and answer). Hypercorn's
    access log stays off: `AccessLog` writes one line per request instead."""
    config = Config()
    config.bind = [settings.bind]
    config.errorlog = logging.getLogger("actorloop.http")
    config.accesslog = None
    config.graceful_timeout = settings.grace_seconds + 10.0
    # Hypercorn's default closes a keep-alive connection after 1,000 requests, which makes
    # a busy client reconnect (a TCP and, behind a proxy, a TLS handshake) every 1,000 sends.
    config.keep_alive_max_requests = KEEP_ALIVE_MAX_REQUESTS
    return config


async def serve(
    settings: ServeSettings,
    app_config: AppConfig,
    control: ServerControl,
    *,
    routes: Sequence[BaseRoute] = (),
    wrap_connection: ConnectionWrapper | None = None,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Open the runtime and the service, listen, and report the URL through `task_status`;
    when `control.drain()` is called, drain and return (the runtime then closes: every
    agent disposed, the store flushed and closed). `routes` are served after the API's;
    `wrap_connection` wraps the handler of every connection (tests inject failures)."""
    check_bind(settings.host, settings.token)
    async with Runtime.open(
        store=settings.store,
        provider=app_config.provider,
        providers=app_config.providers,
        dev_invariants=settings.dev_invariants,
        mcp=app_config.mcp,
    ) as runtime:
        for name, listener in app_config.listeners:
            runtime.on(name, listener)
        keys: IdempotencyKeys[TurnOutcome] = IdempotencyKeys(ttl=settings.idempotency_ttl_seconds)
        async with (
            SessionService.open(runtime, app_config.profiles, keys=keys) as service,
            trio.open_nursery() as nursery,
        ):
            control.attach(service)
            router = await start_routing(service, nursery)
            app = create_app(
                service,
                token=settings.token,
                max_body_bytes=settings.max_body_bytes,
                routes=routes,
                gate=None if router is None else router.gate,
                http2=settings.http2,
                body_timeout_seconds=settings.body_timeout_seconds,
                allowed_hosts=settings.allowed_hosts,
                max_message_chars=settings.max_message_chars,
            )
            binds = await nursery.start(
                partial(
                    serve_connections,
                    AccessLog(app) if settings.access_log else app,
                    hypercorn_config(settings),
                    shutdown_trigger=service.drain.stop_listening.wait,
                    wrap=wrap_connection,
                )
            )
            task_status.started(binds[0])
            await control.drain_requested.wait()
            running = sum(1 for agent in runtime.agents if agent.status == "running")
            log.info("draining: %d running turn(s), grace %.1f s", running, settings.grace_seconds)
            await service.shutdown(settings.grace_seconds)
            if router is not None:
                router.stop()
    log.info("stopped: sessions flushed, store closed")


async def start_routing(service: SessionService, nursery: trio.Nursery) -> Router | None:
    """With a PostgreSQL store (several instances may share it): route between instances
    (runtime/service/routing.py), its task started in `nursery`; None for other stores."""
    # A PostgreSQL store was opened through its module: when that is not loaded, the store
    # is another kind (and psycopg need not be installed).
    module = sys.modules.get("actorloop.runtime.stores.postgres.store")
    store = service.runtime.store
    if module is None or not isinstance(store, module.PostgresStore):
        return None
    from .routing import Router

    router = Router(service, store)
    await nursery.start(router.run)
    service.follow_durable = router.wait_for_head
    log.info("routing between instances as node %s", router.node)
    return router


async def serve_until_signalled(
    settings: ServeSettings,
    app_config: AppConfig,
    *,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """`serve` until SIGINT or SIGTERM (the drain), a second one cutting the grace short."""
    control = ServerControl()
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                async for signum in signals:
                    if not control.drain_requested.is_set():
                        log.info("%s: draining", signal.Signals(signum).name)
                        control.drain()
                    else:
                        log.warning(
                            "%s again: cancelling running turns now", signal.Signals(signum).name
                        )
                        control.force()

            async def run(task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
                await serve(settings, app_config, control, task_status=task_status)
                nursery.cancel_scope.cancel()

            nursery.start_soon(watch)
            task_status.started(await nursery.start(run))
