"""What the UI stream protocol tests share: a model whose tool-using turn streams as many
events as asked (reasoning, text and argument deltas), the profile that runs it, and a reader
of raw SSE frames (the UI message stream ends with `data: [DONE]`, which is no JSON)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import trio
from attrs import frozen

from actorloop.runtime import AgentOptions, Message
from actorloop.runtime.log.request import Request
from actorloop.runtime.model.chunks import (
    BlockEnd,
    BlockStart,
    Finish,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    TokenUsage,
    ToolCallDelta,
    UsageReport,
)
from actorloop.runtime.model.messages import ToolResult
from actorloop.runtime.providers.base import ModelInfo
from actorloop.runtime.service.profiles import AppConfig


class ChattyModel:
    """Step one thinks (`reasoning` deltas), says something (`text` deltas) and calls
    `lookup` (its arguments in `arguments` deltas); the step after the tool result answers
    in `answer` deltas. A last user message without "lookup" is answered in one step; one
    with "hold" first waits for `release()` (`entered` is set when it waits)."""

    name = "chatty"

    def __init__(
        self, reasoning: int = 3, text: int = 3, arguments: int = 2, answer: int = 3
    ) -> None:
        self.reasoning = reasoning
        self.text = text
        self.arguments = arguments
        self.answer = answer
        self.calls = 0
        self.entered = trio.Event()
        self._release = trio.Event()

    def release(self) -> None:
        """Let held calls answer (and later ones not wait)."""
        self._release.set()

    def model_info(self, model: str) -> ModelInfo | None:
        return ModelInfo(200_000)

    async def stream(self, request: Request) -> AsyncIterator[StreamChunk]:
        self.calls += 1
        last = request.history[-1] if request.history else Message.user("")
        if any(isinstance(block, ToolResult) for block in last.content):
            for chunk in _text(0, "answer ", self.answer):
                yield chunk
            yield UsageReport(TokenUsage(input=10, output=self.answer))
            yield Finish("stop")
            return
        if "hold" in last.text:
            self.entered.set()
            await self._release.wait()
        if "lookup" not in last.text:
            for chunk in _text(0, "echo ", self.answer):
                yield chunk
            yield Finish("stop")
            return
        yield BlockStart(0, "reasoning")
        for index in range(self.reasoning):
            yield ReasoningDelta(0, f"think{index} ")
        yield BlockEnd(0)
        for chunk in _text(1, "word", self.text):
            yield chunk
        arguments = json.dumps({"query": "x" * self.arguments})
        pieces = [arguments[i : i + 1] for i in range(len(arguments))]
        size = max(1, len(pieces) // max(1, self.arguments))
        yield BlockStart(2, "tool_call", call_id=f"call{len(request.history)}", name="lookup")
        for start in range(0, len(pieces), size):
            yield ToolCallDelta(2, "".join(pieces[start : start + size]))
        yield BlockEnd(2)
        yield UsageReport(TokenUsage(input=10, output=5))
        yield Finish("tool-calls")


def _text(index: int, word: str, count: int) -> list[StreamChunk]:
    return [
        BlockStart(index, "text"),
        *(TextDelta(index, f"{word}{n} ") for n in range(count)),
        BlockEnd(index),
    ]


def chatty_config(model: ChattyModel, store: str = "memory:") -> AppConfig:
    """One `default` profile over `model` with the lookup tool."""
    from actorloop.runtime.cli.orchestration import LOOKUP

    config = AppConfig(provider=model, model=None, store_url=store)  # type: ignore[arg-type]
    config.add_profile(
        "default", AgentOptions(model="chatty-1", system="Be brief.", tools=(LOOKUP,))
    )
    return config


@frozen
class Frame:
    """One SSE frame as sent: its id (None without one) and its data line."""

    id: str | None
    data: str


async def frames(response: httpx.Response, limit: int | None = None) -> list[Frame]:
    """The frames of a streamed response (comments skipped), at most `limit`."""
    out: list[Frame] = []
    current: dict[str, str] = {}
    async for line in response.aiter_lines():
        if line.startswith(":"):
            continue
        if line == "":
            if "data" in current:
                out.append(Frame(current.get("id"), current["data"]))
                if limit is not None and len(out) >= limit:
                    return out
            current = {}
            continue
        name, _, value = line.partition(":")
        current[name] = value[1:] if value.startswith(" ") else value
    return out


def chat_body(text: str, **extra: object) -> dict[str, object]:
    """The body `useChat`'s default transport sends for one new user message."""
    return {
        "id": "chat",
        "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": text}]}],
        "trigger": "submit-message",
        "messageId": None,
        **extra,
    }
