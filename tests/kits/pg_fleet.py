"""Several real `actorloop serve` child processes on one PostgreSQL store, and the queries the
tests make of that database: the failover and soak tests' shared kit."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
import trio
from serve_kit import ServerProcess, child_env

from actorloop.runtime.stores.postgres.config import parse_url

DEADLINE_S = 60.0


def store_url(pg_url: str, node: str, lease_s: float) -> str:
    """The store URL of instance `node`: lease `lease_s`, inbox polled every 0.1 s."""
    return f"{pg_url}?lease_s={lease_s:g}&poll_s=0.1&node={node}"


def query(pg_url: str, statement: str, *params: object) -> list[tuple[Any, ...]]:
    """The rows `statement` answers, on a connection of its own."""
    with psycopg.connect(parse_url(pg_url).conninfo, autocommit=True) as conn:
        return conn.execute(statement, params).fetchall()  # type: ignore[arg-type]


async def poll(pg_url: str, statement: str, *params: object) -> list[tuple[Any, ...]]:
    """`query` in a worker thread."""
    return await trio.to_thread.run_sync(lambda: query(pg_url, statement, *params))


async def until(pg_url: str, statement: str, *params: object, deadline: float = DEADLINE_S) -> None:
    """Poll until `statement` answers true (a real time-based event: leases, remote turns)."""
    with trio.fail_after(deadline):
        # Nothing in this process can be told of it: the database decides. Polled.
        while not (await poll(pg_url, statement, *params))[0][0]:  # noqa: ASYNC110
            await trio.sleep(0.05)


class Instance(ServerProcess):
    """`actorloop serve` as a child process whose stderr goes to a file (a pipe nobody reads
    until the end would fill up during an outage and stall the server on its next log
    line)."""

    def __init__(self, args: list[str], cwd: Path, node: str) -> None:
        self.log = cwd / f"serve-{node}.log"
        self._err = self.log.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "actorloop.runtime.console", "serve", "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=self._err,
            text=True,
            env=child_env(),
            cwd=cwd,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # blocks until the server says it listens
        if "listening on" not in line:
            self.proc.wait(timeout=30)
            raise AssertionError(f"server did not start: {line!r} {self.log.read_text()}")
        self.url = line.split("listening on ", 1)[1].split(" ", 1)[0]

    def wait(self) -> tuple[int, str, str]:
        out, _ = self.proc.communicate(timeout=60)
        self._err.close()
        return self.proc.returncode, out, self.log.read_text()


@asynccontextmanager
async def servers(
    tmp_path: Path, pg_url: str, nodes: tuple[str, ...], latency_ms: int, lease_s: float
) -> AsyncIterator[dict[str, Instance]]:
    """One instance per node, started side by side, each with a lease of `lease_s` and a
    simulated model answering after `latency_ms`; killed (after a SIGCONT) at the end."""
    started: dict[str, Instance] = {}

    def start(node: str) -> Instance:
        args = [
            "--store",
            store_url(pg_url, node, lease_s),
            "--sim-latency-ms",
            str(latency_ms),
            "--grace",
            "0.5",
        ]
        return Instance(args, tmp_path, node)

    try:
        async with trio.open_nursery() as nursery:
            for node in nodes:

                async def one(node: str = node) -> None:
                    started[node] = await trio.to_thread.run_sync(start, node)

                nursery.start_soon(one)
        yield started
    finally:
        for server in started.values():
            if server.proc.poll() is None:
                server.proc.send_signal(signal.SIGCONT)
                server.proc.kill()
            server.wait()


KEEPALIVE_EXPIRY_S = 2.0
"""How long a client keeps an idle connection for reuse: under the server's keep-alive
timeout (Hypercorn's 5 s). At httpx's default, also 5 s, a request could go out on a
connection the server was closing that moment: a reset POST (seen in the 10-minute soak)."""


def client(server: ServerProcess) -> httpx.AsyncClient:
    """An HTTP client of `server` that waits up to DEADLINE_S for an answer."""
    return httpx.AsyncClient(
        base_url=server.url,
        timeout=DEADLINE_S,
        limits=httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY_S),
    )


async def send_until_answered(
    http: httpx.AsyncClient, session_id: str, content: str
) -> dict[str, Any]:
    """A send retried while the session is between owners (the typed answers a client
    sees during a failover: 503 OWNER_LOST or STORE_UNAVAILABLE, 409 SESSION_BUSY)."""
    with trio.fail_after(DEADLINE_S):
        while True:
            try:
                answer = await http.post(
                    f"/v1/sessions/{session_id}/messages", json={"content": content}
                )
            except httpx.TransportError:
                await trio.sleep(0.05)
                continue
            if answer.status_code == 200:
                return dict(answer.json())
            assert answer.headers.get("content-type") == "application/json", (
                answer.status_code,
                answer.text,
            )
            code = answer.json()["error"]["code"]
            assert code in ("OWNER_LOST", "STORE_UNAVAILABLE", "SESSION_BUSY"), answer.text
            await trio.sleep(0.05)


def stored_events(pg_url: str, session_id: str) -> list[tuple[int, bytes, int]]:
    """A session's stored rows in seq order: (seq, body, epoch written under)."""
    return [
        (seq, bytes(body), epoch)
        for seq, body, epoch in query(
            pg_url,
            "SELECT seq, body, epoch FROM actorloop.events WHERE session_id = %s ORDER BY seq",
            session_id,
        )
    ]
