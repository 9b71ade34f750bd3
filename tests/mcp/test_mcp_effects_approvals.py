"""Effect keys and approvals apply to MCP tools like any tool: the call's effect key reaches
the server in the request's `_meta`, and a server's tools can be put behind a decision."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from helpers import open_runtime

from actorloop.runtime import AgentOptions
from actorloop.runtime.errors import McpConfigError
from actorloop.runtime.log.effects import effect_key
from actorloop.runtime.mcp import McpHttp, McpServer, McpStdio
from actorloop.runtime.testing import ScriptedProvider, reply, tool_call, tool_calls


def results(agent: Any) -> dict[str, Any]:
    return {e.data.call_id: e.data for e in agent.session.events if e.type == "tool/result"}


async def test_the_effect_key_travels_to_the_server(any_server: McpServer) -> None:
    provider = ScriptedProvider([tool_call("k1", "effect_key", {}), reply("done")])
    async with open_runtime(provider, mcp={"kit": any_server}) as rt:
        agent = await rt.spawn(AgentOptions(model="m", mcp=("kit",)))
        assert (await agent.send("go")).reason == "completed"
        [call] = [e for e in agent.session.events if e.type == "tool/call"]
        await rt.codec.flush()
        meta, _events = await rt.store.load(agent.id)
        seen = results(agent)["k1"].content[0].text
        assert seen == effect_key(meta, call.seq, "k1")
        assert seen.startswith("alfx_")


async def test_a_servers_tools_wait_for_a_decision_when_it_says_so(
    stdio_server: McpServer,
) -> None:
    server = attrs.evolve(stdio_server, needs_approval=("echo",))
    provider = ScriptedProvider(
        [
            tool_calls(
                ("e1", "echo", {"text": "pay"}), ("o1", "ordered", {"zeta": "z", "alpha": "a"})
            ),
            reply("done"),
        ]
    )
    async with open_runtime(provider, mcp={"kit": server}) as rt:
        agent = await rt.spawn(AgentOptions(model="m", mcp=("kit",)))
        parked = await agent.send("go")
        assert parked.reason == "awaiting_approval"
        assert [(p.call_id, p.tool) for p in parked.pending] == [("e1", "echo")]
        # The call that needs no decision ran; the waiting one did not reach the server.
        assert list(results(agent)) == ["o1"]
        done = await agent.approve("e1")
        assert done.reason == "completed"
        assert results(agent)["e1"].content[0].text == "echo: pay"


def test_needs_approval_takes_a_bool_or_tool_names() -> None:
    assert McpStdio(["python", "s.py"], needs_approval=True).needs_approval is True
    assert McpHttp("http://127.0.0.1:1/mcp", needs_approval=["a", "b"]).needs_approval == (
        "a",
        "b",
    )
    with pytest.raises(McpConfigError):
        McpStdio(["python", "s.py"], needs_approval="echo")  # type: ignore[arg-type]
