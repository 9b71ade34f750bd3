"""Spawn benchmark: CPU per sequential `await rt.spawn(options)` on `memory:` and `sqlite:`,
this tree against a baseline in one run.

Run from the repository root:

    python -m benchmarks.bench_spawn [--quick] [--baseline DIR|REV] [--rounds R]

Writes benchmarks/results/spawn.json and spawn.md (`--quick` writes spawn-quick.*; `--name`
chooses another stem).

* Each measurement is a fresh process: `Runtime.open` on the store (`sqlite:` in a temporary
  directory, `synchronous=NORMAL`), one warm-up spawn (it opens the database), then N
  sequential `rt.spawn(OPTIONS, session_id=...)` calls; the figure is the process's CPU
  time (`time.process_time`, every thread) over the N spawns, divided by N. The collector
  runs with Python's default thresholds, as a program that sets none gets it; the CPU the
  collector took during the spawns (`gc.callbacks`, thread time) is reported beside it.
* The agent population grows with N, and so does what some parts cost per spawn (a
  durable store's lease is a lock the kernel keeps in one list per file): N = 300, 2,000
  and 10,000 are separate rows.
* `--leases N`: CPU per `SqliteStore.claim` by how many leases are held already (the
  kernel walks a list of locks per file, so a claim grows with the leases held in its lock
  file), written to spawn_leases.*; with `--baseline`, both trees in fresh processes,
  alternating, medians per block over the rounds.
* `--collector many`: the runtime opened with `CollectorPolicy.many_agents()` (the
  documented setting for thousands of agents, docs/performance.md) instead of the default
  collector; written to spawn_many.* unless `--name` says otherwise.
* `--baseline DIR` (a checkout of another revision, e.g. a `git worktree`) or
  `--baseline REV` (extracted with `git archive`) runs the same measurements with that
  code first on `PYTHONPATH`; within a round both trees run back to back, which goes first
  alternating by round. Figures are medians over the rounds; *after/before* is the median
  of the per-round ratios, with their range.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import trio

from benchmarks.baseline import baseline_package

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = RESULTS.parent.parent
STORES = ("memory", "sqlite")
SIZES = (300, 2_000, 10_000)
QUICK_SIZES = (300,)


class GcCpu:
    """CPU time (this thread) the cyclic collector takes while the block runs."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.collections = 0
        self._started = 0.0

    def _callback(self, phase: str, _info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.thread_time()
        else:
            self.seconds += time.thread_time() - self._started
            self.collections += 1

    def __enter__(self) -> GcCpu:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *_exc: object) -> None:
        gc.callbacks.remove(self._callback)


async def measure(store: str, spawns: int, directory: Path, collector: str) -> dict[str, Any]:
    """`spawns` sequential spawns on `store` after a warm-up spawn, in this process."""
    from actorloop.runtime import AgentOptions
    from actorloop.runtime.control.collector import CollectorPolicy
    from actorloop.runtime.host.runtime import Runtime
    from actorloop.runtime.testing import EchoProvider

    options = AgentOptions(model="echo-model", system="You are a benchmark agent.")
    url = "memory:" if store == "memory" else f"sqlite:{directory / 'spawn.db'}"
    policy = CollectorPolicy.many_agents() if collector == "many" else None
    async with Runtime.open(store=url, provider=EchoProvider(), collector=policy) as rt:
        await rt.spawn(options, session_id="warm-up")
        with GcCpu() as collector:
            cpu, wall = time.process_time(), time.perf_counter()
            for index in range(spawns):
                await rt.spawn(options, session_id=f"agent-{index:05d}")
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        live = len(rt.agents)
    if live != spawns + 1:
        raise RuntimeError(f"{live} live agents after {spawns + 1} spawns")
    return {
        "store": store,
        "spawns": spawns,
        "cpu_us_per_spawn": cpu / spawns * 1e6,
        "wall_us_per_spawn": wall / spawns * 1e6,
        "gc_cpu_us_per_spawn": collector.seconds / spawns * 1e6,
        "gc_collections": collector.collections,
    }


def child(store: str, spawns: int, collector: str) -> None:
    async def run() -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="bench-spawn-") as temp:
            return await measure(store, spawns, Path(temp), collector)

    print(json.dumps(trio.run(run)))


def _isolated(pythonpath: Path | None, *arguments: str) -> dict[str, Any]:
    """One measurement in a fresh process (the baseline's code first on the path, if
    given): `python -m benchmarks.bench_spawn ARGUMENTS`, its JSON answer."""
    env = dict(os.environ)
    parts = [str(pythonpath)] if pythonpath is not None else []
    env["PYTHONPATH"] = os.pathsep.join([*parts, str(ROOT)])
    command = [sys.executable, "-m", "benchmarks.bench_spawn", *arguments]
    done = subprocess.run(command, cwd=ROOT, env=env, check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _git(where: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=where, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def compare(
    baseline: str | None, sizes: tuple[int, ...], rounds: int, collector: str
) -> dict[str, Any]:
    sides = ("before", "after") if baseline is not None else ("after",)
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    with tempfile.TemporaryDirectory(prefix="bench-spawn-baseline-") as temp:
        path, label = (
            baseline_package(baseline, Path(temp)) if baseline is not None else (None, None)
        )
        for index in range(rounds):
            print(f"round {index + 1}/{rounds} ...", file=sys.stderr)
            for spawns in sizes:
                for store in STORES:
                    order = sides if index % 2 == 0 else sides[::-1]
                    for side in order:
                        run = _isolated(
                            path if side == "before" else None,
                            *("--child", store, str(spawns), "--collector", collector),
                        )
                        runs[side].append({"round": index, **run})
    rows = []
    for spawns in sizes:
        for store in STORES:
            row: dict[str, Any] = {"store": store, "spawns": spawns}
            for side in sides:
                mine = [r for r in runs[side] if (r["store"], r["spawns"]) == (store, spawns)]
                for key in ("cpu_us_per_spawn", "gc_cpu_us_per_spawn", "wall_us_per_spawn"):
                    row[f"{side}_{key}"] = statistics.median(r[key] for r in mine)
                row[f"{side}_cpu_without_gc_us_per_spawn"] = statistics.median(
                    r["cpu_us_per_spawn"] - r["gc_cpu_us_per_spawn"] for r in mine
                )
            if baseline is not None:
                pairs = zip(
                    [r for r in runs["before"] if (r["store"], r["spawns"]) == (store, spawns)],
                    [r for r in runs["after"] if (r["store"], r["spawns"]) == (store, spawns)],
                    strict=True,
                )
                ratios, without_gc = [], []
                for b, a in pairs:
                    ratios.append(a["cpu_us_per_spawn"] / b["cpu_us_per_spawn"])
                    without_gc.append(_without_gc(a) / _without_gc(b))
                row["after_over_before"] = statistics.median(ratios)
                row["ratio_range"] = [min(ratios), max(ratios)]
                row["after_over_before_without_gc"] = statistics.median(without_gc)
            rows.append(row)
    return {
        "headlines": {
            f"spawn CPU µs/agent, {row['store']}:, {row['spawns']:,} agents": round(
                row["after_cpu_us_per_spawn"], 1
            )
            for row in rows
        },
        "baseline": label,
        "after": f"working tree on {_git(ROOT, 'rev-parse', '--short', 'HEAD')}",
        "rounds": rounds,
        "collector": collector,
        "environment": environment(),
        "rows": rows,
        "runs": runs,
    }


def _without_gc(run: dict[str, Any]) -> float:
    value: float = run["cpu_us_per_spawn"] - run["gc_cpu_us_per_spawn"]
    return value


LEASE_BLOCK = 1_000


def lease_scaling(leases: int) -> dict[str, Any]:
    """CPU (this thread) per `SqliteStore.claim` and per `Lease.release`, by how many
    leases the store already holds: each lease is an OFD byte-range lock in a file (the
    database file itself before schema 3, one of 16 lock files beside it since), and the
    kernel keeps one list of locks per file that every lock call walks."""
    from actorloop.runtime.stores.sqlite import SqliteStore

    blocks: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-leases-") as temp:
        store = SqliteStore(Path(temp) / "leases.db")
        held = []
        gc.disable()
        try:
            for start in range(0, leases, LEASE_BLOCK):
                cpu = time.thread_time()
                for index in range(start, start + LEASE_BLOCK):
                    held.append(store.claim(f"agent-{index:05d}"))
                cpu = time.thread_time() - cpu
                blocks.append({"held_before": start, "claim_cpu_us": cpu / LEASE_BLOCK * 1e6})
            cpu = time.thread_time()
            for lease in held:
                lease.release()
            release_us = (time.thread_time() - cpu) / len(held) * 1e6
        finally:
            gc.enable()
            trio.run(store.close)
    return {"leases": leases, "blocks": blocks, "release_cpu_us_mean": release_us}


def compare_leases(baseline: str, leases: int, rounds: int) -> dict[str, Any]:
    """`lease_scaling` for both trees, each in fresh processes, alternating by round."""
    sides = ("before", "after")
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    with tempfile.TemporaryDirectory(prefix="bench-leases-baseline-") as temp:
        path, label = baseline_package(baseline, Path(temp))
        for index in range(rounds):
            print(f"round {index + 1}/{rounds} ...", file=sys.stderr)
            for side in sides if index % 2 == 0 else sides[::-1]:
                where = path if side == "before" else None
                runs[side].append(_isolated(where, "--lease-child", str(leases)))
    blocks = []
    for position, block in enumerate(runs["after"][0]["blocks"]):
        row: dict[str, Any] = {"held_before": block["held_before"]}
        for side in sides:
            row[f"{side}_claim_cpu_us"] = statistics.median(
                run["blocks"][position]["claim_cpu_us"] for run in runs[side]
            )
        blocks.append(row)
    return {
        "leases": leases,
        "baseline": label,
        "after": f"working tree on {_git(ROOT, 'rev-parse', '--short', 'HEAD')}",
        "rounds": rounds,
        "blocks": blocks,
        "release": {
            side: statistics.median(run["release_cpu_us_mean"] for run in runs[side])
            for side in sides
        },
        "environment": environment(),
        "runs": runs,
    }


def lease_markdown(report: dict[str, Any], command: str) -> str:
    env = report["environment"]
    compared = "baseline" in report
    lines = [
        "# Writer leases on `sqlite:`: CPU per claim by leases already held",
        "",
        f"`{command}` — Python {env['python']} on {env['platform']} ({env['cpus']} CPUs), "
        f"{env['when']}, load average {env['load_average'][0]:.2f}. One process claims "
        f"{report['leases']:,} sessions' leases through one `SqliteStore`, in blocks of "
        f"{LEASE_BLOCK:,}; CPU is `time.thread_time` (kernel time included), collector off. "
        "A lease is an OFD write lock on one byte of a file (persistence.md §5). The kernel "
        "keeps one list of POSIX locks per file and walks it on every lock and unlock, so a "
        "claim costs in proportion to the leases held in the same file (by every process). "
        "A loop between claims (a real spawn) also evicts that list from the caches, so a "
        "spawn pays more than these back-to-back claims.",
        "",
    ]
    if compared:
        lines += [
            f"Before: {report['baseline']} (every lease on the database file). After: "
            f"{report['after']} (leases spread over 16 lock files beside it). Each tree in "
            f"fresh processes, alternating, medians over {report['rounds']} rounds.",
            "",
            "| leases held before the block | before CPU µs per claim | after CPU µs per claim "
            "| after/before |",
            "|---:|---:|---:|---:|",
        ]
        for block in report["blocks"]:
            before, after = block["before_claim_cpu_us"], block["after_claim_cpu_us"]
            lines.append(
                f"| {block['held_before']:,} | {before:.1f} | {after:.1f} "
                f"| **{after / before:.2f}** |"
            )
        lines += [
            "",
            f"Releasing all {report['leases']:,} (from full to empty), µs per release on "
            f"average: before {report['release']['before']:.1f}, after "
            f"{report['release']['after']:.1f}.",
            "",
        ]
        return "\n".join(lines)
    lines += ["| leases held before the block | CPU µs per claim |", "|---:|---:|"]
    for block in report["blocks"]:
        lines.append(f"| {block['held_before']:,} | {block['claim_cpu_us']:.1f} |")
    lines += [
        "",
        f"Releasing all {report['leases']:,} (from full to empty): "
        f"{report['release_cpu_us_mean']:.1f} µs per release on average.",
        "",
    ]
    return "\n".join(lines)


def environment() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "sqlite": sqlite3.sqlite_version,
        "trio": metadata.version("trio"),
        "load_average": list(os.getloadavg()),
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def markdown(report: dict[str, Any], command: str) -> str:
    env = report["environment"]
    compared = report["baseline"] is not None
    lines = [
        "# Spawn: CPU per sequential `rt.spawn`",
        "",
        f"`{command}` — Python {env['python']} on {env['platform']} ({env['cpus']} CPUs; "
        f"SQLite {env['sqlite']}, trio {env['trio']}), {env['when']}, load average "
        f"{env['load_average'][0]:.2f} at the end. A 2-core machine shared with other "
        "engineers' work while this ran: read the ratios; CPU time barely moves with the "
        "other tenants, wall time does.",
        "",
        "Each cell: a fresh process opens a runtime on the store, spawns one warm-up agent, "
        "then N agents one after another (`await rt.spawn(options, session_id=...)`); CPU "
        "is `time.process_time` (every thread, the SQLite writer's included) over the N "
        "spawns / N; *GC* is the part of it the cyclic collector took ("
        + (
            "the runtime opened with `CollectorPolicy.many_agents()`"
            if report.get("collector") == "many"
            else "default thresholds"
        )
        + f"); medians over {report['rounds']} round(s).",
        "",
    ]
    if compared:
        lines += [
            f"Before: {report['baseline']}. After: {report['after']}. In each round both "
            "trees run back to back in fresh processes (which goes first alternates by "
            "round); *after/before* is the median of the per-round CPU ratios, with their "
            "range.",
            "",
            "| store | agents | before CPU µs | after CPU µs | after/before | range "
            "| before GC µs | after GC µs | before − GC | after − GC | after/before − GC "
            "| after wall µs |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for row in report["rows"]:
            low, high = row["ratio_range"]
            lines.append(
                f"| `{row['store']}:` | {row['spawns']:,} | {row['before_cpu_us_per_spawn']:.1f} "
                f"| {row['after_cpu_us_per_spawn']:.1f} | **{row['after_over_before']:.3f}** "
                f"| {low:.2f}–{high:.2f} | {row['before_gc_cpu_us_per_spawn']:.1f} "
                f"| {row['after_gc_cpu_us_per_spawn']:.1f} "
                f"| {row['before_cpu_without_gc_us_per_spawn']:.1f} "
                f"| {row['after_cpu_without_gc_us_per_spawn']:.1f} "
                f"| **{row['after_over_before_without_gc']:.3f}** "
                f"| {row['after_wall_us_per_spawn']:.1f} |"
            )
        lines += [
            "",
            "*− GC*: the CPU with the collector's share taken out (per run, then the median); "
            "at 300 agents most of the collector's share is the process's first full "
            "collection (the whole heap of imported modules, ~23 ms), which any program "
            "allocating that much meets once.",
        ]
    else:
        lines += [
            f"Tree: {report['after']}.",
            "",
            "| store | agents | CPU µs | GC µs | CPU − GC µs | wall µs |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for row in report["rows"]:
            lines.append(
                f"| `{row['store']}:` | {row['spawns']:,} | {row['after_cpu_us_per_spawn']:.1f} "
                f"| {row['after_gc_cpu_us_per_spawn']:.1f} "
                f"| {row['after_cpu_without_gc_us_per_spawn']:.1f} "
                f"| {row['after_wall_us_per_spawn']:.1f} |"
            )
    lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="300 spawns, one round")
    parser.add_argument("--baseline", metavar="DIR|REV", help="compare with that code")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 5; quick 1)")
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=None, help="agent counts (default 300 2000 10000)"
    )
    parser.add_argument(
        "--name", default="spawn", help="result file stem (default spawn: spawn.json, spawn.md)"
    )
    parser.add_argument("--child", nargs=2, metavar=("STORE", "N"), help=argparse.SUPPRESS)
    parser.add_argument("--lease-child", type=int, metavar="N", help=argparse.SUPPRESS)
    parser.add_argument(
        "--leases", type=int, metavar="N", help="only the lease scaling figure, N leases"
    )
    parser.add_argument(
        "--collector",
        choices=("default", "many"),
        default="default",
        help="the runtime's collector policy (many: CollectorPolicy.many_agents())",
    )
    args = parser.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]), args.collector)
        return
    if args.lease_child:
        print(json.dumps(lease_scaling(args.lease_child)))
        return
    command = "python -m benchmarks.bench_spawn " + " ".join(sys.argv[1:])
    if args.leases:
        if args.baseline:
            leases = compare_leases(args.baseline, args.leases, args.rounds or 3)
        else:
            leases = {**lease_scaling(args.leases), "environment": environment()}
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "spawn_leases.json").write_text(json.dumps(leases, indent=2) + "\n")
        text = lease_markdown(leases, command.strip())
        (RESULTS / "spawn_leases.md").write_text(text)
        print(text)
        return
    sizes = tuple(args.sizes or (QUICK_SIZES if args.quick else SIZES))
    rounds = args.rounds or (1 if args.quick else 5)
    report = compare(args.baseline, sizes, rounds, args.collector)
    suffix = "-quick" if args.quick else ""
    if args.collector == "many" and args.name == "spawn":
        args.name = "spawn_many"
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.name}{suffix}.json").write_text(json.dumps(report, indent=2) + "\n")
    text = markdown(report, command.strip())
    (RESULTS / f"{args.name}{suffix}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
