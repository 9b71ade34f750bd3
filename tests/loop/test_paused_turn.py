"""A paused answer (a `pause` finish, Anthropic's `pause_turn`) continues the turn (issue 39
item 9): the next step re-sends the history, which holds the paused content, so the request
stays a pure function of the log; `max_steps` bounds how often a turn resumes."""

from __future__ import annotations

from helpers import open_runtime

from actorloop.runtime import AgentOptions
from actorloop.runtime.log.verify import verify_log
from actorloop.runtime.model.chunks import BlockEnd, BlockStart, Finish, StreamChunk, TextDelta
from actorloop.runtime.model.messages import Message, Text
from actorloop.runtime.testing import ScriptedProvider, reply


def paused(text: str) -> tuple[StreamChunk, ...]:
    return (BlockStart(0, "text"), TextDelta(0, text), BlockEnd(0), Finish("pause"))


async def test_a_paused_answer_continues_the_turn_with_the_paused_content_sent_back() -> None:
    provider = ScriptedProvider([paused("part one"), paused("part two"), reply("done")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(AgentOptions(model="m"))
        result = await agent.send("search")
        assert (result.reason, result.steps, result.text) == ("completed", 3, "done")
        assert len(provider.requests) == 3
        last = provider.requests[-1].messages
        assert last[-2:] == (
            Message("assistant", (Text("part one"),)),
            Message("assistant", (Text("part two"),)),
        )
        assert verify_log(agent.session.meta, agent.session.events).requests_checked == 3


async def test_max_steps_bounds_a_turn_that_keeps_pausing() -> None:
    provider = ScriptedProvider([paused("a"), paused("b"), paused("c"), reply("next turn")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(AgentOptions(model="m", max_steps=2))
        result = await agent.send("search")
        assert (result.reason, result.steps) == ("max_steps", 2)
        assert result.message == "the turn took max_steps=2 steps"
        assert len(provider.requests) == 2
        assert verify_log(agent.session.meta, agent.session.events).requests_checked == 2


async def test_a_turn_stop_listener_still_ends_a_paused_turn() -> None:
    provider = ScriptedProvider([paused("a"), reply("unused")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(AgentOptions(model="m"))
        agent.on("agent/turn-stop", lambda agent, stop: "enough")
        result = await agent.send("search")
        assert (result.reason, result.steps, result.message) == ("completed", 1, "enough")
        assert len(provider.requests) == 1
