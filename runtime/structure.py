"""Turn/step structure rules (docs/spec/session-log.md §4) as an incremental state machine.

`check` raises without changing anything; `advance` commits an already-checked event.
"""

from __future__ import annotations

from attrs import define, field

from actorloop.runtime.errors import ErrorCode, SessionValidationError
from actorloop.runtime.events import (
    AssistantChunk,
    AssistantMessage,
    CompactionEnd,
    CompactionStart,
    IgnorableData,
    Replace,
    SessionEvent,
    SteeringMessage,
    StepEnd,
    StepStart,
    ToolCallEvent,
    ToolResultEvent,
    TurnEnd,
    TurnStart,
)

SYNTHETIC_RESULT_CODES = frozenset({ErrorCode.TOOL_NOT_STARTED})
"""Results that may stand without a logged `tool/call` (written only by crash repair)."""


@define
class TurnStructure:
    last_turn: int = 0
    open_turn: int | None = None
    last_step: int = 0
    open_step: int | None = None
    calls_in_step: dict[str, int] = field(factory=dict)
    results_in_step: set[str] = field(factory=set)

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
        data = event.data
        if isinstance(data, IgnorableData):
            return
        if isinstance(data, TurnStart):
            if self.open_turn is not None:
                raise self._fail(event, f"turn {self.open_turn} is still open (no nesting)")
            if data.turn != self.last_turn + 1:
                raise self._fail(event, f"turn {data.turn} does not follow turn {self.last_turn}")
        elif isinstance(data, TurnEnd):
            self._need_turn(event, data.turn)
            if self.open_step is not None:
                raise self._fail(event, f"step {self.open_step} is still open")
        elif isinstance(data, StepStart):
            self._need_turn(event, data.turn)
            if self.open_step is not None:
                raise self._fail(event, f"step {self.open_step} is still open (no nesting)")
            if data.step != self.last_step + 1:
                raise self._fail(event, f"step {data.step} does not follow step {self.last_step}")
        elif isinstance(data, (StepEnd, AssistantChunk, AssistantMessage)):
            self._need_step(event, data.turn, data.step)
        elif isinstance(data, ToolCallEvent):
            self._need_step(event, data.turn, data.step)
            if data.call_id in self.calls_in_step:
                raise self._fail(event, f"duplicate tool call id {data.call_id!r} in the step")
        elif isinstance(data, ToolResultEvent):
            if isinstance(event.surface_op, Replace):
                self._need_turn(event)  # a pruning rewrite: checked against its node instead
                return
            self._need_step(event, data.turn, data.step)
            if data.call_id in self.results_in_step:
                raise self._fail(event, f"tool call {data.call_id!r} already has a result")
            synthetic = data.error is not None and data.error.code in SYNTHETIC_RESULT_CODES
            if data.call_id not in self.calls_in_step and not synthetic:
                raise self._fail(
                    event, f"no earlier tool/call with id {data.call_id!r} in this step"
                )
        elif isinstance(data, (SteeringMessage, CompactionStart, CompactionEnd)):
            self._need_turn(event, data.turn)
        else:
            self._need_turn(event)

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
            self.results_in_step.add(data.call_id)
