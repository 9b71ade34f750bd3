"""examples/mcp_tools.py runs as documented: two agents, one MCP server process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mcp_tools.py"


def test_the_mcp_example_runs_two_agents_on_one_server() -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "first: tool said 4; turn completed",
        "second: tool said 4; turn completed",
        "server processes started: 1",
    ]
