"""Service benchmark: N concurrent sessions driving `actorloop serve` over HTTP, against the
same turns in-process and an HTTP floor, each side in a process of its own.

Run from the repository root:

    python -m benchmarks.bench_serve [--quick] [--baseline-tree PATH]

Writes benchmarks/results/serve.json and benchmarks/results/serve.md (`--quick` writes
serve-quick.*).

Three kinds of process, none sharing an event loop with another: the server (`actorloop
serve` on 127.0.0.1, SQLite store in a temporary directory, auth on, dev invariants off);
the load, `benchmarks/lean_client.py` (raw keep-alive HTTP/1.1, one socket per session, no
pipelining, minimal parsing), which reads the server's CPU time from /proc around each timed
phase; and the in-process comparison, `benchmarks/serve_direct.py` (`agent.send`, same store
kind, same agents, no HTTP). The agents' model answers at once without building a wire body
(`benchmarks/serve_app.py`; the simulator's request encoding would be counted as the loop's
cost) — one configuration runs the simulator as before for comparison.

Per configuration, N sessions are created, then each sends T messages one after another
(`POST /v1/sessions/{id}/messages`, waiting for the turn), all N sessions at once: turns/s,
send latency, server CPU per turn. Then each session reads itself (`GET /v1/sessions/{id}`)
at the history lengths the configuration names: server CPU per read. The HTTP floor is
`GET /healthz` from 10 connections: on the service, on a bare Hypercorn-trio + Starlette app
with six pass-through ASGI middlewares (the service's count before decision 0021), and on
uvicorn + Starlette (`benchmarks/serve_floor.py`).
`--baseline-tree PATH` runs the server from another checkout too (its runtime/, actors/,
codecs/ in place of this tree's), in the same run: a before/after.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from attrs import frozen

from benchmarks.baseline import linked_package

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests" / "kits"))
from listening import start_listening  # noqa: E402  (the tests' server starter, on purpose)

RESULTS = HERE / "results"
TOKEN = "bench-token"
"""The folders installed as actorloop.runtime, .actors, .codecs (pyproject.toml)."""


@frozen
class Config:
    """One measured configuration: sessions × turns, the model's latency, the provider
    (`echo`: `serve_app`'s; `sim`: the simulator), and the history lengths to read at."""

    sessions: int
    turns: int
    latency_ms: float = 0.0
    provider: str = "echo"
    read_at: tuple[int, ...] = ()


CONFIGS = (
    Config(1, 200),
    Config(10, 50, read_at=(10, 50)),
    Config(100, 10),
    Config(300, 5),
    Config(100, 10, 50.0),
    Config(10, 200, read_at=(10, 50, 100, 200)),
    Config(10, 50, provider="sim"),
)
QUICK_CONFIGS = (
    Config(1, 50),
    Config(10, 20, read_at=(10, 20)),
    Config(50, 4, 50.0),
    Config(10, 20, provider="sim"),
)
FLOOR_CONNECTIONS = 10


def run_json(command: Sequence[str], env: dict[str, str] | None = None) -> Any:
    done = subprocess.run(
        command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=1800, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


class Server:
    """A server process (the service, or a floor) and its URL, stopped by `stop`."""

    def __init__(self, command: Sequence[str], env: dict[str, str], cwd: Path) -> None:
        self.proc, self.url = start_listening(command, env, cwd)

    def client(self, *arguments: str, token: str | None = TOKEN) -> Any:
        """The lean client's report on this server."""
        command = [sys.executable, "-m", "benchmarks.lean_client", "--url", self.url]
        command += ["--server-pid", str(self.proc.pid)]
        if token is not None:
            command += ["--token", token]
        return run_json([*command, *arguments])

    def stop(self) -> int:
        self.proc.terminate()
        self.proc.communicate(timeout=120)
        return self.proc.returncode


def start_service(
    root: Path, config: Config, tag: str, pythonpath: str | None, label: str
) -> Server:
    env = {**os.environ, "ACTORLOOP_API_TOKEN": TOKEN}
    env["BENCH_SERVE_LATENCY_MS"] = str(config.latency_ms)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, str(ROOT)) if p)
    command = [sys.executable, "-m", "actorloop.runtime.console", "serve", "--port", "0"]
    command += ["--store", f"sqlite:{root / f'serve-{label}-{tag}.db'}"]
    if config.provider == "sim":
        command += ["--sim-latency-ms", str(config.latency_ms)]
    else:
        command += ["--app", "benchmarks.serve_app:setup"]
    return Server(command, env, root)


def measure_service(
    root: Path, config: Config, tag: str, pythonpath: str | None, label: str
) -> dict[str, Any]:
    server = start_service(root, config, tag, pythonpath, label)
    try:
        arguments = ["sessions", "--sessions", str(config.sessions), "--turns", str(config.turns)]
        arguments += ["--tag", tag, "--read-at", ",".join(str(n) for n in config.read_at)]
        report = server.client(*arguments)
        report["healthz_floor"] = server.client(
            "floor", "--connections", str(FLOOR_CONNECTIONS), token=None
        )
    finally:
        code = server.stop()
    if code != 0:
        raise RuntimeError(f"the server exited {code} after its drain")
    return dict(report)


def measure_direct(root: Path, config: Config, tag: str) -> dict[str, Any]:
    store = str(root / f"direct-{tag}.db")
    arguments = [str(config.sessions), str(config.turns), str(config.latency_ms), store]
    arguments.append(config.provider)
    return dict(run_json([sys.executable, "-m", "benchmarks.serve_direct", *arguments]))


def measure_floor(kind: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    server = Server([sys.executable, "-m", "benchmarks.serve_floor", kind], env, ROOT)
    try:
        return dict(server.client("floor", "--connections", str(FLOOR_CONNECTIONS), token=None))
    finally:
        server.stop()


def versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "platform": platform.platform()}
    for package in ("trio", "hypercorn", "h11", "starlette", "uvicorn", "orjson"):
        try:
            out[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            out[package] = "absent"
    return out


def row_for(config: Config, served: dict[str, Any], direct: dict[str, Any]) -> dict[str, Any]:
    turns = served["turns"]
    return {
        "sessions": config.sessions,
        "turns_per_session": config.turns,
        "model_latency_ms": config.latency_ms,
        "provider": config.provider,
        "turns": turns["count"],
        "errors": turns["errors"],
        "turns_per_s": turns["per_s"],
        "server_cpu_ms_per_turn": turns["server_cpu_ms_each"],
        "client_cpu_ms_per_turn": turns["client_cpu_ms_each"],
        "send": {key: turns[key] for key in ("p50_ms", "p90_ms", "p99_ms", "max_ms")},
        "reads": served["reads"],
        "healthz": served["healthz_floor"],
        "direct_turns_per_s": direct["turns_per_s"],
        "direct_cpu_ms_per_turn": direct["cpu_ms_per_turn"],
        "turns_per_s_x_direct": round(turns["per_s"] / direct["turns_per_s"], 3),
        "cpu_per_turn_x_direct": round(turns["server_cpu_ms_each"] / direct["cpu_ms_per_turn"], 3),
    }


def measure(quick: bool, baseline: Path | None) -> dict[str, Any]:
    load_before = os.getloadavg()
    trees: list[tuple[str, str | None]] = [("this tree", None)]
    rows: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        root = Path(tmp)
        if baseline is not None:
            trees.append(("baseline", str(linked_package(baseline, root / "baseline-shim"))))
        floors = {kind: measure_floor(kind) for kind in ("hypercorn", "uvicorn")}
        for kind, floor in floors.items():
            print(f"floor {kind}: {floor['server_cpu_ms_each']} ms server CPU/request", flush=True)
        for index, config in enumerate(QUICK_CONFIGS if quick else CONFIGS):
            tag = f"c{index}"
            direct = measure_direct(root, config, tag)
            for label, pythonpath in trees:
                served = measure_service(root, config, tag, pythonpath, label.replace(" ", "-"))
                row = row_for(config, served, direct)
                rows.setdefault(label, []).append(row)
                print(
                    f"{label}: {config.sessions} × {config.turns} ({config.provider}, "
                    f"{config.latency_ms:g} ms): {row['turns_per_s']} turns/s "
                    f"(× in-process {row['turns_per_s_x_direct']}), server CPU/turn "
                    f"{row['server_cpu_ms_per_turn']} ms (× in-process "
                    f"{row['cpu_per_turn_x_direct']}), reads "
                    f"{ {n: r['server_cpu_ms_each'] for n, r in row['reads'].items()} }",
                    flush=True,
                )
    return {
        "benchmark": "serve",
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S%z"),
        "cpus": os.cpu_count(),
        "versions": versions(),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "quick": quick,
        "baseline_tree": None if baseline is None else str(baseline),
        "floors": floors,
        "results": rows["this tree"],
        "baseline_results": rows.get("baseline", []),
    }


def _table(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| sessions × turns | model | turns/s | in-process turns/s | × in-process "
        "| server CPU/turn | in-process CPU/turn | × in-process | send p50 | send p99 "
        "| client CPU/turn | `/healthz` server CPU | errors |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['sessions']} × {row['turns_per_session']} "
            f"| {row['provider']}, {row['model_latency_ms']:g} ms | {row['turns_per_s']} "
            f"| {row['direct_turns_per_s']} | {row['turns_per_s_x_direct']} "
            f"| {row['server_cpu_ms_per_turn']} ms | {row['direct_cpu_ms_per_turn']} ms "
            f"| {row['cpu_per_turn_x_direct']} | {row['send']['p50_ms']} ms "
            f"| {row['send']['p99_ms']} ms | {row['client_cpu_ms_per_turn']} ms "
            f"| {row['healthz']['server_cpu_ms_each']} ms | {row['errors']} |"
        )
    return lines


def _reads(rows: list[dict[str, Any]]) -> list[str]:
    lines = []
    for row in rows:
        for turns, read in row["reads"].items():
            lines.append(
                f"| {row['sessions']} × {row['turns_per_session']} | {turns} "
                f"| {read['server_cpu_ms_each']} ms | {read['p50_ms']} ms | {read['errors']} |"
            )
    return lines


def render(report: dict[str, Any]) -> str:
    v = report["versions"]
    floors = report["floors"]
    lines = [
        "# Service benchmark",
        "",
        f"`python -m benchmarks.bench_serve{' --quick' if report['quick'] else ''}"
        f"{' --baseline-tree ...' if report['baseline_tree'] else ''}` — Python "
        f"{v['python']} on {v['platform']} ({report['cpus']} CPUs; trio {v['trio']}, "
        f"hypercorn {v['hypercorn']}, h11 {v['h11']}, starlette {v['starlette']}, uvicorn "
        f"{v['uvicorn']}), {report['date']}.",
        f"Load average (1/5/15 min) before: {report['load_average_before']}, after: "
        f"{report['load_average_after']} (the machine is shared).",
        "",
        "Server, load and in-process comparison each in a process of their own: the load is "
        "`benchmarks/lean_client.py` (raw keep-alive HTTP/1.1, one socket per session), the "
        "server's CPU is read from /proc around each timed phase. A turn is one waiting "
        "`POST /v1/sessions/{id}/messages` (one model step, its events flushed to SQLite "
        "before the answer). Model *echo*: answers at once, builds no wire body "
        "(`benchmarks/serve_app.py`); *sim*: the simulator of `actorloop serve`, whose "
        "request encoding grows with history.",
        "",
        "## This tree",
        "",
        *_table(report["results"]),
    ]
    if report["baseline_results"]:
        lines += ["", "## Baseline tree (same run)", "", *_table(report["baseline_results"])]
    lines += [
        "",
        "## `GET /v1/sessions/{id}` at a history length",
        "",
        "| sessions × turns | turns so far | server CPU/read | read p50 | errors |",
        "|---|---:|---:|---:|---:|",
        *_reads(report["results"]),
    ]
    if report["baseline_results"]:
        lines += [
            "",
            "Baseline tree:",
            "",
            "| sessions × turns | turns so far | server CPU/read | read p50 | errors |",
            "|---|---:|---:|---:|---:|",
            *_reads(report["baseline_results"]),
        ]
    lines += [
        "",
        "## HTTP floor",
        "",
        f"`GET /healthz` from {FLOOR_CONNECTIONS} keep-alive connections, server CPU per "
        "request: bare Hypercorn (trio worker) + Starlette with 6 pass-through ASGI "
        f"middlewares {floors['hypercorn']['server_cpu_ms_each']} ms "
        f"({floors['hypercorn']['per_s']} requests/s); uvicorn (h11, asyncio) + the same "
        f"app {floors['uvicorn']['server_cpu_ms_each']} ms ({floors['uvicorn']['per_s']} "
        "requests/s). The service's own `/healthz` is in each row above.",
        "",
        "*× in-process*: serve ÷ in-process, in one run. *server CPU/turn*: user + system "
        "CPU of the server process over the timed turns ÷ turns; *client CPU/turn* the lean "
        "client's, a separate process.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer sessions and turns")
    parser.add_argument(
        "--baseline-tree",
        type=Path,
        default=None,
        metavar="PATH",
        help="another checkout whose server to measure in the same run (before/after)",
    )
    args = parser.parse_args()
    report = measure(args.quick, args.baseline_tree)
    text = render(report)
    RESULTS.mkdir(exist_ok=True)
    suffix = "-quick" if args.quick else ""
    (RESULTS / f"serve{suffix}.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / f"serve{suffix}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
