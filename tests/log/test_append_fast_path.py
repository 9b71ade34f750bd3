"""The append fast path: data that is already canonical (deeply immutable, exactly typed) is
kept as it is, and gives the same events and bytes as the checked copy through the codec;
anything else still takes the copy, with the same normalization and the same typed errors."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from hypothesis import given, settings
from session_logs import closed_log
from strategies import event_data, valid_logs

from actorloop.codecs.canonical import CanonicalChecks
from actorloop.codecs.converter import (
    BLOCK_TAGS,
    CHUNK_TAGS,
    EMPTY_IS_ABSENT,
    OP_TAGS,
    encode_event,
    is_canonical,
    structure_as,
    unstructure,
)
from actorloop.codecs.jsonvalue import FrozenDict, freeze_json
from actorloop.runtime.errors import JsonValueError, SessionValidationError
from actorloop.runtime.log.session import Session
from actorloop.runtime.model.chunks import TokenUsage
from actorloop.runtime.model.events import (
    APPEND,
    AssistantMessage,
    ContextMessage,
    RequestHeaderEvent,
    SessionEvent,
    StepStart,
    Trigger,
    TurnStart,
    UserMessage,
)
from actorloop.runtime.model.header import EpochHeader, LlmCallConfig, ToolSchema
from actorloop.runtime.model.messages import USER, Text


def _checked_copy(data: Any) -> Any:
    """What the checked path makes of `data`: unstructure → freeze → strict structure."""
    return structure_as(freeze_json(unstructure(data)), type(data))


def _open_session() -> Session:
    session = Session.create("fast")
    session.append("turn/start", TurnStart(1, Trigger("message", USER)), time=1)
    return session


@settings(max_examples=400, deadline=None)
@given(event_data())
def test_canonical_data_equals_its_checked_copy(typed: tuple[str, Any]) -> None:
    event_type, data = typed
    copy = _checked_copy(data)
    if is_canonical(data):
        assert copy == data
        kept = SessionEvent(event_type, 3, 5, data)
        copied = SessionEvent(event_type, 3, 5, copy)
        assert kept == copied
        assert encode_event(kept) == encode_event(copied)
    # Whatever the answer, the copy itself is canonical: the check accepts what the codec makes.
    assert is_canonical(copy)


@settings(max_examples=60, deadline=None)
@given(valid_logs())
def test_loop_shaped_logs_take_the_fast_path_with_identical_bytes(
    events: tuple[SessionEvent, ...],
) -> None:
    checked = Session.create("checked")
    fast = Session.create("fast")
    for event in events:
        assert is_canonical(event.data)
        # append_event takes the fast path; the mapping form of append the checked copy.
        kept = fast.append_event(event)
        assert kept.data is event.data
        copied = checked.append(
            event.type,
            unstructure(event.data),
            surface_op=event.surface_op,
            source_event_seqs=event.source_event_seqs,
            time=event.time,
        )
        assert copied == kept
        assert encode_event(copied) == encode_event(kept)
    assert fast.derive_messages() == checked.derive_messages()
    assert fast.history_chain() == checked.history_chain()


def test_append_keeps_canonical_data_without_copying() -> None:
    session = _open_session()
    data = UserMessage((Text("hello"),), USER)
    event = session.append("user/message", data, surface_op=APPEND, time=2)
    assert event.data is data


def test_hand_built_frozen_dict_holding_a_list_is_still_detached() -> None:
    session = _open_session()
    inner = [1, 2]
    data = ContextMessage((Text("note"),), USER)
    # Forced past the field's converter: a hand-built FrozenDict with a mutable list inside.
    object.__setattr__(data, "meta", FrozenDict({"tags": inner}))
    assert not is_canonical(data)
    event = session.append("context/message", data, surface_op=APPEND, time=2)
    inner.append(3)
    assert event.data.meta == {"tags": (1, 2)}
    assert type(event.data.meta["tags"]) is tuple


def test_non_canonical_values_are_normalized_exactly_as_before() -> None:
    session = _open_session()
    session.append("step/start", StepStart(1, 1), time=2)
    # A float field holding an int: the copy makes it a float.
    config = LlmCallConfig("m", max_tokens=10)
    object.__setattr__(config, "temperature", 1)
    # An empty system prompt is written as absent: it comes back as None.
    header = EpochHeader(config, "", (ToolSchema("t", "d", {"type": "object"}),))
    data = RequestHeaderEvent(header, "initial")
    assert not is_canonical(data)
    event = session.append("request/header", data, time=3)
    assert event.data == _checked_copy(data)
    assert event.data.header.system is None
    assert type(event.data.header.config.temperature) is float


@pytest.mark.parametrize(
    ("value", "error", "problem"),
    [
        (TokenUsage(input=True), SessionValidationError, "expected int"),  # type: ignore[arg-type]
        (TokenUsage(input=2**60), JsonValueError, "outside"),
    ],
)
def test_badly_typed_data_still_gets_the_typed_error(
    value: TokenUsage, error: type[Exception], problem: str
) -> None:
    session = _open_session()
    session.append("step/start", StepStart(1, 1), time=2)
    data = AssistantMessage(1, 1, (Text("hi"),), "p", "m", value)
    assert not is_canonical(data)
    with pytest.raises(error, match=problem):
        session.append("assistant/message", data, surface_op=APPEND, source_event_seqs=(), time=3)
    assert len(session) == 2


def test_lone_surrogate_is_refused_on_the_fast_path_too() -> None:
    session = _open_session()
    data = UserMessage((Text("bad \ud800"),), USER)
    assert not is_canonical(data)
    with pytest.raises(JsonValueError, match="surrogate"):
        session.append("user/message", data, surface_op=APPEND, time=2)
    assert len(session) == 1


def test_a_list_where_a_tuple_belongs_is_copied_into_a_tuple() -> None:
    session = _open_session()
    blocks = [Text("a")]
    data = UserMessage(blocks, USER)  # type: ignore[arg-type]
    assert not is_canonical(data)
    event = session.append("user/message", data, surface_op=APPEND, time=2)
    blocks.append(Text("b"))
    assert event.data.content == (Text("a"),)


def test_checks_generated_from_many_threads_at_once_agree() -> None:
    """Stores validate loads in worker threads: a checker first used by several threads at
    once generates each class's check once, and every thread gets a working one."""
    values = [event.data for event in closed_log("threads", 3).events]
    expected = [is_canonical(value) for value in values]
    for _ in range(20):
        checks = CanonicalChecks(
            (tuple(BLOCK_TAGS), tuple(CHUNK_TAGS), tuple(OP_TAGS)), EMPTY_IS_ABSENT
        )
        start = threading.Barrier(8)

        def run(checks: CanonicalChecks = checks, start: threading.Barrier = start) -> list[bool]:
            start.wait()
            return [checks.check(value) for value in values]

        with ThreadPoolExecutor(8) as pool:
            answers = [future.result() for future in [pool.submit(run) for _ in range(8)]]
        assert answers == [expected] * 8
