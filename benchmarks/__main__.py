"""`python -m benchmarks`: run every benchmark module present, then combine the headline
figures of their result files into results/summary.md and summary.json.

    python -m benchmarks [--quick] [--only NAME ...] [--summary-only]
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import json
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
# Run order: cheap single-session figures first, the peer comparisons last.
MODULES = (
    "bench_session",
    "bench_decode",
    "bench_resume",
    "bench_store",
    "bench_loop",
    "bench_floor",
    "bench_runtime",
    "bench_spawn",
    "bench_cli",
    "bench_compaction",
    "bench_gate",
    "bench_cache",
    "bench_serve",
    "bench_codec_peers",
    "bench_peers",
)
# Result file stem per module, when it differs from the module name without `bench_`.
RESULT_STEMS: dict[str, str] = {}
# Modules comparing against the `bench` extra; each has PEER_PACKAGES and missing_peers().
PEER_MODULES = ("bench_codec_peers", "bench_peers")
EXTRA_HINT = 'pip install -e ".[bench]"'

Headlines = dict[str, Any]


def _stem(module: str) -> str:
    return RESULT_STEMS.get(module, module.removeprefix("bench_"))


def _entry(module: ModuleType) -> Callable[[], object] | None:
    """The module's `main` if it can be called with no arguments (it then reads sys.argv)."""
    main = getattr(module, "main", None)
    if not callable(main) or inspect.iscoroutinefunction(main):
        return None
    for parameter in inspect.signature(main).parameters.values():
        variadic = parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)
        if parameter.default is parameter.empty and not variadic:
            return None
    return main


def run_module(name: str, quick: bool) -> dict[str, Any]:
    """Run one benchmark module; never raises, returns what happened."""
    if importlib.util.find_spec(f"benchmarks.{name}") is None:
        return {"status": "absent"}
    source = (HERE / f"{name}.py").read_text()
    flags = ["--quick"] if quick and '"--quick"' in source else []
    started = time.perf_counter()
    try:
        module = importlib.import_module(f"benchmarks.{name}")
        if name in PEER_MODULES:
            missing = module.missing_peers()
            if len(missing) == len(module.PEER_PACKAGES):
                note = f"peers not installed ({', '.join(missing)}): {EXTRA_HINT}"
                print(f"== {name}: skipped, {note}")
                return {"status": "skipped", "note": note}
        entry = _entry(module)
        print(f"== {name}{' ' + ' '.join(flags) if flags else ''}", flush=True)
        if entry is None:
            command = [sys.executable, "-m", f"benchmarks.{name}", *flags]
            code = subprocess.run(command, cwd=ROOT, check=False).returncode
            how = "subprocess"
            if code != 0:
                raise RuntimeError(f"exit status {code}")
        else:
            argv = sys.argv
            sys.argv = [f"benchmarks.{name}", *flags]
            try:
                returned = entry()
            finally:
                sys.argv = argv
            how = "main()"
            # A main() that returns an exit status reports failure the way a process would.
            if isinstance(returned, int) and not isinstance(returned, bool) and returned != 0:
                raise RuntimeError(f"main() returned {returned}")
    except (Exception, SystemExit) as error:
        traceback.print_exc()
        return {
            "status": "failed",
            "error": f"{type(error).__name__}: {error}",
            "seconds": round(time.perf_counter() - started, 1),
        }
    return {
        "status": "ran",
        "how": how,
        "flags": flags,
        "seconds": round(time.perf_counter() - started, 1),
    }


# ---------------------------------------------------------------- headline figures


def _session(report: dict[str, Any]) -> Headlines:
    out: Headlines = {}
    rows = report["append"]["append"]
    for row in rows.values():
        out[f"append µs/event at {row['events']:,} events"] = row["mean_us_per_event"]
    last = list(rows.values())[-1]
    out["append cost ratio, largest vs smallest log"] = last.get("mean_ratio_vs_smallest")
    codec = report["codec"]
    out["encode_event events/s"] = codec["encode_events_per_s"]
    out["decode_event events/s"] = codec["decode_events_per_s"]
    return out


def _store(report: dict[str, Any]) -> Headlines:
    out: Headlines = {}
    for row in report["throughput"]:
        out[f"group commit events/s ({row['synchronous']}, {row['sessions']:,} sessions)"] = round(
            row["events_per_s"]
        )
    for row in report["load"]:
        out[f"load {row['events']:,} events ({row['store']}) events/s"] = round(row["events_per_s"])
    for row in report["fork"]:
        label = f"fork ms ({row['store']}, parent of {row['parent_events']:,} events)"
        out[label] = round(row["seconds"] * 1e3, 3)
    return out


def _resume(report: dict[str, Any]) -> Headlines:
    out: Headlines = {}
    for row in report["rows"].values():
        size = f"{row['events']:,}-event sqlite log"
        out[f"resume CPU ms, snapshots off ({size})"] = round(row["resume_ms_snapshots_off"], 1)
        out[f"resume CPU ms, snapshots on ({size})"] = round(row["resume_ms_snapshots_on"], 1)
        if "load_collector_on_x_paused" in row:
            out[f"store.load collector on ÷ paused ({size})"] = round(
                row["load_collector_on_x_paused"], 2
            )
    out["resume with snapshots, largest ÷ smallest log"] = round(
        report["large_x_small_snapshots_on"], 2
    )
    return out


def _loop(report: dict[str, Any]) -> Headlines:
    # The loop report puts its headline figures at the top level.
    figures = {
        key.replace("_", " "): value
        for key, value in report.items()
        if isinstance(value, int | float) and not isinstance(value, bool)
    }
    if not figures:
        raise KeyError("no top-level figures")
    return figures


def _runtime(report: dict[str, Any]) -> Headlines:
    many = report["many_agents"]
    out: Headlines = {
        "agents in one process": many["agents"],
        "spawn µs/agent": many["spawn_us_per_agent"],
        "steps/s (all agents)": many["steps_per_s"],
        "events/s persisted": many["events_per_s"],
        "RSS KiB per agent": many["rss_per_agent_kib"],
    }
    scale = report.get("scale")
    if scale is not None:
        pair = f"{scale['large']:,} vs {scale['small']:,} agents"
        for key, ratio in scale["steps_per_cpu_s_large_vs_small"].items():
            out[f"{pair}, steps per CPU s ({key})"] = ratio
        for key, ratio in scale["steps_per_s_large_vs_small"].items():
            out[f"{pair}, steps/s wall ({key})"] = ratio
    for size, row in report["fork_resume_latency"].items():
        out[f"resume ms ({int(size):,}-event log)"] = row["resume_ms"]
        out[f"fork of a live session ms ({int(size):,}-event log)"] = row["fork_live_ms"]
    return out


def _cache(report: dict[str, Any]) -> Headlines:
    out: Headlines = {}
    for mode, rows in report["results"].items():
        for row in rows:
            out[f"{mode}: cached fraction, {row['strategy']}"] = row["cached_fraction"]
    return out


def _compaction(report: dict[str, Any]) -> Headlines:
    out: Headlines = {}
    for row in report["results"]:
        mode = row["mode"]
        out[f"{mode}: compactions"] = row["compactions"]
        out[f"{mode}: cached fraction, all requests"] = row["all_requests"]["cached_fraction"]
        out[f"{mode}: cache tokens lost per compaction"] = row["mean_cache_lost_per_compaction"]
    return out


def _peers(report: dict[str, Any]) -> Headlines:
    out: Headlines = {}
    turns = report["workload"]["turns"]
    base = report.get("base", "actorloop")
    for name, row in report["results"].items():
        out[f"{name}: mean µs/step ({turns} turns)"] = row["mean_us_per_step"]
        if name != base:
            ratio = row.get("ratios_vs_base", {}).get("cpu_us_per_step")
            out[f"{name}: cpu × {base} ({turns} turns)"] = ratio
    history = report.get("history")
    if history is not None:
        for name, row in history["results"].items():
            if name == base:
                continue
            for point, cell in row.items():
                out[f"{name}: cpu × {base} at {int(point):,} history messages"] = cell.get(
                    "cpu_x_base"
                )
    if report.get("missing_peers"):
        out["not installed"] = ", ".join(report["missing_peers"])
    return out


def _serve(report: dict[str, Any]) -> Headlines:
    out: Headlines = {}
    for row in report["results"]:
        label = (
            f"{row['sessions']} × {row['turns_per_session']}, "
            f"{row.get('provider', 'sim')} {row['model_latency_ms']:g} ms"
        )
        out[f"{label}: turns/s over HTTP"] = row["turns_per_s"]
        out[f"{label}: send p50 ms"] = row["send"]["p50_ms"]
        out[f"{label}: send p99 ms"] = row["send"]["p99_ms"]
        if "turns_per_s_x_direct" in row:
            out[f"{label}: turns/s × in-process"] = row["turns_per_s_x_direct"]
            out[f"{label}: server CPU/turn × in-process"] = row["cpu_per_turn_x_direct"]
    return out


def _cli(report: dict[str, Any]) -> Headlines:
    return {f"{name}: CPU s": row["cpu_s_median"] for name, row in report["results"].items()}


def _codec_peers(report: dict[str, Any]) -> Headlines:
    out: Headlines = {}
    for name, row in report["results"].items():
        out[f"{name}: decode events/s"] = row["decode_events_per_s"]
        out[f"{name}: decode events/s, GC on, whole log kept"] = row["decode_gc_on_events_per_s"]
        out[f"{name}: encode events/s"] = row["encode_events_per_s"]
        if name != "actorloop":
            out[f"{name}: decode × actorloop"] = row["decode_x_actorloop"]
            out[f"{name}: decode (GC on) × actorloop"] = row["decode_gc_on_x_actorloop"]
            out[f"{name}: encode × actorloop"] = row["encode_x_actorloop"]
    if report.get("missing_peers"):
        out["not installed"] = ", ".join(report["missing_peers"])
    return out


EXTRACTORS: dict[str, Callable[[dict[str, Any]], Headlines]] = {
    "session": _session,
    "store": _store,
    "resume": _resume,
    "loop": _loop,
    "runtime": _runtime,
    "cache": _cache,
    "compaction": _compaction,
    "peers": _peers,
    "codec_peers": _codec_peers,
    "serve": _serve,
    "cli": _cli,
}
_SKIP_KEYS = {"environment", "versions", "workload"}


def _generic(report: Any, path: str = "", out: Headlines | None = None) -> Headlines:
    """Top-level numeric figures of a result whose shape this summary does not know."""
    out = {} if out is None else out
    if isinstance(report, dict):
        for key, value in report.items():
            if key not in _SKIP_KEYS and len(out) < 12:
                _generic(value, f"{path}.{key}" if path else str(key), out)
    elif isinstance(report, int | float) and not isinstance(report, bool):
        out[path] = report
    return out


def headlines(stem: str, report: dict[str, Any]) -> tuple[Headlines, str | None]:
    extractor = EXTRACTORS.get(stem)
    if extractor is not None:
        try:
            return extractor(report), None
        except (KeyError, TypeError, IndexError, AttributeError) as error:
            problem = f"result shape changed ({type(error).__name__}: {error}); raw figures"
            return _generic(report), problem
    return _generic(report), None


def _result_file(stem: str, quick: bool) -> Path | None:
    names = [f"{stem}-quick.json", f"{stem}.json"] if quick else [f"{stem}.json"]
    for name in names:
        if (RESULTS / name).exists():
            return RESULTS / name
    return None


def _format(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"
    return str(value)


def summarise(quick: bool, runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    benchmarks: dict[str, Any] = {}
    notes: list[str] = []
    for module in MODULES:
        stem = _stem(module)
        path = _result_file(stem, quick)
        run = runs.get(module)
        if run and run["status"] == "skipped":
            notes.append(f"{module}: skipped — {run['note']}")
        if path is None:
            continue
        report = json.loads(path.read_text())
        figures, problem = headlines(stem, report)
        entry: dict[str, Any] = {"file": path.name, "headlines": figures}
        markdown = path.with_suffix(".md")
        if markdown.exists():
            entry["table"] = markdown.name
        if problem:
            entry["note"] = problem
        elif run and run["status"] in ("skipped", "failed"):
            entry["note"] = f"{run['status']} in this run: figures from an earlier run"
        benchmarks[module] = entry
    for module in MODULES:
        if module not in benchmarks and importlib.util.find_spec(f"benchmarks.{module}") is None:
            notes.append(f"{module}: not present in this checkout")
    return {
        "generated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "quick": quick,
        "runs": runs,
        "benchmarks": benchmarks,
        "notes": notes,
    }


def to_markdown(summary: dict[str, Any]) -> str:
    lines = [
        "# Benchmark summary",
        "",
        f"Generated {summary['generated']} by `python -m benchmarks"
        f"{' --quick' if summary['quick'] else ''}` from the result files below (each file "
        "records its own run time and machine). Absolute numbers are from a 2-core shared "
        "machine; ratios against actorloop are measured within one run and travel better.",
        "",
    ]
    for module, entry in summary["benchmarks"].items():
        table = (
            f" — full tables in [{entry['table']}]({entry['table']})" if "table" in entry else ""
        )
        lines += [f"## {module} (`{entry['file']}`){table}", ""]
        if "note" in entry:
            lines += [f"*{entry['note']}*", ""]
        lines += ["| figure | value |", "|---|---:|"]
        for label, value in entry["headlines"].items():
            lines.append(f"| {label} | {_format(value)} |")
        lines.append("")
    if summary["runs"]:
        lines += ["## This run", "", "| module | status | seconds | note |", "|---|---|---:|---|"]
        for module, run in summary["runs"].items():
            detail = run.get("error") or run.get("note") or run.get("how", "")
            lines.append(f"| {module} | {run['status']} | {run.get('seconds', '')} | {detail} |")
        lines.append("")
    if summary["notes"]:
        lines += ["## Notes", "", *(f"* {note}" for note in summary["notes"]), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes where supported")
    parser.add_argument(
        "--only",
        action="append",
        metavar="NAME",
        help="run only this module (e.g. bench_peers or peers); repeatable",
    )
    parser.add_argument(
        "--summary-only", action="store_true", help="rebuild the summary from the results present"
    )
    args = parser.parse_args(argv)
    selected = list(MODULES)
    if args.only:
        wanted = {name if name.startswith("bench_") else f"bench_{name}" for name in args.only}
        unknown = wanted - set(MODULES)
        if unknown:
            parser.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
        selected = [name for name in MODULES if name in wanted]
    runs: dict[str, dict[str, Any]] = {}
    if not args.summary_only:
        for name in selected:
            runs[name] = run_module(name, args.quick)
            if runs[name]["status"] == "absent":
                print(f"== {name}: not present, skipped")
    summary = summarise(args.quick, runs)
    suffix = "-quick" if args.quick else ""
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"summary{suffix}.json").write_text(json.dumps(summary, indent=2) + "\n")
    markdown = to_markdown(summary)
    (RESULTS / f"summary{suffix}.md").write_text(markdown)
    print(markdown)
    return 1 if any(run["status"] == "failed" for run in runs.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
