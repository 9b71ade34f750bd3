"""The service's fast paths keep the slow paths' behaviour (issue 38), over real sockets: a
send whose HTTP/1.1 client leaves is still cancelled (the connection cancels it, no watcher
task); a sized JSON answer goes out in one write, a streamed one as it comes; the keep-alive
timer runs only while a connection is idle; the common send body, parsed without the schema
run, gives what the full parse gives, and any other body the full parse's typed error; a
connection hands its app a body and the body's end before the app's task runs again."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema.exceptions import best_match
from serve_kit import HeldModel, app_config_for, running_server

from actorloop.codecs.converter import encode_event
from actorloop.runtime.errors import ErrorCode
from actorloop.runtime.service.bodies import BODIES, SendMessage, parse_body
from actorloop.runtime.service.errors import InvalidRequestBody
from actorloop.runtime.service.protocol_server import ServiceConnection
from actorloop.runtime.service.schemas import plain
from actorloop.runtime.service.server import ServeSettings, hypercorn_config


class WriteLog:
    """A connection's stream that keeps every write the server makes on it (and passes
    everything through to the real socket stream)."""

    def __init__(self, stream: trio.SocketStream, writes: list[bytes]) -> None:
        self._stream = stream
        self.writes = writes

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))
        await self._stream.send_all(data)


def logging_writes(writes: list[bytes]) -> Any:
    def wrap(handler: Any) -> Any:
        async def logged(stream: trio.SocketStream) -> None:
            await handler(WriteLog(stream, writes))

        return logged

    return wrap


async def connect(url: str) -> trio.SocketStream:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return await trio.open_tcp_stream(host, int(port))


async def exchange(stream: trio.SocketStream, head: str, body: bytes = b"") -> tuple[int, bytes]:
    """One request on a keep-alive connection; the status and body of its sized answer."""
    extra = f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n" if body else ""
    await stream.send_all(f"{head}\r\nHost: 127.0.0.1\r\n{extra}\r\n".encode() + body)
    data = b""
    while b"\r\n\r\n" not in data:
        data += await stream.receive_some(65536)
    head_bytes, _, rest = data.partition(b"\r\n\r\n")
    fields = dict(
        line.split(b":", 1) for line in head_bytes.lower().split(b"\r\n")[1:] if b":" in line
    )
    size = int(fields[b"content-length"])
    while len(rest) < size:
        rest += await stream.receive_some(65536)
    return int(head_bytes[9:12]), rest


async def test_a_send_whose_client_closes_its_socket_is_cancelled_by_the_connection() -> None:
    model = HeldModel()
    async with running_server(app_config_for(model)) as server, server.client() as client:
        assert (await client.post("/v1/sessions", json={"session_id": "left"})).status_code == 201
        stream = await connect(server.url)
        body = b'{"content": "hold on"}'
        await stream.send_all(
            b"POST /v1/sessions/left/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        await model.entered.wait()
        await stream.aclose()
        agent = server.service.runtime.get("left")
        assert agent is not None
        await agent.wait_idle()
        ends = [
            orjson.loads(encode_event(e))["data"]["reason"]
            for e in agent.session.events
            if e.type == "turn/end"
        ]
        assert ends == [{"kind": "aborted", "reason": "caller cancelled"}]
        model.release()
        again = await client.post("/v1/sessions/left/messages", json={"content": "next"})
        assert (again.status_code, again.json()["reason"]) == (200, "completed")


async def test_a_sized_answer_is_one_write_and_a_stream_goes_out_as_it_comes() -> None:
    writes: list[bytes] = []
    async with running_server(
        app_config_for(HeldModel()), wrap_connection=logging_writes(writes)
    ) as server:
        stream = await connect(server.url)
        status, _ = await exchange(
            stream, "POST /v1/sessions HTTP/1.1", b'{"session_id": "one-write"}'
        )
        assert status == 201
        status, _ = await exchange(
            stream, "POST /v1/sessions/one-write/messages HTTP/1.1", b'{"content": "hi"}'
        )
        assert status == 200
        del writes[:]
        for _ in range(3):
            status, body = await exchange(stream, "GET /v1/sessions/one-write HTTP/1.1")
            assert status == 200 and orjson.loads(body)["turns"] == 1
        assert len(writes) == 3
        for write in writes:
            head, _, body = write.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200")
            assert b"content-length: %d" % len(body) in head.lower()
        await stream.aclose()
        del writes[:]
        async with server.client() as client:
            events = await client.get("/v1/sessions/one-write/events?follow=false")
        assert events.status_code == 200 and events.text.count("event: ") >= 4
        assert events.headers.get("transfer-encoding") == "chunked"
        assert len(writes) > 2  # the head, then frames: nothing held for a streamed answer


async def test_a_connection_queues_a_body_and_its_end_before_its_app_runs_again() -> None:
    """The connection's task group (what Hypercorn's `run` hands the protocol) puts into the
    app's channel without a schedule point while it has room: the app's task first runs with
    the body and its end both queued, instead of waking for each. A full channel waits."""
    from hypercorn.app_wrappers import ASGIWrapper
    from hypercorn.trio.task_group import TaskGroup

    queued_at_start: list[int] = []
    done = trio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        queued_at_start.append(receive.__self__.statistics().current_buffer_used)
        while (await receive()).get("more_body"):
            pass
        done.set()

    async def no_send(message: Any) -> None:
        return None

    config = hypercorn_config(ServeSettings(port=0))
    config.max_app_queue_size = 2
    connection = object.__new__(ServiceConnection)
    async with TaskGroup() as group:
        connection._task_group = group  # what Hypercorn's run does with the group it makes
        put = await connection._task_group.spawn_app(ASGIWrapper(app), config, {}, no_send)
        await put({"type": "http.request", "body": b"{}", "more_body": True})
        await put({"type": "http.request", "body": b"", "more_body": False})
        await done.wait()
        assert queued_at_start == [2]
        gate = trio.Event()
        drained = trio.Event()

        async def held_app(scope: Any, receive: Any, send: Any) -> None:
            await gate.wait()
            while (await receive()).get("more_body"):
                pass
            drained.set()

        put = await connection._task_group.spawn_app(ASGIWrapper(held_app), config, {}, no_send)
        for _ in range(2):
            await put({"type": "http.request", "body": b"x", "more_body": True})
        third = trio.Event()

        async def put_third() -> None:
            await put({"type": "http.request", "body": b"", "more_body": False})
            third.set()

        group.spawn(put_third)
        await trio.testing.wait_all_tasks_blocked()
        assert not third.is_set()  # the channel (2) is full: the put waits for room
        gate.set()
        await drained.wait()
        assert third.is_set()


async def test_the_keep_alive_timer_runs_only_while_the_connection_is_idle(
    mock_clock: trio.testing.MockClock,
) -> None:
    timeout = float(hypercorn_config(ServeSettings()).keep_alive_timeout)
    model = HeldModel()
    async with running_server(app_config_for(model)) as server:
        stream = await connect(server.url)
        assert (await exchange(stream, "GET /healthz HTTP/1.1"))[0] == 200
        for _ in range(3):  # each request starts the idle time anew
            await trio.testing.wait_all_tasks_blocked()
            mock_clock.jump(timeout * 0.6)
            await trio.testing.wait_all_tasks_blocked()
            assert (await exchange(stream, "GET /healthz HTTP/1.1"))[0] == 200
        status, _ = await exchange(stream, "POST /v1/sessions HTTP/1.1", b'{"session_id": "ka"}')
        assert status == 201
        body = b'{"content": "hold it"}'
        await stream.send_all(
            b"POST /v1/sessions/ka/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        await model.entered.wait()
        mock_clock.jump(timeout * 10)  # busy: no keep-alive timeout
        await trio.testing.wait_all_tasks_blocked()
        model.release()
        data = b""
        while b'"reason":"completed"' not in data:
            chunk = await stream.receive_some(65536)
            assert chunk, "the connection closed while its request ran"
            data += chunk
        await trio.testing.wait_all_tasks_blocked()  # the server saw its answer out: idle
        mock_clock.jump(timeout + 1)  # idle past the timeout: the server closes it
        while chunk := await stream.receive_some(65536):
            pass
        await stream.aclose()


def full_parse(value: Any) -> SendMessage | str:
    """What the schema run and the converter make of `value`: the body or the error text."""
    error = best_match(BODIES[SendMessage].validator.iter_errors(value))
    if error is not None:
        return f"{error.json_path}: {error.message}"
    structured: SendMessage = plain.structure(value, SendMessage)
    return structured


def parsed(raw: bytes) -> SendMessage | str:
    try:
        return parse_body(raw, SendMessage)
    except InvalidRequestBody as exc:
        assert exc.code == ErrorCode.VALIDATION_FAILED
        return str(exc)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=5,
)
SEND_KEYS = st.sampled_from(
    ["content", "wait", "idempotency_key", "if_busy", "reject_pending", "text", "extra"]
)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(SEND_KEYS, JSON_VALUES | st.text(max_size=30), max_size=3)
    | JSON_VALUES
    | st.builds(lambda text, wait: {"content": text, "wait": wait}, st.text(), st.booleans())
)
def test_a_send_body_parses_as_the_full_parse_would(value: Any) -> None:
    raw = orjson.dumps(value)
    assert parsed(raw) == full_parse(value)


@pytest.mark.parametrize(
    "body",
    [
        b'{"content": 5}',
        b'{"content": "x", "wait": "yes"}',
        b'{"content": "x", "wait": null}',
        b'{"content": "x", "extra": 1}',
        b'{"wait": true}',
        b'{"text": "x"}',
        b"[]",
        b'"content"',
    ],
)
async def test_a_bad_send_body_gets_the_typed_error_over_http(body: bytes) -> None:
    async with running_server(app_config_for(HeldModel())) as server, server.client() as client:
        assert (await client.post("/v1/sessions", json={"session_id": "bad"})).status_code == 201
        response = await client.post(
            "/v1/sessions/bad/messages",
            content=body,
            headers={"content-type": "application/json"},
        )
        expected = full_parse(orjson.loads(body))
        assert isinstance(expected, str)
        assert response.status_code == 422
        assert response.json() == {"error": {"code": "VALIDATION_FAILED", "message": expected}}


async def test_a_plain_send_body_over_http_runs_the_turn() -> None:
    async with running_server(app_config_for(HeldModel())) as server, server.client() as client:
        assert (await client.post("/v1/sessions", json={"session_id": "ok"})).status_code == 201
        sent: httpx.Response = await client.post(
            "/v1/sessions/ok/messages", json={"content": "hello", "wait": True}
        )
        assert (sent.status_code, sent.json()["text"]) == (200, "echo: hello")
        queued = await client.post(
            "/v1/sessions/ok/messages", json={"content": "later", "wait": False}
        )
        assert queued.status_code == 202
