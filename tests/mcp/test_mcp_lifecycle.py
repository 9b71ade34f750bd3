"""MCP connections over their life: one per server per runtime across agents, forks,
resumes and subagents; a stalled call that `cancel()` and `dispose()` do not wait for; a
server killed mid-call; the re-open after it; no server process outliving the runtime."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest
import trio
from helpers import open_runtime
from mcp_kit import Starts

from actorloop.runtime import AgentOptions
from actorloop.runtime.errors import McpConnectionFailed
from actorloop.runtime.host.subagents import subagent_tool
from actorloop.runtime.mcp import McpServer
from actorloop.runtime.testing import ScriptedProvider, reply, tool_call


def results(agent: Any) -> list[Any]:
    return [e.data for e in agent.session.events if e.type == "tool/result"]


def codes(agent: Any) -> list[str | None]:
    return [r.error.code if r.error else None for r in results(agent)]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_one_connection_serves_every_agent_fork_and_resume(
    stdio_server: McpServer, starts: Starts, tmp_path: Any
) -> None:
    echo = tool_call("c", "echo", {"text": "x"})
    provider = ScriptedProvider([echo, reply("a"), echo, reply("b"), echo, reply("c")])
    options = AgentOptions(model="m", mcp=("kit",))
    store = f"sqlite:{tmp_path / 's.db'}"
    async with open_runtime(provider, store, mcp={"kit": stdio_server}) as rt:
        first = await rt.spawn(options)
        second = await rt.spawn(options)
        assert (await first.send("go")).reason == "completed"
        assert (await second.send("go")).reason == "completed"
        child = await rt.fork(first.id)
        await second.dispose()
        resumed = await rt.resume(second.id, options)
        assert (await child.send("go")).reason == "completed"
        assert [r.content[0].text for r in results(resumed)] == ["echo: x"]
        # Every loop instance sends the very same tool schemas (the prompt cache stays warm).
        tools = {request.tools for request in provider.requests}
        assert len(tools) == 1
        assert starts.count == 1 and rt.mcp.connections_opened == 1
        pids = starts.pids
    assert not any(alive(pid) for pid in pids)


async def test_subagents_share_the_parents_connection(
    stdio_server: McpServer, starts: Starts
) -> None:
    child = AgentOptions(model="m", mcp=("kit",))
    provider = ScriptedProvider(
        [
            tool_call("p1", "helper", {"task": "echo it"}),
            tool_call("k1", "echo", {"text": "from the child"}),
            reply("child done"),
            reply("parent done"),
        ]
    )
    async with open_runtime(provider, mcp={"kit": stdio_server}) as rt:
        helper = subagent_tool(rt, name="helper", options=child)
        parent = await rt.spawn(AgentOptions(model="m", tools=(helper,), mcp=("kit",)))
        assert (await parent.send("go")).reason == "completed"
        assert provider.calls == 4
        assert starts.count == 1


async def test_a_stalled_call_does_not_hold_cancel_or_dispose(
    stdio_server: McpServer, starts: Starts
) -> None:
    stall = tool_call("s", "stall", {})
    provider = ScriptedProvider(
        [stall, tool_call("e", "echo", {"text": "after"}), reply("done"), stall]
    )
    async with open_runtime(provider, mcp={"kit": stdio_server}) as rt:
        agent = await rt.spawn(AgentOptions(model="m", mcp=("kit",)))
        turns: list[Any] = []

        async def send() -> None:
            turns.append(await agent.send("go"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send)
            await rt.mcp.call("kit", "wait_stalled", {})
            agent.cancel()
        # The send came back while the server still holds the call: nothing waited for it.
        [turn] = turns
        assert turn.reason == "aborted"
        assert codes(agent) == ["TOOL_CANCELLED"]
        # The server saw the cancellation of that request.
        await rt.mcp.call("kit", "wait_cancelled", {"count": 1})
        # The same connection goes on serving the next turn.
        assert (await agent.send("again")).reason == "completed"
        assert codes(agent)[-1] is None
        # Disposing an agent whose call stalls does not wait for the server either.
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.send, "stall again")
            await rt.mcp.call("kit", "wait_stalled", {})
            await agent.dispose()
        assert codes(agent)[-1] == "TOOL_CANCELLED"
        await rt.mcp.call("kit", "wait_cancelled", {"count": 2})
        assert starts.count == 1


async def test_a_server_killed_mid_call_fails_the_call_and_reopens_on_next_use(
    stdio_server: McpServer, starts: Starts
) -> None:
    provider = ScriptedProvider(
        [
            tool_call("k", "crash", {}),
            reply("the tool failed"),
            tool_call("e", "echo", {"text": "back"}),
            reply("done"),
        ]
    )
    async with open_runtime(provider, mcp={"kit": stdio_server}) as rt:
        agent = await rt.spawn(AgentOptions(model="m", mcp=("kit",)))
        first = await agent.send("crash it")
        # A tool failure the model sees; the turn went on to its next step.
        assert first.reason == "completed" and codes(agent) == ["TOOL_FAILED"]
        assert "closed the connection" in results(agent)[0].content[0].text
        assert provider.calls == 2
        second = await agent.send("again")
        assert second.reason == "completed" and codes(agent) == ["TOOL_FAILED", None]
        assert results(agent)[1].content[0].text == "echo: back"
        assert starts.count == 2 and rt.mcp.connections_opened == 2
        pids = starts.pids
    assert not any(alive(pid) for pid in pids)


async def test_the_runtime_closes_with_a_call_stalled(
    stdio_server: McpServer, starts: Starts
) -> None:
    provider = ScriptedProvider([tool_call("s", "stall", {})])
    async with open_runtime(provider, mcp={"kit": stdio_server}) as rt:
        agent = await rt.spawn(AgentOptions(model="m", mcp=("kit",)))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.send, "go")
            await rt.mcp.call("kit", "wait_stalled", {})
            nursery.cancel_scope.cancel()
    assert codes(agent) == ["TOOL_CANCELLED"]
    assert not alive(starts.pids[0])


@pytest.mark.parametrize("transport", ["http"])
async def test_cancel_over_http_reaches_the_server(transport: str, http_server: McpServer) -> None:
    provider = ScriptedProvider([tool_call("s", "stall", {})])
    async with open_runtime(provider, mcp={"kit": http_server}) as rt:
        agent = await rt.spawn(AgentOptions(model="m", mcp=("kit",)))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.send, "go")
            await rt.mcp.call("kit", "wait_stalled", {})
            agent.cancel()
        assert codes(agent) == ["TOOL_CANCELLED"]
        await rt.mcp.call("kit", "wait_cancelled", {"count": 1})


async def test_an_http_server_killed_mid_call_fails_the_call(
    http_server: McpServer, starts: Starts
) -> None:
    provider = ScriptedProvider([tool_call("s", "stall", {}), reply("the tool failed")])
    async with open_runtime(provider, mcp={"kit": http_server}) as rt:
        agent = await rt.spawn(AgentOptions(model="m", mcp=("kit",)))
        turns: list[Any] = []

        async def send() -> None:
            turns.append(await agent.send("go"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send)
            await rt.mcp.call("kit", "wait_stalled", {})
            os.kill(starts.pids[0], signal.SIGKILL)
        assert turns[0].reason == "completed" and codes(agent) == ["TOOL_FAILED"]
        assert "closed the connection" in results(agent)[0].content[0].text
        # The next use opens a new connection (and finds no server there).
        with pytest.raises(McpConnectionFailed):
            await rt.mcp.call("kit", "echo", {"text": "x"})
        assert rt.mcp.connections_opened == 2
