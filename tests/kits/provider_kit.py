"""Shared pieces of the HTTP adapter tests: an injected backoff sleep, request parts, the
stream fixtures of tests/fixtures/providers, and an in-process httpx transport for checks of
the bytes sent (the real server in sse_server.py stays for streams, timeouts and retries)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import httpx
from sse_server import Recorded, Reply, json_reply

from actorloop.runtime.log.header_algebra import fold
from actorloop.runtime.log.request import Request
from actorloop.runtime.log.session import Session
from actorloop.runtime.model.chunks import ChunkAssembler, StreamChunk
from actorloop.runtime.model.events import SessionEvent
from actorloop.runtime.model.header import ToolSchema
from actorloop.runtime.model.messages import Message

TOOLS = (
    ToolSchema(
        "lookup", "Find a word", {"type": "object", "properties": {"q": {"type": "string"}}}
    ),
    ToolSchema("now"),
)
PREFIX = (Message.user("catalogue: skills A, B"), Message.assistant("noted"))


class Waits:
    """Injected backoff sleep: records each wait instead of sleeping."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "providers"


def fixture_stream(name: str) -> Reply:
    """A stream fixture from tests/fixtures/providers, one HTTP chunk per event."""
    raw = (FIXTURES / name).read_bytes()
    return Reply(pieces=tuple(event + b"\n\n" for event in raw.split(b"\n\n") if event))


def fixture_bytes(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def assemble(chunks: Iterable[StreamChunk]) -> ChunkAssembler:
    """The assembler fed with `chunks` (content, usage and finish as the loop sees them)."""
    assembler = ChunkAssembler()
    for chunk in chunks:
        assembler.feed(chunk)
    return assembler


def rebuilt_requests(session_id: str, events: Sequence[SessionEvent]) -> list[Request]:
    """Every step's request as the log alone rebuilds it (session-log.md §5): the header
    folded up to the step's header event, then the prefix and the boundary derivation."""
    requests: list[Request] = []
    for start, event in enumerate(events):
        if event.type != "step/start":
            continue
        end = next(
            index
            for index in range(start + 1, len(events))
            if events[index].type in ("assistant/chunk", "assistant/message", "step/end")
        )
        header = fold(events[:end])
        assert header is not None
        prefix = header.message_prefix or ()
        history = Session.from_events(session_id, events[:start]).derive_messages()
        requests.append(
            Request(
                session_id,
                header.config,
                header.system,
                header.tools or (),
                prefix + history,
                len(prefix),
            )
        )
    return requests


class WireCapture:
    """An `httpx.MockTransport` handler: records each request an adapter sends (through its
    `transport=` setting) and answers with the next scripted reply, whole."""

    def __init__(self, *replies: Reply) -> None:
        self.requests: list[Recorded] = []
        self._replies = list(replies)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(
            Recorded(request.method, request.url.path, dict(request.headers), request.content)
        )
        reply = (
            self._replies.pop(0)
            if self._replies
            else json_reply(500, {"error": {"message": "capture script exhausted"}})
        )
        headers = {"content-type": reply.content_type, **dict(reply.headers)}
        return httpx.Response(reply.status, headers=headers, content=b"".join(reply.pieces))

    @property
    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self)
