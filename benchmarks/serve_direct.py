"""The service benchmark's in-process comparison: the same sessions and turns as over HTTP,
driven with `agent.send` in a process of their own (same store kind, same provider, no
HTTP). Prints one JSON report: turns/s and CPU per turn.

    python -m benchmarks.serve_direct SESSIONS TURNS LATENCY_MS STORE_PATH [echo|sim]
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import trio

from benchmarks.serve_app import bench_options, bench_provider


async def drive(
    sessions: int, turns: int, latency_ms: float, store_path: str, kind: str
) -> dict[str, Any]:
    from actorloop.runtime import AgentOptions, Runtime
    from actorloop.runtime.cli.orchestration import LOOKUP, make_sim

    store = f"sqlite:{store_path}"
    if kind == "sim":  # what `actorloop serve` runs without --app
        provider: Any = make_sim(latency_ms, None)
        options = AgentOptions(
            model="sim-1", system="You are a helpful assistant.", tools=(LOOKUP,)
        )
    else:
        provider, options = bench_provider(latency_ms), bench_options()
    async with Runtime.open(store=store, provider=provider, providers={"echo": provider}) as rt:
        agents = [await rt.spawn(options) for _ in range(sessions)]

        async def one(agent: Any) -> None:
            for turn in range(turns):
                await agent.send(f"message {turn} of the benchmark")

        cpu, began = time.process_time(), time.perf_counter()
        async with trio.open_nursery() as nursery:
            for agent in agents:
                nursery.start_soon(one, agent)
        wall, cpu = time.perf_counter() - began, time.process_time() - cpu
    total = sessions * turns
    return {
        "turns_per_s": round(total / wall, 1),
        "cpu_ms_per_turn": round(cpu * 1e3 / total, 4),
        "wall_s": round(wall, 4),
    }


def main() -> None:
    sessions, turns, latency_ms, store_path = sys.argv[1:5]
    kind = sys.argv[5] if len(sys.argv) > 5 else "echo"
    report = trio.run(drive, int(sessions), int(turns), float(latency_ms), store_path, kind)
    json.dump(report, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
