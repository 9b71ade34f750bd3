"""The request body's limits: above `max_body_bytes` a 413, a body slower than the body
timeout a 408 — refused at once from Content-Length, or as the handler reads the body."""

from __future__ import annotations

from collections.abc import Callable

import trio
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import Message, Receive

from ..errors import ErrorCode
from .errors import InvalidRequestBody, error_response


def _ready_message(receive: Receive) -> Callable[[], Message | None]:
    """What takes a message `receive` already holds without waiting (None when there is
    none): Hypercorn's `receive` is a trio memory channel's, into which a body that came
    with its request is put before the app runs, so reading it needs no cancel scope for
    the body timeout and no scheduling point (each a resume of the whole ASGI await chain).
    Any other `receive` always waits."""
    channel = getattr(receive, "__self__", None)
    if not isinstance(channel, trio.MemoryReceiveChannel):
        return lambda: None

    def ready() -> Message | None:
        try:
            message: Message = channel.receive_nowait()
        except trio.WouldBlock:
            return None
        return message

    return ready


class BodyLimit:
    """Bodies above `limit` bytes get 413 BODY_TOO_LARGE: at once when Content-Length says
    so (`refusal`), else as soon as the received bytes pass it (the handler's read through
    `limited` raises); a body that has not arrived whole `seconds` after the request began
    gets 408 BODY_READ_TIMEOUT."""

    def __init__(self, limit: int, seconds: float) -> None:
        self.limit = limit
        self.seconds = seconds

    def refusal(self, headers: Headers) -> Response | None:
        """The 413 for a request whose Content-Length is above the limit, else None."""
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            return error_response(413, ErrorCode.BODY_TOO_LARGE, self._message())
        return None

    def limited(self, receive: Receive) -> Receive:
        """`receive` under the limit and the timeout, which start now."""
        seen = 0
        ended = False
        deadline = trio.current_time() + self.seconds
        ready = _ready_message(receive)

        async def limited() -> Message:
            nonlocal seen, ended
            if ended:  # past the body only the disconnect is left: no deadline
                return await receive()
            message = ready()
            if message is None:
                with trio.move_on_at(deadline):
                    message = await receive()
                if message is None:
                    raise InvalidRequestBody(
                        f"the request body did not arrive within {self.seconds:g} s",
                        ErrorCode.BODY_READ_TIMEOUT,
                    )
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise InvalidRequestBody(self._message(), ErrorCode.BODY_TOO_LARGE)
                ended = not message.get("more_body", False)
            return message

        return limited

    def _message(self) -> str:
        return f"the request body is larger than {self.limit} bytes"
