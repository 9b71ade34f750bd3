"""What every `actorloop` command shares (and `serve`/`inspect` borrow): the store option and
its checks, one-line failures with their exit codes, running a coroutine under trio, and the
provider a spec names. No click command lives here, and only click and the standard library
load with it: the rest is imported when a command runs, so `actorloop --help` starts fast."""

from __future__ import annotations

import contextlib
import sqlite3
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

if TYPE_CHECKING:
    from rich.console import Console

    from ..providers.base import Provider
    from ..stores.base import Store

DEFAULT_STORE = "sqlite:actorloop.db"
STORE_ENV = "ACTORLOOP_STORE"
EXIT_BAD_INPUT = 2
EXIT_VERIFY_FAILED = 1

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


def console(*, stderr: bool = False) -> Console:
    """A rich console on the current stdout (or stderr), as wide as `COLUMNS` says now: made
    per use, so what runs a command in-process (click's test runner) sees its own streams."""
    from rich.console import Console

    return Console(stderr=stderr)


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    """Print `actorloop: message` as one line on stderr and exit with `code`."""
    console(stderr=True).print(
        f"actorloop: {message}", markup=False, highlight=False, soft_wrap=True
    )
    sys.exit(code)


def store_option() -> Callable[[F], F]:
    """The `--store URL` option (also read from ACTORLOOP_STORE)."""
    return click.option(
        "--store",
        "store_url",
        default=DEFAULT_STORE,
        envvar=STORE_ENV,
        metavar="URL",
        show_default=True,
        show_envvar=True,
        help="Store URL.",
    )


def store_hint(store_url: str) -> str:
    """The `--store URL` a follow-up command needs to reach the same store ("" for the
    default one)."""
    return "" if store_url == DEFAULT_STORE else f" --store {store_url}"


def check_location(url: str, *, must_exist: bool) -> None:
    """Refuse, before anything is opened or written, a store location that is missing (for
    read commands) or that holds something other than an actorloop store."""
    scheme, _, rest = url.partition(":")
    location = Path(rest.partition("?")[0])
    if scheme == "memory" and must_exist:
        fail("the memory: store does not outlive a process; pass --store sqlite:PATH or jsonl:DIR")
    if scheme not in ("sqlite", "jsonl") or not rest:
        return
    if not location.exists():
        if must_exist:
            fail(f"no store at '{location}' ({url}); run `actorloop run` first or pass --store")
        return
    if scheme == "jsonl" and not location.is_dir():
        fail(f"'{location}' is not a directory; a jsonl: store is a directory of sessions")
    if scheme == "sqlite":
        problem = _sqlite_store_problem(location, must_exist=must_exist)
        if problem is not None:
            fail(f"'{location}' {problem}; pass another --store")


STORE_COLUMNS = {
    "sessions": {"id", "meta", "parent", "seed_length", "version"},
    "events": {"session_id", "seq", "type", "time", "body"},
}


def _sqlite_store_problem(path: Path, *, must_exist: bool) -> str | None:
    """Why `path` cannot be used as an actorloop SQLite store (read-only look; None if ok)."""
    if path.is_dir():
        return "is a directory, not an SQLite database file"
    if path.stat().st_size == 0:
        # An empty file is where `run` may start a store; there is nothing in it to read.
        return "is empty, not an actorloop store" if must_exist else None
    try:
        uri = f"{path.resolve().as_uri()}?mode=ro"
        with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
            columns = {
                table: {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
                for table in STORE_COLUMNS
            }
    except sqlite3.DatabaseError as exc:
        return f"is not an SQLite database ({exc})"
    if any(not expected <= columns[table] for table, expected in STORE_COLUMNS.items()):
        return "is an SQLite database but not an actorloop store"
    return None


def open_checked_store(url: str, *, must_exist: bool) -> Store:
    """Open the store at `url` once its location passed `check_location` (read commands
    pass `must_exist=True`: they never create one)."""
    from ..errors import StoreUrlError
    from ..stores.urls import open_store

    check_location(url, must_exist=must_exist)
    try:
        return open_store(url)
    except StoreUrlError as exc:
        fail(f"{exc}")


def run_async(function: Callable[[], Awaitable[T]], *, store_url: str = DEFAULT_STORE) -> T:
    """Run `function` under trio; typed errors become one line and exit 2 (a failed
    verification exits 1). A hint naming another command keeps `store_url`."""
    import trio

    from ..errors import ActorloopError, SessionIdAmbiguous, SessionNotFound, sole_error
    from ..log.verify import VerificationFailed
    from .rates_cache import cached_rates

    store = store_hint(store_url)
    try:
        with cached_rates():
            return trio.run(function)
    except BaseExceptionGroup as group:
        leaf = sole_error(group)
        if isinstance(leaf, ActorloopError):
            fail(error_line(leaf))
        raise
    except VerificationFailed as exc:
        fail(f"verification failed: {exc}", EXIT_VERIFY_FAILED)
    except SessionNotFound as exc:
        fail(f"{exc}; list sessions with `actorloop sessions list{store}`")
    except SessionIdAmbiguous as exc:
        fail(f"{exc}; give more of it (`actorloop sessions list{store} --ids` prints whole ids)")
    except ActorloopError as exc:
        fail(error_line(exc))


def error_line(error: Exception) -> str:
    """`Type (CODE): message` (the code when the error has one; messages do not repeat it)."""
    code = getattr(error, "code", None)
    return f"{type(error).__name__}{f' ({code})' if code else ''}: {error}"


def provider_for(
    spec: str, base_url: str | None, latency_ms: float, window: int | None
) -> tuple[Provider, str | None]:
    """The provider `spec` names (`sim` is the workloads' simulator) and the model it names
    (None when it names none); a bad spec exits 2."""
    from ..errors import ActorloopError

    if spec == "sim":
        from .orchestration import make_sim

        return make_sim(latency_ms, window), None
    from ..providers.registry import provider_from_spec

    try:
        return provider_from_spec(spec, base_url=base_url)
    except ActorloopError as exc:
        fail(str(exc))
