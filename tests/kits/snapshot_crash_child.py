"""Fold-snapshot crash child: runs turns on a `sqlite:` session through the real runtime and
stops where the parent will kill -9 it.

    python snapshot_crash_child.py DB_PATH MODE

MODE `before-first` / `before-second`: the loop's first / second `save_snapshot` prints
`SAVING <length>` and waits (stdin) before writing, the rows it covers already committed;
`in-tool`: after the first snapshot is saved, a tool prints `IN-TOOL` and waits, its
`tool/call` durable and the turn open. Each is where the parent's SIGKILL lands.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import trio

from actorloop.runtime import AgentOptions, Tool
from actorloop.runtime.host.runtime import Runtime
from actorloop.runtime.model.snapshot import FoldSnapshot
from actorloop.runtime.stores.sqlite import SqliteStore
from actorloop.runtime.testing import ScriptedProvider, reply, tool_call


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class StoppingStore(SqliteStore):
    """The real SQLite store; the save it is told to stop at waits for the kill."""

    def __init__(self, path: Path, stop_at: int | None) -> None:
        super().__init__(path)
        self.stop_at = stop_at
        self.saves = 0

    async def save_snapshot(self, session_id: str, snapshot: FoldSnapshot) -> None:
        self.saves += 1
        if self.saves == self.stop_at:
            say(f"SAVING {snapshot.length}")
            await trio.to_thread.run_sync(sys.stdin.readline)  # the kill lands here
        await super().save_snapshot(session_id, snapshot)
        say(f"SAVED {snapshot.length}")


async def main(path: Path, mode: str) -> None:
    stop_at = {"before-first": 1, "before-second": 2}.get(mode)
    store = StoppingStore(path, stop_at)

    async def probe(args: dict[str, Any], ctx: object) -> str:
        if mode == "in-tool" and store.saves >= 1:
            say("IN-TOOL")
            await trio.to_thread.run_sync(sys.stdin.readline)  # the kill lands here
        return "probed"

    provider = ScriptedProvider()
    options = AgentOptions(model="m", tools=(Tool("probe", "Probe.", {"type": "object"}, probe),))
    async with Runtime.open(store=store, provider=provider) as rt:
        agent = await rt.spawn(options, session_id="s")
        for turn in range(10_000):
            provider.push(tool_call(f"c{turn}", "probe", {"n": turn}), reply(f"done {turn}"))
            await agent.send(f"turn {turn}")


if __name__ == "__main__":
    trio.run(main, Path(sys.argv[1]), sys.argv[2])
