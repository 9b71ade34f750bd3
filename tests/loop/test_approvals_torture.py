"""Approval schedules under cancellation (docs/spec/approvals.md): seeded random runs that
park turns, decide their calls (approve, edit, reject, reject through a send), cancel the
continuation at a random checkpoint, and dispose a parked agent and resume it. After every
schedule the log verifies (structure, call/result pairing, every request digest rebuilt),
each request has at most one decision, no call ran twice and no rejected call ran, every
turn is closed, and the agent finishes a next send once what waits is decided.

Bounded in CI: `APPROVALS_TORTURE_SCHEDULES` schedules (default 40); full mode:
`APPROVALS_TORTURE_SCHEDULES=2000`. Replay one with `APPROVALS_TORTURE_SEED=<seed>`.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import trio
from helpers import open_runtime

from actorloop.runtime import AgentOptions, Tool
from actorloop.runtime.errors import ApprovalAlreadyDecided, ApprovalNotFound
from actorloop.runtime.log.rebuild import check_digest, rebuild_request
from actorloop.runtime.log.request import Request
from actorloop.runtime.log.verify import verify_log
from actorloop.runtime.model.chunks import StreamChunk
from actorloop.runtime.model.messages import ToolResult
from actorloop.runtime.providers.base import ModelInfo
from actorloop.runtime.testing import ScriptedProvider, reply, tool_calls

SCHEDULES = int(os.environ.get("APPROVALS_TORTURE_SCHEDULES", "40"))
ONLY_SEED = os.environ.get("APPROVALS_TORTURE_SEED")
BASE_SEED = 3600


class Model:
    """Answers a user message with 1-4 tool calls (fresh ids), a tool result with text."""

    name = "model"

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.calls = 0

    def model_info(self, model: str) -> ModelInfo | None:
        return ModelInfo(None)

    async def stream(self, request: Request) -> AsyncIterator[StreamChunk]:
        last = request.messages[-1]
        if any(isinstance(block, ToolResult) for block in last.content):
            entry = reply("done")
        else:
            count = self.rng.randint(1, 4)
            picks = []
            for _ in range(count):
                self.calls += 1
                tool = self.rng.choice(("pay", "pay", "look"))
                picks.append((f"c{self.calls}", tool, {"n": self.calls}))
            entry = tool_calls(*picks)
        async for chunk in ScriptedProvider([entry]).stream(request):
            yield chunk


def tools(runs: Counter[str]) -> tuple[Tool, ...]:
    async def run(args: dict[str, Any], ctx: Any) -> str:
        runs[ctx.call_id] += 1
        for _ in range(3):
            await trio.lowlevel.checkpoint()
        return "ok"

    return (
        Tool("pay", "pays", {"type": "object"}, run, needs_approval=True),
        Tool("look", "looks", {"type": "object"}, run),
    )


async def cancel_after(agent: Any, checkpoints: int) -> None:
    for _ in range(checkpoints):
        await trio.lowlevel.checkpoint()
    agent.cancel("chaos")


async def decide(rng: random.Random, agent: Any, rejected: set[str]) -> None:
    """One decision on a waiting call, maybe cancelled at a random checkpoint."""
    pending = agent.pending_approvals()
    call = rng.choice(pending)
    action = rng.choice(("approve", "edit", "reject", "reject_send"))
    async with trio.open_nursery() as nursery:
        if rng.random() < 0.4:
            nursery.start_soon(cancel_after, agent, rng.randint(0, 40))
        try:
            if action == "approve":
                await agent.approve(call.call_id)
            elif action == "edit":
                await agent.approve(call.call_id, {"n": -1}, meta={"by": "torture"})
            elif action == "reject":
                rejected.add(call.call_id)
                await agent.reject(call.call_id, reason="torture")
            else:
                rejected.update(p.call_id for p in pending)
                await agent.send("something else", reject_pending=True)
        except (ApprovalAlreadyDecided, ApprovalNotFound):
            pass
        nursery.cancel_scope.cancel()


def check(agent: Any, runs: Counter[str], rejected: set[str]) -> None:
    events = agent.session.events
    verify_log(agent.session.meta, events)
    for event in events:
        if event.type == "assistant/message":
            check_digest(rebuild_request(agent.id, events, event.seq))
    decisions = Counter(e.data.call_id for e in events if e.type == "approval/decision")
    assert all(count == 1 for count in decisions.values()), decisions
    assert all(count == 1 for count in runs.values()), runs
    decided_rejects = {
        e.data.call_id
        for e in events
        if e.type == "approval/decision" and e.data.decision == "reject"
    }
    assert not decided_rejects & set(runs), (decided_rejects, runs)
    starts = sum(1 for e in events if e.type == "turn/start")
    assert starts == sum(1 for e in events if e.type == "turn/end")


async def schedule(seed: int) -> None:
    rng = random.Random(seed)
    runs: Counter[str] = Counter()
    rejected: set[str] = set()
    options = AgentOptions(model="m", tools=tools(runs))
    async with open_runtime(Model(rng)) as rt:
        agent = await rt.spawn(options)
        for _round in range(rng.randint(1, 3)):
            async with trio.open_nursery() as nursery:
                if rng.random() < 0.2:
                    nursery.start_soon(cancel_after, agent, rng.randint(0, 60))
                if not agent.pending_approvals():
                    await agent.send("go")
                nursery.cancel_scope.cancel()
            for _ in range(rng.randint(0, 3)):
                if not agent.pending_approvals():
                    break
                if rng.random() < 0.15:
                    # Dispose while parked, then resume: the waiting calls come back.
                    waiting = agent.pending_approvals()
                    await agent.dispose()
                    agent = await rt.resume(agent.id, options)
                    assert agent.pending_approvals() == waiting
                await decide(rng, agent, rejected)
            check(agent, runs, rejected)
        while agent.pending_approvals():
            await agent.approve(agent.pending_approvals()[0].call_id)
        await agent.wait_idle()
        check(agent, runs, rejected)
        if agent.pending_approvals():
            await agent.send("last", reject_pending=True)
        else:
            await agent.send("last")
        check(agent, runs, rejected)


def test_approval_schedules_under_cancellation() -> None:
    seeds = [int(ONLY_SEED)] if ONLY_SEED is not None else range(BASE_SEED, BASE_SEED + SCHEDULES)
    for seed in seeds:
        try:
            trio.run(schedule, seed)
        except BaseException as exc:
            raise AssertionError(f"approval schedule seed {seed} failed") from exc
