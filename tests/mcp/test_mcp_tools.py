"""MCP tools end to end against the kit server: listing, calls, results, parallel calls on
one session, list changes, and one connection per runtime."""

from __future__ import annotations

from helpers import open_runtime

from actorloop.runtime import AgentOptions
from actorloop.runtime.mcp import McpServer
from actorloop.runtime.testing import ScriptedProvider, reply, tool_call


def results(agent):
    return [e.data for e in agent.session.events if e.type == "tool/result"]


async def test_an_agent_gets_the_servers_tools_and_calls_them(any_server: McpServer) -> None:
    provider = ScriptedProvider([tool_call("c1", "echo", {"text": "hi"}), reply("done")])
    async with open_runtime(provider, mcp={"kit": any_server}) as rt:
        agent = await rt.spawn(AgentOptions(model="m", mcp=("kit",)))
        result = await agent.send("go")
        assert result.reason == "completed"
        [answer] = results(agent)
        assert [block.text for block in answer.content] == ["echo: hi"]
        assert not answer.is_error
        names = [tool.name for tool in provider.requests[0].tools]
        assert "echo" in names and "stall" in names
