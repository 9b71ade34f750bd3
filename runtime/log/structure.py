"""Turn/step structure rules (docs/spec/session-log.md §4) as an incremental state machine,
and the content rules checked at the same point (no tool blocks in user or context content,
no duplicate tool-call id in one assistant message).

`check` raises without changing anything; `advance` commits an already-checked event.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from attrs import define, field

from ...codecs.jsonvalue import check_text
from ..errors import ContentError, ErrorCode, SessionValidationError
from ..model.events import (
    AssistantChunk,
    AssistantMessage,
    CompactionEnd,
    CompactionStart,
    ContextMessage,
    IgnorableData,
    PromptBlocked,
    Replace,
    SessionEvent,
    SteeringMessage,
    StepEnd,
    StepStart,
    ToolCallEvent,
    ToolResultEvent,
    TurnEnd,
    TurnStart,
    UserMessage,
)
from ..model.messages import Content, Reasoning, Text, ToolCall, ToolResult

SYNTHETIC_RESULT_CODES = frozenset({ErrorCode.TOOL_NOT_STARTED})
"""Results that may stand without a logged `tool/call` (written only by crash repair)."""

_USER_SIDE = (UserMessage, PromptBlocked, ContextMessage, SteeringMessage)
"""Content a user or a plugin supplies: text and reasoning only. A tool call or result
there would become an orphan result or a user-role call in every later request."""


def check_content(event: SessionEvent) -> None:
    """The content rules of an event (raises SessionValidationError with a `code`)."""
    data = event.data
    if isinstance(data, _USER_SIDE):
        _no_tool_blocks(event, data.content)
    elif isinstance(data, AssistantMessage):
        seen: set[str] = set()
        for index, block in enumerate(data.content):
            if isinstance(block, ToolResult):
                raise SessionValidationError(
                    event.seq,
                    f"{event.type}: content block {index} is a ToolResult; a model's "
                    "message cannot carry a tool result",
                    ErrorCode.TOOL_BLOCK_IN_USER_CONTENT,
                )
            if isinstance(block, ToolCall):
                if block.id in seen:
                    raise SessionValidationError(
                        event.seq,
                        f"{event.type}: tool call id {block.id!r} appears twice in one "
                        "assistant message",
                        ErrorCode.DUPLICATE_TOOL_CALL_ID,
                    )
                seen.add(block.id)


def check_user_content(content: Content) -> Content:
    """`content` if a user or plugin may send it (send, steer, inject, contexts): Text and
    Reasoning blocks only (ContentError otherwise), every string encodable (JsonValueError
    naming the block otherwise). The same rules the append enforces, checked up front."""
    for index, block in enumerate(content):
        if isinstance(block, (ToolCall, ToolResult)):
            raise ContentError(
                f"content block {index} is a {type(block).__name__}; user and context content "
                "may hold only Text and Reasoning blocks"
            )
        if isinstance(block, (Text, Reasoning)):
            check_text(block.text, f"content[{index}].text")
            if isinstance(block, Reasoning) and block.signature is not None:
                check_text(block.signature, f"content[{index}].signature")
    return content


def _no_tool_blocks(event: SessionEvent, content: Content) -> None:
    for index, block in enumerate(content):
        if isinstance(block, (ToolCall, ToolResult)):
            raise SessionValidationError(
                event.seq,
                f"{event.type}: content block {index} is a {type(block).__name__}; user and "
                "context content may hold only Text and Reasoning blocks",
                ErrorCode.TOOL_BLOCK_IN_USER_CONTENT,
            )


@define
class TurnStructure:
    last_turn: int = 0
    open_turn: int | None = None
    last_step: int = 0
    open_step: int | None = None
    calls_in_step: dict[str, int] = field(factory=dict)
    results_in_step: dict[str, None] = field(factory=dict)
    """The call ids with a result in the open step, a dict used as a set: an empty dict is
    a quarter of an empty set's size and, holding only strings, never tracked by the
    collector (every idle agent's session keeps one)."""

    def _fail(self, event: SessionEvent, rule: str) -> SessionValidationError:
        return SessionValidationError(event.seq, f"{event.type}: {rule}")

    def _need_turn(self, event: SessionEvent, turn: int | None = None) -> None:
        if self.open_turn is None:
            raise self._fail(event, "lies outside any open turn")
        if turn is not None and turn != self.open_turn:
            raise self._fail(event, f"names turn {turn} but the open turn is {self.open_turn}")

    def _need_step(self, event: SessionEvent, turn: int, step: int) -> None:
        self._need_turn(event, turn)
        if self.open_step is None:
            raise self._fail(event, f"names step {step} but no step is open")
        if step != self.open_step:
            raise self._fail(event, f"names step {step} but the open step is {self.open_step}")

    def check(self, event: SessionEvent) -> None:
        """Raise SessionValidationError if `event` (its envelope already checked, so its
        data is exactly its type's class) breaks a structure or content rule."""
        rule_of(type(event.data))(self, event, event.data)

    def _turn_start(self, event: SessionEvent, data: TurnStart) -> None:
        if self.open_turn is not None:
            raise self._fail(event, f"turn {self.open_turn} is still open (no nesting)")
        if data.turn != self.last_turn + 1:
            raise self._fail(event, f"turn {data.turn} does not follow turn {self.last_turn}")

    def _turn_end(self, event: SessionEvent, data: TurnEnd) -> None:
        self._need_turn(event, data.turn)
        if self.open_step is not None:
            raise self._fail(event, f"step {self.open_step} is still open")

    def _step_start(self, event: SessionEvent, data: StepStart) -> None:
        self._need_turn(event, data.turn)
        if self.open_step is not None:
            raise self._fail(event, f"step {self.open_step} is still open (no nesting)")
        if data.step != self.last_step + 1:
            raise self._fail(event, f"step {data.step} does not follow step {self.last_step}")

    def _in_step(self, event: SessionEvent, data: StepEnd | AssistantChunk) -> None:
        # Every chunk of a stream comes here: the usual case passes without another call.
        if self.open_step is None or data.step != self.open_step or data.turn != self.open_turn:
            self._need_step(event, data.turn, data.step)

    def _assistant(self, event: SessionEvent, data: AssistantMessage) -> None:
        check_content(event)
        self._need_step(event, data.turn, data.step)

    def _tool_call(self, event: SessionEvent, data: ToolCallEvent) -> None:
        self._need_step(event, data.turn, data.step)
        if data.call_id in self.calls_in_step:
            raise self._fail(event, f"duplicate tool call id {data.call_id!r} in the step")

    def _tool_result(self, event: SessionEvent, data: ToolResultEvent) -> None:
        if isinstance(event.surface_op, Replace):
            self._need_turn(event)  # a pruning rewrite: checked against its node instead
            return
        self._need_step(event, data.turn, data.step)
        if data.call_id in self.results_in_step:
            raise self._fail(event, f"tool call {data.call_id!r} already has a result")
        synthetic = data.error is not None and data.error.code in SYNTHETIC_RESULT_CODES
        if data.call_id not in self.calls_in_step and not synthetic:
            raise self._fail(event, f"no earlier tool/call with id {data.call_id!r} in this step")

    def _user_side(self, event: SessionEvent, data: Any) -> None:
        check_content(event)
        if isinstance(data, SteeringMessage):
            self._need_turn(event, data.turn)
        else:
            self._need_turn(event)

    def _in_turn(self, event: SessionEvent, data: CompactionStart | CompactionEnd) -> None:
        self._need_turn(event, data.turn)

    def _anywhere_in_turn(self, event: SessionEvent, data: object) -> None:
        self._need_turn(event)

    def _ignorable(self, event: SessionEvent, data: IgnorableData) -> None:
        """An ignorable event takes no part in the structure."""

    def advance(self, event: SessionEvent) -> None:
        data = event.data
        if isinstance(data, TurnStart):
            self.last_turn = self.open_turn = data.turn
            self.last_step = 0
        elif isinstance(data, TurnEnd):
            self.open_turn = None
        elif isinstance(data, StepStart):
            self.last_step = self.open_step = data.step
            self.calls_in_step.clear()
            self.results_in_step.clear()
        elif isinstance(data, StepEnd):
            self.open_step = None
        elif isinstance(data, ToolCallEvent):
            self.calls_in_step[data.call_id] = event.seq
        elif isinstance(data, ToolResultEvent) and not isinstance(event.surface_op, Replace):
            self.results_in_step[data.call_id] = None


Rule = Callable[[TurnStructure, SessionEvent, Any], None]
"""A structure rule: `rule(structure, event, event.data)` raises if the event breaks it."""
_RULES: dict[type, Rule] = {
    TurnStart: TurnStructure._turn_start,
    TurnEnd: TurnStructure._turn_end,
    StepStart: TurnStructure._step_start,
    StepEnd: TurnStructure._in_step,
    AssistantChunk: TurnStructure._in_step,
    AssistantMessage: TurnStructure._assistant,
    ToolCallEvent: TurnStructure._tool_call,
    ToolResultEvent: TurnStructure._tool_result,
    UserMessage: TurnStructure._user_side,
    PromptBlocked: TurnStructure._user_side,
    ContextMessage: TurnStructure._user_side,
    SteeringMessage: TurnStructure._user_side,
    CompactionStart: TurnStructure._in_turn,
    CompactionEnd: TurnStructure._in_turn,
    IgnorableData: TurnStructure._ignorable,
}
"""The rule of each event data class; any other known class (headers, compaction summary
and prune) needs an open turn only."""


def rule_of(data_class: type) -> Rule:
    """The rule `TurnStructure.check` applies to an event whose data is exactly of
    `data_class` (called as `rule(structure, event, data)`): for a replay that dispatches by
    class itself."""
    return _RULES.get(data_class, TurnStructure._anywhere_in_turn)


ADVANCING: frozenset[type] = frozenset(
    {TurnStart, TurnEnd, StepStart, StepEnd, ToolCallEvent, ToolResultEvent}
)
"""The data classes whose events `TurnStructure.advance` changes the state for; an event of
any other exact class (a chunk, a message, a header) leaves it as it is."""
