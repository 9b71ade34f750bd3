"""Session log rules: envelope, surface_op, provenance, turn/step structure, transactional
appends, observers, detaching copies, D1/D2 (docs/spec/session-log.md §2, §4, §5, §9)."""

from __future__ import annotations

import logging
import math
from typing import Any

import attrs
import pytest
from strategies import HEADER, LogBuilder, build_log

from actorloop.codecs.jsonvalue import JsonValueError, freeze_object
from actorloop.runtime.errors import ContentError, ErrorCode, SessionValidationError
from actorloop.runtime.log.session import Session
from actorloop.runtime.log.structure import check_user_content
from actorloop.runtime.model.chunks import TextDelta
from actorloop.runtime.model.events import (
    APPEND,
    AssistantChunk,
    AssistantMessage,
    ContextMessage,
    HeaderDelta,
    IgnorableData,
    PromptBlocked,
    Replace,
    RequestHeaderEvent,
    SessionEvent,
    SteeringMessage,
    StepEnd,
    StepStart,
    ToolCallEvent,
    ToolError,
    ToolResultEvent,
    Trigger,
    TurnEnd,
    TurnEndReason,
    TurnStart,
    UserMessage,
)
from actorloop.runtime.model.header import LlmCallConfig, ToolsDelta
from actorloop.runtime.model.messages import (
    USER,
    Message,
    Reasoning,
    Source,
    Text,
    ToolCall,
    ToolResult,
)

T0 = 1_700_000_000_000


def turn_start(turn: int = 1) -> TurnStart:
    return TurnStart(turn, Trigger("message", USER))


def user(text: str = "hi") -> UserMessage:
    return UserMessage((Text(text),), USER)


def open_turn(session: Session | None = None) -> Session:
    session = session if session is not None else Session.create("s")
    session.append("turn/start", turn_start(session.last_turn + 1), time=T0)
    return session


def open_step(session: Session | None = None) -> Session:
    session = open_turn(session)
    assert session.open_turn is not None
    session.append("step/start", StepStart(session.open_turn, 1), time=T0)
    return session


def state_of(session: Session) -> tuple[Any, ...]:
    return (
        session.events,
        session.derive_messages(),
        session.header(),
        session.surface,
        session.replace_generation,
        session.open_turn,
        session.open_step,
        session.last_turn,
        len(session),
    )


def assert_rejected(
    session: Session, fragment: str, *args: Any, seq: int | None = None, **kwargs: Any
) -> SessionValidationError:
    """Append must raise naming the seq and the rule; nothing may change."""
    before = state_of(session)
    with pytest.raises(SessionValidationError, match=fragment) as info:
        if len(args) == 1 and isinstance(args[0], SessionEvent):
            session.append_event(args[0])
        else:
            session.append(*args, **kwargs)
    expected_seq = len(session) if seq is None else seq
    assert info.value.seq == expected_seq
    assert f"event {expected_seq}" in str(info.value)
    assert state_of(session) == before
    # The derivation is still a from-scratch replay of the unchanged log.
    assert Session.from_events("replay", session.events).derive_messages() == before[1]
    return info.value


# ------------------------------------------------------------------------- envelope


def test_seq_equals_index_and_time_is_epoch_ms() -> None:
    session = open_step()
    event = session.append("user/message", user(), surface_op=APPEND)
    assert [e.seq for e in session.events] == list(range(len(session)))
    assert event.seq == 2
    assert isinstance(event.time, int) and event.time > 1_600_000_000_000
    assert session.event(2) is event


@pytest.mark.parametrize("seq", [0, 2, -1, 100])
def test_append_event_with_wrong_seq_is_rejected(seq: int) -> None:
    session = open_turn()
    event = SessionEvent("user/message", seq, T0, user(), None, APPEND)
    assert_rejected(session, rf"seq {seq} is not the next index 1", event)


@pytest.mark.parametrize("seq", [True, 1.0])
def test_seq_must_be_a_real_int(seq: Any) -> None:
    session = open_turn()
    event = SessionEvent("user/message", seq, T0, user(), None, APPEND)
    assert_rejected(session, "is not the next index 1", event)


@pytest.mark.parametrize("bad_time", [-1, 1.5, True, "0", None, 2**53])
def test_time_must_be_a_non_negative_int(bad_time: Any) -> None:
    session = open_turn()
    event = SessionEvent("user/message", 1, bad_time, user(), None, APPEND)
    assert_rejected(session, "time must be an int >= 0", event)
    assert_rejected(
        session, "time must be an int >= 0", "user/message", user(), surface_op=APPEND, time=-5
    )


def test_time_zero_is_accepted() -> None:
    session = Session.create("s")
    assert session.append("turn/start", turn_start(), time=0).time == 0


def test_unknown_event_type_is_refused_at_append() -> None:
    session = open_turn()
    assert_rejected(session, "unknown event type 'agent/thought'", "agent/thought", {"x": 1})
    event = SessionEvent("agent/thought", 1, T0, user(), None, None)
    assert_rejected(session, "unknown event type", event)


@pytest.mark.parametrize("bad_type", [["user/message"], 5, None, b"user/message"])
def test_a_type_that_is_not_a_string_is_an_unknown_type(bad_type: Any) -> None:
    session = open_turn()
    assert_rejected(session, "unknown event type", bad_type, user(), surface_op=APPEND)
    event = SessionEvent(bad_type, 1, T0, user(), None, APPEND)
    assert_rejected(session, "unknown event type", event)


def test_data_must_match_the_type() -> None:
    session = open_turn()
    assert_rejected(session, "data must be UserMessage", "user/message", 42, surface_op=APPEND)
    event = SessionEvent("user/message", 1, T0, StepStart(1, 1), None, APPEND)
    assert_rejected(session, "data must be UserMessage, got StepStart", event)


SURFACE_EXAMPLES: list[tuple[str, Any]] = [
    ("user/message", user()),
    ("context/message", ContextMessage((Text("c"),), USER)),
    ("steering/message", SteeringMessage(1, (Text("s"),), USER)),
    ("assistant/message", AssistantMessage(1, 1, (Text("a"),), "p", "m")),
]


@pytest.mark.parametrize(("event_type", "data"), SURFACE_EXAMPLES)
def test_surface_op_is_required_on_surface_types(event_type: str, data: Any) -> None:
    session = open_step()
    assert_rejected(session, f"{event_type}: surface_op is required", event_type, data)
    session.append(event_type, data, surface_op=APPEND)


def test_surface_op_is_required_on_tool_results() -> None:
    session = open_step()
    session.append("tool/call", ToolCallEvent(1, 1, "c1", "echo", "{}"))
    result = ToolResultEvent(1, 1, "c1", (Text("ok"),))
    assert_rejected(session, "tool/result: surface_op is required", "tool/result", result)
    session.append("tool/result", result, surface_op=APPEND)


NON_SURFACE_EXAMPLES: list[tuple[str, Any]] = [
    ("step/end", StepEnd(1, 1)),
    ("assistant/chunk", AssistantChunk(1, 1, TextDelta(0, "x"))),
    ("tool/call", ToolCallEvent(1, 1, "c1", "echo", "{}")),
    ("prompt/blocked", PromptBlocked((Text("x"),), USER, "policy")),
    ("request/header", RequestHeaderEvent(HEADER, "initial")),
]


@pytest.mark.parametrize(("event_type", "data"), NON_SURFACE_EXAMPLES)
def test_surface_op_is_forbidden_on_other_types(event_type: str, data: Any) -> None:
    session = open_step()
    assert_rejected(
        session, f"{event_type}: surface_op is forbidden", event_type, data, surface_op=APPEND
    )
    session.append(event_type, data)


def test_surface_op_must_be_an_op() -> None:
    session = open_turn()
    event = SessionEvent("user/message", 1, T0, user(), None, "append")  # type: ignore[arg-type]
    assert_rejected(session, "surface_op must be Append or Replace", event)


def test_replace_seqs_must_be_ints() -> None:
    session = open_turn()
    session.append("user/message", user(), surface_op=APPEND)
    event = SessionEvent("user/message", 2, T0, user(), (1,), Replace(True, 1))  # type: ignore[arg-type]
    assert_rejected(session, "replace start/end must be int seqs", event)


# ----------------------------------------------------------------------- provenance


def test_provenance_must_be_non_empty_except_assistant_message() -> None:
    session = open_step()
    assert_rejected(
        session,
        "source_event_seqs must be non-empty",
        "user/message",
        user(),
        surface_op=APPEND,
        source_event_seqs=(),
    )
    # An assistant/message with no chunks may carry an empty tuple.
    event = session.append(
        "assistant/message",
        AssistantMessage(1, 1, (Text("a"),), "p", "m"),
        surface_op=APPEND,
        source_event_seqs=(),
    )
    assert event.source_event_seqs == ()


def test_provenance_must_be_unique() -> None:
    session = open_step()
    assert_rejected(
        session,
        "source_event_seqs must be unique",
        "user/message",
        user(),
        surface_op=APPEND,
        source_event_seqs=(0, 1, 0),
    )


@pytest.mark.parametrize("bad", [-1, 2, 3, 99])
def test_provenance_must_refer_to_earlier_events(bad: int) -> None:
    session = open_step()  # seqs 0, 1; the next event is seq 2
    error = assert_rejected(
        session,
        f"source_event_seqs entry {bad} does not refer to an earlier event",
        "user/message",
        user(),
        surface_op=APPEND,
        source_event_seqs=(0, bad),
    )
    assert error.rule.startswith("user/message")


def test_provenance_is_only_allowed_on_surface_types() -> None:
    session = open_step()
    assert_rejected(
        session,
        "source_event_seqs are allowed only on surface events",
        "assistant/chunk",
        AssistantChunk(1, 1, TextDelta(0, "x")),
        source_event_seqs=(0,),
    )


def test_provenance_is_stored_as_a_tuple() -> None:
    session = open_step()
    event = session.append(
        "user/message", user(), surface_op=APPEND, source_event_seqs=iter([0, 1])
    )
    assert event.source_event_seqs == (0, 1)
    listed = SessionEvent("user/message", 3, T0, user(), [0, 2], APPEND)  # type: ignore[arg-type]
    assert session.append_event(listed).source_event_seqs == (0, 2)


# ------------------------------------------------------------------------ structure


def test_turns_are_numbered_from_one() -> None:
    session = Session.create("s")
    assert_rejected(
        session, r"turn/start: turn 2 does not follow turn 0", "turn/start", turn_start(2)
    )
    session.append("turn/start", turn_start(1))
    session.append("turn/end", TurnEnd(1, TurnEndReason("completed")))
    assert_rejected(session, "turn 3 does not follow turn 1", "turn/start", turn_start(3))
    assert_rejected(session, "turn 1 does not follow turn 1", "turn/start", turn_start(1))
    session.append("turn/start", turn_start(2))
    assert session.open_turn == 2 and session.last_turn == 2


def test_turns_do_not_nest() -> None:
    session = open_turn()
    assert_rejected(session, "turn 1 is still open \\(no nesting\\)", "turn/start", turn_start(2))


def test_turn_end_names_the_open_turn() -> None:
    session = open_turn()
    assert_rejected(
        session,
        "turn/end: names turn 2 but the open turn is 1",
        "turn/end",
        TurnEnd(2, TurnEndReason("completed")),
    )


def test_turn_end_outside_a_turn() -> None:
    session = Session.create("s")
    assert_rejected(
        session,
        "turn/end: lies outside any open turn",
        "turn/end",
        TurnEnd(1, TurnEndReason("completed")),  # type: ignore[arg-type]
    )


def test_turn_end_with_an_open_step_is_rejected() -> None:
    session = open_step()
    assert_rejected(
        session, "step 1 is still open", "turn/end", TurnEnd(1, TurnEndReason("completed"))
    )


def test_steps_are_numbered_from_one_within_each_turn() -> None:
    session = open_turn()
    assert_rejected(session, "step 2 does not follow step 0", "step/start", StepStart(1, 2))
    session.append("step/start", StepStart(1, 1))
    assert_rejected(
        session, "step/start: step 1 is still open \\(no nesting\\)", "step/start", StepStart(1, 2)
    )
    session.append("step/end", StepEnd(1, 1))
    assert_rejected(session, "step 1 does not follow step 1", "step/start", StepStart(1, 1))
    session.append("step/start", StepStart(1, 2))
    session.append("step/end", StepEnd(1, 2))
    session.append("turn/end", TurnEnd(1, TurnEndReason("completed")))
    session.append("turn/start", turn_start(2))
    # Step numbering restarts in each turn.
    session.append("step/start", StepStart(2, 1))
    assert session.open_step == 1


def test_step_start_names_the_open_turn() -> None:
    session = open_turn()
    assert_rejected(session, "names turn 3 but the open turn is 1", "step/start", StepStart(3, 1))


def test_step_end_names_the_open_step() -> None:
    session = open_step()
    assert_rejected(
        session, "step/end: names step 2 but the open step is 1", "step/end", StepEnd(1, 2)
    )
    session.append("step/end", StepEnd(1, 1))
    assert_rejected(
        session, "step/end: names step 1 but no step is open", "step/end", StepEnd(1, 1)
    )


@pytest.mark.parametrize(
    ("event_type", "make", "op"),
    [
        ("assistant/chunk", lambda t, s: AssistantChunk(t, s, TextDelta(0, "x")), None),
        (
            "assistant/message",
            lambda t, s: AssistantMessage(t, s, (Text("a"),), "p", "m"),
            APPEND,
        ),
        ("tool/call", lambda t, s: ToolCallEvent(t, s, "c9", "echo", "{}"), None),
    ],
)
def test_step_events_name_the_open_turn_and_step(event_type: str, make: Any, op: Any) -> None:
    session = open_turn()
    assert_rejected(
        session,
        f"{event_type}: names step 1 but no step is open",
        event_type,
        make(1, 1),
        surface_op=op,
    )
    session.append("step/start", StepStart(1, 1))
    assert_rejected(
        session,
        f"{event_type}: names turn 2 but the open turn is 1",
        event_type,
        make(2, 1),
        surface_op=op,
    )
    assert_rejected(
        session,
        f"{event_type}: names step 2 but the open step is 1",
        event_type,
        make(1, 2),
        surface_op=op,
    )
    session.append(event_type, make(1, 1), surface_op=op)


def test_tool_result_names_the_open_step() -> None:
    session = open_step()
    session.append("tool/call", ToolCallEvent(1, 1, "c1", "echo", "{}"))
    assert_rejected(
        session,
        "tool/result: names step 2 but the open step is 1",
        "tool/result",
        ToolResultEvent(1, 2, "c1", (Text("x"),)),
        surface_op=APPEND,
    )


@pytest.mark.parametrize(
    ("event_type", "data", "op"),
    [
        ("user/message", user(), APPEND),
        ("context/message", ContextMessage((Text("c"),), USER), APPEND),
        ("prompt/blocked", PromptBlocked((Text("x"),), USER, "policy"), None),
        ("request/header", RequestHeaderEvent(HEADER, "initial"), None),
        ("step/start", StepStart(1, 1), None),
        ("steering/message", SteeringMessage(1, (Text("s"),), USER), APPEND),
    ],
)
def test_events_must_lie_inside_an_open_turn(event_type: str, data: Any, op: Any) -> None:
    session = Session.create("s")
    assert_rejected(
        session, f"{event_type}: lies outside any open turn", event_type, data, surface_op=op
    )
    session.append("turn/start", turn_start())
    session.append("turn/end", TurnEnd(1, TurnEndReason("completed")))
    assert_rejected(session, "lies outside any open turn", event_type, data, surface_op=op)


def test_steering_names_the_open_turn() -> None:
    session = open_turn()
    assert_rejected(
        session,
        "steering/message: names turn 2 but the open turn is 1",
        "steering/message",
        SteeringMessage(2, (Text("s"),), USER),
        surface_op=APPEND,
    )


def test_tool_result_needs_an_earlier_call_in_the_same_step() -> None:
    session = open_step()
    result = ToolResultEvent(1, 1, "c1", (Text("x"),))
    assert_rejected(
        session,
        "no earlier tool/call with id 'c1' in this step",
        "tool/result",
        result,
        surface_op=APPEND,
    )
    session.append("tool/call", ToolCallEvent(1, 1, "c1", "echo", "{}"))
    session.append("tool/result", result, surface_op=APPEND)
    assert_rejected(
        session, "tool call 'c1' already has a result", "tool/result", result, surface_op=APPEND
    )
    # A call from an earlier step does not count.
    session.append("step/end", StepEnd(1, 1))
    session.append("step/start", StepStart(1, 2))
    assert_rejected(
        session,
        "no earlier tool/call with id 'c1'",
        "tool/result",
        ToolResultEvent(1, 2, "c1", (Text("x"),)),
        surface_op=APPEND,
    )


def test_duplicate_tool_call_ids_in_a_step_are_rejected() -> None:
    session = open_step()
    session.append("tool/call", ToolCallEvent(1, 1, "c1", "echo", "{}"))
    assert_rejected(
        session,
        "duplicate tool call id 'c1'",
        "tool/call",
        ToolCallEvent(1, 1, "c1", "echo", "{}"),
    )


def test_synthetic_not_started_result_needs_no_call() -> None:
    session = open_step()
    synthetic = ToolResultEvent(
        1, 1, "c7", (Text("never ran"),), True, ToolError("echo", "TOOL_NOT_STARTED")
    )
    session.append("tool/result", synthetic, surface_op=APPEND)
    # Other error codes are not synthetic: they need the call.
    other = ToolResultEvent(
        1, 1, "c8", (Text("x"),), True, ToolError("echo", "TOOL_OUTCOME_UNKNOWN")
    )
    assert_rejected(
        session, "no earlier tool/call with id 'c8'", "tool/result", other, surface_op=APPEND
    )


def test_structure_rules_also_apply_on_load() -> None:
    good = build_log([("turn", "message", "hi"), ("end", "completed")])
    Session.from_events("ok", good)
    bad = (*good, attrs.evolve(good[0], seq=len(good)))
    with pytest.raises(SessionValidationError, match="turn 1 does not follow turn 1"):
        Session.from_events("bad", bad)
    gap = (good[0], attrs.evolve(good[1], seq=2))
    with pytest.raises(SessionValidationError, match="seq 2 is not the next index 1"):
        Session.from_events("gap", gap)


# -------------------------------------------------------------- ignorable events


def test_ignorable_events_are_loaded_and_kept_out_of_structure_and_surface() -> None:
    b = LogBuilder()
    b.turn_start()
    b.user("hi")
    b.turn_end()
    payload = freeze_object({"k": [1, 2]})
    extra = SessionEvent("x/telemetry", 3, T0, IgnorableData(payload), None, None, ignorable=True)
    session = Session.from_events("s", (*b.events, extra))
    assert session.events[3].data == IgnorableData(freeze_object({"k": (1, 2)}))
    assert session.events[3] is extra
    assert session.derive_messages() == (Message.user("hi"),)
    assert session.surface == (1,)


def test_ignorable_flag_is_only_for_opaque_data() -> None:
    session = open_turn()
    known_but_flagged = SessionEvent("user/message", 1, T0, user(), None, APPEND, ignorable=True)
    assert_rejected(session, "only unknown event types marked ignorable", known_but_flagged)
    unflagged = SessionEvent("x/y", 1, T0, IgnorableData({}), None, None)  # type: ignore[arg-type]
    assert_rejected(session, "only unknown event types marked ignorable", unflagged)
    on_surface = SessionEvent("x/y", 1, T0, IgnorableData({}), None, APPEND, ignorable=True)  # type: ignore[arg-type]
    assert_rejected(session, "takes no part in the surface", on_surface)


# ------------------------------------------------------------------ transactions


def test_rejected_appends_leave_everything_unchanged_after_a_replace() -> None:
    b = LogBuilder()
    b.turn_start()
    b.user("a")
    b.user("b")
    b.header(HEADER)
    b.replace(0, 1, "summary")
    session = Session.from_events("s", b.events)
    session.derive_messages()
    assert session.replace_generation == 1
    # A failing Replace, a failing header delta, a failing structure event:
    assert_rejected(
        session,
        "replace names seq 1, which is not a current node",
        "user/message",
        user(),
        surface_op=Replace(1, 4),
        source_event_seqs=(1, 4),
    )
    assert_rejected(
        session,
        "tools delta removes unknown tools",
        "request/header-delta",
        HeaderDelta(tools=ToolsDelta(removed=("nope",))),
    )
    assert_rejected(session, "step 5 does not follow step 0", "step/start", StepStart(1, 5))
    assert session.replace_generation == 1
    assert session.header() is not None


def test_header_delta_before_any_snapshot_is_rejected_transactionally() -> None:
    session = open_turn()
    assert_rejected(
        session,
        r"request/header-delta: header delta before any snapshot",
        "request/header-delta",
        HeaderDelta(config=LlmCallConfig("x")),
    )
    assert session.header() is None


def test_rejected_json_leaves_the_log_unchanged() -> None:
    session = open_turn()
    before = state_of(session)
    with pytest.raises(JsonValueError, match=r"\$\[1\]\.data\.meta\.x"):
        session.append(
            "context/message",
            {"content": [], "source": {"kind": "user"}, "meta": {"x": math.nan}},
            surface_op=APPEND,
        )
    assert state_of(session) == before


# ----------------------------------------------------------------- detaching


def test_appends_are_detached_from_the_callers_objects() -> None:
    session = open_turn()
    blocks = [Text("a")]
    session.append("user/message", UserMessage(blocks, USER), surface_op=APPEND)  # type: ignore[arg-type]
    blocks.append(Text("b"))
    meta = {"tags": ["x"]}
    session.append(
        "context/message",
        {"content": [{"type": "text", "text": "c"}], "source": {"kind": "user"}, "meta": meta},
        surface_op=APPEND,
    )
    meta["tags"].append("y")
    assert session.events[1].data.content == (Text("a"),)  # type: ignore[union-attr]
    assert session.events[2].data.meta == {"tags": ("x",)}  # type: ignore[union-attr]
    assert session.derive_messages() == (Message.user("a"), Message.user("c"))
    for message in session.derive_messages():
        assert isinstance(message.content, tuple)


def test_data_the_codec_cannot_decode_is_rejected() -> None:
    session = open_turn()
    assert_rejected(
        session,
        "user/message: invalid data: expected str",
        "user/message",
        UserMessage((Text(123),), USER),  # type: ignore[arg-type]
        surface_op=APPEND,
    )
    assert_rejected(
        session,
        "invalid data",
        "user/message",
        {"content": "not blocks", "source": {"kind": "user"}},
        surface_op=APPEND,
    )
    assert_rejected(
        session,
        "invalid data",
        "user/message",
        {"content": [], "source": {"kind": "robot"}},
        surface_op=APPEND,
    )


def test_mapping_data_is_structured() -> None:
    session = Session.create("s")
    event = session.append(
        "turn/start", {"turn": 1, "trigger": {"kind": "message", "source": {"kind": "user"}}}
    )
    assert event.data == turn_start()
    event = session.append(
        "user/message",
        {
            "content": [{"type": "reasoning", "text": "r", "signature": "sig"}],
            "source": {"kind": "plugin", "plugin": "p"},
        },
        surface_op=APPEND,
    )
    assert event.data.content == (Reasoning("r", "sig"),)  # type: ignore[union-attr]


# ------------------------------------------------------------------------- D1, D2


@pytest.mark.parametrize(
    "bad",
    [math.nan, {"a", "set"}, b"bytes", "cycle"],
    ids=["nan", "set", "bytes", "cycle"],
)
def test_D1_appending_non_json_data_raises_and_the_log_stays_empty(bad: Any) -> None:
    session = Session.create("d1")
    if bad == "cycle":
        bad = []
        bad.append(bad)
    data = {"turn": 1, "trigger": {"kind": "message", "source": {"kind": "user", "x": bad}}}
    with pytest.raises(ValueError, match=r"not JSON-representable at \$\[0\]\.data\.trigger"):
        session.append("turn/start", data)
    assert session.events == ()
    assert len(session) == 0
    assert session.derive_messages() == ()
    assert session.last_turn == 0


def test_D1_non_json_values_inside_typed_data_raise_too() -> None:
    session = open_turn()
    usage_nan = AssistantMessage(1, 1, (), "p", "m")
    session.append("step/start", StepStart(1, 1))
    header = RequestHeaderEvent(
        attrs.evolve(HEADER, config=LlmCallConfig("m", temperature=math.inf)), "initial"
    )
    before = state_of(session)
    with pytest.raises(JsonValueError, match=r"\$\[2\]\.data\.header\.config\.temperature"):
        session.append("request/header", header)
    assert state_of(session) == before
    session.append("assistant/message", usage_nan, surface_op=APPEND)


def test_D2_events_is_a_stable_tuple_and_appends_return_a_new_one() -> None:
    session = open_turn()
    first = session.events
    assert session.events is first
    assert isinstance(first, tuple)
    session.append("user/message", user(), surface_op=APPEND)
    second = session.events
    assert second is not first
    assert len(first) == 1 and len(second) == 2
    assert first == (second[0],)
    assert second[0] is first[0]
    assert session.events is second
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        second[1].seq = 5  # type: ignore[misc]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        second[1].data.content = ()  # type: ignore[misc, union-attr]
    with pytest.raises(TypeError):
        second[1].data.content[0] = Text("x")  # type: ignore[index, union-attr]


# ------------------------------------------------------------------------ observers


def test_observers_are_called_synchronously_after_each_append() -> None:
    session = Session.create("s")
    seen: list[tuple[int, int]] = []
    unsubscribe = session.observe(lambda event: seen.append((event.seq, len(session))))
    session.append("turn/start", turn_start())
    assert seen == [(0, 1)]
    session.append("user/message", user(), surface_op=APPEND)
    assert seen == [(0, 1), (1, 2)]
    # A rejected append notifies nobody.
    with pytest.raises(SessionValidationError):
        session.append("turn/start", turn_start(2))
    assert len(seen) == 2
    unsubscribe()
    unsubscribe()  # idempotent
    session.append("user/message", user(), surface_op=APPEND)
    assert len(seen) == 2


def test_observer_sees_the_derivation_including_the_new_event() -> None:
    session = open_turn()
    derived: list[tuple[Message, ...]] = []
    session.observe(lambda _event: derived.append(session.derive_messages()))
    session.append("user/message", user("x"), surface_op=APPEND)
    assert derived == [(Message.user("x"),)]


def test_a_failing_observer_is_contained_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    session = Session.create("s")
    seen: list[int] = []

    def broken(_event: SessionEvent) -> None:
        raise RuntimeError("observer bug")

    session.observe(broken)
    session.observe(lambda event: seen.append(event.seq))
    with caplog.at_level(logging.ERROR, logger="actorloop.session"):
        event = session.append("turn/start", turn_start())
    assert event.seq == 0 and len(session) == 1
    assert seen == [0]
    assert "observer failed" in caplog.text and "observer bug" in caplog.text


# ----------------------------------------------------------------------- metadata


def test_create_records_meta_and_labels() -> None:
    from actorloop.runtime.log.session import SessionMeta

    session = Session.create("abc", {"team": ["x"]})
    assert session.id == "abc" == session.meta.id
    assert session.meta.labels == {"team": ("x",)}
    assert session.meta.parent_session is None and session.meta.seed_length is None
    assert isinstance(session.meta.created_at, int)
    meta = SessionMeta("abc")
    assert Session.create("abc", meta).meta is meta
    with pytest.raises(ValueError, match="differs from session id"):
        Session.create("other", meta)


def test_events_since_hands_out_new_events() -> None:
    b = LogBuilder()
    b.turn_start()
    b.user("a")
    session = Session.from_events("s", b.events)
    assert session.events_since(0) == list(session.events)
    session.append_event(b.user("b"))
    assert session.events_since(2) == [session.events[2]]
    assert session.events_since(3) == []
    b2 = LogBuilder()
    b2.turn_start()
    b2.user("x")
    b2.turn_end()
    parent = Session.from_events("p", b2.events)
    child = parent.fork(2, "c")
    assert child.events_since(1) == list(parent.events[1:3])


def test_append_event_detaches_ignorable_payloads() -> None:
    session = open_turn()
    payload: dict[str, Any] = {"k": [1]}
    event = SessionEvent("x/y", 1, T0, IgnorableData(payload), None, None, ignorable=True)  # type: ignore[arg-type]
    committed = session.append_event(event)
    payload["k"].append(2)
    assert committed.data == IgnorableData(freeze_object({"k": [1]}))
    assert session.events[1].data.payload["k"] == (1,)  # type: ignore[union-attr]


def test_observers_see_events_in_seq_order_even_when_an_observer_appends() -> None:
    session = open_turn()
    first_seen: list[int] = []
    second_seen: list[int] = []

    def appender(event: SessionEvent) -> None:
        first_seen.append(event.seq)
        if event.seq == 1:
            inner = session.append("user/message", user("inner"), surface_op=APPEND)
            assert inner.seq == 2 and len(session) == 3  # committed at once...

    session.observe(appender)
    session.observe(lambda event: second_seen.append(event.seq))
    session.append("user/message", user("outer"), surface_op=APPEND)
    # ...and delivered after seq 1 reached every observer.
    assert first_seen == [1, 2]
    assert second_seen == [1, 2]
    session.append("user/message", user("later"), surface_op=APPEND)
    assert second_seen == [1, 2, 3]


def test_from_loaded_folds_like_a_validated_replay() -> None:
    """A store-validated log seeds a session lazily; its folded state equals from_events'."""
    import random

    from session_logs import turn_script

    source = Session.create("loaded")
    rng = random.Random(7)
    for turn in range(4):
        for _barrier in turn_script(source, rng, f"turn {turn}"):
            pass
    checked = Session.from_events("loaded", source.events)
    loaded = Session.from_loaded("loaded", source.events, checked.meta)
    assert loaded.events == checked.events
    assert loaded.derive_messages() == checked.derive_messages()
    assert loaded.header() == checked.header()
    assert loaded.surface == checked.surface
    assert loaded.last_turn == checked.last_turn == 4
    assert loaded.history_chain() == checked.history_chain()


# ------------------------------------------------------------------------- hostile content


@pytest.mark.parametrize(
    ("event_type", "data", "path"),
    [
        ("user/message", UserMessage((Text("hi \ud800"),), USER), "$[1].data.content[0].text"),
        (
            "context/message",
            {
                "content": [{"type": "text", "text": "ok"}],
                "source": {"kind": "user"},
                "meta": {"k\udfff": 1},
            },
            "$[1].data.meta (key 'k\\udfff')",
        ),
    ],
)
def test_a_lone_surrogate_never_reaches_the_log(event_type: str, data: Any, path: str) -> None:
    """Refused at append for every store alike (memory included): nothing to encode later."""
    session = open_turn()
    before = state_of(session)
    with pytest.raises(JsonValueError) as info:
        session.append(event_type, data, surface_op=APPEND)
    assert info.value.path == path
    assert state_of(session) == before


def test_lone_surrogates_in_model_output_and_tool_results_are_refused() -> None:
    session = open_step()
    with pytest.raises(JsonValueError, match=r"\$\[2\]\.data\.chunk\.text"):
        session.append("assistant/chunk", AssistantChunk(1, 1, TextDelta(0, "\udc80")))
    call = ToolCall("c1", "echo", '{"x": "\ud800"}')
    with pytest.raises(JsonValueError, match=r"content\[0\]\.arguments"):
        session.append(
            "assistant/message",
            AssistantMessage(1, 1, (call,), "p", "m"),
            surface_op=APPEND,
            source_event_seqs=(),
        )
    session.append("tool/call", ToolCallEvent(1, 1, "c1", "echo", "{}"))
    with pytest.raises(JsonValueError, match=r"content\[0\]\.text"):
        session.append(
            "tool/result",
            ToolResultEvent(1, 1, "c1", (Text("\ud800"),)),
            surface_op=APPEND,
            source_event_seqs=(2,),
        )


TOOL_BLOCKS = [ToolCall("c", "n", "{}"), ToolResult("c", (Text("r"),))]


@pytest.mark.parametrize("block", TOOL_BLOCKS, ids=["tool call", "tool result"])
@pytest.mark.parametrize("event_type", ["user/message", "context/message", "steering/message"])
def test_user_and_context_content_may_not_hold_tool_blocks(event_type: str, block: Any) -> None:
    session = open_turn()
    content = (Text("look"), block)
    data: Any = {
        "user/message": UserMessage(content, USER),
        "context/message": ContextMessage(content, Source.of_plugin("p")),
        "steering/message": SteeringMessage(1, content, USER),
    }[event_type]
    error = assert_rejected(
        session, "content block 1 is a Tool", event_type, data, surface_op=APPEND
    )
    assert error.code == ErrorCode.TOOL_BLOCK_IN_USER_CONTENT


def test_blocked_prompts_may_not_hold_tool_blocks_either() -> None:
    session = open_turn()
    data = PromptBlocked((TOOL_BLOCKS[1],), USER, "policy")
    error = assert_rejected(session, "content block 0 is a ToolResult", "prompt/blocked", data)
    assert error.code == ErrorCode.TOOL_BLOCK_IN_USER_CONTENT


def test_duplicate_tool_call_ids_in_one_assistant_message_are_refused() -> None:
    session = open_step()
    calls = (ToolCall("same", "a", "{}"), Text("and"), ToolCall("same", "b", "{}"))
    error = assert_rejected(
        session,
        "tool call id 'same' appears twice",
        "assistant/message",
        AssistantMessage(1, 1, calls, "p", "m"),
        surface_op=APPEND,
        source_event_seqs=(),
    )
    assert error.code == ErrorCode.DUPLICATE_TOOL_CALL_ID
    # Distinct ids are fine, and so is the same id in a later step.
    session.append(
        "assistant/message",
        AssistantMessage(1, 1, (ToolCall("a1", "a", "{}"), ToolCall("b1", "b", "{}")), "p", "m"),
        surface_op=APPEND,
        source_event_seqs=(),
    )


def test_an_assistant_message_may_not_carry_a_tool_result() -> None:
    session = open_step()
    assert_rejected(
        session,
        "a model's message cannot carry a tool result",
        "assistant/message",
        AssistantMessage(1, 1, (TOOL_BLOCKS[1],), "p", "m"),
        surface_op=APPEND,
        source_event_seqs=(),
    )


def test_a_stored_log_breaking_a_content_rule_is_refused_on_load() -> None:
    """The rules hold on load too: a log written by hand with a user tool call is refused."""
    session = open_turn()
    forged = SessionEvent("user/message", 1, T0, UserMessage((TOOL_BLOCKS[0],), USER), None, APPEND)
    with pytest.raises(SessionValidationError, match="content block 0 is a ToolCall"):
        Session.from_events("s", [*session.events, forged])


def test_user_content_can_be_checked_before_it_is_sent() -> None:
    ok = (Text("hi"), Reasoning("r", "sig"))
    assert check_user_content(ok) is ok
    with pytest.raises(ContentError, match="content block 1 is a ToolResult"):
        check_user_content((Text("x"), TOOL_BLOCKS[1]))
    with pytest.raises(JsonValueError, match=r"content\[0\]\.signature"):
        check_user_content((Reasoning("r", "\ud800"),))
