"""The AI SDK's UI message stream protocol (v1, what `useChat`'s default transport reads):
a turn's events as its SSE parts, the request body that transport sends, and the messages a
client rebuilds from the stream read back as the log's messages (docs/serve.md)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson
from attrs import frozen

from ..errors import ErrorCode
from ..model.chunks import (
    SUMMARY_JOINER,
    BlockEnd,
    BlockKind,
    BlockStart,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
)
from ..model.events import (
    AssistantChunk,
    AssistantMessage,
    SessionEvent,
    StepStart,
    ToolResultEvent,
    TurnEnd,
    TurnStart,
)
from ..model.messages import Block, Content, Message, Reasoning, Text, ToolCall, ToolResult
from .errors import InvalidRequestBody
from .schemas import JsonObject

HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"connection", b"keep-alive"),
    (b"x-vercel-ai-ui-message-stream", b"v1"),
    (b"x-accel-buffering", b"no"),
)
"""The response headers of the protocol (the `ai` package's `UI_MESSAGE_STREAM_HEADERS`)."""

DONE = b"data: [DONE]\n\n"
"""The stream's last frame."""

FINISH_REASONS: Mapping[str, str] = {
    "completed": "stop",
    "max-tokens": "length",
    "max_steps": "other",
    "awaiting_approval": "tool-calls",
    "budget_exhausted": "other",
    "rejected": "content-filter",
    "error": "error",
    "aborted": "interrupted",
    "disposed": "interrupted",
    "interrupted": "interrupted",
}
"""A turn's end kind as the protocol's `finishReason`."""

_ABORTED = frozenset({"aborted", "disposed", "interrupted"})


def message_id(session_id: str, turn: int) -> str:
    """The id of the assistant message one turn streams (`<session>/<turn>`)."""
    return f"{session_id}/{turn}"


def _frame(part: JsonObject) -> bytes:
    return b"data: " + orjson.dumps(part) + b"\n\n"


class UiMessageTranslator:
    """One turn's events as UI message stream parts. A fold over the turn: it remembers the
    open blocks of the step (a tool call's deltas name only the block index)."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self._blocks: dict[int, tuple[BlockKind, str]] = {}
        self._parts: dict[int, int] = {}

    def frames(self, event: SessionEvent) -> tuple[bytes, ...]:
        """The `data:` frames of `event`."""
        return tuple(_frame(part) for part in self.parts(event))

    def closing(self) -> tuple[bytes, ...]:
        """`data: [DONE]`."""
        return (DONE,)

    def parts(self, event: SessionEvent) -> tuple[JsonObject, ...]:
        """The protocol parts `event` becomes."""
        data = event.data
        if isinstance(data, TurnStart):
            return ({"type": "start", "messageId": message_id(self.session_id, data.turn)},)
        if isinstance(data, StepStart):
            self._blocks.clear()
            self._parts.clear()
            return ({"type": "start-step"},)
        if event.type == "step/end":
            return ({"type": "finish-step"},)
        if isinstance(data, AssistantChunk):
            return self._chunk(data)
        if isinstance(data, AssistantMessage):
            return tuple(
                {
                    "type": "tool-input-available",
                    "toolCallId": block.id,
                    "toolName": block.name,
                    "input": _input(block.arguments),
                    "dynamic": True,
                    # The model's own argument text, byte for byte (`input` is parsed).
                    "providerMetadata": {"actorloop": {"arguments": block.arguments}},
                }
                for block in data.content
                if isinstance(block, ToolCall)
            )
        if isinstance(data, ToolResultEvent):
            texts = [block.text for block in data.content]
            if data.is_error:
                return (
                    {
                        "type": "tool-output-error",
                        "toolCallId": data.call_id,
                        "errorText": "".join(texts),
                        "dynamic": True,
                    },
                )
            output: Any = texts[0] if len(texts) == 1 else texts
            return (
                {
                    "type": "tool-output-available",
                    "toolCallId": data.call_id,
                    "output": output,
                    "dynamic": True,
                },
            )
        if isinstance(data, TurnEnd):
            return self._end(data)
        return ()

    def _chunk(self, data: AssistantChunk) -> tuple[JsonObject, ...]:
        chunk = data.chunk
        if isinstance(chunk, BlockStart):
            if chunk.kind == "tool_call":
                call_id = chunk.call_id or f"{data.turn}.{data.step}.{chunk.index}"
                self._blocks[chunk.index] = ("tool_call", call_id)
                return (
                    {
                        "type": "tool-input-start",
                        "toolCallId": call_id,
                        "toolName": chunk.name or "",
                        "dynamic": True,
                    },
                )
            part_id = f"{data.turn}.{data.step}.{chunk.index}"
            self._blocks[chunk.index] = (chunk.kind, part_id)
            return ({"type": f"{chunk.kind}-start", "id": part_id},)
        block = self._blocks.get(chunk.index) if hasattr(chunk, "index") else None
        if block is None:
            return ()
        kind, block_id = block
        if isinstance(chunk, TextDelta):
            return ({"type": "text-delta", "id": block_id, "delta": chunk.text},)
        if isinstance(chunk, ReasoningDelta):
            delta = chunk.text
            current = self._parts.get(chunk.index, 0)
            if chunk.part is not None and chunk.part != current:
                self._parts[chunk.index] = chunk.part
                delta = SUMMARY_JOINER + delta
            return ({"type": "reasoning-delta", "id": block_id, "delta": delta},) if delta else ()
        if isinstance(chunk, ToolCallDelta):
            part: JsonObject = {"type": "tool-input-delta", "toolCallId": block_id}
            return ({**part, "inputTextDelta": chunk.arguments},)
        if isinstance(chunk, BlockEnd) and kind != "tool_call":
            return ({"type": f"{kind}-end", "id": block_id},)
        return ()

    def _end(self, data: TurnEnd) -> tuple[JsonObject, ...]:
        kind = data.reason.kind
        parts: list[JsonObject] = []
        if kind == "error":
            parts.append({"type": "error", "errorText": data.reason.message or "the turn failed"})
        elif kind in _ABORTED:
            parts.append({"type": "abort", "reason": data.reason.reason or kind})
        parts.append(
            {
                "type": "finish",
                "finishReason": FINISH_REASONS[kind],
                "messageMetadata": {"turn": data.turn, "end": kind},
            }
        )
        return tuple(parts)


def _input(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


# ------------------------------------------------------------------------- the request


@frozen
class ChatRequest:
    """A `useChat` request: the new user message, and whether its turn runs on when the
    client goes away (`detach`, a body field the transport's `body` option adds)."""

    content: Content
    detach: bool = False


def chat_request(raw: bytes) -> ChatRequest:
    """The request in a `useChat` body (`{id, messages, trigger, messageId}`): the text
    parts of its last message, which must be the user's. The server keeps the conversation;
    the rest of `messages` is the client's copy of it."""
    try:
        body = orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError as exc:
        raise InvalidRequestBody(f"the body is not JSON: {exc}", ErrorCode.INVALID_JSON) from exc
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        raise InvalidRequestBody("$.messages: the body must be an object with a messages array")
    trigger = body.get("trigger", "submit-message")
    if trigger != "submit-message":
        raise InvalidRequestBody(
            f"$.trigger: only submit-message is taken, got {str(trigger)[:40]!r} (regenerate "
            "a turn by forking the session before it: POST /v1/sessions/{id}/fork)"
        )
    messages = body["messages"]
    last = messages[-1] if messages else None
    if not isinstance(last, dict) or last.get("role") != "user":
        raise InvalidRequestBody("$.messages: the last message must be the user's")
    parts = last.get("parts")
    if not isinstance(parts, list):
        raise InvalidRequestBody("$.messages[-1].parts: must be an array")
    content: list[Block] = []
    for index, part in enumerate(parts):
        if not isinstance(part, dict) or part.get("type") != "text":
            raise InvalidRequestBody(
                f"$.messages[-1].parts[{index}]: only text parts are taken",
                ErrorCode.INVALID_CONTENT,
            )
        text = part.get("text")
        if not isinstance(text, str):
            raise InvalidRequestBody(f"$.messages[-1].parts[{index}].text: must be a string")
        content.append(Text(text))
    if not content:
        raise InvalidRequestBody("$.messages[-1].parts: no text", ErrorCode.INVALID_CONTENT)
    detach = body.get("detach", False)
    if not isinstance(detach, bool):
        raise InvalidRequestBody("$.detach: must be true or false")
    return ChatRequest(tuple(content), detach)


# ------------------------------------------------------------------------- the history


def ui_messages(session_id: str, messages: Sequence[Message]) -> list[JsonObject]:
    """The log's messages (`derive_messages()`) as the UI messages a client shows: a user
    message of text, then one assistant message holding every step up to the next one
    (`step-start` before each step, tool results on their calls' parts). The inverse of
    `messages_from_ui` (what `useChat` takes as its initial `messages`)."""
    out: list[JsonObject] = []
    tools: dict[str, JsonObject] = {}
    for index, message in enumerate(messages):
        results = [block for block in message.content if isinstance(block, ToolResult)]
        if message.role == "user" and results and out and out[-1]["role"] == "assistant":
            for result in results:
                part = tools.get(result.tool_call_id)
                if part is not None:
                    _settle(part, result)
            continue
        if message.role == "user":
            texts = [block.text for block in message.content if isinstance(block, Text)]
            parts = [{"type": "text", "text": text} for text in texts]
            out.append({"id": f"{session_id}/m{index}", "role": "user", "parts": parts})
            continue
        if not out or out[-1]["role"] != "assistant":
            out.append({"id": f"{session_id}/m{index}", "role": "assistant", "parts": []})
        steps = out[-1]["parts"]
        steps.append({"type": "step-start"})
        for block in message.content:
            if isinstance(block, Text):
                steps.append({"type": "text", "text": block.text, "state": "done"})
            elif isinstance(block, Reasoning):
                steps.append({"type": "reasoning", "text": block.text, "state": "done"})
            elif isinstance(block, ToolCall):
                tools[block.id] = {
                    "type": "dynamic-tool",
                    "toolName": block.name,
                    "toolCallId": block.id,
                    "state": "input-available",
                    "input": _input(block.arguments),
                    "callProviderMetadata": {"actorloop": {"arguments": block.arguments}},
                }
                steps.append(tools[block.id])
    return out


def _settle(part: JsonObject, result: ToolResult) -> None:
    texts = [block.text for block in result.content]
    if result.is_error:
        part.update(state="output-error", errorText="".join(texts))
    else:
        part.update(state="output-available", output=texts[0] if len(texts) == 1 else texts)


def messages_from_ui(ui_messages: Iterable[Mapping[str, Any]]) -> tuple[Message, ...]:
    """The log's messages (`Session.derive_messages()`) read back from the UI messages a
    client built from the stream: one assistant message per step (`step-start`), then one
    user message per tool result, in the order of the calls."""
    messages: list[Message] = []
    for ui in ui_messages:
        if ui.get("role") == "user":
            texts = tuple(Text(part["text"]) for part in ui["parts"] if part["type"] == "text")
            messages.append(Message("user", texts))
        elif ui.get("role") == "assistant":
            for step in _steps(ui["parts"]):
                messages.extend(_step_messages(step))
    return tuple(messages)


def _steps(parts: Sequence[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
    steps: list[list[Mapping[str, Any]]] = []
    for part in parts:
        if part["type"] == "step-start" or not steps:
            steps.append([])
        if part["type"] != "step-start":
            steps[-1].append(part)
    return steps


def _step_messages(step: Sequence[Mapping[str, Any]]) -> list[Message]:
    blocks: list[Block] = []
    results: list[Message] = []
    for part in step:
        kind = part["type"]
        if kind == "text":
            blocks.append(Text(part["text"]))
        elif kind == "reasoning":
            blocks.append(Reasoning(part["text"]))
        elif kind == "dynamic-tool" or kind.startswith("tool-"):
            name = part.get("toolName") or kind.removeprefix("tool-")
            recorded = (part.get("callProviderMetadata") or {}).get("actorloop", {})
            value = part.get("input")
            arguments = recorded.get("arguments") or (
                value
                if isinstance(value, str)
                else json.dumps(value, separators=(",", ":"), ensure_ascii=False)
            )
            blocks.append(ToolCall(part["toolCallId"], name, arguments))
            if part.get("state") == "output-available":
                output = part["output"]
                texts = (output,) if isinstance(output, str) else tuple(output)
                content = tuple(Text(text) for text in texts)
                results.append(Message("user", (ToolResult(part["toolCallId"], content),)))
            elif part.get("state") == "output-error":
                error = (Text(part["errorText"]),)
                results.append(Message("user", (ToolResult(part["toolCallId"], error, True),)))
    return ([Message("assistant", tuple(blocks))] if blocks else []) + results
