"""Session.fork (docs/spec/fork-resume.md §2, §5): boundary rules with typed codes, lineage
metadata, structural sharing of the seed, and isolation from later parent appends."""

from __future__ import annotations

import pytest
from strategies import HEADER, LogBuilder

from actorloop.codecs.jsonvalue import freeze_object
from actorloop.runtime.errors import SessionForkError
from actorloop.runtime.log.session import Session
from actorloop.runtime.model.events import IgnorableData, SessionEvent
from actorloop.runtime.model.messages import Message


def three_turns(open_last: bool = True) -> tuple[Session, LogBuilder, list[int]]:
    """Turn 1 and 2 closed, turn 3 open (S2's shape); returns the turn/end seqs."""
    b = LogBuilder()
    ends = []
    for text in ("first", "second", "third"):
        b.turn_start()
        b.user(text)
        if text == "first":
            b.step_start()
            b.header(HEADER)
            b.assistant("reply")
            b.step_end()
        if text != "third" or not open_last:
            ends.append(b.turn_end().seq)
    return Session.from_events("parent", b.events), b, ends


def test_fork_at_a_turn_end_seeds_the_child_with_the_prefix() -> None:
    parent, _, ends = three_turns()
    child = parent.fork(ends[0], "child")
    assert child.id == "child"
    assert child.events == parent.events[: ends[0] + 1]
    assert child.meta.parent_session == "parent"
    assert child.meta.seed_length == ends[0] + 1
    assert child.derive_messages() == (Message.user("first"), Message.assistant("reply"))
    assert child.header() == HEADER
    assert child.last_turn == 1 and child.open_turn is None


def test_the_child_shares_the_parents_events() -> None:
    parent, _, ends = three_turns()
    child = parent.fork(ends[1], "child")
    for index in range(ends[1] + 1):
        assert child.events[index] is parent.events[index]
        assert child.event(index) is parent.event(index)


def test_parent_appends_after_the_fork_never_appear_in_the_child() -> None:
    parent, b, _ = three_turns(open_last=False)
    child = parent.fork(None, "child")
    seed = child.events
    assert len(seed) == len(parent)
    b.turn_start()
    parent.append_event(b.events[-1])
    parent.append_event(b.user("parent only"))
    assert len(child) == len(seed)
    assert child.events == seed
    assert Message.user("parent only") not in child.derive_messages()
    # The child continues with its own seqs.
    child_builder = LogBuilder()
    child_builder.events = list(child.events)
    child_builder.turn = child.last_turn
    child_builder.turn_start()
    child.append_event(child_builder.events[-1])
    child.append_event(child_builder.user("child only"))
    assert [e.seq for e in child.events] == list(range(len(child)))
    assert child.derive_messages()[-1] == Message.user("child only")
    assert Message.user("child only") not in parent.derive_messages()
    assert parent.events[len(seed) + 1].data != child.events[len(seed) + 1].data


def test_default_boundary_is_the_last_event() -> None:
    parent, _, ends = three_turns(open_last=False)
    child = parent.fork()
    assert child.meta.seed_length == len(parent) == ends[-1] + 1
    assert child.id != parent.id and len(child.id) >= 16


def test_default_boundary_on_an_open_turn_is_OPEN_TURN() -> None:
    parent, _, _ = three_turns(open_last=True)
    with pytest.raises(SessionForkError) as info:
        parent.fork()
    assert info.value.code == "OPEN_TURN"
    assert "OPEN_TURN" not in str(info.value)  # the code is `.code`, not repeated in the text
    assert "has an open turn" in str(info.value)


@pytest.mark.parametrize("boundary", [0, 1, 3])
def test_a_boundary_inside_a_turn_is_OPEN_TURN(boundary: int) -> None:
    parent, _, _ = three_turns()
    with pytest.raises(SessionForkError) as info:
        parent.fork(boundary)
    assert info.value.code == "OPEN_TURN"


@pytest.mark.parametrize("boundary", [-1, 10_000, True, "3", 1.0])
def test_a_boundary_naming_no_event_is_INVALID_BOUNDARY(boundary: object) -> None:
    parent, _, _ = three_turns()
    with pytest.raises(SessionForkError) as info:
        parent.fork(boundary)  # type: ignore[arg-type]
    assert info.value.code == "INVALID_BOUNDARY"


def test_a_boundary_message_names_what_it_is() -> None:
    parent, _, _ = three_turns()
    expected = (
        "fork boundary 1 in session parent must be turn/end, got user/message: a fork seeds "
        "whole turns, and a seed ending there would end inside a turn"
    )
    with pytest.raises(SessionForkError) as info:
        parent.fork(1)
    assert str(info.value) == expected


def test_the_child_id_is_checked_before_the_boundary() -> None:
    parent, _, _ = three_turns(open_last=True)
    for boundary in (None, 1, -1):
        with pytest.raises(SessionForkError) as info:
            parent.fork(boundary, "parent")
        assert info.value.code == "SESSION_ALREADY_EXISTS"


def test_the_childs_id_must_differ_from_the_parents() -> None:
    parent, _, ends = three_turns()
    with pytest.raises(SessionForkError) as info:
        parent.fork(ends[0], "parent")
    assert info.value.code == "SESSION_ALREADY_EXISTS"


def test_an_empty_session_cannot_be_forked() -> None:
    with pytest.raises(SessionForkError) as info:
        Session.create("empty").fork()
    assert info.value.code in ("INVALID_BOUNDARY", "OPEN_TURN")
    with pytest.raises(SessionForkError) as info:
        Session.create("empty").fork(0)
    assert info.value.code == "INVALID_BOUNDARY"


def test_default_boundary_on_a_trailing_ignorable_event_is_not_a_turn_end() -> None:
    parent, _, _ = three_turns(open_last=False)
    extra = SessionEvent(
        "x/telemetry", len(parent), 0, IgnorableData(freeze_object({})), ignorable=True
    )
    parent.append_event(extra)
    assert parent.open_turn is None
    with pytest.raises(SessionForkError, match="must be turn/end, got x/telemetry") as info:
        parent.fork()
    assert info.value.code == "OPEN_TURN"


def test_fork_of_a_fork() -> None:
    parent, _, ends = three_turns()
    child = parent.fork(ends[1], "child")
    grandchild = child.fork(ends[0], "grandchild")
    assert grandchild.meta.parent_session == "child"
    assert grandchild.events == parent.events[: ends[0] + 1]
    assert grandchild.events[0] is parent.events[0]
    assert (
        grandchild.derive_messages()
        == Session.from_events("r", parent.events[: ends[0] + 1]).derive_messages()
    )


def test_forking_does_not_copy_or_replay_the_parent() -> None:
    """O(1) fork: the child points at the parent's storage and folds lazily."""
    parent, _, ends = three_turns(open_last=False)
    child = parent.fork(ends[0], "child")
    assert child._log._base is parent._log  # structural sharing, no copy
    assert child._state is None  # nothing replayed until first use
    assert child.header() == HEADER
    assert child._state is not None
