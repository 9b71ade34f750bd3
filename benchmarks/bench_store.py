"""Store benchmark: durable events/s through the CodecActor into SQLite with group commit at
1, 10 and 1,000 concurrent sessions; load time of a 100,000-event session from SQLite and
JSONL; store fork time at 100 vs 100,000 events; and, against a baseline revision measured
in the same run, the append path's cost, flush barriers, group commit and spawn, and the
`actorloop run` demo's step overhead.

Run from the repository root:

    python -m benchmarks.bench_store [--quick]
    python -m benchmarks.bench_store --append-baseline main [--rounds 5]
    python -m benchmarks.bench_store --barrier-baseline main [--rounds 5]
    python -m benchmarks.bench_store --demo-baseline main [--rounds 5]
    python -m benchmarks.bench_store --commit-baseline main [--rounds 5]
    python -m benchmarks.bench_store --instruction-baseline main   (needs valgrind)
    python -m benchmarks.bench_store --layout-probe

The first writes benchmarks/results/store.json and store.md. The second measures durable
appends (the same workload, through the CodecActor, JSONL and SQLite) for the baseline
revision's code (extracted with `git archive`, imported first on PYTHONPATH) and for this
tree, alternating subprocesses round by round so both see the same machine, and writes
benchmarks/results/store_append.json and store_append.md (medians, and after / before).
The third does the same for the CPU of one session's flush barrier (and its ratio to a
floor measured in the same process: the same rows committed by hand through a
`trio.to_thread` round), group commit across 1,000 sessions and sequential spawn on
`memory:` and `sqlite:` (store_barrier.json / .md); the fourth for the step overhead
`actorloop run` reports for the packaged demo on `sqlite:` (store_demo.json / .md); the fifth
for group commit at 1, 10 and 1,000 sessions (events/s and CPU per event), the one-session
barrier and `bench_floor`'s `sqlite:` step against its floor (store_commit.json / .md); the
sixth counts instructions (valgrind callgrind) per group-commit event and per barrier for
both trees, a figure the other tenants of a shared machine cannot move
(store_instructions.json / .md). `--layout-probe` counts the WAL frames a 1,000-session
group commit writes with this build's table layout and with three experiments: rows in
commit order, and one row per session per commit, clustered or in commit order
(store_layout.json / .md).

Workload: loop-shaped turns of 13 events (turn/start, user/message, a tool step with one
chunk, assistant/message, tool/call, tool/result, a reply step, turn/end), built with the
Session API before any clock starts. Throughput: every session is its own task that
persists its log in 5-event step batches (submit + flush barrier, as the loop does before
each model call and tool body); each session holds its writer lease, as under the
Runtime. Events/s counts events whose barrier returned, i.e. durable events.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import trio

from actorloop.actors.codec import CodecActor
from actorloop.runtime.log.session import Session, SessionMeta
from actorloop.runtime.model.chunks import TextDelta
from actorloop.runtime.model.events import (
    APPEND,
    AssistantChunk,
    AssistantMessage,
    SessionEvent,
    StepEnd,
    StepStart,
    ToolCallEvent,
    ToolResultEvent,
    Trigger,
    TurnEnd,
    TurnEndReason,
    TurnStart,
    UserMessage,
)
from actorloop.runtime.model.messages import USER, Text, ToolCall
from actorloop.runtime.stores import JsonlStore, MemoryStore, SqliteStore, Store
from actorloop.runtime.stores.base import Batch
from benchmarks.baseline import baseline_package

RESULTS = Path(__file__).with_name("results")
STEP_BATCH = 5
EVENTS_PER_TURN = 13


def build_log(session_id: str, turns: int) -> Session:
    session = Session.create(session_id)
    for turn in range(1, turns + 1):
        session.append("turn/start", TurnStart(turn, Trigger("message", USER)))
        session.append(
            "user/message", UserMessage((Text(f"question {turn}"),), USER), surface_op=APPEND
        )
        call = ToolCall(f"call-{turn}", "read_file", '{"path": "src/main.py"}')
        session.append("step/start", StepStart(turn, 1))
        chunk = session.append("assistant/chunk", AssistantChunk(turn, 1, TextDelta(0, "Let")))
        session.append(
            "assistant/message",
            AssistantMessage(turn, 1, (Text("Let me look."), call), "bench", "m"),
            surface_op=APPEND,
            source_event_seqs=(chunk.seq,),
        )
        logged = session.append(
            "tool/call", ToolCallEvent(turn, 1, call.id, call.name, call.arguments)
        )
        session.append(
            "tool/result",
            ToolResultEvent(turn, 1, call.id, (Text("def main():\n    return 0\n" * 4),)),
            surface_op=APPEND,
            source_event_seqs=(logged.seq,),
        )
        session.append("step/end", StepEnd(turn, 1))
        session.append("step/start", StepStart(turn, 2))
        chunk = session.append("assistant/chunk", AssistantChunk(turn, 2, TextDelta(0, "It")))
        session.append(
            "assistant/message",
            AssistantMessage(turn, 2, (Text("It returns 0."),), "bench", "m"),
            surface_op=APPEND,
            source_event_seqs=(chunk.seq,),
        )
        session.append("step/end", StepEnd(turn, 2))
        session.append("turn/end", TurnEnd(turn, TurnEndReason("completed")))
    return session


def count_commits(store: SqliteStore) -> list[int]:
    """The sessions of every group commit `store` makes from now on: its `append_batch`
    calls (an actor's rounds) and the inline ones its `append_batch_now` made (a lone
    writer's barrier, where the store has it). Wrapped on the instance, so the store keeps
    its exact class (the CodecActor commits inline only for the plain store classes)."""
    commits: list[int] = []
    plain = store.append_batch

    async def append_batch(batch: Batch) -> None:
        commits.append(len(batch))
        await plain(batch)

    setattr(store, "append_batch", append_batch)  # noqa: B010 (an instance attribute)
    now = getattr(store, "append_batch_now", None)
    if now is not None:

        def append_batch_now(batch: Batch) -> bool:
            done: bool = now(batch)
            if done:
                commits.append(len(batch))
            return done

        setattr(store, "append_batch_now", append_batch_now)  # noqa: B010
    return commits


async def measure_throughput(
    directory: Path, sessions: int, events: tuple[SessionEvent, ...], synchronous: str
) -> dict[str, Any]:
    store = SqliteStore(directory / f"tp-{sessions}-{synchronous}.db", synchronous=synchronous)
    commits = count_commits(store)
    ids = [f"s{index}" for index in range(sessions)]
    leases = [store.claim(session_id) for session_id in ids]
    for session_id in ids:
        await store.create(SessionMeta(session_id))
    batches = [events[start : start + STEP_BATCH] for start in range(0, len(events), STEP_BATCH)]
    async with trio.open_nursery() as nursery:
        actor = CodecActor(store, capacity=max(1024, 2 * sessions))
        await nursery.start(actor.run)

        async def loop(session_id: str) -> None:
            for batch in batches:
                await actor.persist(session_id, batch)

        started, cpu = time.perf_counter(), time.process_time()
        async with trio.open_nursery() as loops:
            for session_id in ids:
                loops.start_soon(loop, session_id)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        await actor.aclose()
    for lease in leases:
        lease.release()
    await store.close()
    total = sessions * len(events)
    return {
        "synchronous": synchronous,
        "cpu_us_per_event": cpu / total * 1e6,
        "sessions": sessions,
        "events": total,
        "barriers": sessions * len(batches),
        "seconds": elapsed,
        "events_per_s": total / elapsed,
        "barriers_per_s": sessions * len(batches) / elapsed,
        "commits": len(commits),
        "mean_sessions_per_commit": statistics.fmean(commits),
        "events_per_commit": total / len(commits),
    }


APPEND_PLAN = (
    ("jsonl", 1, 300),
    ("jsonl", 10, 60),
    ("jsonl", 100, 6),
    ("sqlite", 1, 300),
    ("sqlite", 10, 60),
)
"""(store, concurrent sessions, turns each) of the append-path comparison."""


async def measure_append(
    directory: Path, kind: str, sessions: int, events: tuple[SessionEvent, ...]
) -> dict[str, Any]:
    """Durable events/s of `sessions` loops persisting step batches (submit + barrier)."""
    store: Store
    if kind == "jsonl":
        store = JsonlStore(directory / f"append-{sessions}")
    else:
        store = SqliteStore(directory / f"append-{sessions}.db")
    ids = [f"s{index}" for index in range(sessions)]
    leases = [store.claim(session_id) for session_id in ids]
    for session_id in ids:
        await store.create(SessionMeta(session_id))
    batches = [events[start : start + STEP_BATCH] for start in range(0, len(events), STEP_BATCH)]
    async with trio.open_nursery() as nursery:
        actor = CodecActor(store, capacity=max(1024, 2 * sessions))
        await nursery.start(actor.run)

        async def loop(session_id: str) -> None:
            for batch in batches:
                await actor.persist(session_id, batch)

        started = time.perf_counter()
        async with trio.open_nursery() as loops:
            for session_id in ids:
                loops.start_soon(loop, session_id)
        elapsed = time.perf_counter() - started
        await actor.aclose()
    for lease in leases:
        lease.release()
    await store.close()
    total = sessions * len(events)
    return {"store": kind, "sessions": sessions, "events": total, "events_per_s": total / elapsed}


async def append_only() -> list[dict[str, Any]]:
    template = build_log("template", max(turns for _, _, turns in APPEND_PLAN))
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-append-") as temp:
        for kind, sessions, turns in APPEND_PLAN:
            events = template.events[: turns * EVENTS_PER_TURN]
            rows.append(await measure_append(Path(temp) / kind, kind, sessions, events))
    return rows


def _run_append(pythonpath: Path | None) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = _run_json(pythonpath, "--append-only")
    return rows


def _run_json(pythonpath: Path | None, flag: str) -> Any:
    """This module run with `flag` in a fresh process (the baseline's code first on the
    path, if given); what it printed, as JSON."""
    root = RESULTS.parent.parent
    env = dict(os.environ)
    parts = [str(pythonpath)] if pythonpath is not None else []
    env["PYTHONPATH"] = os.pathsep.join([*parts, str(root)])
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_store", flag],
        cwd=root,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(done.stdout)


def _commit(revision: str) -> str:
    root = RESULTS.parent.parent
    return subprocess.run(
        ["git", "rev-parse", "--short", revision],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def append_baseline(revision: str, rounds: int) -> dict[str, Any]:
    runs: dict[str, list[list[dict[str, Any]]]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory(prefix="bench-baseline-") as temp:
        pythonpath = baseline_package(revision, Path(temp))[0]
        for index in range(rounds):
            print(f"round {index + 1}/{rounds} ...", file=sys.stderr)
            runs["before"].append(_run_append(pythonpath))
            runs["after"].append(_run_append(None))
    rows = []
    for position, (kind, sessions, turns) in enumerate(APPEND_PLAN):
        before = [run[position]["events_per_s"] for run in runs["before"]]
        after = [run[position]["events_per_s"] for run in runs["after"]]
        # Per round, the two subprocesses ran back to back: their ratio cancels most of
        # the machine's drift between rounds.
        ratios = [b / a for b, a in zip(before, after, strict=True)]
        rows.append(
            {
                "store": kind,
                "sessions": sessions,
                "events": sessions * turns * EVENTS_PER_TURN,
                "before_events_per_s": statistics.median(before),
                "after_events_per_s": statistics.median(after),
                "cost_ratio": statistics.median(ratios),
                "cost_ratio_quartiles": statistics.quantiles(ratios, n=4)[::2],
            }
        )
    return {
        "baseline": f"{revision} ({_commit(revision)})",
        "after": f"working tree on {_commit('HEAD')}",
        "rounds": rounds,
        "environment": environment(),
        "rows": rows,
        "runs": runs,
    }


def append_markdown(report: dict[str, Any]) -> str:
    env = report["environment"]
    lines = [
        "# Append-path cost: before / after",
        "",
        f"`python -m benchmarks.bench_store --append-baseline ... --rounds {report['rounds']}` — "
        f"Python {env['python']} on {env['platform']} (SQLite {env['sqlite']}), {env['when']}.",
        "",
        f"Before: {report['baseline']}. After: {report['after']}. Each round runs the "
        "baseline and then this tree in fresh subprocesses; the figures are medians over the "
        f"rounds. Workload: the store benchmark's {EVENTS_PER_TURN}-event turns, persisted in "
        f"{STEP_BATCH}-event step batches through the CodecActor (submit + barrier, durable).",
        "*cost after/before* is the time per durable event after, relative to before: the "
        "median over the rounds of each round's ratio, with its quartiles (the machine is "
        "shared, fsync latency varies widely, so single runs mean little).",
        "",
        "| store | sessions | events | before events/s | after events/s | cost after/before "
        "| quartiles |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in report["rows"]:
        low, high = row["cost_ratio_quartiles"]
        lines.append(
            f"| {row['store']} | {row['sessions']:,} | {row['events']:,} "
            f"| {row['before_events_per_s']:,.0f} | {row['after_events_per_s']:,.0f} "
            f"| {row['cost_ratio']:.3f} | {low:.2f}–{high:.2f} |"
        )
    lines.append("")
    return "\n".join(lines)


BARRIER_TURNS = 120
"""Turns of the one-session barrier figure (600 events, 120 barriers of 5 events)."""
SPAWNS = 300
"""Sequential `Runtime.spawn` calls of the spawn figure."""


async def measure_barrier(directory: Path) -> dict[str, Any]:
    """CPU per flush barrier of one session through the CodecActor into SQLite (NORMAL),
    and the floor in the same process: the same rows committed by hand in one transaction
    each, through a `trio.to_thread` round (what a barrier cannot do without)."""
    events = build_log("one", BARRIER_TURNS).events
    batches = [events[start : start + STEP_BATCH] for start in range(0, len(events), STEP_BATCH)]
    store = SqliteStore(directory / "barrier.db")
    lease = store.claim("one")
    await store.create(SessionMeta("one"))
    async with trio.open_nursery() as nursery:
        actor = CodecActor(store)
        await nursery.start(actor.run)
        await actor.persist("one", batches[0])  # the first barrier opens the database
        cpu, wall = time.process_time(), time.perf_counter()
        for batch in batches[1:]:
            await actor.persist("one", batch)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        await actor.aclose()
    lease.release()
    await store.close()
    floor = await _floor_commits(directory / "floor.db", batches)
    count = len(batches) - 1
    return {
        "barriers": count,
        "cpu_us_per_barrier": cpu / count * 1e6,
        "wall_us_per_barrier": wall / count * 1e6,
        "floor_cpu_us_per_commit": floor / count * 1e6,
        "x_floor": cpu / floor,
    }


async def _floor_commits(path: Path, batches: list[tuple[SessionEvent, ...]]) -> float:
    """CPU seconds of committing batches[1:] by hand: encode, BEGIN IMMEDIATE, INSERT the
    rows, UPDATE the head, COMMIT, each through one `trio.to_thread` round."""
    from actorloop.codecs.converter import encode_event

    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = NORMAL")
    db.execute(
        "CREATE TABLE events (session_id TEXT NOT NULL, seq INTEGER NOT NULL, type TEXT NOT "
        "NULL, time INTEGER NOT NULL, body BLOB NOT NULL, crc INTEGER NOT NULL, "
        "PRIMARY KEY (session_id, seq)) WITHOUT ROWID"
    )
    db.execute("CREATE TABLE sessions (id TEXT PRIMARY KEY, head INTEGER NOT NULL)")
    db.execute("INSERT INTO sessions VALUES ('one', 0)")

    def commit(batch: tuple[SessionEvent, ...]) -> None:
        rows = []
        for event in batch:
            body = encode_event(event)
            crc = zlib.crc32(body, zlib.crc32(b"one\x00%d\x00" % event.seq))
            rows.append(("one", event.seq, event.type, event.time, body, crc))
        db.execute("BEGIN IMMEDIATE")
        db.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?)", rows)
        db.execute("UPDATE sessions SET head = ? WHERE id = 'one'", (rows[-1][1] + 1,))
        db.execute("COMMIT")

    await trio.to_thread.run_sync(commit, batches[0])
    cpu = time.process_time()
    for batch in batches[1:]:
        await trio.to_thread.run_sync(commit, batch)
    cpu = time.process_time() - cpu
    db.close()
    return cpu


async def measure_spawn(directory: Path) -> list[dict[str, Any]]:
    """CPU per sequential `Runtime.spawn` (a new session: lease, `store.create`, the loop
    actor started), on `memory:` and on `sqlite:` in one process."""
    from actorloop.runtime import AgentOptions
    from actorloop.runtime.host.runtime import Runtime
    from actorloop.runtime.testing import EchoProvider

    options = AgentOptions(model="echo-model", system="You are a benchmark agent.")
    rows = []
    for url in ("memory:", f"sqlite:{directory / 'spawn.db'}"):
        async with Runtime.open(store=url, provider=EchoProvider()) as rt:
            await rt.spawn(options, session_id="warm-up")  # opens the database
            cpu, wall = time.process_time(), time.perf_counter()
            for index in range(SPAWNS):
                await rt.spawn(options, session_id=f"agent-{index:05d}")
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        rows.append(
            {
                "store": url.partition(":")[0],
                "spawns": SPAWNS,
                "cpu_us_per_spawn": cpu / SPAWNS * 1e6,
                "wall_us_per_spawn": wall / SPAWNS * 1e6,
            }
        )
    return rows


async def barrier_only() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-barrier-") as temp:
        directory = Path(temp)
        # Spawn first: after the others, the garbage they leave makes the collector's
        # passes over the growing agent population cost more than the spawn itself.
        spawn = await measure_spawn(directory)
        barrier = await measure_barrier(directory)
        template = build_log("template", 5)
        group = await measure_throughput(directory, 1_000, template.events, "NORMAL")
    return {"barrier": barrier, "group_commit": group, "spawn": spawn}


COMMIT_PLAN = ((1, 120), (10, 30), (1_000, 5))
"""(concurrent sessions, turns each) of the group-commit comparison (synchronous=NORMAL)."""
COMMIT_FLOOR_ROUNDS = 5
"""Rounds of `bench_floor`'s step measurement inside each group-commit comparison run."""


async def commit_only() -> dict[str, Any]:
    """One run of the group-commit comparison: durable events/s and CPU per event at 1, 10
    and 1,000 sessions, the one-session barrier, and `bench_floor`'s per-step figures."""
    from benchmarks.bench_floor import bench_steps

    template = build_log("template", max(turns for _, turns in COMMIT_PLAN))
    with tempfile.TemporaryDirectory(prefix="bench-commit-") as temp:
        directory = Path(temp)
        warm = directory / "warm-up"
        warm.mkdir()
        await measure_throughput(warm, 10, template.events[: 2 * EVENTS_PER_TURN], "NORMAL")
        throughput = [
            await measure_throughput(
                directory, sessions, template.events[: turns * EVENTS_PER_TURN], "NORMAL"
            )
            for sessions, turns in COMMIT_PLAN
        ]
        barrier = await measure_barrier(directory)
        (directory / "steps").mkdir()
        steps = await bench_steps(
            directory / "steps", rounds=COMMIT_FLOOR_ROUNDS, turns_per_round=10
        )
    return {"throughput": throughput, "barrier": barrier, "steps": steps}


def _commit_figures() -> list[tuple[str, Callable[[dict[str, Any]], float]]]:
    """(label, how to read it from one run) of the group-commit comparison."""
    figures: list[tuple[str, Callable[[dict[str, Any]], float]]] = []
    for index, (sessions, _turns) in enumerate(COMMIT_PLAN):
        figures.append(
            (
                f"events/s, {sessions:,} sessions",
                lambda run, i=index: run["throughput"][i]["events_per_s"],
            )
        )
        figures.append(
            (
                f"CPU µs per event, {sessions:,} sessions",
                lambda run, i=index: run["throughput"][i]["cpu_us_per_event"],
            )
        )
    figures += [
        ("CPU µs per barrier, 1 session", lambda run: run["barrier"]["cpu_us_per_barrier"]),
        ("barrier CPU × its floor", lambda run: run["barrier"]["x_floor"]),
        ("`sqlite:` step CPU µs", lambda run: run["steps"]["step_cpu_us_sqlite"]),
        ("`memory:` step CPU µs", lambda run: run["steps"]["step_cpu_us_memory"]),
        (
            "`sqlite:` step − `memory:` step, CPU µs",
            lambda run: run["steps"]["step_cpu_us_sqlite"] - run["steps"]["step_cpu_us_memory"],
        ),
        ("`sqlite:` floor CPU µs", lambda run: run["steps"]["floor_cpu_us_sqlite"]),
        ("`sqlite:` step / floor", lambda run: run["steps"]["ratio_sqlite_to_floor"]),
    ]
    return figures


def commit_baseline(revision: str, rounds: int) -> dict[str, Any]:
    return _interleaved_baseline(revision, rounds, "--commit-only", _commit_figures())


def _comparison_table(rows: list[dict[str, Any]]) -> list[str]:
    """The before / after table of `_interleaved_baseline`'s rows, and a closing blank line."""
    lines = ["| figure | before | after | after/before | range |", "|---|---:|---:|---:|---:|"]
    for row in rows:
        low, high = row["ratio_range"]
        lines.append(
            f"| {row['figure']} | {row['before']:,.2f} | {row['after']:,.2f} "
            f"| {row['after_over_before']:.3f} | {low:.2f}–{high:.2f} |"
        )
    lines.append("")
    return lines


def commit_markdown(report: dict[str, Any]) -> str:
    env = report["environment"]
    plan = ", ".join(f"{sessions:,} × {turns} turns" for sessions, turns in COMMIT_PLAN)
    lines = [
        "# Group commit and the `sqlite:` step: before / after",
        "",
        f"`python -m benchmarks.bench_store --commit-baseline REV --rounds {report['rounds']}`"
        f" — Python {env['python']} on {env['platform']} (SQLite {env['sqlite']}), "
        f"{env['when']}. A 2-core machine shared with other engineers' benchmarks while this "
        "ran: read the CPU figures and the ratios; events/s is wall time and moves with the "
        "machine's load.",
        "",
        f"Before: {report['baseline']}. After: {report['after']}. Each round runs the "
        "baseline's code and this tree's in fresh subprocesses, back to back (which goes "
        "first alternates by round); figures are medians over the rounds, *after/before* "
        "the median of the per-round ratios (with their range).",
        "",
        f"* *events/s, CPU µs per event*: N sessions ({plan}) persist loop-shaped turns "
        f"concurrently in {STEP_BATCH}-event step batches (submit + barrier) through the "
        "CodecActor into `sqlite:` (synchronous=NORMAL), each holding its lease; CPU is "
        "`time.process_time` (the writer thread included) per durable event.",
        f"* *barrier*: one session, {BARRIER_TURNS} turns, CPU per barrier; its floor is the "
        "same rows committed by hand through a `trio.to_thread` round each.",
        f"* *step*: `benchmarks.bench_floor`'s step measurement ({COMMIT_FLOOR_ROUNDS} rounds "
        "of 10 tool-call + text turns, `memory:` and `sqlite:` side by side) and its `sqlite:` "
        "floor (the step's encodes + two BEGIN/INSERT/COMMIT through `trio.to_thread`). "
        "*sqlite − memory* is what the store adds to a step.",
        "",
        *_comparison_table(report["rows"]),
    ]
    return "\n".join(lines)


INSTRUCTION_PROBES = (
    ("group commit, 100 sessions × 5 turns", "group", 100, 100 * 5 * 13),
    ("barrier, 1 session, 5 events", "barrier", 200, 200),
)
"""(label, probe, size, units the size adds) of the instruction-count comparison; each is
counted at size 0 and at `size`, and the difference divided by the units."""


async def instruction_probe(kind: str, size: int) -> None:
    """The work an instruction count measures: `size` sessions persisting 5 turns each
    (group), or one session persisting `size` 5-event barriers after a first one (barrier).
    Everything else (imports, building the log, opening the store) is the same at size 0."""
    with tempfile.TemporaryDirectory(prefix="bench-probe-") as temp:
        directory = Path(temp)
        if kind == "group":
            template = build_log("template", 5)
            if size:
                await measure_throughput(directory, size, template.events, "NORMAL")
            return
        events = build_log("one", 101).events  # the same log at every size
        batches = [events[i : i + STEP_BATCH] for i in range(0, len(events), STEP_BATCH)]
        if size + 1 > len(batches):
            raise ValueError(f"the barrier probe has {len(batches) - 1} barriers at most")
        store = SqliteStore(directory / "probe.db")
        lease = store.claim("one")
        await store.create(SessionMeta("one"))
        async with trio.open_nursery() as nursery:
            actor = CodecActor(store)
            await nursery.start(actor.run)
            for batch in batches[: size + 1]:
                await actor.persist("one", batch)
            await actor.aclose()
        lease.release()
        await store.close()


def _instructions(pythonpath: Path | None, kind: str, size: int) -> int:
    """Instructions (valgrind's callgrind, user space, every thread) of one probe run."""
    root = RESULTS.parent.parent
    env = dict(os.environ)
    parts = [str(pythonpath)] if pythonpath is not None else []
    env["PYTHONPATH"] = os.pathsep.join([*parts, str(root)])
    done = subprocess.run(
        [
            *("valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable),
            *("-m", "benchmarks.bench_store", "--instruction-probe", kind, str(size)),
        ],
        cwd=root,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    for line in done.stderr.splitlines():
        if "Collected :" in line:
            return int(line.rsplit(":", 1)[1])
    raise RuntimeError(f"no instruction count in valgrind's output:\n{done.stderr[-2000:]}")


def instruction_baseline(revision: str) -> dict[str, Any]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-baseline-") as temp:
        pythonpath = baseline_package(revision, Path(temp))[0]
        for label, kind, size, units in INSTRUCTION_PROBES:
            per_unit = {}
            for side, path in (("before", pythonpath), ("after", None)):
                print(f"{label}: {side} ...", file=sys.stderr)
                added = _instructions(path, kind, size) - _instructions(path, kind, 0)
                per_unit[side] = added / units
            rows.append(
                {
                    "figure": label,
                    "before": per_unit["before"],
                    "after": per_unit["after"],
                    "after_over_before": per_unit["after"] / per_unit["before"],
                }
            )
    return {
        "baseline": f"{revision} ({_commit(revision)})",
        "after": f"working tree on {_commit('HEAD')}",
        "environment": environment(),
        "rows": rows,
    }


def instruction_markdown(report: dict[str, Any]) -> str:
    env = report["environment"]
    lines = [
        "# Group commit and barrier: instructions before / after",
        "",
        "`python -m benchmarks.bench_store --instruction-baseline REV` — valgrind callgrind "
        f"instruction counts (user space, all threads; system calls not counted), Python "
        f"{env['python']} on {env['platform']} (SQLite {env['sqlite']}), {env['when']}. "
        "Instruction counts do not move with the other tenants' load, unlike CPU time on "
        "this shared 2-core machine.",
        "",
        f"Before: {report['baseline']}. After: {report['after']}. Each probe runs at size 0 "
        "and at its size in fresh processes; the difference (the persisting alone: no "
        "imports, log building or store opening) is divided by the events (group commit: "
        "100 sessions each persisting 5 loop-shaped turns in 5-event barriers through the "
        "CodecActor into `sqlite:`) or by the barriers (one session, 5 events each).",
        "",
        "| figure | before | after | after/before |",
        "|---|---:|---:|---:|",
    ]
    for row in report["rows"]:
        unit = "per event" if row["figure"].startswith("group") else "per barrier"
        lines.append(
            f"| {row['figure']}, instructions {unit} | {row['before']:,.0f} "
            f"| {row['after']:,.0f} | {row['after_over_before']:.3f} |"
        )
    lines.append("")
    return "\n".join(lines)


LAYOUT_PLAN = ((1_000, 5), (1_000, 20), (10, 100))
"""(sessions, turns each) of the write-amplification probe."""
ROWID_EVENTS = """
CREATE TABLE events (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    time INTEGER NOT NULL,
    body BLOB NOT NULL,
    crc INTEGER NOT NULL,
    UNIQUE (session_id, seq)
)"""
"""An experiment, not a schema this build writes: events appended in commit order (rowid)
with the (session, seq) key in a separate, narrow index."""
_BATCH_COLUMNS = """
CREATE TABLE events (
    session_id TEXT NOT NULL,
    first_seq INTEGER NOT NULL,
    last_seq INTEGER NOT NULL,
    body BLOB NOT NULL,
    crc INTEGER NOT NULL,"""
BATCH_EVENTS = {
    "clustered-batch": _BATCH_COLUMNS
    + "\n    PRIMARY KEY (session_id, first_seq)\n) WITHOUT ROWID",
    "rowid-batch": _BATCH_COLUMNS + "\n    UNIQUE (session_id, first_seq)\n)",
}
"""Experiments, not schemas this build writes: one row per session per commit (its events'
bodies joined by newlines, one checksum), clustered by session or in commit order."""


def _batch_row(part: list[Any]) -> tuple[str, int, int, bytes, int]:
    """One session's rows of a commit as one row of a batch layout."""
    body = b"\n".join(row[4] for row in part)
    return (part[0][0], part[0][1], part[-1][1], body, zlib.crc32(body))


def _layout_commits(layout: str, sessions: int, turns: int, directory: Path) -> dict[str, Any]:
    """Group commits of `sessions` × `turns` loop-shaped turns (5-event steps, every session
    in every commit) by hand into one layout: WAL frames each commit wrote (a passive
    checkpoint after each commit empties the WAL, so the next one starts from the front),
    and CPU per event of the commits and of the checkpoints."""
    from actorloop.codecs.rows import event_rows
    from actorloop.runtime.stores import sqlite as schema

    db = sqlite3.connect(directory / f"{layout}-{sessions}-{turns}.db", isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = NORMAL")
    db.execute("PRAGMA wal_autocheckpoint = 0")
    tables = schema._SCHEMA
    if layout != "schema-2":
        sessions_table = tables.split("CREATE TABLE events")[0]
        tables = sessions_table + (ROWID_EVENTS if layout == "rowid" else BATCH_EVENTS[layout])
    for statement in tables.split(";"):
        if statement.strip():
            db.execute(statement)
    ids = [f"s{index:04d}" for index in range(sessions)]
    db.executemany(
        "INSERT INTO sessions VALUES (?, x'7b7d', NULL, NULL, 1, 0, 0)", [(i,) for i in ids]
    )
    events = build_log("layout", turns).events
    steps = [events[start : start + STEP_BATCH] for start in range(0, len(events), STEP_BATCH)]
    frames, commit_cpu, checkpoint_cpu = [], 0.0, 0.0
    for step in steps:
        rows = {session_id: event_rows(session_id, step) for session_id in ids}
        if layout in BATCH_EVENTS:
            insert = "INSERT INTO events VALUES (?, ?, ?, ?, ?)"
            inserted = [_batch_row(part) for part in rows.values()]
        else:
            insert, inserted = schema._INSERT_EVENTS, [row for i in ids for row in rows[i]]
        began = time.process_time()
        db.execute("BEGIN IMMEDIATE")
        db.executemany(insert, inserted)
        db.executemany(
            schema._MOVE_HEAD, [(part[-1][1] + 1, i, part[0][1]) for i, part in rows.items()]
        )
        db.execute("COMMIT")
        middle = time.process_time()
        frames.append(db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1])
        commit_cpu += middle - began
        checkpoint_cpu += time.process_time() - middle
    db.close()
    count = len(events) * sessions
    row_bytes = sum(len(row[4]) for row in event_rows("s0000", events)) * sessions
    return {
        "layout": layout,
        "sessions": sessions,
        "turns": turns,
        "commits": len(steps),
        "wal_frames_per_commit_median": statistics.median(frames),
        "wal_frames_per_commit_last": frames[-1],
        "wal_bytes_per_body_byte": sum(frames) * (24 + 4096) / row_bytes,
        "commit_cpu_us_per_event": commit_cpu / count * 1e6,
        "checkpoint_cpu_us_per_event": checkpoint_cpu / count * 1e6,
    }


def layout_probe() -> dict[str, Any]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-layout-") as temp:
        for sessions, turns in LAYOUT_PLAN:
            for layout in ("schema-2", "rowid", *BATCH_EVENTS):
                print(f"layout {layout} {sessions} x {turns} ...", file=sys.stderr)
                rows.append(_layout_commits(layout, sessions, turns, Path(temp)))
    return {"environment": environment(), "rows": rows}


def layout_markdown(report: dict[str, Any]) -> str:
    env = report["environment"]
    lines = [
        "# Write amplification of a group commit by table layout",
        "",
        f"`python -m benchmarks.bench_store --layout-probe` — Python {env['python']} on "
        f"{env['platform']} (SQLite {env['sqlite']}), {env['when']}; a shared 2-core "
        "machine: read the frame counts (exact) before the CPU figures (noisy).",
        "",
        "Group commits by hand (no actor, no store code): every session appends one "
        f"{STEP_BATCH}-event step of loop-shaped turns (~150-byte bodies) per commit, all "
        "sessions in every commit, and its head moves in `sessions`; a passive checkpoint "
        "follows each commit, so each commit's WAL frames are counted from an empty WAL. "
        "*schema-2* is the table this build writes (`events` WITHOUT ROWID, keyed by "
        "session and seq: each session's rows are clustered, so a commit inserts into one "
        "b-tree leaf per session and SQLite rebalances full leaves with their siblings); "
        "*rowid* is an experiment only: the rows appended in commit order, the (session, "
        "seq) key in a separate narrow index. Loads read a session through that index "
        "instead of one clustered range: what that costs a resume is not measured here. "
        "*clustered-batch* and *rowid-batch* are experiments too: one row per session per "
        "commit (its events' bodies joined, one checksum for the row), clustered by "
        "session or in commit order; a load would then split each row back into events, "
        "and a fork at an event inside a row would have to cut it.",
        "",
        "| layout | sessions | turns | WAL frames per commit (median / last) | WAL bytes per "
        "body byte | commit CPU µs/event | checkpoint CPU µs/event |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in report["rows"]:
        lines.append(
            f"| {row['layout']} | {row['sessions']:,} | {row['turns']} "
            f"| {row['wal_frames_per_commit_median']:,.0f} / {row['wal_frames_per_commit_last']:,}"
            f" | {row['wal_bytes_per_body_byte']:.1f} | {row['commit_cpu_us_per_event']:.2f} "
            f"| {row['checkpoint_cpu_us_per_event']:.2f} |"
        )
    lines.append("")
    return "\n".join(lines)


BARRIER_FIGURES = (
    ("CPU µs per barrier, 1 session, sqlite NORMAL", "barrier", "cpu_us_per_barrier", False),
    ("wall µs per barrier, 1 session", "barrier", "wall_us_per_barrier", False),
    ("barrier CPU × floor (commit through a thread)", "barrier", "x_floor", False),
    ("group commit events/s, 1,000 sessions", "group_commit", "events_per_s", True),
    ("spawn CPU µs, memory:", "spawn", 0, False),
    ("spawn CPU µs, sqlite:", "spawn", 1, False),
)
"""(label, section, key or spawn row, higher is better) of the barrier comparison."""


def _figure(run: dict[str, Any], section: str, key: str | int) -> float:
    if isinstance(key, int):
        value: float = run[section][key]["cpu_us_per_spawn"]
    else:
        value = run[section][key]
    return value


def barrier_baseline(revision: str, rounds: int) -> dict[str, Any]:
    figures = [
        (label, lambda run, section=section, key=key: _figure(run, section, key))
        for label, section, key, _higher in BARRIER_FIGURES
    ]
    return _interleaved_baseline(revision, rounds, "--barrier-only", figures)


def _interleaved_baseline(
    revision: str,
    rounds: int,
    flag: str,
    figures: Sequence[tuple[str, Callable[[dict[str, Any]], float]]],
) -> dict[str, Any]:
    """`flag`'s run with REV's code and with this tree's, in fresh subprocesses, round by
    round, and one row per figure: medians and the per-round after/before ratios."""
    runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory(prefix="bench-baseline-") as temp:
        pythonpath = baseline_package(revision, Path(temp))[0]
        for index in range(rounds):
            print(f"round {index + 1}/{rounds} ...", file=sys.stderr)
            # The order alternates: whichever runs first in a round meets a different
            # machine state (caches, the other tenants' load) than the second.
            for side in ("before", "after")[:: 1 if index % 2 == 0 else -1]:
                path = pythonpath if side == "before" else None
                runs[side].append(_run_json(path, flag))
    rows = []
    for label, read in figures:
        before = [read(run) for run in runs["before"]]
        after = [read(run) for run in runs["after"]]
        ratios = [a / b for b, a in zip(before, after, strict=True)]
        rows.append(
            {
                "figure": label,
                "before": statistics.median(before),
                "after": statistics.median(after),
                "after_over_before": statistics.median(ratios),
                "ratio_range": [min(ratios), max(ratios)],
            }
        )
    return {
        "baseline": f"{revision} ({_commit(revision)})",
        "after": f"working tree on {_commit('HEAD')}",
        "rounds": rounds,
        "environment": environment(),
        "rows": rows,
        "runs": runs,
    }


def barrier_markdown(report: dict[str, Any]) -> str:
    env = report["environment"]
    lines = [
        "# Flush barriers, group commit and spawn: before / after",
        "",
        f"`python -m benchmarks.bench_store --barrier-baseline REV --rounds {report['rounds']}`"
        f" — Python {env['python']} on {env['platform']} (SQLite {env['sqlite']}), "
        f"{env['when']}. A 2-core machine shared with other benchmarks while this ran: "
        "read the ratios, not the absolute figures.",
        "",
        f"Before: {report['baseline']}. After: {report['after']}. Each round runs the "
        "baseline's code and this tree's in fresh subprocesses, back to back (which goes "
        "first alternates by round); figures are medians over the rounds, *after/before* "
        "the median of the per-round ratios (with their range). `spawn CPU µs, memory:` "
        "runs the same code in both trees: its ratio shows the noise of the comparison.",
        "",
        f"* *barrier*: one session persists {BARRIER_TURNS} loop-shaped turns in "
        f"{STEP_BATCH}-event step batches through the CodecActor (`persist`: submit + "
        "barrier) into `sqlite:` with synchronous=NORMAL; CPU is `time.process_time` (all "
        "threads). The *floor* is the same rows committed by hand (encode, BEGIN IMMEDIATE, "
        "INSERT, UPDATE head, COMMIT), each through one `trio.to_thread` round, in the same "
        "process.",
        f"* *group commit*: 1,000 sessions persist 5 turns each concurrently "
        f"({STEP_BATCH}-event barriers), durable events/s.",
        f"* *spawn*: {SPAWNS} sequential `Runtime.spawn` calls after a warm-up spawn "
        "(lease, `store.create`, the loop actor), CPU per call.",
        "",
        *_comparison_table(report["rows"]),
    ]
    return "\n".join(lines)


_CLI = "import sys; from actorloop.runtime.console import main; sys.exit(main())"


def _demo_run(pythonpath: Path | None) -> dict[str, float]:
    """One `actorloop run` of the packaged demo on a fresh `sqlite:` file, as JSON."""
    root = RESULTS.parent.parent
    env = dict(os.environ)
    parts = [str(pythonpath)] if pythonpath is not None else []
    env["PYTHONPATH"] = os.pathsep.join([*parts, str(root)])
    with tempfile.TemporaryDirectory(prefix="bench-demo-") as temp:
        done = subprocess.run(
            [sys.executable, "-c", _CLI, "run", "--store", f"sqlite:{temp}/demo.db", "--json"],
            cwd=temp,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
    report = json.loads(done.stdout)
    return {
        "step_overhead_p50_ms": report["step_overhead_p50_ms"],
        "step_overhead_p99_ms": report["step_overhead_p99_ms"],
        "wall_seconds": report["wall_seconds"],
    }


def demo_baseline(revision: str, rounds: int) -> dict[str, Any]:
    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory(prefix="bench-baseline-") as temp:
        pythonpath = baseline_package(revision, Path(temp))[0]
        for index in range(rounds):
            print(f"round {index + 1}/{rounds} ...", file=sys.stderr)
            for side in ("before", "after")[:: 1 if index % 2 == 0 else -1]:
                runs[side].append(_demo_run(pythonpath if side == "before" else None))
    rows = []
    for key in ("step_overhead_p50_ms", "step_overhead_p99_ms", "wall_seconds"):
        before = [run[key] for run in runs["before"]]
        after = [run[key] for run in runs["after"]]
        ratios = [a / b for b, a in zip(before, after, strict=True)]
        rows.append(
            {
                "figure": key,
                "before": statistics.median(before),
                "after": statistics.median(after),
                "after_over_before": statistics.median(ratios),
                "ratio_range": [min(ratios), max(ratios)],
            }
        )
    return {
        "baseline": f"{revision} ({_commit(revision)})",
        "after": f"working tree on {_commit('HEAD')}",
        "rounds": rounds,
        "environment": environment(),
        "rows": rows,
        "runs": runs,
    }


def demo_markdown(report: dict[str, Any]) -> str:
    env = report["environment"]
    lines = [
        "# `actorloop run` demo step overhead on `sqlite:`: before / after",
        "",
        f"`python -m benchmarks.bench_store --demo-baseline REV --rounds {report['rounds']}` — "
        f"Python {env['python']} on {env['platform']} (SQLite {env['sqlite']}), {env['when']}. "
        "A 2-core machine shared with other benchmarks while this ran: read the ratios.",
        "",
        f"Before: {report['baseline']}. After: {report['after']}. Each round runs "
        "`actorloop run --store sqlite:FILE --json` (the packaged demo workload, the `sim` "
        "provider, a fresh database file) with the baseline's code and with this tree's, "
        "in fresh processes (which goes first alternates by round); the figures are the run "
        "report's own `step_overhead_p50_ms` / `p99` (the loop's time per step outside "
        "the provider: barriers, the dev invariant the demo turns on, hooks) and its wall "
        "time, medians over the rounds.",
        "",
        "| figure | before | after | after/before | range |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in report["rows"]:
        low, high = row["ratio_range"]
        lines.append(
            f"| {row['figure']} | {row['before']:.3f} | {row['after']:.3f} "
            f"| {row['after_over_before']:.3f} | {low:.2f}–{high:.2f} |"
        )
    lines.append("")
    return "\n".join(lines)


async def fill(store: Store, session: Session) -> None:
    await store.create(session.meta)
    events = session.events
    for start in range(0, len(events), 5000):
        await store.append(session.id, events[start : start + 5000])
    await store.flush(session.id)


async def measure_load(directory: Path, session: Session, repeats: int) -> list[dict[str, Any]]:
    rows = []
    for kind in ("sqlite", "jsonl"):
        path = directory / f"load-{kind}"

        def make(kind: str = kind, path: Path = path) -> Store:
            return SqliteStore(path.with_suffix(".db")) if kind == "sqlite" else JsonlStore(path)

        writer = make()
        await fill(writer, session)
        await writer.close()
        runs = []
        for _ in range(repeats):
            store = make()  # a fresh instance: nothing cached from the writes
            started = time.perf_counter()
            _, events = await store.load(session.id)
            runs.append(time.perf_counter() - started)
            await store.close()
            assert events == session.events
        size = (
            path.with_suffix(".db").stat().st_size
            if kind == "sqlite"
            else (path / session.id / "log.jsonl").stat().st_size
        )
        seconds = statistics.median(runs)
        rows.append(
            {
                "store": kind,
                "events": len(session),
                "seconds": seconds,
                "events_per_s": len(session) / seconds,
                "bytes_on_disk": size,
                "runs": runs,
            }
        )
    return rows


async def measure_fork(
    directory: Path, sessions: dict[int, Session], repeats: int
) -> list[dict[str, Any]]:
    rows = []
    for kind in ("memory", "sqlite", "jsonl"):
        for size, session in sessions.items():
            store: Store
            if kind == "memory":
                store = MemoryStore()
            elif kind == "sqlite":
                store = SqliteStore(directory / f"fork-{size}.db")
            else:
                store = JsonlStore(directory / f"fork-{size}")
            await fill(store, session)
            boundary = len(session) - 1
            runs = []
            for index in range(repeats):
                started = time.perf_counter()
                await store.fork(session.id, boundary, f"child-{index}")
                runs.append(time.perf_counter() - started)
            _, child = await store.load(f"child-{repeats - 1}")
            assert child == session.events
            await store.close()
            rows.append(
                {"store": kind, "parent_events": len(session), "seconds": statistics.median(runs)}
            )
    return rows


def environment() -> dict[str, str]:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "sqlite": sqlite3.sqlite_version,
        "trio": metadata.version("trio"),
        "orjson": metadata.version("orjson"),
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def markdown(report: dict[str, Any]) -> str:
    env = report["environment"]
    lines = [
        "# Store benchmark",
        "",
        f"`python -m benchmarks.bench_store{' --quick' if report['quick'] else ''}` — Python "
        f"{env['python']} on {env['platform']} (SQLite {env['sqlite']}, trio {env['trio']}), "
        f"{env['when']}. Results depend on the disk: fsync cost dominates `FULL`.",
        "",
        "## Durable events/s through the CodecActor into SQLite (group commit)",
        "",
        f"Each session persists {EVENTS_PER_TURN}-event turns in {STEP_BATCH}-event step "
        "batches (submit + flush barrier); an event counts once its barrier returned. "
        "*commits* = `append_batch` calls (one transaction each).",
        "",
        "| synchronous | sessions | events | events/s | barriers/s | commits | sessions/commit "
        "| events/commit |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in report["throughput"]:
        lines.append(
            f"| {row['synchronous']} | {row['sessions']:,} | {row['events']:,} "
            f"| {row['events_per_s']:,.0f} | {row['barriers_per_s']:,.0f} | {row['commits']:,} "
            f"| {row['mean_sessions_per_commit']:,.1f} | {row['events_per_commit']:,.1f} |"
        )
    lines += [
        "",
        "## Load time of one large session",
        "",
        "A fresh store instance loads the session: read, checksum/decode every event, validate "
        "the whole log (`Session.from_events`), check for repair. Median of the runs.",
        "",
        "| store | events | seconds | events/s | bytes on disk |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in report["load"]:
        lines.append(
            f"| {row['store']} | {row['events']:,} | {row['seconds']:.3f} "
            f"| {row['events_per_s']:,.0f} | {row['bytes_on_disk']:,} |"
        )
    lines += [
        "",
        "## Store fork time",
        "",
        "`store.fork(parent, last turn/end, child)`: the child stores a parent pointer and a "
        "seed length; no event is copied. Median of the runs.",
        "",
        "| store | parent events | ms per fork |",
        "|---|---:|---:|",
    ]
    for row in report["fork"]:
        lines.append(f"| {row['store']} | {row['parent_events']:,} | {row['seconds'] * 1000:.3f} |")
    lines += [
        "",
        "No store copies events on fork. SQLite and memory look the boundary event up by "
        "key; JSONL bisects the parent's memory-mapped log by byte offset (O(log n) lines "
        "read) and then writes the child's one-line log via temp file + fsync + link, whose "
        "fsyncs dominate its time.",
        "",
    ]
    return "\n".join(lines)


async def main(quick: bool) -> dict[str, Any]:
    big_turns = 1_000 if quick else 100_000 // EVENTS_PER_TURN + 1
    throughput_plan = (
        [(1, 40), (10, 20), (1_000, 2)] if quick else [(1, 600), (10, 150), (1_000, 5)]
    )
    print("building logs ...", file=sys.stderr)
    big = build_log("big", big_turns)
    small = build_log("small", 100 // EVENTS_PER_TURN + 1)
    template = build_log("template", max(turns for _, turns in throughput_plan))
    report: dict[str, Any] = {"quick": quick, "environment": environment()}
    with tempfile.TemporaryDirectory(prefix="bench-store-") as temp:
        directory = Path(temp)
        report["throughput"] = []
        for synchronous in ("NORMAL", "FULL"):
            for sessions, turns in throughput_plan:
                events = template.events[: turns * EVENTS_PER_TURN]
                print(f"throughput {synchronous} x{sessions} ...", file=sys.stderr)
                report["throughput"].append(
                    await measure_throughput(directory, sessions, events, synchronous)
                )
        print("load ...", file=sys.stderr)
        report["load"] = await measure_load(directory, big, repeats=1 if quick else 3)
        print("fork ...", file=sys.stderr)
        report["fork"] = await measure_fork(
            directory, {len(small): small, len(big): big}, repeats=5 if quick else 20
        )
    return report


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument(
        "--append-baseline", metavar="REV", help="compare the append path with REV's code"
    )
    parser.add_argument("--rounds", type=int, default=5, help="rounds of the comparison")
    parser.add_argument(
        "--barrier-baseline",
        metavar="REV",
        help="compare barriers, group commit and spawn with REV's code",
    )
    parser.add_argument(
        "--demo-baseline", metavar="REV", help="compare `actorloop run` step p50 with REV's code"
    )
    parser.add_argument(
        "--commit-baseline",
        metavar="REV",
        help="compare group commit at 1/10/1,000 sessions and the sqlite step with REV's code",
    )
    parser.add_argument("--commit-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--instruction-baseline",
        metavar="REV",
        help="compare instructions per group-commit event and per barrier with REV (valgrind)",
    )
    parser.add_argument("--instruction-probe", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument(
        "--layout-probe",
        action="store_true",
        help="WAL frames and CPU per group commit: this schema against a rowid-ordered one",
    )
    parser.add_argument("--append-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--barrier-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.append_only:
        print(json.dumps(trio.run(append_only)))
        return
    if args.barrier_only:
        print(json.dumps(trio.run(barrier_only)))
        return
    if args.layout_probe:
        layouts = layout_probe()
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "store_layout.json").write_text(json.dumps(layouts, indent=2) + "\n")
        text = layout_markdown(layouts)
        (RESULTS / "store_layout.md").write_text(text)
        print(text)
        return
    if args.instruction_probe:
        kind, size = args.instruction_probe
        trio.run(instruction_probe, kind, int(size))
        return
    if args.instruction_baseline:
        counted = instruction_baseline(args.instruction_baseline)
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "store_instructions.json").write_text(json.dumps(counted, indent=2) + "\n")
        text = instruction_markdown(counted)
        (RESULTS / "store_instructions.md").write_text(text)
        print(text)
        return
    if args.commit_only:
        print(json.dumps(trio.run(commit_only)))
        return
    if args.commit_baseline:
        compared = commit_baseline(args.commit_baseline, args.rounds)
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "store_commit.json").write_text(json.dumps(compared, indent=2) + "\n")
        text = commit_markdown(compared)
        (RESULTS / "store_commit.md").write_text(text)
        print(text)
        return
    if args.demo_baseline:
        demo = demo_baseline(args.demo_baseline, args.rounds)
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "store_demo.json").write_text(json.dumps(demo, indent=2) + "\n")
        text = demo_markdown(demo)
        (RESULTS / "store_demo.md").write_text(text)
        print(text)
        return
    if args.barrier_baseline:
        report = barrier_baseline(args.barrier_baseline, args.rounds)
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "store_barrier.json").write_text(json.dumps(report, indent=2) + "\n")
        text = barrier_markdown(report)
        (RESULTS / "store_barrier.md").write_text(text)
        print(text)
        return
    if args.append_baseline:
        compared = append_baseline(args.append_baseline, args.rounds)
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "store_append.json").write_text(json.dumps(compared, indent=2) + "\n")
        text = append_markdown(compared)
        (RESULTS / "store_append.md").write_text(text)
        print(text)
        return
    report = trio.run(main, args.quick)
    RESULTS.mkdir(exist_ok=True)
    suffix = "-quick" if args.quick else ""
    (RESULTS / f"store{suffix}.json").write_text(json.dumps(report, indent=2) + "\n")
    text = markdown(report)
    (RESULTS / f"store{suffix}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    cli()
