"""Properties of compaction (docs/spec/compaction.md §7.2–§7.3): tool-pair-balanced, head-anchored
regions that never reach into the open step, under random tool-call layouts; and a
cancellation landing anywhere in the summarizer stream leaves exactly one error end and
the surface as it was."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import trio
from helpers import open_runtime, types_of
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import LogBuilder

from actorloop.actors.compaction import (
    COMPACTION_SOURCE,
    CompactionActor,
    balanced_cut,
    is_summary,
)
from actorloop.runtime import AgentOptions, CompactionConfig, Message, Text
from actorloop.runtime.log.request import Request
from actorloop.runtime.log.session import Session
from actorloop.runtime.log.surface import project
from actorloop.runtime.log.tokens import estimate_message
from actorloop.runtime.model.chunks import BlockEnd, BlockStart, Finish, StreamChunk, TextDelta
from actorloop.runtime.model.events import (
    APPEND,
    CompactionEnd,
    ContextMessage,
    Replace,
    UserMessage,
)
from actorloop.runtime.model.messages import Source, ToolCall, ToolResult
from actorloop.runtime.testing import ScriptedProvider

Nodes = list[tuple[int, Message | None]]

IDS = ("a", "b", "c", "d")  # few ids: the same id comes back in later steps
lengths = st.integers(min_value=0, max_value=240)


def pairs_of(nodes: Nodes) -> list[tuple[int, int]]:
    """(call position, result position): each result answers the latest earlier call with
    its id that is still unanswered."""
    open_calls: dict[str, list[int]] = {}
    pairs = []
    for index, (_seq, message) in enumerate(nodes):
        if message is None:
            continue
        for block in message.content:
            if isinstance(block, ToolCall):
                open_calls.setdefault(block.id, []).append(index)
            elif isinstance(block, ToolResult) and open_calls.get(block.tool_call_id):
                pairs.append((open_calls[block.tool_call_id].pop(), index))
    return pairs


def balanced(nodes: Nodes, cut: int) -> bool:
    return not any(call < cut <= result for call, result in pairs_of(nodes))


def reference_cut(nodes: Nodes, cut: int) -> int:
    return max(c for c in range(cut + 1) if balanced(nodes, c))


# ---------------------------------------------------------------- layouts


@st.composite
def step_layouts(draw: st.DrawFn) -> Nodes:
    """Surface nodes shaped like loop steps: user/context text, an assistant message with
    tool calls (ids unique within the step, reused across steps), then results for some of
    them in any order, maybe with text between; plus assistant messages with no content."""
    nodes: Nodes = []

    def add(message: Message | None) -> None:
        nodes.append((len(nodes) * 3 + 1, message))

    for _ in range(draw(st.integers(min_value=0, max_value=6))):
        kind = draw(st.sampled_from(["text", "step", "step", "empty"]))
        if kind == "text":
            add(Message.user("t" * draw(lengths)))
        elif kind == "empty":
            add(None)
        else:
            ids = draw(st.lists(st.sampled_from(IDS), unique=True, max_size=3))
            text = [Text("x" * draw(lengths))] if draw(st.booleans()) else []
            calls = [ToolCall(call_id, "echo", "{}") for call_id in ids]
            add(Message("assistant", (*text, *calls)))
            answered = draw(st.permutations(ids))
            answered = answered[: draw(st.integers(min_value=0, max_value=len(answered)))]
            for call_id in answered:
                if draw(st.booleans()):
                    add(Message.user("between"))
                result = ToolResult(call_id, (Text("r" * draw(lengths)),))
                add(Message("user", (result,)))
    return nodes


@settings(max_examples=300, deadline=None)
@given(step_layouts(), st.data())
def test_balanced_cut_is_the_nearest_balanced_cut_toward_the_head(
    nodes: Nodes, data: st.DataObject
) -> None:
    start = data.draw(st.integers(min_value=0, max_value=len(nodes)))
    cut = balanced_cut(nodes, start)
    assert 0 <= cut <= start
    assert balanced(nodes, cut), "a tool call is separated from its result"
    assert cut == reference_cut(nodes, start)


def test_balanced_cut_with_an_id_reused_in_a_later_step() -> None:
    call = Message("assistant", (ToolCall("c1", "echo", "{}"),))
    result = Message("user", (ToolResult("c1", (Text("out"),)),))
    nodes: Nodes = [(1, call), (2, result), (3, call), (4, result)]
    assert balanced_cut(nodes, 3) == 2
    assert balanced_cut(nodes, 4) == 4
    assert balanced_cut(nodes, 1) == 0


@st.composite
def sessions(draw: st.DrawFn) -> Session:
    """A valid log: turns of user text and tool steps (ids reused across steps), maybe a
    compaction summary at the head, maybe ending inside an open step."""
    b = LogBuilder()
    n_turns = draw(st.integers(min_value=1, max_value=4))
    open_at_end = draw(st.booleans())
    for turn in range(n_turns):
        b.turn_start()
        b.user("u" * draw(lengths))
        for _ in range(draw(st.integers(min_value=0, max_value=2))):
            _step(b, draw, close=True)
        if turn == 0 and b.nodes and draw(st.booleans()):
            last = draw(st.integers(min_value=0, max_value=len(b.nodes) - 1))
            shadowed = b.nodes[: last + 1]
            if balanced(_nodes_of(b), last + 1):
                b.add(
                    "user/message",
                    UserMessage((Text("summary " + "s" * draw(lengths)),), COMPACTION_SOURCE),
                    Replace(shadowed[0], shadowed[-1]),
                    shadowed,
                )
        if turn == n_turns - 1 and open_at_end:
            _step(b, draw, close=False)
            return Session.from_events("s", b.events)
        b.turn_end()
    return Session.from_events("s", b.events)


def _nodes_of(b: LogBuilder) -> Nodes:
    return [(seq, project(b.events[seq])) for seq in b.nodes]


def _step(b: LogBuilder, draw: st.DrawFn, *, close: bool) -> None:
    b.step_start()
    ids = draw(st.lists(st.sampled_from(IDS), unique=True, max_size=3))
    b.assistant("x" * draw(lengths), [(call_id, "echo") for call_id in ids])
    calls = {call_id: b.tool_call(call_id).seq for call_id in ids}
    answered = list(draw(st.permutations(ids)))
    if not close:
        answered = answered[: draw(st.integers(min_value=0, max_value=len(answered)))]
    for call_id in answered:
        b.tool_result(call_id, "r" * draw(lengths), calls[call_id])
    if draw(st.booleans()):
        b.add("context/message", ContextMessage((Text("ctx"),), Source.of_plugin("p")), APPEND)
    if close:
        b.step_end()


@settings(max_examples=300, deadline=None)
@given(sessions(), st.integers(min_value=0, max_value=400))
def test_select_region_is_head_anchored_balanced_and_before_the_open_step(
    session: Session, retain: int
) -> None:
    loop: Any = SimpleNamespace(session=session)
    region = CompactionActor().select_region(loop, retain)
    surface = session.surface
    nodes = [(seq, project(session.event(seq))) for seq in surface]
    step_start = max(
        (e.seq for e in session.events if e.type == "step/start"),
        default=-1,
    )
    limit = len(nodes)
    if session.open_step is not None:
        limit = sum(1 for seq in surface if seq < step_start)
    # the reference: walk from the tail keeping >= retain tokens, then balance
    kept, cut = 0, limit
    while cut > 0 and kept < retain:
        message = nodes[cut - 1][1]
        kept += estimate_message(message) if message is not None else 0
        cut -= 1
    expected = reference_cut(nodes, cut)
    lone_summary = expected == 1 and is_summary(session.event(surface[0]))
    if expected == 0 or lone_summary:
        assert region is None
        return
    assert region is not None
    count = len(region.seqs)
    assert region.seqs == surface[:count]  # head-anchored, contiguous
    assert count == expected
    assert balanced(nodes, count)
    if session.open_step is not None:
        assert all(seq < step_start for seq in region.seqs)
    tail = [m for _, m in nodes[count:] if m is not None]
    assert sum(estimate_message(m) for m in tail) >= retain
    messages = tuple(m for _, m in nodes[:count] if m is not None)
    assert region.messages == messages
    assert region.tokens == sum(estimate_message(m) for m in messages)


# ---------------------------------------------------------------- cancellation anywhere


def _summary_chunks() -> list[StreamChunk]:
    pieces = [f"piece {index} " for index in range(6)]
    return [
        BlockStart(0, "text"),
        *(TextDelta(0, piece) for piece in pieces),
        BlockEnd(0),
        Finish("stop"),
    ]


@settings(max_examples=25, deadline=None)
@given(
    st.integers(min_value=0, max_value=len(_summary_chunks())),
    st.sampled_from(["cancel", "dispose"]),
)
async def test_a_cancel_anywhere_in_the_summarizer_stream_fails_closed(
    point: int, how: str
) -> None:
    await _cancel_at(point, how)


async def _cancel_at(point: int, how: str) -> None:
    holder: dict[str, Any] = {}

    def summarizer(request: Request) -> Iterator[StreamChunk]:
        for index, chunk in enumerate(_summary_chunks()):
            if index == point:
                holder["stop"]()
            yield chunk
        if point == len(_summary_chunks()):
            holder["stop"]()

    prefix = Message.user("prefix " + "p" * 2400)

    async def prefix_listener(agent: Any, value: Any, next: Any) -> Any:
        return (prefix, *await next())

    marks: list[Any] = []

    def observe(agent: Any, event: Any) -> None:
        if event.type in ("compaction/start", "compaction/end"):
            marks.append((agent.session.replace_generation, agent.session.derive_messages()))

    provider = ScriptedProvider(
        [
            [BlockStart(0, "text"), TextDelta(0, "a" * 400), BlockEnd(0), Finish("stop")],
            summarizer,
        ]
    )
    options = AgentOptions(
        model="m", context_window=1000, compaction=CompactionConfig(retain_tokens=100)
    )
    async with open_runtime(provider) as rt, trio.open_nursery() as nursery:
        rt.on("agent/session-prefix", prefix_listener)
        agent = await rt.spawn(options)
        agent.on("session/event", observe)
        if how == "cancel":
            holder["stop"] = agent.cancel
        else:
            holder["stop"] = lambda: nursery.start_soon(agent.dispose)
        assert (await agent.send("u" * 400)).reason == "completed"
        result = await agent.send("v" * 400)
        session = agent.session
    assert result.reason == ("aborted" if how == "cancel" else "disposed")
    kinds = types_of(session.events)
    assert kinds.count("compaction/start") == 1 and kinds.count("compaction/end") == 1
    assert "compaction/summary" not in kinds
    end = next(e.data for e in session.events if e.type == "compaction/end")
    assert isinstance(end, CompactionEnd) and end.error is not None
    assert end.error.code == "CANCELLED"
    assert marks[0] == marks[1] and session.replace_generation == 0
    assert kinds[-2:] == ["compaction/end", "turn/end"]
    assert [m.role for m in session.derive_messages()] == ["user", "assistant", "user"]
    assert all(isinstance(m.content[0], Text) for m in session.derive_messages())
    assert session.derive_messages()[0] == Message("user", (Text("u" * 400),))
