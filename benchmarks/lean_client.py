"""The service benchmark's load generator: raw keep-alive HTTP/1.1 over one socket per
session (no pipelining, minimal parsing), in its own process, reading the server's CPU time
from /proc around each timed phase. Prints one JSON report.

    python -m benchmarks.lean_client --url URL --server-pid PID sessions|floor ...
"""

from __future__ import annotations

import argparse
import json
import selectors
import socket
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

RECV = 1 << 16


def cpu_seconds(pid: int) -> float:
    """CPU time of process `pid`'s threads so far, to the nanosecond (Linux schedstat: the
    ticks of /proc/PID/stat are 10 ms, too coarse for a phase of a few hundred ms)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that ended as we looked
    return total / 1e9


def request(method: str, path: str, host: str, token: str | None, body: bytes = b"") -> bytes:
    """One HTTP/1.1 request's bytes (keep-alive is HTTP/1.1's default)."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
    if token is not None:
        lines.append(f"Authorization: Bearer {token}")
    if method == "POST":
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


class Connection:
    """One keep-alive connection and the answer it is reading."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.sock = socket.create_connection(address)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = b""

    def answer(self) -> tuple[int, bytes] | None:
        """The status and body of the answer in the buffer once it is whole, else None
        (sized bodies, and chunked ones read to their last chunk unparsed)."""
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return None
        head = self.buffer[:end].lower()
        at = head.find(b"\r\ncontent-length:")
        if at >= 0:
            stop = head.find(b"\r\n", at + 2)
            size = int(head[at + 17 : stop if stop >= 0 else len(head)])
            if len(self.buffer) < end + 4 + size:
                return None
            body = self.buffer[end + 4 : end + 4 + size]
            self.buffer = self.buffer[end + 4 + size :]
        else:
            tail = self.buffer.find(b"\r\n0\r\n\r\n", end)
            if tail < 0:
                return None
            body = self.buffer[end + 4 : tail]
            self.buffer = self.buffer[tail + 7 :]
        return int(head[9:12]), body


def exchange_all(
    connections: Sequence[Connection],
    scripts: Sequence[Sequence[bytes]],
    check: Callable[[int, bytes], bool],
) -> dict[str, Any]:
    """Each connection sends its script one request at a time, every connection at once;
    latencies (s), errors, wall time and client CPU."""
    selector = selectors.DefaultSelector()
    position = [0] * len(connections)
    started = [0.0] * len(connections)
    latencies: list[float] = []
    errors = 0
    waiting = 0
    cpu, began = time.process_time(), time.perf_counter()
    for index, connection in enumerate(connections):
        if scripts[index]:
            selector.register(connection.sock, selectors.EVENT_READ, index)
            started[index] = time.perf_counter()
            connection.sock.sendall(scripts[index][0])
            waiting += 1
    while waiting:
        for key, _ in selector.select():
            index = key.data
            connection = connections[index]
            data = connection.sock.recv(RECV)
            if not data:
                raise RuntimeError("the server closed a connection")
            connection.buffer += data
            answer = connection.answer()
            if answer is None:
                continue
            now = time.perf_counter()
            latencies.append(now - started[index])
            if not check(*answer):
                errors += 1
            position[index] += 1
            if position[index] == len(scripts[index]):
                selector.unregister(connection.sock)
                waiting -= 1
                continue
            started[index] = now
            connection.sock.sendall(scripts[index][position[index]])
    wall = time.perf_counter() - began
    selector.close()
    return {
        "latencies": latencies,
        "errors": errors,
        "wall_s": wall,
        "client_cpu_s": time.process_time() - cpu,
    }


def timed(
    server_pid: int,
    connections: Sequence[Connection],
    scripts: Sequence[Sequence[bytes]],
    check: Callable[[int, bytes], bool],
) -> dict[str, Any]:
    """`exchange_all` with the server's CPU time over it."""
    before = cpu_seconds(server_pid)
    out = exchange_all(connections, scripts, check)
    out["server_cpu_s"] = cpu_seconds(server_pid) - before
    return out


def ok(status: int, _body: bytes) -> bool:
    return 200 <= status < 300


def completed(status: int, body: bytes) -> bool:
    return status == 200 and b'"reason":"completed"' in body


def summary(phase: dict[str, Any], count: int) -> dict[str, Any]:
    """A phase's figures per exchange, latencies as percentiles in ms."""
    ordered = sorted(phase["latencies"])

    def at(fraction: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(len(ordered) * fraction))] * 1e3, 3)

    return {
        "count": count,
        "errors": phase["errors"],
        "wall_s": round(phase["wall_s"], 4),
        "per_s": round(count / phase["wall_s"], 1),
        "server_cpu_ms_each": round(phase["server_cpu_s"] * 1e3 / count, 4),
        "client_cpu_ms_each": round(phase["client_cpu_s"] * 1e3 / count, 4),
        "p50_ms": at(0.50),
        "p90_ms": at(0.90),
        "p99_ms": at(0.99),
        "max_ms": round(ordered[-1] * 1e3, 3),
    }


def run_sessions(args: argparse.Namespace, address: tuple[str, int], host: str) -> dict[str, Any]:
    """Create the sessions, then per segment: every session sends its turns (the timed turn
    phase), then reads itself `reads` times (the timed read phase at that history)."""
    ids = [f"{args.tag}-{index}" for index in range(args.sessions)]
    connections = [Connection(address) for _ in ids]
    create = [
        [request("POST", "/v1/sessions", host, args.token, json.dumps({"session_id": i}).encode())]
        for i in ids
    ]
    exchange_all(connections, create, ok)
    checkpoints = sorted({*args.read_at, args.turns})
    turn_phases: list[dict[str, Any]] = []
    reads: dict[str, Any] = {}
    done = 0
    for checkpoint in checkpoints:
        sends = [
            [
                request(
                    "POST",
                    f"/v1/sessions/{session_id}/messages",
                    host,
                    args.token,
                    b'{"content": "message %d of the benchmark"}' % turn,
                )
                for turn in range(done, checkpoint)
            ]
            for session_id in ids
        ]
        turn_phases.append(timed(args.server_pid, connections, sends, completed))
        done = checkpoint
        if checkpoint in args.read_at:
            script = [
                [request("GET", f"/v1/sessions/{session_id}", host, args.token)] * args.reads
                for session_id in ids
            ]
            phase = timed(args.server_pid, connections, script, ok)
            reads[str(checkpoint)] = summary(phase, args.sessions * args.reads)
    merged = {
        "latencies": [x for phase in turn_phases for x in phase["latencies"]],
        "errors": sum(phase["errors"] for phase in turn_phases),
        "wall_s": sum(phase["wall_s"] for phase in turn_phases),
        "client_cpu_s": sum(phase["client_cpu_s"] for phase in turn_phases),
        "server_cpu_s": sum(phase["server_cpu_s"] for phase in turn_phases),
    }
    for connection in connections:
        connection.sock.close()
    return {"turns": summary(merged, args.sessions * args.turns), "reads": reads}


def run_floor(args: argparse.Namespace, address: tuple[str, int], host: str) -> dict[str, Any]:
    """`GET /healthz` from `connections` connections, `requests` each."""
    connections = [Connection(address) for _ in range(args.connections)]
    exchange_all(connections, [[request("GET", "/healthz", host, None)]] * len(connections), ok)
    script = [[request("GET", "/healthz", host, None)] * args.requests] * len(connections)
    phase = timed(args.server_pid, connections, script, ok)
    for connection in connections:
        connection.sock.close()
    return summary(phase, args.connections * args.requests)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--server-pid", type=int, required=True)
    parser.add_argument("--token", default=None)
    modes = parser.add_subparsers(dest="mode", required=True)
    sessions = modes.add_parser("sessions")
    sessions.add_argument("--sessions", type=int, required=True)
    sessions.add_argument("--turns", type=int, required=True)
    sessions.add_argument("--tag", required=True)
    sessions.add_argument("--reads", type=int, default=10)
    sessions.add_argument(
        "--read-at", type=lambda raw: [int(x) for x in raw.split(",") if x], default=[]
    )
    floor = modes.add_parser("floor")
    floor.add_argument("--connections", type=int, default=10)
    floor.add_argument("--requests", type=int, default=300)
    args = parser.parse_args(argv)
    parts = urlsplit(args.url)
    address = (parts.hostname or "127.0.0.1", parts.port or 80)
    host = parts.netloc
    report = (run_sessions if args.mode == "sessions" else run_floor)(args, address, host)
    json.dump(report, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
