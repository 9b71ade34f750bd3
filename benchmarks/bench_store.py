"""Store benchmark: durable events/s through the CodecActor into SQLite with group commit at
1, 10 and 1,000 concurrent sessions; load time of a 100,000-event session from SQLite and
JSONL; store fork time at 100 vs 100,000 events.

Run from the repository root:

    python -m benchmarks.bench_store [--quick]

Writes benchmarks/results/store.json and benchmarks/results/store.md.

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
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import trio

from actorloop.actors.codec import CodecActor
from actorloop.runtime.chunks import TextDelta
from actorloop.runtime.events import (
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
from actorloop.runtime.messages import USER, Text, ToolCall
from actorloop.runtime.session import Session, SessionMeta
from actorloop.runtime.stores import JsonlStore, MemoryStore, SqliteStore, Store
from actorloop.runtime.stores.base import Batch

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


class CountingSqliteStore(SqliteStore):
    """Counts group commits and the sessions each one covers."""

    def __init__(self, path: Path, *, synchronous: str) -> None:
        super().__init__(path, synchronous=synchronous)
        self.commits = 0
        self.sessions_per_commit: list[int] = []

    async def append_batch(self, batch: Batch) -> None:
        self.commits += 1
        self.sessions_per_commit.append(len(batch))
        await super().append_batch(batch)


async def measure_throughput(
    directory: Path, sessions: int, events: tuple[SessionEvent, ...], synchronous: str
) -> dict[str, Any]:
    store = CountingSqliteStore(
        directory / f"tp-{sessions}-{synchronous}.db", synchronous=synchronous
    )
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
    return {
        "synchronous": synchronous,
        "sessions": sessions,
        "events": total,
        "barriers": sessions * len(batches),
        "seconds": elapsed,
        "events_per_s": total / elapsed,
        "barriers_per_s": sessions * len(batches) / elapsed,
        "commits": store.commits,
        "mean_sessions_per_commit": statistics.fmean(store.sessions_per_commit),
        "events_per_commit": total / store.commits,
    }


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
    args = parser.parse_args()
    report = trio.run(main, args.quick)
    RESULTS.mkdir(exist_ok=True)
    suffix = "-quick" if args.quick else ""
    (RESULTS / f"store{suffix}.json").write_text(json.dumps(report, indent=2) + "\n")
    text = markdown(report)
    (RESULTS / f"store{suffix}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    cli()
