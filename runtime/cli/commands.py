"""The `actorloop` command line: `run` a workload (packaged or a TOML file), list the
packaged workloads, and list, show, verify, fork or resume stored sessions. Read commands
never write; bad input exits 2 with one line saying what is wrong; nothing is written."""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click
import orjson
import trio
from attrs import frozen
from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from ...codecs.converter import event_to_dict, unstructure
from ...codecs.rows import meta_to_dict
from ..control.options import AgentOptions
from ..errors import (
    ActorloopError,
    InvalidSessionId,
    SessionIdAmbiguous,
    SessionNotFound,
    sole_error,
)
from ..host.runtime import Runtime
from ..log.load import fork_point, load_session
from ..log.session import Session
from ..log.summary import SessionSummary, summarize
from ..log.usage import UsageTotals, turn_usage
from ..log.verify import VerificationFailed, verify_log
from ..model.chunks import TokenUsage
from ..model.meta import DamagedSession, SessionMeta
from ..providers.base import Provider
from ..providers.registry import provider_from_spec
from ..service.command import serve as serve_command
from ..service.inspector.command import inspect as inspect_command
from ..stores.base import Store, StoreUrlError, open_store
from .orchestration import RunReport, make_sim, run_workload
from .render import (
    NO_VALUE,
    ago,
    expand,
    iso_utc,
    message_lines,
    percent,
    plural,
    shorten_ids,
    timeline,
    timestamp,
    tokens,
    usage_text,
)
from .workload import (
    DEFAULT_WORKLOAD,
    Workload,
    WorkloadError,
    find_workload,
    packaged_workload_text,
    packaged_workloads,
)

DEFAULT_STORE = "sqlite:actorloop.db"
EXIT_BAD_INPUT = 2
EXIT_VERIFY_FAILED = 1
MIN_ID_WIDTH = 12

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
    except SessionIdAmbiguous as exc:
        fail(f"{exc}; give more of it (`actorloop sessions list --ids` prints whole ids)")
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
main.add_command(inspect_command)


# ---------------------------------------------------------------------- JSON shapes


def token_usage_dict(usage: TokenUsage) -> dict[str, int]:
    return {
        "input": usage.input,
        "output": usage.output,
        "cache_read": usage.cache_read,
        "cache_write": usage.cache_write,
        "reasoning": usage.reasoning,
        "billed_input": usage.prompt_total,
    }


def usage_dict(usage: UsageTotals) -> dict[str, Any]:
    fraction = usage.cached_fraction
    return {
        "model": token_usage_dict(usage.model),
        "compaction": token_usage_dict(usage.compaction),
        "total": token_usage_dict(usage.total),
        "model_calls": usage.model_calls,
        "compaction_calls": usage.compaction_calls,
        "unreported": usage.unreported,
        "cached_fraction": None if fraction is None else round(fraction, 4),
    }


def summary_dict(meta: SessionMeta, summary: SessionSummary) -> dict[str, Any]:
    return {
        **meta_to_dict(meta),
        "labels": unstructure(meta.labels),
        "damaged": False,
        "kind": summary.kind,
        "status": summary.status,
        "parent": summary.parent,
        "parent_call": summary.parent_call,
        "fork_seq": summary.fork_seq,
        "created": iso_utc(summary.created_at),
        "last_event_at": summary.last_event_at,
        "last_event": None if summary.last_event_at is None else iso_utc(summary.last_event_at),
        "events": summary.events,
        "turns": summary.turns,
        "open_turn": summary.open_turn,
        "usage": usage_dict(summary.usage),
    }


def damaged_dict(session_id: str, problem: str) -> dict[str, Any]:
    return {"id": session_id, "damaged": True, "status": "damaged", "problem": problem}


def write_json_lines(objects: Sequence[dict[str, Any]]) -> None:
    out = sys.stdout.buffer
    for value in objects:
        out.write(orjson.dumps(value) + b"\n")
    out.flush()


# ---------------------------------------------------------------------- run


@main.command()
@click.argument("workload", required=False)
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
    workload: str | None, store_url: str, provider_spec: str, base_url: str | None, as_json: bool
) -> None:
    """Run a multi-agent workload and report on it.

    WORKLOAD is a TOML file, or the name of a packaged workload (`actorloop workloads`
    lists them); without it the packaged `demo` runs.
    """
    try:
        spec = find_workload(workload)
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
        _print_report(report, store_url)


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
    fraction = report.usage.cached_fraction
    return {
        "workload": report.workload,
        "run_id": report.run_id,
        "store": report.store,
        "sessions": report.sessions,
        "turns": report.turns,
        "turn_reasons": dict(report.turn_reasons),
        "requests": report.requests,
        "usage": usage_dict(report.usage),
        "cached_fraction": None if fraction is None else round(fraction, 4),
        "compactions": report.compactions,
        "invariant_checks_passed": report.invariant_checks,
        "verified_sessions": report.verified_sessions,
        "step_overhead_p50_ms": round(report.step_overhead_p50_ms, 3),
        "step_overhead_p99_ms": round(report.step_overhead_p99_ms, 3),
        "wall_seconds": round(report.wall_seconds, 3),
        "session_usage": {sid: usage_dict(usage) for sid, usage in report.session_usage.items()},
    }


def _print_report(report: RunReport, store_url: str) -> None:
    table = Table(title=f"actorloop run: {report.workload} ({report.run_id})", show_header=False)
    table.add_column("metric", style="bold")
    table.add_column("value", justify="right")
    reasons = ", ".join(f"{v} {k}" for k, v in sorted(report.turn_reasons.items()))
    usage, total = report.usage, report.usage.total
    cached = (
        f" ({_report_percent(usage.cached_fraction)} cached: {total.cache_read:,} read, "
        f"{total.cache_write:,} written)"
        if total.prompt_total
        else ""
    )
    rows = [
        ("store", report.store),
        ("sessions", f"{report.sessions:,}"),
        ("turns", f"{report.turns:,} ({reasons})" if reasons else f"{report.turns:,}"),
        ("model requests", f"{report.requests:,}"),
        ("input tokens", f"{total.prompt_total:,}{cached}"),
        ("output tokens", f"{total.output:,}"),
        (
            "compactions",
            f"{report.compactions:,} ({plural(usage.compaction_calls, 'summarizer call')}: "
            f"{usage.compaction.prompt_total:,} in, {usage.compaction.output:,} out)"
            if usage.compaction_calls
            else f"{report.compactions:,}",
        ),
        ("invariant checks passed", f"{report.invariant_checks:,}"),
        ("sessions verified", f"{report.verified_sessions:,}/{report.sessions:,}"),
        ("step overhead p50", f"{report.step_overhead_p50_ms:.2f} ms"),
        ("step overhead p99", f"{report.step_overhead_p99_ms:.2f} ms"),
        ("wall time", f"{report.wall_seconds:.2f} s"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    console.print(table)
    store_option = "" if store_url == DEFAULT_STORE else f" --store {store_url}"
    console.print(
        f"per session: actorloop sessions{store_option} list", style="dim", highlight=False
    )


def _report_percent(fraction: float | None) -> str:
    return NO_VALUE if fraction is None else f"{fraction:.1%}"


# ---------------------------------------------------------------------- workloads


@main.group()
def workloads() -> None:
    """The workloads shipped with actorloop (`actorloop run NAME` runs one)."""


@workloads.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def list_workloads(as_json: bool) -> None:
    """One line per packaged workload."""
    shipped = [(name, find_workload(name)) for name in packaged_workloads()]
    if as_json:
        write_json_lines(
            [
                {
                    "name": name,
                    "default": name == DEFAULT_WORKLOAD,
                    "description": spec.description,
                    "planned_turns": _planned_turns(spec),
                }
                for name, spec in shipped
            ]
        )
        return
    table = Table("name", "turns", "description")
    table.columns[2].overflow = "fold"
    for name, spec in shipped:
        shown = f"{name} (default)" if name == DEFAULT_WORKLOAD else name
        table.add_row(shown, f"{_planned_turns(spec):,}", spec.description)
    console.print(table)


@workloads.command("show")
@click.argument("name")
def show_workload(name: str) -> None:
    """Print a packaged workload's TOML (a starting point: `... show demo > mine.toml`)."""
    try:
        sys.stdout.write(packaged_workload_text(name))
    except WorkloadError as exc:
        fail(str(exc))


# ---------------------------------------------------------------------- sessions


@main.group()
@click.option("--store", "store_url", default=DEFAULT_STORE, show_default=True, help="Store URL.")
@click.pass_context
def sessions(ctx: click.Context, store_url: str) -> None:
    """List, show, verify, fork and resume stored sessions.

    A SESSION_ID may be given whole, as `sessions list` shortens it (`head…tail`), or as a
    unique prefix. Reading never writes: a session live in another process is read as far
    as it is durable.
    """
    ctx.obj = store_url


async def resolve(store: Store, given: str) -> str:
    """The whole session id `given` stands for (itself, a shortened id or a unique prefix)."""
    with contextlib.suppress(InvalidSessionId):
        if await store.exists(given):
            return given
    matches = expand(given, [entry.id for entry in await store.list()])
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise SessionNotFound(given)
    raise SessionIdAmbiguous(given, matches)


@frozen
class Listed:
    """One row of `sessions list`: a readable session (its meta and summary), or a damaged
    one (what is wrong with it; its creation time when the store could still say)."""

    id: str
    created_at: int | None
    summary: tuple[SessionMeta, SessionSummary] | None = None
    problem: str | None = None


async def _list_all(store: Store) -> list[Listed]:
    """Every stored session with its summary; one the store cannot read is reported as
    damaged in its place (the others are listed all the same)."""
    listed: list[Listed] = []
    for entry in await store.list():
        if isinstance(entry, DamagedSession):
            listed.append(Listed(entry.id, None, problem=entry.problem))
            continue
        try:
            meta, events = await store.load(entry.id, repair=False)
        except ActorloopError as exc:
            problem = f"{type(exc).__name__}: {exc}"
            listed.append(Listed(entry.id, entry.created_at, problem=problem))
            continue
        listed.append(Listed(meta.id, meta.created_at, (meta, summarize(meta, events))))
    return _tree_order(listed)


def _tree_order(listed: list[Listed]) -> list[Listed]:
    """Oldest first (a damaged session without a known age last), each session's children
    (forks, subagents) right after it."""

    def key(entry: Listed) -> tuple[bool, int, str]:
        return (entry.created_at is None, entry.created_at or 0, entry.id)

    ids = {entry.id for entry in listed}
    children: dict[str | None, list[Listed]] = {}
    for entry in sorted(listed, key=key):
        parent = entry.summary[1].parent if entry.summary is not None else None
        children.setdefault(parent if parent in ids else None, []).append(entry)
    ordered: list[Listed] = []
    stack = list(reversed(children.get(None, [])))
    while stack:
        entry = stack.pop()
        ordered.append(entry)
        stack.extend(reversed(children.get(entry.id, [])))
    return ordered


STATUS_STYLE = {"completed": "green", "open": "yellow", "new": "dim", "damaged": "bold red"}


@sessions.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.option("--ids", "bare_ids", is_flag=True, help="Only the whole ids, one per line.")
@click.pass_obj
def list_sessions(store_url: str, as_json: bool, bare_ids: bool) -> None:
    """One line per stored session: kind, status, turns, token usage, age and parent.

    Long ids are shortened in the middle (`head…tail`) so rows stay on one line; a
    shortened id still names exactly one session, so it can be pasted into any command.
    """
    store = existing_store(store_url)

    async def go() -> list[Listed]:
        try:
            return await _list_all(store)
        finally:
            await store.close()

    listed = run_async(go)
    if bare_ids:
        sys.stdout.write("".join(f"{entry.id}\n" for entry in listed))
        return
    if as_json:
        write_json_lines(
            [
                summary_dict(*entry.summary)
                if entry.summary is not None
                else damaged_dict(entry.id, entry.problem or "")
                for entry in listed
            ]
        )
        return
    if not listed:
        console.print(f"no sessions in {store_url}", highlight=False)
        return
    _print_session_table(listed)


COLUMNS = ("kind", "status", "turns", "tokens in/out", "cached", "created")
DROPPABLE = ((), ("created",), ("created", "kind"), ("created", "kind", "cached"))
"""Columns left out, in turn, when the table is still wider than the terminal."""


def _fit_table(ids: list[str], parents: list[str | None], cells: list[list[str]]) -> Table:
    """The sessions table, as wide as the terminal: ids and parents are shortened (still
    unique) before any column is dropped; the id column never wraps."""
    known = [parent for parent in parents if parent is not None]
    natural = (max(len("id"), *map(len, ids)), max(len("parent"), *map(len, known or [""])))
    table = Table()
    for dropped in DROPPABLE:
        id_width, parent_width = natural
        for _attempt in range(4):
            shown_ids = shorten_ids(ids, id_width, ids)
            shown_parents = shorten_ids(known, parent_width, [*ids, *known])
            table = _session_table(
                [shown_ids[i] for i in ids],
                [None if p is None else shown_parents[p] for p in parents],
                cells,
                dropped,
            )
            unbounded = console.options.update_width(10**6)
            over = Measurement.get(console, unbounded, table).maximum - console.width
            if over <= 0:
                return table
            narrower_id, narrower_parent = _share(id_width + parent_width - over, *natural)
            if (narrower_id, narrower_parent) == (id_width, parent_width):
                break
            id_width, parent_width = narrower_id, narrower_parent
    return table


def _share(room: int, id_natural: int, parent_natural: int) -> tuple[int, int]:
    """Split `room` between the id and parent columns: the narrower one keeps its natural
    width if it fits in half, the other takes the rest; neither below MIN_ID_WIDTH."""
    if parent_natural <= room // 2:
        id_width, parent_width = room - parent_natural, parent_natural
    elif id_natural <= room // 2:
        id_width, parent_width = id_natural, room - id_natural
    else:
        id_width, parent_width = room - room // 2, room // 2
    return max(id_width, MIN_ID_WIDTH), max(parent_width, MIN_ID_WIDTH)


def _session_table(
    shown_ids: list[str],
    shown_parents: list[str | None],
    cells: list[list[str]],
    dropped: tuple[str, ...],
) -> Table:
    keep = [index for index, name in enumerate(COLUMNS) if name not in dropped]
    table = Table("id", *(COLUMNS[index] for index in keep), "parent", box=box.SIMPLE_HEAD)
    for column in table.columns:
        column.no_wrap = True
        if column.header in ("turns", "tokens in/out", "cached"):
            column.justify = "right"
    # Ids are never cut by the table itself (a cut id would not copy whole): when the
    # terminal is too narrow even so, the other columns give way.
    table.columns[0].min_width = max(map(len, shown_ids))
    table.columns[-1].min_width = max(len("parent"), *(len(p or "") for p in shown_parents))
    for shown, parent, row in zip(shown_ids, shown_parents, cells, strict=True):
        values: list[str | Text] = [row[index] for index in keep]
        status = row[COLUMNS.index("status")]
        values[keep.index(COLUMNS.index("status"))] = Text(
            status, style=STATUS_STYLE.get(status, "red" if status == "error" else "")
        )
        table.add_row(shown, *values, parent or "")
    return table


def _print_session_table(listed: list[Listed]) -> None:
    ids: list[str] = []
    parents: list[str | None] = []
    cells: list[list[str]] = []  # kind, status, turns, tokens, cached, created
    for entry in listed:
        if entry.summary is None:
            ids.append(entry.id)
            parents.append(None)
            created = ago(entry.created_at) if entry.created_at is not None else ""
            cells.append([NO_VALUE, "damaged", NO_VALUE, NO_VALUE, NO_VALUE, created])
            continue
        summary = entry.summary[1]
        total = summary.usage.total
        ids.append(summary.id)
        parents.append(summary.parent)
        cells.append(
            [
                summary.kind,
                summary.status,
                f"{summary.turns:,}",
                f"{tokens(total.prompt_total)} / {tokens(total.output)}",
                percent(summary.usage.cached_fraction),
                ago(summary.created_at),
            ]
        )
    console.print(_fit_table(ids, parents, cells))
    damaged = sum(row[1] == "damaged" for row in cells)
    footer = plural(len(ids), "session")
    if damaged:
        footer += f" ({damaged:,} damaged)"
    console.print(footer, highlight=False)
    for entry in listed:
        if entry.problem is not None:
            errors.print(
                f"damaged: {entry.id}: {entry.problem}",
                style="red",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )


@sessions.command()
@click.argument("session_id")
@click.option("--derived", is_flag=True, help="Only the conversation the model sees next.")
@click.option("--json", "as_json", is_flag=True, help="The summary and conversation as JSON.")
@click.pass_obj
def show(store_url: str, session_id: str, derived: bool, as_json: bool) -> None:
    """A stored session turn by turn: prompts, answers with their usage, tool calls with
    their arguments and results, context, header snapshots and deltas, compaction."""
    store = existing_store(store_url)

    async def go() -> Session:
        try:
            return await load_session(store, await resolve(store, session_id), repair=False)
        finally:
            await store.close()

    session = run_async(go)
    meta, events = session.meta, session.events
    summary = summarize(meta, events)
    header = session.header()
    prefix = (header.message_prefix or ()) if header is not None else ()
    if as_json:
        console.print_json(
            orjson.dumps(
                {
                    "session": summary_dict(meta, summary),
                    "header": unstructure(header),
                    "conversation": unstructure(session.derive_messages()),
                }
            ).decode()
        )
        return
    for line in _summary_lines(summary):
        console.print(line, highlight=False, soft_wrap=True)
    if prefix:
        console.print(
            Text(f"\nsession prefix: {plural(len(prefix), 'message')}", style="bold"),
        )
        for line in message_lines(prefix):
            console.print(line, highlight=False, soft_wrap=True)
    console.print()
    lines = message_lines(session.derive_messages()) if derived else timeline(meta, events)
    if derived:
        console.print(
            Text("the conversation the next request is built from (after the prefix):"),
            style="bold",
        )
    for line in lines:
        console.print(line, highlight=False, soft_wrap=True)


def _summary_lines(summary: SessionSummary) -> list[Text]:
    lines = [Text(f"session {summary.id}", style="bold")]
    if summary.kind == "fork":
        kind = f"fork of {summary.parent} at seq {summary.fork_seq}"
    elif summary.kind == "subagent":
        call = f" (tool call {summary.parent_call})" if summary.parent_call else ""
        kind = f"subagent of {summary.parent}{call}"
    else:
        kind = "root"
    status = f"{summary.status} · {plural(summary.turns, 'turn')} · "
    status += plural(summary.events, "event")
    created = f"{timestamp(summary.created_at)} ({ago(summary.created_at)})"
    if summary.last_event_at is not None:
        created += f" · last event {ago(summary.last_event_at)}"
    labels = {
        key: value
        for key, value in unstructure(summary.labels).items()
        if key not in ("parent_agent", "parent_call")
    }
    fields = [("kind", kind), ("status", status), ("created", created)]
    fields.append(("usage", usage_text(summary.usage)))
    if labels:
        fields.append(("labels", ", ".join(f"{k}={v}" for k, v in sorted(labels.items()))))
    for name, value in fields:
        line = Text(f"  {name:<9}", style="cyan")
        line.append(value)
        lines.append(line)
    return lines


@sessions.command()
@click.argument("session_id")
@click.pass_obj
def events(store_url: str, session_id: str) -> None:
    """Every durable event of a session as one JSON object per line."""
    store = existing_store(store_url)

    async def go() -> Session:
        try:
            return await load_session(store, await resolve(store, session_id), repair=False)
        finally:
            await store.close()

    write_json_lines([event_to_dict(event) for event in run_async(go).events])


@sessions.command()
@click.argument("session_id")
@click.option("--json", "as_json", is_flag=True, help="The verification report as JSON.")
@click.pass_obj
def verify(store_url: str, session_id: str, as_json: bool) -> None:
    """Rebuild every request from the log and check it against its recorded digest.

    Read-only: a session whose writer is live in another process is verified as far as it
    is durable, and an open last turn is said to be open.
    """
    store = existing_store(store_url)

    async def go() -> tuple[str, Session]:
        try:
            whole = await resolve(store, session_id)
            return whole, await load_session(store, whole, repair=False)
        finally:
            await store.close()

    whole, session = run_async(go)
    try:
        report = verify_log(session.meta, session.events)
    except VerificationFailed as exc:
        fail(f"verification failed: {whole}: {exc}", EXIT_VERIFY_FAILED)
    open_turn = session.open_turn
    if as_json:
        write_json_lines(
            [
                {
                    "ok": True,
                    "id": whole,
                    "events": report.events,
                    "turns": report.turns,
                    "requests_checked": report.requests_checked,
                    "requests_without_digest": report.requests_without_digest,
                    "open_turn": open_turn,
                }
            ]
        )
        return
    line = (
        f"ok: {whole}: {plural(report.events, 'event')}, {plural(report.turns, 'turn')}, "
        f"{plural(report.requests_checked, 'request')} rebuilt and matched "
        f"{'its digest' if report.requests_checked == 1 else 'their digests'}"
    )
    if report.requests_without_digest:
        line += f"; {plural(report.requests_without_digest, 'request')} had no digest to check"
    click.echo(line)
    if open_turn is not None:
        click.echo(
            f"note: turn {open_turn} is still open (its writer is live in another process, or "
            "it crashed and the next resume closes it); the durable part was verified"
        )


@sessions.command()
@click.argument("session_id")
@click.option("--at", "boundary", type=int, default=None, help="A turn/end seq (default: last).")
@click.option("--child", "child_id", default=None, help="The child's session id.")
@click.pass_obj
def fork(store_url: str, session_id: str, boundary: int | None, child_id: str | None) -> None:
    """Fork a stored session at a turn/end (O(1): the child points at its parent)."""
    store = existing_store(store_url)

    async def go() -> tuple[str, int, str]:
        try:
            whole = await resolve(store, session_id)
            point = await fork_point(store, whole, boundary, child_id)
            await store.fork(whole, point.boundary, point.child_id)
        finally:
            await store.close()
        return whole, point.boundary, point.child_id

    whole, at, child = run_async(go)
    click.echo(f"forked {whole} at seq {at}: {child}")


@sessions.command()
@click.argument("session_id")
@click.option("--message", default="Continue.", show_default=True, help="The next user message.")
@click.option("--model", default=None, help="Model to continue with (default: the stored one).")
@click.option("--provider", "provider_spec", default="sim", show_default=True)
@click.option("--base-url", default=None)
@click.pass_obj
def resume(
    store_url: str,
    session_id: str,
    message: str,
    model: str | None,
    provider_spec: str,
    base_url: str | None,
) -> None:
    """Resume a stored session in a new loop instance and run one turn.

    The stored system prompt and call settings carry over (from the session's last request
    header); `--model` (or a provider spec naming one) replaces only the model.
    """
    store = existing_store(store_url)
    provider, spec_model = provider_for(provider_spec, base_url, 0.0, None)

    async def go() -> tuple[str, UsageTotals]:
        try:
            whole = await resolve(store, session_id)
            stored = await load_session(store, whole, repair=False)
        except BaseException:
            await store.close()
            raise
        header = stored.header()
        chosen = model or spec_model
        if header is None:
            options = AgentOptions(model=chosen or "sim-1")
        else:
            # This run's provider serves the session, whatever provider name it was stored with.
            options = AgentOptions.restored(
                header, provider=None, **({"model": chosen} if chosen else {})
            )
        async with Runtime.open(store=store, provider=provider, dev_invariants=True) as rt:
            agent = await rt.resume(whole, options)
            result = await agent.send(message)
            answer = result.text
            used = turn_usage(agent.session.events, result.turn) if result.turn else UsageTotals()
        return f"turn {result.turn} {result.reason}: {answer}", used

    line, used = run_async(go)
    click.echo(line)
    click.echo(f"usage: {usage_text(used)}")


if __name__ == "__main__":  # pragma: no cover - `python -m actorloop.runtime.cli.commands`
    main(prog_name=os.path.basename(sys.argv[0]) or "actorloop")
