"""Shared pieces of the HTTP adapter tests: an injected backoff sleep, request parts and the
stream fixtures of tests/fixtures/providers."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from sse_server import Reply

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
