"""MCP tools end to end against the kit server, over stdio and streamable HTTP: listing,
calls and their results, parallel calls on one session, list changes."""

from __future__ import annotations

from typing import Any

import trio
from helpers import open_runtime

from actorloop.runtime import AgentOptions
from actorloop.runtime.mcp import McpServer
from actorloop.runtime.testing import ScriptedProvider, reply, tool_call, tool_calls


def results(agent: Any) -> dict[str, Any]:
    return {e.data.call_id: e.data for e in agent.session.events if e.type == "tool/result"}


def texts(result: Any) -> list[str]:
    return [block.text for block in result.content]


async def test_tools_are_listed_called_and_their_results_mapped(any_server: McpServer) -> None:
    provider = ScriptedProvider(
        [
            tool_calls(
                ("c1", "echo", {"text": "hi"}),
                ("c2", "fail", {"reason": "no such invoice"}),
                ("c3", "picture", {}),
                ("c4", "ordered", {"zeta": "z", "alpha": "a"}),
            ),
            reply("done"),
        ]
    )
    async with open_runtime(provider, mcp={"kit": any_server}) as rt:
        agent = await rt.spawn(AgentOptions(model="m", mcp=("kit",)))
        result = await agent.send("go")
        assert result.reason == "completed"
        answers = results(agent)
        assert texts(answers["c1"]) == ["echo: hi"] and not answers["c1"].is_error
        # isError is a tool error the model sees, not a crash; the turn went on.
        assert answers["c2"].is_error and answers["c2"].error.code == "TOOL_FAILED"
        assert "no such invoice" in texts(answers["c2"])[0]
        assert texts(answers["c3"]) == ["[image image/png, 16 base64 characters, not shown]"]
        assert texts(answers["c4"]) == ["za0"]
        tools = {tool.name: tool for tool in provider.requests[0].tools}
        assert {"echo", "fail", "stall", "crash", "add_tool"} <= set(tools)
        # The server's schema reaches the model in the order the server wrote it.
        assert list(tools["ordered"].parameters["properties"]) == ["zeta", "alpha", "mid"]
        assert tools["echo"].description == "Answer with the text."


async def test_parallel_calls_share_one_session_and_a_cancel_reaches_the_server(
    any_server: McpServer,
) -> None:
    async with open_runtime(ScriptedProvider([]), mcp={"kit": any_server}) as rt:
        stalled = trio.CancelScope()
        outcome: list[str] = []

        async def stall() -> None:
            with stalled:
                await rt.mcp.call("kit", "stall", {})
            outcome.append("cancelled" if stalled.cancelled_caught else "answered")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(stall)
            # Answers only while the stall runs on the server: both calls are in flight.
            running = await rt.mcp.call("kit", "wait_stalled", {})
            assert texts(running) == ["1"]
            stalled.cancel()
        assert outcome == ["cancelled"]
        # The server saw notifications/cancelled for the stalled request.
        assert texts(await rt.mcp.call("kit", "wait_cancelled", {"count": 1})) == ["1"]
        # And the connection is still the one it was, and usable.
        assert texts(await rt.mcp.call("kit", "echo", {"text": "still here"})) == [
            "echo: still here"
        ]
        assert rt.mcp.connections_opened == 1


async def test_a_list_change_reaches_the_model_at_the_next_step(any_server: McpServer) -> None:
    provider = ScriptedProvider(
        [
            tool_call("c1", "add_tool", {"name": "late"}),
            tool_call("c2", "late", {"text": "x"}),
            reply("done"),
        ]
    )
    async with open_runtime(provider, mcp={"kit": any_server}) as rt:
        agent = await rt.spawn(AgentOptions(model="m", mcp=("kit",)))
        listed = rt.mcp.connection("kit").listing_version
        result = await agent.send("go")
        assert result.reason == "completed"
        # The notification came before add_tool's answer: the very next step lists it.
        assert "late" in [tool.name for tool in provider.requests[1].tools]
        assert "late" not in [tool.name for tool in provider.requests[0].tools]
        # Recorded as a header delta that adds the one tool, not a new snapshot.
        kinds = [e.type for e in agent.session.events if e.type.startswith("request/header")]
        assert kinds == ["request/header", "request/header-delta"]
        [delta] = [e.data for e in agent.session.events if e.type == "request/header-delta"]
        assert [tool.name for tool in delta.tools.added] == ["late"]
        assert delta.tools.removed == () and delta.system is None
        assert texts(results(agent)["c2"]) == ["late: x"]
        assert rt.mcp.connection("kit").listing_version == listed + 1
