"""The access log: one line per HTTP request once its app call has ended — client, request
line, status, body bytes — and no header (User-Agent, Referer, tokens stay out of logs)."""

from __future__ import annotations

import logging

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .disconnects import connection_watch

log = logging.getLogger("actorloop.http.access")

CLIENT_CLOSED_REQUEST = 499
"""The status logged for a request whose client left before any answer started."""

NO_RESPONSE = 500
"""The status logged when the app ended without answering (the server then sends a 500)."""


class AccessLog:
    """Logs every HTTP request `app` serves, once, when the app's call ends (answered,
    failed or cancelled). Hypercorn's own access log writes a second `-` line when the
    connection closes while the answer is still on its way; this one cannot, as it logs
    from the app's side of the connection."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status: int | None = None
        body_bytes = 0
        client_left = False

        async def receiving() -> Message:
            nonlocal client_left
            message = await receive()
            client_left = client_left or message["type"] == "http.disconnect"
            return message

        async def sending(message: Message) -> None:
            nonlocal status, body_bytes
            if message["type"] == "http.response.start":
                status = int(message["status"])
            elif message["type"] == "http.response.body":
                body_bytes += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receiving, sending)
        finally:
            if status is None:
                # On HTTP/1.1 the connection, not a read of `receive`, sees the client leave.
                watch = connection_watch(scope)
                client_left = client_left or (watch is not None and watch.closed)
                status = CLIENT_CLOSED_REQUEST if client_left else NO_RESPONSE
            log.info("%s", access_line(scope, status, body_bytes))


def access_line(scope: Scope, status: int, body_bytes: int) -> str:
    """`host:port "METHOD /path HTTP/1.1" status bytes` (bytes `-` when none were sent; the
    query string is left out, as it may carry what a header would)."""
    client = scope.get("client")
    peer = "-" if not client else ":".join(str(part) for part in client)
    protocol = f"HTTP/{scope.get('http_version', '1.1')}"
    size = str(body_bytes) if body_bytes else "-"
    return f'{peer} "{scope["method"]} {scope["path"]} {protocol}" {status} {size}'
