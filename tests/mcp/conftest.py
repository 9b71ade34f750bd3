"""MCP servers for the tests of this room: the kit server (tests/kits/mcp_server.py) over
stdio, started by the client, and over streamable HTTP, started here as a subprocess."""

from __future__ import annotations

import select
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp_kit import KIT, Starts

from actorloop.runtime.mcp import McpHttp, McpServer, McpStdio


@pytest.fixture
def starts(tmp_path: Path) -> Starts:
    return Starts(tmp_path / "starts")


@pytest.fixture
def stdio_server(starts: Starts) -> McpServer:
    return McpStdio([sys.executable, str(KIT)], env={"MCP_KIT_STARTS": str(starts.path)})


@pytest.fixture
def http_server(starts: Starts) -> Iterator[McpServer]:
    proc = subprocess.Popen(
        [sys.executable, str(KIT), "http"],
        stdout=subprocess.PIPE,
        env={**_inherited(), "MCP_KIT_STARTS": str(starts.path)},
    )
    assert proc.stdout is not None
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        line = proc.stdout.readline().decode() if ready else ""
        assert line.startswith("PORT "), f"the HTTP kit server did not start: {line!r}"
        yield McpHttp(f"http://127.0.0.1:{int(line.split()[1])}/mcp")
    finally:
        proc.kill()
        proc.wait(30)
        proc.stdout.close()


@pytest.fixture(params=["stdio", "http"])
def any_server(request: pytest.FixtureRequest) -> McpServer:
    """The kit server over each transport."""
    return request.getfixturevalue(f"{request.param}_server")


def _inherited() -> dict[str, str]:
    import os

    return dict(os.environ)
