"""`actorloop inspect`: the session inspector over a store, as a loopback-only server that
prints its URL. Only click is imported here; the server loads when the command runs."""

from __future__ import annotations

import sys
from functools import partial

import click

DEFAULT_PORT = 8766
DEFAULT_STORE = "sqlite:actorloop.db"


@click.command()
@click.option("--store", "store_url", default=DEFAULT_STORE, show_default=True, help="Store URL.")
@click.option(
    "--port",
    default=DEFAULT_PORT,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port on 127.0.0.1 (0 picks a free one).",
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="NAME",
    help="Answer this Host name too, besides 127.0.0.1, [::1] and localhost (repeatable), "
    "as `serve --allowed-host` does.",
)
def inspect(store_url: str, port: int, allowed_hosts: tuple[str, ...]) -> None:
    """Open the session inspector on an existing store, on 127.0.0.1 until SIGINT/SIGTERM.

    The same server as `actorloop serve --host 127.0.0.1` (no API token, whatever
    ACTORLOOP_API_TOKEN says), with the simulator behind the default profile, so turns sent
    through its API show up live. See docs/inspector.md.
    """
    try:
        from ..server import ServeSettings, serve_until_signalled
    except ImportError as exc:
        raise click.ClickException(
            f"`actorloop inspect` needs the serve extra (pip install 'actorloop[serve]'): {exc}"
        ) from exc
    from ...cli.common import check_location, fail, provider_for, run_async
    from ...errors import sole_error
    from ..profiles import AppConfig, add_default_profile

    check_location(store_url, must_exist=True)
    settings = ServeSettings(
        host="127.0.0.1", port=port, store=store_url, token=None, allowed_hosts=allowed_hosts
    )
    provider, model = provider_for("sim", None, 2.0, None)
    app_config = AppConfig(provider=provider, model=model, store_url=store_url)
    add_default_profile(app_config)

    async def ready_then_wait() -> None:
        import trio

        async with trio.open_nursery() as nursery:
            url = await nursery.start(partial(serve_until_signalled, settings, app_config))
            click.echo(f"actorloop inspect: {url}/ (store {store_url}; Ctrl-C stops it)")
            sys.stdout.flush()

    try:
        run_async(ready_then_wait)
    except BaseException as exc:
        leaf = sole_error(exc)
        if isinstance(leaf, OSError):
            fail(f"cannot listen on {settings.bind}: {leaf.strerror or leaf}")
        raise
