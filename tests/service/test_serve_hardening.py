"""The lower-severity findings of issue 33 (item 4), each over a real socket: integers beyond
the JSON value rules refused before any conversion, a per-message limit, a client leaving
mid-body logged as the client's event, a body-read timeout, concurrent creates and forks of
one id answered SESSION_ALREADY_EXISTS, `Allow` naming every route's methods, `nosniff` on
every answer, the OpenAPI document's required bodies, and no header in the access log."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
import trio
from serve_kit import HeldModel, Running, app_config_for, running_server

from actorloop.runtime.service.endpoints import ENDPOINTS
from actorloop.runtime.service.openapi import DOCS, openapi_document


def code_of(response: httpx.Response) -> str:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    return str(body["error"]["code"])


async def test_integers_beyond_the_value_rules_are_refused_as_written() -> None:
    async with running_server(app_config_for(HeldModel())) as server, server.client() as client:
        await client.post("/v1/sessions", json={"session_id": "ints"})
        for literal in ("18446744073709551617", "9007199254740993", "-9007199254740993"):
            body = b'{"content": "x", "meta": {"n": %s}}' % literal.encode()
            response = await client.post(
                "/v1/sessions/ints/inject",
                content=body,
                headers={"content-type": "application/json"},
            )
            assert response.status_code == 422, literal
            assert code_of(response) == "INVALID_CONTENT" and literal in response.text
        # The largest safe integer, and digits inside a string, are fine.
        accepted = await client.post(
            "/v1/sessions/ints/inject",
            json={"content": "12345678901234567890", "meta": {"n": 9007199254740991}},
        )
        assert accepted.status_code == 202, accepted.text


async def test_a_message_above_the_limit_is_refused_and_the_session_goes_on() -> None:
    async with (
        running_server(app_config_for(HeldModel()), max_message_chars=1000) as server,
        server.client() as client,
    ):
        await client.post("/v1/sessions", json={"session_id": "big"})
        for route, body in (
            ("messages", {"content": "x" * 1001}),
            ("steer", {"content": [{"type": "text", "text": "x" * 600}] * 2}),
            ("inject", {"content": "x" * 1001}),
        ):
            refused = await client.post(f"/v1/sessions/big/{route}", json=body)
            assert (refused.status_code, code_of(refused)) == (413, "MESSAGE_TOO_LARGE"), route
            assert "1000" in refused.json()["error"]["message"]
        assert (await client.get("/v1/sessions/big")).json()["turns"] == 0
        sent = await client.post("/v1/sessions/big/messages", json={"content": "x" * 1000})
        assert sent.status_code == 200 and sent.json()["reason"] == "completed"


class _Waiter(logging.Handler):
    """Sets `seen` when a record whose message contains `text` is logged."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text
        self.seen = trio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.seen.set()


@contextmanager
def waiting_for(logger: str, text: str) -> Iterator[_Waiter]:
    waiter = _Waiter(text)
    target = logging.getLogger(logger)
    level = target.level
    target.setLevel(logging.INFO)
    target.addHandler(waiter)
    try:
        yield waiter
    finally:
        target.removeHandler(waiter)
        target.setLevel(level)


async def raw_exchange(server: Running, head: bytes, body: bytes, *, close: bool) -> bytes:
    """Send a request head and part of a body on a raw socket; with `close`, hang up at
    once (b"" back), else read the answer until the server closes the connection."""
    authority = server.url.split("://", 1)[1]
    host, _, port = authority.rpartition(":")
    stream = await trio.open_tcp_stream(host, int(port))
    async with stream:
        await stream.send_all(head + body)
        if close:
            return b""
        answer = b""
        # Until the server closes (it must, having not read the body): hanging up first
        # would race its last write.
        while chunk := await stream.receive_some(65536):
            answer += chunk
        return answer


def post_head(server: Running, length: int) -> bytes:
    authority = server.url.split("://", 1)[1]
    return (
        b"POST /v1/sessions HTTP/1.1\r\nHost: %s\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n" % (authority.encode(), length)
    )


async def test_a_client_leaving_mid_body_is_its_event_and_a_slow_body_times_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = {"body_timeout_seconds": 0.5}
    async with running_server(app_config_for(HeldModel()), **settings) as server:
        with waiting_for("actorloop.http", "went away before sending its body") as waiter:
            await raw_exchange(server, post_head(server, 1000), b'{"session_id": "', close=True)
            await waiter.seen.wait()
        slow = await raw_exchange(server, post_head(server, 1000), b'{"session_id"', close=False)
        assert slow.startswith(b"HTTP/1.1 408 ")
        assert b"BODY_READ_TIMEOUT" in slow
        # A long turn is not a slow body: the wait after the body has no deadline.
        async with server.client() as client:
            await client.post("/v1/sessions", json={"session_id": "long"})
            sent = await client.post("/v1/sessions/long/messages", json={"content": "hi"})
            assert sent.status_code == 200
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]


async def test_concurrent_creates_and_forks_of_one_id_say_it_exists() -> None:
    async with running_server(app_config_for(HeldModel())) as server, server.client() as client:
        answers: list[httpx.Response] = []

        async def post(path: str, body: dict[str, object]) -> None:
            answers.append(await client.post(path, json=body))

        async with trio.open_nursery() as nursery:
            for _ in range(20):
                nursery.start_soon(post, "/v1/sessions", {"session_id": "twin"})
        assert sorted(a.status_code for a in answers) == [201] + [409] * 19
        assert {code_of(a) for a in answers if a.status_code == 409} == {"SESSION_ALREADY_EXISTS"}

        sent = await client.post("/v1/sessions/twin/messages", json={"content": "one"})
        assert sent.status_code == 200
        answers.clear()
        async with trio.open_nursery() as nursery:
            for _ in range(10):
                nursery.start_soon(post, "/v1/sessions/twin/fork", {"child_id": "kid"})
        assert sorted(a.status_code for a in answers) == [201] + [409] * 9
        assert {code_of(a) for a in answers if a.status_code == 409} == {"SESSION_ALREADY_EXISTS"}


async def test_allow_nosniff_required_bodies_and_an_access_log_without_headers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="actorloop.http.access")
    async with (
        running_server(app_config_for(HeldModel()), access_log=True) as server,
        server.client(headers={"user-agent": "agent-007-secret"}) as client,
    ):
        options = await client.options("/v1/sessions")
        assert (options.status_code, code_of(options)) == (405, "METHOD_NOT_ALLOWED")
        assert options.headers["allow"] == "GET, HEAD, POST"
        put = await client.put("/v1/sessions/x")
        assert put.headers["allow"] == "DELETE, GET, HEAD"
        await client.post("/v1/sessions", json={"session_id": "n"})
        answers = [
            options,
            await client.get("/v1/sessions"),
            await client.get("/healthz"),
            await client.get("/openapi.json"),
            await client.get("/v1/sessions/absent"),
            await client.get("/"),
            await client.get("/healthz", headers={"host": "attacker.example"}),
        ]
        async with client.stream("GET", "/v1/sessions/n/events?follow=false") as events:
            answers.append(events)
        assert [a.headers.get("x-content-type-options") for a in answers] == ["nosniff"] * 8
        lines = [r.getMessage() for r in caplog.records if r.name == "actorloop.http.access"]
        assert any('"GET /v1/sessions HTTP/1.1" 200' in line for line in lines), lines
        assert not any("agent-007" in line for line in lines), lines
    document = openapi_document(auth=False)
    required = {
        path: item["post"]["requestBody"]["required"]
        for path, item in document["paths"].items()
        if "requestBody" in item.get("post", {})
    }
    assert required == {
        "/v1/sessions": False,
        "/v1/sessions/{id}/messages": True,
        "/v1/sessions/{id}/steer": True,
        "/v1/sessions/{id}/inject": True,
        "/v1/sessions/{id}/cancel": False,
        "/v1/sessions/{id}/fork": False,
        "/v1/sessions/{id}/resume": False,
        "/v1/sessions/{id}/approvals/{call_id}": True,
    }


def test_the_document_is_the_route_table() -> None:
    documented = {e.operation_id for e in ENDPOINTS if e.operation_id is not None}
    assert documented == set(DOCS)
    paths = openapi_document(auth=True)["paths"]
    assert {(path, method.upper()) for path, item in paths.items() for method in item} == {
        (e.path, e.method) for e in ENDPOINTS if e.operation_id is not None
    }
