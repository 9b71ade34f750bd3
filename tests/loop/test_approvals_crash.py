"""Approvals across kill -9 and concurrency (docs/spec/approvals.md): an owner killed after
the decision is durable but before the tool runs leaves the call to run exactly once on the
next owner (after resume); an owner killed while the tool runs leaves it in doubt
(`TOOL_OUTCOME_UNKNOWN`), never re-run; concurrent decisions of one call record exactly one.

Bounded by default (`APPROVALS_CRASH_TRIALS` kill -9 trials per schedule, default 2;
`APPROVALS_RACE_SESSIONS` × `APPROVALS_RACE_TRIALS` races, default 10 × 2). Full mode:
`APPROVALS_CRASH_TRIALS=200 APPROVALS_RACE_SESSIONS=100 APPROVALS_RACE_TRIALS=10`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from helpers import open_runtime

from actorloop.runtime import AgentOptions, Tool
from actorloop.runtime.errors import ApprovalAlreadyDecided
from actorloop.runtime.log.verify import verify_log
from actorloop.runtime.testing import ScriptedProvider, reply, tool_call

CRASH_TRIALS = int(os.environ.get("APPROVALS_CRASH_TRIALS", "2"))
RACE_SESSIONS = int(os.environ.get("APPROVALS_RACE_SESSIONS", "10"))
RACE_TRIALS = int(os.environ.get("APPROVALS_RACE_TRIALS", "2"))

OWNER = """
import os, signal, sys
import trio
from actorloop.runtime import AgentOptions, Runtime, Tool
from actorloop.runtime.testing import ScriptedProvider, reply

store, session_id, mode, effects = sys.argv[1:5]

async def pay(args, ctx):
    with open(effects, "a") as out:
        out.write(ctx.call_id + "\\n")
        out.flush()
        os.fsync(out.fileno())
    if mode == "during":
        os.kill(os.getpid(), signal.SIGKILL)
    return "paid"

def kill_before_the_tool(agent, info, next):
    os.kill(os.getpid(), signal.SIGKILL)

async def main():
    tool = Tool("pay", "pays", {"type": "object"}, pay, needs_approval=True)
    async with Runtime.open(store=store, provider=ScriptedProvider([reply("x")])) as rt:
        agent = await rt.resume(session_id, AgentOptions(model="m", tools=(tool,)))
        if mode == "before":
            agent.on("tools/pre-execute", kill_before_the_tool)
        await agent.approve("p", meta={"by": "owner"})
    sys.exit("the owner was not killed")

trio.run(main)
"""


def effect_tool(effects: Path) -> Tool:
    async def pay(args: dict[str, Any], ctx: Any) -> str:
        with effects.open("a") as out:
            out.write(ctx.call_id + "\n")
        return "paid"

    return Tool("pay", "pays", {"type": "object"}, pay, needs_approval=True)


async def crash_trial(tmp: Path, mode: str) -> None:
    store = f"sqlite:{tmp / 'crash.db'}"
    effects = tmp / "effects.txt"
    effects.write_text("")
    tool = effect_tool(effects)
    async with open_runtime(ScriptedProvider([tool_call("p", "pay", {"n": 1})]), store) as rt:
        agent = await rt.spawn(AgentOptions(model="m", tools=(tool,)))
        assert (await agent.send("pay")).reason == "awaiting_approval"
        session_id = agent.id
    with trio.fail_after(120):
        owner = await trio.run_process(
            [sys.executable, "-c", OWNER, store, session_id, mode, str(effects)],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert owner.returncode == -9, owner.stderr.decode()
    after = ScriptedProvider([reply("after the crash")])
    async with open_runtime(after, store) as rt:
        agent = await rt.resume(session_id, AgentOptions(model="m", tools=(tool,)))
        with trio.fail_after(30):
            await agent.wait_idle()
        events = agent.session.events
        assert agent.pending_approvals() == ()
        decisions = [e for e in events if e.type == "approval/decision"]
        assert len(decisions) == 1 and decisions[0].data.meta == {"by": "owner"}
        results = [e.data for e in events if e.type == "tool/result" and e.data.call_id == "p"]
        assert len(results) == 1
        assert effects.read_text().splitlines() == ["p"]  # exactly once, over both owners
        if mode == "before":
            assert not results[0].is_error and results[0].content[0].text == "paid"
            assert agent.session.events[-1].type == "turn/end"
            assert any(e.type == "assistant/message" for e in events[decisions[0].seq :])
        else:
            assert results[0].error is not None
            assert results[0].error.code == "TOOL_OUTCOME_UNKNOWN"
        verify_log(agent.session.meta, events)


@pytest.mark.parametrize("mode", ["before", "during"])
async def test_kill_9_of_the_owner_never_runs_a_call_twice(tmp_path: Path, mode: str) -> None:
    for trial in range(CRASH_TRIALS):
        trial_dir = tmp_path / f"t{trial}"
        trial_dir.mkdir()
        await crash_trial(trial_dir, mode)


async def test_concurrent_decisions_record_exactly_one() -> None:
    runs: list[str] = []

    async def pay(args: dict[str, Any], ctx: Any) -> str:
        runs.append(ctx.agent.id)
        await trio.lowlevel.checkpoint()
        return "paid"

    tool = Tool("pay", "pays", {"type": "object"}, pay, needs_approval=True)
    one_trial = [tool_call("p", "pay", {})] * RACE_SESSIONS + [reply("done")] * RACE_SESSIONS
    script = one_trial * RACE_TRIALS
    approved = 0
    async with open_runtime(ScriptedProvider(script)) as rt:
        for _trial in range(RACE_TRIALS):
            agents = [
                await rt.spawn(AgentOptions(model="m", tools=(tool,))) for _ in range(RACE_SESSIONS)
            ]
            for agent in agents:
                assert (await agent.send("pay")).reason == "awaiting_approval"
            outcomes: list[str] = []

            async def decide(agent: Any, how: str, outcomes: list[str] = outcomes) -> None:
                try:
                    if how == "approve":
                        await agent.approve("p")
                    else:
                        await agent.reject("p")
                    outcomes.append("decided")
                except ApprovalAlreadyDecided:
                    outcomes.append("conflict")

            async with trio.open_nursery() as nursery:
                for index, agent in enumerate(agents):
                    nursery.start_soon(decide, agent, "approve")
                    nursery.start_soon(decide, agent, "approve" if index % 2 else "reject")
            assert sorted(set(outcomes)) == ["conflict", "decided"]
            assert outcomes.count("decided") == RACE_SESSIONS
            for agent in agents:
                decisions = [e for e in agent.session.events if e.type == "approval/decision"]
                assert len(decisions) == 1
                approved += decisions[0].data.decision == "approve"
                await agent.dispose()
        assert len(runs) == approved  # side effects == approvals


async def test_a_fork_taken_after_the_decision_leaves_the_run_to_the_parent(
    tmp_path: Path,
) -> None:
    store = f"sqlite:{tmp_path / 'fork.db'}"
    effects = tmp_path / "effects.txt"
    effects.write_text("")
    tool = effect_tool(effects)
    options = AgentOptions(model="m", tools=(tool,))
    async with open_runtime(ScriptedProvider([tool_call("p", "pay", {"n": 1})]), store) as rt:
        agent = await rt.spawn(options)
        await agent.send("pay")
        session_id = agent.id
    with trio.fail_after(120):
        owner = await trio.run_process(
            [sys.executable, "-c", OWNER, store, session_id, "before", str(effects)],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert owner.returncode == -9, owner.stderr.decode()
    provider = ScriptedProvider([reply("child went on"), reply("parent went on")])
    async with open_runtime(provider, store) as rt:
        child = await rt.fork(session_id, options=options)
        with trio.fail_after(30):
            await child.wait_idle()
        results = [e.data for e in child.session.events if e.type == "tool/result"]
        assert results[-1].error is not None and results[-1].error.code == "APPROVAL_REJECTED"
        assert effects.read_text() == ""
        parent = await rt.resume(session_id, options)
        with trio.fail_after(30):
            await parent.wait_idle()
        assert effects.read_text().splitlines() == ["p"]
        verify_log(child.session.meta, child.session.events)
        verify_log(parent.session.meta, parent.session.events)
