"""Crash child of the effect tests: one turn per tool mode calling `pay`, killed -9 at a chosen
point of the call.

    python effect_child.py STORE_URL SESSION_PREFIX PAY_URL POINT TRIALS

It opens a Runtime on STORE_URL and runs, at once, TRIALS agents per mode of `MODES`
(sessions `{SESSION_PREFIX}{trial}-{mode}`), each sending one message the scripted model
answers with one `pay` call. When every call has reached POINT, the process kills itself
with SIGKILL (for `during` the payment server does it, after recording every charge and
before answering):

* `before_call` — in `tools/pre-execute`: no `tool/call` is durable;
* `after_call` — first thing in the tool: the `tool/call` is durable, no charge was made;
* `during` — inside the charge request: recorded by the server, no answer received;
* `after_effect` — the charge answered, before the tool returns: no `tool/result` durable.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

import httpx
import trio

from actorloop.runtime import AgentOptions, Runtime, Tool
from actorloop.runtime.model.hook_values import ToolCallInfo
from actorloop.runtime.testing import ScriptedProvider
from actorloop.runtime.testing import tool_call as call_chunks

MODES = ("plain", "reconcile", "idempotent", "both")
POINTS = ("before_call", "after_call", "during", "after_effect")
PARAMS = {"type": "object", "properties": {"amount": {"type": "integer"}}}


def flags_for(mode: str, reconcile: Any) -> dict[str, Any]:
    """The `Tool` flags of a mode (`reconcile` is the mode's reconcile function)."""
    return {
        "plain": {},
        "reconcile": {"reconcile": reconcile},
        "idempotent": {"idempotent": True},
        "both": {"reconcile": reconcile, "idempotent": True},
    }[mode]


class AllArrived:
    """Kills this process once `count` calls have reached the point."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.arrived = 0

    async def arrive(self) -> None:
        self.arrived += 1
        if self.arrived == self.count:
            os.kill(os.getpid(), signal.SIGKILL)
        await trio.sleep_forever()


def session_ids(prefix: str, trials: int) -> tuple[tuple[str, str], ...]:
    """(session id, mode) of every agent of one child run."""
    return tuple((f"{prefix}{trial}-{mode}", mode) for trial in range(trials) for mode in MODES)


async def main(url: str, prefix: str, pay_url: str, point: str, trials: str) -> None:
    sessions = session_ids(prefix, int(trials))
    gate = AllArrived(len(sessions))

    async def pre_execute(_agent: Any, info: ToolCallInfo, next_: Any) -> Any:
        if point == "before_call":
            await gate.arrive()
        return await next_(info)

    async def charge(args: dict[str, Any], ctx: Any) -> str:
        if point == "after_call":
            await gate.arrive()
        headers = {"X-Kill-Pid": str(os.getpid()), "X-Kill-After": str(len(sessions))}
        body = {"key": ctx.effect_key, "amount": args["amount"]}
        async with httpx.AsyncClient(timeout=30) as client:
            response = await client.post(
                f"{pay_url}/charges", json=body, headers=headers if point == "during" else {}
            )
        if point == "after_effect":
            await gate.arrive()
        return f"charged {response.json()['id']}"

    async def never(_call: ToolCallInfo, _ctx: Any) -> None:
        raise AssertionError("a first run never reconciles")

    script = ScriptedProvider([call_chunks("c1", "pay", {"amount": 7})] * len(sessions))
    async with Runtime.open(store=url, provider=script) as rt:
        rt.on("tools/pre-execute", pre_execute)
        agents = [
            await rt.spawn(
                AgentOptions(
                    model="m",
                    tools=(Tool("pay", "charge", PARAMS, charge, **flags_for(mode, never)),),
                ),
                session_id,
            )
            for session_id, mode in sessions
        ]
        sys.stdout.write("READY\n")
        sys.stdout.flush()
        async with trio.open_nursery() as nursery:
            for agent in agents:
                nursery.start_soon(agent.send, "pay 7")
    raise SystemExit("the kill point was never reached")


if __name__ == "__main__":
    trio.run(main, *sys.argv[1:6])
