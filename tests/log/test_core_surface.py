"""Surface and derivation (docs/spec/session-log.md §5): Replace rules, tool/result rewrites, the
projection of each node type, incremental derivation == from-scratch replay, boundary
snapshots and the request digest chain."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from strategies import HEADER, LogBuilder

from actorloop.runtime.errors import SessionValidationError
from actorloop.runtime.log.request import digest_of, request_digest
from actorloop.runtime.log.session import Session
from actorloop.runtime.log.surface import chain_of
from actorloop.runtime.model.events import (
    APPEND,
    AssistantMessage,
    ContextMessage,
    Replace,
    SteeringMessage,
    ToolError,
    ToolResultEvent,
    UserMessage,
)
from actorloop.runtime.model.messages import (
    USER,
    Message,
    Reasoning,
    Source,
    Text,
    ToolCall,
    ToolResult,
)


def replay(session: Session) -> tuple[Message, ...]:
    return Session.from_events("replay", session.events).derive_messages()


def three_users() -> tuple[Session, LogBuilder]:
    """turn 1 open with user messages a (seq 1), b (2), c (3)."""
    b = LogBuilder()
    b.turn_start()
    for text in "abc":
        b.user(text)
    return Session.from_events("s", b.events), b


def state(session: Session) -> tuple[Any, ...]:
    return (
        session.events,
        session.derive_messages(),
        session.surface,
        session.replace_generation,
        session.header(),
    )


def reject(session: Session, fragment: str, *args: Any, **kwargs: Any) -> None:
    before = state(session)
    with pytest.raises(SessionValidationError, match=fragment) as info:
        session.append(*args, **kwargs)
    assert info.value.seq == len(session)
    assert state(session) == before


# -------------------------------------------------------------------------- derivation


def test_each_surface_type_projects_to_one_message() -> None:
    b = LogBuilder()
    b.turn_start()
    b.user("u")
    b.context("ctx", {"k": 1})
    b.steering("steer")
    b.step_start()
    chunk = b.chunk("hel")
    b.assistant("hello", [("c1", "echo")], [chunk.seq])
    call = b.tool_call("c1")
    b.tool_result("c1", "out", call.seq, is_error=True)
    b.step_end()
    b.turn_end()
    session = Session.from_events("s", b.events)
    assert session.derive_messages() == (
        Message("user", (Text("u"),)),
        Message("user", (Text("ctx"),)),
        Message("user", (Text("steer"),)),
        Message("assistant", (Text("hello"), ToolCall("c1", "echo", "{}"))),
        Message("user", (ToolResult("c1", (Text("out"),), True),)),
    )


def test_assistant_message_with_empty_content_is_skipped_but_is_a_node() -> None:
    b = LogBuilder()
    b.turn_start()
    b.user("u")
    b.step_start()
    usage_only = b.assistant("")
    b.step_end()
    b.turn_end()
    session = Session.from_events("s", b.events)
    assert session.derive_messages() == (Message.user("u"),)
    assert session.surface == (1, usage_only.seq)


def test_nodes_are_projected_independently_without_merging() -> None:
    b = LogBuilder()
    b.turn_start()
    b.user("one")
    b.user("two")
    b.context("three")
    session = Session.from_events("s", b.events)
    assert [m.text for m in session.derive_messages()] == ["one", "two", "three"]
    assert all(m.role == "user" for m in session.derive_messages())


def test_context_and_steering_keep_their_blocks_verbatim() -> None:
    session, _ = three_users()
    blocks = (Text("x"), Reasoning("r", "sig"), Text("y"))
    session.append(
        "context/message", ContextMessage(blocks, Source.of_plugin("p")), surface_op=APPEND
    )
    session.append("steering/message", SteeringMessage(1, blocks, USER), surface_op=APPEND)
    assert session.derive_messages()[-2:] == (Message("user", blocks), Message("user", blocks))


def test_non_surface_events_derive_nothing() -> None:
    b = LogBuilder()
    b.turn_start()
    b.step_start()
    b.chunk("x")
    b.header(HEADER)
    b.step_end()
    b.turn_end()
    session = Session.from_events("s", b.events)
    assert session.derive_messages() == ()
    assert session.surface == ()


def test_derived_messages_are_frozen_and_shared() -> None:
    session, _ = three_users()
    first = session.derive_messages()
    assert session.derive_messages() is first  # cached: no new tuple without a change
    message = first[0]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        message.role = "assistant"  # type: ignore[misc]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        message.content[0].text = "changed"  # type: ignore[misc]
    with pytest.raises(TypeError):
        message.content[0] = Text("x")  # type: ignore[index]
    session.append("user/message", UserMessage((Text("d"),), USER), surface_op=APPEND)
    second = session.derive_messages()
    assert second[:3] == first and second[0] is first[0]  # earlier projections are reused
    assert len(first) == 3  # the old tuple is unchanged


# ----------------------------------------------------------------------------- replace


def test_replace_swaps_the_span_for_the_new_node() -> None:
    session, _ = three_users()
    summary = session.append(
        "user/message",
        UserMessage((Text("summary"),), USER),
        surface_op=Replace(1, 2),
        source_event_seqs=(1, 2),
    )
    assert session.surface == (summary.seq, 3)
    assert session.replace_generation == 1
    assert [m.text for m in session.derive_messages()] == ["summary", "c"]
    # The shadowed events stay in the log.
    assert [e.seq for e in session.events] == [0, 1, 2, 3, 4]
    assert session.events[1].data == UserMessage((Text("a"),), USER)
    assert session.derive_messages() == replay(session)


def test_replace_of_a_single_node_and_of_the_whole_surface() -> None:
    session, _ = three_users()
    session.append(
        "context/message",
        ContextMessage((Text("b2"),), USER),
        surface_op=Replace(2, 2),
        source_event_seqs=(2,),
    )
    assert [m.text for m in session.derive_messages()] == ["a", "b2", "c"]
    session.append(
        "user/message",
        UserMessage((Text("all"),), USER),
        surface_op=Replace(1, 3),
        source_event_seqs=(1, 3, 4, 0),  # may name more than the shadowed seqs
    )
    assert session.surface == (5,)
    assert session.replace_generation == 2
    assert [m.text for m in session.derive_messages()] == ["all"]
    assert session.derive_messages() == replay(session)


def test_replace_endpoints_must_be_current_nodes() -> None:
    session, _ = three_users()
    user = UserMessage((Text("s"),), USER)
    reject(
        session,
        "user/message: replace names seq 0, which is not a current node",
        "user/message",
        user,
        surface_op=Replace(0, 2),
        source_event_seqs=(0, 1, 2),
    )
    reject(
        session,
        "replace names seq 9, which is not a current node",
        "user/message",
        user,
        surface_op=Replace(1, 9),
        source_event_seqs=(1, 2, 3),
    )
    session.append("user/message", user, surface_op=Replace(1, 1), source_event_seqs=(1,))
    # seq 1 is shadowed now: no longer a current node.
    reject(
        session,
        "replace names seq 1, which is not a current node",
        "user/message",
        user,
        surface_op=Replace(1, 3),
        source_event_seqs=(1, 2, 3),
    )


def test_replace_start_must_not_come_after_end() -> None:
    session, _ = three_users()
    reject(
        session,
        "replace start 3 comes after end 1",
        "user/message",
        UserMessage((Text("s"),), USER),
        surface_op=Replace(3, 1),
        source_event_seqs=(1, 2, 3),
    )


def test_replace_provenance_must_include_every_shadowed_seq() -> None:
    session, _ = three_users()
    reject(
        session,
        r"provenance must include every shadowed seq, missing \[2\]",
        "user/message",
        UserMessage((Text("s"),), USER),
        surface_op=Replace(1, 3),
        source_event_seqs=(1, 3),
    )
    reject(
        session,
        r"missing \[1, 2, 3\]",
        "user/message",
        UserMessage((Text("s"),), USER),
        surface_op=Replace(1, 3),
    )


def test_replace_order_follows_the_surface_not_the_seqs() -> None:
    """After a replace the summary (a high seq) sits before older nodes."""
    session, _ = three_users()
    session.append(
        "user/message",
        UserMessage((Text("s"),), USER),
        surface_op=Replace(1, 2),
        source_event_seqs=(1, 2),
    )
    assert session.surface == (4, 3)
    reject(
        session,
        "replace start 3 comes after end 4",
        "user/message",
        UserMessage((Text("x"),), USER),
        surface_op=Replace(3, 4),
        source_event_seqs=(3, 4),
    )
    session.append(
        "user/message",
        UserMessage((Text("t"),), USER),
        surface_op=Replace(4, 3),
        source_event_seqs=(3, 4),
    )
    assert session.surface == (5,)
    assert session.derive_messages() == (Message.user("t"),) == replay(session)


def _tool_session() -> tuple[Session, int, int]:
    b = LogBuilder()
    b.turn_start()
    b.user("u")
    b.step_start()
    b.assistant("", [("c1", "echo"), ("c2", "grep")])
    first = b.tool_call("c1")
    r1 = b.tool_result("c1", "a long output", first.seq)
    second = b.tool_call("c2", "grep")
    r2 = b.tool_result("c2", "other output", second.seq, is_error=True)
    b.step_end()
    b.turn_end()
    b.turn_start()
    return Session.from_events("s", b.events), r1.seq, r2.seq


def test_tool_result_replacement_rewrites_content_only() -> None:
    session, r1, _ = _tool_session()
    old = session.event(r1).data
    assert isinstance(old, ToolResultEvent)
    pruned = session.append(
        "tool/result",
        attrs.evolve(old, content=(Text("[pruned]"),)),
        surface_op=Replace(r1, r1),
        source_event_seqs=(r1,),
    )
    assert session.replace_generation == 1
    assert pruned.seq in session.surface and r1 not in session.surface
    assert session.derive_messages()[2] == Message(
        "user", (ToolResult("c1", (Text("[pruned]"),), False),)
    )
    assert session.derive_messages() == replay(session)


@pytest.mark.parametrize(
    ("change", "value"),
    [
        ("call_id", "c9"),
        ("is_error", True),
        ("turn", 2),
        ("step", 2),
        ("error", ToolError("echo", "X")),
    ],
)
def test_tool_result_replacement_may_change_only_content(change: str, value: Any) -> None:
    session, r1, _ = _tool_session()
    old = session.event(r1).data
    assert isinstance(old, ToolResultEvent)
    changed = attrs.evolve(old, content=(Text("x"),), **{change: value})
    reject(
        session,
        "tool/result replacement may change only content",
        "tool/result",
        changed,
        surface_op=Replace(r1, r1),
        source_event_seqs=(r1,),
    )


def test_tool_result_replacement_must_rewrite_exactly_one_tool_result() -> None:
    session, r1, r2 = _tool_session()
    old = session.event(r1).data
    assert isinstance(old, ToolResultEvent)
    new = attrs.evolve(old, content=(Text("x"),))
    reject(
        session,
        "tool/result replacement must rewrite exactly one tool/result node",
        "tool/result",
        new,
        surface_op=Replace(r1, r2),
        source_event_seqs=(r1, r2),
    )
    reject(
        session,
        "must rewrite exactly one tool/result node",
        "tool/result",
        new,
        surface_op=Replace(1, 1),  # the user message
        source_event_seqs=(1,),
    )


def test_a_summary_may_replace_tool_pairs() -> None:
    session, _r1, r2 = _tool_session()
    session.append(
        "user/message",
        UserMessage((Text("summary"),), USER),
        surface_op=Replace(1, r2),
        source_event_seqs=tuple(session.surface),
    )
    assert [m.text for m in session.derive_messages()] == ["summary"]
    assert session.derive_messages() == replay(session)


# ----------------------------------------------------- incremental == from scratch


def test_incremental_derivation_equals_replay_after_every_append_and_replace() -> None:
    b = LogBuilder()
    session = Session.create("s")
    cursor = 0

    def sync() -> None:
        nonlocal cursor
        for event in b.events[cursor:]:
            session.append_event(event)
            assert session.derive_messages() == replay(session)
        cursor = len(b.events)

    b.turn_start()
    b.user("a")
    sync()
    b.step_start()
    b.assistant("x", [("c1", "echo")])
    call = b.tool_call("c1")
    result = b.tool_result("c1", "big", call.seq)
    b.step_end()
    b.context("late")
    sync()
    b.prune(result.seq, "small")
    sync()
    b.replace(0, 1, "summary")  # the cached derivation is partly invalidated
    sync()
    b.user("after")
    b.replace(2, 3, "tail")  # replace beyond the cached prefix
    b.turn_end()
    sync()
    # Derive only at the end too (nothing cached in between).
    assert Session.from_events("fresh", b.events).derive_messages() == session.derive_messages()


def test_replace_inside_an_uncached_tail_keeps_the_cached_prefix() -> None:
    session, _ = three_users()
    cached = session.derive_messages()
    session.append(
        "user/message",
        UserMessage((Text("c2"),), USER),
        surface_op=Replace(3, 3),
        source_event_seqs=(3,),
    )
    derived = session.derive_messages()
    assert derived[:2] == cached[:2] and derived[0] is cached[0]
    assert derived == replay(session)


# ---------------------------------------------------------- boundary and digests


def test_boundary_snapshot_is_the_derivation_over_the_prefix_of_the_log() -> None:
    b = LogBuilder()
    session = Session.create("s")
    for event in (b.turn_start(), b.user("hi"), b.context("c")):
        session.append_event(event)
    snapshot = session.derive_messages()
    step = b.step_start()
    session.append_event(step)
    assert snapshot == Session.from_events("r", session.events[: step.seq]).derive_messages()
    session.append_event(b.context("late"))  # joins the next request, not this one
    assert snapshot == Session.from_events("r", session.events[: step.seq]).derive_messages()
    assert session.derive_messages() != snapshot


def test_history_chain_is_incremental_and_matches_from_scratch_digests() -> None:
    session, b = three_users()
    prefix = (Message.user("opener"),)
    first = request_digest(HEADER, chain_of(prefix), session.history_chain())
    assert first == digest_of(HEADER, prefix, session.derive_messages())
    for event in (b.user("d"), b.replace(1, 2, "summary"), b.user("e")):
        session.append_event(event)
        digest = request_digest(HEADER, chain_of(prefix), session.history_chain())
        assert digest == digest_of(HEADER, prefix, session.derive_messages())
        assert digest == digest_of(HEADER, prefix, replay(session))
        assert digest != first
    # The digest depends on the header, the prefix and every message.
    assert digest_of(HEADER, (), session.derive_messages()) != digest
    other = attrs.evolve(HEADER, system="else")
    assert digest_of(other, prefix, session.derive_messages()) != digest
    assert len(digest) == 64 and int(digest, 16) >= 0


def test_assistant_message_may_carry_provenance_of_its_chunks() -> None:
    b = LogBuilder()
    b.turn_start()
    b.step_start()
    chunks = [b.chunk("a").seq, b.chunk("b").seq]
    message = b.assistant("ab", (), chunks)
    session = Session.from_events("s", b.events)
    assert session.event(message.seq).source_event_seqs == tuple(chunks)
    assert isinstance(session.event(message.seq).data, AssistantMessage)


def test_compaction_transaction_shape_is_accepted() -> None:
    """docs/spec/compaction.md §7.6: start, summary, a user/message Replace(first, last)
    with provenance [start, summary, *shadowed], end - all between steps of an open turn."""
    from actorloop.runtime.model.events import CompactionEnd, CompactionStart, CompactionSummary

    session, _, _ = _tool_session()  # turn 2 is open, no step open
    shadowed = session.surface[:-1]  # everything but the last node
    start = session.append("compaction/start", CompactionStart("k1", 2))
    summary = session.append(
        "compaction/summary",
        CompactionSummary("k1", "the summary", tuple(shadowed), 123, "p", "m", 512),
    )
    session.append(
        "user/message",
        UserMessage((Text("[summary]"),), Source.of_plugin("compaction")),
        surface_op=Replace(shadowed[0], shadowed[-1]),
        source_event_seqs=(start.seq, summary.seq, *shadowed),
    )
    session.append("compaction/end", CompactionEnd("k1", 2))
    assert session.replace_generation == 1
    assert session.derive_messages()[0] == Message.user("[summary]")
    assert session.derive_messages() == replay(session)
    with pytest.raises(SessionValidationError, match="names turn 3 but the open turn is 2"):
        session.append("compaction/end", CompactionEnd("k1", 3))


def test_prune_shape_is_accepted_between_steps() -> None:
    from actorloop.runtime.model.events import CompactionPrune

    session, r1, _ = _tool_session()
    old = session.event(r1).data
    assert isinstance(old, ToolResultEvent)
    session.append("compaction/prune", CompactionPrune((r1,), 40))
    session.append(
        "tool/result",
        attrs.evolve(old, content=(Text("head\n[... pruned ...]\ntail"),)),
        surface_op=Replace(r1, r1),
        source_event_seqs=(r1,),
    )
    assert session.derive_messages() == replay(session)
