"""HTTP/2 on the cleartext port: Hypercorn always takes it (prior knowledge or an h2c
upgrade), so the app refuses it with 505 unless `serve --http2`; when on, an answer given
before the request body was read (401, 413, 405, ...) first drains that body, since
Hypercorn's HTTP/2 stream breaks on body data for a stream that already answered."""

from __future__ import annotations

import trio
from starlette.types import Message, Receive, Scope, Send

from ..errors import ErrorCode
from .errors import error_response


class _BodyReader:
    """A request's `receive` that remembers whether the body ended (or the client left)."""

    def __init__(self, receive: Receive) -> None:
        self._receive = receive
        self.ended = False

    async def receive(self) -> Message:
        message = await self._receive()
        if message["type"] == "http.disconnect" or (
            message["type"] == "http.request" and not message.get("more_body", False)
        ):
            self.ended = True
        return message

    async def drain(self, seconds: float) -> None:
        """Read and drop the rest of the body, for at most `seconds`."""
        with trio.move_on_after(seconds):
            while not self.ended:
                await self.receive()


class Http2Policy:
    """HTTP/2 requests get 505 HTTP_VERSION_NOT_SUPPORTED unless `enabled`; when enabled,
    the last message of every HTTP/2 answer waits until the request body was read to its
    end (at most `drain_timeout` seconds: a client that keeps sending past it loses its
    connection, contained there). `edge.Edge` asks `admit` of every HTTP/2 request."""

    def __init__(self, *, enabled: bool, drain_timeout: float) -> None:
        self.enabled = enabled
        self.drain_timeout = drain_timeout

    async def admit(
        self, scope: Scope, receive: Receive, send: Send
    ) -> tuple[Receive, Send] | None:
        """The `receive` and `send` an HTTP/2 request goes on with, or None once it was
        refused (the 505 sent)."""
        body = _BodyReader(receive)
        if not self.enabled:
            await body.drain(self.drain_timeout)
            refusal = error_response(
                505,
                ErrorCode.HTTP_VERSION_NOT_SUPPORTED,
                "HTTP/2 is off on this server (actorloop serve --http2 turns it on); use HTTP/1.1",
            )
            await refusal(scope, body.receive, send)
            return None

        async def send_after_body(message: Message) -> None:
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                await body.drain(self.drain_timeout)
            await send(message)

        return body.receive, send_after_body
