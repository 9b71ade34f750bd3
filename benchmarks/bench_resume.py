"""Resume benchmark (issue 38): `Runtime.resume` of a stored `sqlite:` session of 10,000
and 100,000 events, with fold snapshots off (every load replays the whole log) and on
(the latest snapshot plus the rows after it), interleaved in one run; and a plain
`store.load` with the collector on against the same load inside `gc_paused()`.

Run from the repository root:

    python -m benchmarks.bench_resume [--quick] [--rounds N]

Writes benchmarks/results/resume.json and resume.md (`--quick`: resume-quick.*).

The sessions are benchmarks/bench_session.py's loop-shaped turns (17 events, 4 surface
nodes each, no compaction), written through `store.append`, and the snapshot a loop saves
at its last turn boundary (`take_snapshot`), so the snapshot covers the whole log (a loop
saves one at most `SNAPSHOT_EVERY` events, or an eighth of the surface, behind). Figures
are CPU time (`time.process_time`, the store's thread included) with the collector as a
process has it by default; each is the median of the rounds, and `resume + first send`
adds the first step after it (EchoProvider), which needs the whole surface's messages.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
SESSION_ID = "resume-bench"


def _setup(path: Path, events: int) -> int:
    from actorloop.runtime.log.session import Session
    from actorloop.runtime.log.snapshots import take_snapshot
    from actorloop.runtime.log.tokens import TokenMeter
    from actorloop.runtime.model.meta import SessionMeta
    from actorloop.runtime.stores.sqlite import SqliteStore
    from benchmarks.bench_session import workload

    session = Session.create(SESSION_ID)
    for event_type, data, op, seqs in workload(events):
        session.append(event_type, data, surface_op=op, source_event_seqs=seqs, time=1)
    snapshot = take_snapshot(session, TokenMeter(session))
    assert snapshot is not None

    async def write() -> None:
        store = SqliteStore(path)
        try:
            await store.create(SessionMeta(SESSION_ID))
            log = session.events
            for start in range(0, len(log), 5_000):
                await store.append(SESSION_ID, log[start : start + 5_000])
            await store.save_snapshot(SESSION_ID, snapshot)
            assert store.snapshot_counters.written == 1
        finally:
            await store.close()

    trio.run(write)
    return len(session)


def _resume_cpu(path: Path, snapshots: bool, *, send: bool) -> float:
    from actorloop.runtime.host.runtime import Runtime
    from actorloop.runtime.stores.sqlite import SqliteStore
    from actorloop.runtime.testing import EchoProvider

    spent = 0.0

    async def run() -> None:
        nonlocal spent
        store = SqliteStore(path, snapshots=snapshots)
        async with Runtime.open(store=store, provider=EchoProvider()) as rt:
            cpu = time.process_time()
            agent = await rt.resume(SESSION_ID)
            if send:
                await agent.send("one more")
            spent = time.process_time() - cpu
            assert store.snapshot_counters.restored == (1 if snapshots else 0)

    gc.collect()
    trio.run(run)
    return spent


def _load_cpu(path: Path, paused: bool) -> float:
    """A plain `store.load` (no snapshot, repair off): the collector on, or paused around it."""
    from actorloop.runtime.stores.loading import gc_paused
    from actorloop.runtime.stores.sqlite import SqliteStore

    spent = 0.0

    async def run() -> None:
        nonlocal spent
        store = SqliteStore(path, snapshots=False)
        try:
            await store.exists(SESSION_ID)  # the connection opened before the clock
            cpu = time.process_time()
            if paused:
                with gc_paused():
                    await store.load(SESSION_ID, repair=False)
            else:
                await store.load(SESSION_ID, repair=False)
            spent = time.process_time() - cpu
        finally:
            await store.close()

    gc.collect()
    trio.run(run)
    return spent


DETAIL_TURNS = (10, 50, 500)
DETAIL_CALLS = 300


def _detail_cpu(path: Path) -> dict[str, dict[str, float]]:
    """CPU µs per `GET /v1/sessions/{id}` handler call (`SessionService.detail`) at 10, 50
    and 500 turns of one session: live (its agent in the runtime) and stored (read from
    the store without a lease: from the snapshot its loop saved, once one was due, and the
    rows after it)."""
    from actorloop.runtime import AgentOptions
    from actorloop.runtime.host.runtime import Runtime
    from actorloop.runtime.service.profiles import AppConfig
    from actorloop.runtime.service.service import SessionService
    from actorloop.runtime.stores.sqlite import SqliteStore
    from actorloop.runtime.testing import EchoProvider

    options = AgentOptions(model="m", system="be brief")
    config = AppConfig(provider=EchoProvider(), model=None, store_url=f"sqlite:{path}")
    config.add_profile("default", options, default=True)
    out: dict[str, dict[str, float]] = {"live": {}, "stored": {}}

    async def per_call(service: SessionService, session_id: str) -> float:
        await service.detail(session_id)
        cpu = time.process_time()
        for _ in range(DETAIL_CALLS):
            await service.detail(session_id)
        return (time.process_time() - cpu) / DETAIL_CALLS * 1e6

    async def run() -> None:
        store = SqliteStore(path)
        async with (
            Runtime.open(store=store, provider=EchoProvider()) as rt,
            SessionService.open(rt, config.profiles) as service,
        ):
            agent = await rt.spawn(options, session_id="detail")
            done = 0
            for turns in DETAIL_TURNS:
                while done < turns:
                    await agent.send(f"question {done}")
                    done += 1
                out["live"][str(turns)] = await per_call(service, "detail")
                await agent.dispose()  # stored now: each call reads it (no lease)
                out["stored"][str(turns)] = await per_call(service, "detail")
                agent = await rt.resume("detail", options)

    gc.collect()
    trio.run(run)
    return out


def _copy(source: Path, target: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{source}{suffix}").exists():
            shutil.copyfile(f"{source}{suffix}", f"{target}{suffix}")


def measure(sizes: tuple[int, ...], rounds: int) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-resume-") as tmp:
        for size in sizes:
            path = Path(tmp) / f"s{size}.db"
            events = _setup(path, size)
            _resume_cpu(path, True, send=False)  # warm: imports, first connection
            samples: dict[str, list[float]] = {"off": [], "on": []}
            for _ in range(rounds):
                for mode in ("off", "on"):
                    samples[mode].append(_resume_cpu(path, mode == "on", send=False))
            first: dict[str, list[float]] = {"off": [], "on": []}
            for index in range(max(1, rounds // 2)):
                for mode in ("off", "on"):
                    copy = Path(tmp) / f"copy{size}-{mode}-{index}.db"
                    _copy(path, copy)
                    first[mode].append(_resume_cpu(copy, mode == "on", send=True))
            loads: dict[str, list[float]] = {"on": [], "paused": []}
            if size <= 10_000:
                for _ in range(rounds):
                    for mode in ("on", "paused"):
                        loads[mode].append(_load_cpu(path, mode == "paused"))
            row: dict[str, Any] = {
                "events": events,
                "resume_ms_snapshots_off": statistics.median(samples["off"]) * 1e3,
                "resume_ms_snapshots_on": statistics.median(samples["on"]) * 1e3,
                "resume_and_send_ms_snapshots_off": statistics.median(first["off"]) * 1e3,
                "resume_and_send_ms_snapshots_on": statistics.median(first["on"]) * 1e3,
                "bytes": path.stat().st_size,
            }
            if loads["on"]:
                row["load_ms_collector_on"] = statistics.median(loads["on"]) * 1e3
                row["load_ms_collector_paused"] = statistics.median(loads["paused"]) * 1e3
                row["load_collector_on_x_paused"] = (
                    row["load_ms_collector_on"] / row["load_ms_collector_paused"]
                )
            rows[str(size)] = row
            print(json.dumps(row), flush=True)
        detail = _detail_cpu(Path(tmp) / "detail.db")
        print(json.dumps(detail), flush=True)
    small, large = rows[str(sizes[0])], rows[str(sizes[-1])]
    return {
        "rows": rows,
        "detail_us": detail,
        "large_x_small_snapshots_on": large["resume_ms_snapshots_on"]
        / small["resume_ms_snapshots_on"],
        "large_x_small_snapshots_off": large["resume_ms_snapshots_off"]
        / small["resume_ms_snapshots_off"],
    }


def to_markdown(report: dict[str, Any], command: str) -> str:
    env = report["environment"]
    lines = [
        "# Resume from a fold snapshot",
        "",
        f"`{command}` — Python {env['python']} on {env['platform']} (SQLite "
        f"{env['sqlite']}), {env['when']}, {report['rounds']} rounds interleaved. CPU ms, "
        "median of the rounds; *off* is `SqliteStore(path, snapshots=False)` (every load "
        "replays the whole log), *on* the default (the latest snapshot and the rows after "
        "it). Issue 38's targets: ≤ 150 ms at 100,000 events and ≤ 2× the time at 10,000.",
        "",
        "| events | resume off | resume on | off ÷ on | resume + first send off "
        "| resume + first send on | MB on disk |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in report["rows"].values():
        lines.append(
            f"| {row['events']:,} | {row['resume_ms_snapshots_off']:.1f} "
            f"| {row['resume_ms_snapshots_on']:.1f} "
            f"| {row['resume_ms_snapshots_off'] / row['resume_ms_snapshots_on']:.1f} "
            f"| {row['resume_and_send_ms_snapshots_off']:.1f} "
            f"| {row['resume_and_send_ms_snapshots_on']:.1f} | {row['bytes'] / 1e6:.1f} |"
        )
    lines += [
        "",
        f"Largest ÷ smallest log, resume with snapshots: "
        f"{report['large_x_small_snapshots_on']:.2f}× (without: "
        f"{report['large_x_small_snapshots_off']:.2f}×).",
        "",
        "The first send after a resume builds the first request, which holds every surface "
        "message: with a snapshot their events (and only those) are read then, by seq.",
        "",
        "## `store.load` with the collector on",
        "",
        "A plain `store.load(id, repair=False)` (snapshots off), the collector on as a "
        "process has it, against the same load inside `gc_paused()`. Issue 38's target: "
        "≤ 1.1× (every store's load now pauses the collector itself).",
        "",
        "| events | collector on, ms | paused, ms | on ÷ paused |",
        "|---:|---:|---:|---:|",
    ]
    for row in report["rows"].values():
        if "load_collector_on_x_paused" in row:
            lines.append(
                f"| {row['events']:,} | {row['load_ms_collector_on']:.1f} "
                f"| {row['load_ms_collector_paused']:.1f} "
                f"| {row['load_collector_on_x_paused']:.2f} |"
            )
    detail = report.get("detail_us")
    if detail is not None:
        lines += [
            "",
            "## `GET /v1/sessions/{id}`: the handler's CPU by history",
            "",
            "`SessionService.detail` (status, lineage, folded header, usage) of one session of "
            "a one-step echo agent at 10, 50 and 500 turns, CPU µs per call "
            f"(mean of {DETAIL_CALLS}); live is its agent in the runtime, stored is read from "
            "`sqlite:` without a lease (from the fold snapshot its loop saved once one was "
            "due, and the rows after it). Issue 38's target: flat in history.",
            "",
            "| turns | live µs | stored µs |",
            "|---:|---:|---:|",
        ]
        for turns in detail["live"]:
            lines.append(
                f"| {int(turns):,} | {detail['live'][turns]:.0f} | {detail['stored'][turns]:.0f} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="1,000 and 10,000 events")
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    sizes = (1_000, 10_000) if args.quick else (10_000, 100_000)
    rounds = args.rounds or (3 if args.quick else 5)
    report = measure(sizes, rounds)
    report["rounds"] = rounds
    report["environment"] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "sqlite": sqlite3.sqlite_version,
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    stem = "resume-quick" if args.quick else "resume"
    command = "python -m benchmarks.bench_resume" + (" --quick" if args.quick else "")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n")
    markdown = to_markdown(report, command)
    (RESULTS / f"{stem}.md").write_text(markdown)
    print(markdown)
    return report


if __name__ == "__main__":
    main()
