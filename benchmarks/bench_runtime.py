"""Runtime benchmark: many agents in one process, and fork / resume latency by log size.

Run from the repository root:

    python -m benchmarks.bench_runtime [--quick] [--agents N]

Writes benchmarks/results/runtime.json and benchmarks/results/runtime.md (`--quick` writes
runtime-quick.*).

* **Many agents** — N agents (default 10,000) are spawned in one process on a SQLite store in
  a temporary directory, then all of them run 3 turns each concurrently against an
  `EchoProvider` with 1 ms simulated latency (one model step per turn). Reported: spawn
  time, wall time of the turns, steps/s, events/s, peak RSS (`getrusage`), RSS per agent
  (resident growth from before the first spawn to after the last turn, divided by N), and
  open file descriptors per live agent.
* **Fork / resume latency** — sessions of ~100 and ~100,000 events are written straight
  through the store (`append_batch`, no loop), then timed: `resume` (load + repair check +
  validation + new loop instance), the resumed agent's first turn, `fork` of the live
  session (O(1) structural seed + one store row), the child's first turn (its first fold of
  the shared seed), and `fork` of a stored session that is not live (which loads it).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import closing
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import trio

from actorloop.runtime import AgentOptions, CollectorPolicy
from actorloop.runtime.host.runtime import Runtime
from actorloop.runtime.log.session import Session, SessionMeta
from actorloop.runtime.model.chunks import TextDelta, TokenUsage
from actorloop.runtime.model.events import (
    APPEND,
    AssistantChunk,
    AssistantMessage,
    RequestHeaderEvent,
    StepEnd,
    StepStart,
    Trigger,
    TurnEnd,
    TurnEndReason,
    TurnStart,
    UserMessage,
)
from actorloop.runtime.model.header import EpochHeader, LlmCallConfig
from actorloop.runtime.model.messages import USER, Text
from actorloop.runtime.stores import open_store
from actorloop.runtime.testing import EchoProvider

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = RESULTS.parent.parent
OPTIONS = AgentOptions(model="echo-model", system="You are a benchmark agent.")
TURNS = 3
LATENCY = 0.001
LOG_SIZES = (100, 100_000)


def rss_bytes() -> int:
    """Current resident set size (Linux /proc; falls back to the peak elsewhere)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return peak_rss_bytes()


def peak_rss_bytes() -> int:
    """This process's peak resident set: Linux's VmHWM, which starts afresh at exec (the
    `getrusage` peak keeps the parent's across fork + exec); `getrusage` elsewhere."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def open_fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return -1


def mib(value: float) -> float:
    return round(value / (1024 * 1024), 1)


# ---------------------------------------------------------------- many agents


class GcClock:
    """Time spent in the cyclic garbage collector while the block runs."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.collections = 0
        self.by_generation: dict[int, list[float]] = {0: [0, 0.0], 1: [0, 0.0], 2: [0, 0.0]}
        self._started = 0.0

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            took = time.perf_counter() - self._started
            self.seconds += took
            self.collections += 1
            row = self.by_generation[info["generation"]]
            row[0] += 1
            row[1] += took

    def summary(self) -> dict[str, Any]:
        return {
            f"gen{gen}": {"collections": int(count), "seconds": round(took, 3)}
            for gen, (count, took) in self.by_generation.items()
        }

    def __enter__(self) -> GcClock:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *_exc: object) -> None:
        gc.callbacks.remove(self._callback)


async def bench_agents(count: int, root: Path, store: str, managed: bool) -> dict[str, Any]:
    """Spawn `count` agents, run TURNS turns each concurrently, on `store` (`memory` or
    `sqlite`); `managed`: the runtime opens with `CollectorPolicy.many_agents()`."""
    url = "memory:" if store == "memory" else f"sqlite:{root / 'agents.db'}"
    policy = CollectorPolicy.many_agents() if managed else None
    report = await _bench_agents(count, url, policy)
    return {"store": store, "collector": "many_agents" if managed else "default", **report}


async def _bench_agents(count: int, url: str, policy: CollectorPolicy | None) -> dict[str, Any]:
    provider = EchoProvider(latency=LATENCY)
    gc.collect()
    rss_before = rss_bytes()
    fds_before = open_fds()
    async with Runtime.open(store=url, provider=provider, collector=policy) as rt:
        gc_threshold = gc.get_threshold()
        started = time.perf_counter()
        cpu_started = time.process_time()
        agents = [await rt.spawn(OPTIONS, session_id=f"agent-{n:05d}") for n in range(count)]
        spawn_cpu_s = time.process_time() - cpu_started
        spawn_s = time.perf_counter() - started
        gc.collect()
        rss_spawned = rss_bytes()
        fds_live = open_fds()
        failures = 0

        async def drive(agent: Any) -> None:
            nonlocal failures
            for turn in range(TURNS):
                result = await agent.send(f"turn {turn} of {agent.id}")
                if result.reason != "completed":
                    failures += 1

        with GcClock() as gc_clock:
            started = time.perf_counter()
            cpu_started = time.process_time()
            async with trio.open_nursery() as nursery:
                for agent in agents:
                    nursery.start_soon(drive, agent)
            run_cpu_s = time.process_time() - cpu_started
            run_s = time.perf_counter() - started
        gc.collect()
        rss_after = rss_bytes()
        events = sum(len(agent.session) for agent in agents)
        steps = provider.calls
        started = time.perf_counter()
    shutdown_s = time.perf_counter() - started
    if url != "memory:":
        store = open_store(url)
        try:
            sample = await store.load(agents[-1].id)
        finally:
            await store.close()
        if len(sample[1]) != len(agents[-1].session):
            raise RuntimeError("the last agent's stored log differs from its live log")
    if failures or steps != count * TURNS:
        raise RuntimeError(f"benchmark run was not clean: {failures} failed turns, {steps} steps")
    return {
        "agents": count,
        "turns_per_agent": TURNS,
        "provider_latency_s": LATENCY,
        "spawn_s": round(spawn_s, 3),
        "spawn_us_per_agent": round(spawn_s / count * 1e6, 1),
        "spawn_cpu_us_per_agent": round(spawn_cpu_s / count * 1e6, 1),
        "run_wall_s": round(run_s, 3),
        "steps": steps,
        "steps_per_s": round(steps / run_s, 1),
        "cpu_us_per_step": round(run_cpu_s / steps * 1e6, 1),
        "events": events,
        "events_per_s": round(events / run_s, 1),
        "gc_pause_s_during_turns": round(gc_clock.seconds, 3),
        "gc_collections_during_turns": gc_clock.collections,
        "gc_by_generation": gc_clock.summary(),
        "shutdown_s": round(shutdown_s, 3),
        "peak_rss_mib": mib(peak_rss_bytes()),
        "rss_growth_mib": mib(rss_after - rss_before),
        "rss_per_agent_kib": round((rss_after - rss_before) / count / 1024, 1),
        "rss_per_idle_agent_before_turns_kib": round((rss_spawned - rss_before) / count / 1024, 1),
        "open_fds_before": fds_before,
        "open_fds_with_live_agents": fds_live,
        "fds_per_live_agent": round((fds_live - fds_before) / count, 3),
        "fd_soft_limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
        "gc_threshold": list(gc_threshold),
    }


async def isolated_agents_run(count: int, store: str, *, managed: bool) -> dict[str, Any]:
    """One many-agent run in a fresh process (clean RSS and peak figures)."""
    command = [sys.executable, "-m", "benchmarks.bench_runtime", "--agents", str(count)]
    command += ["--agents-only-json", "--store", store, *(["--managed-gc"] if managed else [])]
    done = await trio.run_process(command, cwd=ROOT, capture_stdout=True, check=True)
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def agents_only(count: int, store: str, managed: bool) -> None:
    async def run() -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="actorloop-bench-") as tmp:
            return await bench_agents(count, Path(tmp), store, managed)

    print(json.dumps(trio.run(run)))


async def scale_matrix(small: int, large: int, rounds: int) -> dict[str, Any]:
    """Both stores × both sizes × default and managed collector, each in a fresh process,
    `rounds` times; per store and collector, the median over rounds of the large run's
    steps/s as a ratio to the small run's of the same round."""
    runs: list[dict[str, Any]] = []
    for round_number in range(rounds):
        for store in ("memory", "sqlite"):
            for count in (small, large):
                for managed in (False, True):  # interleaved: both settings see the same load
                    run = await isolated_agents_run(count, store, managed=managed)
                    runs.append({"round": round_number, **run})
    ratios: dict[str, float] = {}
    cpu_ratios: dict[str, float] = {}
    for store in ("memory", "sqlite"):
        for collector in ("default", "many_agents"):
            wall, cpu = [], []
            for round_number in range(rounds):
                by_size = {
                    run["agents"]: run
                    for run in runs
                    if (run["store"], run["collector"], run["round"])
                    == (store, collector, round_number)
                }
                wall.append(by_size[large]["steps_per_s"] / by_size[small]["steps_per_s"])
                # CPU per step is what other processes on shared cores move least.
                cpu.append(by_size[small]["cpu_us_per_step"] / by_size[large]["cpu_us_per_step"])
            ratios[f"{store}, {collector}"] = round(statistics.median(wall), 3)
            cpu_ratios[f"{store}, {collector}"] = round(statistics.median(cpu), 3)
    return {
        "small": small,
        "large": large,
        "rounds": rounds,
        "runs": runs,
        "steps_per_s_large_vs_small": ratios,
        "steps_per_cpu_s_large_vs_small": cpu_ratios,
    }


# ---------------------------------------------------------------- fork / resume latency


def loop_shaped_session(session_id: str, events: int) -> Session:
    """At least `events` events of closed single-step turns, as the loop writes them."""
    session = Session.create(session_id)
    header = EpochHeader(LlmCallConfig("echo-model"), OPTIONS.system, None, None)
    usage = TokenUsage(input=100, output=10)
    turn = 0
    while len(session) < events:
        turn += 1
        session.append("turn/start", TurnStart(turn, Trigger("message", USER)))
        session.append(
            "user/message", UserMessage((Text(f"question {turn}"),), USER), surface_op=APPEND
        )
        session.append("step/start", StepStart(turn, 1))
        if turn == 1:
            session.append("request/header", RequestHeaderEvent(header, "initial"))
        chunk = session.append("assistant/chunk", AssistantChunk(turn, 1, TextDelta(0, "ok")))
        session.append(
            "assistant/message",
            AssistantMessage(turn, 1, (Text("ok"),), "echo", "echo-model", usage),
            surface_op=APPEND,
            source_event_seqs=(chunk.seq,),
        )
        session.append("step/end", StepEnd(turn, 1))
        session.append("turn/end", TurnEnd(turn, TurnEndReason("completed")))
    return session


async def write_directly(url: str, session: Session) -> None:
    store = open_store(url)
    try:
        await store.create(SessionMeta(session.id))
        events = session.events
        for start in range(0, len(events), 5_000):
            await store.append_batch(((session.id, events[start : start + 5_000]),))
    finally:
        await store.close()


async def timed(work: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    started = time.perf_counter()
    value = await work()
    return time.perf_counter() - started, value


async def bench_latency(size: int, root: Path, repeats: int) -> dict[str, Any]:
    url = f"sqlite:{root / f'latency-{size}.db'}"
    source = loop_shaped_session("big", size)
    length = len(source)
    await write_directly(url, source)
    del source
    gc.collect()
    samples: dict[str, list[float]] = {
        "resume_s": [],
        "first_turn_after_resume_s": [],
        "fork_live_s": [],
        "child_first_turn_s": [],
        "fork_stored_s": [],
        "fork_stored_default_boundary_s": [],
    }
    db = root / f"latency-{size}.db"
    rows_after_fork: dict[str, int] = {}
    for attempt in range(repeats):
        async with Runtime.open(store=url, provider=EchoProvider()) as rt:
            took, agent = await timed(lambda: rt.resume("big", OPTIONS))
            samples["resume_s"].append(took)
            took, _ = await timed(lambda a=agent: a.send("one more"))  # type: ignore[misc]
            samples["first_turn_after_resume_s"].append(took)
            child_id = f"child-{attempt}"
            took, child = await timed(lambda c=child_id: rt.fork("big", None, c))  # type: ignore[misc]
            samples["fork_live_s"].append(took)
            if attempt == 0:
                rows_after_fork = child_rows(db, child_id)
            took, _ = await timed(lambda c=child: c.send("child turn"))  # type: ignore[misc]
            samples["child_first_turn_s"].append(took)
            await agent.dispose()
            last_end = len(agent.session) - 1
            took, _ = await timed(
                lambda a=attempt, e=last_end: rt.fork(  # type: ignore[misc]
                    "big", e, f"stored-child-{a}", OPTIONS
                )
            )
            samples["fork_stored_s"].append(took)
            took, _ = await timed(
                lambda a=attempt: rt.fork(  # type: ignore[misc]
                    "big", None, f"stored-default-{a}", OPTIONS
                )
            )
            samples["fork_stored_default_boundary_s"].append(took)
    rows_after_turn = child_rows(db, "child-0")
    row: dict[str, Any] = {"events": length, "repeats": repeats}
    for name, values in samples.items():
        row[name.removesuffix("_s") + "_ms"] = round(statistics.median(values) * 1e3, 3)
    row["child_store_rows"] = {
        "seed_length": rows_after_fork["seed_length"],
        "own_rows_after_fork": rows_after_fork["own_rows"],
        "own_rows_after_its_first_turn": rows_after_turn["own_rows"],
    }
    return row


def child_rows(db: Path, child_id: str) -> dict[str, int]:
    with closing(sqlite3.connect(db)) as conn:
        (rows,) = conn.execute(
            "SELECT COUNT(*) FROM events WHERE session_id = ?", (child_id,)
        ).fetchone()
        (seed,) = conn.execute(
            "SELECT seed_length FROM sessions WHERE id = ?", (child_id,)
        ).fetchone()
    return {"own_rows": int(rows), "seed_length": int(seed)}


# ---------------------------------------------------------------- report


def versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "platform": platform.platform()}
    for name in ("trio", "attrs", "cattrs", "orjson"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "?"
    return out


async def main(agents: int, quick: bool) -> dict[str, Any]:
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="actorloop-bench-") as tmp:
        root = Path(tmp)
        latency = {}
        for size in LOG_SIZES if not quick else (100, 10_000):
            latency[str(size)] = await bench_latency(size, root, repeats=3 if size > 1_000 else 10)
    # Each many-agent run in a fresh process: clean RSS and peak figures per run.
    scale = await scale_matrix(max(agents // 10, 1), agents, 1 if quick else SCALE_ROUNDS)
    large_sqlite = [
        run
        for run in scale["runs"]
        if run["store"] == "sqlite" and run["agents"] == agents and run["round"] == 0
    ]
    many, tuned = sorted(large_sqlite, key=lambda run: run["collector"] != "default")
    return {
        "benchmark": "runtime",
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S%z"),
        "versions": versions(),
        "cpus": os.cpu_count(),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "many_agents": many,
        "many_agents_gc_tuned": tuned,
        "scale": scale,
        "fork_resume_latency": latency,
    }


def render(report: dict[str, Any]) -> str:
    v = report["versions"]
    m = report["many_agents"]
    t = report["many_agents_gc_tuned"]

    def cell(value: Any, unit: str) -> str:
        return f"{value:,}{unit}" if isinstance(value, int) else f"{value}{unit}"

    def row(label: str, key: str, unit: str = "") -> str:
        return f"| {label} | {cell(m[key], unit)} | {cell(t[key], unit)} |"

    def gen2(run: dict[str, Any]) -> str:
        full = run["gc_by_generation"]["gen2"]
        return f"{full['seconds']} s in {full['collections']} collections"

    lines = [
        "# Runtime benchmark",
        "",
        f"`python -m benchmarks.bench_runtime` — Python {v['python']} on {v['platform']} "
        f"({report['cpus']} CPUs; trio {v['trio']}, orjson {v['orjson']}), {report['date']}.",
        f"Load average (1/5/15 min) before: {report['load_average_before']}, after: "
        f"{report['load_average_after']} (the machine may be shared: other processes' load "
        "shows here).",
        "",
        f"## {m['agents']:,} agents × {m['turns_per_agent']} turns in one process",
        "",
        "SQLite store (`synchronous=NORMAL`, WAL) in a temp dir; `EchoProvider` with "
        f"{m['provider_latency_s'] * 1e3:g} ms latency; one model step per turn; dev "
        "invariants off; all agents run their turns concurrently. Run twice: with Python's "
        f"default collector thresholds {tuple(m['gc_threshold'])}, then with "
        "`collector=CollectorPolicy.many_agents()` (thresholds "
        f"{tuple(t['gc_threshold'])}, `gc.freeze()` after every start; "
        "docs/performance.md).",
        "",
        "| metric | default GC | `many_agents()` |",
        "|---|---:|---:|",
        row("spawn (sequential `rt.spawn`)", "spawn_s", " s"),
        row("spawn per agent", "spawn_us_per_agent", " µs"),
        row("wall time of all turns", "run_wall_s", " s"),
        row("steps (model calls)", "steps"),
        row("**steps/s**", "steps_per_s"),
        row("events persisted per s", "events_per_s"),
        row("GC pause time during the turns", "gc_pause_s_during_turns", " s"),
        f"| … of it in full (gen2) collections | {gen2(m)} | {gen2(t)} |",
        row("shutdown (dispose all, flush, close)", "shutdown_s", " s"),
        row("RSS growth", "rss_growth_mib", " MiB"),
        row("RSS per agent (after its turns)", "rss_per_agent_kib", " KiB"),
        row(
            "RSS per idle agent (spawned, no turn yet)",
            "rss_per_idle_agent_before_turns_kib",
            " KiB",
        ),
        row("peak RSS (VmHWM; a fresh process per run)", "peak_rss_mib", " MiB"),
        row("open fds with all agents live", "open_fds_with_live_agents"),
        row("fds per live agent", "fds_per_live_agent"),
        "",
        f"Open fds before spawning: {m['open_fds_before']}; soft limit "
        f"{m['fd_soft_limit']}. On `sqlite:` an agent's writer lease is a lock on one byte of "
        "one of the database's 16 lease lock files (persistence.md §5), so live agents add no "
        "descriptors; the JSONL store keeps a flock'd lock file per live session, and "
        "`Runtime` raises the soft `RLIMIT_NOFILE` to the hard limit on the first EMFILE.",
        "",
        *scale_lines(report["scale"]),
        "## Fork and resume latency by log size",
        "",
        "Sessions written straight through the store (closed single-step turns), median of "
        "the repeats. *resume* = load + validate + new loop instance; *fork (live)* = "
        "`rt.fork` of the resumed agent (structural seed, one store row); *child first turn* "
        "includes the child's first fold of its shared seed; *fork (stored)* forks a session "
        "no agent owns at an explicit boundary (the store checks it, the child loads its "
        "seed); *default boundary* must load the whole log to find its last event.",
        "",
        "| events | resume ms | first turn after resume ms | fork (live) ms | "
        "child first turn ms | fork (stored) ms | fork (stored, default boundary) ms | "
        "child rows after fork / turn / seed |",
        "|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for entry in report["fork_resume_latency"].values():
        rows = entry["child_store_rows"]
        lines.append(
            f"| {entry['events']:,} | {entry['resume_ms']} | "
            f"{entry['first_turn_after_resume_ms']} | {entry['fork_live_ms']} | "
            f"{entry['child_first_turn_ms']} | {entry['fork_stored_ms']} | "
            f"{entry['fork_stored_default_boundary_ms']} | "
            f"{rows['own_rows_after_fork']} / {rows['own_rows_after_its_first_turn']} / "
            f"{rows['seed_length']:,} |"
        )
    full = m["gc_by_generation"]["gen2"]
    big = report["fork_resume_latency"][max(report["fork_resume_latency"], key=int)]
    per_event_us = big["resume_ms"] * 1e3 / big["events"]
    lines += [
        "",
        "## Notes",
        "",
        f"* **Garbage collection dominates at this scale.** With the default thresholds "
        f"{gc_share(m):.0%} of the turns' wall time is collector pauses, "
        f"{full['seconds']} s of it in {full['collections']} full collections "
        f"(~{pause_ms(full):.0f} ms each, during which no agent runs). The tuned run frees "
        "as much memory (same RSS): the log's frozen events, messages and requests form no "
        "cycles, so a full collection finds next to nothing. A runtime leaves the "
        "process-wide collector alone unless given a `CollectorPolicy`; "
        "`CollectorPolicy.many_agents()` is the documented setting for thousands of agents "
        "(docs/performance.md).",
        "* Spawn cost on `sqlite:` is mostly the store: one autocommit INSERT and the lease "
        "lock (docs/performance.md breaks it down).",
        f"* Resume is a full load: decode + re-validate every event "
        f"(~{per_event_us:.0f} µs/event at {big['events']:,} events). A live fork is O(1) "
        f"({big['fork_live_ms']} ms at {big['events']:,} events; the child's store record "
        "holds no parent event); the child pays one fold of its shared seed on its first "
        "turn.",
    ]
    return "\n".join(lines) + "\n"


def scale_lines(scale: dict[str, Any]) -> list[str]:
    """The store × size × collector table and the large-vs-small ratios."""
    small, large = scale["small"], scale["large"]
    lines = [
        f"## {small:,} vs {large:,} agents: `memory:` and `sqlite:`, default and managed GC",
        "",
        f"Same workload ({TURNS} turns per agent, 1 ms model latency), each run in a fresh "
        f"process, {scale['rounds']} round(s), runs interleaved (store, size, then collector) "
        "within a round; the ratios are medians over the rounds of each round's ratio. "
        "*CPU µs/step* is the "
        "process's CPU time over the turns / steps; *idle* RSS is per agent after the spawns, "
        "before any turn; *after turns* includes each agent's log of "
        f"{TURNS} turns.",
        "",
        "| round | store | agents | collector | steps/s | CPU µs/step | GC s | peak RSS MiB | "
        "RSS/agent idle KiB | RSS/agent after turns KiB | spawn CPU µs/agent |",
        "|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in scale["runs"]:
        lines.append(
            f"| {run['round'] + 1} | `{run['store']}:` | {run['agents']:,} | {run['collector']} | "
            f"{run['steps_per_s']:,.0f} | {run['cpu_us_per_step']:,.0f} | "
            f"{run['gc_pause_s_during_turns']:.2f} | {run['peak_rss_mib']} | "
            f"{run['rss_per_idle_agent_before_turns_kib']} | {run['rss_per_agent_kib']} | "
            f"{run['spawn_cpu_us_per_agent']:,.0f} |"
        )
    lines += [
        "",
        f"{large:,} agents vs {small:,} (target ≥ 0.9, issue 38): steps/s (wall) and steps per CPU "
        "second (what other processes on the shared cores barely move).",
        "",
        "| store, collector | steps/s ratio | steps per CPU s ratio |",
        "|---|---:|---:|",
    ]
    for key, ratio in scale["steps_per_s_large_vs_small"].items():
        cpu = scale["steps_per_cpu_s_large_vs_small"][key]
        lines.append(f"| {key} | {ratio:.3f} | **{cpu:.3f}** |")
    lines.append("")
    return lines


def gc_share(run: dict[str, Any]) -> float:
    return float(run["gc_pause_s_during_turns"]) / float(run["run_wall_s"])


def pause_ms(generation: dict[str, Any]) -> float:
    count = generation["collections"]
    return float(generation["seconds"]) * 1e3 / count if count else 0.0


SCALE_ROUNDS = 3
IDLE_AGENTS = 2_000
IDLE_ROUNDS = 3
WARM_AGENTS_NOTE = "50 warm-up agents first (caches and the store's first pages)"


def idle_rss_comparison(baseline: str) -> dict[str, Any]:
    """RSS per idle agent, this tree vs `baseline` (a Python whose `actorloop` is another
    checkout), by `benchmarks/idle_probe.py` in fresh processes, interleaved round by
    round; the median per interpreter, store and turns."""
    probe = str(Path(__file__).resolve().parent / "idle_probe.py")
    interpreters = {"this tree": sys.executable, "baseline": baseline}
    samples: dict[tuple[str, str, int], list[float]] = {}
    for _ in range(IDLE_ROUNDS):
        for store in ("memory", "sqlite"):
            for turns in (0, 1, 3):
                for label, python in interpreters.items():
                    done = subprocess.run(
                        [python, probe, store, str(IDLE_AGENTS), str(turns)],
                        cwd="/",
                        capture_output=True,
                        check=True,
                        text=True,
                    )
                    row = json.loads(done.stdout)
                    key = (label, store, turns)
                    samples.setdefault(key, []).append(row["rss_kib_per_agent"])
    rows = [
        {
            "tree": label,
            "store": store,
            "turns": turns,
            "rss_kib_per_agent_median": round(statistics.median(values), 2),
            "samples": values,
        }
        for (label, store, turns), values in samples.items()
    ]
    return {"agents": IDLE_AGENTS, "rounds": IDLE_ROUNDS, "baseline": baseline, "rows": rows}


def render_idle(report: dict[str, Any]) -> str:
    by_key = {(row["tree"], row["store"], row["turns"]): row for row in report["rows"]}
    lines = [
        "# RSS per idle agent: this tree vs a baseline",
        "",
        f"`python -m benchmarks.bench_runtime --idle-baseline {report['baseline']}` — "
        f"{report['date']}, 2-core shared machine. `benchmarks/idle_probe.py` in a fresh "
        f"process per sample: {WARM_AGENTS_NOTE}, then {report['agents']:,} agents spawned "
        "and each run through N turns one after another (EchoProvider); resident growth per "
        f"agent after a collection. Median of {report['rounds']} rounds, the two trees "
        "interleaved. After 0 turns the agent holds only its loop, session and mailbox; each "
        "turn adds its log (11 events).",
        "",
        "| store | turns | baseline KiB/agent | this tree KiB/agent | this / baseline |",
        "|---|---:|---:|---:|---:|",
    ]
    for store in ("memory", "sqlite"):
        for turns in (0, 1, 3):
            base = by_key[("baseline", store, turns)]["rss_kib_per_agent_median"]
            ours = by_key[("this tree", store, turns)]["rss_kib_per_agent_median"]
            lines.append(f"| `{store}:` | {turns} | {base:.2f} | {ours:.2f} | {ours / base:.3f} |")
    return "\n".join(lines) + "\n"


def cli() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1,000 agents; 100/10k logs")
    parser.add_argument("--agents", type=int, default=None)
    parser.add_argument("--agents-only-json", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--managed-gc", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--store", choices=("memory", "sqlite"), default="sqlite")
    parser.add_argument(
        "--idle-baseline",
        metavar="PYTHON",
        help="only compare RSS per idle agent with PYTHON's actorloop (results/idle_rss.*)",
    )
    args = parser.parse_args()
    agents = args.agents or (1_000 if args.quick else 10_000)
    if args.idle_baseline:
        idle = idle_rss_comparison(args.idle_baseline)
        idle["date"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S%z")
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "idle_rss.json").write_text(json.dumps(idle, indent=2) + "\n")
        (RESULTS / "idle_rss.md").write_text(render_idle(idle))
        print(render_idle(idle))
        return
    if args.agents_only_json:
        agents_only(agents, args.store, args.managed_gc)
        return
    report = trio.run(main, agents, args.quick)
    text = render(report)
    RESULTS.mkdir(exist_ok=True)
    suffix = "-quick" if args.quick else ""
    (RESULTS / f"runtime{suffix}.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / f"runtime{suffix}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    cli()
