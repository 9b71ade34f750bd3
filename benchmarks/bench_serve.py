"""Service benchmark: N concurrent sessions driving `actorloop serve` over HTTP.

Run from the repository root:

    python -m benchmarks.bench_serve [--quick]

Writes benchmarks/results/serve.json and benchmarks/results/serve.md (`--quick` writes
serve-quick.*).

A real `actorloop serve` runs as a subprocess on 127.0.0.1 (SQLite store in a temporary
directory, the simulator as the model, dev invariants off, auth on), and this process is
the load: one trio run with an httpx client whose pool holds a connection per session.
Per configuration, N sessions are created, then each sends T messages one after another
(`POST /v1/sessions/{id}/messages`, waiting for the turn: one model step per turn), all N
sessions at once. Reported per configuration: turns/s over the whole run, and the latency
of a waiting send (p50, p90, p99, max) — the time an API client waits for a turn to end,
i.e. the HTTP exchange plus the turn (every event appended, flushed to SQLite) plus the
simulated model latency. A light read (`GET /v1/sessions/{id}`) is timed alongside, and
one stream (`GET .../events?follow=false`) per session at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx
import trio

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
TOKEN = "bench-token"
CONFIGS = (
    # (sessions, turns per session, simulated model latency in ms)
    (1, 200, 0.0),
    (10, 50, 0.0),
    (100, 10, 0.0),
    (300, 5, 0.0),
    (100, 10, 50.0),
)
QUICK_CONFIGS = ((1, 50, 0.0), (10, 10, 0.0), (50, 4, 0.0), (50, 4, 50.0))


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def start_server(root: Path, latency_ms: float) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "ACTORLOOP_API_TOKEN": TOKEN}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "actorloop.runtime.console",
            "serve",
            "--port",
            "0",
            "--store",
            f"sqlite:{root / f'serve-{latency_ms:g}.db'}",
            "--sim-latency-ms",
            str(latency_ms),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=root,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "listening on" not in line:
        proc.kill()
        raise RuntimeError(f"server did not start: {line!r} {proc.communicate()[1]}")
    return proc, line.split("listening on ", 1)[1].split(" ", 1)[0]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process `pid` so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stop_server(proc: subprocess.Popen[str]) -> int:
    proc.terminate()
    proc.communicate(timeout=120)
    return proc.returncode


async def run_config(
    url: str, server_pid: int, sessions: int, turns: int, tag: str
) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    sends: list[float] = []
    reads: list[float] = []
    streams: list[float] = []
    errors = 0
    ids = [f"{tag}-{index}" for index in range(sessions)]

    def client() -> httpx.AsyncClient:
        # One client (one connection) per session, as N independent API clients: a shared
        # pool of N connections costs the load generator O(N) per request.
        return httpx.AsyncClient(base_url=url, headers=headers, timeout=300)

    async def create(session_id: str) -> None:
        async with client() as own:
            (await own.post("/v1/sessions", json={"session_id": session_id})).raise_for_status()

    async with trio.open_nursery() as nursery:
        for session_id in ids:
            nursery.start_soon(create, session_id)

    connected = 0
    all_connected = trio.Event()
    go = trio.Event()

    async def drive(session_id: str) -> None:
        nonlocal errors, connected
        async with client() as own:
            (await own.get("/healthz")).raise_for_status()  # connected before the clock runs
            connected += 1
            if connected == sessions:
                all_connected.set()
            await go.wait()
            for turn in range(turns):
                started = time.perf_counter()
                response = await own.post(
                    f"/v1/sessions/{session_id}/messages",
                    json={"content": f"message {turn} of the benchmark"},
                )
                sends.append(time.perf_counter() - started)
                if response.status_code != 200 or response.json()["reason"] != "completed":
                    errors += 1
                started = time.perf_counter()
                (await own.get(f"/v1/sessions/{session_id}")).raise_for_status()
                reads.append(time.perf_counter() - started)
            started = time.perf_counter()
            response = await own.get(f"/v1/sessions/{session_id}/events?follow=false")
            response.raise_for_status()
            streams.append(time.perf_counter() - started)

    async with trio.open_nursery() as nursery:
        for session_id in ids:
            nursery.start_soon(drive, session_id)
        await all_connected.wait()
        began = time.perf_counter()
        client_cpu, server_cpu = time.process_time(), cpu_seconds(server_pid)
        go.set()
    wall = time.perf_counter() - began
    client_cpu = time.process_time() - client_cpu
    server_cpu = cpu_seconds(server_pid) - server_cpu

    def ms(samples: list[float]) -> dict[str, float]:
        return {
            "p50_ms": round(percentile(samples, 0.50) * 1e3, 2),
            "p90_ms": round(percentile(samples, 0.90) * 1e3, 2),
            "p99_ms": round(percentile(samples, 0.99) * 1e3, 2),
            "max_ms": round(max(samples) * 1e3, 2),
            "mean_ms": round(statistics.fmean(samples) * 1e3, 2),
        }

    total = sessions * turns
    return {
        "sessions": sessions,
        "turns_per_session": turns,
        "turns": total,
        "errors": errors,
        "wall_s": round(wall, 3),
        "turns_per_s": round(total / wall, 1),
        "http_requests_per_s": round(2 * total / wall, 1),
        "server_cpu_ms_per_turn": round(server_cpu * 1e3 / total, 2),
        "client_cpu_ms_per_turn": round(client_cpu * 1e3 / total, 2),
        "send": ms(sends),
        "read": ms(reads),
        "stream_follow_false": ms(streams),
    }


async def http_floor(url: str, server_pid: int, clients: int, requests: int) -> dict[str, Any]:
    """`GET /healthz` from `clients` connections: the cost of an HTTP exchange through
    Hypercorn and Starlette with nothing behind it, the floor under every figure above."""
    done = 0

    async def hammer() -> None:
        nonlocal done
        async with httpx.AsyncClient(base_url=url) as own:
            for _ in range(requests):
                (await own.get("/healthz")).raise_for_status()
                done += 1

    server_cpu = cpu_seconds(server_pid)
    began = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(clients):
            nursery.start_soon(hammer)
    wall = time.perf_counter() - began
    server_cpu = cpu_seconds(server_pid) - server_cpu
    return {
        "clients": clients,
        "requests": done,
        "requests_per_s": round(done / wall, 1),
        "server_cpu_ms_per_request": round(server_cpu * 1e3 / done, 3),
    }


async def direct_baseline(root: Path, sessions: int, turns: int, latency_ms: float) -> float:
    """Turns/s of the same load driven in-process (`agent.send`, no HTTP): what the service
    adds is the difference."""
    from actorloop.runtime import AgentOptions, Runtime
    from actorloop.runtime.cli.orchestration import LOOKUP, make_sim

    store = f"sqlite:{root / f'direct-{sessions}-{turns}-{latency_ms:g}.db'}"
    async with Runtime.open(store=store, provider=make_sim(latency_ms, None)) as rt:
        options = AgentOptions(
            model="sim-1", system="You are a helpful assistant.", tools=(LOOKUP,)
        )
        agents = [await rt.spawn(options) for _ in range(sessions)]

        async def drive(agent: Any) -> None:
            for turn in range(turns):
                await agent.send(f"message {turn} of the benchmark")

        began = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for agent in agents:
                nursery.start_soon(drive, agent)
        return sessions * turns / (time.perf_counter() - began)


def versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "platform": platform.platform()}
    for package in ("trio", "httpx", "hypercorn", "starlette", "sse-starlette", "orjson"):
        try:
            out[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            out[package] = "absent"
    return out


def measure(quick: bool) -> dict[str, Any]:
    load_before = os.getloadavg()
    rows = []
    floor: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        root = Path(tmp)
        for latency in sorted({config[2] for config in (QUICK_CONFIGS if quick else CONFIGS)}):
            proc, url = start_server(root, latency)
            try:
                if not floor:
                    floor = trio.run(http_floor, url, proc.pid, 10, 50 if quick else 200)
                for index, (sessions, turns, config_latency) in enumerate(
                    QUICK_CONFIGS if quick else CONFIGS
                ):
                    if config_latency != latency:
                        continue
                    row = trio.run(run_config, url, proc.pid, sessions, turns, f"c{index}")
                    row["model_latency_ms"] = latency
                    direct = trio.run(direct_baseline, root, sessions, turns, latency)
                    row["direct_turns_per_s"] = round(direct, 1)
                    rows.append(row)
                    print(
                        f"{sessions} sessions × {turns} turns, model {latency:g} ms: "
                        f"{row['turns_per_s']} turns/s, send p50 {row['send']['p50_ms']} ms, "
                        f"p99 {row['send']['p99_ms']} ms; CPU ms/turn server "
                        f"{row['server_cpu_ms_per_turn']}, client {row['client_cpu_ms_per_turn']}",
                        flush=True,
                    )
            finally:
                code = stop_server(proc)
            if code != 0:
                raise RuntimeError(f"the server exited {code} after its drain")
    return {
        "benchmark": "serve",
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S%z"),
        "cpus": os.cpu_count(),
        "versions": versions(),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "quick": quick,
        "http_floor": floor,
        "results": rows,
    }


def render(report: dict[str, Any]) -> str:
    v = report["versions"]
    lines = [
        "# Service benchmark",
        "",
        f"`python -m benchmarks.bench_serve{' --quick' if report['quick'] else ''}` — Python "
        f"{v['python']} on {v['platform']} ({report['cpus']} CPUs; trio {v['trio']}, "
        f"hypercorn {v['hypercorn']}, starlette {v['starlette']}, httpx {v['httpx']}), "
        f"{report['date']}.",
        f"Load average (1/5/15 min) before: {report['load_average_before']}, after: "
        f"{report['load_average_after']} (the machine may be shared).",
        "",
        "`actorloop serve` in a subprocess (SQLite store, simulator, auth on) and the load in "
        "this process (httpx, one connection per session): N sessions each send T waiting "
        "messages one after another, all sessions at once. One model step per turn; each "
        "turn's events are flushed to SQLite before the send answers. After every send the "
        "client also reads the session (`GET /v1/sessions/{id}`).",
        "",
        "| sessions × turns | model latency | turns/s | in-process turns/s | HTTP requests/s "
        "| send p50 | send p90 | send p99 | send max | read p50 | read p99 "
        "| server CPU/turn | client CPU/turn | errors |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in report["results"]:
        send, read = row["send"], row["read"]
        lines.append(
            f"| {row['sessions']} × {row['turns_per_session']} | {row['model_latency_ms']:g} ms "
            f"| {row['turns_per_s']} | {row['direct_turns_per_s']} "
            f"| {row['http_requests_per_s']} | {send['p50_ms']} ms "
            f"| {send['p90_ms']} ms | {send['p99_ms']} ms | {send['max_ms']} ms "
            f"| {read['p50_ms']} ms | {read['p99_ms']} ms "
            f"| {row['server_cpu_ms_per_turn']} ms | {row['client_cpu_ms_per_turn']} ms "
            f"| {row['errors']} |"
        )
    lines += [
        "",
        f"HTTP floor: `GET /healthz` (nothing behind it) from {report['http_floor']['clients']} "
        f"connections ran at {report['http_floor']['requests_per_s']} requests/s, "
        f"{report['http_floor']['server_cpu_ms_per_request']} ms of server CPU per request "
        "(Hypercorn + Starlette on this machine).",
        "",
        "*in-process turns/s*: the same sessions and turns driven with `agent.send` in one "
        "process (same store kind, same simulator, no HTTP): the gap is what the service "
        "adds. *CPU/turn*: user + system CPU of the server process and of the load generator "
        "over the timed run, per turn (each turn is a send and a read). Client and server "
        "share the machine's cores, so when the client's CPU per turn exceeds the server's, "
        "the load generator itself bounds the figures; the server is one trio thread "
        "(agents and HTTP in one event loop).",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer sessions and turns")
    args = parser.parse_args()
    report = measure(args.quick)
    text = render(report)
    RESULTS.mkdir(exist_ok=True)
    suffix = "-quick" if args.quick else ""
    (RESULTS / f"serve{suffix}.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / f"serve{suffix}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
