"""`serve` profiles files declare MCP servers (`[mcp.NAME]`) and select them per profile;
a malformed table is a `ServeConfigError` naming it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from helpers import open_runtime
from mcp_kit import KIT, Starts

from actorloop.runtime.mcp import McpHttp, McpStdio
from actorloop.runtime.service.errors import ServeConfigError
from actorloop.runtime.service.profiles import AppConfig, add_toml_profiles
from actorloop.runtime.testing import ScriptedProvider, reply, tool_call


def config_from(tmp_path: Path, text: str, provider: ScriptedProvider) -> AppConfig:
    path = tmp_path / "profiles.toml"
    path.write_text(text)
    app_config = AppConfig(provider=provider, model=None, store_url="memory:")
    add_toml_profiles(path, app_config)
    return app_config


async def test_a_profile_gets_the_tools_of_the_servers_its_file_declares(
    tmp_path: Path, starts: Starts
) -> None:
    provider = ScriptedProvider([tool_call("c", "kit_echo", {"text": "t"}), reply("done")])
    app_config = config_from(
        tmp_path,
        f"""
[mcp.kit]
command = [{str(sys.executable)!r}, {str(KIT)!r}]
env = {{ MCP_KIT_STARTS = {str(starts.path)!r} }}
prefix = "kit"

[mcp.remote]
url = "http://127.0.0.1:9/mcp"
headers = {{ Authorization = "Bearer t" }}

[profiles.tools]
mcp = ["kit"]
""",
        provider,
    )
    assert app_config.mcp["remote"] == McpHttp(
        "http://127.0.0.1:9/mcp", headers={"Authorization": "Bearer t"}
    )
    assert app_config.mcp["kit"] == McpStdio(
        [sys.executable, str(KIT)], env={"MCP_KIT_STARTS": str(starts.path)}, prefix="kit"
    )
    async with open_runtime(provider, mcp=app_config.mcp) as rt:
        options = app_config.profiles.get("tools").build(rt)
        assert options.mcp == ("kit",)
        agent = await rt.spawn(options)
        assert (await agent.send("go")).reason == "completed"
        [result] = [e.data for e in agent.session.events if e.type == "tool/result"]
        assert result.content[0].text == "echo: t"
    assert starts.count == 1


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('[mcp.a]\ncommand = ["x"]\nurl = "http://h/mcp"\n', "exactly one of"),
        ('[mcp.a]\nprefix = "p"\n', "exactly one of"),
        ('[mcp.a]\nurl = "ftp://h"\n', "http(s) URL"),
        ('[mcp.a]\nurl = "http://h/mcp"\ncwd = "/"\n', "env and cwd"),
        ('[mcp.a]\ncommand = ["x"]\nflavour = 1\n', "flavour"),
        ('[mcp.a]\ncommand = "x"\n', "command must be an array"),
        ('[mcp.a]\ncommand = ["x"]\n[profiles.p]\nmcp = ["b"]\n', "no [mcp.*] server ['b']"),
    ],
)
def test_a_malformed_mcp_table_is_refused(tmp_path: Path, text: str, problem: str) -> None:
    if "[profiles." not in text:
        text += "[profiles.p]\n"
    with pytest.raises(ServeConfigError) as caught:
        config_from(tmp_path, text, ScriptedProvider([]))
    assert problem in str(caught.value)


def test_a_table_puts_tools_behind_a_decision(tmp_path: Path) -> None:
    app_config = config_from(
        tmp_path,
        """
[mcp.all]
url = "http://127.0.0.1:9/mcp"
needs_approval = true

[mcp.some]
command = ["python", "server.py"]
needs_approval = ["pay", "delete"]

[profiles.p]
mcp = ["all", "some"]
""",
        ScriptedProvider([]),
    )
    assert app_config.mcp["all"].needs_approval is True
    assert app_config.mcp["some"].needs_approval == ("pay", "delete")
    with pytest.raises(ServeConfigError, match="some"):
        config_from(
            tmp_path,
            '[mcp.some]\ncommand = ["python"]\nneeds_approval = "pay"\n[profiles.p]\n',
            ScriptedProvider([]),
        )
