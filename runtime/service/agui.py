"""The AG-UI protocol (`ag-ui-protocol`'s types, the `agui` extra): a turn's events as
AG-UI events (thread id = session id, run id = turn number), the `RunAgentInput` a client
posts, and the messages a client rebuilds read back as the log's messages (docs/serve.md)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ag_ui.core import (
    BaseEvent,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    TextPart,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    UserMessage,
)
from ag_ui.encoder import EventEncoder
from pydantic import ValidationError

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
    SessionEvent,
    StepEnd,
    StepStart,
    ToolResultEvent,
    TurnEnd,
    TurnStart,
)
from ..model.messages import Block, Content, Message, Reasoning, Text, ToolCall, ToolResult
from .errors import InvalidRequestBody

HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
)
"""The response headers of an AG-UI run."""

_ENCODER = EventEncoder()
_ABORTED = frozenset({"aborted", "disposed", "interrupted"})


def step_message_id(session_id: str, turn: int, step: int) -> str:
    """The id of the assistant message one step builds (its text and tool calls)."""
    return f"{session_id}/{turn}.{step}"


class AguiTranslator:
    """One turn's events as AG-UI events. A fold over the turn: it remembers the step's
    open blocks (a tool call's argument deltas name only the block index)."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self._blocks: dict[int, tuple[BlockKind, str]] = {}
        self._parts: dict[int, int] = {}

    def frames(self, event: SessionEvent) -> tuple[bytes, ...]:
        """The `data:` frames of `event`."""
        return tuple(_ENCODER.encode(item).encode() for item in self.events(event))

    def closing(self) -> tuple[bytes, ...]:
        """Nothing: RUN_FINISHED or RUN_ERROR was the last event."""
        return ()

    def events(self, event: SessionEvent) -> tuple[BaseEvent, ...]:
        """The AG-UI events `event` becomes."""
        data = event.data
        sid = self.session_id
        if isinstance(data, TurnStart):
            return (RunStartedEvent(thread_id=sid, run_id=str(data.turn)),)
        if isinstance(data, StepStart):
            self._blocks.clear()
            self._parts.clear()
            return (StepStartedEvent(step_name=f"step {data.step}"),)
        if isinstance(data, StepEnd):
            return (StepFinishedEvent(step_name=f"step {data.step}"),)
        if isinstance(data, AssistantChunk):
            return self._chunk(data)
        if isinstance(data, ToolResultEvent):
            return (
                ToolCallResultEvent(
                    message_id=f"{step_message_id(sid, data.turn, data.step)}/{data.call_id}",
                    tool_call_id=data.call_id,
                    content="".join(block.text for block in data.content),
                    role="tool",
                ),
            )
        if isinstance(data, TurnEnd):
            return (self._end(data),)
        return ()

    def _chunk(self, data: AssistantChunk) -> tuple[BaseEvent, ...]:
        chunk = data.chunk
        message = step_message_id(self.session_id, data.turn, data.step)
        if isinstance(chunk, BlockStart):
            if chunk.kind == "tool_call":
                call_id = chunk.call_id or f"{message}.{chunk.index}"
                self._blocks[chunk.index] = ("tool_call", call_id)
                return (
                    ToolCallStartEvent(
                        tool_call_id=call_id,
                        tool_call_name=chunk.name or "",
                        parent_message_id=message,
                    ),
                )
            if chunk.kind == "reasoning":
                reasoning = f"{message}.r{chunk.index}"
                self._blocks[chunk.index] = ("reasoning", reasoning)
                return (
                    ReasoningStartEvent(message_id=reasoning),
                    ReasoningMessageStartEvent(message_id=reasoning),
                )
            self._blocks[chunk.index] = ("text", message)
            return (TextMessageStartEvent(message_id=message, role="assistant"),)
        block = self._blocks.get(chunk.index) if hasattr(chunk, "index") else None
        if block is None:
            return ()
        kind, block_id = block
        if isinstance(chunk, TextDelta):
            return (TextMessageContentEvent(message_id=block_id, delta=chunk.text),)
        if isinstance(chunk, ReasoningDelta):
            delta = chunk.text
            if chunk.part is not None and chunk.part != self._parts.get(chunk.index, 0):
                self._parts[chunk.index] = chunk.part
                delta = SUMMARY_JOINER + delta
            if not delta:
                return ()
            return (ReasoningMessageContentEvent(message_id=block_id, delta=delta),)
        if isinstance(chunk, ToolCallDelta):
            return (ToolCallArgsEvent(tool_call_id=block_id, delta=chunk.arguments),)
        if isinstance(chunk, BlockEnd):
            del self._blocks[chunk.index]
            if kind == "tool_call":
                return (ToolCallEndEvent(tool_call_id=block_id),)
            if kind == "reasoning":
                return (
                    ReasoningMessageEndEvent(message_id=block_id),
                    ReasoningEndEvent(message_id=block_id),
                )
            return (TextMessageEndEvent(message_id=block_id),)
        return ()

    def _end(self, data: TurnEnd) -> BaseEvent:
        kind = data.reason.kind
        if kind == "error":
            return RunErrorEvent(
                message=data.reason.message or "the turn failed", code=data.reason.code
            )
        outcome = RunFinishedCancelledOutcome() if kind in _ABORTED else RunFinishedSuccessOutcome()
        return RunFinishedEvent(
            thread_id=self.session_id,
            run_id=str(data.turn),
            outcome=outcome,
            result={"end": kind},
        )


# ------------------------------------------------------------------------- the request


def run_input(raw: bytes) -> RunAgentInput:
    """The `RunAgentInput` of a request body; 422 VALIDATION_FAILED off its schema."""
    try:
        return RunAgentInput.model_validate_json(raw or b"{}")
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise InvalidRequestBody(f"$.{where}: {first['msg']}"[:300]) from None


def input_content(run: RunAgentInput) -> Content:
    """The new user message of a run: the text of its last message, which must be the
    user's (the server keeps the conversation; `messages` is the client's copy)."""
    last = run.messages[-1] if run.messages else None
    if not isinstance(last, UserMessage):
        raise InvalidRequestBody("$.messages: the last message must be the user's")
    value = last.content
    if isinstance(value, str):
        return (Text(value),)
    content: list[Block] = []
    for index, part in enumerate(value):
        if not isinstance(part, TextPart):
            raise InvalidRequestBody(
                f"$.messages[-1].content[{index}]: only text parts are taken",
                ErrorCode.INVALID_CONTENT,
            )
        content.append(Text(part.text))
    return tuple(content)


# ------------------------------------------------------------------------- the history


def messages_from_agui(messages: Iterable[Mapping[str, Any]]) -> tuple[Message, ...]:
    """The log's messages (`Session.derive_messages()`) read back from the messages an AG-UI
    client built (`agent.messages`, as JSON): a reasoning message joins the assistant
    message after it, a tool message is a user message holding one tool result."""
    out: list[Message] = []
    reasoning: list[Block] = []
    for message in messages:
        role = message.get("role")
        if role == "user":
            value = message["content"]
            texts = (value,) if isinstance(value, str) else [part["text"] for part in value]
            out.append(Message("user", tuple(Text(text) for text in texts)))
        elif role == "reasoning":
            reasoning.append(Reasoning(message["content"]))
        elif role == "assistant":
            blocks: list[Block] = [*reasoning]
            reasoning = []
            if message.get("content"):
                blocks.append(Text(message["content"]))
            for call in message.get("toolCalls") or ():
                function = call["function"]
                blocks.append(ToolCall(call["id"], function["name"], function["arguments"]))
            out.append(Message("assistant", tuple(blocks)))
        elif role == "tool":
            result = ToolResult(message["toolCallId"], (Text(message["content"]),))
            out.append(Message("user", (result,)))
    return tuple(out)
