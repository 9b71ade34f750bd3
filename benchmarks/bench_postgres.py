"""PostgreSQL store benchmark, against a real server started for the run (tests/kits/pg_server.py:
initdb in a temporary directory, loopback port, default durability — fsync and
synchronous_commit on):

* durable events/s through the CodecActor with group commit across 1, 100 and 1,000
  concurrent sessions (each session holds its lease; step batches of 5 events, submit +
  barrier, as the loop persists before each model call and tool body);
* the floors it is measured against, in the same run on the same server, with the same
  rows already encoded (so they measure the database alone): every round's rows of all
  sessions in one `COPY` and in one `executemany`, each round a committed transaction
  (the group commit's ideal), and one transaction per barrier (each session commits each
  of its batches alone, `pool_max` = 10 connections at once: no group commit); the
  ratios of the group commit to them;
* claim + replay latency: a new owner (another store instance, as another serve instance)
  claims a session of 1,000 and of 100,000 events and loads it (`load_stored(lease=...)`),
  with fold snapshots off (the claim, every row read, checksummed and validated) and on
  (the latest snapshot and the rows after it), interleaved;
* failover time: a child process owning 100 sessions is killed with SIGKILL; the time until
  another store has claimed and replayed all of them, with a 2 s lease;
* routing: two serve instances (in one child process, each its own runtime, store and
  socket) on the server; the median latency of `GET /v1/sessions/{id}` and of a send
  answered by the session's owner, and by the other instance (handed to the owner through
  the database), and the CPU time of the process per request. With `--baseline DIR|REV` (a
  checkout of another build, or a revision extracted with `git archive`) the same
  measurement runs on that build's code too, in rounds alternating between the two builds
  on the same server, so the before/after ratios come from one run.

    python -m benchmarks.bench_postgres [--quick] [--commit-only] [--routing-only]
        [--baseline DIR|REV]

Writes benchmarks/results/postgres.json and postgres.md (`--commit-only`: the group
commit and its floors alone, printed, nothing written; `--routing-only`: the routing
section alone, printed, nothing written).
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import trio

from actorloop.actors.codec import CodecActor
from actorloop.codecs.rows import event_rows
from actorloop.runtime.errors import SessionBusy, StoreUnavailable
from actorloop.runtime.log.session import SessionMeta
from actorloop.runtime.log.snapshots import take_snapshot
from actorloop.runtime.log.tokens import TokenMeter
from actorloop.runtime.stores.loading import load_stored
from actorloop.runtime.stores.postgres import PostgresStore
from benchmarks.baseline import baseline_package
from benchmarks.bench_store import STEP_BATCH, build_log

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
sys.path.insert(0, str(ROOT / "tests" / "kits"))
from pg_server import PgServer  # noqa: E402  (the tests' server helper, on purpose)
from serve_kit import HeldModel, app_config_for, running_server  # noqa: E402  (likewise)

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


_FLOOR_TABLE = "public.floor_events"
_FLOOR_COLUMNS = "session_id, seq, type, time, body, crc, epoch"
FLOOR_CONNECTIONS = 10
"""Connections of the one-transaction-per-barrier floor (the store's default pool_max)."""


def _floor_rounds(sessions: int, turns: int) -> list[list[tuple[Any, ...]]]:
    """The rows of each round (every session's next step batch), encoded as the store
    encodes them, with an epoch column."""
    events = build_log("x", turns).events
    ids = [f"fl{sessions}-{index}" for index in range(sessions)]
    rows = {sid: [(*row, 1) for row in event_rows(sid, events)] for sid in ids}
    return [
        [row for sid in ids for row in rows[sid][start : start + STEP_BATCH]]
        for start in range(0, len(events), STEP_BATCH)
    ]


def _fresh_floor_table(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {_FLOOR_TABLE}")
        conn.execute(f"CREATE TABLE {_FLOOR_TABLE} (LIKE actorloop.events INCLUDING ALL)")


def _copy_floor(url: str, rounds: list[list[tuple[Any, ...]]]) -> float:
    _fresh_floor_table(url)
    with psycopg.connect(url) as conn:
        started = time.perf_counter()
        for rows in rounds:
            with conn.cursor() as cursor:
                statement = f"COPY {_FLOOR_TABLE} ({_FLOOR_COLUMNS}) FROM STDIN"
                with cursor.copy(statement) as copy:
                    for row in rows:
                        copy.write_row(row)
            conn.commit()
        return time.perf_counter() - started


def _executemany_floor(url: str, rounds: list[list[tuple[Any, ...]]]) -> float:
    _fresh_floor_table(url)
    insert = f"INSERT INTO {_FLOOR_TABLE} ({_FLOOR_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s)"
    with psycopg.connect(url) as conn:
        started = time.perf_counter()
        for rows in rounds:
            with conn.cursor() as cursor:
                cursor.executemany(insert, rows)
            conn.commit()
        return time.perf_counter() - started


def _transaction_per_barrier_floor(url: str, rounds: list[list[tuple[Any, ...]]]) -> float:
    """Each session's batch of each round committed alone, FLOOR_CONNECTIONS at once."""
    _fresh_floor_table(url)
    insert = f"INSERT INTO {_FLOOR_TABLE} ({_FLOOR_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s)"
    barriers = [
        [list(batch) for _, batch in itertools.groupby(rows, key=lambda row: row[0])]
        for rows in rounds
    ]
    connections = [psycopg.connect(url) for _ in range(FLOOR_CONNECTIONS)]
    start = threading.Barrier(FLOOR_CONNECTIONS + 1)

    def worker(index: int) -> None:
        conn = connections[index]
        start.wait()
        for batches in barriers:
            for batch in batches[index::FLOOR_CONNECTIONS]:
                with conn.cursor() as cursor:
                    cursor.executemany(insert, batch)
                conn.commit()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(FLOOR_CONNECTIONS)]
    try:
        for thread in threads:
            thread.start()
        start.wait()
        started = time.perf_counter()
        for thread in threads:
            thread.join()
        return time.perf_counter() - started
    finally:
        for conn in connections:
            conn.close()


def floors(url: str, sessions: int, turns: int, group: dict[str, Any]) -> dict[str, Any]:
    """The three floors of `sessions` x `turns` (the module docstring) and the group
    commit's ratios to them (`group`: its `throughput` row)."""
    rounds = _floor_rounds(sessions, turns)
    total = sum(len(rows) for rows in rounds)
    rates = {
        "copy": total / _copy_floor(url, rounds),
        "executemany": total / _executemany_floor(url, rounds),
        "transaction_per_barrier": total / _transaction_per_barrier_floor(url, rounds),
    }
    return {
        "sessions": sessions,
        "events": total,
        "events_per_s": rates,
        "group_commit_events_per_s": group["events_per_s"],
        "ratio": {name: group["events_per_s"] / rate for name, rate in rates.items()},
    }


async def claim_replay(url: str, events: int, repeats: int) -> dict[str, Any]:
    session_id = f"replay-{events}"
    log = build_log(session_id, -(-events // 13))
    writer = PostgresStore(url)
    await writer.create(log.meta)
    for start in range(0, len(log), 5000):
        await writer.append(session_id, log.events[start : start + 5000])
    snapshot = take_snapshot(log, TokenMeter(log))
    assert snapshot is not None
    await writer.save_snapshot(session_id, snapshot)  # as a loop saves one at a turn end
    await writer.close()
    count = len(log)
    del log, snapshot  # a new owner holds none of the writer's objects
    gc.collect()
    times: dict[str, list[float]] = {"off": [], "on": []}
    cpu: dict[str, list[float]] = {"off": [], "on": []}
    for _ in range(repeats):
        for mode in ("off", "on"):  # interleaved: both see the same server and machine
            owner = PostgresStore(url)  # a new instance each time: a claim by a new owner
            owner.snapshot_state.enabled = mode == "on"
            started, used = time.perf_counter(), time.process_time()
            lease = owner.claim(session_id)
            session = await load_stored(owner, session_id, lease=lease)
            times[mode].append(time.perf_counter() - started)
            cpu[mode].append(time.process_time() - used)
            assert len(session) == count
            assert owner.snapshot_counters.restored == (mode == "on")
            lease.release()
            await owner.close()
    return {
        "events": count,
        "repeats": repeats,
        "median_s": statistics.median(times["off"]),
        "min_s": min(times["off"]),
        "cpu_median_s": statistics.median(cpu["off"]),
        "snapshot_median_s": statistics.median(times["on"]),
        "snapshot_min_s": min(times["on"]),
        "snapshot_cpu_median_s": statistics.median(cpu["on"]),
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
            except StoreUnavailable:
                # 100 claims at once on a cold pool (it grows one connection at a time): on
                # a loaded machine a call may wait past the 2 s pool timeout. Counted in.
                lease.release()
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


SETTLE_S = 0.02
"""The pause between two requests of the routing section."""


async def routing_latency(url: str, requests: int) -> dict[str, Any]:
    """Median latencies (ms) at the owner and routed, and this process's CPU time per
    request (both instances and the client are in it): the module docstring."""
    store = f"{url}?lease_s=15&poll_s=1"
    figures: dict[str, float] = {}
    async with (
        running_server(app_config_for(HeldModel(), store), store=store) as owner,
        running_server(app_config_for(HeldModel(), store), store=store) as other,
        owner.client() as at_owner,
        other.client() as at_other,
    ):
        await at_owner.post("/v1/sessions", json={"session_id": "routed"})
        await at_owner.post("/v1/sessions/routed/messages", json={"content": "warm up"})
        for http in (at_owner, at_other):  # both pools' connections opened, code paths run
            for _ in range(5):
                await http.get("/v1/sessions/routed")
            await http.post("/v1/sessions/routed/messages", json={"content": "warm up"})
        wall: dict[str, list[float]] = {}
        cpu: dict[str, float] = {}
        # Alternating, request by request, between the owner and the other instance: both
        # see the same machine and server, whatever else runs on them meanwhile.
        for name, count in (("get", requests), ("send", max(5, requests // 2))):
            for index in range(count):
                for where, http in (("owner", at_owner), ("routed", at_other)):
                    key = f"{name}_{where}"
                    started, used = time.perf_counter(), time.process_time()
                    if name == "get":
                        answer = await http.get("/v1/sessions/routed")
                    else:
                        answer = await http.post(
                            "/v1/sessions/routed/messages", json={"content": f"{where} {index}"}
                        )
                    wall.setdefault(key, []).append(time.perf_counter() - started)
                    cpu[key] = cpu.get(key, 0.0) + time.process_time() - used
                    assert answer.status_code == 200, answer.text
                    # What a request leaves running after its answer (the turn's last
                    # writes, the rows' cleanup) ends before the next one starts.
                    await trio.sleep(SETTLE_S)
        for key, times in wall.items():
            figures[f"{key}_ms"] = statistics.median(times) * 1000
            figures[f"{key}_cpu_ms"] = cpu[key] / len(times) * 1000
    return {"requests": requests, **figures}


def _routing_child(url: str, requests: int) -> None:
    """`--routing-child`: one `routing_latency` round, printed as JSON with the file of
    the routing module it ran (which build)."""
    from actorloop.runtime.service import routing

    result = trio.run(routing_latency, url, requests)
    print(json.dumps({**result, "routing_module": routing.__file__}))


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True)
    return done.stdout.strip()


async def _routing_round(server: PgServer, requests: int, path: str | None) -> dict[str, Any]:
    url = server.url(server.create_database())
    env = dict(os.environ)
    if path is not None:
        env["PYTHONPATH"] = path
    done = await trio.run_process(
        [sys.executable, "-m", "benchmarks.bench_postgres", "--routing-child", url, str(requests)],
        cwd=ROOT,
        env=env,
        capture_stdout=True,
    )
    result: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return result


def _pooled(rounds: list[dict[str, Any]], requests: int) -> dict[str, Any]:
    """The rounds of one build: each figure the median of the rounds' figures."""
    keys = [key for key in rounds[0] if key.endswith("_ms")]
    pooled: dict[str, Any] = {key: statistics.median(r[key] for r in rounds) for key in keys}
    return {"requests": requests, "rounds": len(rounds), **pooled}


async def routing(server: PgServer, requests: int, rounds: int, baseline: str | None) -> Any:
    """The routing section: this build's rounds, and the baseline's interleaved with them
    (each round a child process on a fresh database of the same server)."""
    ours: list[dict[str, Any]] = []
    theirs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-postgres-baseline-") as temp:
        path, label = None, ""
        if baseline is not None:
            package, label = baseline_package(baseline, Path(temp))
            path = str(package)
        for _ in range(rounds):
            if path is not None:
                theirs.append(await _routing_round(server, requests, path))
                assert theirs[-1]["routing_module"].startswith(path), theirs[-1]
            ours.append(await _routing_round(server, requests, None))
    report = _pooled(ours, requests)
    report["build"] = f"working tree on {_git('rev-parse', '--short', 'HEAD')}"
    if baseline is not None:
        report["baseline"] = {"build": label, **_pooled(theirs, requests)}
    return report


def markdown(report: dict[str, Any]) -> str:
    env = report["environment"]
    lines = [
        "# PostgreSQL store",
        "",
        f"`python -m benchmarks.bench_postgres` — Python {env['python']} on {env['platform']}, "
        f"{env['postgres']}, {env['when']}, {env.get('cpus', '?')} CPUs at a load average of "
        f"{env.get('load_average_1m', 0):.1f} when it started (other work shares the machine: "
        "compare rows of one run, not runs). A local server (loopback), default durability "
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
        "## Against the floors (same run, same server)",
        "",
        "Events/s committing the same rows, encoded beforehand: `COPY` and `executemany`",
        "of each round's rows of all sessions in one transaction (the group commit's ideal),",
        f"and one transaction per barrier ({FLOOR_CONNECTIONS} connections, no group commit).",
        "The ratio is the group commit's events/s to each floor.",
        "",
        "| sessions | group commit | COPY | executemany | one tx per barrier "
        "| ÷ COPY | ÷ executemany | ÷ one tx per barrier |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in report["floors"]:
        rates, ratio = row["events_per_s"], row["ratio"]
        lines.append(
            f"| {row['sessions']:,} | {row['group_commit_events_per_s']:,.0f} | "
            f"{rates['copy']:,.0f} | {rates['executemany']:,.0f} | "
            f"{rates['transaction_per_barrier']:,.0f} | {ratio['copy']:.2f} | "
            f"{ratio['executemany']:.2f} | {ratio['transaction_per_barrier']:.2f} |"
        )
    lines += [
        "",
        "Issue 34's targets: ≥ 0.5 of the COPY floor at 1,000 sessions, ≥ 2 × one",
        "transaction per barrier at 100 sessions.",
        "",
        "## Claim + replay by a new owner",
        "",
        "Wall time (CPU in brackets, this process's) of `claim` + `load_stored(lease=...)` by",
        "a new store instance: with fold snapshots off (every row read, checksummed and",
        "validated) and on (the latest snapshot, the rows after it; persistence.md §2.7),",
        "interleaved. Issue 38's target: ≤ 300 ms at 100,000 events with snapshots.",
        "",
        "| events | snapshots off, median | off, min | snapshots on, median | on, min | repeats |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for row in report["claim_replay"]:
        lines.append(
            f"| {row['events']:,} | {row['median_s'] * 1000:,.1f} ms "
            f"({row.get('cpu_median_s', 0) * 1000:,.1f}) | {row['min_s'] * 1000:,.1f} ms | "
            f"{row.get('snapshot_median_s', 0) * 1000:,.1f} ms "
            f"({row.get('snapshot_cpu_median_s', 0) * 1000:,.1f}) | "
            f"{row.get('snapshot_min_s', 0) * 1000:,.1f} ms | {row['repeats']} |"
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
    route = report.get("routing")
    if route is not None:
        lines += routing_markdown(route)
    return "\n".join(lines)


def routing_markdown(route: dict[str, Any]) -> list[str]:
    """The routing section's lines (module docstring)."""
    base = route.get("baseline")
    builds = [("this build", route)] if base is None else [("before", base), ("this build", route)]
    lines = [
        "## Routing between two instances",
        "",
        f"Median of {route['requests']} `GET /v1/sessions/{{id}}` (and of half as many",
        "sends, a one-step echo turn) at the session's owner and at the other instance,",
        "which hands each to the owner through the database (docs/deployment.md §2.1),",
        f"alternating request by request, {SETTLE_S * 1000:.0f} ms apart; CPU is the process's",
        "(both instances, their threads and the client) during the request.",
        f"Each figure is the median of {route['rounds']} rounds"
        + (
            ", alternating with the same rounds of the build before "
            f"(`--baseline`: {base['build']}; this build: {route['build']})."
            if base is not None
            else "."
        ),
        "",
        "| request | build | at the owner | routed | routing adds | CPU at the owner "
        "| CPU routed |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for name in ("get", "send"):
        for build, figures in builds:
            at_owner, routed = figures[f"{name}_owner_ms"], figures[f"{name}_routed_ms"]
            cpu_owner, cpu_routed = (
                figures[f"{name}_owner_cpu_ms"],
                figures[f"{name}_routed_cpu_ms"],
            )
            lines.append(
                f"| {name.upper() if name == 'get' else name} | {build} | {at_owner:.1f} ms | "
                f"{routed:.1f} ms | {routed - at_owner:.1f} ms | {cpu_owner:.1f} ms | "
                f"{cpu_routed:.1f} ms |"
            )
    if base is not None:
        lines.append("")
        for name in ("get", "send"):
            before = base[f"{name}_routed_ms"] - base[f"{name}_owner_ms"]
            now = route[f"{name}_routed_ms"] - route[f"{name}_owner_ms"]
            lines.append(
                f"* routing adds {now:.1f} ms to a {name.upper() if name == 'get' else name} "
                f"({before:.1f} ms before: {now / before:.2f} ×); routed, it costs "
                f"{route[f'{name}_routed_cpu_ms']:.1f} ms of CPU "
                f"({base[f'{name}_routed_cpu_ms']:.1f} ms before)."
            )
    lines.append("")
    return lines


async def run(
    quick: bool,
    commit_only: bool = False,
    routing_only: bool = False,
    baseline: str | None = None,
) -> dict[str, Any]:
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
                "cpus": os.cpu_count(),
                "load_average_1m": os.getloadavg()[0],
            },
            "throughput": [],
            "floors": [],
        }
        if routing_only:
            report["routing"] = await routing(server, 20 if quick else 100, 2, baseline)
            return report
        if not commit_only:
            report["claim_replay"] = [
                await claim_replay(url, 1_000, 5 if quick else 20),
                await claim_replay(url, 100_000, 1 if quick else 3),
            ]
            report["failover"] = await failover(url, 100, 2.0)
            report["routing"] = await routing(server, 20 if quick else 100, 3, baseline)
        for sessions, turns in plan:
            # Each floor right after its group commit: the same minute, the same server.
            group = await throughput(url, sessions, turns)
            report["throughput"].append(group)
            if sessions > 1:
                floor = await trio.to_thread.run_sync(floors, url, sessions, turns, group)
                report["floors"].append(floor)
    finally:
        server.cleanup()
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--commit-only", action="store_true")
    parser.add_argument("--routing-only", action="store_true")
    parser.add_argument(
        "--baseline",
        metavar="DIR|REV",
        help="the build to compare routing with: a checkout or a revision",
    )
    parser.add_argument(
        "--routing-child", nargs=2, metavar=("URL", "REQUESTS"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.routing_child:
        _routing_child(args.routing_child[0], int(args.routing_child[1]))
        return
    report = trio.run(run, args.quick, args.commit_only, args.routing_only, args.baseline)
    if args.commit_only:
        print(json.dumps({key: report[key] for key in ("throughput", "floors")}, indent=2))
        return
    if args.routing_only:
        print(json.dumps(report["routing"], indent=2))
        print("\n".join(routing_markdown(report["routing"])))
        return
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "postgres.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / "postgres.md").write_text(markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
