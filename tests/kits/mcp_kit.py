"""Client-side helpers for tests/mcp/: where the kit server is, and how many times it started."""

from __future__ import annotations

from pathlib import Path

KIT = Path(__file__).resolve().parent / "mcp_server.py"
"""The kit server script (tests/kits/mcp_server.py)."""


class Starts:
    """The file the kit server appends a line to at each start: how many servers ran."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def count(self) -> int:
        return len(self.path.read_text().splitlines()) if self.path.exists() else 0

    @property
    def pids(self) -> list[int]:
        return [int(line) for line in self.path.read_text().splitlines()]
