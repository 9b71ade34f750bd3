"""examples/fastapi_app.py under a real uvicorn server on 127.0.0.1, driven over real sockets
with httpx: spawn, send, events as SSE, a client that disconnects mid-turn (the turn ends
`aborted`, the stored log verifies), and the process shutting down on SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import orjson
import trio
import uvicorn

from actorloop.codecs.converter import decode_event
from actorloop.runtime import SessionEvent
from actorloop.runtime.log.verify import verify_log
from actorloop.runtime.model.events import TurnEnd
from actorloop.runtime.stores import open_store
from actorloop.runtime.stores.loading import load_session
from actorloop.runtime.testing import HANG, ScriptedProvider, reply

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "fastapi_app.py"


def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fastapi_app", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def listening_socket() -> socket.socket:
    """Bound and listening before the server starts: clients queue in the backlog until it
    accepts, so nothing has to wait for the server's readiness."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    return sock


async def sse_events(response: httpx.Response) -> AsyncIterator[tuple[str, int, SessionEvent]]:
    """(event, id, decoded data) per SSE message; keep-alive comments are skipped."""
    fields: dict[str, str] = {}
    async for line in response.aiter_lines():
        if line.startswith(":"):
            continue
        if line:
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")
            continue
        if "data" in fields:
            yield fields["event"], int(fields["id"]), decode_event(fields["data"])
        fields = {}


def stored(url: str, session_id: str) -> tuple[SessionEvent, ...]:
    async def load() -> tuple[SessionEvent, ...]:
        store = open_store(url)
        try:
            session = await load_session(store, session_id, repair=False)
        finally:
            await store.close()
        verify_log(session.meta, session.events)
        return tuple(session.events)

    return trio.run(load)


def test_the_fastapi_example_under_uvicorn(tmp_path: Path) -> None:
    url = f"sqlite:{tmp_path / 'app.db'}"
    provider = ScriptedProvider([reply("hello back"), HANG, reply("after the disconnect")])
    app = example().create_app(store=url, provider=provider, model="m")
    streamed: list[SessionEvent] = []

    async def main() -> str:
        sock = listening_socket()
        port = sock.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        base = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            spawned = await client.post("/agents", json={"system": "be brief"})
            assert spawned.status_code == 200
            agent_id = spawned.json()["id"]
            answer = await client.post(f"/agents/{agent_id}/messages", json={"text": "hi"})
            assert answer.status_code == 200
            body = answer.json()
            assert (body["turn"], body["reason"]) == (1, "completed")
            assert body["reply"]["content"] == [{"type": "text", "text": "hello back"}]
            missing = await client.post("/agents/nobody/messages", json={"text": "hi"})
            assert missing.status_code == 404

            async with client.stream("GET", f"/agents/{agent_id}/events") as stream:
                assert stream.headers["content-type"].startswith("text/event-stream")
                events = sse_events(stream)
                # The stored turn first ...
                async for kind, seq, event in events:
                    assert (kind, seq) == (event.type, event.seq) == (event.type, len(streamed))
                    streamed.append(event)
                    if kind == "turn/end":
                        break
                # ... then live: a client sends, and disconnects once the model streams.
                sender = asyncio.create_task(
                    client.post(f"/agents/{agent_id}/messages", json={"text": "hang"})
                )
                async for kind, seq, event in events:
                    assert seq == len(streamed)
                    streamed.append(event)
                    if kind == "assistant/chunk":
                        sender.cancel()  # httpx closes that connection: a client disconnect
                    if kind == "turn/end":
                        break
                assert sender.cancelled()
            aborted = streamed[-1].data
            assert isinstance(aborted, TurnEnd) and aborted.turn == 2
            assert (aborted.reason.kind, aborted.reason.reason) == ("aborted", "caller cancelled")
            after = await client.post(f"/agents/{agent_id}/messages", json={"text": "again"})
            assert after.json()["reply"]["content"][0]["text"] == "after the disconnect"
            # A reconnecting EventSource resumes right after the last id it saw.
            headers = {"Last-Event-ID": "3"}
            async with client.stream("GET", f"/agents/{agent_id}/events", headers=headers) as again:
                async for _, seq, event in sse_events(again):
                    assert seq == 4 and event == streamed[4]
                    break
        server.should_exit = True
        await serving
        return agent_id

    async def bounded() -> str:
        async with asyncio.timeout(60):
            return await main()

    agent_id = asyncio.run(bounded())
    log = stored(url, agent_id)
    assert list(log[: len(streamed)]) == streamed
    ends = [e.data.reason.kind for e in log if isinstance(e.data, TurnEnd)]
    assert ends == ["completed", "aborted", "completed"]


def _serve_example(tmp_path: Path, store: str) -> tuple[subprocess.Popen[bytes], int]:
    sock = listening_socket()
    env = {**os.environ, "ACTORLOOP_STORE": store, "ACTORLOOP_PROVIDER": "sim"}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "--app-dir",
            str(ROOT / "examples"),
            "--fd",
            str(sock.fileno()),
            "--log-level",
            "info",
            "fastapi_app:app",
        ],
        pass_fds=[sock.fileno()],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=tmp_path,
    )
    port = sock.getsockname()[1]
    sock.close()
    return process, port


def test_the_example_app_shuts_down_cleanly_on_sigterm(tmp_path: Path) -> None:
    store = f"sqlite:{tmp_path / 'served.db'}"
    process, port = _serve_example(tmp_path, store)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            agent_id = client.post("/agents", json={}).json()["id"]
            answer = client.post(f"/agents/{agent_id}/messages", json={"text": "hello"}).json()
            assert answer["reason"] == "completed" and answer["reply"] is not None
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
        # uvicorn shuts down gracefully (the lifespan closes the runtime), then re-raises
        # the signal it caught so the exit status still says SIGTERM.
        assert process.returncode == -signal.SIGTERM, err.decode()
        assert b"Application shutdown complete." in err
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    log = stored(store, agent_id)
    assert [e.type for e in log][-1] == "turn/end"


def test_ctrl_c_under_asyncio_run_closes_the_running_turn(tmp_path: Path) -> None:
    """asyncio.run owns SIGINT: it cancels the main task, and leaving `aio.Runtime.open`
    disposes the agent, so the hanging turn ends `disposed` and is flushed before exit."""
    store = f"sqlite:{tmp_path / 'ctrl-c.db'}"
    child = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "kits" / "aio_child.py"), store],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()  # the child's turn is running once it says so
        assert line.startswith(b"RUNNING "), line + child.stderr.read() if child.stderr else b""
        session_id = line.split()[1].decode()
        child.send_signal(signal.SIGINT)
        try:
            out, err = child.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGUSR1)  # every thread's stack, on its stderr
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.communicate(timeout=10)  # what it writes is kept for the next call
            child.kill()
            out, err = child.communicate()
            raise AssertionError(f"still running 60 s after SIGINT:\n{err.decode()}") from None
        assert child.returncode == 0, err.decode()
        report: dict[str, Any] = orjson.loads(out)
        assert report == {"interrupted": True, "send": "disposed", "status": "disposed"}
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    log = stored(store, session_id)
    assert [e.data.reason.kind for e in log if isinstance(e.data, TurnEnd)] == ["disposed"]


def test_an_sse_client_leaving_mid_stream_ends_the_stream_quietly(tmp_path: Path) -> None:
    store = f"sqlite:{tmp_path / 'served.db'}"
    process, port = _serve_example(tmp_path, store)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            agent_id = client.post("/agents", json={}).json()["id"]
            for turn in range(3):
                text = f"turn {turn}: " + "x" * 190_000
                answer = client.post(f"/agents/{agent_id}/messages", json={"text": text}).json()
                assert answer["reason"] == "completed", answer["message"]
            # Megabytes of stored events, more than the sockets' buffers hold: the server is
            # still sending (its writes held back) when the client reads one event and leaves.
            with client.stream("GET", f"/agents/{agent_id}/events") as stream:
                lines = stream.iter_lines()
                assert next(line for line in lines if line.startswith("data:"))
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    log = err.decode()
    assert process.returncode == -signal.SIGTERM, log
    assert "Application shutdown complete." in log
    for noise in ("Traceback", "ExceptionGroup", "BrokenResourceError", "ERROR"):
        assert noise not in log, log
    request_line = f'"GET /agents/{agent_id}/events HTTP/1.1" 200'
    assert sum(request_line in line for line in out.decode().splitlines()) == 1, out
