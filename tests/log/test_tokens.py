"""Token pressure (docs/spec/compaction.md §2–§4): the estimator rules, and the incremental
`TokenMeter` with its usage anchor."""

from __future__ import annotations

import math
from typing import Any

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import LogBuilder, build_log, programs

from actorloop.codecs.converter import unstructure
from actorloop.codecs.jsonvalue import canonical_json
from actorloop.runtime import TokenUsage
from actorloop.runtime.log.header_algebra import fold
from actorloop.runtime.log.session import Session
from actorloop.runtime.log.tokens import (
    TokenMeter,
    estimate_block,
    estimate_message,
    estimate_messages,
    estimate_system,
    estimate_tools,
    fixed_part_tokens,
)
from actorloop.runtime.model.events import (
    APPEND,
    AssistantMessage,
    RequestHeaderEvent,
    SessionEvent,
    StepEnd,
    StepStart,
    Trigger,
    TurnEnd,
    TurnEndReason,
    TurnStart,
    UserMessage,
)
from actorloop.runtime.model.header import EpochHeader, LlmCallConfig, ToolSchema
from actorloop.runtime.model.messages import USER, Message, Reasoning, Text, ToolCall, ToolResult

SYSTEM = "You are a careful assistant."
TOOLS = (ToolSchema("echo", "Echo x back", {"type": "object"}),)
PREFIX = (Message.user("skill catalogue: " + "s" * 200),)
HEADER = EpochHeader(LlmCallConfig("m"), SYSTEM, TOOLS, PREFIX)


def q(length: int) -> int:
    return math.ceil(length / 4)


# ---------------------------------------------------------------- the estimator


def test_text_and_reasoning_blocks_are_a_quarter_of_their_length_plus_four() -> None:
    assert estimate_block(Text("")) == 4
    assert estimate_block(Text("a")) == 5
    assert estimate_block(Text("abcd")) == 5
    assert estimate_block(Text("abcde")) == 6
    assert estimate_block(Reasoning("x" * 401, signature="sig" * 50)) == q(401) + 4


def test_tool_call_counts_name_and_arguments_separately() -> None:
    # ceil(5/4) + ceil(7/4) = 2 + 2, not ceil(12/4) = 3
    assert estimate_block(ToolCall("call-with-a-long-id", "abcde", '{"a":1}')) == 2 + 2 + 4
    assert estimate_block(ToolCall("c", "", "")) == 4


def test_tool_result_is_its_nested_blocks_plus_four() -> None:
    result = ToolResult("c1", (Text("x" * 10), Text("y" * 3)), is_error=True)
    assert estimate_block(result) == (q(10) + 4) + (q(3) + 4) + 4
    assert estimate_block(ToolResult("c1", ())) == 4


def test_each_message_adds_four_and_a_sequence_is_the_sum() -> None:
    message = Message("assistant", (Text("abcdefgh"), ToolCall("i", "ls", "{}")))
    assert estimate_message(message) == (2 + 4) + (1 + 1 + 4) + 4
    assert estimate_message(Message("user", ())) == 4
    assert estimate_messages([message, Message.user("hi")]) == 16 + (1 + 4 + 4)
    assert estimate_messages([]) == 0


def test_system_tools_and_prefix_fixed_part() -> None:
    assert estimate_system(SYSTEM) == q(len(SYSTEM)) + 4
    assert estimate_system(None) == 0
    tools_json = canonical_json(unstructure(TOOLS))
    assert estimate_tools(TOOLS) == q(len(tools_json)) + 4
    assert estimate_tools(()) == 0
    assert fixed_part_tokens(SYSTEM, TOOLS, PREFIX) == (
        estimate_system(SYSTEM) + estimate_tools(TOOLS) + estimate_messages(PREFIX)
    )
    # the session prefix is the sum of its messages
    two = (Message.user("a" * 9), Message.assistant("b" * 3))
    assert fixed_part_tokens(None, (), two) == (q(9) + 8) + (q(3) + 8)


@given(st.text(max_size=300))
def test_text_estimate_counts_code_points(text: str) -> None:
    assert estimate_block(Text(text)) == q(len(text)) + 4
    assert estimate_message(Message.user(text)) == q(len(text)) + 8


# ---------------------------------------------------------------- the meter


def _session_with_answer(usage: TokenUsage | None, header: EpochHeader = HEADER) -> Session:
    b = LogBuilder()
    b.turn_start()
    b.user("question " + "q" * 120)
    b.step_start()
    b.header(header)
    b.add(
        "assistant/message",
        AssistantMessage(1, 1, (Text("answer " + "a" * 80),), "p", "m", usage),
        APPEND,
        (),
    )
    b.step_end()
    return Session.from_events("s", b.events)


def _heuristic(session: Session, header: EpochHeader = HEADER) -> int:
    return fixed_part_tokens(
        header.system, header.tools or (), header.message_prefix or ()
    ) + estimate_messages(session.derive_messages())


def test_meter_without_usage_is_the_heuristic() -> None:
    session = _session_with_answer(None)
    meter = TokenMeter(session)
    assert meter.total(SYSTEM, TOOLS, PREFIX) == _heuristic(session)
    assert meter.surface_tokens() == estimate_messages(session.derive_messages())


def test_meter_anchors_on_usage_and_adds_heuristic_growth() -> None:
    session = _session_with_answer(TokenUsage(input=700, output=60, cache_read=300, cache_write=40))
    meter = TokenMeter(session)
    anchor = 700 + 60 + 300 + 40
    assert anchor >= _heuristic(session)
    assert meter.total(SYSTEM, TOOLS, PREFIX) == anchor
    grown = session.append("user/message", UserMessage((Text("z" * 42),), USER), surface_op=APPEND)
    assert grown.seq > 0
    assert meter.total(SYSTEM, TOOLS, PREFIX) == anchor + q(42) + 8


def test_meter_ignores_an_anchor_below_the_heuristic() -> None:
    session = _session_with_answer(TokenUsage(input=1, output=1))
    meter = TokenMeter(session)
    assert meter.total(SYSTEM, TOOLS, PREFIX) == _heuristic(session)


def test_a_changed_fixed_part_falls_back_to_the_heuristic() -> None:
    session = _session_with_answer(TokenUsage(input=5000, output=10))
    meter = TokenMeter(session)
    assert meter.total(SYSTEM, TOOLS, PREFIX) == 5010
    surface = estimate_messages(session.derive_messages())
    bigger = (*PREFIX, Message.user("new contributor " + "n" * 400))
    assert meter.total(SYSTEM, TOOLS, bigger) == fixed_part_tokens(SYSTEM, TOOLS, bigger) + surface
    assert meter.total(SYSTEM, TOOLS, ()) == fixed_part_tokens(SYSTEM, TOOLS, ()) + surface
    assert meter.total(SYSTEM + "!", TOOLS, PREFIX) == (
        fixed_part_tokens(SYSTEM + "!", TOOLS, PREFIX) + surface
    )
    assert meter.total(SYSTEM, (), PREFIX) == fixed_part_tokens(SYSTEM, (), PREFIX) + surface
    # the same fixed part again: the anchor still holds
    assert meter.total(SYSTEM, TOOLS, PREFIX) == 5010


def test_the_anchor_belongs_to_the_header_its_request_was_sent_with() -> None:
    """A header recorded after the answer (a later step that failed) must not adopt the
    earlier request's usage as its own."""
    session = _session_with_answer(TokenUsage(input=5000, output=10))
    later = EpochHeader(LlmCallConfig("m"), SYSTEM, TOOLS, (*PREFIX, Message.user("x" * 800)))
    session.append("turn/end", TurnEnd(1, TurnEndReason("completed")))
    session.append("turn/start", TurnStart(2, Trigger("message", USER)))
    session.append("user/message", UserMessage((Text("again"),), USER), surface_op=APPEND)
    session.append("step/start", StepStart(2, 1))
    session.append("request/header", RequestHeaderEvent(later, "fallback"))
    session.append("step/end", StepEnd(2, 1))
    fresh = TokenMeter(session)
    assert fresh.total(SYSTEM, TOOLS, later.message_prefix or ()) == _heuristic(session, later)


def test_meter_on_a_loaded_compacted_session_counts_the_current_surface() -> None:
    """A new loop instance (resume) builds its meter over a log that already holds
    replaces: shadowed nodes no longer count, the summary does."""
    b = LogBuilder()
    b.turn_start()
    for index in range(5):
        b.user(f"message {index} " + "m" * 300)
    b.replace(0, 3, "summary")
    session = Session.from_events("s", b.events)
    assert TokenMeter(session).surface_tokens() == estimate_messages(session.derive_messages())
    assert TokenMeter(session).total(SYSTEM, TOOLS, PREFIX) == _heuristic(session)


def test_meter_is_incremental_across_appends_and_replaces() -> None:
    b = LogBuilder()
    b.turn_start()
    session = Session.create("s")
    meter = TokenMeter(session)

    def sync() -> None:
        for event in b.events[len(session) :]:
            session.append_event(event)

    for index in range(6):
        b.user("u" * (50 * index + 1))
        sync()
        assert meter.surface_tokens() == estimate_messages(session.derive_messages())
    b.replace(1, 3, "short")
    sync()
    assert meter.surface_tokens() == estimate_messages(session.derive_messages())
    b.replace(0, 0, "s")
    b.user("tail")
    sync()
    assert meter.surface_tokens() == estimate_messages(session.derive_messages())


def _with_usage(events: tuple[SessionEvent, ...], usages: list[int]) -> list[SessionEvent]:
    """Give assistant messages usage (some far above the heuristic, some below)."""
    out = []
    answers = 0
    for event in events:
        data = event.data
        if isinstance(data, AssistantMessage):
            pick = usages[answers % len(usages)] if usages else 0
            answers += 1
            if pick:
                usage = TokenUsage(input=pick, output=pick % 97, cache_read=pick // 3)
                event = attrs.evolve(event, data=attrs.evolve(data, usage=usage))
        out.append(event)
    return out


@settings(max_examples=60, deadline=None)
@given(
    programs(max_turns=4),
    st.lists(st.sampled_from([0, 1, 3, 20_000]), max_size=6),
)
def test_incremental_meter_equals_a_from_scratch_meter(program: Any, usages: list[int]) -> None:
    events = _with_usage(build_log(program), usages)
    session = Session.create("s")
    meter = TokenMeter(session)
    for index, event in enumerate(events):
        session.append_event(event)
        if index % 3 and index != len(events) - 1:
            continue  # the running meter is asked at irregular points only
        header = session.header()
        fixed: tuple[Any, ...] = (
            (header.system, header.tools or (), header.message_prefix or ())
            if header is not None
            else (None, (), ())
        )
        fresh = TokenMeter(Session.from_events("s", events[: index + 1]))
        assert meter.surface_tokens() == estimate_messages(session.derive_messages())
        assert meter.total(*fixed) == fresh.total(*fixed)
        assert meter.total(*fixed) >= fixed_part_tokens(*fixed) + meter.surface_tokens()
    assert fold(events) == session.header()
