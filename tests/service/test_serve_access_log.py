"""The access log over a real socket (issue 40, item 9): one line per request — a client
that leaves mid-send or mid-stream included — with the protocol as `HTTP/1.1`, no traceback."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import trio
from serve_kit import HeldModel, app_config_for, running_server

ACCESS = "actorloop.http.access"


class LineSeen(logging.Handler):
    """Sets `seen` once an access line containing `needle` is logged (from the trio
    thread: the line is written where the request's app call ends)."""

    def __init__(self, needle: str) -> None:
        super().__init__()
        self.needle = needle
        self.seen = trio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.needle in record.getMessage():
            self.seen.set()


@contextmanager
def watching(needle: str) -> Iterator[LineSeen]:
    handler = LineSeen(needle)
    logger = logging.getLogger(ACCESS)
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


async def raw_request(url: str, head: str, body: bytes = b"") -> trio.SocketStream:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    stream = await trio.open_tcp_stream(host, int(port))
    await stream.send_all(head.encode() + b"\r\n" + body)
    return stream


def access_lines(caplog: pytest.LogCaptureFixture, path: str) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == ACCESS and f" {path} " in r.getMessage()
    ]


async def test_a_client_leaving_mid_send_or_mid_stream_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    model = HeldModel()
    async with (
        running_server(app_config_for(model), access_log=True) as server,
        server.client() as client,
    ):
        assert (await client.post("/v1/sessions", json={"session_id": "gone"})).is_success
        body = json.dumps({"content": "hold me"}).encode()
        with watching("/v1/sessions/gone/messages") as line:
            sending = await raw_request(
                server.url,
                "POST /v1/sessions/gone/messages HTTP/1.1\r\nhost: localhost\r\n"
                f"content-type: application/json\r\ncontent-length: {len(body)}\r\n",
                body,
            )
            await model.entered.wait()
            await sending.aclose()  # the client leaves before its answer
            await line.seen.wait()
        model.release()
        with watching("/v1/sessions/gone/events") as line:
            streaming = await raw_request(
                server.url, "GET /v1/sessions/gone/events HTTP/1.1\r\nhost: localhost\r\n"
            )
            received = b""
            while b"\r\n\r\n" not in received or b"data:" not in received:
                received += await streaming.receive_some()
            assert received.startswith(b"HTTP/1.1 200"), received
            await streaming.aclose()  # the client leaves a following stream
            await line.seen.wait()
        assert (await client.get("/healthz")).status_code == 200
    # The server has drained (closing the test client's kept-alive connection too).
    sent = access_lines(caplog, "/v1/sessions/gone/messages")
    assert len(sent) == 1 and sent[0].endswith('"POST /v1/sessions/gone/messages HTTP/1.1" 499 -')
    streamed = access_lines(caplog, "/v1/sessions/gone/events")
    assert len(streamed) == 1, streamed
    assert ' "GET /v1/sessions/gone/events HTTP/1.1" 200 ' in streamed[0], streamed
    assert not streamed[0].endswith(" -")  # the events it did send are counted
    health = access_lines(caplog, "/healthz")
    assert len(health) == 1 and '"GET /healthz HTTP/1.1" 200 ' in health[0], health
    failures = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert [r.getMessage() for r in failures] == []
