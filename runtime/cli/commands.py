"""The CLI's own commands: `run` a workload (packaged or a TOML file), list and print the
packaged workloads (`sessions` is runtime/cli/sessions.py; the console script that holds them
with `serve` and `inspect` is runtime/console.py). Bad input exits 2 with one line saying
what is wrong; nothing is written.

Only click loads with this module (and with the groups it adds): what a command needs is
imported when it runs, so `actorloop --help` starts in a fraction of the full import."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from .common import (
    console,
    fail,
    open_checked_store,
    provider_for,
    run_async,
    store_hint,
    store_option,
)

if TYPE_CHECKING:
    from ..providers.base import Provider
    from ..stores.base import Store
    from .orchestration import RunReport
    from .workload import Workload


# ---------------------------------------------------------------------- run


@click.command()
@click.argument("workload", required=False)
@store_option()
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
    import orjson

    from .workload import WorkloadError, find_workload

    try:
        spec = find_workload(workload)
    except WorkloadError as exc:
        fail(str(exc))
    provider, model = provider_for(provider_spec, base_url, spec.latency_ms, spec.context_window)
    store = open_checked_store(store_url, must_exist=False)
    report = _run_with_progress(spec, store, provider, model, quiet=as_json)
    if as_json:
        console().print_json(orjson.dumps(_report_dict(report)).decode())
    else:
        _print_report(report, store_url)


def _run_with_progress(
    spec: Workload, store: Store, provider: Provider, model: str | None, *, quiet: bool
) -> RunReport:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from .orchestration import run_workload

    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    errors = console(stderr=True)
    with Progress(*columns, console=errors, disable=quiet or not errors.is_terminal) as bar:
        # The bar moves once per turn the run starts itself (not per delegated turn).
        task = bar.add_task(f"running {spec.name}", total=spec.planned_turns - spec.delegated_turns)

        def advance(_what: str) -> None:
            bar.advance(task)

        async def go() -> RunReport:
            return await run_workload(spec, store, provider, model=model, progress=advance)

        return run_async(go, store_url=store.url)


def _report_dict(report: RunReport) -> dict[str, Any]:
    from .shapes import usage_dict

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
        "failed_compactions": report.failed_compactions,
        "invariant_checks_passed": report.invariant_checks,
        "verified_sessions": report.verified_sessions,
        "step_overhead_p50_ms": round(report.step_overhead_p50_ms, 3),
        "step_overhead_p99_ms": round(report.step_overhead_p99_ms, 3),
        "wall_seconds": round(report.wall_seconds, 3),
        "session_usage": {sid: usage_dict(usage) for sid, usage in report.session_usage.items()},
    }


def _print_report(report: RunReport, store_url: str) -> None:
    from rich.table import Table

    from .render import NO_VALUE, plural

    table = Table(title=f"actorloop run: {report.workload} ({report.run_id})", show_header=False)
    table.add_column("metric", style="bold")
    table.add_column("value", justify="right")
    reasons = ", ".join(f"{v} {k}" for k, v in sorted(report.turn_reasons.items()))
    usage, total = report.usage, report.usage.total
    fraction = usage.cached_fraction
    cached = (
        f" ({NO_VALUE if fraction is None else f'{fraction:.1%}'} cached: "
        f"{total.cache_read:,} read, {total.cache_write:,} written)"
        if total.prompt_total
        else ""
    )
    compactions = f"{report.compactions:,}"
    if usage.compaction_calls:
        compactions += (
            f" ({plural(usage.compaction_calls, 'summarizer call')}: "
            f"{usage.compaction.prompt_total:,} in, {usage.compaction.output:,} out)"
        )
    if report.failed_compactions:
        compactions += f", {report.failed_compactions:,} failed"
    rows = [
        ("store", report.store),
        ("sessions", f"{report.sessions:,}"),
        ("turns", f"{report.turns:,} ({reasons})" if reasons else f"{report.turns:,}"),
        ("model requests", f"{report.requests:,}"),
        ("input tokens", f"{total.prompt_total:,}{cached}"),
        ("output tokens", f"{total.output:,}"),
        ("compactions", compactions),
        ("invariant checks passed", f"{report.invariant_checks:,}"),
        ("sessions verified", f"{report.verified_sessions:,}/{report.sessions:,}"),
        ("step overhead p50", f"{report.step_overhead_p50_ms:.2f} ms"),
        ("step overhead p99", f"{report.step_overhead_p99_ms:.2f} ms"),
        ("wall time", f"{report.wall_seconds:.2f} s"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    out = console()
    out.print(table)
    if not store_url.startswith("memory:"):  # a memory store is gone once the run ends
        out.print(
            f"per session: actorloop sessions list{store_hint(store_url)}",
            style="dim",
            highlight=False,
            soft_wrap=True,  # a command to copy: never broken over lines
        )


# ---------------------------------------------------------------------- workloads


@click.group()
def workloads() -> None:
    """The workloads shipped with actorloop (`actorloop run NAME` runs one)."""


@workloads.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def list_workloads(as_json: bool) -> None:
    """One line per packaged workload, with the turns a run of it reports."""
    from rich.table import Table

    from .shapes import write_json_lines
    from .workload import DEFAULT_WORKLOAD, find_workload, packaged_workloads

    shipped = [(name, find_workload(name)) for name in packaged_workloads()]
    if as_json:
        write_json_lines(
            [
                {
                    "name": name,
                    "default": name == DEFAULT_WORKLOAD,
                    "description": spec.description,
                    "planned_turns": spec.planned_turns,
                }
                for name, spec in shipped
            ]
        )
        return
    table = Table("name", "turns", "description")
    table.columns[2].overflow = "fold"
    for name, spec in shipped:
        shown = f"{name} (default)" if name == DEFAULT_WORKLOAD else name
        table.add_row(shown, f"{spec.planned_turns:,}", spec.description)
    console().print(table)


@workloads.command("show")
@click.argument("name")
def show_workload(name: str) -> None:
    """Print a packaged workload's TOML (a starting point: `... show demo > mine.toml`)."""
    from .workload import WorkloadError, packaged_workload_text

    try:
        sys.stdout.write(packaged_workload_text(name))
    except WorkloadError as exc:
        fail(str(exc))
