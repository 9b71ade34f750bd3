"""An agent using the tools of an MCP server (docs/mcp.md); needs `pip install 'actorloop[mcp]'`.

    python examples/mcp_tools.py

starts this same file as a stdio MCP server (`python examples/mcp_tools.py serve`, written
with the SDK's `MCPServer`), opens a runtime with it, and runs two agents against it with a
scripted model: both share the runtime's one server process.
"""

from __future__ import annotations

import sys

import trio

from actorloop.runtime import AgentOptions, Runtime
from actorloop.runtime.mcp import McpStdio
from actorloop.runtime.testing import ScriptedProvider, reply, tool_call


def serve() -> None:
    """The MCP server side: one `word_count` tool."""
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("word-counter")

    @server.tool()
    def word_count(text: str) -> int:
        """How many words the text has."""
        return len(text.split())

    server.run("stdio")


async def main() -> None:
    """Two agents, one server process: each asks the server to count words."""
    ask = tool_call("c1", "word_count", {"text": "the quick brown fox"})
    provider = ScriptedProvider([ask, reply("Four words."), ask, reply("Four, again.")])
    servers = {"words": McpStdio([sys.executable, __file__, "serve"])}
    async with Runtime.open(provider=provider, mcp=servers) as rt:
        for name in ("first", "second"):
            agent = await rt.spawn(AgentOptions(model="scripted", mcp=("words",)))
            result = await agent.send("How many words in 'the quick brown fox'?")
            [answer] = [e.data for e in agent.session.events if e.type == "tool/result"]
            print(f"{name}: tool said {answer.content[0].text}; turn {result.reason}")
        print(f"server processes started: {rt.mcp.connections_opened}")


if __name__ == "__main__":
    if sys.argv[1:] == ["serve"]:
        serve()
    else:
        trio.run(main)
