"""`actorloop.runtime.aio`: the trio runtime driven from asyncio (decision 0008,
docs/spec/runtime.md §12). Each test runs its own `asyncio.run`, so the bridge starts and
ends a real trio guest run on a real asyncio loop every time."""

from __future__ import annotations

import asyncio
import gc
import random
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import aclosing
from pathlib import Path
from typing import Any, TypeVar

import pytest
import trio
from helpers import FailingBarrier

from actorloop.runtime import (
    AgentOptions,
    ProviderError,
    SessionEvent,
    SessionForkError,
    StoreError,
    Tool,
    TurnFailed,
    aio,
)
from actorloop.runtime.control.collector import CollectorPolicy
from actorloop.runtime.errors import (
    AgentClosed,
    ErrorCode,
    HookError,
    JsonValueError,
    ProviderNotConfigured,
    RuntimeClosed,
    SessionBusy,
    StoreUrlError,
    UnknownHookError,
)
from actorloop.runtime.log.request import Request
from actorloop.runtime.log.verify import verify_log
from actorloop.runtime.model.chunks import StreamChunk
from actorloop.runtime.model.events import ToolResultEvent, TurnEnd, UserMessage
from actorloop.runtime.model.hook_values import PreStep
from actorloop.runtime.providers.base import ModelInfo
from actorloop.runtime.stores.loading import load_session
from actorloop.runtime.testing import HANG, EchoProvider, ScriptedProvider, reply, tool_call

T = TypeVar("T")
HANG_BOUND_S = 300
OPTIONS = AgentOptions(model="m")


def run(main: Callable[[], Awaitable[T]]) -> T:
    """One asyncio program; the bound only turns a hang into a failure, so it is far above
    what the slowest program here takes on a loaded 2-core machine (200 agents: ~11 s)."""

    async def bounded() -> T:
        async with asyncio.timeout(HANG_BOUND_S):
            return await main()

    return asyncio.run(bounded())


def turn_ends(events: Sequence[SessionEvent]) -> list[TurnEnd]:
    return [e.data for e in events if isinstance(e.data, TurnEnd)]


def user_texts(events: Sequence[SessionEvent]) -> list[str]:
    return [
        "".join(getattr(b, "text", "") for b in e.data.content)
        for e in events
        if isinstance(e.data, UserMessage)
    ]


async def stored_events(rt: aio.Runtime, session_id: str) -> tuple[SessionEvent, ...]:
    """The durable log, read through the trio side as it is on disk (no repair)."""
    session = await rt.run_trio(
        lambda: load_session(rt.trio_runtime.store, session_id, repair=False)
    )
    return tuple(session.events)


def when_event(agent: aio.Agent, predicate: Callable[[SessionEvent], bool]) -> asyncio.Event:
    """An asyncio event set at the first appended event matching `predicate`."""
    seen = asyncio.Event()

    def watch(_: aio.Agent, event: SessionEvent) -> None:
        if predicate(event):
            seen.set()

    agent.on("session/event", watch)
    return seen


class ToolLoop:
    """A deterministic model per request: it asks for `calls` tool calls, one per step,
    then answers with the number of results it saw, so concurrent agents never share a
    script."""

    name = "tool-loop"

    def __init__(self, calls: int) -> None:
        self.calls = calls

    def model_info(self, model: str) -> ModelInfo | None:
        return ModelInfo(None)

    async def stream(self, request: Request) -> AsyncIterator[StreamChunk]:
        results = sum(
            1
            for message in request.messages
            for block in message.content
            if type(block).__name__ == "ToolResult"
        )
        chunks = (
            tool_call(f"c{results}", "work", {"n": results})
            if results < self.calls
            else reply(f"saw {results}")
        )
        for chunk in chunks:
            await trio.lowlevel.checkpoint()
            yield chunk


async def _work(args: dict[str, Any], ctx: Any) -> str:
    await asyncio.sleep(0)
    return f"done {args['n']}"


WORK = aio.asyncio_tool(Tool("work", "does some asyncio work", {"type": "object"}, _work))


# ---------------------------------------------------------------- the API, end to end


def test_the_runtime_api_from_asyncio(tmp_path: Path) -> None:
    url = f"sqlite:{tmp_path / 'api.db'}"

    async def main() -> None:
        async with aio.Runtime.open(
            store=url, provider=EchoProvider(echo=True), dev_invariants=True
        ) as rt:
            agent = await rt.spawn(OPTIONS, session_id="main")
            assert rt.get("main") is agent and rt.agents == (agent,)
            first = await agent.send("hello")
            assert (first.turn, first.reason, first.text) == (1, "completed", "hello")
            seen: list[SessionEvent] = []

            async def read() -> None:
                async for event in agent.events():
                    seen.append(event)

            async with asyncio.TaskGroup() as group:
                group.create_task(read())
                assert (await agent.send("again")).text == "again"
                child = await rt.fork("main", child_id="child")
                assert child.session.meta.parent_session == "main"
                assert (await child.send("in the child")).turn == 3
                await agent.dispose()
            # The reader saw the stored events, then the live ones, and ended at dispose.
            assert seen == list(agent.session.events)
            assert agent.status == "disposed"
            with pytest.raises(AgentClosed):
                await agent.send("after dispose")
            again = await rt.resume("main", OPTIONS)
            assert (await again.send("resumed")).turn == 3
            await child.dispose()
            tail = [event async for event in child.events(after=len(child.session) - 3)]
            assert tail == list(child.session.events[-2:])
            assert {meta.id for meta in await rt.list_sessions()} == {"main", "child"}
            assert rt.invariant_checks == 4
            await again.dispose()
            for live in (again, child):
                await live.wait_idle()
                assert list(await stored_events(rt, live.id)) == list(live.session.events)
                verify_log(live.session.meta, live.session.events)
            assert user_texts(again.session.events) == ["hello", "again", "resumed"]

    run(main)


def test_synchronous_members_act_and_raise_at_the_call() -> None:
    async def main() -> None:
        async with aio.Runtime.open(provider=ScriptedProvider([HANG, reply("steered")])) as rt:
            agent = await rt.spawn(OPTIONS)
            running = when_event(agent, lambda e: e.type == "assistant/chunk")
            sending = asyncio.create_task(agent.send("hangs"))
            await running.wait()
            before = len(agent.session)
            agent.inject("context while it runs", "notes", {"k": 1})
            # Appended by the call itself, as with trio: the loop runs on this thread.
            assert agent.session.events[before].type == "context/message"
            with pytest.raises(JsonValueError):
                agent.inject("bad meta", "notes", {"k": object()})
            assert len(agent.session) == before + 1
            agent.cancel("stop", keep_inbox=True)
            assert (await sending).reason == "aborted"
            agent.steer("go on")
            await agent.wait_idle()
            assert turn_ends(agent.session.events)[-1].reason.kind == "completed"
            await agent.dispose()
            with pytest.raises(AgentClosed):
                agent.steer("too late")

    run(main)


# ---------------------------------------------------------------- cancellation: asyncio → trio


def test_a_timeout_aborts_the_running_turn_and_raises_once_it_is_closed(tmp_path: Path) -> None:
    url = f"sqlite:{tmp_path / 'timeout.db'}"

    async def main() -> None:
        provider = ScriptedProvider([HANG, reply("next one")])
        async with aio.Runtime.open(store=url, provider=provider) as rt:
            agent = await rt.spawn(OPTIONS)
            loop = asyncio.get_running_loop()
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(None) as deadline:
                    # The deadline passes the moment the model has started streaming.
                    agent.on(
                        "session/event",
                        lambda _, e: (
                            e.type == "assistant/chunk" and deadline.reschedule(loop.time())
                        ),
                    )
                    await agent.send("this one hangs")
            # When the caller sees its cancellation the turn is closed and durable.
            assert agent.session.open_turn is None
            (end,) = turn_ends(agent.session.events)
            assert (end.reason.kind, end.reason.reason) == ("aborted", "caller cancelled")
            assert await stored_events(rt, agent.id) == tuple(agent.session.events)
            # Only that item was cancelled: the agent takes the next one normally.
            assert (await agent.send("and this one")).text == "next one"
            verify_log(agent.session.meta, agent.session.events)

    run(main)


def test_wait_for_on_a_queued_send_withdraws_it_unlogged() -> None:
    async def main() -> None:
        gate = asyncio.Event()

        async def held(args: dict[str, Any], ctx: Any) -> str:
            await gate.wait()
            return "released"

        tool = aio.asyncio_tool(Tool("hold", "", {"type": "object"}, held))
        provider = ScriptedProvider([tool_call("h", "hold"), reply("first"), reply("third")])
        async with aio.Runtime.open(provider=provider) as rt:
            agent = await rt.spawn(AgentOptions(model="m", tools=(tool,)))
            holding = when_event(agent, lambda e: e.type == "tool/call")
            first = asyncio.create_task(agent.send("first"))
            await holding.wait()
            # The first turn holds until the gate opens, so this send stays queued for as
            # long as wait_for gives it.
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(agent.send("second, abandoned"), timeout=0.05)
            gate.set()
            assert (await first).text == "first"
            assert (await agent.send("third")).text == "third"
            assert user_texts(agent.session.events) == ["first", "third"]

    run(main)


def test_cancellation_at_random_points_cancels_only_its_item(tmp_path: Path) -> None:
    url = f"sqlite:{tmp_path / 'random.db'}"
    rng = random.Random(1606)
    turn_length = 45  # a turn of three tool calls logs seqs 0..44 (turn/end at 44)

    async def trial(rt: aio.Runtime, n: int) -> None:
        agent = await rt.spawn(AgentOptions(model="m", tools=(WORK,)), session_id=f"a{n}")
        point = rng.randrange(turn_length)
        queue_behind = rng.random() < 0.3
        target = asyncio.create_task(agent.send("work"))
        behind: list[asyncio.Task[Any]] = []

        def at_event(_: aio.Agent, event: SessionEvent) -> None:
            if event.seq == 0 and queue_behind:
                behind.append(asyncio.create_task(agent.send("behind")))
            if event.seq == point:
                target.cancel()

        agent.on("session/event", at_event)
        with pytest.raises(asyncio.CancelledError):
            await target
        # The caller resumes only once its turn is closed: it has its turn/end already.
        end = turn_ends(agent.session.events)[0]
        assert end.turn == 1 and agent.session.open_turn in (None, 2)
        if end.reason.kind == "aborted":
            assert end.reason.reason == "caller cancelled"
        else:
            assert end.reason.kind == "completed"
        for queued in behind:
            assert (await queued).reason == "completed"
        after = await agent.send("after")
        assert (after.reason, after.text) == ("completed", "saw 3")
        await agent.dispose()
        verify_log(agent.session.meta, agent.session.events)
        assert await stored_events(rt, agent.id) == tuple(agent.session.events)

    async def main() -> None:
        provider = ToolLoop(3)
        async with (
            aio.Runtime.open(store=url, provider=provider, dev_invariants=True) as rt,
            asyncio.TaskGroup() as group,
        ):
            for n in range(40):
                group.create_task(trial(rt, n))

    run(main)


# ---------------------------------------------------------------- cancellation: trio → asyncio


def test_cancelling_the_turn_cancels_an_asyncio_tool_and_waits_for_it() -> None:
    async def main() -> None:
        started = asyncio.Event()
        stopped: list[str] = []

        async def forever(args: dict[str, Any], ctx: Any) -> str:
            started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                await asyncio.sleep(0)  # cleanup that awaits still runs before the close
                stopped.append(f"call {ctx.call_id} of turn {ctx.turn}")
                raise
            raise AssertionError("unreachable")

        tool = aio.asyncio_tool(Tool("forever", "", {"type": "object"}, forever))
        assert aio.asyncio_tool(tool) is tool
        provider = ScriptedProvider([tool_call("f1", "forever"), tool_call("f2", "forever")])
        async with aio.Runtime.open(provider=provider) as rt:
            agent = await rt.spawn(AgentOptions(model="m", tools=(tool,)))
            sending = asyncio.create_task(agent.send("cancel me"))
            await started.wait()
            agent.cancel("enough")
            result = await sending
            assert (result.reason, result.message) == ("aborted", "enough")
            assert stopped == ["call f1 of turn 1"]
            (outcome,) = [
                e.data for e in agent.session.events if isinstance(e.data, ToolResultEvent)
            ]
            assert outcome.error is not None and outcome.error.code == ErrorCode.TOOL_CANCELLED
            started.clear()
            sending = asyncio.create_task(agent.send("dispose me"))
            await started.wait()
            await agent.dispose()
            assert (await sending).reason == "disposed"
            assert stopped[-1] == "call f2 of turn 2"

    run(main)


# ---------------------------------------------------------------- listeners


def test_listeners_run_as_asyncio_code_with_the_asyncio_handle() -> None:
    async def main() -> None:
        calls: list[str] = []
        async with aio.Runtime.open(provider=EchoProvider()) as rt:

            async def sections(agent: aio.Agent, value: tuple[str, ...], next: Any) -> Any:
                assert isinstance(agent, aio.Agent)
                await asyncio.sleep(0)
                calls.append("assemble")
                return ("Asyncio section", *await next())

            async def pre_step(agent: aio.Agent, value: PreStep) -> None:
                await asyncio.sleep(0)
                calls.append(f"pre-step {value.step}: {value.full_system_prompt}")

            rt.on("system-prompt/assemble", sections)
            agent = await rt.spawn(AgentOptions(model="m", system="Base"))
            unsubscribe = agent.on("agent/pre-step", pre_step)
            statuses: list[str] = []
            agent.on("agent/status", lambda a, status: statuses.append(f"{a.id}:{status}"))
            assert (await agent.send("hi")).reason == "completed"
            assert calls == ["assemble", "pre-step 1: Base\n\nAsyncio section"]
            assert statuses == [f"{agent.id}:running", f"{agent.id}:idle"]
            unsubscribe()
            await agent.send("again")
            assert calls[-1] == "assemble"

            async def notify(agent: aio.Agent, value: Any) -> None:
                raise AssertionError("never called")

            with pytest.raises(TypeError, match="plain functions"):
                agent.on("agent/status", notify)
            with pytest.raises(UnknownHookError):
                rt.on("no/such-hook", lambda a, v: None)
            with pytest.raises(HookError, match="not callable"):
                rt.on("agent/pre-step", "not a function")

    run(main)


def test_an_asyncio_serial_listener_answer_reaches_the_loop() -> None:
    async def main() -> None:
        provider = ScriptedProvider([tool_call("w", "work", {"n": 0}), reply("never asked")])
        async with aio.Runtime.open(provider=provider) as rt:
            agent = await rt.spawn(AgentOptions(model="m", tools=(WORK,)))

            async def stop(agent: aio.Agent, value: Any) -> str:
                await asyncio.sleep(0)
                return f"stopped after step {value.step}"

            agent.on("agent/turn-stop", stop)
            result = await agent.send("work once")
            assert (result.reason, result.steps) == ("completed", 1)
            (end,) = turn_ends(agent.session.events)
            assert end.reason.reason == "stopped after step 1"
            assert provider.script  # the second answer was never requested
            assert agent.reconfigure(system="changed").system == "changed"

    run(main)


def test_a_cancelled_turn_cancels_an_awaiting_listener_and_a_failing_one_fails_the_turn() -> None:
    async def main() -> None:
        entered = asyncio.Event()
        seen: list[str] = []
        async with aio.Runtime.open(provider=EchoProvider()) as rt:
            agent = await rt.spawn(OPTIONS)

            async def blocks(agent: aio.Agent, value: PreStep) -> None:
                entered.set()
                try:
                    await asyncio.Event().wait()
                finally:
                    seen.append("listener stopped")

            unsubscribe = agent.on("agent/pre-step", blocks)
            sending = asyncio.create_task(agent.send("hi"))
            await entered.wait()
            agent.cancel("from outside")
            assert (await sending).reason == "aborted" and seen == ["listener stopped"]
            unsubscribe()

            async def fails(agent: aio.Agent, value: PreStep) -> None:
                await asyncio.sleep(0)
                raise ValueError("listener broke")

            agent.on("agent/pre-step", fails)
            failed = await agent.send("again")
            assert failed.reason == "error" and "listener broke" in (failed.message or "")
            with pytest.raises(TurnFailed):
                failed.raise_for_error()

    run(main)


# ---------------------------------------------------------------- errors


def test_failures_reach_asyncio_as_the_typed_exceptions_trio_callers_get(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def boom(request: Request) -> Any:
        raise ProviderError("the model is down", "OVERLOADED")

    async def main() -> None:
        with pytest.raises(StoreUrlError):
            async with aio.Runtime.open(store="nosuch:thing"):
                raise AssertionError("unreachable")
        url = f"sqlite:{tmp_path / 'errors.db'}"
        async with aio.Runtime.open(store=url, provider=ScriptedProvider([boom])) as rt:
            agent = await rt.spawn(OPTIONS, session_id="one")
            result = await agent.send("hi")
            assert (result.reason, result.code) == ("error", "OVERLOADED")
            with pytest.raises(ProviderNotConfigured):
                await rt.spawn(AgentOptions(model="m", provider="nope"))
            with pytest.raises(SessionBusy):
                await rt.spawn(OPTIONS, session_id="one")
            with pytest.raises(SessionForkError) as refused:
                await rt.fork("one", boundary=10_000)
            assert refused.value.code == ErrorCode.INVALID_BOUNDARY
            # The agent's loop crashes: its store write fails at the turn's final barrier.
            FailingBarrier(rt.trio_runtime._loops["one"], 1, StoreError("the disk is gone"))
            crashed = await agent.send("crash")
            assert crashed.reason == "error" and "agent failed" in (crashed.message or "")
            assert agent.status == "failed"
            with pytest.raises(AgentClosed):
                await agent.send("after the crash")
        assert agent.status == "failed"

    with caplog.at_level("CRITICAL", logger="actorloop"):
        run(main)


# ---------------------------------------------------------------- many agents and slow readers


def test_two_hundred_concurrent_agents_from_asyncio(tmp_path: Path) -> None:
    url = f"sqlite:{tmp_path / 'many.db'}"

    async def drive(rt: aio.Runtime, n: int) -> tuple[int, aio.Agent]:
        agent = await rt.spawn(AgentOptions(model="m", tools=(WORK,)), session_id=f"agent{n}")
        results = [await agent.send(f"task {n}.{k}") for k in range(2)]
        assert [r.reason for r in results] == ["completed", "completed"]
        assert [r.text for r in results] == ["saw 2", "saw 2"]
        return n, agent

    async def main() -> None:
        async with aio.Runtime.open(store=url, provider=ToolLoop(2)) as rt:
            agents = await asyncio.gather(*(drive(rt, n) for n in range(200)))
            assert len(rt.agents) == 200
        async with aio.Runtime.open(store=url, provider=ToolLoop(2)) as rt:
            assert len(await rt.list_sessions()) == 200
            for n, agent in agents:
                stored = await stored_events(rt, agent.id)
                assert stored == tuple(agent.session.events)
                verify_log(agent.session.meta, stored)
                assert user_texts(stored) == [f"task {n}.0", f"task {n}.1"]

    run(main)


def test_a_slow_consumer_never_holds_the_loop_up_nor_loses_or_reorders_events() -> None:
    async def main() -> None:
        async with aio.Runtime.open(provider=EchoProvider()) as rt:
            agent = await rt.spawn(OPTIONS)
            await agent.send("turn 0")
            reader = agent.events(buffer=2)
            first = await reader.__anext__()
            # The consumer takes nothing while ten turns run: none of them waits for it.
            for n in range(1, 11):
                assert (await agent.send(f"turn {n}")).reason == "completed"
            await agent.dispose()
            rest = [event async for event in reader]
            assert [first, *rest] == list(agent.session.events)
            with pytest.raises(ValueError, match="buffer"):
                async for _ in agent.events(buffer=0):
                    pass
            with pytest.raises(TypeError, match="seq"):
                async for _ in agent.events(after="3"):  # type: ignore[arg-type]
                    pass

    run(main)


def test_a_reader_paused_across_shutdown_still_gets_every_event() -> None:
    async def main() -> None:
        async with aio.Runtime.open(provider=EchoProvider()) as rt:
            agent = await rt.spawn(OPTIONS)
            for n in range(3):
                await agent.send(f"turn {n}")
            reader = agent.events(buffer=1)
            first = await reader.__anext__()
        # The runtime closed while the reader held one event and had read no further.
        rest = [event async for event in reader]
        assert [first, *rest] == list(agent.session.events)
        late = [event async for event in agent.events(after=5)]
        assert late == list(agent.session.events[6:])
        async with aclosing(agent.events()) as events:
            async for event in events:
                assert event.seq == 0
                break

    run(main)


# ---------------------------------------------------------------- shutdown


def test_leaving_the_runtime_while_cancelled_closes_every_agent_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    url = f"sqlite:{tmp_path / 'shutdown.db'}"

    async def main() -> None:
        ready = asyncio.Event()
        sends: list[asyncio.Task[Any]] = []
        agents: list[aio.Agent] = []
        threads_before = set(threading.enumerate())

        async def service() -> None:
            provider = ScriptedProvider([HANG, HANG])
            async with aio.Runtime.open(store=url, provider=provider) as rt:
                for n in range(2):
                    agent = await rt.spawn(OPTIONS, session_id=f"s{n}")
                    agents.append(agent)
                    running = when_event(agent, lambda e: e.type == "assistant/chunk")
                    sends.append(asyncio.create_task(agent.send("hangs")))
                    await running.wait()
                ready.set()
                await asyncio.Event().wait()

        task = asyncio.create_task(service())
        await ready.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.wait(sends)
        # Every turn ended `disposed` and is durable before the cancelled task resumed.
        for agent, send in zip(agents, sends, strict=True):
            assert send.done() and send.result().reason == "disposed"
            assert agent.status == "disposed"
            assert [e.reason.kind for e in turn_ends(agent.session.events)] == ["disposed"]
        assert not trio.lowlevel.in_trio_run()
        assert asyncio.all_tasks() == {asyncio.current_task()}
        leftover = set(threading.enumerate()) - threads_before
        # Trio parks finished worker threads in its cache (daemons, idle until they expire).
        assert all(t.daemon and t.name.startswith("Trio thread") for t in leftover)
        async with aio.Runtime.open(store=url) as rt:
            for agent in agents:
                stored = await stored_events(rt, agent.id)
                assert stored == tuple(agent.session.events)
                verify_log(agent.session.meta, stored)
            with pytest.raises(RuntimeClosed):
                await agents[0].send("to a closed runtime")

    run(main)


def test_runtimes_on_one_loop_share_one_guest_run() -> None:
    async def main() -> None:
        async with aio.Runtime.open(provider=EchoProvider()) as one:
            async with aio.Runtime.open(provider=EchoProvider(echo=True)) as two:
                token = trio.lowlevel.current_trio_token()
                a = await one.spawn(OPTIONS)
                b = await two.spawn(OPTIONS)
                assert (await a.send("x")).text == "ok"
                assert (await b.send("y")).text == "y"
            assert trio.lowlevel.current_trio_token() is token
            assert (await a.send("still")).reason == "completed"
        assert not trio.lowlevel.in_trio_run()
        async with aio.Runtime.open(provider=EchoProvider()) as three:
            assert trio.lowlevel.current_trio_token() is not token
            assert (await (await three.spawn(OPTIONS)).send("z")).text == "ok"

    run(main)


def test_the_bridge_refuses_calls_once_closed_and_a_trio_run_on_the_thread() -> None:
    async def main() -> None:
        async with aio.Runtime.open(provider=EchoProvider()) as rt:
            pass
        with pytest.raises(RuntimeClosed):
            await rt.spawn(OPTIONS)
        assert rt.agents == () and rt.get("anything") is None

    run(main)

    async def inside_trio() -> None:
        loop = asyncio.new_event_loop()
        try:
            with pytest.raises(RuntimeError, match="trio is already running"):
                loop.run_until_complete(aio.Runtime.open().__aenter__())
        finally:
            loop.close()

    trio.run(inside_trio)


def test_the_collector_policy_reaches_the_trio_runtime() -> None:
    before = gc.get_threshold()
    wanted = (before[0] + 1234, before[1] + 1, before[2] + 1)

    async def main() -> tuple[int, int, int]:
        async with aio.Runtime.open(collector=CollectorPolicy(thresholds=wanted)):
            return gc.get_threshold()

    assert run(main) == wanted
    assert gc.get_threshold() == before
