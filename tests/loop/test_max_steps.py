"""A turn's step cap and the forced tool choice that is lifted after the first tool step
(issue 39 item 1): a model that obeys `tool_choice="required"` on every step would never end
its turn, so the loop asks with no `tool_choice` once the turn called tools, and a turn that
would go on past `max_steps` ends `max_steps`. Both stay a pure function of the log."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import open_runtime

from actorloop.runtime import AgentOptions, Tool
from actorloop.runtime.control.options import DEFAULT_MAX_STEPS
from actorloop.runtime.log.verify import verify_log
from actorloop.runtime.model.events import ToolResultEvent, TurnEnd
from actorloop.runtime.model.header import HeaderDelta, ToolChoice
from actorloop.runtime.testing import ScriptedProvider, reply, tool_call


async def _echo(args: dict[str, Any], ctx: Any) -> str:
    return f"echo {args.get('n')}"


ECHO = Tool("echo", "echoes n", {"type": "object"}, _echo)


def calls(count: int, prefix: str = "c") -> list[Any]:
    return [tool_call(f"{prefix}{n}", "echo", {"n": n}) for n in range(count)]


def turn_ends(agent: Any) -> list[TurnEnd]:
    return [e.data for e in agent.session.events if isinstance(e.data, TurnEnd)]


def test_the_default_cap_and_its_validation() -> None:
    assert AgentOptions(model="m").max_steps == DEFAULT_MAX_STEPS
    assert AgentOptions(model="m", max_steps=None).max_steps is None
    for bad in (0, -1, True, 2.5):
        with pytest.raises(ValueError, match="max_steps must be an int >= 1"):
            AgentOptions(model="m", max_steps=bad)  # type: ignore[arg-type]


async def test_a_turn_that_would_go_on_ends_max_steps_with_its_results_recorded() -> None:
    provider = ScriptedProvider([*calls(3), reply("after the cap")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(AgentOptions(model="m", tools=(ECHO,), max_steps=3))
        result = await agent.send("loop forever")
        assert result.reason == "max_steps"
        assert result.steps == 3
        assert result.message == "the turn took max_steps=3 steps"
        assert len(provider.requests) == 3
        results = [e.data for e in agent.session.events if isinstance(e.data, ToolResultEvent)]
        assert [r.call_id for r in results] == ["c0", "c1", "c2"]
        assert [end.reason.kind for end in turn_ends(agent)] == ["max_steps"]
        # The next turn starts afresh: its first step is step 1 again, and it may end.
        again = await agent.send("now answer")
        assert (again.reason, again.steps, again.text) == ("completed", 1, "after the cap")
        # verify_log raises on the first request the log does not rebuild.
        assert verify_log(agent.session.meta, agent.session.events).requests_checked == 4


async def test_no_cap_runs_every_step_the_model_asks_for() -> None:
    provider = ScriptedProvider([*calls(60), reply("done")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(AgentOptions(model="m", tools=(ECHO,), max_steps=None))
        result = await agent.send("go")
        assert (result.reason, result.steps) == ("completed", 61)


async def test_a_turn_that_ends_on_its_last_allowed_step_is_completed() -> None:
    provider = ScriptedProvider([*calls(1), reply("done")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(AgentOptions(model="m", tools=(ECHO,), max_steps=2))
        result = await agent.send("go")
        assert (result.reason, result.steps) == ("completed", 2)


async def test_a_forced_tool_choice_is_lifted_after_the_first_tool_step_of_each_turn() -> None:
    provider = ScriptedProvider([*calls(2, "a"), reply("one"), *calls(1, "b"), reply("two")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(AgentOptions(model="m", tools=(ECHO,), tool_choice="required"))
        assert (await agent.send("first")).reason == "completed"
        assert (await agent.send("second")).reason == "completed"
        modes = [
            None if r.config.tool_choice is None else r.config.tool_choice.mode
            for r in provider.requests
        ]
        # Turn 1: forced, then lifted for its later steps; turn 2: forced again, then lifted.
        assert modes == ["required", None, None, "required", None]
        deltas = [e for e in agent.session.events if isinstance(e.data, HeaderDelta)]
        assert len(deltas) == 3  # lifted, restored, lifted: each one header delta
        assert verify_log(agent.session.meta, agent.session.events).requests_checked == 5


async def test_a_named_forced_tool_is_lifted_too_and_the_switch_keeps_it() -> None:
    forced = ToolChoice.tool("echo")
    for reset, expected in ((True, ["tool", None]), (False, ["tool", "tool"])):
        provider = ScriptedProvider([*calls(1), reply("done")])
        async with open_runtime(provider) as rt:
            options = AgentOptions(
                model="m", tools=(ECHO,), tool_choice=forced, reset_tool_choice=reset
            )
            agent = await rt.spawn(options)
            assert (await agent.send("go")).reason == "completed"
        modes = [r.config.tool_choice and r.config.tool_choice.mode for r in provider.requests]
        assert modes == expected


async def test_an_auto_tool_choice_is_never_touched() -> None:
    provider = ScriptedProvider([*calls(1), reply("done")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(AgentOptions(model="m", tools=(ECHO,), tool_choice="auto"))
        await agent.send("go")
    assert [r.config.tool_choice and r.config.tool_choice.mode for r in provider.requests] == [
        "auto",
        "auto",
    ]


async def test_a_max_steps_turn_end_is_stored_and_loaded_back(tmp_path: Any) -> None:
    url = f"sqlite:{tmp_path / 'cap.db'}"
    provider = ScriptedProvider(calls(2))
    async with open_runtime(provider, store=url) as rt:
        agent = await rt.spawn(AgentOptions(model="m", tools=(ECHO,), max_steps=2))
        assert (await agent.send("go")).reason == "max_steps"
        session_id = agent.id
    async with open_runtime(ScriptedProvider([reply("resumed")]), store=url) as rt:
        again = await rt.resume(session_id, AgentOptions(model="m", tools=(ECHO,)))
        assert [end.reason.kind for end in turn_ends(again)] == ["max_steps"]
        assert (await again.send("answer now")).reason == "completed"
