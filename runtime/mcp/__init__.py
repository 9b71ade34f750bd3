"""MCP tools through the official `mcp` SDK (the `mcp` extra): server specs (`McpStdio`,
`McpHttp`) and the runtime's servers (`McpServers`). Re-exported lazily: importing this
package loads no SDK; a connection's module loads it when the first server is used."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

if TYPE_CHECKING:
    from .connection import CallResult, McpConnection
    from .servers import McpServers
    from .specs import McpHttp, McpServer, McpStdio

__getattr__, __dir__ = lazy_exports(
    globals(),
    {
        "CallResult": "actorloop.runtime.mcp.connection",
        "McpConnection": "actorloop.runtime.mcp.connection",
        "McpHttp": "actorloop.runtime.mcp.specs",
        "McpServer": "actorloop.runtime.mcp.specs",
        "McpServers": "actorloop.runtime.mcp.servers",
        "McpStdio": "actorloop.runtime.mcp.specs",
    },
)

__all__ = ["CallResult", "McpConnection", "McpHttp", "McpServer", "McpServers", "McpStdio"]
