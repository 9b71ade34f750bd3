"""The `actorloop` command line: `run` a workload, and inspect, verify, fork or resume
stored sessions. Bad input exits 2 with one line saying what is wrong; nothing is written."""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click
import orjson
import trio
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from actorloop.codecs.converter import event_to_dict
from actorloop.codecs.rows import meta_to_dict
from actorloop.runtime.errors import ActorloopError, SessionNotFound, sole_error
from actorloop.runtime.options import AgentOptions
from actorloop.runtime.orchestration import RunReport, make_sim, run_workload
from actorloop.runtime.providers.base import Provider
from actorloop.runtime.providers.registry import provider_from_spec
from actorloop.runtime.runtime import Runtime
from actorloop.runtime.service.command import serve as serve_command
from actorloop.runtime.stored import fork_point, load_session
from actorloop.runtime.stores.base import Store, StoreUrlError, open_store
from actorloop.runtime.verify import VerificationFailed, verify_log
from actorloop.runtime.workload import Workload, WorkloadError, load_workload

DEFAULT_STORE = "sqlite:actorloop.db"
DEFAULT_WORKLOAD = Path("examples/demo.toml")
EXIT_BAD_INPUT = 2
EXIT_VERIFY_FAILED = 1

T = TypeVar("T")
console = Console()
errors = Console(stderr=True)


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    errors.print(f"actorloop: {message}", markup=False, highlight=False, soft_wrap=True)
    sys.exit(code)


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


def existing_store(url: str) -> Store:
    """Open a store that must already exist (read commands never create one)."""
    check_location(url, must_exist=True)
    try:
        return open_store(url)
    except StoreUrlError as exc:
        fail(f"{exc}")


def run_async(function: Callable[[], Awaitable[T]]) -> T:
    """Run `function` under trio; typed errors become one line and exit 2."""
    try:
        return trio.run(function)
    except BaseExceptionGroup as group:
        leaf = sole_error(group)
        if isinstance(leaf, ActorloopError):
            fail(f"{type(leaf).__name__}: {leaf}")
        raise
    except VerificationFailed as exc:
        fail(f"verification failed: {exc}", EXIT_VERIFY_FAILED)
    except SessionNotFound as exc:
        fail(f"{exc}; list sessions with `actorloop sessions list`")
    except ActorloopError as exc:
        fail(f"{type(exc).__name__}: {exc}")


def provider_for(
    spec: str, base_url: str | None, latency_ms: float, window: int | None
) -> tuple[Provider, str | None]:
    if spec == "sim":
        return make_sim(latency_ms, window), None
    try:
        return provider_from_spec(spec, base_url=base_url)
    except ActorloopError as exc:
        fail(str(exc))


@click.group()
@click.version_option(package_name="actorloop")
def main() -> None:
    """actorloop: agent loops whose every request is a pure function of the session log."""
    logging.basicConfig(level=logging.WARNING, format="actorloop: %(levelname)s %(message)s")


main.add_command(serve_command)


@main.command()
@click.argument("workload", required=False, type=click.Path(path_type=Path))
@click.option("--store", "store_url", default=DEFAULT_STORE, show_default=True, help="Store URL.")
@click.option(
    "--provider",
    "provider_spec",
    default="sim",
    show_default=True,
    help="sim, openai:MODEL, anthropic:MODEL or deepseek:MODEL.",
)
@click.option("--base-url", default=None, help="Override the provider's base URL.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def run(
    workload: Path | None, store_url: str, provider_spec: str, base_url: str | None, as_json: bool
) -> None:
    """Run a multi-agent workload (default: examples/demo.toml) and report on it."""
    path = workload or DEFAULT_WORKLOAD
    if workload is None and not path.exists():
        fail(f"no workload given and {DEFAULT_WORKLOAD} not found; pass a workload file")
    try:
        spec = load_workload(path)
    except WorkloadError as exc:
        fail(str(exc))
    provider, model = provider_for(provider_spec, base_url, spec.latency_ms, spec.context_window)
    check_location(store_url, must_exist=False)
    try:
        store = open_store(store_url)
    except StoreUrlError as exc:
        fail(str(exc))
    report = _run_with_progress(spec, store, provider, model, quiet=as_json)
    if as_json:
        console.print_json(orjson.dumps(_report_dict(report)).decode())
    else:
        _print_report(report)


def _planned_turns(spec: Workload) -> int:
    workers = spec.workers
    return (
        len(spec.coordinator.tasks)
        + workers.count * workers.turns
        + min(workers.fork, workers.count)
        + min(workers.cancel, workers.count)
        + min(workers.resume, workers.count)
    )


def _run_with_progress(
    spec: Workload, store: Store, provider: Provider, model: str | None, *, quiet: bool
) -> RunReport:
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=errors, disable=quiet or not errors.is_terminal) as bar:
        task = bar.add_task(f"running {spec.name}", total=_planned_turns(spec))

        def advance(_what: str) -> None:
            bar.advance(task)

        async def go() -> RunReport:
            return await run_workload(spec, store, provider, model=model, progress=advance)

        return run_async(go)


def _report_dict(report: RunReport) -> dict[str, Any]:
    return {
        "workload": report.workload,
        "run_id": report.run_id,
        "store": report.store,
        "sessions": report.sessions,
        "turns": report.turns,
        "turn_reasons": dict(report.turn_reasons),
        "requests": report.requests,
        "cache_hit_rate": round(report.cache_hit_rate, 4),
        "compactions": report.compactions,
        "invariant_checks_passed": report.invariant_checks,
        "verified_sessions": report.verified_sessions,
        "step_overhead_p50_ms": round(report.step_overhead_p50_ms, 3),
        "step_overhead_p99_ms": round(report.step_overhead_p99_ms, 3),
        "wall_seconds": round(report.wall_seconds, 3),
    }


def _print_report(report: RunReport) -> None:
    table = Table(title=f"actorloop run: {report.workload} ({report.run_id})", show_header=False)
    table.add_column("metric", style="bold")
    table.add_column("value", justify="right")
    reasons = ", ".join(f"{k} {v}" for k, v in sorted(report.turn_reasons.items()))
    rows = [
        ("store", report.store),
        ("sessions", str(report.sessions)),
        ("turns", f"{report.turns} ({reasons})"),
        ("requests", str(report.requests)),
        ("cache hit rate", f"{report.cache_hit_rate:.1%}"),
        ("compactions", str(report.compactions)),
        ("invariant checks passed", str(report.invariant_checks)),
        ("sessions verified", f"{report.verified_sessions}/{report.sessions}"),
        ("step overhead p50", f"{report.step_overhead_p50_ms:.2f} ms"),
        ("step overhead p99", f"{report.step_overhead_p99_ms:.2f} ms"),
        ("wall time", f"{report.wall_seconds:.2f} s"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    console.print(table)


@main.group()
@click.option("--store", "store_url", default=DEFAULT_STORE, show_default=True, help="Store URL.")
@click.pass_context
def sessions(ctx: click.Context, store_url: str) -> None:
    """Inspect, verify, fork and resume stored sessions."""
    ctx.obj = store_url


@sessions.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.pass_obj
def list_sessions(store_url: str, as_json: bool) -> None:
    """One line per stored session."""
    store = existing_store(store_url)

    async def go() -> None:
        try:
            metas = await store.list()
        finally:
            await store.close()
        if as_json:
            for meta in metas:
                sys.stdout.buffer.write(orjson.dumps(meta_to_dict(meta)) + b"\n")
            sys.stdout.flush()
            return
        table = Table("id", "parent", "seed", "created")
        table.columns[0].overflow = "fold"
        table.columns[1].overflow = "fold"
        for meta in metas:
            table.add_row(
                meta.id,
                meta.parent_session or "",
                str(meta.seed_length or ""),
                str(meta.created_at),
            )
        console.print(table)

    run_async(go)


@sessions.command()
@click.argument("session_id")
@click.pass_obj
def show(store_url: str, session_id: str) -> None:
    """The derived conversation of a session (what the model would see, without the prefix)."""
    store = existing_store(store_url)

    async def go() -> None:
        try:
            session = await load_session(store, session_id)
        finally:
            await store.close()
        header = session.header()
        console.print(f"[bold]{session_id}[/] — {len(session)} events, {session.last_turn} turns")
        if header is not None and header.message_prefix:
            console.print(f"session prefix: {len(header.message_prefix)} message(s)")
        for message in session.derive_messages():
            text = message.text or ", ".join(type(b).__name__ for b in message.content)
            console.print(f"[cyan]{message.role}[/]: {text}", markup=True, highlight=False)

    run_async(go)


@sessions.command()
@click.argument("session_id")
@click.pass_obj
def events(store_url: str, session_id: str) -> None:
    """Every event of a session as one JSON object per line."""
    store = existing_store(store_url)

    async def go() -> None:
        try:
            session = await load_session(store, session_id)
        finally:
            await store.close()
        out = sys.stdout.buffer
        for event in session.events:
            out.write(orjson.dumps(event_to_dict(event)) + b"\n")
        out.flush()

    run_async(go)


@sessions.command()
@click.argument("session_id")
@click.pass_obj
def verify(store_url: str, session_id: str) -> None:
    """Rebuild every request from the log and check it against its recorded digest."""
    store = existing_store(store_url)

    async def go() -> None:
        try:
            session = await load_session(store, session_id)
        finally:
            await store.close()
        report = verify_log(session.meta, session.events)
        click.echo(
            f"ok: {session_id}: {report.events} events, {report.turns} turns, "
            f"{report.requests_checked} requests rebuilt and matched their digests"
        )

    run_async(go)


@sessions.command()
@click.argument("session_id")
@click.option("--at", "boundary", type=int, default=None, help="A turn/end seq (default: last).")
@click.option("--child", "child_id", default=None, help="The child's session id.")
@click.pass_obj
def fork(store_url: str, session_id: str, boundary: int | None, child_id: str | None) -> None:
    """Fork a stored session at a turn/end (O(1): the child points at its parent)."""
    store = existing_store(store_url)

    async def go() -> None:
        try:
            point = await fork_point(store, session_id, boundary, child_id)
            await store.fork(session_id, point.boundary, point.child_id)
        finally:
            await store.close()
        click.echo(f"forked {session_id} at seq {point.boundary}: {point.child_id}")

    run_async(go)


@sessions.command()
@click.argument("session_id")
@click.option("--message", default="Continue.", show_default=True, help="The next user message.")
@click.option("--model", default="sim-1", show_default=True)
@click.option("--provider", "provider_spec", default="sim", show_default=True)
@click.option("--base-url", default=None)
@click.pass_obj
def resume(
    store_url: str,
    session_id: str,
    message: str,
    model: str,
    provider_spec: str,
    base_url: str | None,
) -> None:
    """Resume a stored session in a new loop instance and run one turn."""
    store = existing_store(store_url)
    provider, spec_model = provider_for(provider_spec, base_url, 0.0, None)

    async def go() -> None:
        if not await store.exists(session_id):
            await store.close()
            raise SessionNotFound(session_id)
        async with Runtime.open(store=store, provider=provider, dev_invariants=True) as rt:
            agent = await rt.resume(session_id, AgentOptions(model=spec_model or model))
            result = await agent.send(message)
            answer = agent.session.derive_messages()[-1].text
        click.echo(f"turn {result.turn} {result.reason}: {answer}")

    run_async(go)


if __name__ == "__main__":  # pragma: no cover - `python -m actorloop.runtime.cli`
    main(prog_name=os.path.basename(sys.argv[0]) or "actorloop")

