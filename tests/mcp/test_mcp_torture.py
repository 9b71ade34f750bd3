"""Cancellation torture with MCP calls: seeded random schedules in which agents run steps
of parallel calls to a real MCP server over stdio (quick `echo` calls and `stall` calls that
never answer) and are cancelled or disposed at a random moment — after a random number of
trio checkpoints, or once the server holds a stalled call.

After every schedule: the log replays, every tool/call has exactly one tool/result, every
stalled call was logged `TOOL_CANCELLED` (or `TOOL_ABORTED_BEFORE_DISPATCH` when the cut came
before it reached the server), the server saw a cancellation for every stall it
started (and none still runs), the store holds exactly the log, and the agent (resumed if it
was disposed) completes a next turn on the same connection. Over the whole run the runtime
opened one connection and started one server, and no server process outlives it.

Bounded in CI: `ACTORLOOP_MCP_TORTURE_SCHEDULES` schedules (default 40). Full mode:

    ACTORLOOP_MCP_TORTURE_SCHEDULES=1000 pytest -q tests/mcp/test_mcp_torture.py

A failure names its seed; `ACTORLOOP_MCP_TORTURE_SEED=<seed>` runs that schedule alone.
"""

from __future__ import annotations

import os
import random
import traceback
from collections.abc import AsyncIterator
from typing import Any

import trio
from helpers import open_runtime
from mcp_kit import Starts

from actorloop.runtime import Agent, AgentOptions, Session
from actorloop.runtime.errors import AgentClosed
from actorloop.runtime.host.runtime import Runtime
from actorloop.runtime.log.request import Request
from actorloop.runtime.mcp import McpServer
from actorloop.runtime.model.chunks import StreamChunk
from actorloop.runtime.providers.base import ModelInfo
from actorloop.runtime.testing import reply, tool_calls

SCHEDULES = int(os.environ.get("ACTORLOOP_MCP_TORTURE_SCHEDULES", "40"))
ONLY_SEED = os.environ.get("ACTORLOOP_MCP_TORTURE_SEED")
BASE_SEED = 3700
HANG_GUARD_S = 120
OPTIONS = AgentOptions(model="m", mcp=("kit",))


class PlanProvider:
    """Answers a user text `plan <seed> <tool> <tool> ...` with those parallel MCP calls, and
    anything else (the tool results) with a closing text: one provider serves every
    schedule, whatever step a cancellation cut short."""

    name = "plan"

    def __init__(self) -> None:
        self.requests: list[Request] = []

    def model_info(self, model: str) -> ModelInfo | None:
        return ModelInfo(None)

    async def stream(self, request: Request) -> AsyncIterator[StreamChunk]:
        self.requests.append(request)
        words = request.messages[-1].text.split()
        if words[:1] == ["plan"]:
            seed, tools = words[1], words[2:]
            calls = [(f"{seed}-{i}", tool, _arguments(tool, i)) for i, tool in enumerate(tools)]
            chunks = tool_calls(*calls)
        else:
            chunks = reply("done")
        for chunk in chunks:
            await trio.lowlevel.checkpoint()
            yield chunk


def _arguments(tool: str, index: int) -> dict[str, Any] | None:
    return {"text": f"call {index}"} if tool == "echo" else None


class Schedule:
    """One seeded schedule: the step's calls and the interruption that cuts it."""

    def __init__(self, seed: int) -> None:
        rng = random.Random(seed)
        self.seed = seed
        self.tools = [rng.choice(("echo", "stall")) for _ in range(rng.randint(1, 4))]
        self.action = rng.choice(("cancel", "cancel", "cancel-keep", "dispose"))
        stalls = "stall" in self.tools
        # A step that stalls must be cut; one that does not may be cut anywhere or not at all.
        self.when = rng.choice(("stalled", "checkpoints") if stalls else ("checkpoints", "never"))
        self.checkpoints = rng.randint(0, 120)

    @property
    def plan(self) -> str:
        return f"plan {self.seed} {' '.join(self.tools)}"

    def __repr__(self) -> str:
        return f"seed {self.seed}: {self.tools} {self.action} when {self.when}/{self.checkpoints}"


async def _interrupt(rt: Runtime, agent: Agent, sched: Schedule) -> None:
    if sched.when == "never":
        return
    if sched.when == "stalled":
        await rt.mcp.call("kit", "wait_stalled", {})
    else:
        for _ in range(sched.checkpoints):
            await trio.lowlevel.checkpoint()
    if sched.action == "dispose":
        await agent.dispose()
    else:
        agent.cancel(f"torture {sched.seed}", keep_inbox=sched.action == "cancel-keep")


async def _cut_a_late_stall(rt: Runtime, agent: Agent, finished: trio.Event) -> None:
    """A cut that came before the turn ran (a cancel that keeps the inbox, or one before the
    send was taken) leaves the stall to come: cancel it once the server holds it, unless the
    send came back first."""
    async with trio.open_nursery() as nursery:

        async def cut() -> None:
            await rt.mcp.call("kit", "wait_stalled", {})
            agent.cancel("torture: the late stall")

        async def returned() -> None:
            await finished.wait()
            nursery.cancel_scope.cancel()

        nursery.start_soon(cut)
        nursery.start_soon(returned)


async def _texts(rt: Runtime, tool: str) -> str:
    result = await rt.mcp.call("kit", tool, {})
    return "".join(block.text for block in result.content)


async def run_schedule(rt: Runtime, sched: Schedule) -> None:
    agent = await rt.spawn(OPTIONS)
    outcome: list[Any] = []
    finished = trio.Event()

    async def send() -> None:
        try:
            outcome.append(await agent.send(sched.plan))
        except AgentClosed:
            outcome.append("closed")
        finally:
            finished.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(send)
        await _interrupt(rt, agent, sched)
        if "stall" in sched.tools:
            await _cut_a_late_stall(rt, agent, finished)
    [result] = outcome
    if result != "closed":
        # A dispose that comes before the send was taken discards it.
        assert result.reason in ("completed", "aborted", "disposed", "discarded"), result

    events = agent.session.events
    Session.from_events(agent.id, events)
    calls = [e.data for e in events if e.type == "tool/call"]
    results = {e.data.call_id: e.data for e in events if e.type == "tool/result"}
    assert sorted(results) == sorted(c.call_id for c in calls)
    codes = {}
    for call in calls:
        error = results[call.call_id].error
        codes[call.call_id] = code = error.code if error else None
        # A stall never answers: it was cancelled on the server or never dispatched to it.
        cut = ("TOOL_CANCELLED", "TOOL_ABORTED_BEFORE_DISPATCH")
        assert code in (cut if call.name == "stall" else (None, *cut)), (call, code)
    if sched.when == "stalled":
        assert "TOOL_CANCELLED" in codes.values(), codes
    if sched.when == "never":
        assert result.reason == "completed" and len(calls) == len(sched.tools)

    # The server saw a cancellation for every stall it started, and none still runs.
    started, cancelled = (await _texts(rt, "wait_settled")).split()[1::2]
    assert started == cancelled, (started, cancelled)

    await rt.codec.flush()
    _meta, stored = await rt.store.load(agent.id)
    assert [(e.seq, e.type) for e in stored] == [(e.seq, e.type) for e in events]

    # The connection still serves the next turn (a new loop instance if this one is gone).
    if agent.status == "disposed":
        agent = await rt.resume(agent.id, OPTIONS)
    after = await agent.send(f"plan {sched.seed}b echo")
    assert after.reason == "completed"
    last = [e.data for e in agent.session.events if e.type == "tool/result"][-1]
    assert last.error is None and last.content[0].text == "echo: call 0"
    await agent.dispose()


def _seeds() -> list[int]:
    if ONLY_SEED is not None:
        return [int(ONLY_SEED)]
    return list(range(BASE_SEED, BASE_SEED + SCHEDULES))


async def test_mcp_cancellation_torture(stdio_server: McpServer, starts: Starts) -> None:
    provider = PlanProvider()
    kinds: set[tuple[str, str]] = set()
    async with open_runtime(provider, mcp={"kit": stdio_server}) as rt:
        for seed in _seeds():
            sched = Schedule(seed)
            try:
                # A hang guard, not a time limit: a schedule takes well under a second.
                with trio.fail_after(HANG_GUARD_S):
                    await run_schedule(rt, sched)
            except BaseException as exc:
                cause = "".join(traceback.format_exception(exc))
                replay = f"ACTORLOOP_MCP_TORTURE_SEED={seed} pytest -q {__file__}"
                raise AssertionError(f"{sched} failed; replay: {replay}\n{cause}") from exc
            kinds.add((sched.action, sched.when))
        assert rt.mcp.connections_opened == 1
        assert starts.count == 1
        pids = starts.pids
    if ONLY_SEED is None:
        # The bounded run still reaches every kind of interruption at every kind of moment.
        assert {a for a, _ in kinds} == {"cancel", "cancel-keep", "dispose"}
        assert {w for _, w in kinds} == {"stalled", "checkpoints", "never"}
    assert not any(_alive(pid) for pid in pids)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
