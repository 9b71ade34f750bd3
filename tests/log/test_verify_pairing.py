"""Offline verification pairs each step's tool calls: a `tool/call` must be one the step's
assistant message requested (same id, same tool), and by `step/end` every requested call
has its result — so a listener that rewrote a call's id cannot leave the real call
unanswered in a log that still verifies."""

from __future__ import annotations

import pytest
from session_logs import (
    FIXED_TIME,
    begin_turn,
    end_step,
    end_turn,
    model_step,
    tool_call,
    tool_result,
)

from actorloop.runtime.errors import VerificationFailed
from actorloop.runtime.log.session import Session
from actorloop.runtime.log.verify import verify_log
from actorloop.runtime.model.chunks import (
    BlockStart,
    Finish,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
)
from actorloop.runtime.model.events import APPEND, AssistantChunk, AssistantMessage, StepStart
from actorloop.runtime.model.messages import Text, ToolCall


def step_with_calls(*calls: ToolCall) -> tuple[Session, int]:
    """A turn whose step 1 asked for `calls` (its chunks and its message agree)."""
    session = Session.create("v")
    turn = begin_turn(session, "go")
    session.append("step/start", StepStart(turn, 1), time=FIXED_TIME)
    chunks: list[StreamChunk] = [BlockStart(0, "text"), TextDelta(0, "calling")]
    for index, call in enumerate(calls, start=1):
        chunks += [BlockStart(index, "tool_call", call.id, call.name)]
        chunks += [ToolCallDelta(index, call.arguments)]
    chunks.append(Finish("tool-calls"))
    seqs = tuple(
        session.append("assistant/chunk", AssistantChunk(turn, 1, chunk), time=FIXED_TIME).seq
        for chunk in chunks
    )
    session.append(
        "assistant/message",
        AssistantMessage(turn, 1, (Text("calling"), *calls), "scripted", "m"),
        surface_op=APPEND,
        source_event_seqs=seqs,
        time=FIXED_TIME,
    )
    return session, turn


def test_a_log_whose_calls_are_all_answered_verifies() -> None:
    session, turn = step_with_calls(ToolCall("c1", "echo", "{}"), ToolCall("c2", "echo", "{}"))
    for call_id in ("c1", "c2"):
        logged = tool_call(session, turn, 1, ToolCall(call_id, "echo", "{}"))
        tool_result(session, turn, 1, logged, "ok")
    end_step(session, turn, 1)
    end_turn(session, turn)
    report = verify_log(session.meta, session.events)
    assert report.turns == 1


def test_a_call_logged_under_another_id_fails_verification() -> None:
    session, turn = step_with_calls(ToolCall("c1", "echo", "{}"))
    logged = tool_call(session, turn, 1, ToolCall("other", "echo", "{}"))
    tool_result(session, turn, 1, logged, "ok")
    end_step(session, turn, 1)
    with pytest.raises(VerificationFailed, match="'other' names no call") as info:
        verify_log(session.meta, session.events)
    assert info.value.seq == logged.seq


def test_a_call_logged_under_another_tool_fails_verification() -> None:
    session, turn = step_with_calls(ToolCall("c1", "echo", "{}"))
    logged = tool_call(session, turn, 1, ToolCall("c1", "delete_everything", "{}"))
    with pytest.raises(VerificationFailed, match="requested 'echo'") as info:
        verify_log(session.meta, session.events)
    assert info.value.seq == logged.seq


def test_a_step_ending_with_a_requested_call_unanswered_fails_verification() -> None:
    session, turn = step_with_calls(ToolCall("c1", "echo", "{}"), ToolCall("c2", "echo", "{}"))
    logged = tool_call(session, turn, 1, ToolCall("c1", "echo", "{}"))
    tool_result(session, turn, 1, logged, "ok")
    end_step(session, turn, 1)
    with pytest.raises(VerificationFailed, match=r"unanswered: \['c2'\]") as info:
        verify_log(session.meta, session.events)
    assert info.value.seq == len(session) - 1


def test_chunks_that_break_the_stream_grammar_fail_verification_not_crash_it() -> None:
    session = Session.create("v")
    turn = begin_turn(session, "go")
    model_step(session, turn, 1, "a delta without its block start")
    with pytest.raises(VerificationFailed, match="provenance chunk seq 3: TextDelta for block 0"):
        verify_log(session.meta, session.events)
