"""A small real MCP server for tests/mcp/, written with the `mcp` SDK's `MCPServer`.

`python mcp_server.py stdio` serves over stdin/stdout; `python mcp_server.py http` serves
streamable HTTP on a free loopback port and prints `PORT <n>` once it listens. With
`MCP_KIT_STARTS=FILE` each start appends a line to FILE (tests count server starts).

Tools: `echo`, `ordered` (a schema whose keys are not sorted), `fail` (an `isError`
result), `crash` (the process kills itself mid-call), `stall` (never answers; records the
cancellation it receives), `wait_stalled` / `wait_cancelled` (answer once a stall runs / a
cancellation arrived: the tests wait on these, never on time), `wait_settled` (answers, once
no stall runs, how many stalls started and how many were cancelled), `effect_key` (the
effect key the call's `_meta` carried), `add_tool` (adds a tool and
sends `notifications/tools/list_changed`), `picture` (an image result).
"""

from __future__ import annotations

import os
import signal
import socket
import sys

import anyio
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image

server = MCPServer("actorloop-test-kit")
stalls_running = 0
stalls_started = 0
cancellations = 0
changed = anyio.Event()


def _changed() -> None:
    global changed
    changed.set()
    changed = anyio.Event()


@server.tool()
def echo(text: str) -> str:
    """Answer with the text."""
    return f"echo: {text}"


@server.tool()
def ordered(zeta: str, alpha: str, mid: int = 0) -> str:
    """Arguments whose schema keys are not in sorted order."""
    return f"{zeta}{alpha}{mid}"


@server.tool()
def fail(reason: str) -> str:
    """Fail with the reason (the client gets an isError result)."""
    raise ToolError(reason)


@server.tool()
def crash() -> str:
    """Kill this server process in the middle of the call."""
    os.kill(os.getpid(), signal.SIGKILL)
    return "unreachable"


@server.tool()
async def stall() -> str:
    """Never answer; count the cancellation that ends the call."""
    global stalls_running, stalls_started, cancellations
    stalls_running += 1
    stalls_started += 1
    _changed()
    try:
        await anyio.sleep_forever()
    except anyio.get_cancelled_exc_class():
        cancellations += 1
        _changed()
        raise
    finally:
        stalls_running -= 1
    return "unreachable"


async def _until(condition: object) -> None:
    while not condition():  # type: ignore[operator]
        await changed.wait()


@server.tool()
async def wait_stalled() -> int:
    """Answer once a `stall` call is running: how many are."""
    await _until(lambda: stalls_running > 0)
    return stalls_running


@server.tool()
async def wait_cancelled(count: int = 1) -> int:
    """Answer once at least `count` cancellations arrived: how many did."""
    await _until(lambda: cancellations >= count)
    return cancellations


@server.tool()
async def wait_settled() -> str:
    """Answer once no `stall` call runs: `started <n> cancelled <m>`."""
    await _until(lambda: stalls_running == 0)
    return f"started {stalls_started} cancelled {cancellations}"


@server.tool()
def effect_key(ctx: Context) -> str:
    """Answer with the effect key the call's `_meta` carried (empty: none)."""
    meta = ctx.request_context.meta or {}
    return str(meta.get("actorloop/effect-key", ""))


@server.tool()
async def add_tool(name: str, ctx: Context) -> str:
    """Add a tool named `name` and tell the client the list changed."""

    def added(text: str) -> str:
        return f"{name}: {text}"

    server.add_tool(added, name=name, description=f"added at run time: {name}")
    await ctx.session.send_tool_list_changed()
    return f"added {name}"


@server.tool()
def picture() -> Image:
    """A one-pixel PNG."""
    return Image(data=b"\x89PNG\r\n\x1a\nfake", format="png")


def _record_start() -> None:
    path = os.environ.get("MCP_KIT_STARTS")
    if path:
        with open(path, "a") as log:
            log.write(f"{os.getpid()}\n")


async def _serve_http() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    config = uvicorn.Config(server.streamable_http_app(), log_level="warning")
    http = uvicorn.Server(config)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    await http.serve(sockets=[sock])


def main() -> None:
    _record_start()
    if sys.argv[1:] == ["http"]:
        anyio.run(_serve_http)
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
