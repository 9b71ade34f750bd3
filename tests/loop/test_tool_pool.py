"""The parallel tool pool (docs/spec/loop.md §4.13): a step's non-exclusive calls run at once,
at most `max_parallel_tool_calls` at a time; an exclusive call runs alone, as a barrier;
calls start in model order, results are appended in model order and contexts after the last
result; cancellation gives started calls their real or cancelled result and unstarted ones
the synthetic pair."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import trio
import trio.testing
from helpers import open_runtime

from actorloop.runtime import Agent, AgentOptions, SessionEvent, Tool, ToolOutcome
from actorloop.runtime.log.verify import verify_log
from actorloop.runtime.testing import ScriptedProvider, reply, tool_calls


class Gates:
    """Tools that wait for the test: each call records its start, then waits for its own
    gate; `running` counts calls inside their body at once."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.finished: list[str] = []
        self.gates: dict[str, trio.Event] = {}
        self.running = 0
        self.most = 0
        self.changed = trio.Event()

    def gate(self, call_id: str) -> trio.Event:
        return self.gates.setdefault(call_id, trio.Event())

    def tool(self, name: str = "wait", *, exclusive: bool = False) -> Tool:
        async def execute(args: dict[str, Any], ctx: Any) -> str:
            self.started.append(ctx.call_id)
            self.running += 1
            self.most = max(self.most, self.running)
            self._changed()
            try:
                await self.gate(ctx.call_id).wait()
            finally:
                self.running -= 1
            self.finished.append(ctx.call_id)
            self._changed()
            return f"done {ctx.call_id}"

        return Tool(name, "waits for its gate", {"type": "object"}, execute, exclusive=exclusive)

    def _changed(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    async def until(self, predicate: Any) -> None:
        while not predicate():
            await self.changed.wait()


def kinds(events: Sequence[SessionEvent]) -> list[str]:
    return [e.type for e in events if e.type not in ("assistant/chunk",)]


def tool_events(events: Sequence[SessionEvent]) -> list[tuple[str, str]]:
    return [(e.type, e.data.call_id) for e in events if e.type in ("tool/call", "tool/result")]


async def test_calls_run_at_once_and_results_land_in_model_order() -> None:
    gates = Gates()
    provider = ScriptedProvider([tool_calls(*((c, "wait", {}) for c in "abc")), reply("done")])
    async with open_runtime(provider) as rt, trio.open_nursery() as nursery:
        agent = await rt.spawn(AgentOptions(model="m", tools=(gates.tool(),)))

        async def post_execute(a: Agent, outcome: ToolOutcome, next: Any) -> Any:
            result = await next()
            return attrs.evolve(result, additional_context=(f"after {outcome.call_id}",))

        agent.on("tools/post-execute", post_execute)
        nursery.start_soon(agent.send, "fan out")
        await gates.until(lambda: len(gates.started) == 3)
        # All three are running; none has a result yet. Finish them in reverse order.
        assert gates.running == 3 and not any(e.type == "tool/result" for e in agent.session.events)
        for call_id in "cba":
            gates.gate(call_id).set()
            await gates.until(lambda c=call_id: c in gates.finished)
            await trio.testing.wait_all_tasks_blocked()
        await agent.wait_idle()
    events = agent.session.events
    assert gates.finished == ["c", "b", "a"]
    assert tool_events(events) == [
        ("tool/call", "a"),
        ("tool/call", "b"),
        ("tool/call", "c"),
        ("tool/result", "a"),
        ("tool/result", "b"),
        ("tool/result", "c"),
    ]
    contexts = [e.data.content[0].text for e in events if e.type == "context/message"]
    assert contexts == ["after a", "after b", "after c"]
    last_result = max(e.seq for e in events if e.type == "tool/result")
    assert all(e.seq > last_result for e in events if e.type == "context/message")
    verify_log(agent.session.meta, events)


async def test_at_most_max_parallel_tool_calls_run_at_once() -> None:
    gates = Gates()
    calls = tool_calls(*((f"c{n}", "wait", {}) for n in range(5)))
    provider = ScriptedProvider([calls, reply("done")])
    async with open_runtime(provider) as rt, trio.open_nursery() as nursery:
        options = AgentOptions(model="m", tools=(gates.tool(),), max_parallel_tool_calls=2)
        agent = await rt.spawn(options)
        nursery.start_soon(agent.send, "five calls")
        for n in range(5):
            await gates.until(lambda n=n: f"c{n}" in gates.started)
            await trio.testing.wait_all_tasks_blocked()
            assert gates.running <= 2
            gates.gate(f"c{n}").set()
        await agent.wait_idle()
    assert gates.most == 2 and gates.started == [f"c{n}" for n in range(5)]


async def test_an_exclusive_call_is_a_barrier_between_pools() -> None:
    gates = Gates()
    order: list[str] = []
    provider = ScriptedProvider(
        [
            tool_calls(("a", "wait", {}), ("b", "wait", {}), ("x", "alone", {}), ("c", "wait", {})),
            reply("done"),
        ]
    )
    async with open_runtime(provider) as rt, trio.open_nursery() as nursery:
        tools = (gates.tool(), gates.tool("alone", exclusive=True))
        agent = await rt.spawn(AgentOptions(model="m", tools=tools))
        nursery.start_soon(agent.send, "mixed")
        await gates.until(lambda: gates.started == ["a", "b"])
        await trio.testing.wait_all_tasks_blocked()
        assert gates.started == ["a", "b"]  # x waits for the pool before it
        for call_id in ("b", "a"):
            gates.gate(call_id).set()
        await gates.until(lambda: "x" in gates.started)
        await trio.testing.wait_all_tasks_blocked()
        order.extend(gates.started)
        assert gates.running == 1  # x runs alone: c has not started
        gates.gate("x").set()
        await gates.until(lambda: "c" in gates.started)
        gates.gate("c").set()
        await agent.wait_idle()
    assert order == ["a", "b", "x"] and gates.started == ["a", "b", "x", "c"]
    assert [c for kind, c in tool_events(agent.session.events) if kind == "tool/result"] == list(
        "abxc"
    )


async def test_a_cancel_in_the_pool_gives_every_call_its_result() -> None:
    gates = Gates()
    provider = ScriptedProvider([tool_calls(*((c, "wait", {}) for c in "abcd")), reply("next")])
    async with open_runtime(provider) as rt, trio.open_nursery() as nursery:
        options = AgentOptions(model="m", tools=(gates.tool(),), max_parallel_tool_calls=2)
        agent = await rt.spawn(options)
        results: list[Any] = []

        async def send() -> None:
            results.append(await agent.send("fan out"))

        nursery.start_soon(send)
        await gates.until(lambda: gates.started == ["a", "b"])
        # b finishes (its result must wait for a's, still running) and c takes its slot.
        gates.gate("b").set()
        await gates.until(lambda: "c" in gates.started)
        await trio.testing.wait_all_tasks_blocked()
        assert not any(e.type == "tool/result" for e in agent.session.events)
        agent.cancel("stop the pool")
        await agent.wait_idle()
        await trio.testing.wait_all_tasks_blocked()  # the sender has its result
        events = agent.session.events
        assert results[0].reason == "aborted"
        codes = {
            e.data.call_id: (e.data.error.code if e.data.error else "ok")
            for e in events
            if e.type == "tool/result"
        }
        assert codes == {
            "a": "TOOL_CANCELLED",
            "b": "ok",
            "c": "TOOL_CANCELLED",
            "d": "TOOL_ABORTED_BEFORE_DISPATCH",
        }
        assert [c for kind, c in tool_events(events) if kind == "tool/result"] == list("abcd")
        assert ("tool/call", "d") in tool_events(events)  # the synthetic call of d
        assert gates.started == ["a", "b", "c"]
        verify_log(agent.session.meta, events)
        assert (await agent.send("next")).reason == "completed"
