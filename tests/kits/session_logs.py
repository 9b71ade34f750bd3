"""Builders of valid session logs through the Session API, shared by the store tests, the
crash child process and the store benchmark."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

from actorloop.runtime.log.session import Session
from actorloop.runtime.model.chunks import TextDelta
from actorloop.runtime.model.events import (
    APPEND,
    AssistantChunk,
    AssistantMessage,
    SessionEvent,
    StepEnd,
    StepStart,
    ToolCallEvent,
    ToolResultEvent,
    Trigger,
    TurnEnd,
    TurnEndReason,
    TurnStart,
    UserMessage,
)
from actorloop.runtime.model.messages import USER, Text, ToolCall

FIXED_TIME = 1_700_000_000_000


def begin_turn(session: Session, text: str) -> int:
    turn = session.last_turn + 1
    session.append("turn/start", TurnStart(turn, Trigger("message", USER)), time=FIXED_TIME)
    session.append(
        "user/message", UserMessage((Text(text),), USER), surface_op=APPEND, time=FIXED_TIME
    )
    return turn


def model_step(
    session: Session, turn: int, step: int, text: str, calls: tuple[ToolCall, ...] = ()
) -> None:
    """`step/start`, one chunk, and the `assistant/message` (the step stays open)."""
    session.append("step/start", StepStart(turn, step), time=FIXED_TIME)
    chunk = session.append(
        "assistant/chunk", AssistantChunk(turn, step, TextDelta(0, text)), time=FIXED_TIME
    )
    session.append(
        "assistant/message",
        AssistantMessage(turn, step, (Text(text), *calls), "scripted", "m"),
        surface_op=APPEND,
        source_event_seqs=(chunk.seq,),
        time=FIXED_TIME,
    )


def tool_call(session: Session, turn: int, step: int, call: ToolCall) -> SessionEvent:
    return session.append(
        "tool/call",
        ToolCallEvent(turn, step, call.id, call.name, call.arguments),
        time=FIXED_TIME,
    )


def tool_result(session: Session, turn: int, step: int, call: SessionEvent, text: str) -> None:
    assert isinstance(call.data, ToolCallEvent)
    session.append(
        "tool/result",
        ToolResultEvent(turn, step, call.data.call_id, (Text(text),)),
        surface_op=APPEND,
        source_event_seqs=(call.seq,),
        time=FIXED_TIME,
    )


def end_step(session: Session, turn: int, step: int) -> None:
    session.append("step/end", StepEnd(turn, step), time=FIXED_TIME)


def end_turn(session: Session, turn: int) -> None:
    session.append("turn/end", TurnEnd(turn, TurnEndReason("completed")), time=FIXED_TIME)


def turn_script(session: Session, rng: random.Random, text: str) -> Iterator[str]:
    """Append one complete turn, yielding at each flush barrier of the loop: before each
    model call, before each tool body, and after `turn/end`."""
    turn = begin_turn(session, text)
    step = 0
    for _ in range(rng.randint(0, 2)):
        step += 1
        call = ToolCall(f"call-{turn}-{step}", "echo", json.dumps({"x": rng.randint(0, 99)}))
        session.append("step/start", StepStart(turn, step), time=FIXED_TIME)
        yield "model"
        chunk = session.append(
            "assistant/chunk", AssistantChunk(turn, step, TextDelta(0, "tool")), time=FIXED_TIME
        )
        session.append(
            "assistant/message",
            AssistantMessage(turn, step, (Text("tool"), call), "scripted", "m"),
            surface_op=APPEND,
            source_event_seqs=(chunk.seq,),
            time=FIXED_TIME,
        )
        logged = tool_call(session, turn, step, call)
        yield "tool"
        tool_result(session, turn, step, logged, f"echo {call.arguments}")
        end_step(session, turn, step)
    step += 1
    session.append("step/start", StepStart(turn, step), time=FIXED_TIME)
    yield "model"
    chunk = session.append(
        "assistant/chunk", AssistantChunk(turn, step, TextDelta(0, "done")), time=FIXED_TIME
    )
    session.append(
        "assistant/message",
        AssistantMessage(turn, step, (Text("done " * rng.randint(1, 20)),), "scripted", "m"),
        surface_op=APPEND,
        source_event_seqs=(chunk.seq,),
        time=FIXED_TIME,
    )
    end_step(session, turn, step)
    end_turn(session, turn)
    yield "turn-end"


def tool_turn(session: Session, text: str) -> None:
    """A closed turn with one tool round trip and a final answer (13 events)."""
    turn = begin_turn(session, text)
    call = ToolCall(f"c{turn}", "echo", json.dumps({"text": text}))
    model_step(session, turn, 1, "calling", (call,))
    logged = tool_call(session, turn, 1, call)
    tool_result(session, turn, 1, logged, f"echo: {text}")
    end_step(session, turn, 1)
    model_step(session, turn, 2, f"answer to {text}")
    end_step(session, turn, 2)
    end_turn(session, turn)


def closed_log(session_id: str, turns: int) -> Session:
    session = Session.create(session_id)
    for index in range(turns):
        tool_turn(session, f"question {index}")
    return session
