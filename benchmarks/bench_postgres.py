"""PostgreSQL store benchmark, against a real server started for the run (tests/pg_server.py:
initdb in a temporary directory, loopback port, default durability — fsync and
synchronous_commit on):

* durable events/s through the CodecActor with group commit across 1, 100 and 1,000
  concurrent sessions (each session holds its lease; step batches of 5 events, submit +
  barrier, as the loop persists before each model call and tool body);
* claim + replay latency: a new owner (another store instance, as another serve instance)
  claims a session of 1,000 and of 100,000 events and loads it (`load(lease=...)`: the
  claim, every row read, checksummed and validated);
* failover time: a child process owning 100 sessions is killed with SIGKILL; the time until
  another store has claimed and replayed all of them, with a 2 s lease.

    python -m benchmarks.bench_postgres [--quick]

Writes benchmarks/results/postgres.json and postgres.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import trio

from actorloop.actors.codec import CodecActor
from actorloop.runtime.errors import SessionBusy
from actorloop.runtime.log.session import SessionMeta
from actorloop.runtime.stores.postgres import PostgresStore
from benchmarks.bench_store import STEP_BATCH, build_log

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
sys.path.insert(0, str(ROOT / "tests"))
from pg_server import PgServer  # noqa: E402  (the tests' server helper, on purpose)

_OWNER = """
import sys, trio
from actorloop.runtime.stores.postgres import PostgresStore
async def main():
    store = PostgresStore(sys.argv[1])
    for session_id in sys.argv[2].split(","):
        await store.acquire(store.claim(session_id))
    print("owned", flush=True)
    await trio.sleep_forever()
trio.run(main)
"""


async def throughput(url: str, sessions: int, turns: int) -> dict[str, Any]:
    store = PostgresStore(url)
    events = build_log("x", turns).events
    ids = [f"tp{sessions}-{index}" for index in range(sessions)]
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
        "sessions": sessions,
        "events": total,
        "barriers": sessions * len(batches),
        "seconds": elapsed,
        "events_per_s": total / elapsed,
    }


async def claim_replay(url: str, events: int, repeats: int) -> dict[str, Any]:
    session_id = f"replay-{events}"
    log = build_log(session_id, -(-events // 13))
    writer = PostgresStore(url)
    await writer.create(log.meta)
    for start in range(0, len(log), 5000):
        await writer.append(session_id, log.events[start : start + 5000])
    await writer.close()
    times: list[float] = []
    for _ in range(repeats):
        owner = PostgresStore(url)  # a new instance each time: a claim by a new owner
        started = time.perf_counter()
        lease = owner.claim(session_id)
        _meta, loaded = await owner.load(session_id, lease=lease)
        times.append(time.perf_counter() - started)
        assert len(loaded) == len(log)
        lease.release()
        await owner.close()
    return {
        "events": len(log),
        "repeats": repeats,
        "median_s": statistics.median(times),
        "min_s": min(times),
    }


async def failover(url: str, sessions: int, lease_s: float) -> dict[str, Any]:
    ids = [f"fo-{index}" for index in range(sessions)]
    setup = PostgresStore(url)
    for session_id in ids:
        log = build_log(session_id, 4)
        await setup.create(log.meta)
        await setup.append(session_id, log.events)
    await setup.close()
    owner_url = f"{url}?lease_s={lease_s:g}&node=doomed"
    child = await trio.to_thread.run_sync(
        lambda: subprocess.Popen(
            [sys.executable, "-c", _OWNER, owner_url, ",".join(ids)],
            stdout=subprocess.PIPE,
            text=True,
        )
    )
    assert child.stdout is not None
    assert (await trio.to_thread.run_sync(child.stdout.readline)).strip() == "owned"
    child.send_signal(signal.SIGKILL)
    killed = time.perf_counter()
    await trio.to_thread.run_sync(child.wait)
    taker = PostgresStore(f"{url}?lease_s={lease_s:g}&node=taker")
    claimed: dict[str, float] = {}

    async def take(session_id: str) -> None:
        while True:
            lease = taker.claim(session_id)
            try:
                await taker.load(session_id, lease=lease)
            except SessionBusy:
                lease.release()
                await trio.sleep(0.05)  # the dead owner's lease runs out on the database clock
                continue
            claimed[session_id] = time.perf_counter() - killed
            return

    async with trio.open_nursery() as nursery:
        for session_id in ids:
            nursery.start_soon(take, session_id)
    await taker.close()
    return {
        "sessions": sessions,
        "lease_s": lease_s,
        "all_taken_s": max(claimed.values()),
        "first_taken_s": min(claimed.values()),
    }


def markdown(report: dict[str, Any]) -> str:
    env = report["environment"]
    lines = [
        "# PostgreSQL store",
        "",
        f"`python -m benchmarks.bench_postgres` — Python {env['python']} on {env['platform']}, "
        f"{env['postgres']}, {env['when']}. A local server (loopback), default durability "
        "(fsync on, synchronous_commit on): every barrier below is a committed transaction.",
        "",
        "## Durable appends, group commit across sessions",
        "",
        "| sessions | events | barriers | seconds | events/s |",
        "|---:|---:|---:|---:|---:|",
    ]
    for row in report["throughput"]:
        lines.append(
            f"| {row['sessions']:,} | {row['events']:,} | {row['barriers']:,} | "
            f"{row['seconds']:.2f} | {row['events_per_s']:,.0f} |"
        )
    lines += [
        "",
        "## Claim + replay by a new owner",
        "",
        "| events | median | min | repeats |",
        "|---:|---:|---:|---:|",
    ]
    for row in report["claim_replay"]:
        lines.append(
            f"| {row['events']:,} | {row['median_s'] * 1000:,.1f} ms | "
            f"{row['min_s'] * 1000:,.1f} ms | {row['repeats']} |"
        )
    fo = report["failover"]
    lines += [
        "",
        "## Failover",
        "",
        f"A process owning {fo['sessions']} sessions (lease {fo['lease_s']:g} s) is killed with "
        f"SIGKILL; another store claims and replays each as soon as the database lets it: "
        f"first after {fo['first_taken_s']:.2f} s, all after {fo['all_taken_s']:.2f} s.",
        "",
    ]
    return "\n".join(lines)


async def run(quick: bool) -> dict[str, Any]:
    bindir = PgServer.find()
    if bindir is None:
        raise SystemExit("PostgreSQL is not installed (/usr/lib/postgresql/*/bin)")
    server = PgServer(bindir)
    try:
        server.init()
        server.start()
        url = server.url(server.create_database())
        with psycopg.connect(url) as conn:
            version = conn.execute("SHOW server_version").fetchone()
        plan = ((1, 20), (100, 2), (1000, 1)) if quick else ((1, 100), (100, 8), (1000, 2))
        report: dict[str, Any] = {
            "environment": {
                "python": platform.python_version(),
                "platform": platform.platform(),
                "postgres": f"PostgreSQL {version[0] if version else '?'}",
                "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            },
            "throughput": [await throughput(url, s, t) for s, t in plan],
            "claim_replay": [
                await claim_replay(url, 1_000, 5 if quick else 20),
                await claim_replay(url, 100_000, 1 if quick else 3),
            ],
            "failover": await failover(url, 100, 2.0),
        }
    finally:
        server.cleanup()
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    report = trio.run(run, args.quick)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "postgres.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / "postgres.md").write_text(markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
