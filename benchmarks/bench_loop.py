"""Loop benchmark: runtime overhead per model step as the history grows, and steps/s with
many agents in one process.

Run from the repository root:

    python -m benchmarks.bench_loop [--quick]

Writes benchmarks/results/loop.json and benchmarks/results/loop.md (`--quick` writes
loop-quick.*).

Setup: `Runtime.open(store="memory:", provider=EchoProvider(), dev_invariants=False)`; the
provider answers at once (no latency), so what is timed is the runtime itself: inbox
hand-off, turn/step bookkeeping, the seams (no listeners), the boundary snapshot, header
recording, request building and digest, chunk appends, the assistant message, and the two
flush barriers per step through the CodecActor into the memory store.

* **Per-step overhead vs history** — agents are grown (by running real one-step turns) to a
  log of about 10, 1,000 and 10,000 events; then single-step turns are timed one by one with
  `await agent.send(...)` (one turn = one step = 11 events). Reported: median and mean µs per
  step, and the ratio of the 10,000-event median to the 10-event median (flat ≈ 1). At ~10
  events every sample is a fresh agent's second turn, so the history really is ~10 events.
* **Many agents** — 1,000 agents spawned in one runtime each run turns concurrently; steps/s
  is total steps over wall time of the concurrent phase.
* **Dev invariants** — per-step CPU time (this thread) with the dev invariant off, on (the
  incremental replay kept per session), and on with the from-scratch check it replaced (a
  snapshot of the whole log replayed per request: `check_request(session.events, ...)`), at
  ~80, ~1,000 and ~10,000 events. The three runtimes are open side by side in one process and
  their turns are interleaved round by round, so the ratios share the machine's state.

Numbers are from whatever machine runs this (a 2-core shared box for the committed results):
compare ratios rather than absolute values.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import sys
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import trio

from actorloop.runtime import Agent, AgentOptions
from actorloop.runtime.host.runtime import Runtime
from actorloop.runtime.log.invariants import check_request
from actorloop.runtime.log.request import Request
from actorloop.runtime.log.session import Session
from actorloop.runtime.model.chunks import StreamChunk
from actorloop.runtime.providers.base import ModelInfo, opened_stream
from actorloop.runtime.testing import EchoProvider

RESULTS = Path(__file__).resolve().parent / "results"
OPTIONS = AgentOptions(model="bench-model", system="You are a benchmark.")
EVENTS_PER_TURN = (
    11  # turn/start, user/message, step/start, 5 chunks, assistant, step/end, turn/end
)


async def _grow(agent: Agent, events: int) -> None:
    while len(agent.session) < events:
        await agent.send("grow the history")


async def _time_turn(agent: Agent) -> tuple[float, float]:
    """Wall and CPU (this thread) seconds of one single-step turn."""
    started, cpu_started = time.perf_counter(), time.thread_time()
    result = await agent.send("what is the time?")
    cpu = time.thread_time() - cpu_started
    wall = time.perf_counter() - started
    assert result.reason == "completed", result
    return wall, cpu


async def _per_step(history: int, agents: int, turns: int) -> dict[str, Any]:
    samples: list[float] = []
    cpu: list[float] = []
    sizes: list[int] = []
    async with Runtime.open(store="memory:", provider=EchoProvider(), compaction=True) as rt:
        grown: list[Agent] = []
        for _ in range(agents):
            agent = await rt.spawn(OPTIONS)
            # The first turn composes the prefix and writes the initial header: a warm-up.
            await agent.send("warm up")
            await _grow(agent, history)
            sizes.append(len(agent.session))
            grown.append(agent)
        gc.collect()
        # Round robin, one turn per agent per round: every size is timed the same way.
        for _ in range(turns):
            for agent in grown:
                wall, cpu_time = await _time_turn(agent)
                samples.append(wall)
                cpu.append(cpu_time)
    median = statistics.median(samples)
    return {
        "target_events": history,
        "history_events_at_start": round(statistics.mean(sizes)),
        "history_events_at_end": round(statistics.mean(sizes)) + turns * EVENTS_PER_TURN,
        "steps_timed": len(samples),
        "median_us_per_step": round(median * 1e6, 1),
        "mean_us_per_step": round(statistics.fmean(samples) * 1e6, 1),
        "p90_us_per_step": round(statistics.quantiles(samples, n=10)[-1] * 1e6, 1),
        "median_cpu_us_per_step": round(statistics.median(cpu) * 1e6, 1),
    }


async def _many_agents(count: int, turns: int) -> dict[str, Any]:
    async with Runtime.open(store="memory:", provider=EchoProvider()) as rt:
        started = time.perf_counter()
        agents = [await rt.spawn(OPTIONS) for _ in range(count)]
        spawned = time.perf_counter()

        async def run(agent: Agent) -> None:
            for _ in range(turns):
                result = await agent.send("hello")
                assert result.reason == "completed", result

        gc.collect()
        began = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for agent in agents:
                nursery.start_soon(run, agent)
        ended = time.perf_counter()
        events = sum(len(agent.session) for agent in agents)
    wall = ended - began
    steps = count * turns
    return {
        "agents": count,
        "turns_per_agent": turns,
        "steps": steps,
        "spawn_us_per_agent": round((spawned - started) / count * 1e6, 1),
        "wall_s": round(wall, 3),
        "steps_per_s": round(steps / wall),
        "events_per_s": round(events / wall),
        "us_per_step_amortized": round(wall / steps * 1e6, 1),
    }


class FromScratchCheck:
    """The dev invariant as it was before the incremental replay: every request replays a
    snapshot of the whole log from scratch. `enabled` is off while the history is grown."""

    name = "echo"

    def __init__(self) -> None:
        self.inner = EchoProvider()
        self.sessions: dict[str, Session] = {}
        self.enabled = False

    def model_info(self, model: str) -> ModelInfo | None:
        return self.inner.model_info(model)

    async def stream(self, request: Request) -> AsyncIterator[StreamChunk]:
        if self.enabled and not request.one_shot:
            check_request(self.sessions[request.session_id].events, request)
        async with opened_stream(self.inner, request) as stream:
            async for chunk in stream:
                yield chunk


async def _invariant_cost(history: int, rounds: int) -> dict[str, Any]:
    """Per-step CPU µs with the invariant off / incremental / from scratch, interleaved."""
    scratch = FromScratchCheck()
    modes = ("off", "incremental", "from_scratch")
    cpu: dict[str, list[float]] = {mode: [] for mode in modes}
    async with (
        Runtime.open(store="memory:", provider=EchoProvider()) as off,
        Runtime.open(store="memory:", provider=EchoProvider(), dev_invariants=True) as on,
        Runtime.open(store="memory:", provider=scratch) as old,
    ):
        agents: dict[str, Agent] = {}
        for mode, rt in zip(modes, (off, on, old), strict=True):
            agent = agents[mode] = await rt.spawn(OPTIONS)
            scratch.sessions[agent.id] = agent.session
            await _grow(agent, history)
        scratch.enabled = True
        gc.collect()
        for _ in range(rounds):
            for mode in modes:
                _wall, cpu_time = await _time_turn(agents[mode])
                cpu[mode].append(cpu_time)
        size = len(agents["off"].session)
    median = {mode: statistics.median(samples) * 1e6 for mode, samples in cpu.items()}
    return {
        "target_events": history,
        "history_events_at_end": size,
        "steps_timed_per_mode": rounds,
        "median_cpu_us_off": round(median["off"], 1),
        "median_cpu_us_incremental": round(median["incremental"], 1),
        "median_cpu_us_from_scratch": round(median["from_scratch"], 1),
        "ratio_incremental_vs_off": round(median["incremental"] / median["off"], 3),
        "ratio_from_scratch_vs_off": round(median["from_scratch"] / median["off"], 3),
    }


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in ("trio", "attrs", "cattrs", "orjson"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "?"
    return out


async def _warm_up() -> None:
    """First use builds cattrs hooks and fills caches: keep that out of the first samples."""
    async with Runtime.open(store="memory:", provider=EchoProvider()) as rt:
        agent = await rt.spawn(OPTIONS)
        for _ in range(100):
            await agent.send("warm up")


async def _run(quick: bool) -> dict[str, Any]:
    await _warm_up()
    plan = (
        [(10, 40, 1), (1_000, 3, 10), (10_000, 1, 10)]
        if quick
        else [(10, 300, 1), (1_000, 10, 20), (10_000, 3, 40)]
    )
    per_step = [await _per_step(history, agents, turns) for history, agents, turns in plan]
    by_size = {row["target_events"]: row for row in per_step}
    small, large = by_size[10], by_size[10_000]
    many = await _many_agents(1_000, 2 if quick else 5)
    rounds = 10 if quick else 40
    invariants = [await _invariant_cost(size, rounds) for size in (80, 1_000, 10_000)]
    return {
        # Headline figures first (the benchmark summary reads the top-level numbers).
        "per_step_us_at_10_events": small["median_us_per_step"],
        "per_step_us_at_1000_events": by_size[1_000]["median_us_per_step"],
        "per_step_us_at_10000_events": large["median_us_per_step"],
        "ratio_10000_vs_10": round(large["median_us_per_step"] / small["median_us_per_step"], 3),
        "cpu_ratio_10000_vs_10": round(
            large["median_cpu_us_per_step"] / small["median_cpu_us_per_step"], 3
        ),
        "steps_per_s_1000_agents": many["steps_per_s"],
        "dev_invariants_ratio_at_80_events": invariants[0]["ratio_incremental_vs_off"],
        "dev_invariants_ratio_at_10000_events": invariants[-1]["ratio_incremental_vs_off"],
        "per_step": per_step,
        "dev_invariants": invariants,
        "many_agents": many,
        "workload": {
            "provider": "EchoProvider (no latency)",
            "store": "memory:",
            "dev_invariants": False,
            "events_per_step": EVENTS_PER_TURN,
        },
        "environment": {
            "platform": platform.platform(),
            "machine": platform.machine(),
            "generated": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S%z"),
            "quick": quick,
        },
        "versions": _versions(),
    }


def to_markdown(report: dict[str, Any]) -> str:
    env, versions = report["environment"], report["versions"]
    lines = [
        "# Loop benchmark",
        "",
        f"`python -m benchmarks.bench_loop{' --quick' if env['quick'] else ''}` — Python "
        f"{versions['python']} on {env['platform']} (trio {versions['trio']}, attrs "
        f"{versions['attrs']}, cattrs {versions['cattrs']}, orjson {versions['orjson']}), "
        f"{env['generated']}.",
        "",
        "## Runtime overhead per step vs history length",
        "",
        "EchoProvider without latency, memory store, dev invariants off; each sample is one "
        f"single-step turn (`await agent.send(...)`, {EVENTS_PER_TURN} events incl. both flush "
        "barriers). Flat cost means a ratio of ~1.",
        "",
        "| history (events) | steps timed | median µs/step | mean µs/step | p90 µs/step "
        "| median CPU µs/step |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in report["per_step"]:
        span = f"{row['history_events_at_start']:,}–{row['history_events_at_end']:,}"
        lines.append(
            f"| {span} | {row['steps_timed']:,} | {row['median_us_per_step']:.1f} | "
            f"{row['mean_us_per_step']:.1f} | {row['p90_us_per_step']:.1f} | "
            f"{row['median_cpu_us_per_step']:.1f} |"
        )
    lines += [
        "",
        f"Ratio 10,000 / 10 events (median wall): **{report['ratio_10000_vs_10']:.3f}**; "
        f"median CPU time of the loop's thread: **{report['cpu_ratio_10000_vs_10']:.3f}**.",
        "",
        "Mean and p90 include the occasional cyclic-GC pause and the scheduling of other "
        "processes on a shared machine; the CPU column is this thread's CPU time only.",
        "",
        "## Many agents in one process",
        "",
    ]
    many = report["many_agents"]
    lines += [
        "| agents | turns each | steps | wall s | steps/s | events/s | spawn µs/agent |",
        "|---:|---:|---:|---:|---:|---:|---:|",
        f"| {many['agents']:,} | {many['turns_per_agent']} | {many['steps']:,} | "
        f"{many['wall_s']:.3f} | {many['steps_per_s']:,} | {many['events_per_s']:,} | "
        f"{many['spawn_us_per_agent']:.1f} |",
        "",
        "## Dev invariants on vs off",
        "",
        "Median CPU µs per single-step turn (this thread), three runtimes side by side in one "
        "process, turns interleaved round by round: invariant off, on (incremental replay kept "
        "per session), and the from-scratch check it replaced (the whole log snapshotted and "
        "replayed per request). Target: on ≤ 1.5× off, flat to 10k events.",
        "",
        "| history (events) | steps per mode | off µs | incremental µs | from-scratch µs "
        "| incremental / off | from-scratch / off |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in report["dev_invariants"]:
        lines.append(
            f"| {row['target_events']:,} | {row['steps_timed_per_mode']} | "
            f"{row['median_cpu_us_off']:.1f} | {row['median_cpu_us_incremental']:.1f} | "
            f"{row['median_cpu_us_from_scratch']:.1f} | "
            f"**{row['ratio_incremental_vs_off']:.3f}** | {row['ratio_from_scratch_vs_off']:.3f} |"
        )
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_loop", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer samples (smoke run)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    report = trio.run(_run, args.quick)
    suffix = "-quick" if args.quick else ""
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"loop{suffix}.json").write_text(json.dumps(report, indent=2) + "\n")
    markdown = to_markdown(report)
    (RESULTS / f"loop{suffix}.md").write_text(markdown)
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
