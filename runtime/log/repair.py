"""Crash-repair closers (docs/spec/session-log.md §10.3): a pure, deterministic function of a
log that closes an open last turn."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import ErrorCode
from ..model.events import (
    APPEND,
    AssistantMessage,
    EventData,
    SessionEvent,
    StepEnd,
    StepStart,
    ToolCallEvent,
    ToolError,
    ToolResultEvent,
    TurnEnd,
    TurnEndReason,
    TurnStart,
)
from ..model.messages import Text, ToolCall

OUTCOME_UNKNOWN_TEXT = (
    "The session was interrupted while this tool call was running: its outcome is unknown. "
    "Retry only if the operation is idempotent."
)
NOT_STARTED_TEXT = "The session was interrupted before this tool call started; it never ran."


def closers(events: Sequence[SessionEvent], first_seq: int = 0) -> tuple[SessionEvent, ...]:
    """The events that close an open last turn (empty if the last turn is closed).

    `events` may be only the log's last events, from seq `first_seq` on, when the turn
    is known to be closed before them (a load from a fold snapshot): an open turn then
    starts among them."""
    turn_start_index = None
    for index in range(len(events) - 1, -1, -1):
        data = events[index].data
        if isinstance(data, TurnEnd):
            return ()
        if isinstance(data, TurnStart):
            turn_start_index = index
            break
    if turn_start_index is None:
        return ()
    turn = events[turn_start_index].data.turn  # type: ignore[union-attr]
    open_step: int | None = None
    requested: list[ToolCall] = []
    logged: dict[str, SessionEvent] = {}
    answered: set[str] = set()
    for event in events[turn_start_index:]:
        data = event.data
        if isinstance(data, StepStart):
            open_step, requested, logged, answered = data.step, [], {}, set()
        elif isinstance(data, StepEnd):
            open_step = None
        elif isinstance(data, AssistantMessage):
            requested = [block for block in data.content if isinstance(block, ToolCall)]
        elif isinstance(data, ToolCallEvent):
            logged[data.call_id] = event
        elif isinstance(data, ToolResultEvent) and event.surface_op == APPEND:
            answered.add(data.call_id)

    seq = first_seq + len(events)
    stamp = events[-1].time
    out: list[SessionEvent] = []

    def emit(event_type: str, data: EventData, **extra: object) -> None:
        nonlocal seq
        out.append(SessionEvent(event_type, seq, stamp, data, **extra))  # type: ignore[arg-type]
        seq += 1

    if open_step is not None:
        names = {call.id: call.name for call in requested}
        names.update({call_id: e.data.name for call_id, e in logged.items()})  # type: ignore[union-attr]
        pending = [call.id for call in requested] + list(logged)
        seen: set[str] = set()
        for call_id in pending:
            if call_id in seen or call_id in answered:
                continue
            seen.add(call_id)
            call_event = logged.get(call_id)
            code = (
                ErrorCode.TOOL_OUTCOME_UNKNOWN
                if call_event is not None
                else ErrorCode.TOOL_NOT_STARTED
            )
            text = OUTCOME_UNKNOWN_TEXT if call_event is not None else NOT_STARTED_TEXT
            emit(
                "tool/result",
                ToolResultEvent(
                    turn, open_step, call_id, (Text(text),), True, ToolError(names[call_id], code)
                ),
                surface_op=APPEND,
                source_event_seqs=None if call_event is None else (call_event.seq,),
            )
        emit("step/end", StepEnd(turn, open_step))
    emit("turn/end", TurnEnd(turn, TurnEndReason("interrupted")))
    return tuple(out)
