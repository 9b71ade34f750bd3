"""Crash-repair closers (docs/spec/session-log.md §10.3): a pure, deterministic function of the
log."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from strategies import LogBuilder, build_log, programs

from actorloop.runtime.log.repair import closers
from actorloop.runtime.log.session import Session
from actorloop.runtime.model.events import (
    APPEND,
    AssistantMessage,
    StepEnd,
    ToolError,
    ToolResultEvent,
    TurnEnd,
    TurnEndReason,
)
from actorloop.runtime.model.messages import Text, ToolCall, ToolResult


def crashed_mid_tools() -> tuple[LogBuilder, dict[str, int]]:
    """Turn 1 closed; turn 2 open in step 2 with calls c1 (never logged), c2 (logged,
    running) and c3 (logged, answered)."""
    b = LogBuilder()
    b.turn_start()
    b.user("first")
    b.turn_end()
    b.turn_start()
    b.user("go")
    b.step_start()
    b.assistant("thinking")
    b.step_end()
    b.step_start()
    chunk = b.chunk("x")
    b.assistant("tools", [("c1", "alpha"), ("c2", "beta"), ("c3", "gamma")], [chunk.seq])
    c2 = b.tool_call("c2", "beta")
    c3 = b.tool_call("c3", "gamma")
    b.tool_result("c3", "done", c3.seq)
    return b, {"c2": c2.seq, "c3": c3.seq}


def test_open_step_gets_results_then_step_end_then_turn_end() -> None:
    b, seqs = crashed_mid_tools()
    log = tuple(b.events)
    out = closers(log)
    assert [e.type for e in out] == ["tool/result", "tool/result", "step/end", "turn/end"]
    assert [e.seq for e in out] == list(range(len(log), len(log) + 4))  # consecutive

    not_started, unknown = out[0], out[1]
    assert isinstance(not_started.data, ToolResultEvent)
    assert not_started.data.call_id == "c1"
    assert not_started.data.error == ToolError("alpha", "TOOL_NOT_STARTED")
    assert not_started.data.is_error is True
    assert not_started.data.turn == 2 and not_started.data.step == 2
    assert not_started.surface_op == APPEND

    assert isinstance(unknown.data, ToolResultEvent)
    assert unknown.data.call_id == "c2"
    assert unknown.data.error == ToolError("beta", "TOOL_OUTCOME_UNKNOWN")
    assert unknown.source_event_seqs == (seqs["c2"],)  # provenance = the call's seq
    assert "idempotent" in unknown.data.content[0].text
    assert unknown.data.is_error is True

    assert out[2].data == StepEnd(2, 2)
    assert out[3].data == TurnEnd(2, TurnEndReason("interrupted"))


def test_repaired_log_is_valid_closed_and_derives_the_error_results() -> None:
    b, _ = crashed_mid_tools()
    repaired = Session.from_events("s", (*b.events, *closers(b.events)))
    assert repaired.open_turn is None and repaired.open_step is None
    assert closers(repaired.events) == ()
    tail = repaired.derive_messages()[-4:]
    assert tail[0].role == "assistant"
    results = [m.content[0] for m in tail[1:]]
    assert all(isinstance(r, ToolResult) for r in results)
    assert [(r.tool_call_id, r.is_error) for r in results] == [  # type: ignore[union-attr]
        ("c3", False),
        ("c1", True),
        ("c2", True),
    ]
    assert all(m.role == "user" for m in tail[1:])


def test_S3_open_turn_with_a_requested_call_that_was_never_logged() -> None:
    b = LogBuilder()
    b.turn_start()
    b.user("do it")
    b.step_start()
    b.assistant("", [("call-1", "danger")])
    out = closers(b.events)
    n = len(b.events)
    assert [(e.seq, e.type) for e in out] == [
        (n, "tool/result"),
        (n + 1, "step/end"),
        (n + 2, "turn/end"),
    ]
    result = out[0].data
    assert isinstance(result, ToolResultEvent)
    assert result.error is not None and result.error.code == "TOOL_NOT_STARTED"
    assert out[0].source_event_seqs is None
    assert out[2].data == TurnEnd(1, TurnEndReason("interrupted"))
    Session.from_events("s", (*b.events, *out))


def test_open_step_without_pending_calls_gets_step_end_and_turn_end() -> None:
    b = LogBuilder()
    b.turn_start()
    b.user("u")
    b.step_start()
    b.chunk("partial")  # crashed mid-stream: no assistant/message, nothing requested
    assert [e.type for e in closers(b.events)] == ["step/end", "turn/end"]


def test_open_turn_between_steps_gets_only_turn_end() -> None:
    b = LogBuilder()
    b.turn_start()
    b.user("u")
    b.step_start()
    b.assistant("x", [("c1", "echo")])
    call = b.tool_call("c1")
    b.tool_result("c1", "ok", call.seq)
    b.step_end()
    out = closers(b.events)
    assert [e.type for e in out] == ["turn/end"]
    assert out[0].seq == len(b.events)


def test_answered_calls_are_not_closed_again() -> None:
    b = LogBuilder()
    b.turn_start()
    b.step_start()
    b.assistant("x", [("c1", "echo")])
    call = b.tool_call("c1")
    b.tool_result("c1", "ok", call.seq)
    assert [e.type for e in closers(b.events)] == ["step/end", "turn/end"]


def test_a_logged_call_without_a_requesting_message_is_closed_as_unknown() -> None:
    b = LogBuilder()
    b.turn_start()
    b.step_start()
    call = b.tool_call("lone", "echo")
    out = closers(b.events)
    assert out[0].data.error == ToolError("echo", "TOOL_OUTCOME_UNKNOWN")  # type: ignore[union-attr]
    assert out[0].source_event_seqs == (call.seq,)


def test_closed_and_empty_logs_need_nothing() -> None:
    assert closers(()) == ()
    b = LogBuilder()
    b.turn_start()
    b.user("u")
    b.turn_end()
    assert closers(b.events) == ()
    assert closers(tuple(b.events)) == ()


def test_closers_are_pure_and_deterministic() -> None:
    b, _ = crashed_mid_tools()
    log = tuple(b.events)
    first = closers(log)
    second = closers(list(log))
    assert first == second
    assert tuple(b.events) == log  # the input is untouched
    assert all(e.time == log[-1].time for e in first)  # no clock: time of the last event


@pytest.mark.parametrize("requested", [(), ("a",), ("a", "b")])
def test_every_requested_call_gets_exactly_one_result(requested: tuple[str, ...]) -> None:
    b = LogBuilder()
    b.turn_start()
    b.step_start()
    b.assistant("x", [(c, "echo") for c in requested])
    out = closers(b.events)
    ids = [e.data.call_id for e in out if isinstance(e.data, ToolResultEvent)]
    assert ids == list(requested)


def test_the_requested_calls_are_read_from_the_assistant_message_content() -> None:
    b = LogBuilder()
    b.turn_start()
    b.step_start()
    b.add(
        "assistant/message",
        AssistantMessage(1, 1, (Text("t"), ToolCall("z", "zeta", "{}")), "p", "m"),
        APPEND,
    )
    out = closers(b.events)
    assert out[0].data.call_id == "z"  # type: ignore[union-attr]
    assert out[0].data.error == ToolError("zeta", "TOOL_NOT_STARTED")  # type: ignore[union-attr]


@settings(max_examples=60, deadline=None)
@given(programs(open_last=None))
def test_repair_always_yields_a_valid_closed_log(program: list[object]) -> None:
    log = build_log(program)
    out = closers(log)
    assert closers(log) == out
    repaired = Session.from_events("s", (*log, *out))  # validates every rule
    assert repaired.open_turn is None
    assert closers(repaired.events) == ()
    assert [e.seq for e in out] == list(range(len(log), len(log) + len(out)))
    if out:
        assert out[-1].data == TurnEnd(repaired.last_turn, TurnEndReason("interrupted"))
