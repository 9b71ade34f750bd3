"""A real local HTTP server for provider tests: replays scripted responses (SSE streams,
error statuses, dropped connections) on 127.0.0.1 and records every request it receives."""

from __future__ import annotations

import socket
import threading
import time
from collections import deque
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

import orjson
from attrs import evolve, frozen


@frozen
class Reply:
    """One scripted answer. Body pieces go out as separate HTTP chunks, flushed one by one.

    `drop_before_response` closes the connection without a status line; `drop_after=n`
    sends n pieces and then closes without the chunked terminator (a cut stream);
    `stall` waits after the headers, before the first piece.
    """

    status: int = 200
    content_type: str = "text/event-stream"
    headers: tuple[tuple[str, str], ...] = ()
    pieces: tuple[bytes, ...] = ()
    drop_before_response: bool = False
    drop_after: int | None = None
    stall: float = 0.0

    def rechunked(self, size: int) -> Reply:
        """The same body cut into `size`-byte pieces (events split across reads)."""
        body = b"".join(self.pieces)
        return evolve(self, pieces=tuple(body[i : i + size] for i in range(0, len(body), size)))


@frozen
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)


def sse_event(payload: object, event: str | None = None) -> bytes:
    data = payload if isinstance(payload, str) else orjson.dumps(payload).decode()
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {data}\n\n".encode()


def openai_stream(*payloads: object, done: bool = True) -> Reply:
    pieces = [sse_event(payload) for payload in payloads]
    if done:
        pieces.append(sse_event("[DONE]"))
    return Reply(pieces=tuple(pieces))


def anthropic_stream(*events: dict[str, Any]) -> Reply:
    return Reply(pieces=tuple(sse_event(event, event["type"]) for event in events))


def json_reply(status: int, payload: object, headers: Iterable[tuple[str, str]] = ()) -> Reply:
    return Reply(
        status=status,
        content_type="application/json",
        headers=tuple(headers),
        pieces=(orjson.dumps(payload),),
    )


DROP_BEFORE_RESPONSE = Reply(drop_before_response=True)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Silenced: the tests assert on recorded requests instead."""

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        owner = self.server.owner
        owner.record(
            Recorded(
                "POST", self.path, {k.lower(): v for k, v in self.headers.items()}, bytes(body)
            )
        )
        reply = owner.next_reply()
        self.close_connection = True
        if reply.drop_before_response:
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.send_response(reply.status)
        self.send_header("content-type", reply.content_type)
        self.send_header("transfer-encoding", "chunked")
        self.send_header("connection", "close")
        for name, value in reply.headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.flush()
        if reply.stall:
            time.sleep(reply.stall)
        for sent, piece in enumerate(reply.pieces):
            if reply.drop_after is not None and sent >= reply.drop_after:
                break
            self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            self.wfile.flush()
        if reply.drop_after is not None:
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: SseServer


class SseServer:
    """Context manager: serves scripted replies in a daemon thread, records requests."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self._replies: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def push(self, *replies: Reply) -> None:
        with self._lock:
            self._replies.extend(replies)

    def record(self, request: Recorded) -> None:
        with self._lock:
            self.requests.append(request)

    def next_reply(self) -> Reply:
        with self._lock:
            if self._replies:
                return self._replies.popleft()
        return json_reply(500, {"error": {"message": "test server script exhausted"}})

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> SseServer:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.owner = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._server is not None and self._thread is not None
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
