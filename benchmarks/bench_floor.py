"""Floor benchmark: the per-step cost of actorloop as a ratio to the least work a step of the
same shape must do, both measured in the same process, so the ratios mean the same on any
machine.

Run from the repository root:

    python -m benchmarks.bench_floor [--quick]

Writes benchmarks/results/floor.json and floor.md (`--quick` writes floor-quick.*).

* **Step** — one agent per store (`memory:` and `sqlite:` in a temporary directory), side by
  side in one runtime each; every turn is a user message, a model step that calls the `echo`
  tool (a JSON-Schema, so its arguments are validated), the tool run, and a model step that
  answers with text. CPU time of the process (`time.process_time`, so the sqlite writer
  thread counts) per turn, divided by its 2 model steps.
* **Floors**, per model step, built from the events the step really wrote (the last timed
  turn's, unstructured before the clock starts):
  * `memory:` — `orjson.dumps` of each of the step's events, one round trip to another trio
    task (the flush barrier) and one checkpoint per chunk the provider streams;
  * `sqlite:` — the same encodes, then two commits through a worker thread
    (`trio.to_thread.run_sync`: BEGIN, INSERT the step's rows, COMMIT) into a WAL database
    with the store's table and `synchronous=NORMAL`;
  * resume — of a session of 100,000 events (10,000 with --quick) written through the
    store: the SQL SELECT of its rows plus `orjson.loads` of every body, with the cyclic
    collector paused as `Runtime.resume` pauses it (a collection over the parsed bodies would
    cost the floor as much again, work no resume does), against `Runtime.resume` of the same
    session (CPU time). `--resume-baseline PYTHON [--rounds N]`
    measures only this figure, for this tree and a baseline tree's interpreter in
    interleaved fresh subprocesses (floor_resume.json / .md).
* Rounds interleave the step and its floor; each figure is the median over rounds.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
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

import orjson
import trio

from actorloop.codecs.converter import event_to_dict
from actorloop.runtime import AgentOptions, Tool
from actorloop.runtime.control.handle import Agent
from actorloop.runtime.host.runtime import Runtime
from actorloop.runtime.stores.sqlite import EVENTS_TABLE
from actorloop.runtime.testing import EchoProvider, ScriptedProvider, reply, tool_call
from benchmarks.bench_runtime import loop_shaped_session, write_directly

RESULTS = Path(__file__).resolve().parent / "results"
STEPS_PER_TURN = 2
TOOL_SCHEMA = {
    "type": "object",
    "properties": {"x": {"type": "string"}},
    "required": ["x"],
    "additionalProperties": False,
}
FLOOR_REPEATS = 200
"""Floor repetitions per round (the floor is a few µs: one sample is too short to time)."""


async def _echo(args: dict[str, Any], ctx: Any) -> str:
    return "echo:" + args["x"]


TOOL = Tool("echo", "Echo the argument x back.", TOOL_SCHEMA, _echo)
OPTIONS = AgentOptions(model="floor-model", system="You are a benchmark.", tools=(TOOL,))


class StepAgent:
    """One agent on one store; `turn()` runs a tool-call + text turn and returns its CPU s."""

    def __init__(self, agent: Agent, provider: ScriptedProvider) -> None:
        self.agent = agent
        self.provider = provider
        self.turns = 0
        self.last_turn_events: list[dict[str, Any]] = []

    async def turn(self) -> float:
        self.turns += 1
        number = self.turns
        self.provider.push(
            tool_call(f"call-{number}", "echo", {"x": f"turn-{number}"}),
            reply(f"echoed turn-{number}"),
        )
        start = len(self.agent.session)
        began = time.process_time()
        result = await self.agent.send(f"please echo turn-{number}")
        took = time.process_time() - began
        if result.reason != "completed":
            raise RuntimeError(f"turn {number} ended {result.reason}")
        self.last_turn_events = [
            event_to_dict(event) for event in self.agent.session.events_since(start)
        ]
        return took


class Floors:
    """The floor operations, each timed over FLOOR_REPEATS repetitions (CPU s per step)."""

    def __init__(self, db: Path, nursery: trio.Nursery) -> None:
        self._db = sqlite3.connect(db, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode = WAL")
        self._db.execute("PRAGMA synchronous = NORMAL")
        self._db.execute(EVENTS_TABLE)
        self._seq = 0
        self._requests, requests = trio.open_memory_channel[trio.Event](0)
        nursery.start_soon(self._barrier_peer, requests)

    def close(self) -> None:
        self._db.close()

    @staticmethod
    async def _barrier_peer(requests: trio.MemoryReceiveChannel[trio.Event]) -> None:
        async with requests:
            async for done in requests:
                done.set()

    async def _barrier(self) -> None:
        done = trio.Event()
        await self._requests.send(done)
        await done.wait()

    @staticmethod
    def _encode(step_events: list[dict[str, Any]]) -> list[bytes]:
        return [orjson.dumps(event) for event in step_events]

    async def memory(self, step_events: list[dict[str, Any]], checkpoints: int) -> float:
        began = time.process_time()
        for _ in range(FLOOR_REPEATS):
            self._encode(step_events)
            await self._barrier()
            for _ in range(checkpoints):
                await trio.lowlevel.checkpoint()
        return (time.process_time() - began) / FLOOR_REPEATS

    def _commit(self, rows: list[tuple[Any, ...]]) -> None:
        self._db.execute("BEGIN")
        self._db.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?)", rows)
        self._db.execute("COMMIT")

    def _rows(self, bodies: list[bytes], step_events: list[dict[str, Any]]) -> list[tuple]:
        rows = []
        for body, event in zip(bodies, step_events, strict=True):
            rows.append(("floor", self._seq, event["type"], event["time"], body, 0))
            self._seq += 1
        return rows

    async def sqlite(self, step_events: list[dict[str, Any]], repeats: int) -> float:
        half = len(step_events) // 2
        began = time.process_time()
        for _ in range(repeats):
            bodies = self._encode(step_events)
            rows = self._rows(bodies, step_events)
            await trio.to_thread.run_sync(self._commit, rows[:half])
            await trio.to_thread.run_sync(self._commit, rows[half:])
        return (time.process_time() - began) / repeats


def _step_events(turn_events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events of one model step: half a two-step turn (rounded up)."""
    return turn_events[: (len(turn_events) + 1) // STEPS_PER_TURN]


def _chunks_per_step() -> int:
    """The provider's checkpoints per step: one per streamed chunk, averaged over the turn."""
    chunks = len(tool_call("c", "echo", {"x": "turn-1"})) + len(reply("echoed turn-1"))
    return round(chunks / STEPS_PER_TURN)


async def bench_steps(root: Path, rounds: int, turns_per_round: int) -> dict[str, Any]:
    samples: dict[str, list[float]] = {"memory": [], "sqlite": [], "floor_memory": []}
    samples["floor_sqlite"] = []
    checkpoints = _chunks_per_step()
    memory_provider, sqlite_provider = ScriptedProvider(), ScriptedProvider()
    async with (
        Runtime.open(store="memory:", provider=memory_provider) as memory_rt,
        Runtime.open(store=f"sqlite:{root / 'steps.db'}", provider=sqlite_provider) as sq_rt,
        trio.open_nursery() as nursery,
    ):
        floors = Floors(root / "floor.db", nursery)
        try:
            agents = {
                "memory": StepAgent(await memory_rt.spawn(OPTIONS), memory_provider),
                "sqlite": StepAgent(await sq_rt.spawn(OPTIONS), sqlite_provider),
            }
            for agent in agents.values():  # warm-up: hooks, caches, schema compile
                for _ in range(20):
                    await agent.turn()
            gc.collect()
            for _ in range(rounds):
                for name, agent in agents.items():
                    took = [await agent.turn() for _ in range(turns_per_round)]
                    samples[name].append(statistics.median(took) / STEPS_PER_TURN)
                step = _step_events(agents["memory"].last_turn_events)
                samples["floor_memory"].append(await floors.memory(step, checkpoints))
                samples["floor_sqlite"].append(await floors.sqlite(step, turns_per_round))
            events_per_turn = len(agents["memory"].last_turn_events)
            history = len(agents["memory"].agent.session)
        finally:
            floors.close()
            nursery.cancel_scope.cancel()
    median = {name: statistics.median(values) * 1e6 for name, values in samples.items()}
    return {
        "rounds": rounds,
        "turns_per_round": turns_per_round,
        "events_per_turn": events_per_turn,
        "events_per_step_in_floor": (events_per_turn + 1) // STEPS_PER_TURN,
        "checkpoints_per_step_in_floor": checkpoints,
        "history_events_at_end": history,
        "step_cpu_us_memory": round(median["memory"], 1),
        "step_cpu_us_sqlite": round(median["sqlite"], 1),
        "floor_cpu_us_memory": round(median["floor_memory"], 1),
        "floor_cpu_us_sqlite": round(median["floor_sqlite"], 1),
        "ratio_memory_to_floor": round(median["memory"] / median["floor_memory"], 2),
        "ratio_sqlite_to_floor": round(median["sqlite"] / median["floor_sqlite"], 2),
    }


def _select_and_parse(db: Path, session_id: str) -> int:
    with closing(sqlite3.connect(db)) as conn:
        rows = conn.execute(
            "SELECT body FROM events WHERE session_id = ? ORDER BY seq", (session_id,)
        )
        return len([orjson.loads(body) for (body,) in rows])


async def _cpu(work: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    began = time.process_time()
    value = await work()
    return time.process_time() - began, value


async def _resume_round(db: Path) -> tuple[float, float, int]:
    """One round of the resume figure: (floor CPU s, resume CPU s, events) for the stored
    session in `db`, the floor measured first in the same process."""
    gc.collect()
    gc.disable()  # as `Runtime.resume` pauses it (plainly here: baseline trees run this too)
    try:
        began = time.process_time()
        loaded = _select_and_parse(db, "resume-floor")
        floor = time.process_time() - began
    finally:
        gc.enable()
    async with Runtime.open(store=f"sqlite:{db}", provider=EchoProvider()) as rt:
        gc.collect()
        took, agent = await _cpu(lambda rt=rt: rt.resume("resume-floor"))
        if len(agent.session) != loaded:
            raise RuntimeError("resume loaded a different log than the floor read")
        await agent.dispose()
    return floor, took, loaded


async def _write_resume_session(db: Path, events: int) -> None:
    session = loop_shaped_session("resume-floor", events)
    await write_directly(f"sqlite:{db}", session)


async def bench_resume(root: Path, events: int, rounds: int) -> dict[str, Any]:
    db = root / "resume.db"
    await _write_resume_session(db, events)
    floor: list[float] = []
    resume: list[float] = []
    for _ in range(rounds):
        floor_s, resume_s, loaded = await _resume_round(db)
        floor.append(floor_s)
        resume.append(resume_s)
    floor_s, resume_s = statistics.median(floor), statistics.median(resume)
    return {
        "events": loaded,
        "rounds": rounds,
        "floor_cpu_s_sql_plus_orjson": round(floor_s, 3),
        "resume_cpu_s": round(resume_s, 3),
        "ratio_resume_to_floor": round(resume_s / floor_s, 2),
    }


def compare_resume(base_python: str, rounds: int, events: int) -> dict[str, Any]:
    """Resume ÷ floor of this tree and of a baseline tree's interpreter (its own editable
    install of actorloop) in one run: each round runs one fresh subprocess per tree,
    interleaved, on the same stored session (written by this tree)."""
    trees = {"baseline": base_python, "this tree": sys.executable}
    samples: dict[str, list[dict[str, float]]] = {label: [] for label in trees}
    with tempfile.TemporaryDirectory(prefix="actorloop-floor-resume-") as tmp:
        db = Path(tmp) / "resume.db"
        trio.run(_write_resume_session, db, events)
        for index in range(rounds):
            for label, python in trees.items():
                done = subprocess.run(
                    [python, "-m", "benchmarks.bench_floor", "--resume-worker", str(db)],
                    cwd=Path(__file__).resolve().parent.parent,
                    capture_output=True,
                    text=True,
                    check=True,
                )
                row = json.loads(done.stdout.strip().splitlines()[-1])
                samples[label].append(row)
                print(
                    f"round {index + 1}/{rounds} {label}: resume {row['resume_cpu_s']:.3f} s, "
                    f"floor {row['floor_cpu_s']:.3f} s, {row['ratio']:.2f}x",
                    flush=True,
                )
    per_round = [
        this["ratio"] / base["ratio"]
        for base, this in zip(samples["baseline"], samples["this tree"], strict=True)
    ]
    return {
        "trees": trees,
        "events": int(samples["this tree"][0]["events"]),
        "rounds": rounds,
        "medians": {
            label: {
                key: round(statistics.median(row[key] for row in rows), 3)
                for key in ("resume_cpu_s", "floor_cpu_s", "ratio")
            }
            for label, rows in samples.items()
        },
        "ratio_this_over_baseline_per_round": [round(value, 3) for value in per_round],
        "ratio_this_over_baseline_median": round(statistics.median(per_round), 3),
        "samples": samples,
        "environment": {
            "platform": platform.platform(),
            "generated": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S%z"),
        },
        "versions": _versions(),
    }


def compare_resume_markdown(report: dict[str, Any]) -> str:
    medians, versions, env = report["medians"], report["versions"], report["environment"]
    rows = [
        f"| {label} | {m['resume_cpu_s']:.3f} | {m['floor_cpu_s']:.3f} | **{m['ratio']:.2f}** |"
        for label, m in medians.items()
    ]
    spread = ", ".join(f"{value:.2f}" for value in report["ratio_this_over_baseline_per_round"])
    return "\n".join(
        [
            "# Resume ÷ floor: this tree against a baseline tree, in one run",
            "",
            "`python -m benchmarks.bench_floor --resume-baseline PYTHON --rounds "
            f"{report['rounds']}` — Python {versions['python']}, SQLite {versions['sqlite']}, "
            f"orjson {versions['orjson']} on {env['platform']} (2 cores shared with other "
            f"engineers' benchmarks: read the ratios), {env['generated']}.",
            "",
            f"`Runtime.resume` of a stored `sqlite:` session of {report['events']:,} loop-shaped "
            "events (closed single-step turns, `benchmarks/bench_runtime.py`), CPU time "
            "(`time.process_time`, the store's thread included), against its floor measured "
            "first in the same process: a sqlite3 `SELECT` of the bodies plus `orjson.loads` "
            "of each, with the cyclic collector paused as `Runtime.resume` pauses it. "
            f"Each of {report['rounds']} rounds runs one fresh subprocess per tree, "
            "trees interleaved, on the same database file; medians over rounds.",
            "",
            "| tree | resume CPU s | floor CPU s | resume ÷ floor |",
            "|---|---:|---:|---:|",
            *rows,
            "",
            "(resume ÷ floor of this tree) ÷ (that of the baseline), round by round: "
            f"{spread}; median **{report['ratio_this_over_baseline_median']:.2f}**.",
            "",
            "Trees: "
            + ", ".join(f"{label} = `{python}`" for label, python in report["trees"].items()),
            "",
        ]
    )


def _resume_worker(db: Path) -> None:
    floor, took, loaded = trio.run(_resume_round, db)
    row = {"floor_cpu_s": floor, "resume_cpu_s": took, "ratio": took / floor, "events": loaded}
    print(json.dumps(row))


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in ("trio", "attrs", "cattrs", "orjson"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "?"
    out["sqlite"] = sqlite3.sqlite_version
    return out


async def run(quick: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="actorloop-floor-") as tmp:
        root = Path(tmp)
        steps = await bench_steps(root, rounds=5 if quick else 15, turns_per_round=10)
        resume = await bench_resume(root, 10_000 if quick else 100_000, 1 if quick else 3)
    return {
        # Headline ratios first (the summary reads top-level numbers).
        "memory: step / floor": steps["ratio_memory_to_floor"],
        "sqlite: step / floor": steps["ratio_sqlite_to_floor"],
        f"resume {resume['events']:,} events / floor": resume["ratio_resume_to_floor"],
        "memory: step CPU µs": steps["step_cpu_us_memory"],
        "memory: floor CPU µs": steps["floor_cpu_us_memory"],
        "sqlite: step CPU µs": steps["step_cpu_us_sqlite"],
        "sqlite: floor CPU µs": steps["floor_cpu_us_sqlite"],
        "steps": steps,
        "resume": resume,
        "environment": {
            "platform": platform.platform(),
            "generated": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S%z"),
            "quick": quick,
        },
        "versions": _versions(),
    }


def to_markdown(report: dict[str, Any]) -> str:
    env, versions, steps, resume = (
        report["environment"],
        report["versions"],
        report["steps"],
        report["resume"],
    )
    return "\n".join(
        [
            "# Floor benchmark: per-step cost as a ratio to the floor",
            "",
            f"`python -m benchmarks.bench_floor{' --quick' if env['quick'] else ''}` — Python "
            f"{versions['python']}, SQLite {versions['sqlite']}, orjson {versions['orjson']} on "
            f"{env['platform']} (a 2-core machine shared with other benchmarks: read the "
            f"ratios), {env['generated']}.",
            "",
            "Step: CPU time of the process (incl. the sqlite writer thread) per model step of a "
            "tool-call + text turn (2 steps, "
            f"{steps['events_per_turn']} events per turn), median over {steps['rounds']} "
            f"rounds of {steps['turns_per_round']} turns, at ~{steps['history_events_at_end']:,}"
            " events of history. Floor per step: `orjson.dumps` of the step's "
            f"{steps['events_per_step_in_floor']} real events + one task round trip (barrier) "
            f"+ {steps['checkpoints_per_step_in_floor']} checkpoints (one per streamed chunk) "
            "for `memory:`; the same encodes + two BEGIN/INSERT/COMMIT "
            "through `trio.to_thread` on a WAL file (synchronous=NORMAL) for `sqlite:`. "
            "Step and floor are interleaved round by round in one process.",
            "",
            "| store | step CPU µs | floor CPU µs | step / floor | target |",
            "|---|---:|---:|---:|---:|",
            f"| `memory:` | {steps['step_cpu_us_memory']:.1f} | "
            f"{steps['floor_cpu_us_memory']:.1f} | **{steps['ratio_memory_to_floor']:.2f}** "
            "| ≤ 6 |",
            f"| `sqlite:` | {steps['step_cpu_us_sqlite']:.1f} | "
            f"{steps['floor_cpu_us_sqlite']:.1f} | **{steps['ratio_sqlite_to_floor']:.2f}** "
            "| ≤ 1.3 |",
            "",
            f"Resume of a {resume['events']:,}-event session (`sqlite:`, CPU, median of "
            f"{resume['rounds']}): floor = SELECT of its rows + `orjson.loads` of each body, the "
            "cyclic collector paused as the resume pauses it.",
            "",
            "| resume CPU s | floor CPU s | resume / floor | target |",
            "|---:|---:|---:|---:|",
            f"| {resume['resume_cpu_s']:.3f} | {resume['floor_cpu_s_sql_plus_orjson']:.3f} | "
            f"**{resume['ratio_resume_to_floor']:.2f}** | ≤ 1.3 |",
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_floor", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer rounds, 10k-event resume")
    parser.add_argument(
        "--resume-baseline",
        metavar="PYTHON",
        help="only the resume figure, against this baseline interpreter (floor_resume.*)",
    )
    parser.add_argument("--rounds", type=int, default=7, help="rounds of --resume-baseline")
    parser.add_argument("--resume-worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.resume_worker is not None:
        _resume_worker(args.resume_worker)
        return 0
    if args.resume_baseline is not None:
        compared = compare_resume(args.resume_baseline, args.rounds, 100_000)
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "floor_resume.json").write_text(json.dumps(compared, indent=2) + "\n")
        markdown = compare_resume_markdown(compared)
        (RESULTS / "floor_resume.md").write_text(markdown)
        print(markdown)
        return 0
    report = trio.run(run, args.quick)
    suffix = "-quick" if args.quick else ""
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"floor{suffix}.json").write_text(json.dumps(report, indent=2) + "\n")
    markdown = to_markdown(report)
    (RESULTS / f"floor{suffix}.md").write_text(markdown)
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
