"""`ScriptedProvider` and `EchoProvider`: deterministic in-process models for tests and loads."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Any, TypeAlias

import trio

from ..errors import ScriptExhausted
from ..log.request import Request
from ..model.chunks import (
    BlockEnd,
    BlockStart,
    Finish,
    StreamChunk,
    TextDelta,
    TokenUsage,
    ToolCallDelta,
    UsageReport,
)
from .base import ModelInfo


class _Hang:
    """Script entry: stream one partial text chunk, then wait until cancelled."""

    def __repr__(self) -> str:
        return "HANG"


HANG = _Hang()

ScriptEntry: TypeAlias = Sequence[StreamChunk] | Callable[[Request], Iterable[StreamChunk]] | _Hang


def _usage_for(text_len: int) -> UsageReport:
    return UsageReport(TokenUsage(input=0, output=max(1, text_len // 4)))


def reply(text: str, usage: TokenUsage | None = None) -> tuple[StreamChunk, ...]:
    """A plain text answer that stops the turn."""
    return (
        BlockStart(0, "text"),
        TextDelta(0, text),
        BlockEnd(0),
        UsageReport(usage) if usage is not None else _usage_for(len(text)),
        Finish("stop"),
    )


def tool_call(
    call_id: str, name: str, args: dict[str, Any] | str | None = None, text: str | None = None
) -> tuple[StreamChunk, ...]:
    """An answer asking for one tool call (optionally preceded by text)."""
    arguments = args if isinstance(args, str) else json.dumps(args or {}, sort_keys=True)
    chunks: list[StreamChunk] = []
    index = 0
    if text is not None:
        chunks += [BlockStart(0, "text"), TextDelta(0, text), BlockEnd(0)]
        index = 1
    half = len(arguments) // 2
    chunks += [
        BlockStart(index, "tool_call", call_id=call_id, name=name),
        ToolCallDelta(index, arguments[:half]),
        ToolCallDelta(index, arguments[half:]),
        BlockEnd(index),
        _usage_for(len(arguments)),
        Finish("tool-calls"),
    ]
    return tuple(chunks)


def tool_calls(*calls: tuple[str, str, dict[str, Any] | None]) -> tuple[StreamChunk, ...]:
    """An answer asking for several tool calls, in order."""
    chunks: list[StreamChunk] = []
    for index, (call_id, name, args) in enumerate(calls):
        arguments = json.dumps(args or {}, sort_keys=True)
        chunks += [
            BlockStart(index, "tool_call", call_id=call_id, name=name),
            ToolCallDelta(index, arguments),
            BlockEnd(index),
        ]
    chunks += [_usage_for(10), Finish("tool-calls")]
    return tuple(chunks)


def max_tokens_reply(text: str, call: tuple[str, str] | None = None) -> tuple[StreamChunk, ...]:
    """A truncated answer (finish kind max-tokens), optionally with a cut-off tool call."""
    chunks: list[StreamChunk] = [BlockStart(0, "text"), TextDelta(0, text), BlockEnd(0)]
    if call is not None:
        chunks += [BlockStart(1, "tool_call", call_id=call[0], name=call[1]), ToolCallDelta(1, "{")]
    chunks += [_usage_for(len(text)), Finish("max-tokens")]
    return tuple(chunks)


class ScriptedProvider:
    """Each model call consumes the next script entry; every request is recorded."""

    name = "scripted"

    def __init__(
        self, script: Iterable[ScriptEntry] = (), *, context_window: int | None = None
    ) -> None:
        self.script: list[ScriptEntry] = list(script)
        self.requests: list[Request] = []
        self.calls = 0
        self._context_window = context_window

    def push(self, *entries: ScriptEntry) -> None:
        """Append entries to the script."""
        self.script.extend(entries)

    def model_info(self, model: str) -> ModelInfo | None:
        """The context window given at construction (None: unknown)."""
        return ModelInfo(self._context_window)

    async def stream(self, request: Request) -> AsyncIterator[StreamChunk]:
        """Record `request` and stream the next script entry."""
        self.requests.append(request)
        self.calls += 1
        if not self.script:
            raise ScriptExhausted(self.calls - 1)
        entry = self.script.pop(0)
        if isinstance(entry, _Hang):
            yield BlockStart(0, "text")
            yield TextDelta(0, "partial")
            await trio.sleep_forever()
            return
        chunks = entry(request) if callable(entry) else entry
        for chunk in chunks:
            await trio.lowlevel.checkpoint()
            yield chunk


class EchoProvider:
    """Never exhausts: answers "ok" (or echoes the last user text), with optional latency."""

    name = "echo"

    def __init__(
        self, *, latency: float = 0.0, echo: bool = False, context_window: int | None = None
    ) -> None:
        self.latency = latency
        self.echo = echo
        self.calls = 0
        self._context_window = context_window

    def model_info(self, model: str) -> ModelInfo | None:
        """The context window given at construction (None: unknown)."""
        return ModelInfo(self._context_window)

    async def stream(self, request: Request) -> AsyncIterator[StreamChunk]:
        """Answer "ok" (or echo the last message) after the configured latency."""
        self.calls += 1
        if self.latency:
            await trio.sleep(self.latency)
        else:
            await trio.lowlevel.checkpoint()
        text = "ok"
        if self.echo and request.messages:
            text = request.messages[-1].text or "ok"
        for chunk in reply(text):
            yield chunk
