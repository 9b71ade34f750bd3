"""Loop parity with the seed harness (docs/hooks.md, docs/spec/loop.md §4): dynamic tools and
live reconfiguration recorded through the header algebra, the step-result, post-step,
turn-stop, tools/execute and inbox seams, argument validation, bad output from tools and
providers, and resume from the stored configuration."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from helpers import open_runtime

from actorloop.runtime import (
    Agent,
    AgentOptions,
    Message,
    PostStep,
    SessionEvent,
    Text,
    Tool,
    ToolCall,
    ToolCallInfo,
    ToolOutcome,
)
from actorloop.runtime.errors import InvalidToolSchema
from actorloop.runtime.log.request import Request
from actorloop.runtime.log.verify import verify_log
from actorloop.runtime.model.chunks import BlockEnd, BlockStart, Finish, TextDelta
from actorloop.runtime.model.hook_values import InboxEvent, TurnStop
from actorloop.runtime.providers.base import ModelInfo
from actorloop.runtime.stores.loading import load_session
from actorloop.runtime.testing import HANG, ScriptedProvider, reply, tool_call, tool_calls

SCHEMA = {
    "type": "object",
    "properties": {"count": {"type": "integer", "minimum": 1}, "name": {"type": "string"}},
    "required": ["count"],
}


def echo_tool(name: str = "echo", parameters: Any = None, ran: list[Any] | None = None) -> Tool:
    async def execute(args: dict[str, Any], ctx: Any) -> str:
        if ran is not None:
            ran.append(args)
        return f"{name} {args}"

    return Tool(name, f"the {name} tool", parameters or {"type": "object"}, execute)


def header_events(events: Sequence[SessionEvent]) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for event in events:
        if event.type == "request/header":
            out.append(("snapshot", event.data.reason))
        elif event.type == "request/header-delta":
            out.append(("delta", event.data))
    return out


def results(events: Sequence[SessionEvent]) -> dict[str, Any]:
    return {e.data.call_id: e.data for e in events if e.type == "tool/result"}


def turn_reasons(events: Sequence[SessionEvent]) -> list[str]:
    return [e.data.reason.kind for e in events if e.type == "turn/end"]


# ---------------------------------------------------------------- dynamic tools


async def test_tools_assemble_grows_the_tool_list_mid_session() -> None:
    ran: list[Any] = []
    extra = echo_tool("plugin_tool", ran=ran)
    provider = ScriptedProvider(
        [reply("no tools yet"), tool_call("p1", "plugin_tool", {"x": 1}), reply("used it")]
    )
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(AgentOptions(model="m", tools=(echo_tool(),)))
        await agent.send("first")
        unsubscribe = agent.on("tools/assemble", lambda a, tools, next: next((*tools, extra)))
        await agent.send("second")
        unsubscribe()
    assert ran == [{"x": 1}]
    assert [t.name for t in provider.requests[0].tools] == ["echo"]
    assert [t.name for t in provider.requests[1].tools] == ["echo", "plugin_tool"]
    kinds = header_events(agent.session.events)
    assert kinds[0] == ("snapshot", "initial")
    delta = kinds[1][1]
    assert delta.tools is not None and [t.name for t in delta.tools.added] == ["plugin_tool"]
    verify_log(agent.session.meta, agent.session.events)


async def test_a_pure_tool_reorder_is_a_fallback_snapshot() -> None:
    provider = ScriptedProvider([reply("one"), reply("two")])
    tools = (echo_tool("a"), echo_tool("b"))
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(AgentOptions(model="m", tools=tools))
        await agent.send("first")
        agent.on("tools/assemble", lambda a, tools, next: next(tuple(reversed(tools))))
        await agent.send("second")
    assert [t.name for t in provider.requests[1].tools] == ["b", "a"]
    assert [k for k in header_events(agent.session.events)] == [
        ("snapshot", "initial"),
        ("snapshot", "fallback"),
    ]
    verify_log(agent.session.meta, agent.session.events)


async def test_reconfigure_takes_effect_from_the_next_step_and_is_recorded() -> None:
    ran: list[Any] = []
    provider = ScriptedProvider([reply("before"), tool_call("n1", "new_tool", {}), reply("after")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(AgentOptions(model="m", system="Be brief.", tools=(echo_tool(),)))
        await agent.send("first")
        new = agent.reconfigure(
            system="Be very brief.",
            model="m2",
            temperature=0.5,
            tools=(echo_tool("new_tool", ran=ran),),
        )
        assert agent.options is new and new.model == "m2"
        await agent.send("second")
        with pytest.raises(ValueError, match="provider"):
            agent.reconfigure(provider="other")
        with pytest.raises(TypeError):
            agent.reconfigure(not_an_option=1)
    second = provider.requests[1]
    assert (second.model, second.config.temperature, second.system) == ("m2", 0.5, "Be very brief.")
    assert [t.name for t in second.tools] == ["new_tool"] and ran == [{}]
    delta = header_events(agent.session.events)[1][1]
    assert delta.system is not None and delta.config is not None and delta.tools is not None
    assert provider.requests[2].model == "m2"  # the next step seeds from the header again
    verify_log(agent.session.meta, agent.session.events)


async def test_an_agent_request_change_still_sticks_after_a_reconfigure_of_other_things() -> None:
    provider = ScriptedProvider([reply("a"), reply("b"), reply("c")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(AgentOptions(model="m"))
        once = [True]

        async def switch_once(a: Agent, config: Any, next: Any) -> Any:
            if once:
                once.clear()
                return await next(attrs.evolve(config, model="other"))
            return await next()

        agent.on("agent/request", switch_once)
        await agent.send("one")
        await agent.send("two")  # seeded from the header: still "other"
        agent.reconfigure(system="new system")  # no call setting changed
        await agent.send("three")
    assert [r.model for r in provider.requests] == ["other", "other", "other"]


# ---------------------------------------------------------------- the new seams


async def test_step_result_replaces_the_content_and_keeps_the_chunks_as_provenance() -> None:
    provider = ScriptedProvider([reply("raw answer")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(AgentOptions(model="m"))
        agent.on(
            "agent/step-result",
            lambda a, message, next: Message.assistant(message.text.upper()),
        )
        result = await agent.send("hi")
    message = next(e for e in agent.session.events if e.type == "assistant/message")
    chunks = [e.seq for e in agent.session.events if e.type == "assistant/chunk"]
    assert result.text == "RAW ANSWER" and message.data.rewritten
    assert message.source_event_seqs == tuple(chunks)
    verify_log(agent.session.meta, agent.session.events)


async def test_step_result_may_add_a_call_and_the_pairing_stays_valid() -> None:
    provider = ScriptedProvider([reply("x"), reply("y")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(AgentOptions(model="m"))
        added: list[bool] = []

        def add_a_call_once(a: Agent, message: Message, next: Any) -> Message:
            if added:
                return message
            added.append(True)
            return Message("assistant", (*message.content, ToolCall("z", "nope", "{}")))

        agent.on("agent/step-result", add_a_call_once)
        # A call the model never asked for: the tool does not exist, and its error result
        # keeps the call/result pairing valid for the next request.
        assert (await agent.send("go")).reason == "completed"
    assert results(agent.session.events)["z"].error.code == "TOOL_NOT_FOUND"
    verify_log(agent.session.meta, agent.session.events)


async def test_step_result_must_return_an_assistant_message_of_answer_blocks() -> None:
    provider = ScriptedProvider([reply("x")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(AgentOptions(model="m"))
        agent.on("agent/step-result", lambda a, m, next: Message.user("not an answer"))
        result = await agent.send("go")
    assert result.reason == "error" and "agent/step-result" in (result.message or "")
    assert not any(e.type == "assistant/message" for e in agent.session.events)


@pytest.mark.parametrize(
    "seam", ["agent/step-result", "tools/execute", "agent/post-step", "agent/turn-stop"]
)
async def test_a_listener_that_cancels_and_returns_normally_is_honoured(seam: str) -> None:
    ran: list[Any] = []
    provider = ScriptedProvider([tool_call("c1", "echo", {}), reply("after"), reply("next")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(AgentOptions(model="m", tools=(echo_tool(ran=ran),)))
        fired: list[str] = []

        async def waterfall(a: Agent, value: Any, next: Any) -> Any:
            fired.append(seam)
            a.cancel(f"cancelled in {seam}")
            return await next()

        async def serial(a: Agent, value: Any) -> Any:
            if not fired:
                fired.append(seam)
                a.cancel(f"cancelled in {seam}")
            return None

        unsubscribe = agent.on(
            seam, serial if seam.startswith("agent/p") or "stop" in seam else waterfall
        )
        result = await agent.send("go")
        unsubscribe()
        assert result.reason == "aborted" and fired
        events = agent.session.events
        if seam == "agent/step-result":
            assert not any(e.type == "assistant/message" for e in events) and ran == []
        if seam == "tools/execute":
            assert ran == [{}]  # next() ran the tool; its outcome is the real result
        assert len(provider.requests) == 1  # the turn did not go on
        assert (await agent.send("again")).reason == "completed"
        verify_log(agent.session.meta, agent.session.events)


async def test_post_step_runs_after_every_step_and_after_an_aborted_batch() -> None:
    seen: list[PostStep] = []

    async def hang(args: dict[str, Any], ctx: Any) -> str:
        await trio.sleep_forever()
        return "never"

    provider = ScriptedProvider(
        [tool_call("t1", "echo", {}), reply("done"), tool_call("h", "hang", {})]
    )
    async with open_runtime(provider) as rt, trio.open_nursery() as nursery:
        tools = (echo_tool(), Tool("hang", "", {"type": "object"}, hang))
        agent = await rt.spawn(AgentOptions(model="m", tools=tools))
        agent.on("agent/post-step", lambda a, value: seen.append(value))
        await agent.send("two steps")
        nursery.start_soon(agent.send, "hangs in a tool")
        await trio.testing.wait_all_tasks_blocked()
        agent.cancel("stop")
        await agent.wait_idle()
    assert seen == [PostStep(1, 1), PostStep(1, 2), PostStep(2, 1, cancelled=True)]
    step_end = max(e.seq for e in agent.session.events if e.type == "step/end")
    assert results(agent.session.events)["h"].error.code == "TOOL_CANCELLED"
    assert agent.session.events[-1].type == "turn/end" and step_end < agent.session.events[-1].seq


async def test_turn_stop_ends_the_turn_and_discards_pending_steering() -> None:
    provider = ScriptedProvider([tool_call("c1", "echo", {}), reply("never asked")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(AgentOptions(model="m", tools=(echo_tool(),)))
        stops: list[TurnStop] = []

        def stop(a: Agent, value: TurnStop) -> str:
            stops.append(value)
            a.steer("this steering is dropped")
            return "budget spent"

        agent.on("agent/turn-stop", stop)
        result = await agent.send("go")
    assert (result.reason, result.message, result.steps) == ("completed", "budget spent", 1)
    assert stops == [TurnStop(1, 1)] and len(provider.requests) == 1
    assert not any(e.type == "steering/message" for e in agent.session.events)
    assert agent.session.last_turn == 1  # the steering did not start another turn


async def test_tools_execute_can_short_circuit_and_wrap() -> None:
    ran: list[Any] = []
    provider = ScriptedProvider([tool_calls(("a", "echo", {}), ("b", "echo", {})), reply("ok")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(AgentOptions(model="m", tools=(echo_tool(ran=ran),)))
        wrapped: list[str] = []

        async def execute(a: Agent, info: ToolCallInfo, next: Any) -> Any:
            if info.call_id == "a":
                return ToolOutcome(
                    info.turn, info.step, info.call_id, info.name, info.arguments, (Text("cached"),)
                )
            outcome = await next()
            wrapped.append(outcome.content[0].text)
            return outcome

        agent.on("tools/execute", execute)
        await agent.send("go")
    got = results(agent.session.events)
    assert got["a"].content == (Text("cached"),) and ran == [{}]  # only b's tool ran
    assert wrapped == ["echo {}"] and got["b"].content == (Text("echo {}"),)


async def test_inbox_notifications_say_enqueue_dequeue_and_discard() -> None:
    provider = ScriptedProvider([HANG, reply("second")])
    events: list[InboxEvent] = []
    async with open_runtime(provider) as rt, trio.open_nursery() as nursery:
        agent = await rt.spawn(AgentOptions(model="m"))
        agent.on("agent/inbox", lambda a, value: events.append(value))
        nursery.start_soon(agent.send, "first")
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(agent.send, "queued")
        await trio.testing.wait_all_tasks_blocked()
        agent.cancel("all of it")
        await agent.wait_idle()
    assert [(e.kind, e.item) for e in events] == [
        ("enqueue", "message"),
        ("dequeue", "message"),
        ("enqueue", "message"),
        ("discard", "message"),
    ]
    assert [e.queued for e in events] == [1, 0, 1, 0]


# ---------------------------------------------------------------- arguments and bad output


async def test_arguments_are_validated_against_the_schema_before_the_tool_runs() -> None:
    ran: list[Any] = []
    provider = ScriptedProvider(
        [
            tool_calls(("bad", "count", {"count": "three"}), ("good", "count", {"count": 3})),
            reply("ok"),
        ]
    )
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(AgentOptions(model="m", tools=(echo_tool("count", SCHEMA, ran),)))
        await agent.send("go")
    got = results(agent.session.events)
    assert got["bad"].is_error and got["bad"].error.code == "INVALID_ARGUMENTS"
    assert "$.count" in got["bad"].content[0].text and "integer" in got["bad"].content[0].text
    assert ran == [{"count": 3}] and not got["good"].is_error


def test_a_tool_with_an_invalid_schema_is_refused_when_made() -> None:
    with pytest.raises(InvalidToolSchema, match="parameters"):
        echo_tool("broken", {"type": "objekt"})


@pytest.mark.parametrize("hook", ["tools/pre-execute", "tools/post-execute"])
async def test_a_listener_may_not_change_a_calls_id_or_name(hook: str) -> None:
    provider = ScriptedProvider([tool_call("c1", "echo", {}), reply("after")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(AgentOptions(model="m", tools=(echo_tool(),)))

        async def rename(a: Agent, value: Any, next: Any) -> Any:
            result = await next()
            return attrs.evolve(result, call_id="other")

        agent.on(hook, rename)
        result = await agent.send("go")
    assert result.reason == "error" and hook in (result.message or "")
    assert "c1" in results(agent.session.events)  # the call still has its result
    verify_log(agent.session.meta, agent.session.events)


async def test_bad_tool_output_is_an_error_result_not_a_crash() -> None:
    async def five(args: dict[str, Any], ctx: Any) -> Any:
        return (Text(5),)  # type: ignore[arg-type]

    async def a_dict(args: dict[str, Any], ctx: Any) -> Any:
        return {"not": "blocks"}

    tools = (Tool("five", "", {}, five), Tool("dict", "", {}, a_dict))
    provider = ScriptedProvider([tool_calls(("a", "five", {}), ("b", "dict", {})), reply("fine")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(AgentOptions(model="m", tools=tools))
        result = await agent.send("go")
        assert agent.status == "idle"
    assert result.reason == "completed"
    got = results(agent.session.events)
    assert {got["a"].error.code, got["b"].error.code} == {"INVALID_TOOL_OUTPUT"}


class Yields:
    """A provider that yields whatever it is given (not only stream chunks)."""

    name = "yields"

    def __init__(self, *items: Any) -> None:
        self.items = items

    def model_info(self, model: str) -> ModelInfo | None:
        return None

    async def stream(self, request: Request) -> AsyncIterator[Any]:
        for item in self.items:
            yield item


@pytest.mark.parametrize("junk", [None, "text", {"type": "text_delta"}])
async def test_a_provider_yielding_non_chunks_fails_the_request(junk: Any) -> None:
    provider = Yields(BlockStart(0, "text"), junk, Finish("stop"))
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(AgentOptions(model="m"))
        result = await agent.send("go")
        assert agent.status == "idle"
    assert (result.reason, result.code) == ("error", "PROTOCOL_ERROR")
    assert "not a stream chunk" in (result.message or "")


async def test_duplicate_tool_call_ids_fail_the_request_before_anything_is_committed() -> None:
    provider = ScriptedProvider([tool_calls(("same", "echo", {}), ("same", "echo", {}))])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(AgentOptions(model="m", tools=(echo_tool(),)))
        result = await agent.send("go")
    assert (result.reason, result.code) == ("error", "DUPLICATE_TOOL_CALL_ID")
    assert not any(e.type == "assistant/message" for e in agent.session.events)


async def test_a_text_only_answer_with_an_empty_finish_still_completes() -> None:
    provider = Yields(BlockStart(0, "text"), TextDelta(0, "ok"), BlockEnd(0), Finish("stop"))
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(AgentOptions(model="m"))
        assert (await agent.send("go")).text == "ok"


# ---------------------------------------------------------------- resume from the header


async def test_resume_without_options_restores_model_system_and_config(tmp_path: Path) -> None:
    url = f"sqlite:{tmp_path / 'restore.db'}"
    options = AgentOptions(model="m1", system="You are kind.", temperature=0.3, max_tokens=99)
    provider = ScriptedProvider([reply("first"), reply("second")])
    async with open_runtime(provider, store=url) as rt:
        agent = await rt.spawn(options, session_id="restored")
        await agent.send("hello")
    async with open_runtime(provider, store=url) as rt:
        again = await rt.resume("restored")
        assert (again.options.model, again.options.system) == ("m1", "You are kind.")
        assert (again.options.temperature, again.options.max_tokens) == (0.3, 99)
        assert again.options.tools == ()
        await again.send("again")
        stored = await load_session(rt.store, "restored")
    first, second = provider.requests
    assert (second.model, second.system, second.config) == (first.model, first.system, first.config)
    kinds = header_events(stored.events)
    assert kinds == [("snapshot", "initial"), ("snapshot", "resume")]
    verify_log(stored.meta, stored.events)


async def test_tools_execute_may_not_run_another_call_than_the_logged_one() -> None:
    ran: list[Any] = []
    provider = ScriptedProvider([tool_call("c1", "echo", {"a": 1}), reply("after")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(AgentOptions(model="m", tools=(echo_tool(ran=ran),)))

        async def swap(a: Agent, info: ToolCallInfo, next: Any) -> Any:
            return await next(attrs.evolve(info, arguments='{"a": 2}'))

        agent.on("tools/execute", swap)
        result = await agent.send("go")
    assert result.reason == "error" and "tools/execute" in (result.message or "") and ran == []
    assert "c1" in results(agent.session.events)
    verify_log(agent.session.meta, agent.session.events)


async def test_a_short_circuit_outcome_survives_a_cancel_before_it_is_logged() -> None:
    release = trio.Event()

    async def slow(args: dict[str, Any], ctx: Any) -> str:
        await release.wait()
        return "slow"

    tools = (Tool("slow", "", {"type": "object"}, slow), echo_tool())
    provider = ScriptedProvider([tool_calls(("a", "slow", {}), ("b", "echo", {})), reply("next")])
    async with open_runtime(provider) as rt, trio.open_nursery() as nursery:
        agent = await rt.spawn(AgentOptions(model="m", tools=tools))
        answered = trio.Event()

        async def cached(a: Agent, info: ToolCallInfo, next: Any) -> Any:
            if info.call_id != "b":
                return await next()
            answered.set()
            return ToolOutcome(
                info.turn, info.step, info.call_id, info.name, info.arguments, (Text("cached"),)
            )

        agent.on("tools/execute", cached)
        nursery.start_soon(agent.send, "go")
        await answered.wait()
        await trio.testing.wait_all_tasks_blocked()
        agent.cancel("stop")  # b's outcome is ready, waiting for a's result to be logged
        await agent.wait_idle()
    got = results(agent.session.events)
    assert got["a"].error.code == "TOOL_CANCELLED"
    assert got["b"].content == (Text("cached"),) and not got["b"].is_error


async def test_an_inbox_listener_that_cancels_on_dequeue_cancels_that_turn() -> None:
    provider = ScriptedProvider([reply("never sent"), reply("second")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(AgentOptions(model="m"))
        first = [True]

        def on_inbox(a: Agent, event: InboxEvent) -> None:
            if event.kind == "dequeue" and first:
                first.clear()
                a.cancel("refused at dequeue")

        agent.on("agent/inbox", on_inbox)
        result = await agent.send("first")
        assert (result.reason, result.turn) == ("aborted", 1)
        assert provider.requests == []
        assert (await agent.send("second")).reason == "completed"
