"""Approvals through `actorloop.runtime.aio`: the same park, decide and continue as the trio
handle, from asyncio code (docs/approvals.md)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from actorloop.runtime import AgentOptions, Tool, aio
from actorloop.runtime.errors import ApprovalAlreadyDecided, ApprovalsPending
from actorloop.runtime.testing import ScriptedProvider, reply, tool_call


def test_aio_park_approve_reject_and_reject_pending() -> None:
    runs: list[dict[str, Any]] = []

    async def pay(args: dict[str, Any], ctx: Any) -> str:
        runs.append(args)
        return "paid"

    tool = Tool("pay", "pays", {"type": "object"}, pay, needs_approval=True)
    provider = ScriptedProvider(
        [
            tool_call("a", "pay", {"n": 1}),
            reply("done a"),
            tool_call("b", "pay", {"n": 2}),
            reply("done b"),
            tool_call("c", "pay", {"n": 3}),
            reply("moved on"),
        ]
    )

    async def main() -> None:
        async with aio.Runtime.open(store="memory:", provider=provider) as rt:
            agent = await rt.spawn(AgentOptions(model="m", tools=(tool,)))
            parked = await agent.send("pay a")
            assert parked.reason == "awaiting_approval"
            assert [p.call_id for p in agent.pending_approvals()] == ["a"]
            with pytest.raises(ApprovalsPending):
                await agent.send("other")
            assert (await agent.approve("a", {"n": 10})).text == "done a"
            with pytest.raises(ApprovalAlreadyDecided):
                await agent.reject("a")
            assert (await agent.send("pay b")).reason == "awaiting_approval"
            assert (await agent.reject("b", reason="no")).text == "done b"
            assert (await agent.send("pay c")).reason == "awaiting_approval"
            moved = await agent.send("forget it", reject_pending=True)
            assert moved.text == "moved on"
            assert runs == [{"n": 10}]

    asyncio.run(main())
