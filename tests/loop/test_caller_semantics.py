"""Trio-native caller semantics (docs/spec/loop.md §7.8–§7.9): cancelling the task that awaits
`send()`/`compact()` cancels that item only; provider streams are closed inside their step;
`TurnResult` carries the reply, usage and steps; background work is owned by its agent; bad
set-up is refused at the call."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
import trio
import trio.testing
from helpers import open_runtime, types_of

from actorloop.runtime import (
    Agent,
    AgentOptions,
    CompactionConfig,
    Message,
    ProviderError,
    SessionEvent,
    TokenUsage,
    Tool,
    TurnFailed,
)
from actorloop.runtime.log.request import Request
from actorloop.runtime.model.chunks import BlockStart, Finish, StreamChunk, TextDelta, UsageReport
from actorloop.runtime.model.events import ToolResultEvent, TurnEnd, UserMessage
from actorloop.runtime.providers.base import ModelInfo
from actorloop.runtime.testing import HANG, EchoProvider, ScriptedProvider, reply, tool_call

OPTIONS = AgentOptions(model="m")


def turn_ends(events: Sequence[SessionEvent]) -> list[TurnEnd]:
    return [e.data for e in events if isinstance(e.data, TurnEnd)]


def user_texts(events: Sequence[SessionEvent]) -> list[str]:
    return [
        "".join(getattr(b, "text", "") for b in e.data.content)
        for e in events
        if isinstance(e.data, UserMessage)
    ]


class Gate:
    """Lets a test hold a seam (a tool, a listener, a provider) until it decides."""

    def __init__(self) -> None:
        self.entered = trio.Event()
        self.release = trio.Event()

    async def hold(self) -> None:
        self.entered.set()
        await self.release.wait()


async def cancelled_send(agent: Agent, text: str, entered: trio.Event) -> bool:
    """Send `text` from a task of its own, cancel that task once `entered` is set, and
    return whether the send raised trio.Cancelled (as a cancelled caller must)."""
    outcome: dict[str, Any] = {}
    async with trio.open_nursery() as nursery:
        scope = trio.CancelScope()

        async def caller() -> None:
            with scope:
                outcome["result"] = await agent.send(text)
            outcome["cancelled"] = scope.cancelled_caught

        nursery.start_soon(caller)
        await entered.wait()
        scope.cancel()
    assert "result" not in outcome, f"a cancelled send returned {outcome.get('result')}"
    return bool(outcome["cancelled"])


# ---------------------------------------------------------------- caller cancellation


async def test_a_caller_cancelled_while_queued_is_removed_and_never_logged() -> None:
    provider = ScriptedProvider([HANG, reply("third")])
    async with open_runtime(provider) as rt, trio.open_nursery() as nursery:
        agent = await rt.spawn(OPTIONS)
        first: list[Any] = []
        third: list[Any] = []

        async def send_into(bucket: list[Any], text: str) -> None:
            bucket.append(await agent.send(text))

        nursery.start_soon(send_into, first, "first (hangs)")
        await trio.testing.wait_all_tasks_blocked()
        queued = trio.Event()

        async def queue_then_signal() -> None:
            await trio.testing.wait_all_tasks_blocked()
            queued.set()

        nursery.start_soon(queue_then_signal)
        assert await cancelled_send(agent, "second (abandoned while queued)", queued)
        nursery.start_soon(send_into, third, "third")
        await trio.testing.wait_all_tasks_blocked()
        # The running turn was not touched by the queued caller's cancellation.
        assert agent.status == "running" and agent.session.open_turn == 1
        agent.cancel("end the hanging turn", keep_inbox=True)
        await agent.wait_idle()
    assert first[0].reason == "aborted" and third[0].reason == "completed"
    texts = user_texts(agent.session.events)
    assert texts == ["first (hangs)", "third"]
    assert [m.history[-1].text for m in provider.requests] == ["first (hangs)", "third"]


async def test_a_caller_cancelled_while_its_turn_runs_aborts_only_that_turn(
    autojump_clock: Any,
) -> None:
    provider = ScriptedProvider([HANG, reply("next")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(OPTIONS)
        with trio.move_on_after(0.05) as scope:
            await agent.send("hangs")
        assert scope.cancelled_caught
        # When the cancelled send raised, its turn was already closed.
        assert agent.session.open_turn is None and agent.status == "idle"
        end = turn_ends(agent.session.events)[-1]
        assert (end.reason.kind, end.reason.reason) == ("aborted", "caller cancelled")
        assert (await agent.send("next")).text == "next"
    assert [e.reason.kind for e in turn_ends(agent.session.events)] == ["aborted", "completed"]


async def test_the_inbox_behind_a_cancelled_caller_runs() -> None:
    gate = Gate()

    async def slow(args: dict[str, Any], ctx: Any) -> str:
        await gate.hold()
        return "slow done"

    tool = Tool("slow", "", {"type": "object"}, slow)
    provider = ScriptedProvider([tool_call("c1", "slow", {}), reply("two"), reply("three")])
    results: dict[str, Any] = {}
    async with open_runtime(provider) as rt, trio.open_nursery() as nursery:
        agent = await rt.spawn(AgentOptions(model="m", tools=(tool,)))

        async def send(text: str) -> None:
            results[text] = await agent.send(text)

        async def queue_two_more() -> None:
            await gate.entered.wait()
            nursery.start_soon(send, "two")
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(send, "three")
            await trio.testing.wait_all_tasks_blocked()
            queued.set()

        queued = trio.Event()
        nursery.start_soon(queue_two_more)
        assert await cancelled_send(agent, "one", queued)
    assert results["two"].reason == "completed" and results["three"].reason == "completed"
    events = agent.session.events
    assert [e.reason.kind for e in turn_ends(events)] == ["aborted", "completed", "completed"]
    result = next(e.data for e in events if isinstance(e.data, ToolResultEvent))
    assert result.is_error and result.error is not None
    assert result.error.code == "TOOL_CANCELLED"
    assert user_texts(events) == ["one", "two", "three"]


async def test_a_caller_cancelled_in_the_prefix_waterfall_leaves_no_composition() -> None:
    gate = Gate()
    compositions: list[str] = []

    async def prefix(agent: Agent, value: Any, next: Any) -> Any:
        compositions.append("started")
        if len(compositions) == 1:
            await gate.hold()
        return (Message.user("opener"), *await next())

    provider = ScriptedProvider([reply("after")])
    async with open_runtime(provider) as rt:
        rt.on("agent/session-prefix", prefix)
        agent = await rt.spawn(OPTIONS)
        assert await cancelled_send(agent, "first", gate.entered)
        assert "step/start" not in types_of(agent.session.events)
        assert provider.requests == []
        result = await agent.send("second")
    assert result.reason == "completed" and compositions == ["started", "started"]
    assert provider.requests[0].prefix == (Message.user("opener"),)
    assert turn_ends(agent.session.events)[0].reason.reason == "caller cancelled"


async def test_a_caller_cancelled_in_compaction_fails_the_compaction_closed() -> None:
    gate = Gate()

    class Summarizing(ScriptedProvider):
        async def stream(self, request: Request) -> AsyncIterator[StreamChunk]:
            if request.one_shot:
                gate.entered.set()
                await trio.sleep_forever()
            async for chunk in super().stream(request):
                yield chunk

    provider = Summarizing([reply("a" * 400), reply("done")], context_window=1000)
    options = AgentOptions(
        model="m", context_window=1000, compaction=CompactionConfig(retain_tokens=10)
    )
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(options)
        assert (await agent.send("u" * 2400)).reason == "completed"
        assert await cancelled_send(agent, "v" * 400, gate.entered)
        kinds = types_of(agent.session.events)
        assert kinds.count("compaction/start") == 1 and "compaction/summary" not in kinds
        end = next(e.data for e in agent.session.events if e.type == "compaction/end")
        assert end.error is not None and end.error.code == "CANCELLED"
        assert turn_ends(agent.session.events)[-1].reason.kind == "aborted"
        assert agent.session.replace_generation == 0


async def test_a_cancelled_compact_caller_removes_its_queued_compaction() -> None:
    provider = ScriptedProvider([HANG])
    async with open_runtime(provider) as rt, trio.open_nursery() as nursery:
        agent = await rt.spawn(OPTIONS)
        nursery.start_soon(agent.send, "hangs")
        await trio.testing.wait_all_tasks_blocked()
        scope = trio.CancelScope()

        async def compact() -> None:
            with scope:
                await agent.compact()

        nursery.start_soon(compact)
        await trio.testing.wait_all_tasks_blocked()
        scope.cancel()
        await trio.testing.wait_all_tasks_blocked()
        agent.cancel("stop the hang")
        await agent.wait_idle()
    assert scope.cancelled_caught
    assert "turn/start" in types_of(agent.session.events)
    assert [e.data.trigger.kind for e in agent.session.events if e.type == "turn/start"] == [
        "message"
    ]


# ---------------------------------------------------------------- streams closed in the step


class CleanupProvider:
    """Streams `chunks`, then (if asked) hangs; records, in its `finally`, the log length
    and whether the step was still open when its cleanup ran."""

    name = "cleanup"

    def __init__(self, chunks: Sequence[StreamChunk], *, hang: bool = False) -> None:
        self.chunks = chunks
        self.hang = hang
        self.agent: Agent | None = None
        self.cleanup: list[tuple[int, bool]] = []

    def model_info(self, model: str) -> ModelInfo | None:
        return None

    async def stream(self, request: Request) -> AsyncIterator[StreamChunk]:
        try:
            for chunk in self.chunks:
                await trio.lowlevel.checkpoint()
                yield chunk
            if self.hang:
                await trio.sleep_forever()
        finally:
            assert self.agent is not None
            self.cleanup.append((len(self.agent.session), self.agent.session.open_step is not None))


def step_end_seq(events: Sequence[SessionEvent]) -> int:
    return next(e.seq for e in events if e.type == "step/end")


@pytest.mark.parametrize("how", ["completion", "cancel", "error"])
async def test_a_provider_stream_is_closed_before_step_end(how: str) -> None:
    chunks: list[StreamChunk] = [BlockStart(0, "text"), TextDelta(0, "hi")]
    if how == "completion":
        chunks += [UsageReport(TokenUsage(1, 1)), Finish("stop")]
    elif how == "error":
        chunks.append(TextDelta(7, "a delta for a block that never started"))
    provider = CleanupProvider(chunks, hang=how == "cancel")
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(OPTIONS)
        provider.agent = agent
        if how == "cancel":

            def observer(a: Any, event: SessionEvent) -> None:
                if event.type == "assistant/chunk" and event.seq == 5:
                    a.cancel("mid-stream")

            agent.on("session/event", observer)
        result = await agent.send("go")
    expected = {"completion": "completed", "cancel": "aborted", "error": "error"}[how]
    assert result.reason == expected
    assert len(provider.cleanup) == 1
    length_at_cleanup, step_open = provider.cleanup[0]
    assert step_open
    assert length_at_cleanup <= step_end_seq(agent.session.events)


# ---------------------------------------------------------------- results


async def test_turn_result_carries_reply_usage_and_steps() -> None:
    async def echo(args: dict[str, Any], ctx: Any) -> str:
        return "echoed"

    provider = ScriptedProvider(
        [
            tool_call("c1", "echo", {"x": 1}),
            reply("the answer", usage=TokenUsage(input=10, output=3, cache_read=5)),
        ]
    )
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(AgentOptions(model="m", tools=(Tool("echo", "", {}, echo),)))
        result = await agent.send("question")
        session_usage = agent.usage()
    assert (result.turn, result.reason, result.steps) == (1, "completed", 2)
    assert result.reply == Message.assistant("the answer") and result.text == "the answer"
    first = next(e.data.usage for e in agent.session.events if e.type == "assistant/message")
    assert result.usage == first + TokenUsage(input=10, output=3, cache_read=5)
    assert session_usage.total == result.usage and session_usage.model_calls == 2
    assert result.raise_for_error() is result


async def test_raise_for_error_raises_turn_failed_with_the_result() -> None:
    def boom(request: Request) -> Any:
        raise ProviderError("the model is down", "OVERLOADED")

    async with open_runtime(ScriptedProvider([boom])) as rt:
        agent = await rt.spawn(OPTIONS)
        result = await agent.send("hi")
    assert result.reason == "error" and result.code == "OVERLOADED" and result.reply is None
    with pytest.raises(TurnFailed) as failed:
        result.raise_for_error()
    assert failed.value.result is result
    assert "OVERLOADED" in str(failed.value) and "the model is down" in str(failed.value)


async def test_a_discarded_send_has_an_empty_result() -> None:
    provider = ScriptedProvider([HANG])
    async with open_runtime(provider) as rt, trio.open_nursery() as nursery:
        agent = await rt.spawn(OPTIONS)
        nursery.start_soon(agent.send, "hangs")
        await trio.testing.wait_all_tasks_blocked()
        results: list[Any] = []

        async def queued() -> None:
            results.append(await agent.send("queued"))

        nursery.start_soon(queued)
        await trio.testing.wait_all_tasks_blocked()
        agent.cancel("everything")
    (result,) = results
    assert (result.turn, result.reason, result.reply, result.steps) == (None, "discarded", None, 0)
    assert result.usage == TokenUsage() and result.text == ""


# ---------------------------------------------------------------- bad set-up


async def test_async_notify_listeners_are_refused_at_on() -> None:
    async def async_observer(agent: Agent, event: SessionEvent) -> None:
        pass

    class AsyncCallable:
        async def __call__(self, agent: Agent, value: Any) -> None:
            pass

    async with open_runtime(EchoProvider()) as rt:
        agent = await rt.spawn(OPTIONS)
        for name in ("session/event", "agent/status", "agent/error", "agent/session-start"):
            with pytest.raises(TypeError, match="notify"):
                rt.on(name, async_observer)
            with pytest.raises(TypeError, match="plain functions"):
                agent.on(name, AsyncCallable())
        # async listeners for the other kinds stay welcome
        agent.on("agent/pre-step", async_observer)
        assert (await agent.send("hi")).reason == "completed"


@pytest.mark.parametrize("capacity", [0, -1, True, 1.5])
def test_inbox_capacity_below_one_is_refused(capacity: Any) -> None:
    with pytest.raises(ValueError, match="inbox_capacity"):
        AgentOptions(model="m", inbox_capacity=capacity)


@pytest.mark.parametrize("session_id", ["", " ", "\t", "a b"])
async def test_empty_or_whitespace_session_ids_are_refused_at_spawn(session_id: str) -> None:
    async with open_runtime(EchoProvider()) as rt:
        with pytest.raises(ValueError, match="session id"):
            await rt.spawn(OPTIONS, session_id=session_id)
        assert rt.agents == ()
        assert await rt.list_sessions() == ()
