"""Usage totals over real session logs: per turn, per session (a fork's seed left out), the
loop's model calls apart from the compaction summarizer's, and the cached fraction."""

from __future__ import annotations

import trio
from helpers import open_runtime
from hypothesis import given, settings
from strategies import valid_logs

from actorloop.runtime.control.options import AgentOptions, CompactionConfig, Tool
from actorloop.runtime.log.summary import summarize
from actorloop.runtime.log.usage import (
    UsageTotals,
    cached_fraction,
    inherited_usage,
    session_usage,
    turn_usage,
    usage_by_turn,
    usage_of,
)
from actorloop.runtime.model.chunks import (
    BlockEnd,
    BlockStart,
    Finish,
    StreamChunk,
    TextDelta,
    TokenUsage,
    UsageReport,
)
from actorloop.runtime.model.events import AssistantMessage, CompactionSummary, SessionEvent
from actorloop.runtime.providers.scripted import HANG, ScriptedProvider, reply, tool_call

U1 = TokenUsage(input=100, output=10, cache_read=300, cache_write=0)
U2 = TokenUsage(input=20, output=5, cache_read=400, cache_write=80, reasoning=2)
U3 = TokenUsage(input=7, output=30, cache_read=500)
SUMMARY = TokenUsage(input=900, output=40, cache_write=100)


async def _lookup(args: dict[str, object], ctx: object) -> str:
    return "found it"


LOOKUP = Tool("lookup", "Look a thing up.", {"type": "object"}, _lookup)
OPTIONS = AgentOptions(
    model="m", tools=(LOOKUP,), compaction=CompactionConfig(auto=False, retain_tokens=1)
)


def with_usage(chunks: tuple[StreamChunk, ...], usage: TokenUsage) -> tuple[StreamChunk, ...]:
    """The scripted answer with its usage report replaced by `usage`."""
    return tuple(UsageReport(usage) if isinstance(c, UsageReport) else c for c in chunks)


def silent(text: str) -> tuple[StreamChunk, ...]:
    """An answer from a provider that reports no usage at all."""
    return (BlockStart(0, "text"), TextDelta(0, text), BlockEnd(0), Finish("stop"))


async def test_usage_per_turn_and_per_session_over_a_real_log() -> None:
    provider = ScriptedProvider(
        [
            reply("one", U1),
            with_usage(tool_call("c1", "lookup", {"q": "x"}), U2),
            reply("two", U3),
            reply("the summary", SUMMARY),  # the summarizer's call (manual compaction)
            silent("three"),
        ]
    )
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(OPTIONS)
        await agent.send("first")
        await agent.send("second, with a tool")
        assert (await agent.compact()).reason == "completed"
        await agent.send("third")
        events = agent.session.events
        meta = agent.session.meta

    assert [e.data for e in events if isinstance(e.data, CompactionSummary)], "no compaction ran"
    per_turn = usage_by_turn(events)
    assert [t.turn for t in per_turn] == [1, 2, 3, 4]
    assert per_turn[0].usage == UsageTotals(model=U1, model_calls=1)
    assert per_turn[1].usage == UsageTotals(model=U2 + U3, model_calls=2)
    assert per_turn[2].usage == UsageTotals(compaction=SUMMARY, compaction_calls=1)
    assert per_turn[3].usage == UsageTotals(model_calls=1, unreported=1)
    for turn in per_turn:
        assert turn_usage(events, turn.turn) == turn.usage
    assert turn_usage(events, 9) == UsageTotals()

    total = session_usage(meta, events)
    assert total.model == U1 + U2 + U3
    assert total.compaction == SUMMARY
    assert (total.model_calls, total.compaction_calls, total.unreported) == (4, 1, 1)
    assert total.total == U1 + U2 + U3 + SUMMARY
    billed = sum(u.input + u.cache_read + u.cache_write for u in (U1, U2, U3, SUMMARY))
    assert total.cached_fraction == (300 + 400 + 500) / billed
    assert sum((t.usage for t in per_turn), UsageTotals()) == total


async def test_a_fork_counts_only_what_it_used_itself() -> None:
    provider = ScriptedProvider([reply("parent", U1), reply("child", U3)])
    async with open_runtime(provider) as rt:
        parent = await rt.spawn(OPTIONS)
        await parent.send("hello")
        child = await rt.fork(parent.id)
        await child.send("and you?")
        seeded, meta = child.session.events, child.session.meta
    assert meta.seed_length is not None and meta.seed_length > 0
    # the whole log holds the parent's turn too; the session's own usage does not
    assert usage_of(seeded).model == U1 + U3
    assert session_usage(meta, seeded) == UsageTotals(model=U3, model_calls=1)
    assert [t.turn for t in usage_by_turn(seeded[meta.seed_length :])] == [2]


async def test_a_fork_summary_shows_its_own_and_its_inherited_work_apart() -> None:
    provider = ScriptedProvider([reply("one", U1), reply("two", U2), reply("mine", U3)])
    async with open_runtime(provider) as rt:
        parent = await rt.spawn(OPTIONS)
        await parent.send("hello")
        await parent.send("again")
        child = await rt.fork(parent.id)
        await child.send("and you?")
        meta, events = child.session.meta, child.session.events
        root = summarize(parent.session.meta, parent.session.events)
    seed = meta.seed_length
    assert seed is not None
    summary = summarize(meta, events)
    assert (summary.turns, summary.inherited_turns, summary.own_turns) == (3, 2, 1)
    assert (summary.inherited_events, summary.own_events) == (seed, len(events) - seed)
    assert summary.usage == UsageTotals(model=U3, model_calls=1)
    assert summary.inherited_usage == UsageTotals(model=U1 + U2, model_calls=2)
    assert inherited_usage(meta, events) + session_usage(meta, events) == usage_of(events)
    # a session that is no fork inherits nothing
    assert (root.inherited_turns, root.own_turns, root.inherited_usage) == (0, 2, UsageTotals())


async def test_an_open_turn_counts_what_it_used_so_far() -> None:
    provider = ScriptedProvider([with_usage(tool_call("c1", "lookup"), U2), HANG])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(OPTIONS)
        streaming = trio.Event()

        def on_event(_agent: object, event: SessionEvent) -> None:
            if event.type == "assistant/chunk" and event.data.step == 2:  # the HANG call
                streaming.set()

        agent.on("session/event", on_event)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.send, "go")
            await streaming.wait()
            live = agent.session.events
            assert any(e.type == "tool/result" for e in live)
            agent.cancel("enough")
    [turn] = usage_by_turn(live)
    assert turn.turn == 1 and turn.usage == UsageTotals(model=U2, model_calls=1)
    assert turn_usage(live, 1) == turn.usage


def test_cached_fraction_is_none_without_billed_input() -> None:
    assert cached_fraction(TokenUsage()) is None
    assert cached_fraction(TokenUsage(output=50)) is None
    assert cached_fraction(TokenUsage(input=1, cache_read=3)) == 0.75
    assert UsageTotals().cached_fraction is None


def _model_usage(events: tuple[SessionEvent, ...]) -> TokenUsage:
    total = TokenUsage()
    for event in events:
        if isinstance(event.data, AssistantMessage) and event.data.usage is not None:
            total += event.data.usage
    return total


@settings(max_examples=150, deadline=None)
@given(valid_logs())
def test_turns_partition_the_session_usage(events: tuple[SessionEvent, ...]) -> None:
    per_turn = usage_by_turn(events)
    whole = usage_of(events)
    assert whole.model == _model_usage(events)
    assert sum((t.usage for t in per_turn), UsageTotals()) == whole
    for turn in per_turn:
        assert turn_usage(events, turn.turn) == turn.usage


@settings(max_examples=60, deadline=None)
@given(valid_logs())
def test_the_session_keeps_its_own_usage_as_it_appends(events: tuple[SessionEvent, ...]) -> None:
    """Issue 38: `Session.usage()` is kept incrementally, equal to the totals recomputed
    from the log, for a replayed session, one appended event by event, and a fork child."""
    from actorloop.runtime.log.session import Session

    replayed = Session.from_events("u", events)
    assert replayed.usage() == session_usage(replayed.meta, events)
    appended = Session.create("a")
    for event in events:
        appended.append_event(event)
        assert appended.usage() == usage_of(appended.events)
    ends = [event.seq for event in events if event.type == "turn/end"]
    if ends:
        child = replayed.fork(ends[0])
        assert child.usage() == UsageTotals()
        assert child.usage() == session_usage(child.meta, child.events)
