"""Bad MCP configuration is refused with a typed error, before anything starts: malformed
specs and options, unknown servers, tool names that would clash (checked at spawn)."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from helpers import open_runtime

from actorloop.runtime import AgentOptions, Tool
from actorloop.runtime.errors import (
    ErrorCode,
    McpConfigError,
    McpConnectionFailed,
    McpServerNotConfigured,
    McpToolNameClash,
)
from actorloop.runtime.mcp import McpHttp, McpServer, McpStdio
from actorloop.runtime.testing import ScriptedProvider


async def noop(args: dict[str, Any], ctx: Any) -> str:
    return "local"


def test_specs_take_a_program_with_arguments_in_either_form() -> None:
    assert McpStdio(["python", "server.py"]).argv == ("python", "server.py")
    assert McpStdio("python", args=["server.py"], env={"A": "1"}).argv == ("python", "server.py")
    assert McpHttp("http://127.0.0.1:1/mcp", headers={"X": "y"}).headers == (("X", "y"),)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        McpStdio("python").prefix = "p"  # type: ignore[misc]


@pytest.mark.parametrize(
    "build",
    [
        lambda: McpStdio([]),
        lambda: McpStdio("python", args="server.py"),
        lambda: McpStdio(["python", 3]),
        lambda: McpStdio("python", env={"A": 1}),
        lambda: McpStdio("python", prefix=""),
        lambda: McpHttp("ftp://host/mcp"),
        lambda: McpHttp("http://host/mcp", headers={"X": 1}),
        lambda: AgentOptions(model="m", mcp="kit"),
        lambda: AgentOptions(model="m", mcp=("kit", "kit")),
        lambda: AgentOptions(model="m", mcp=("",)),
    ],
)
def test_malformed_specs_and_options_are_refused(build: Any) -> None:
    with pytest.raises(McpConfigError) as caught:
        build()
    assert caught.value.code == ErrorCode.MCP_CONFIG


async def test_a_runtime_refuses_a_mapping_that_is_not_of_servers() -> None:
    with pytest.raises(McpConfigError):
        async with open_runtime(ScriptedProvider([]), mcp={"kit": "python server.py"}):
            pass


async def test_an_unknown_server_is_refused_at_spawn_and_nothing_is_stored() -> None:
    async with open_runtime(ScriptedProvider([])) as rt:
        with pytest.raises(McpServerNotConfigured) as caught:
            await rt.spawn(AgentOptions(model="m", mcp=("kit",)), session_id="s1")
        assert "no MCP server named 'kit'" in str(caught.value)
        assert await rt.list_sessions() == ()


async def test_a_server_that_cannot_start_is_a_typed_error_and_is_retried(
    tmp_path: Any,
) -> None:
    missing = McpStdio([str(tmp_path / "no-such-program")])
    async with open_runtime(ScriptedProvider([]), mcp={"kit": missing}) as rt:
        for attempt in (1, 2):
            with pytest.raises(McpConnectionFailed):
                await rt.spawn(AgentOptions(model="m", mcp=("kit",)))
            assert rt.mcp.connections_opened == attempt


async def test_tool_names_that_clash_are_refused_at_spawn(stdio_server: McpServer) -> None:
    prefixed = attrs.evolve(stdio_server, prefix="kit2")
    servers = {"kit": stdio_server, "again": stdio_server, "kit2": prefixed}
    async with open_runtime(ScriptedProvider([]), mcp=servers) as rt:
        with pytest.raises(McpToolNameClash) as local:
            await rt.spawn(
                AgentOptions(model="m", tools=(Tool("echo", "", {}, noop),), mcp=("kit",))
            )
        assert "'echo' is given by a local tool and by MCP server 'kit'" in str(local.value)
        with pytest.raises(McpToolNameClash) as servers_clash:
            await rt.spawn(AgentOptions(model="m", mcp=("kit", "again")))
        assert "MCP server 'kit' and by MCP server 'again'" in str(servers_clash.value)
        # A prefix keeps them apart.
        await rt.spawn(AgentOptions(model="m", mcp=("kit", "kit2")))
        names = [tool.name for tool in await rt.mcp.tools("kit2")]
        assert "kit2_echo" in names and "echo" not in names
        assert len(await rt.list_sessions()) == 1
