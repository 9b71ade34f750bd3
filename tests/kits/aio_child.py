"""Ctrl-C child: an asyncio program with a turn that never ends on its own.

    python aio_child.py STORE_URL

Prints `RUNNING <session id>` once the model is streaming, then waits. On SIGINT
`asyncio.run` cancels the main task; leaving `aio.Runtime.open` disposes the agent, and the
child prints a JSON report of what the pending send returned and exits 0.
"""

from __future__ import annotations

import asyncio
import faulthandler
import signal
import sys

import orjson

from actorloop.runtime import AgentOptions, aio
from actorloop.runtime.testing import HANG, ScriptedProvider

report: dict[str, object] = {"interrupted": False}


async def main(store: str) -> None:
    running = asyncio.Event()
    sending: asyncio.Task[object] | None = None
    try:
        async with aio.Runtime.open(store=store, provider=ScriptedProvider([HANG])) as rt:
            agent = await rt.spawn(AgentOptions(model="m"))
            agent.on("session/event", lambda _, e: e.type == "assistant/chunk" and running.set())
            sending = asyncio.create_task(agent.send("wait for ctrl-c"))
            await running.wait()
            sys.stdout.write(f"RUNNING {agent.id}\n")
            sys.stdout.flush()
            await asyncio.Event().wait()
    finally:
        if sending is not None:
            await asyncio.wait((sending,))
            report["send"] = sending.result().reason  # type: ignore[attr-defined]
            report["status"] = agent.status


if __name__ == "__main__":
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test's view of a hang
    # Started from a background job of a script (`cmd &` without job control), this process
    # inherits SIGINT ignored, and asyncio.run then leaves Ctrl-C alone: take the default a
    # program run from a terminal has, which is what this child stands for.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        asyncio.run(main(sys.argv[1]))
    except KeyboardInterrupt:
        report["interrupted"] = True
    sys.stdout.write(orjson.dumps(report).decode())
