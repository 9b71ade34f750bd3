"""Cancellation and disposal, one window at a time (docs/spec/loop.md §1.3 and §7:
for each seam a turn passes through, a cancel (or a dispose) issued there
leaves exactly the log shape the spec prescribes, and the agent then completes the next send
(or, once disposed, refuses it)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from helpers import open_runtime, types_of, wait_until

from actorloop.runtime import Agent, AgentOptions, Message, Session, Text, Tool, ToolResult
from actorloop.runtime.errors import AgentClosed
from actorloop.runtime.host.runtime import Runtime
from actorloop.runtime.model.events import SessionEvent
from actorloop.runtime.testing import (
    HANG,
    ScriptedProvider,
    max_tokens_reply,
    reply,
    tool_call,
    tool_calls,
)

Act = Callable[[Agent], Awaitable[None]]

START = ["turn/start", "user/message"]
HEADER = ["step/start", "request/header"]
CHUNKS_ONE_CALL = ["assistant/chunk"] * 6  # tool_call(): start, 2 deltas, end, usage, finish
CHUNKS_TWO_CALLS = ["assistant/chunk"] * 8  # tool_calls(a, b): 3 per call, usage, finish


class Probe:
    """A tool that records each start and finish; `hold` makes it wait until cancelled."""

    def __init__(self, name: str = "probe", *, hold: bool = False) -> None:
        self.started: list[str] = []
        self.finished: list[str] = []
        self.running = trio.Event()
        self.hold = hold
        self.tool = Tool(name, "records calls", {"type": "object"}, self.execute)

    async def execute(self, args: dict[str, Any], ctx: Any) -> str:
        self.started.append(ctx.call_id)
        self.running.set()
        if self.hold:
            await trio.sleep_forever()
        self.finished.append(ctx.call_id)
        return f"real {ctx.call_id}"


def options(*tools: Tool) -> AgentOptions:
    # The windows here are those of calls that run one after another; the parallel pool's
    # own windows are exercised in tests/loop/test_tool_pool.py.
    return AgentOptions(model="m", system="sys", tools=tools, max_parallel_tool_calls=1)


def of_type(agent: Agent, kind: str) -> list[Any]:
    return [event for event in agent.session.events if event.type == kind]


def last_end(agent: Agent) -> Any:
    return of_type(agent, "turn/end")[-1].data.reason


def tool_codes(agent: Agent) -> list[str | None]:
    return [e.data.error.code if e.data.error else None for e in of_type(agent, "tool/result")]


async def check_log(rt: Runtime, agent: Agent) -> None:
    """The log replays cleanly, every turn is closed once, every call has one result, and
    the store holds exactly what the session holds (nothing lost by a cancel)."""
    events: Any = agent.session.events
    Session.from_events("replay", events)
    starts = [e.data.turn for e in events if e.type == "turn/start"]
    ends = [e.data.turn for e in events if e.type == "turn/end"]
    assert starts == ends == list(range(1, len(starts) + 1))
    calls = [e.data.call_id for e in events if e.type == "tool/call"]
    results = [e.data.call_id for e in events if e.type == "tool/result"]
    assert sorted(calls) == sorted(results) and len(set(calls)) == len(calls)
    await rt.codec.flush()
    _meta, stored = await rt.store.load(agent.id)
    assert [(e.seq, e.type) for e in stored] == [(e.seq, e.type) for e in events]


async def next_send_completes(rt: Runtime, agent: Agent, provider: ScriptedProvider) -> None:
    before = len(provider.requests)
    provider.script[:] = [reply("fine")]
    result = await agent.send("next")
    assert (result.reason, result.turn) == ("completed", agent.session.last_turn)
    assert len(provider.requests) == before + 1
    request = provider.requests[-1]
    assert request.history == agent.session.derive_messages()[:-1]
    assert Message.user("next") in request.history
    assert rt.invariant_checks == len(provider.requests)
    await check_log(rt, agent)


async def disposed_refuses(rt: Runtime, agent: Agent) -> None:
    assert agent.status == "disposed"
    with pytest.raises(AgentClosed):
        await agent.send("more")
    with pytest.raises(AgentClosed):
        agent.steer("more")
    with pytest.raises(AgentClosed):
        agent.inject("more", source="p")
    await check_log(rt, agent)


async def do_cancel(agent: Agent) -> None:
    agent.cancel("why")


async def do_dispose(agent: Agent) -> None:
    await agent.dispose()


MODES: dict[str, Act] = {"cancel": do_cancel, "dispose": do_dispose}


def expect_end(agent: Agent, mode: str) -> None:
    end = last_end(agent)
    if mode == "cancel":
        assert (end.kind, end.reason) == ("aborted", "why")
    else:
        assert end.kind == "disposed"


def then_listener(act: Act, then: str, *, when: Callable[[Any], bool] = lambda v: True) -> Any:
    """A waterfall listener that acts (cancel/dispose) and then delegates or raises."""

    async def listener(agent: Agent, value: Any, next: Any) -> Any:
        if when(value):
            await act(agent)
            if then == "raise":
                raise RuntimeError("listener failed after the cancel")
        return await next()

    return listener


async def finish(
    rt: Runtime, agent: Agent, provider: ScriptedProvider, mode: str, result: Any
) -> None:
    expect_end(agent, mode)
    assert result.reason == ("aborted" if mode == "cancel" else "disposed")
    if mode == "cancel":
        await next_send_completes(rt, agent, provider)
    else:
        await disposed_refuses(rt, agent)


# ---------------------------------------------------------------- windows before a step


@pytest.mark.parametrize("then", ["return", "raise"])
@pytest.mark.parametrize("mode", ["cancel", "dispose"])
async def test_window_prompt_submit(mode: str, then: str) -> None:
    provider = ScriptedProvider([])
    errors: list[BaseException] = []
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(options())
        agent.on("agent/error", lambda a, e: errors.append(e))
        unsubscribe = agent.on("prompt/submit", then_listener(MODES[mode], then))
        result = await agent.send("first")
        unsubscribe()
        assert types_of(agent.session.events) == ["turn/start", "turn/end"]
        assert provider.requests == [] and errors == []
        await finish(rt, agent, provider, mode, result)


@pytest.mark.parametrize("then", ["return", "raise"])
@pytest.mark.parametrize("mode", ["cancel", "dispose"])
async def test_window_system_prompt_assemble(mode: str, then: str) -> None:
    provider = ScriptedProvider([])
    composed: list[int] = []
    errors: list[BaseException] = []

    async def prefix(agent: Agent, value: Any, next: Any) -> Any:
        composed.append(1)
        return (Message.user("opener"), *await next())

    async with open_runtime(provider) as rt:
        rt.on("agent/session-prefix", prefix)
        agent = await rt.spawn(options())
        agent.on("agent/error", lambda a, e: errors.append(e))
        unsubscribe = agent.on("system-prompt/assemble", then_listener(MODES[mode], then))
        result = await agent.send("first")
        unsubscribe()
        assert types_of(agent.session.events) == [*START, "turn/end"]
        assert composed == [] and provider.requests == [] and errors == []
        await finish(rt, agent, provider, mode, result)
        if mode == "cancel":
            assert composed == [1]
            assert provider.requests[-1].prefix == (Message.user("opener"),)


@pytest.mark.parametrize("then", ["return", "raise"])
@pytest.mark.parametrize("mode", ["cancel", "dispose"])
async def test_window_session_prefix(mode: str, then: str) -> None:
    provider = ScriptedProvider([])
    compositions: list[tuple[Message, ...]] = []
    errors: list[BaseException] = []
    act = MODES[mode]

    async def prefix(agent: Agent, value: Any, next: Any) -> Any:
        mine = (Message.user(f"opener {len(compositions) + 1}"),)
        compositions.append(mine)
        if len(compositions) == 1:
            await act(agent)
            if then == "raise":
                raise RuntimeError("prefix listener failed after the cancel")
        return (*mine, *await next())

    async with open_runtime(provider) as rt:
        rt.on("agent/session-prefix", prefix)
        agent = await rt.spawn(options())
        agent.on("agent/error", lambda a, e: errors.append(e))
        result = await agent.send("first")
        assert types_of(agent.session.events) == [*START, "turn/end"]
        assert provider.requests == [] and errors == []
        await finish(rt, agent, provider, mode, result)
        if mode == "cancel":
            # The cancelled composition was discarded: the next turn recomposed.
            assert len(compositions) == 2
            assert provider.requests[-1].prefix == compositions[1]
            header = agent.session.header()
            assert header is not None and header.message_prefix == compositions[1]


@pytest.mark.parametrize("then", ["return", "raise"])
@pytest.mark.parametrize("mode", ["cancel", "dispose"])
async def test_window_pre_step(mode: str, then: str) -> None:
    provider = ScriptedProvider([])
    composed: list[int] = []
    errors: list[BaseException] = []
    act = MODES[mode]

    async def prefix(agent: Agent, value: Any, next: Any) -> Any:
        composed.append(1)
        return (Message.user("opener"), *await next())

    async def pre_step(agent: Agent, value: Any) -> None:
        await act(agent)
        if then == "raise":
            raise RuntimeError("pre-step failed after the cancel")

    async with open_runtime(provider) as rt:
        rt.on("agent/session-prefix", prefix)
        agent = await rt.spawn(options())
        agent.on("agent/error", lambda a, e: errors.append(e))
        unsubscribe = agent.on("agent/pre-step", pre_step)
        result = await agent.send("first")
        unsubscribe()
        assert types_of(agent.session.events) == [*START, "turn/end"]
        assert provider.requests == [] and errors == []
        await finish(rt, agent, provider, mode, result)
        if mode == "cancel":
            # The composition finished before the cancel: it is this instance's prefix.
            assert composed == [1]
            assert provider.requests[-1].prefix == (Message.user("opener"),)


# ---------------------------------------------------------------- windows inside a step


@pytest.mark.parametrize("mode", ["cancel", "dispose"])
async def test_window_step_start_observer(mode: str) -> None:
    provider = ScriptedProvider([])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(options())
        if mode == "cancel":

            def observer(agent: Agent, event: SessionEvent) -> None:
                if event.type == "step/start":
                    agent.cancel("why")

            unsubscribe = agent.on("session/event", observer)
            result = await agent.send("first")
            unsubscribe()
        else:
            # A notify listener cannot await: it wakes a task that disposes. The next seam
            # holds the loop until that dispose was issued, so the window is exact.
            wake = trio.Event()
            issued = trio.Event()

            def observer(agent: Agent, event: SessionEvent) -> None:
                if event.type == "step/start":
                    wake.set()

            async def disposer() -> None:
                await wake.wait()
                issued.set()
                await agent.dispose()

            async def hold(agent: Agent, value: Any, next: Any) -> Any:
                await issued.wait()
                return await next()

            agent.on("session/event", observer)
            agent.on("agent/request", hold)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(disposer)
                result = await agent.send("first")
        assert types_of(agent.session.events) == [*START, "step/start", "step/end", "turn/end"]
        assert provider.requests == []
        await finish(rt, agent, provider, mode, result)


@pytest.mark.parametrize("then", ["return", "raise"])
@pytest.mark.parametrize("mode", ["cancel", "dispose"])
async def test_window_agent_request(mode: str, then: str) -> None:
    provider = ScriptedProvider([])
    errors: list[BaseException] = []
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(options())
        agent.on("agent/error", lambda a, e: errors.append(e))
        unsubscribe = agent.on("agent/request", then_listener(MODES[mode], then))
        result = await agent.send("first")
        unsubscribe()
        assert types_of(agent.session.events) == [*START, "step/start", "step/end", "turn/end"]
        assert not of_type(agent, "request/header")
        assert provider.requests == [] and errors == []
        await finish(rt, agent, provider, mode, result)
        if mode == "cancel":
            # The next instance request is still the first: it writes the initial snapshot.
            headers = of_type(agent, "request/header")
            assert [h.data.reason for h in headers] == ["initial"]


async def test_window_request_header_observer_loses_nothing() -> None:
    """A cancel from an observer of the header event: the flush barrier still hands the
    events to the store (no seq gap), and nothing is dispatched."""
    provider = ScriptedProvider([])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(options())

        def observer(agent: Agent, event: SessionEvent) -> None:
            if event.type == "request/header":
                agent.cancel("why")

        unsubscribe = agent.on("session/event", observer)
        result = await agent.send("first")
        unsubscribe()
        assert types_of(agent.session.events) == [*START, *HEADER, "step/end", "turn/end"]
        assert provider.requests == []
        await finish(rt, agent, provider, "cancel", result)


@pytest.mark.parametrize("mode", ["cancel", "dispose"])
async def test_window_mid_stream_hang(mode: str) -> None:
    provider = ScriptedProvider([HANG])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(options())
        results: list[Any] = []

        async def send() -> None:
            results.append(await agent.send("first"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send)
            await wait_until(lambda: len(of_type(agent, "assistant/chunk")) == 2)
            await trio.testing.wait_all_tasks_blocked()
            await MODES[mode](agent)
        assert types_of(agent.session.events) == [
            *START,
            *HEADER,
            "assistant/chunk",
            "assistant/chunk",
            "step/end",
            "turn/end",
        ]
        assert len(provider.requests) == 1
        await finish(rt, agent, provider, mode, results[0])
        if mode == "cancel":
            # The partial chunks are not history: the next request holds no assistant text.
            assert [m.role for m in provider.requests[-1].messages] == ["user", "user"]


async def test_window_mid_stream_callable_cancels_during_the_call() -> None:
    provider = ScriptedProvider([])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(options())

        def entry(request: Any) -> Any:
            for index, chunk in enumerate(reply("partial answer")):
                if index == 2:
                    agent.cancel("why")
                yield chunk

        provider.push(entry)
        result = await agent.send("first")
        kinds = types_of(agent.session.events)
        assert kinds == [
            *START,
            *HEADER,
            "assistant/chunk",
            "assistant/chunk",
            "step/end",
            "turn/end",
        ]
        assert not of_type(agent, "assistant/message")
        await finish(rt, agent, provider, "cancel", result)


# ---------------------------------------------------------------- windows around tools


TOOLS_STEP = [*START, *HEADER, *CHUNKS_TWO_CALLS, "assistant/message"]
TOOLS_TAIL = ["tool/call", "tool/result", "tool/call", "tool/result", "step/end", "turn/end"]


@pytest.mark.parametrize("then", ["return", "raise"])
@pytest.mark.parametrize("mode", ["cancel", "dispose"])
async def test_window_tools_pre_execute(mode: str, then: str) -> None:
    probe = Probe()
    provider = ScriptedProvider([tool_calls(("a", "probe", {}), ("b", "probe", {}))])
    errors: list[BaseException] = []
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(options(probe.tool))
        agent.on("agent/error", lambda a, e: errors.append(e))
        unsubscribe = agent.on("tools/pre-execute", then_listener(MODES[mode], then))
        result = await agent.send("first")
        unsubscribe()
        assert types_of(agent.session.events) == [*TOOLS_STEP, *TOOLS_TAIL]
        assert tool_codes(agent) == ["TOOL_ABORTED_BEFORE_DISPATCH"] * 2
        assert probe.started == [] and errors == []
        await finish(rt, agent, provider, mode, result)
        if mode == "cancel":
            carried = [
                block
                for message in provider.requests[-1].messages
                for block in message.content
                if isinstance(block, ToolResult)
            ]
            assert [(b.tool_call_id, b.is_error) for b in carried] == [("a", True), ("b", True)]


@pytest.mark.parametrize("mode", ["cancel", "dispose"])
async def test_window_while_a_tool_runs(mode: str) -> None:
    probe = Probe(hold=True)
    provider = ScriptedProvider([tool_calls(("a", "probe", {}), ("b", "probe", {}))])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(options(probe.tool))
        results: list[Any] = []

        async def send() -> None:
            results.append(await agent.send("first"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send)
            await probe.running.wait()
            await MODES[mode](agent)
        assert types_of(agent.session.events) == [*TOOLS_STEP, *TOOLS_TAIL]
        assert tool_codes(agent) == ["TOOL_CANCELLED", "TOOL_ABORTED_BEFORE_DISPATCH"]
        assert (probe.started, probe.finished) == (["a"], [])
        await finish(rt, agent, provider, mode, results[0])


async def test_window_tool_cancels_itself_and_returns() -> None:
    """A tool that cancels its own turn and returns normally finished: its real result is
    written; the next call never starts."""
    started: list[str] = []

    async def quitter(args: dict[str, Any], ctx: Any) -> str:
        started.append(ctx.call_id)
        ctx.agent.cancel("why")
        return "done anyway"

    tool = Tool("probe", "", {"type": "object"}, quitter)
    provider = ScriptedProvider([tool_calls(("a", "probe", {}), ("b", "probe", {}))])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(options(tool))
        result = await agent.send("first")
        assert types_of(agent.session.events) == [*TOOLS_STEP, *TOOLS_TAIL]
        assert tool_codes(agent) == [None, "TOOL_ABORTED_BEFORE_DISPATCH"]
        assert of_type(agent, "tool/result")[0].data.content == (Text("done anyway"),)
        assert started == ["a"]
        await finish(rt, agent, provider, "cancel", result)


@pytest.mark.parametrize("then", ["return", "raise"])
@pytest.mark.parametrize("mode", ["cancel", "dispose"])
async def test_window_tools_post_execute(mode: str, then: str) -> None:
    probe = Probe()
    provider = ScriptedProvider([tool_calls(("a", "probe", {}), ("b", "probe", {}))])
    errors: list[BaseException] = []
    act = MODES[mode]

    async def post(agent: Agent, value: Any, next: Any) -> Any:
        out = await next()
        await act(agent)
        if then == "raise":
            raise RuntimeError("post-execute failed after the cancel")
        return attrs.evolve(out, content=(Text("rewritten"),), additional_context=("ctx",))

    async with open_runtime(provider) as rt:
        agent = await rt.spawn(options(probe.tool))
        agent.on("agent/error", lambda a, e: errors.append(e))
        unsubscribe = agent.on("tools/post-execute", post)
        result = await agent.send("first")
        unsubscribe()
        # The tool finished: its real result stays; the cancelled rewrite and its context
        # are dropped; the second call never starts.
        assert types_of(agent.session.events) == [*TOOLS_STEP, *TOOLS_TAIL]
        assert tool_codes(agent) == [None, "TOOL_ABORTED_BEFORE_DISPATCH"]
        assert of_type(agent, "tool/result")[0].data.content == (Text("real a"),)
        assert probe.started == ["a"] and errors == []
        await finish(rt, agent, provider, mode, result)


@pytest.mark.parametrize("then", ["return", "raise"])
@pytest.mark.parametrize("mode", ["cancel", "dispose"])
async def test_window_turn_continuation(mode: str, then: str) -> None:
    probe = Probe()
    provider = ScriptedProvider([tool_call("a", "probe", {})])
    errors: list[BaseException] = []
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(options(probe.tool))
        agent.on("agent/error", lambda a, e: errors.append(e))
        unsubscribe = agent.on("agent/turn-continuation", then_listener(MODES[mode], then))
        result = await agent.send("first")
        unsubscribe()
        assert types_of(agent.session.events) == [
            *START,
            *HEADER,
            *CHUNKS_ONE_CALL,
            "assistant/message",
            "tool/call",
            "tool/result",
            "step/end",
            "turn/end",
        ]
        assert tool_codes(agent) == [None] and len(provider.requests) == 1 and errors == []
        await finish(rt, agent, provider, mode, result)


async def test_cancel_from_the_last_tool_result_skips_the_continuation() -> None:
    probe = Probe()
    provider = ScriptedProvider([tool_call("a", "probe", {})])
    continued: list[Any] = []

    def observer(agent: Agent, event: SessionEvent) -> None:
        if event.type == "tool/result":
            agent.cancel("why")

    async def continuation(agent: Agent, value: Any, next: Any) -> Any:
        continued.append(value)
        return await next()

    async with open_runtime(provider) as rt:
        agent = await rt.spawn(options(probe.tool))
        unsubscribe = agent.on("session/event", observer)
        agent.on("agent/turn-continuation", continuation)
        result = await agent.send("first")
        unsubscribe()
        assert types_of(agent.session.events)[-4:] == [
            "tool/call",
            "tool/result",
            "step/end",
            "turn/end",
        ]
        assert continued == []
        await finish(rt, agent, provider, "cancel", result)


# ---------------------------------------------------------------- inbox and reasons


async def test_cancel_keep_inbox_keeps_queued_turns() -> None:
    provider = ScriptedProvider([HANG, reply("second answer")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(options())
        results: dict[str, Any] = {}

        async def send(name: str) -> None:
            results[name] = await agent.send(name)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send, "first")
            await wait_until(lambda: bool(of_type(agent, "assistant/chunk")))
            nursery.start_soon(send, "second")
            await trio.testing.wait_all_tasks_blocked()
            agent.cancel("only this turn", keep_inbox=True)
        assert results["first"].reason == "aborted"
        assert (results["second"].turn, results["second"].reason) == (2, "completed")
        assert [e.data.reason.kind for e in of_type(agent, "turn/end")] == [
            "aborted",
            "completed",
        ]
        assert [e.data.content[0].text for e in of_type(agent, "user/message")] == [
            "first",
            "second",
        ]
        assert agent.status == "idle"
        await check_log(rt, agent)


async def test_cancel_without_keep_inbox_discards_queued_and_steering() -> None:
    provider = ScriptedProvider([HANG])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(options())
        results: dict[str, Any] = {}

        async def send(name: str) -> None:
            results[name] = await agent.send(name)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send, "first")
            await wait_until(lambda: bool(of_type(agent, "assistant/chunk")))
            nursery.start_soon(send, "second")
            await trio.testing.wait_all_tasks_blocked()
            agent.steer("steer me")
            agent.cancel("all of it")
        assert (results["second"].turn, results["second"].reason) == (None, "discarded")
        assert not of_type(agent, "steering/message")
        assert len(of_type(agent, "turn/start")) == 1
        await next_send_completes(rt, agent, provider)
        assert not of_type(agent, "steering/message")


async def test_cancel_reason_first_wins() -> None:
    async def pre_step(agent: Agent, value: Any) -> None:
        agent.cancel("first")
        agent.cancel("second")

    provider = ScriptedProvider([])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(options())
        unsubscribe = agent.on("agent/pre-step", pre_step)
        result = await agent.send("x")
        unsubscribe()
        assert (result.reason, result.message) == ("aborted", "first")
        assert (last_end(agent).kind, last_end(agent).reason) == ("aborted", "first")
        await next_send_completes(rt, agent, provider)


async def test_dispose_after_cancel_ends_disposed() -> None:
    async def pre_step(agent: Agent, value: Any) -> None:
        agent.cancel("user")
        await agent.dispose()

    provider = ScriptedProvider([])
    statuses: list[str] = []
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(options())
        agent.on("agent/pre-step", pre_step)
        agent.on("agent/status", lambda a, status: statuses.append(status))
        result = await agent.send("x")
        assert result.reason == "disposed" and last_end(agent).kind == "disposed"
        assert (last_end(agent).reason, result.message) == ("user", "user")
        # Disposed as soon as dispose() was called; the cut-short turn never reports idle.
        assert statuses == ["running", "disposed"]
        await disposed_refuses(rt, agent)


async def test_cancel_after_the_turn_ended_does_nothing() -> None:
    """From an observer of turn/end (the scope is already retired) and between turns."""

    def observer(agent: Agent, event: SessionEvent) -> None:
        if event.type == "turn/end":
            agent.cancel("too late")

    provider = ScriptedProvider([reply("a")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(options())
        unsubscribe = agent.on("session/event", observer)
        result = await agent.send("one")
        unsubscribe()
        assert result.reason == "completed" and last_end(agent).kind == "completed"
        agent.cancel("idle")
        agent.cancel("idle again", keep_inbox=True)
        await next_send_completes(rt, agent, provider)
        assert [e.data.reason.kind for e in of_type(agent, "turn/end")] == [
            "completed",
            "completed",
        ]


async def test_dispose_from_turn_end_observer_keeps_the_turn_reason() -> None:
    """turn/end and its flush are shielded: a dispose issued from there does not turn the
    finished turn into a disposed one, and the turn is durable."""
    provider = ScriptedProvider([reply("a")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(options())
        async with trio.open_nursery() as nursery:

            def observer(agent: Agent, event: SessionEvent) -> None:
                if event.type == "turn/end":
                    nursery.start_soon(agent.dispose)

            agent.on("session/event", observer)
            result = await agent.send("one")
        assert result.reason == "completed" and last_end(agent).kind == "completed"
        await disposed_refuses(rt, agent)


async def test_runtime_shutdown_mid_turn_writes_turn_end_disposed() -> None:
    provider = ScriptedProvider([HANG])
    results: list[Any] = []
    async with trio.open_nursery() as nursery, open_runtime(provider) as rt:
        agent = await rt.spawn(options())

        async def send() -> None:
            results.append(await agent.send("hang"))

        nursery.start_soon(send)
        await wait_until(lambda: bool(of_type(agent, "assistant/chunk")))
    assert types_of(agent.session.events)[-2:] == ["step/end", "turn/end"]
    assert last_end(agent).kind == "disposed"
    assert results and results[0].reason == "disposed"
    Session.from_events("replay", agent.session.events)


async def test_steering_kept_by_a_cancel_starts_the_next_turn() -> None:
    """Steering kept by cancel(keep_inbox=True) has no next step in the cancelled turn: like
    a steer on an idle agent, it starts a turn of its own, and the agent then goes idle."""

    async def steer_then_cancel(args: dict[str, Any], ctx: Any) -> str:
        ctx.agent.steer("later")
        ctx.agent.cancel("stop", keep_inbox=True)
        return "r"

    tool = Tool("probe", "", {"type": "object"}, steer_then_cancel)
    provider = ScriptedProvider([tool_call("a", "probe", {}), reply("about later")])
    statuses: list[str] = []
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(options(tool))
        agent.on("agent/status", lambda a, status: statuses.append(status))
        assert (await agent.send("go")).reason == "aborted"
        await agent.wait_idle()
        assert agent.status == "idle" and statuses == ["running", "idle"]
        ends = [(e.data.turn, e.data.reason.kind) for e in of_type(agent, "turn/end")]
        assert ends == [(1, "aborted"), (2, "completed")]
        users = [(e.seq, e.data.content) for e in of_type(agent, "user/message")]
        assert users[-1][1] == (Text("later"),)
        assert Message.user("later") in provider.requests[-1].history
        await next_send_completes(rt, agent, provider)


async def test_steering_in_the_last_step_is_not_stranded() -> None:
    """A steer that lands during a call whose answer ends the turn (max-tokens: no next
    step) still reaches the model, in a turn of its own."""

    def steer_during_call(request: Any) -> Any:
        agent_ref[0].steer("one more thing")
        return max_tokens_reply("cut short")

    agent_ref: list[Agent] = []
    provider = ScriptedProvider([steer_during_call, reply("about that thing")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(options())
        agent_ref.append(agent)
        assert (await agent.send("go")).reason == "max-tokens"
        await agent.wait_idle()
        assert len(provider.requests) == 2
        assert [e.data.reason.kind for e in of_type(agent, "turn/end")] == [
            "max-tokens",
            "completed",
        ]
        assert Message.user("one more thing") in provider.requests[1].history
        assert agent.status == "idle"


# ---------------------------------------------------------------- errors and cancellation


async def test_error_in_a_tool_nursery_while_cancelling_is_not_reported() -> None:
    errors: list[BaseException] = []

    async def grouped(args: dict[str, Any], ctx: Any) -> str:
        async def child() -> None:
            try:
                await trio.sleep_forever()
            finally:
                raise ValueError("cleanup failed")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(child)
            await trio.testing.wait_all_tasks_blocked()
            ctx.agent.cancel("why")
            await trio.sleep_forever()
        return "never"

    tool = Tool("probe", "", {"type": "object"}, grouped)
    provider = ScriptedProvider([tool_call("a", "probe", {})])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(options(tool))
        agent.on("agent/error", lambda a, e: errors.append(e))
        result = await agent.send("go")
        assert (result.turn, result.reason) == (1, "aborted")
        assert errors == [] and agent.status == "idle"
        assert tool_codes(agent) == ["TOOL_CANCELLED"]
        await next_send_completes(rt, agent, provider)


async def test_tool_raising_when_cancelled_is_not_reported() -> None:
    errors: list[BaseException] = []

    async def stubborn(args: dict[str, Any], ctx: Any) -> str:
        try:
            ctx.agent.cancel("why")
            await trio.sleep_forever()
        except trio.Cancelled:
            raise RuntimeError("I do not like being cancelled") from None
        return "never"

    tool = Tool("probe", "", {"type": "object"}, stubborn)
    provider = ScriptedProvider([tool_calls(("a", "probe", {}), ("b", "probe", {}))])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(options(tool))
        agent.on("agent/error", lambda a, e: errors.append(e))
        result = await agent.send("go")
        assert result.reason == "aborted" and errors == []
        # The failure was the cancel's doing: the call counts as cancelled, not finished.
        assert tool_codes(agent) == ["TOOL_CANCELLED", "TOOL_ABORTED_BEFORE_DISPATCH"]
        await next_send_completes(rt, agent, provider)


# ---------------------------------------------------------------- throwing listeners


def _raiser(kind: str) -> Any:
    if kind == "serial":

        async def serial(agent: Agent, value: Any) -> None:
            raise RuntimeError("listener broke")

        return serial

    async def waterfall(agent: Agent, value: Any, next: Any) -> Any:
        raise RuntimeError("listener broke")

    return waterfall


TOOL_TAIL = ["tool/call", "tool/result", "step/end", "turn/end"]
THROWING = [
    # hook, listener kind, turn-end step, log shape (None: turn/start, turn/end),
    # compositions after the failing turn, compositions after the next turn
    ("prompt/submit", "waterfall", 0, None, 0, 1),
    ("system-prompt/assemble", "waterfall", 1, [*START, "turn/end"], 0, 1),
    ("agent/session-prefix", "waterfall", 1, [*START, "turn/end"], 1, 2),
    ("agent/pre-step", "serial", 1, [*START, "turn/end"], 1, 1),
    ("agent/request", "waterfall", 1, [*START, "step/start", "step/end", "turn/end"], 1, 1),
    ("tools/pre-execute", "waterfall", 1, TOOL_TAIL, 1, 1),
    ("tools/post-execute", "waterfall", 1, TOOL_TAIL, 1, 1),
    ("agent/turn-continuation", "waterfall", 1, TOOL_TAIL, 1, 1),
]


@pytest.mark.parametrize(("hook", "kind", "step", "shape", "first", "after"), THROWING)
async def test_throwing_listener_ends_turn_error(
    hook: str, kind: str, step: int, shape: list[str] | None, first: int, after: int
) -> None:
    probe = Probe()
    provider = ScriptedProvider([tool_call("a", "probe", {})])
    compositions: list[int] = []
    errors: list[BaseException] = []

    async def prefix(agent: Agent, value: Any, next: Any) -> Any:
        compositions.append(1)
        return (Message.user(f"opener {len(compositions)}"), *await next())

    async with open_runtime(provider) as rt:
        rt.on("agent/session-prefix", prefix)
        agent = await rt.spawn(options(probe.tool))
        agent.on("agent/error", lambda a, e: errors.append(e))
        unsubscribe = agent.on(hook, _raiser(kind))
        result = await agent.send("first")
        unsubscribe()
        end = last_end(agent)
        assert (result.reason, end.kind, end.step) == ("error", "error", step)
        assert end.message == "RuntimeError: listener broke"
        assert len(errors) == 1 and str(errors[0]) == "listener broke"
        kinds = types_of(agent.session.events)
        if shape is None:
            assert kinds == ["turn/start", "turn/end"]
        elif shape is TOOL_TAIL:
            assert kinds[-4:] == TOOL_TAIL and kinds.count("tool/result") == 1
            expected = {
                "tools/pre-execute": "TOOL_ABORTED_BEFORE_DISPATCH",
                "tools/post-execute": None,
                "agent/turn-continuation": None,
            }[hook]
            assert tool_codes(agent) == [expected]
        else:
            assert kinds == shape
            assert agent.session.header() is None
        assert len(compositions) == first
        await next_send_completes(rt, agent, provider)
        # A failed composition cached nothing (recomposed now); a finished one is reused.
        assert len(compositions) == after
        opener = (Message.user(f"opener {after}"),)
        assert provider.requests[-1].prefix == opener
        header = agent.session.header()
        assert header is not None and header.message_prefix == opener


async def test_throwing_prefix_listener_caches_nothing_and_is_recomposed() -> None:
    calls: list[str] = []

    async def first(agent: Agent, value: Any, next: Any) -> Any:
        calls.append("first")
        return (Message.user("from first"), *await next())

    async def second(agent: Agent, value: Any, next: Any) -> Any:
        calls.append("second")
        if calls.count("second") == 1:
            raise RuntimeError("second listener broke")
        return (Message.user("from second"), *await next())

    provider = ScriptedProvider([])
    async with open_runtime(provider) as rt:
        rt.on("agent/session-prefix", first)
        rt.on("agent/session-prefix", second)
        agent = await rt.spawn(options())
        result = await agent.send("one")
        assert result.reason == "error" and last_end(agent).step == 1
        assert not of_type(agent, "request/header") and provider.requests == []
        await next_send_completes(rt, agent, provider)
        assert calls == ["first", "second", "first", "second"]
        assert provider.requests[0].prefix == (
            Message.user("from first"),
            Message.user("from second"),
        )


async def test_error_in_a_later_step_names_that_step() -> None:
    probe = Probe()
    seen: list[int] = []

    async def assemble(agent: Agent, value: Any, next: Any) -> Any:
        seen.append(1)
        if len(seen) == 2:
            raise RuntimeError("step two broke")
        return await next()

    provider = ScriptedProvider([tool_call("a", "probe", {})])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(options(probe.tool))
        unsubscribe = agent.on("system-prompt/assemble", assemble)
        assert (await agent.send("go")).reason == "error"
        unsubscribe()
        assert (last_end(agent).kind, last_end(agent).step) == ("error", 2)
        await next_send_completes(rt, agent, provider)


async def test_cancel_right_after_the_inbox_handed_an_item_over_drops_it() -> None:
    """An idle loop waits in receive(): a queued item is handed to it at once, before it
    runs. A cancel in that window must still treat the item as queued (dropped)."""
    provider = ScriptedProvider([reply("later")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(AgentOptions(model="m"))
        agent.steer("handed over, not started")  # idle: queued like a send
        agent.cancel("right away")
        await agent.wait_idle()
        assert agent.session.events == ()
        assert provider.requests == []
        assert (await agent.send("next")).reason == "completed"
        assert [m.text for m in provider.requests[0].messages] == ["next"]


async def test_dispose_right_after_the_inbox_handed_an_item_over_runs_nothing() -> None:
    provider = ScriptedProvider([HANG])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(AgentOptions(model="m"))
        agent.steer("handed over, not started")
        with trio.fail_after(5):
            await agent.dispose()
        assert agent.session.events == ()
        assert provider.requests == []


async def test_inject_from_an_observer_of_the_tool_request_waits_for_the_results() -> None:
    async def echo(args: dict[str, Any], ctx: Any) -> str:
        return "tool output"

    provider = ScriptedProvider([tool_call("c1", "echo", {}), reply("done")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(options(Tool("echo", "", {"type": "object"}, echo)))

        def observer(a: Any, event: Any) -> None:
            if event.type == "assistant/message" and event.data.step == 1:
                a.inject("plugin note", source="watcher")

        agent.on("session/event", observer)
        await agent.send("go")
        kinds = [e.type for e in agent.session.events if e.type != "assistant/chunk"]
        at = kinds.index("assistant/message")
        assert kinds[at : at + 4] == [
            "assistant/message",
            "tool/call",
            "tool/result",
            "context/message",
        ]
        roles = [[type(b).__name__ for b in m.content] for m in provider.requests[1].history]
        assert roles[-2:] == [["ToolResult"], ["Text"]]


async def test_inject_from_agent_error_lands_after_the_closed_batch() -> None:
    async def ok(args: dict[str, Any], ctx: Any) -> str:
        return "ok"

    async def bad_post(a: Any, value: Any, next: Any) -> Any:
        return "not an outcome"

    provider = ScriptedProvider([tool_calls(("c1", "ok", {}), ("c2", "ok", {}))])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(options(Tool("ok", "", {"type": "object"}, ok)))
        agent.on("tools/post-execute", bad_post)
        agent.on("agent/error", lambda a, exc: a.inject("error note", source="watcher"))
        assert (await agent.send("go")).reason == "error"
        await agent.wait_idle()
        kinds = [e.type for e in agent.session.events if e.type != "assistant/chunk"]
        first_call = kinds.index("tool/call")
        batch = kinds[first_call : kinds.index("step/end")]
        assert "context/message" not in batch
        assert kinds[-3:] == ["turn/start", "context/message", "turn/end"]
