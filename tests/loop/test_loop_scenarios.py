"""Scenarios P*, R*, L*, C* of docs/spec/README.md §6, run through the public API."""

from __future__ import annotations

import itertools
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from helpers import open_runtime, types_of, wait_until

from actorloop.runtime import (
    AgentOptions,
    Allow,
    Block,
    ContextItem,
    Message,
    Text,
    Tool,
    ToolOutcome,
    ToolResult,
)
from actorloop.runtime.model.events import ContextMessage
from actorloop.runtime.testing import HANG, ScriptedProvider, reply, tool_call, tool_calls

OPTIONS = AgentOptions(model="m", system="You are terse.")


async def _echo(args: dict[str, Any], ctx: Any) -> str:
    return f"echo:{args.get('x', '')}"


ECHO = Tool("echo", "Echo x back", {"type": "object"}, _echo)


def events_of(agent: Any, kind: str) -> list[Any]:
    return [event for event in agent.session.events if event.type == kind]


# ---------------------------------------------------------------- session prefix


async def test_P1_prefix_composed_once_before_first_pre_step() -> None:
    record: list[str] = []
    opener = Message.user("opener")

    async def prefix(agent: Any, value: Any, next: Any) -> Any:
        record.append("compose")
        return (opener, *await next())

    async def pre_step(agent: Any, value: Any) -> None:
        record.append("pre-step")

    provider = ScriptedProvider([reply("hi")])
    async with open_runtime(provider) as rt:
        rt.on("agent/session-prefix", prefix)
        agent = await rt.spawn(OPTIONS)
        agent.on("agent/pre-step", pre_step)
        result = await agent.send("hello")
        assert result.reason == "completed"
        assert record == ["compose", "pre-step"]
        header = agent.session.header()
        assert header is not None and header.message_prefix == (opener,)
        assert opener not in agent.session.derive_messages()
        assert provider.requests[0].messages[0] == opener


async def test_P1_prefix_not_recomposed_in_later_turns() -> None:
    calls = 0

    async def prefix(agent: Any, value: Any, next: Any) -> Any:
        nonlocal calls
        calls += 1
        return (Message.user(f"opener {calls}"), *await next())

    provider = ScriptedProvider([reply("a"), reply("b"), reply("c")])
    async with open_runtime(provider) as rt:
        rt.on("agent/session-prefix", prefix)
        agent = await rt.spawn(OPTIONS)
        for text in ("one", "two", "three"):
            await agent.send(text)
        assert calls == 1
        assert all(r.messages[0] == Message.user("opener 1") for r in provider.requests)
        assert len(events_of(agent, "request/header")) == 1


async def test_P2_prefix_listener_cancels_then_delegates() -> None:
    async def prefix(agent: Any, value: Any, next: Any) -> Any:
        agent.cancel()
        return await next()

    provider = ScriptedProvider([reply("never")])
    async with open_runtime(provider) as rt:
        rt.on("agent/session-prefix", prefix)
        agent = await rt.spawn(OPTIONS)
        result = await agent.send("hello")
        assert result.reason == "aborted"
        kinds = types_of(agent.session.events)
        assert kinds[:2] == ["turn/start", "user/message"]
        assert "step/start" not in kinds
        assert "request/header" not in kinds
        assert "assistant/chunk" not in kinds
        assert provider.requests == []


async def test_P2_cancelled_composition_is_never_cached() -> None:
    composed: list[int] = []

    async def prefix(agent: Any, value: Any, next: Any) -> Any:
        composed.append(len(composed))
        if len(composed) == 1:
            agent.cancel()
        return (Message.user(f"opener {len(composed)}"), *await next())

    provider = ScriptedProvider([reply("ok")])
    async with open_runtime(provider) as rt:
        rt.on("agent/session-prefix", prefix)
        agent = await rt.spawn(OPTIONS)
        assert (await agent.send("first")).reason == "aborted"
        assert (await agent.send("second")).reason == "completed"
        assert composed == [0, 1]
        assert provider.requests[0].messages[0] == Message.user("opener 2")
        header = agent.session.header()
        assert header is not None and header.message_prefix == (Message.user("opener 2"),)


async def test_P3_seed_is_frozen() -> None:
    errors: list[BaseException] = []

    async def prefix(agent: Any, value: Any, next: Any) -> Any:
        try:
            value.append(Message.user("sneaky"))
        except (TypeError, AttributeError) as exc:
            errors.append(exc)
        return await next()

    provider = ScriptedProvider([reply("ok")])
    async with open_runtime(provider) as rt:
        rt.on("agent/session-prefix", prefix)
        agent = await rt.spawn(OPTIONS)
        await agent.send("hi")
        assert len(errors) == 1 and isinstance(errors[0], (TypeError, AttributeError))
        assert provider.requests[0].messages == (Message.user("hi"),)


async def test_P4_context_appended_while_composing_joins_the_same_request() -> None:
    async def prefix(agent: Any, value: Any, next: Any) -> Any:
        agent.inject("workspace note", source="ws")
        return (Message.user("opener"), *await next())

    provider = ScriptedProvider([reply("ok")])
    async with open_runtime(provider) as rt:
        rt.on("agent/session-prefix", prefix)
        agent = await rt.spawn(OPTIONS)
        await agent.send("hi")
        assert [m.text for m in provider.requests[0].messages] == [
            "opener",
            "hi",
            "workspace note",
        ]


async def test_P5_blocked_prompt_does_not_compose() -> None:
    composed = 0

    async def prefix(agent: Any, value: Any, next: Any) -> Any:
        nonlocal composed
        composed += 1
        return await next()

    async def submit(agent: Any, value: Any, next: Any) -> Any:
        if value.content[0].text == "blocked":
            return Block("no")
        return await next()

    provider = ScriptedProvider([reply("ok")])
    async with open_runtime(provider) as rt:
        rt.on("agent/session-prefix", prefix)
        rt.on("prompt/submit", submit)
        agent = await rt.spawn(OPTIONS)
        assert (await agent.send("blocked")).reason == "rejected"
        assert composed == 0
        assert (await agent.send("fine")).reason == "completed"
        assert composed == 1


# ---------------------------------------------------------------- requests and headers


async def test_R1_requests_extend_and_single_initial_header() -> None:
    provider = ScriptedProvider(
        [tool_call("c1", "echo", {"x": "1"}), tool_call("c2", "echo", {"x": "2"}), reply("done")]
    )
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(attrs.evolve(OPTIONS, tools=(ECHO,)))
        await agent.send("go")
        requests = provider.requests
        assert len(requests) == 3
        for earlier, later in itertools.pairwise(requests):
            assert later.messages[: len(earlier.messages)] == earlier.messages
            assert len(later.messages) > len(earlier.messages)
            assert later.system == earlier.system and later.tools == earlier.tools
        for request in requests:
            with pytest.raises(attrs.exceptions.FrozenInstanceError):
                request.messages = ()  # type: ignore[misc]
            with pytest.raises(attrs.exceptions.FrozenInstanceError):
                request.messages[0].content = ()  # type: ignore[misc]
            assert isinstance(request.messages, tuple)
        headers = events_of(agent, "request/header")
        assert len(headers) == 1 and headers[0].data.reason == "initial"
        assert not events_of(agent, "request/header-delta")


async def test_R2_pre_step_context_is_in_the_first_request() -> None:
    done = False

    async def pre_step(agent: Any, value: Any) -> None:
        nonlocal done
        if not done:
            done = True
            agent.inject("plugin context", source="plug")

    provider = ScriptedProvider([reply("ok")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(OPTIONS)
        agent.on("agent/pre-step", pre_step)
        await agent.send("hi")
        assert Message.user("plugin context") in provider.requests[0].messages
        context = events_of(agent, "context/message")[0]
        first_step = events_of(agent, "step/start")[0]
        assert context.seq < first_step.seq


async def test_R3_context_added_at_agent_request_joins_the_next_request() -> None:
    injected = False

    async def on_request(agent: Any, value: Any, next: Any) -> Any:
        nonlocal injected
        if not injected:
            injected = True
            agent.inject("[late]", source="late")
        return await next()

    provider = ScriptedProvider([reply("one"), reply("two")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(OPTIONS)
        agent.on("agent/request", on_request)
        await agent.send("first")
        await agent.send("second")
        late = Message.user("[late]")
        assert late not in provider.requests[0].messages
        assert events_of(agent, "context/message")
        assert late in provider.requests[1].messages


async def test_R4_agent_request_replaces_the_config() -> None:
    seen: list[Any] = []

    async def on_request(agent: Any, value: Any, next: Any) -> Any:
        seen.append(value)
        return attrs.evolve(await next(), model="other")

    provider = ScriptedProvider([reply("ok")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(OPTIONS)
        agent.on("agent/request", on_request)
        await agent.send("hi")
        assert provider.requests[0].model == "other"
        header = agent.session.header()
        assert header is not None and header.config.model == "other"
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            seen[0].model = "x"


async def test_header_delta_and_fallback_are_written_when_the_header_changes() -> None:
    sections: list[tuple[str, ...]] = [(), ("extra rules",), ("extra rules",)]

    async def assemble(agent: Any, value: Any, next: Any) -> Any:
        return (*await next(), *sections.pop(0))

    provider = ScriptedProvider([reply("a"), reply("b"), reply("c")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(OPTIONS)
        agent.on("system-prompt/assemble", assemble)
        for text in ("1", "2", "3"):
            await agent.send(text)
        deltas = events_of(agent, "request/header-delta")
        assert len(deltas) == 1 and deltas[0].data.system is not None
        assert provider.requests[1].system == "You are terse.\n\nextra rules"
        assert agent.session.header().system == provider.requests[2].system


async def test_tool_order_naming_unknown_tool_ends_turn_before_any_step() -> None:
    provider = ScriptedProvider([reply("never")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(attrs.evolve(OPTIONS, tools=(ECHO,), tool_order=("nope",)))
        result = await agent.send("hi")
        assert result.reason == "error"
        assert "step/start" not in types_of(agent.session.events)
        assert provider.requests == []


# ---------------------------------------------------------------- loop


async def test_L1_simple_turn() -> None:
    provider = ScriptedProvider([reply("hello back")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(OPTIONS)
        result = await agent.send("hello")
        assert (result.turn, result.reason) == (1, "completed")
        boundaries = [
            e.type
            for e in agent.session.events
            if e.type in ("turn/start", "turn/end", "step/start", "step/end")
        ]
        assert boundaries == ["turn/start", "step/start", "step/end", "turn/end"]
        assert agent.session.events[1].type == "user/message"
        assert [m.role for m in agent.session.derive_messages()] == ["user", "assistant"]


async def test_L2_tool_round_trip() -> None:
    provider = ScriptedProvider([tool_call("call-1", "echo", {"x": "ping"}), reply("done")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(attrs.evolve(OPTIONS, tools=(ECHO,)))
        await agent.send("use the tool")
        assert len(provider.requests) == 2
        last = provider.requests[1].messages[-1]
        assert last.content == (ToolResult("call-1", (Text("echo:ping"),), False),)
        assert events_of(agent, "tool/call")[0].data.call_id == "call-1"
        result = events_of(agent, "tool/result")[0]
        assert result.source_event_seqs == (events_of(agent, "tool/call")[0].seq,)


async def test_L3_post_execute_contexts_come_after_all_results() -> None:
    async def post(agent: Any, value: Any, next: Any) -> Any:
        out = await next()
        return attrs.evolve(out, additional_context=(ContextItem(f"after {value.call_id}"),))

    provider = ScriptedProvider(
        [tool_calls(("a", "echo", {"x": "1"}), ("b", "echo", {"x": "2"})), reply("done")]
    )
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(attrs.evolve(OPTIONS, tools=(ECHO,)))
        agent.on("tools/post-execute", post)
        await agent.send("go")
        kinds = [
            (e.type, getattr(e.data, "call_id", None) or e.data.content[0].text)
            for e in agent.session.events
            if e.type in ("tool/result", "context/message")
        ]
        assert kinds == [
            ("tool/result", "a"),
            ("tool/result", "b"),
            ("context/message", "after a"),
            ("context/message", "after b"),
        ]


async def test_L4_blocked_prompt() -> None:
    async def submit(agent: Any, value: Any, next: Any) -> Any:
        return Block("policy")

    provider = ScriptedProvider([reply("never")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(OPTIONS)
        agent.on("prompt/submit", submit)
        result = await agent.send("forbidden words")
        assert result.reason == "rejected"
        assert provider.requests == []
        blocked = events_of(agent, "prompt/blocked")[0]
        assert blocked.data.content == (Text("forbidden words"),)
        assert blocked.data.reason == "policy"
        assert not events_of(agent, "user/message")
        end = events_of(agent, "turn/end")[0]
        assert (end.data.reason.kind, end.data.reason.reason) == ("rejected", "policy")


async def test_prompt_submit_allow_rewrites_and_adds_context() -> None:
    async def submit(agent: Any, value: Any, next: Any) -> Any:
        return Allow(content=(Text("rewritten"),), additional_context=("ctx one",))

    provider = ScriptedProvider([reply("ok")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(OPTIONS)
        agent.on("prompt/submit", submit)
        await agent.send("original")
        assert [m.text for m in provider.requests[0].messages] == ["rewritten", "ctx one"]


async def test_L5_idle_inject_is_a_one_shot_turn() -> None:
    provider = ScriptedProvider([reply("ok")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(OPTIONS)
        agent.inject("background fact", source="watcher", meta={"k": 1})
        await agent.wait_idle()
        assert provider.requests == []
        starts = events_of(agent, "turn/start")
        assert len(starts) == 1 and starts[0].data.trigger.kind == "injection"
        assert types_of(agent.session.events) == ["turn/start", "context/message", "turn/end"]
        context = events_of(agent, "context/message")[0].data
        assert isinstance(context, ContextMessage) and context.meta == {"k": 1}
        await agent.send("next")
        assert Message.user("background fact") in provider.requests[0].messages


async def test_inject_rejects_non_json_content_at_the_call() -> None:
    provider = ScriptedProvider([])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(OPTIONS)
        with pytest.raises(ValueError, match="non-finite"):
            agent.inject("x", source="p", meta={"bad": float("nan")})
        assert agent.session.events == ()


async def test_max_tokens_strips_tool_calls_and_runs_no_tool() -> None:
    from actorloop.runtime.testing import max_tokens_reply

    ran: list[str] = []

    async def spy(args: dict[str, Any], ctx: Any) -> str:
        ran.append("ran")
        return "x"

    provider = ScriptedProvider([max_tokens_reply("cut", call=("c1", "spy"))])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(
            attrs.evolve(OPTIONS, tools=(Tool("spy", "", {"type": "object"}, spy),))
        )
        result = await agent.send("go")
        assert result.reason == "max-tokens"
        assert ran == []
        message = events_of(agent, "assistant/message")[0].data
        assert message.content == (Text("cut"),)
        assert not events_of(agent, "tool/call")


async def test_steering_is_drained_at_the_next_step() -> None:
    async def slow(args: dict[str, Any], ctx: Any) -> str:
        ctx.agent.steer("change of plan")
        return "done"

    provider = ScriptedProvider([tool_call("c1", "slow", {}), reply("ok")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(
            attrs.evolve(OPTIONS, tools=(Tool("slow", "", {"type": "object"}, slow),))
        )
        await agent.send("go")
        steering = events_of(agent, "steering/message")
        assert len(steering) == 1 and steering[0].data.turn == 1
        assert provider.requests[1].messages[-1] == Message.user("change of plan")


async def test_request_error_ends_turn_with_code_and_retry_opens_new_step() -> None:
    from actorloop.runtime import ProviderError

    def boom(request: Any) -> Any:
        raise ProviderError("busy", "OVERLOADED")

    provider = ScriptedProvider([boom, reply("recovered"), boom])
    retried = False

    async def on_error(agent: Any, value: Any, next: Any) -> Any:
        nonlocal retried
        if not retried:
            retried = True
            return attrs.evolve(value, retry=True)
        return await next()

    async with open_runtime(provider) as rt:
        agent = await rt.spawn(OPTIONS)
        agent.on("agent/request-error", on_error)
        first = await agent.send("one")
        assert first.reason == "completed"
        steps = [e.data.step for e in events_of(agent, "step/start")]
        assert steps == [1, 2]
        second = await agent.send("two")
        assert second.reason == "error"
        end = events_of(agent, "turn/end")[-1].data.reason
        assert (end.kind, end.code, end.step) == ("error", "OVERLOADED", 1)


async def test_tool_errors_become_error_results() -> None:
    async def broken(args: dict[str, Any], ctx: Any) -> str:
        raise RuntimeError("kaput")

    provider = ScriptedProvider(
        [
            tool_calls(("a", "broken", {}), ("b", "missing", {})),
            reply("ok"),
        ]
    )
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(
            attrs.evolve(OPTIONS, tools=(Tool("broken", "", {"type": "object"}, broken),))
        )
        await agent.send("go")
        results = [e.data for e in events_of(agent, "tool/result")]
        assert [(r.is_error, r.error.code) for r in results] == [
            (True, "TOOL_FAILED"),
            (True, "TOOL_NOT_FOUND"),
        ]
        assert "kaput" in results[0].content[0].text


async def test_pre_execute_deny_logs_error_result_with_reason() -> None:
    from actorloop.runtime import Deny

    ran: list[str] = []

    async def spy(args: dict[str, Any], ctx: Any) -> str:
        ran.append("ran")
        return "x"

    async def deny(agent: Any, value: Any, next: Any) -> Any:
        return Deny("not today")

    provider = ScriptedProvider([tool_call("c1", "spy", {}), reply("ok")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(
            attrs.evolve(OPTIONS, tools=(Tool("spy", "", {"type": "object"}, spy),))
        )
        agent.on("tools/pre-execute", deny)
        await agent.send("go")
        assert ran == []
        result = events_of(agent, "tool/result")[0].data
        assert result.is_error and "not today" in result.content[0].text


# ---------------------------------------------------------------- cancellation


async def test_C1_idle_cancel_is_a_no_op() -> None:
    provider = ScriptedProvider([reply("ok")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(OPTIONS)
        agent.cancel("nothing to do")
        result = await agent.send("hi")
        assert result.reason == "completed"


async def test_C2_cancel_a_hanging_call_discards_queued_work() -> None:
    provider = ScriptedProvider([HANG, reply("never")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(OPTIONS)
        results: dict[str, Any] = {}
        async with trio.open_nursery() as nursery:

            async def send(name: str, text: str) -> None:
                results[name] = await agent.send(text)

            nursery.start_soon(send, "first", "hang please")
            await wait_until(lambda: any(e.type == "assistant/chunk" for e in agent.session.events))
            nursery.start_soon(send, "second", "queued")
            await trio.testing.wait_all_tasks_blocked()
            agent.cancel("stop")
        assert results["first"].reason == "aborted"
        assert results["second"].turn is None and results["second"].reason == "discarded"
        ends = [e.data.reason.kind for e in events_of(agent, "turn/end")]
        assert ends == ["aborted"]
        assert all(e.data.content[0].text != "queued" for e in events_of(agent, "user/message"))
        assert len(provider.requests) == 1
        assert events_of(agent, "assistant/chunk")
        assert not events_of(agent, "assistant/message")


async def test_C3_cancel_after_assistant_message_aborts_unstarted_tools() -> None:
    ran: list[str] = []

    async def danger(args: dict[str, Any], ctx: Any) -> str:
        ran.append("ran")
        return "boom"

    def observer(agent: Any, event: Any) -> None:
        if event.type == "assistant/message":
            agent.cancel()

    provider = ScriptedProvider([tool_call("d1", "danger", {}), reply("after")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(
            attrs.evolve(OPTIONS, tools=(Tool("danger", "", {"type": "object"}, danger),))
        )
        unsubscribe = agent.on("session/event", observer)
        assert (await agent.send("go")).reason == "aborted"
        unsubscribe()
        assert ran == []
        assert events_of(agent, "tool/call")[0].data.call_id == "d1"
        result = events_of(agent, "tool/result")[0].data
        assert result.is_error and result.error.code == "TOOL_ABORTED_BEFORE_DISPATCH"
        assert (await agent.send("next")).reason == "completed"
        carried = provider.requests[1].messages
        assert any(
            isinstance(block, ToolResult) and block.tool_call_id == "d1" and block.is_error
            for message in carried
            for block in message.content
        )


async def test_cancel_while_tool_runs_records_its_result_and_closes_the_step() -> None:
    started = trio.Event()

    async def slow(args: dict[str, Any], ctx: Any) -> str:
        started.set()
        await trio.sleep_forever()
        return "never"

    async def hold_b(agent: Any, info: Any, next: Any) -> Any:
        # "b" is still on its way to dispatch when the turn is cancelled, however quickly
        # the barrier before a tool body returns.
        if info.call_id == "b":
            await trio.sleep_forever()
        return await next()

    provider = ScriptedProvider([tool_calls(("a", "slow", {}), ("b", "slow", {})), reply("ok")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(
            attrs.evolve(OPTIONS, tools=(Tool("slow", "", {"type": "object"}, slow),))
        )
        unsubscribe = agent.on("tools/pre-execute", hold_b)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.send, "go")
            await started.wait()
            agent.cancel()
        unsubscribe()
        codes = [e.data.error.code for e in events_of(agent, "tool/result")]
        assert codes == ["TOOL_CANCELLED", "TOOL_ABORTED_BEFORE_DISPATCH"]
        kinds = types_of(agent.session.events)
        assert kinds[-2:] == ["step/end", "turn/end"]
        assert (await agent.send("again")).reason == "completed"


async def test_dispose_ends_running_turn_disposed_and_refuses_more_work() -> None:
    from actorloop.runtime.errors import AgentClosed

    provider = ScriptedProvider([HANG])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(OPTIONS)
        results: list[Any] = []
        async with trio.open_nursery() as nursery:

            async def send() -> None:
                results.append(await agent.send("hang"))

            nursery.start_soon(send)
            await wait_until(lambda: bool(provider.requests))
            agent.cancel("first")
            await agent.dispose()
        assert results[0].reason in ("aborted", "disposed")
        assert agent.status == "disposed"
        with pytest.raises(AgentClosed):
            await agent.send("more")
        with pytest.raises(AgentClosed):
            agent.inject("more", source="x")


async def test_dispose_wins_over_a_cancel_in_the_same_turn() -> None:
    async def pre_step(agent: Any, value: Any) -> None:
        agent.cancel("user")
        await agent.dispose()

    provider = ScriptedProvider([reply("never")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(OPTIONS)
        agent.on("agent/pre-step", pre_step)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.send, "x")
        end = events_of(agent, "turn/end")[0].data.reason
        assert end.kind == "disposed"


async def test_cancel_after_turn_ended_does_nothing() -> None:
    provider = ScriptedProvider([reply("a"), reply("b")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(OPTIONS)
        await agent.send("one")
        agent.cancel()
        assert (await agent.send("two")).reason == "completed"
        assert [e.data.reason.kind for e in events_of(agent, "turn/end")] == [
            "completed",
            "completed",
        ]


async def test_status_notifications_only_on_change() -> None:
    statuses: list[str] = []
    provider = ScriptedProvider([reply("a"), reply("b")])
    async with open_runtime(provider) as rt:
        rt.on("agent/status", lambda agent, status: statuses.append(status))
        agent = await rt.spawn(OPTIONS)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.send, "one")
            nursery.start_soon(agent.send, "two")
        await agent.wait_idle()
        assert statuses == ["running", "idle"]


async def test_tool_outcome_rewrite_by_post_execute() -> None:
    async def post(agent: Any, value: ToolOutcome, next: Any) -> Any:
        return attrs.evolve(await next(), content=(Text("redacted"),))

    provider = ScriptedProvider([tool_call("c1", "echo", {"x": "secret"}), reply("ok")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(attrs.evolve(OPTIONS, tools=(ECHO,)))
        agent.on("tools/post-execute", post)
        await agent.send("go")
        assert events_of(agent, "tool/result")[0].data.content == (Text("redacted"),)
