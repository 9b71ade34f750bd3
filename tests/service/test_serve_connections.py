"""One connection or request cannot end the server (issue 33, item 1): a connection whose
protocol server fails is closed alone and logged once, a failing ASGI handler answers 500,
HTTP/2 is refused unless `--http2`, and with it on, answers given before the body was read
(401, 413, 405) neither crash nor lose the connection — over prior knowledge and h2c
upgrades, with a token and without one. After each, `/healthz` answers and a turn that was
running when it happened completes."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
import trio
from serve_kit import TOKEN, HeldModel, Running, app_config_for, h2c_upgrade, running_server
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from actorloop.runtime.service.connections import ConnectionHandler

BIG = b'{"session_id": "' + b"x" * 300_000 + b'"}'
JSON = {"content-type": "application/json"}
AUTH = {"authorization": f"Bearer {TOKEN}"}


def code_of(body: Any) -> str:
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    return str(body["error"]["code"])


async def survives(
    server: Running, model: HeldModel, attack: Callable[[], Awaitable[None]], **headers: str
) -> None:
    """Run `attack` while a turn is held open; then `/healthz` answers and the turn ends."""
    async with server.client(headers=headers) as client:
        created = await client.post("/v1/sessions", json={"session_id": "held"})
        assert created.status_code == 201, created.text
        answers: list[httpx.Response] = []
        async with trio.open_nursery() as nursery:

            async def turn() -> None:
                answers.append(
                    await client.post("/v1/sessions/held/messages", json={"content": "hold it"})
                )

            nursery.start_soon(turn)
            await model.entered.wait()
            await attack()
            health = await client.get("/healthz")
            assert health.status_code == 200 and health.json()["status"] == "ok"
            model.release()
        assert answers[0].status_code == 200, answers[0].text
        assert answers[0].json()["reason"] == "completed"


class _FailingStream:
    """A socket stream whose reads fail (as a protocol library's bug would) once the client
    sent the `x-explode` header."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self._stream = stream
        self.socket = stream.socket

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        data = await self._stream.receive_some(max_bytes)
        if b"x-explode" in data.lower():
            raise KeyError(1)
        return bytes(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def failing_on_marker(handler: ConnectionHandler) -> ConnectionHandler:
    async def handle(stream: trio.SocketStream) -> None:
        await handler(_FailingStream(stream))  # type: ignore[arg-type]

    return handle


def http_errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        record
        for record in caplog.records
        if record.name.startswith("actorloop.http") and record.levelno >= logging.ERROR
    ]


async def test_a_failing_connection_is_closed_alone_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    model = HeldModel()
    async with running_server(app_config_for(model), wrap_connection=failing_on_marker) as server:

        async def attack() -> None:
            async with server.client() as client:
                with pytest.raises(httpx.TransportError):
                    await client.get("/healthz", headers={"x-explode": "1"})

        await survives(server, model, attack)
    failures = http_errors(caplog)
    assert len(failures) == 1, [r.getMessage() for r in failures]
    assert "failed and was closed (KeyError)" in failures[0].getMessage()
    assert failures[0].exc_info is not None


async def test_a_failing_asgi_handler_answers_500_and_the_server_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def broken(_request: Request) -> Response:
        raise RuntimeError("a bug in a route another edge added")

    model = HeldModel()
    routes = [Route("/broken", broken)]
    async with running_server(app_config_for(model), routes=routes) as server:

        async def attack() -> None:
            async with server.client() as client:
                assert (await client.get("/broken")).status_code == 500

        await survives(server, model, attack)
    failures = http_errors(caplog)
    assert len(failures) == 1, [r.getMessage() for r in failures]


async def prior_knowledge(
    server: Running, method: str, path: str, headers: dict[str, str], body: bytes
) -> httpx.Response:
    async with httpx.AsyncClient(
        base_url=server.url, http1=False, http2=True, timeout=30
    ) as client:
        response = await client.request(method, path, headers=headers, content=body)
        assert response.http_version == "HTTP/2"
        return response


async def test_http2_is_refused_unless_enabled(caplog: pytest.LogCaptureFixture) -> None:
    model = HeldModel()
    async with running_server(app_config_for(model), token=TOKEN) as server:

        async def attack() -> None:
            refused = await prior_knowledge(server, "POST", "/v1/sessions", JSON, BIG)
            assert refused.status_code == 505
            assert code_of(refused.json()) == "HTTP_VERSION_NOT_SUPPORTED"
            upgraded, posted = await h2c_upgrade(
                server.url, "POST", "/v1/sessions", headers=JSON, body=BIG
            )
            assert (upgraded.status, posted.status) == (505, 505)
            assert code_of(posted.json()) == "HTTP_VERSION_NOT_SUPPORTED"

        await survives(server, model, attack, authorization=f"Bearer {TOKEN}")
    assert http_errors(caplog) == []


EarlyCase = tuple[str, str, dict[str, str], bytes, int, str]
# Below the 65,536-byte limit the tests set, above one HTTP/2 flow-control window.
MEDIUM = b'{"session_id": "' + b"x" * 65_000 + b'"}'


async def early_answers(server: Running, cases: list[EarlyCase]) -> None:
    for method, path, headers, body, status, code in cases:
        response = await prior_knowledge(server, method, path, headers, body)
        assert (response.status_code, code_of(response.json())) == (status, code), path
        healthz, answer = await h2c_upgrade(server.url, method, path, headers=headers, body=body)
        assert healthz.status == 200
        assert (answer.status, code_of(answer.json())) == (status, code), (path, answer)


async def test_http2_early_answers_with_a_token_drain_the_body(
    caplog: pytest.LogCaptureFixture,
) -> None:
    model = HeldModel()
    settings = {"token": TOKEN, "http2": True, "max_body_bytes": 65536}
    async with running_server(app_config_for(model), **settings) as server:
        cases: list[EarlyCase] = [
            ("POST", "/v1/sessions", JSON, BIG, 401, "UNAUTHORIZED"),
            ("POST", "/v1/sessions", {**JSON, **AUTH}, BIG, 413, "BODY_TOO_LARGE"),
            ("PUT", "/v1/sessions", {**JSON, **AUTH}, MEDIUM, 405, "METHOD_NOT_ALLOWED"),
        ]
        await survives(server, model, lambda: early_answers(server, cases), **AUTH)
        # HTTP/2 is served for real too: a whole exchange over prior knowledge.
        health = await prior_knowledge(server, "GET", "/healthz", {}, b"")
        assert health.status_code == 200
    assert http_errors(caplog) == []


async def test_http2_early_answers_without_a_token_and_on_the_inspector(
    caplog: pytest.LogCaptureFixture,
) -> None:
    model = HeldModel()
    async with running_server(app_config_for(model), http2=True, max_body_bytes=65536) as server:
        cases: list[EarlyCase] = [
            ("POST", "/v1/sessions", JSON, BIG, 413, "BODY_TOO_LARGE"),
            ("PUT", "/v1/sessions", JSON, MEDIUM, 405, "METHOD_NOT_ALLOWED"),
            ("POST", "/", JSON, MEDIUM, 405, "METHOD_NOT_ALLOWED"),  # the inspector's page
        ]
        await survives(server, model, lambda: early_answers(server, cases))
    assert http_errors(caplog) == []


async def test_a_keep_alive_connection_carries_more_than_a_thousand_requests() -> None:
    # Hypercorn's own default would close it after the 1,000th answer.
    async with running_server(app_config_for(HeldModel())) as server:
        host, port = server.url.removeprefix("http://").split(":")
        stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            request = f"GET /healthz HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode()
            buffer = b""
            for answered in range(1, 1_101):
                await stream.send_all(request)
                while b"\r\n\r\n" not in buffer:
                    chunk = await stream.receive_some()
                    assert chunk, f"the server closed the connection after {answered - 1}"
                    buffer += chunk
                head, buffer = buffer.split(b"\r\n\r\n", 1)
                assert head.startswith(b"HTTP/1.1 200"), head
                length = int(
                    next(
                        line.split(b":", 1)[1]
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    )
                )
                while len(buffer) < length:
                    buffer += await stream.receive_some()
                buffer = buffer[length:]
                assert b"connection: close" not in head.lower(), answered
