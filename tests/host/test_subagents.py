"""Subagents (`subagent_tool`): a child's answer becomes the parent's tool result; `fork` mode
seeds the child with the parent's closed turns; cancelling the parent's turn cancels the
child it is waiting on, and every log involved stays closed and valid."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from helpers import open_runtime, wait_until

from actorloop.runtime import AgentOptions, Message, ProviderError, SessionEvent, Text, ToolResult
from actorloop.runtime.errors import InboxFull
from actorloop.runtime.host.runtime import Runtime
from actorloop.runtime.host.subagents import subagent_tool
from actorloop.runtime.log.request import Request
from actorloop.runtime.log.verify import verify_log
from actorloop.runtime.model.chunks import StreamChunk
from actorloop.runtime.model.events import ToolResultEvent, TurnEnd, TurnStart
from actorloop.runtime.providers.base import ModelInfo
from actorloop.runtime.stores.loading import load_session
from actorloop.runtime.stores.memory import MemoryStore
from actorloop.runtime.testing import HANG, ScriptedProvider, reply, tool_call, tool_calls


class Router:
    """One scripted model per session id (children run under ids of their own)."""

    name = "router"

    def __init__(self, scripts: dict[str, list[Any]]) -> None:
        self.models = {sid: ScriptedProvider(script) for sid, script in scripts.items()}

    def model_info(self, model: str) -> ModelInfo | None:
        return ModelInfo(None)

    def requests(self, session_id: str) -> list[Request]:
        return self.models[session_id].requests

    async def stream(self, request: Request) -> AsyncIterator[StreamChunk]:
        async for chunk in self.models[request.session_id].stream(request):
            yield chunk


def options(rt: Runtime, **kwargs: Any) -> AgentOptions:
    return AgentOptions(model="m", tools=(subagent_tool(rt, **kwargs),))


def reasons(events: Sequence[SessionEvent]) -> list[str]:
    return [e.data.reason.kind for e in events if isinstance(e.data, TurnEnd)]


def closed(events: Sequence[SessionEvent]) -> bool:
    starts = [e.data.turn for e in events if isinstance(e.data, TurnStart)]
    return starts == [e.data.turn for e in events if isinstance(e.data, TurnEnd)]


def tool_results(events: Sequence[SessionEvent]) -> dict[str, ToolResultEvent]:
    return {e.data.call_id: e.data for e in events if isinstance(e.data, ToolResultEvent)}


async def test_spawned_child_answer_becomes_the_tool_result(tmp_path: Path) -> None:
    router = Router(
        {
            "P": [tool_call("c1", "delegate", {"task": "add 2 and 2"}), reply("it is 4")],
            "P.c1": [reply("4")],
        }
    )
    async with open_runtime(router, store=f"sqlite:{tmp_path / 's.db'}") as rt:
        parent = await rt.spawn(options(rt), session_id="P")
        result = await parent.send("what is 2+2?")
        assert result.reason == "completed"
        second = router.requests("P")[1]
        assert second.messages[-1] == Message(
            "user", (ToolResult("c1", (Text("4"),), is_error=False),)
        )
        assert router.requests("P.c1")[0].messages == (Message.user("add 2 and 2"),)
        # The child was disposed after answering; its session is stored with its lineage.
        assert rt.get("P.c1") is None
        metas = {meta.id: meta for meta in await rt.list_sessions()}
        assert metas["P.c1"].labels["parent_agent"] == "P"
        assert metas["P.c1"].labels["parent_call"] == "c1"
        child = await load_session(rt.store, "P.c1")
        assert reasons(child.events) == ["completed"]
        assert rt.invariant_checks == 3


async def test_fork_mode_seeds_the_child_with_the_parents_closed_turns() -> None:
    router = Router(
        {
            "P": [
                reply("hello back"),
                tool_call("f1", "delegate", {"task": "summarize"}),
                reply("done"),
            ],
            "P.f1": [reply("we said hello")],
        }
    )
    async with open_runtime(router) as rt:
        parent = await rt.spawn(options(rt, mode="fork", keep_child=True), session_id="P")
        await parent.send("hello")
        turn_one_end = len(parent.session) - 1
        await parent.send("delegate a summary")
        child = rt.get("P.f1")
        assert child is not None  # keep_child: still live
        assert child.session.meta.parent_session == "P"
        assert child.session.meta.seed_length == turn_one_end + 1
        assert child.session.events[: turn_one_end + 1] == parent.session.events[: turn_one_end + 1]
        # The child saw turn 1 but not the open turn 2 that called it.
        assert router.requests("P.f1")[0].messages == (
            Message.user("hello"),
            Message.assistant("hello back"),
            Message.user("summarize"),
        )
        assert tool_results(parent.session.events)["f1"].content == (Text("we said hello"),)
        assert reasons(parent.session.events) == ["completed", "completed"]


async def test_a_failing_child_becomes_an_error_result() -> None:
    router = Router(
        {
            "P": [tool_call("c1", "delegate", {"task": "x"}), reply("sorry")],
            "P.c1": [],  # exhausted script: the child's turn ends with an error
        }
    )
    async with open_runtime(router) as rt:
        parent = await rt.spawn(options(rt), session_id="P")
        assert (await parent.send("go")).reason == "completed"
        result = tool_results(parent.session.events)["c1"]
        assert result.is_error
        assert "ended its turn error" in result.content[0].text
        assert rt.get("P.c1") is None


async def test_cancelling_the_parent_cancels_the_hanging_child(tmp_path: Path) -> None:
    router = Router(
        {
            "P": [
                tool_calls(
                    ("a", "delegate", {"task": "task a"}),
                    ("b", "delegate", {"task": "task b"}),
                    ("c", "delegate", {"task": "task c"}),
                ),
                reply("after"),
            ],
            "P.a": [reply("a done")],
            "P.b": [reply("b done")],
            "P.c": [HANG],
        }
    )
    url = f"sqlite:{tmp_path / 'sub.db'}"
    results: list[Any] = []
    async with open_runtime(router, store=url) as rt:
        parent = await rt.spawn(options(rt), session_id="P")

        async def run() -> None:
            results.append(await parent.send("fan out"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            # The three run as one pool: a and b answer, c hangs.
            await wait_until(
                lambda: (
                    router.models["P.c"].calls == 1
                    and len(tool_results(parent.session.events)) == 2
                )
            )
            hanging = rt.get("P.c")
            assert hanging is not None and hanging.status == "running"
            parent.cancel("user pressed stop")
        assert results[0].reason == "aborted"
        assert hanging.status == "disposed"
        assert rt.agents == (parent,)
        got = tool_results(parent.session.events)
        assert [got[c].is_error for c in "abc"] == [False, False, True]
        assert got["c"].error is not None and got["c"].error.code == "TOOL_CANCELLED"
        # The next parent turn sees the aborted fan-out as a valid history.
        assert (await parent.send("again")).reason == "completed"
        parent_events = parent.session.events
    metas = {}
    logs = {}
    store_rt = open_runtime(router, store=url)
    async with store_rt as rt:
        for meta in await rt.list_sessions():
            metas[meta.id] = meta
            logs[meta.id] = await load_session(rt.store, meta.id)
    assert sorted(logs) == ["P", "P.a", "P.b", "P.c"]
    assert logs["P"].events == parent_events
    for child_id in ("P.a", "P.b", "P.c"):
        assert metas[child_id].labels["parent_agent"] == "P"
        assert metas[child_id].labels["parent_call"] == child_id[-1]
    assert reasons(logs["P.a"].events) == ["completed"]
    assert reasons(logs["P.b"].events) == ["completed"]
    assert reasons(logs["P.c"].events) == ["aborted"]
    assert any(e.type == "assistant/chunk" for e in logs["P.c"].events)
    for session in logs.values():
        assert closed(session.events)
        verify_log(session.meta, session.events)


async def test_cancelling_while_a_forked_child_hangs_closes_both_logs() -> None:
    router = Router(
        {
            "P": [reply("one"), tool_call("k", "delegate", {"task": "think"})],
            "P.k": [HANG],
        }
    )
    async with open_runtime(router) as rt:
        parent = await rt.spawn(options(rt, mode="fork"), session_id="P")
        await parent.send("first")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(parent.send, "second")
            await wait_until(lambda: router.models["P.k"].calls == 1)
            child = rt.get("P.k")
            assert child is not None and child.session.meta.parent_session == "P"
            parent.cancel()
        assert child.status == "disposed"
        assert reasons(child.session.events) == ["completed", "aborted"]
        assert reasons(parent.session.events) == ["completed", "aborted"]
        for agent in (parent, child):
            assert closed(agent.session.events)
            stored = await load_session(rt.store, agent.id)
            assert stored.events == agent.session.events


async def test_reused_and_unsafe_call_ids_still_get_distinct_children() -> None:
    # Some models number tool calls per message ("call_0" every turn), others use ids that
    # are not safe as session ids; neither may break delegation.
    unsafe = "functions.delegate:0/..x"
    scripts: dict[str, list[Any]] = {
        "P": [
            tool_call("call_0", "delegate", {"task": "first"}),
            reply("one"),
            tool_call("call_0", "delegate", {"task": "second"}),
            reply("two"),
            tool_call(unsafe, "delegate", {"task": "third"}),
            reply("three"),
            tool_call("y" * 300, "delegate", {"task": "fourth"}),
            reply("four"),
        ],
    }
    seen: list[str] = []

    class Children(Router):
        async def stream(self, request: Request) -> AsyncIterator[StreamChunk]:
            if request.session_id == "P":
                async for chunk in super().stream(request):
                    yield chunk
                return
            seen.append(request.session_id)
            for chunk in reply(f"answer to {request.messages[-1].text}"):
                yield chunk

    router = Children(scripts)
    async with open_runtime(router) as rt:
        parent = await rt.spawn(options(rt), session_id="P")
        for text in ("a", "b", "c", "d"):
            assert (await parent.send(text)).reason == "completed"
        results = [e.data for e in parent.session.events if isinstance(e.data, ToolResultEvent)]
        assert [(r.is_error, r.content[0].text) for r in results] == [
            (False, "answer to first"),
            (False, "answer to second"),
            (False, "answer to third"),
            (False, "answer to fourth"),
        ]
        assert len(set(seen)) == 4
        metas = {meta.id: meta for meta in await rt.list_sessions()}
        children = [metas[sid] for sid in seen]
        calls = [m.labels["parent_call"] for m in children]
        assert calls == ["call_0", "call_0", unsafe, "y" * 300]
        assert all(m.labels["parent_agent"] == "P" for m in children)


async def test_background_child_answer_is_injected_into_the_parent_later() -> None:
    child_may_answer = trio.Event()

    async def slow_answer(request: Request) -> Any:
        await child_may_answer.wait()
        return reply("the weather is fine")

    class GatedRouter(Router):
        async def stream(self, request: Request) -> AsyncIterator[StreamChunk]:
            if request.session_id == "P.b1":
                await child_may_answer.wait()
            async for chunk in super().stream(request):
                yield chunk

    router = GatedRouter(
        {
            "P": [
                tool_call("b1", "delegate", {"task": "check the weather"}),
                reply("asked a helper"),
                reply("thanks, noted"),
            ],
            "P.b1": [reply("the weather is fine")],
        }
    )
    async with open_runtime(router) as rt:
        parent = await rt.spawn(options(rt, background=True), session_id="P")
        assert (await parent.send("what is the weather?")).reason == "completed"
        started = tool_results(parent.session.events)["b1"]
        assert not started.is_error and "started" in started.content[0].text
        child_may_answer.set()
        await wait_until(lambda: any(e.type == "context/message" for e in parent.session.events))
        await parent.wait_idle()
        context = next(e for e in parent.session.events if e.type == "context/message")
        assert context.data.source.plugin == "subagent"
        assert "the weather is fine" in context.data.content[0].text
        assert context.data.meta == {"child": "P.b1", "call_id": "b1"}
        # An idle parent receives it as a one-shot injection turn; the next request sees it.
        assert [e.data.trigger.kind for e in parent.session.events if e.type == "turn/start"] == [
            "message",
            "injection",
        ]
        await parent.send("anything new?")
        assert any("the weather is fine" in m.text for m in router.requests("P")[-1].messages)
        await wait_until(lambda: rt.get("P.b1") is None)


@pytest.mark.parametrize("how", ["cancel", "dispose"])
async def test_parent_cancel_or_dispose_cancels_its_background_child(how: str) -> None:
    router = Router(
        {
            "P": [
                tool_call("b1", "delegate", {"task": "wait forever"}),
                reply("ok"),
                reply("yes"),
            ],
            "P.b1": [HANG],
        }
    )
    async with open_runtime(router) as rt:
        parent = await rt.spawn(options(rt, background=True, keep_child=True), session_id="P")
        assert (await parent.send("start a helper")).reason == "completed"
        await wait_until(lambda: bool(router.requests("P.b1")))
        child = rt.get("P.b1")
        assert child is not None and child.status == "running"
        if how == "cancel":
            parent.cancel("stop everything")
        else:
            await parent.dispose()
        await child.wait_idle()
        assert reasons(child.session.events) == ["aborted"], how
        assert closed(child.session.events)
        # Cancelled work is discarded, not reported: no answer reaches the parent.
        assert not any(e.type == "context/message" for e in parent.session.events)
        if how == "cancel":
            assert (await parent.send("still there?")).reason == "completed"
            assert closed(parent.session.events)


async def test_a_child_spawned_as_the_parent_is_cancelled_does_not_outlive_the_tool() -> None:
    router = Router({"P": [tool_call("c1", "delegate", {"task": "sub"}), reply("x")]})
    async with open_runtime(router) as rt:
        parent = await rt.spawn(options(rt), session_id="P")

        def cancel_parent_on_child_start(agent: Any, kind: str) -> None:
            if agent.id != parent.id:
                parent.cancel("user pressed stop")

        rt.on("agent/session-start", cancel_parent_on_child_start)
        assert (await parent.send("go")).reason == "aborted"
        await wait_until(lambda: [a.id for a in rt.agents] == ["P"])


# ---------------------------------------------------------------- owned background work


class GatedChildren(Router):
    """Children answer only once `release` is set (their parent's script runs freely)."""

    def __init__(self, scripts: dict[str, list[Any]]) -> None:
        super().__init__(scripts)
        self.release = trio.Event()
        self.child_waiting = trio.Event()

    async def stream(self, request: Request) -> AsyncIterator[StreamChunk]:
        if request.session_id != "P":
            self.child_waiting.set()
            await self.release.wait()
        async for chunk in super().stream(request):
            yield chunk


async def test_a_background_child_keeps_its_parent_running_and_wait_idle_waits() -> None:
    router = GatedChildren(
        {
            "P": [tool_call("b1", "delegate", {"task": "slow work"}), reply("started")],
            "P.b1": [reply("slow work done")],
        }
    )
    statuses: list[str] = []
    async with open_runtime(router) as rt, trio.open_nursery() as nursery:
        parent = await rt.spawn(options(rt, background=True), session_id="P")
        parent.on("agent/status", lambda agent, status: statuses.append(status))
        assert (await parent.send("delegate it")).reason == "completed"
        await router.child_waiting.wait()
        assert parent.status == "running" and statuses == ["running"]
        idle = trio.Event()

        async def wait_for_idle() -> None:
            await parent.wait_idle()
            idle.set()

        nursery.start_soon(wait_for_idle)
        await trio.testing.wait_all_tasks_blocked()
        assert not idle.is_set()
        router.release.set()
        await idle.wait()
        assert parent.status == "idle" and statuses == ["running", "idle"]
    contexts = [e for e in parent.session.events if e.type == "context/message"]
    assert len(contexts) == 1 and "slow work done" in contexts[0].data.content[0].text


async def test_closing_the_runtime_cancels_a_background_child_and_its_log_says_so(
    tmp_path: Path,
) -> None:
    router = GatedChildren(
        {"P": [tool_call("b1", "delegate", {"task": "never answers"}), reply("started")]}
    )
    url = f"sqlite:{tmp_path / 'close.db'}"
    async with open_runtime(router, store=url) as rt:
        parent = await rt.spawn(options(rt, background=True), session_id="P")
        assert (await parent.send("delegate it")).reason == "completed"
        await router.child_waiting.wait()
        assert parent.status == "running"
    async with open_runtime(router, store=url) as rt:
        child = await load_session(rt.store, "P.b1")
        stored_parent = await load_session(rt.store, "P")
    assert reasons(child.events)[-1] in ("aborted", "disposed") and closed(child.events)
    verify_log(child.meta, child.events)
    assert closed(stored_parent.events)


async def test_a_failed_background_child_leaves_a_trace_in_the_parent_log() -> None:
    def broken(request: Request) -> Any:
        raise ProviderError("the child's model is down", "OVERLOADED")

    router = Router(
        {
            "P": [tool_call("b1", "delegate", {"task": "do it"}), reply("started")],
            "P.b1": [broken],
        }
    )
    async with open_runtime(router) as rt:
        parent = await rt.spawn(options(rt, background=True), session_id="P")
        assert (await parent.send("delegate it")).reason == "completed"
        await parent.wait_idle()
    (context,) = [e for e in parent.session.events if e.type == "context/message"]
    assert "P.b1" in context.data.content[0].text and "error" in context.data.content[0].text
    assert context.data.meta == {"child": "P.b1", "call_id": "b1"}


class HeldStore(MemoryStore):
    """A memory store whose group commits can be held, so a turn's closing flush waits."""

    def __init__(self) -> None:
        super().__init__()
        self.hold: trio.Event | None = None

    async def append_batch(self, batch: Any) -> None:
        if self.hold is not None:
            await self.hold.wait()
        await super().append_batch(batch)


async def test_deliver_waits_for_a_full_inbox_instead_of_dropping() -> None:
    store = HeldStore()
    delivered = trio.Event()
    async with (
        open_runtime(ScriptedProvider([reply("first")]), store=store) as rt,
        trio.open_nursery() as nursery,
    ):
        agent = await rt.spawn(AgentOptions(model="m", inbox_capacity=1))

        async def deliver_answer() -> None:
            await agent.deliver("the late answer", source="subagent")
            delivered.set()

        def on_turn_end(a: Any, event: SessionEvent) -> None:
            if event.type == "turn/end" and store.hold is None:
                # The turn's closing flush is about to wait; the inbox fills up meanwhile.
                store.hold = trio.Event()
                a.inject("fills the inbox")
                with pytest.raises(InboxFull):
                    a.inject("no room for this one")
                nursery.start_soon(deliver_answer)

        agent.on("session/event", on_turn_end)
        nursery.start_soon(agent.send, "hello")
        await trio.testing.wait_all_tasks_blocked()
        assert store.hold is not None and not delivered.is_set()
        store.hold.set()
        await delivered.wait()
        await agent.wait_idle()
    contexts = [e.data.content[0].text for e in agent.session.events if e.type == "context/message"]
    assert contexts == ["fills the inbox", "the late answer"]
