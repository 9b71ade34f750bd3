"""Shared pieces of the HTTP adapter tests: an injected backoff sleep and request parts."""

from __future__ import annotations

from actorloop.runtime.header import ToolSchema
from actorloop.runtime.messages import Message

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
