"""`McpServers`: the MCP servers one runtime was opened with — one connection per server,
the servers' tools as `Tool`s, and the `tools/assemble` listener that gives each agent the
tools of the servers its options name."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

import trio

from ..control.handle import ToolContext
from ..control.hooks import HookRegistry, Next
from ..control.options import AgentOptions, Tool
from ..errors import McpConfigError, McpServerNotConfigured, McpToolError, McpToolNameClash
from ..model.messages import Text
from .specs import McpServer, check_servers, needs_approval, tool_name

if TYPE_CHECKING:
    from ..control.handle import Agent
    from .connection import CallResult, McpConnection


class McpServers:
    """The MCP servers of one runtime (`rt.mcp`), by name.

    A connection is opened on first use (an agent spawned with `AgentOptions(mcp=(name,))`,
    or a direct `call`/`tools`) by a task in the runtime's nursery and shared by every agent,
    fork, resume and subagent; it closes with the runtime.
    """

    def __init__(
        self,
        servers: Mapping[str, McpServer] | None,
        nursery: trio.Nursery,
        hooks: HookRegistry,
    ) -> None:
        self.servers = check_servers(servers)
        if self.servers and importlib.util.find_spec("mcp") is None:
            raise McpConfigError(
                "MCP servers need the official MCP SDK: pip install 'actorloop[mcp]'"
            )
        self._nursery = nursery
        self._connections: dict[str, McpConnection] = {}
        self._tools: dict[str, tuple[int, tuple[Tool, ...]]] = {}
        # Per loop instance (an Agent handle is one instance): the tools it froze, and the
        # servers and listing versions they were built from.
        self._frozen: WeakKeyDictionary[Agent, tuple[Any, tuple[Tool, ...]]] = WeakKeyDictionary()
        if self.servers:
            hooks.on("tools/assemble", self._assemble)

    def connection(self, name: str) -> McpConnection:
        """The connection of server `name` (not opened until used)."""
        connection = self._connections.get(name)
        if connection is None:
            if name not in self.servers:
                known = ", ".join(sorted(self.servers)) or "none"
                raise McpServerNotConfigured(
                    f"no MCP server named {name!r} in this runtime (configured: {known})"
                )
            from .connection import McpConnection

            connection = McpConnection(name, self.servers[name], self._nursery)
            self._connections[name] = connection
        return connection

    @property
    def connections_opened(self) -> int:
        """How many connections this runtime opened, over every server."""
        return sum(connection.opened for connection in self._connections.values())

    async def call(self, server: str, tool: str, arguments: Mapping[str, Any]) -> CallResult:
        """Call server `server`'s tool `tool` (its own name, not prefixed) directly."""
        return await self.connection(server).call(tool, dict(arguments))

    async def tools(self, server: str) -> tuple[Tool, ...]:
        """Server `server`'s tools as `Tool`s, named as the model sees them."""
        connection = self.connection(server)
        await connection.tools()
        return self._tools_of(connection)

    async def check(self, options: AgentOptions) -> None:
        """Refuse, before an agent starts, options naming an unknown server or whose tools
        would clash (`McpToolNameClash`); opens the named servers' connections."""
        if options.mcp:
            await self.tools_for(options)

    async def tools_for(self, options: AgentOptions) -> tuple[Tool, ...]:
        """The MCP tools of `options.mcp`, in server order, checked against each other
        and against `options.tools`."""
        served: list[tuple[str, Tool]] = []
        for name in options.mcp:
            served.extend((name, tool) for tool in await self.tools(name))
        return _without_clashes(options.tools, served)

    async def _assemble(
        self, agent: Agent, tools: Sequence[Tool], next: Next[Sequence[Tool]]
    ) -> tuple[Tool, ...]:
        local = tuple(await next())
        names = agent.options.mcp
        if not names:
            return local
        connections = [self.connection(name) for name in names]
        for connection in connections:
            await connection.settled()
        frozen = self._frozen.get(agent)
        if frozen is None or frozen[0] != _listed_by(connections):
            for connection in connections:
                if not connection.listing_version:
                    await connection.tools()
            served = [(c.name, tool) for c in connections for tool in self._tools_of(c)]
            frozen = (_listed_by(connections), _without_clashes(local, served))
            self._frozen[agent] = frozen
        return (*local, *frozen[1])

    def _tools_of(self, connection: McpConnection) -> tuple[Tool, ...]:
        """The connection's listing as `Tool`s, built once per listing version and shared
        by every agent (the same schema objects, so headers compare by identity)."""
        cached = self._tools.get(connection.name)
        if cached is not None and cached[0] == connection.listing_version:
            return cached[1]
        built = tuple(
            Tool(
                tool_name(connection.server, listed.name),
                listed.description,
                listed.parameters,
                _executor(connection, listed.name),
                needs_approval=needs_approval(connection.server, listed.name),
            )
            for listed in connection.listing
        )
        self._tools[connection.name] = (connection.listing_version, built)
        return built


def _listed_by(connections: Sequence[McpConnection]) -> tuple[tuple[str, int], ...]:
    return tuple((connection.name, connection.listing_version) for connection in connections)


def _without_clashes(local: Sequence[Tool], served: Sequence[tuple[str, Tool]]) -> tuple[Tool, ...]:
    """The served tools, refused (`McpToolNameClash`) when two would share a name."""
    seen = {tool.name: "a local tool" for tool in local}
    for server, tool in served:
        owner = f"MCP server {server!r}"
        if tool.name in seen:
            raise McpToolNameClash(
                f"tool name {tool.name!r} is given by {seen[tool.name]} and by {owner}; "
                "give one of the servers a prefix= (McpStdio/McpHttp)"
            )
        seen[tool.name] = owner
    return tuple(tool for _server, tool in served)


def _executor(connection: McpConnection, remote: str) -> Any:
    async def execute(arguments: dict[str, Any], ctx: ToolContext) -> tuple[Text, ...]:
        result = await connection.call(remote, arguments, ctx.effect_key)
        if result.is_error:
            text = "\n".join(block.text for block in result.content)
            raise McpToolError(text or f"the MCP tool {remote!r} reported an error")
        return result.content

    return execute
