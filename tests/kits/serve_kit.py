"""What the `actorloop serve` tests share: a model whose calls can be held open, a real server
on 127.0.0.1 started in-process (same trio run as the test) or as a subprocess, and an SSE
reader. Nothing here stands in for the server: every request goes over a real socket."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import orjson
import trio
from attrs import frozen
from listening import start_listening

from actorloop.runtime import AgentOptions, Message
from actorloop.runtime.log.request import Request
from actorloop.runtime.model.chunks import StreamChunk
from actorloop.runtime.providers.base import ModelInfo
from actorloop.runtime.providers.scripted import reply, tool_call
from actorloop.runtime.service.profiles import AppConfig
from actorloop.runtime.service.server import ServerControl, ServeSettings, serve
from actorloop.runtime.service.service import SessionService

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "test-token-0123456789"


class HeldModel:
    """Answers "echo: <last user text>"; a message containing `hold` keeps its model call
    open until `release()` (or a cancel), and `call:lookup` asks for the lookup tool once.
    `entered` is set when a held call has started."""

    name = "held"

    def __init__(self) -> None:
        self.calls = 0
        self.entered = trio.Event()
        self._release = trio.Event()

    def model_info(self, model: str) -> ModelInfo | None:
        return ModelInfo(200_000)

    def release(self) -> None:
        """Let every held call answer (and later ones not wait)."""
        self._release.set()

    async def stream(self, request: Request) -> AsyncIterator[StreamChunk]:
        self.calls += 1
        last = request.history[-1] if request.history else Message.user("")
        text = last.text
        if last.role == "user" and "call:lookup" in text and not _has_tool_result(request):
            for chunk in tool_call(f"c{self.calls}", "lookup", {"query": "x"}):
                yield chunk
            return
        if "hold" in text:
            self.entered.set()
            await self._release.wait()
        await trio.lowlevel.checkpoint()
        for chunk in reply(f"echo: {text}"):
            yield chunk


def _has_tool_result(request: Request) -> bool:
    return any(
        type(block).__name__ == "ToolResult"
        for message in request.history[-1:]
        for block in message.content
    )


def prefix_contributor(text: str) -> Any:
    """A session-prefix listener adding one opener message."""
    opener = Message.user(text)

    async def contribute(agent: Any, value: tuple[Message, ...], next: Any) -> Any:
        return (opener, *await next())

    return contribute


def app_config_for(model: HeldModel, store: str = "memory:") -> AppConfig:
    """Two profiles over `model`: `default` (lookup tool) and `prefixed` (a session prefix)."""
    from actorloop.runtime.cli.orchestration import LOOKUP

    config = AppConfig(provider=model, model=None, store_url=store)  # type: ignore[arg-type]
    config.add_profile("default", AgentOptions(model="held-1", system="Be brief.", tools=(LOOKUP,)))
    config.add_profile(
        "prefixed",
        AgentOptions(model="held-1", system="Use the opener."),
        listeners={"agent/session-prefix": prefix_contributor("OPENER: skills list")},
    )
    return config


@frozen
class Running:
    """An in-process server: its URL, its control and its service."""

    url: str
    control: ServerControl
    service: SessionService

    def client(self, **kwargs: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, timeout=30, **kwargs)


@asynccontextmanager
async def running_server(
    app_config: AppConfig,
    *,
    store: str = "memory:",
    routes: Any = (),
    wrap_connection: Any = None,
    **settings: Any,
) -> AsyncIterator[Running]:
    """A real server on 127.0.0.1 (port 0) in this trio run; drained when the block ends.
    `wrap_connection` wraps every connection's handler (to inject a failure)."""
    control = ServerControl()
    config = ServeSettings(host="127.0.0.1", port=0, store=store, **settings)
    async with trio.open_nursery() as nursery:
        url = await nursery.start(
            partial(
                serve, config, app_config, control, routes=routes, wrap_connection=wrap_connection
            )
        )
        assert control.service is not None
        try:
            yield Running(url, control, control.service)
        finally:
            control.drain()


@frozen
class Sse:
    """One Server-Sent Event as a client reads it."""

    id: str | None
    event: str | None
    data: Any


class SseReader:
    """Parses SSE frames from one streamed response (comments, i.e. pings, skipped)."""

    def __init__(self, response: httpx.Response) -> None:
        self._lines = response.aiter_lines()

    async def next(self) -> Sse | None:
        """The next event, or None at the end of the stream."""
        fields: dict[str, str] = {}
        async for line in self._lines:
            if line.startswith(":"):
                continue
            if line == "":
                if "data" in fields:
                    return Sse(fields.get("id"), fields.get("event"), orjson.loads(fields["data"]))
                fields = {}
                continue
            name, _, value = line.partition(":")
            fields[name] = value[1:] if value.startswith(" ") else value
        return None

    async def read(self, count: int | None = None) -> list[Sse]:
        """Up to `count` events (all of them until the stream ends when None)."""
        events: list[Sse] = []
        while count is None or len(events) < count:
            event = await self.next()
            if event is None:
                break
            events.append(event)
        return events

    def __aiter__(self) -> SseReader:
        return self

    async def __anext__(self) -> Sse:
        event = await self.next()
        if event is None:
            raise StopAsyncIteration
        return event


async def read_events(response: httpx.Response, count: int | None = None) -> list[Sse]:
    """Up to `count` events of a response read once (see `SseReader`)."""
    return await SseReader(response).read(count)


# ---------------------------------------------------------------------- subprocess servers


class ServerProcess:
    """`actorloop serve` as a child process; `url` once it printed its listening line."""

    def __init__(self, args: list[str], env: dict[str, str], cwd: Path) -> None:
        command = [sys.executable, "-m", "actorloop.runtime.console", "serve", "--port", "0"]
        self.proc, self.url = start_listening([*command, *args], env, cwd)

    def stderr(self) -> str:
        assert self.proc.stderr is not None
        return self.proc.stderr.read() if self.proc.poll() is not None else ""

    def terminate(self, sig: int = signal.SIGTERM) -> tuple[int, str, str]:
        """Send `sig` and wait for the exit: (exit code, rest of stdout, stderr)."""
        self.proc.send_signal(sig)
        return self.wait()

    def wait(self) -> tuple[int, str, str]:
        """Wait for the exit: (exit code, rest of stdout, stderr)."""
        out, err = self.proc.communicate(timeout=60)
        return self.proc.returncode, out, err


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACTORLOOP_")}
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "tests" / "kits"), *filter(None, [env.get("PYTHONPATH")])]
    )
    env.update(extra)
    return env


@contextmanager
def server_process(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> Iterator[ServerProcess]:
    """A server process on 127.0.0.1; killed if the block leaves it running."""
    server = ServerProcess(list(args), env or child_env(), tmp_path)
    try:
        yield server
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.communicate(timeout=30)


# ---------------------------------------------------------------------- HTTP/2 by hand


@frozen
class H2Answer:
    """What one HTTP/2 stream answered: its status, headers and body (status 0: the stream
    was reset or the connection closed before an answer)."""

    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)


async def h2c_upgrade(
    url: str, method: str, path: str, *, headers: dict[str, str] | None = None, body: bytes = b""
) -> tuple[H2Answer, H2Answer]:
    """An HTTP/1.1 `GET /healthz` with `Upgrade: h2c` on a fresh connection, then — once
    the server switched to HTTP/2 — `method path` with `body` on the next stream (the body
    sent as the flow-control windows allow, until the server answered or reset it). Returns
    both answers; the socket is closed afterwards."""
    import h2.config
    import h2.connection
    import h2.events

    authority = url.split("://", 1)[1].rstrip("/")
    host, _, port = authority.rpartition(":")
    stream = await trio.open_tcp_stream(host.strip("[]"), int(port))
    connection = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    settings = connection.initiate_upgrade_connection()
    assert isinstance(settings, bytes)
    await stream.send_all(
        b"GET /healthz HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade, HTTP2-Settings\r\n"
        b"Upgrade: h2c\r\nHTTP2-Settings: %s\r\n\r\n" % (authority.encode(), settings)
    )
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = await stream.receive_some(65536)
        assert chunk, f"closed before switching: {received!r}"
        received += chunk
    head, _, rest = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101"), head
    answers: dict[int, dict[str, Any]] = {1: {"status": 0, "headers": {}, "body": b""}}
    done: set[int] = set()
    request = connection.get_next_available_stream_id()
    answers[request] = {"status": 0, "headers": {}, "body": b""}
    fields = [
        (":method", method),
        (":path", path),
        (":scheme", "http"),
        (":authority", authority),
        *((name.lower(), value) for name, value in (headers or {}).items()),
    ]
    connection.send_headers(request, fields, end_stream=not body)
    remaining = body

    def take(events: list[Any]) -> None:
        for event in events:
            sid = getattr(event, "stream_id", None)
            if isinstance(event, h2.events.ResponseReceived):
                for name, value in event.headers:
                    name = name.decode() if isinstance(name, bytes) else name
                    value = value.decode() if isinstance(value, bytes) else value
                    if name == ":status":
                        answers[sid]["status"] = int(value)
                    else:
                        answers[sid]["headers"][name] = value
            elif isinstance(event, h2.events.DataReceived):
                answers[sid]["body"] += event.data
                connection.acknowledge_received_data(event.flow_controlled_length, sid)
            elif isinstance(event, (h2.events.StreamEnded, h2.events.StreamReset)):
                done.add(sid)
            elif isinstance(event, h2.events.ConnectionTerminated):
                done.update(answers)

    take(connection.receive_data(rest))
    try:
        while not {1, request} <= done:
            if remaining and request not in done:
                window = min(
                    connection.local_flow_control_window(request),
                    connection.max_outbound_frame_size,
                )
                if window > 0:
                    connection.send_data(
                        request, remaining[:window], end_stream=len(remaining) <= window
                    )
                    remaining = remaining[window:]
            await stream.send_all(connection.data_to_send())
            if remaining and request not in done and connection.local_flow_control_window(request):
                continue
            data = await stream.receive_some(65536)
            if not data:
                break
            take(connection.receive_data(data))
    finally:
        await stream.aclose()
    return tuple(  # type: ignore[return-value]
        H2Answer(answer["status"], answer["headers"], answer["body"])
        for answer in (answers[1], answers[request])
    )
