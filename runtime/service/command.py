"""`actorloop serve`: the command line of the HTTP service. Only click is imported here; the
server (Hypercorn, Starlette) loads when the command runs, so `actorloop` works without the
`serve` extra installed."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..cli.common import check_location, fail, provider_for, run_async

if TYPE_CHECKING:
    from ..providers.base import Provider
    from .profiles import AppConfig

DEFAULT_STORE = "sqlite:actorloop.db"
"""The CLI's default store (the same as `actorloop run`)."""


@click.command()
@click.option(
    "--app",
    "app_spec",
    default=None,
    metavar="MODULE:FUNC",
    help="A setup(app_config) function that registers agent profiles.",
)
@click.option(
    "--profiles",
    "profile_files",
    multiple=True,
    type=click.Path(path_type=Path),
    help="A TOML file with [profiles.NAME] tables (repeatable).",
)
@click.option("--store", "store_url", default=DEFAULT_STORE, show_default=True, help="Store URL.")
@click.option(
    "--provider",
    "provider_spec",
    default="sim",
    show_default=True,
    help="sim, openai:MODEL, anthropic:MODEL or deepseek:MODEL.",
)
@click.option("--base-url", default=None, help="Override the provider's base URL.")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--grace",
    "grace_seconds",
    default=10.0,
    show_default=True,
    type=click.FloatRange(0, 3600),
    help="Seconds running turns get to end when draining, before they are aborted.",
)
@click.option(
    "--max-body-bytes",
    default=1024 * 1024,
    show_default=True,
    type=click.IntRange(1, 1 << 30),
    help="Larger request bodies get 413.",
)
@click.option(
    "--max-message-chars",
    default=256 * 1024,
    show_default=True,
    type=click.IntRange(1, 1 << 30),
    help="Larger messages (send, steer, inject) get 413 MESSAGE_TOO_LARGE.",
)
@click.option(
    "--body-timeout",
    "body_timeout_seconds",
    default=30.0,
    show_default=True,
    type=click.FloatRange(0.1, 3600),
    help="Seconds a request body may take to arrive before 408.",
)
@click.option(
    "--sim-latency-ms",
    default=2.0,
    show_default=True,
    type=click.FloatRange(0, 600_000),
    help="The simulator's latency per model call.",
)
@click.option(
    "--idempotency-ttl",
    "idempotency_ttl_seconds",
    default=24 * 3600.0,
    show_default=True,
    type=click.FloatRange(1, 366 * 24 * 3600),
    help="Seconds an idempotency key is kept after its outcome (docs/serve.md §5.1).",
)
@click.option("--dev-invariants", is_flag=True, help="Check every request against the log.")
@click.option("--access-log", is_flag=True, help="Log one line per request.")
@click.option(
    "--http2",
    is_flag=True,
    help="Serve HTTP/2 (prior knowledge or h2c upgrade) too; off: HTTP/2 requests get 505.",
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="NAME",
    help="Without a token, answer this Host name too, besides 127.0.0.1, [::1] and "
    "localhost (repeatable).",
)
# Over 80 lines: click hands every option in as a parameter, and the signature is a quarter
# of it; the body is one straight line of set-up.
def serve(
    app_spec: str | None,
    profile_files: tuple[Path, ...],
    store_url: str,
    provider_spec: str,
    base_url: str | None,
    host: str,
    port: int,
    grace_seconds: float,
    max_body_bytes: int,
    max_message_chars: int,
    body_timeout_seconds: float,
    sim_latency_ms: float,
    idempotency_ttl_seconds: float,
    dev_invariants: bool,
    access_log: bool,
    http2: bool,
    allowed_hosts: tuple[str, ...],
) -> None:
    """Serve the runtime over HTTP (JSON + Server-Sent Events) until SIGINT/SIGTERM.

    Set ACTORLOOP_API_TOKEN to require `Authorization: Bearer <token>` on /v1 routes
    (needed to bind a non-loopback host). See docs/serve.md.
    """
    try:
        from .server import ServeSettings, serve_until_signalled
    except ImportError as exc:
        raise click.ClickException(
            f"`actorloop serve` needs the serve extra (pip install 'actorloop[serve]'): {exc}"
        ) from exc
    from ..errors import sole_error
    from .auth import TOKEN_ENV, check_bind

    for name in ("actorloop.serve", "actorloop.service", "actorloop.http.access"):
        logging.getLogger(name).setLevel(logging.INFO)
    token = os.environ.get(TOKEN_ENV) or None
    settings = ServeSettings(
        host=host,
        port=port,
        store=store_url,
        token=token,
        grace_seconds=grace_seconds,
        max_body_bytes=max_body_bytes,
        max_message_chars=max_message_chars,
        body_timeout_seconds=body_timeout_seconds,
        dev_invariants=dev_invariants,
        idempotency_ttl_seconds=idempotency_ttl_seconds,
        access_log=access_log,
        http2=http2,
        allowed_hosts=allowed_hosts,
    )
    provider, model = provider_for(provider_spec, base_url, sim_latency_ms, None)
    check_bind_or_fail = partial(check_bind, host, token)
    app_config = _app_config(
        provider, model, store_url, app_spec, profile_files, check_bind_or_fail
    )
    check_location(store_url, must_exist=False)

    async def ready_then_wait() -> None:
        import gc

        import trio

        async with trio.open_nursery() as nursery:
            url = await nursery.start(partial(serve_until_signalled, settings, app_config))
            # What the server built to get here (modules, classes, the app, the runtime)
            # lives as long as this process: frozen, no full collection walks it again
            # (each walked ~100,000 objects, tens of ms, once every few hundred turns).
            gc.freeze()
            names = ", ".join(profile.name for profile in app_config.profiles)
            click.echo(f"actorloop serve: listening on {url} (store {store_url}; profiles {names})")
            sys.stdout.flush()

    try:
        run_async(ready_then_wait)
    except BaseException as exc:
        leaf = sole_error(exc)
        if isinstance(leaf, OSError):
            fail(f"cannot listen on {settings.bind}: {leaf.strerror or leaf}")
        raise


def _app_config(
    provider: Provider,
    model: str | None,
    store_url: str,
    app_spec: str | None,
    profile_files: tuple[Path, ...],
    check_bind: Callable[[], None],
) -> AppConfig:
    """The app configuration `serve` runs: the `--app` setup and the profile files, or the
    default profile; a refusal (a non-loopback bind without a token, a bad file) exits 2."""
    from ..errors import ActorloopError
    from .profiles import AppConfig, add_default_profile, add_toml_profiles, run_setup

    try:
        check_bind()
        app_config = AppConfig(provider=provider, model=model, store_url=store_url)
        if app_spec is not None:
            if os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())  # `--app mymodule:setup` from where it runs
            run_setup(app_spec, app_config)
        for path in profile_files:
            add_toml_profiles(path, app_config)
        if app_spec is None and not profile_files:
            add_default_profile(app_config)
    except ActorloopError as exc:
        fail(str(exc))
    return app_config
