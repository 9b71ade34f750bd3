"""RSS per idle agent, printed as JSON: spawn N agents, run T turns each one after another,
measure resident growth per agent. A plain script on the public API only, so one checkout's
probe can run against another checkout's interpreter (a baseline's venv) for a before/after:

    python benchmarks/idle_probe.py STORE AGENTS TURNS      # STORE: memory or sqlite

`bench_runtime --idle-baseline PYTHON` runs it under both interpreters, interleaved.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import tempfile
from pathlib import Path

import trio

from actorloop.runtime import AgentOptions, Runtime
from actorloop.runtime.testing import EchoProvider

OPTIONS = AgentOptions(model="echo-model", system="You are a benchmark agent.")
WARM_AGENTS = 50


def rss_bytes() -> int:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


async def probe(store: str, agents: int, turns: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="actorloop-idle-") as tmp:
        url = "memory:" if store == "memory" else f"sqlite:{Path(tmp) / 'idle.db'}"
        async with Runtime.open(store=url, provider=EchoProvider()) as rt:
            # Warm-up agents: caches, hooks and the store's first pages are not per agent.
            for _ in range(WARM_AGENTS):
                agent = await rt.spawn(OPTIONS)
                for _ in range(turns):
                    await agent.send("warm up")
            gc.collect()
            before = rss_bytes()
            live = []
            for _ in range(agents):
                agent = await rt.spawn(OPTIONS)
                for turn in range(turns):
                    await agent.send(f"turn {turn} text")
                live.append(agent)
            gc.collect()
            after = rss_bytes()
            events = sum(len(agent.session) for agent in live) / agents
    return {
        "store": store,
        "agents": agents,
        "turns": turns,
        "events_per_agent": events,
        "rss_kib_per_agent": round((after - before) / agents / 1024, 2),
    }


if __name__ == "__main__":
    store_name, count, turn_count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    print(json.dumps(trio.run(probe, store_name, count, turn_count)))
