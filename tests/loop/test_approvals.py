"""Approvals in the loop (docs/spec/approvals.md): a call that needs a decision parks the
turn (`awaiting_approval`, no task held) while the other calls of its step run; approve and
reject record exactly one decision, run or reject the call and continue the turn; the
parked state is rebuilt from the log; every request rebuilds and verifies byte for byte."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from helpers import open_runtime

from actorloop.runtime import AgentOptions, Tool
from actorloop.runtime.errors import ApprovalAlreadyDecided, ApprovalNotFound, ApprovalsPending
from actorloop.runtime.log.rebuild import check_digest, rebuild_request
from actorloop.runtime.log.verify import verify_log
from actorloop.runtime.model.approvals import Approve, PendingApproval, Reject
from actorloop.runtime.testing import ScriptedProvider, reply, tool_call, tool_calls

SCHEMA = {"type": "object", "properties": {"amount": {"type": "integer"}}}


class Ran:
    """Tools that record each run (call id and arguments)."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, dict[str, Any]]] = []

    def tool(self, name: str, needs_approval: Any = False) -> Tool:
        async def execute(args: dict[str, Any], ctx: Any) -> str:
            self.runs.append((ctx.call_id, args))
            return f"{name} ran {args}"

        return Tool(name, f"the {name} tool", SCHEMA, execute, needs_approval=needs_approval)


def check_log(agent: Any) -> None:
    events = agent.session.events
    verify_log(agent.session.meta, events)
    for event in events:
        if event.type == "assistant/message":
            check_digest(rebuild_request(agent.id, events, event.seq))


async def test_pool_of_five_with_one_approval_parks_after_four_results() -> None:
    ran = Ran()
    calls = [(f"c{i}", "look", {"amount": i}) for i in range(4)]
    calls.insert(2, ("pay", "pay", {"amount": 100}))
    provider = ScriptedProvider([tool_calls(*calls), reply("paid")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(
            AgentOptions(model="m", tools=(ran.tool("look"), ran.tool("pay", True)))
        )
        result = await agent.send("pay the invoice")
        assert result.reason == "awaiting_approval"
        assert result.pending == (PendingApproval("pay", "pay", '{"amount": 100}', agent.id),)
        assert sorted(call_id for call_id, _ in ran.runs) == ["c0", "c1", "c2", "c3"]
        types = [e.type for e in agent.session.events]
        assert types.count("tool/result") == 4
        assert types.count("approval/request") == 1
        assert agent.status == "idle"
        assert agent.pending_approvals() == result.pending
        with pytest.raises(ApprovalsPending):
            await agent.send("something else")

        done = await agent.approve("pay", {"amount": 90}, meta={"by": "alice"})
        assert done.reason == "completed"
        assert done.text == "paid"
        assert ran.runs[-1] == ("pay", {"amount": 90})
        assert agent.pending_approvals() == ()
        decisions = [e for e in agent.session.events if e.type == "approval/decision"]
        assert len(decisions) == 1
        assert decisions[0].data.arguments == '{"amount":90}'
        assert decisions[0].data.meta == {"by": "alice"}
        request = next(e for e in agent.session.events if e.type == "approval/request")
        assert request.data.arguments == '{"amount": 100}'
        with pytest.raises(ApprovalAlreadyDecided):
            await agent.approve("pay")
        with pytest.raises(ApprovalNotFound):
            await agent.reject("nope")
        check_log(agent)


async def test_reject_records_the_rejection_as_the_result_and_continues() -> None:
    ran = Ran()
    provider = ScriptedProvider([tool_call("p", "pay", {"amount": 1}), reply("ok, not paid")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(AgentOptions(model="m", tools=(ran.tool("pay", True),)))
        assert (await agent.send("pay")).reason == "awaiting_approval"
        done = await agent.reject("p", reason="too much")
        assert done.reason == "completed"
        assert ran.runs == []
        result = next(e for e in agent.session.events if e.type == "tool/result")
        assert result.data.is_error and result.data.error.code == "APPROVAL_REJECTED"
        assert "too much" in result.data.content[0].text
        check_log(agent)


async def test_two_approvals_in_one_step_continue_after_the_last() -> None:
    ran = Ran()
    provider = ScriptedProvider(
        [tool_calls(("a", "pay", {"amount": 1}), ("b", "pay", {"amount": 2})), reply("both")]
    )
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(AgentOptions(model="m", tools=(ran.tool("pay", True),)))
        first = await agent.send("pay twice")
        assert [p.call_id for p in first.pending] == ["a", "b"]
        middle = await agent.approve("b")
        assert middle.reason == "awaiting_approval"
        assert [p.call_id for p in middle.pending] == ["a"]
        last = await agent.approve("a")
        assert last.reason == "completed" and last.text == "both"
        assert [call_id for call_id, _ in ran.runs] == ["b", "a"]
        check_log(agent)


async def test_predicate_and_hook_policy_decide_without_parking() -> None:
    ran = Ran()
    provider = ScriptedProvider(
        [
            tool_calls(("small", "pay", {"amount": 1}), ("big", "pay", {"amount": 500})),
            reply("done"),
        ]
    )
    async with open_runtime(provider) as rt:
        tool = ran.tool("pay", lambda args, ctx: args["amount"] > 10)
        agent = await rt.spawn(AgentOptions(model="m", tools=(tool,)))

        def policy(agent: Any, pending: PendingApproval, next: Any) -> Any:
            return Reject("over the limit") if pending.arguments == '{"amount": 500}' else Approve()

        agent.on("tools/approval", policy)
        result = await agent.send("pay")
        assert result.reason == "completed"
        assert ran.runs == [("small", {"amount": 1})]
        decisions = [e.data for e in agent.session.events if e.type == "approval/decision"]
        assert [(d.call_id, d.decision) for d in decisions] == [("big", "reject")]
        check_log(agent)


async def test_send_with_reject_pending_rejects_first() -> None:
    ran = Ran()
    provider = ScriptedProvider([tool_call("p", "pay", {"amount": 1}), reply("new topic")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(AgentOptions(model="m", tools=(ran.tool("pay", True),)))
        await agent.send("pay")
        result = await agent.send("never mind", reject_pending=True)
        assert result.reason == "completed" and result.text == "new topic"
        assert ran.runs == []
        assert agent.pending_approvals() == ()
        check_log(agent)


async def test_parked_state_survives_resume_and_fork_decides_independently(
    tmp_path: Any,
) -> None:
    ran = Ran()
    store = f"sqlite:{tmp_path / 's.db'}"
    tools = (ran.tool("pay", True),)
    provider = ScriptedProvider([tool_call("p", "pay", {"amount": 3})])
    async with open_runtime(provider, store) as rt:
        agent = await rt.spawn(AgentOptions(model="m", tools=tools))
        assert (await agent.send("pay")).reason == "awaiting_approval"
        session_id = agent.id
    provider = ScriptedProvider([reply("parent paid"), reply("child refused")])
    async with open_runtime(provider, store) as rt:
        agent = await rt.resume(session_id, AgentOptions(model="m", tools=tools))
        assert [p.call_id for p in agent.pending_approvals()] == ["p"]
        child = await rt.fork(session_id, options=AgentOptions(model="m", tools=tools))
        assert [p.session_id for p in child.pending_approvals()] == [child.id]
        assert (await agent.approve("p")).text == "parent paid"
        assert (await child.reject("p", reason="no")).text == "child refused"
        assert ran.runs == [("p", {"amount": 3})]
        check_log(agent)
        check_log(child)


async def test_parked_turn_holds_no_task_and_dispose_while_parked() -> None:
    provider = ScriptedProvider([tool_call("p", "pay", {"amount": 1})])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(AgentOptions(model="m", tools=(Ran().tool("pay", True),)))
        await agent.send("pay")
        with trio.fail_after(5):
            await agent.wait_idle()
        agent.cancel()
        await agent.dispose()
        assert agent.session.events[-1].type == "turn/end"


async def test_inject_while_parked_is_held_until_the_last_result_and_steer_refused() -> None:
    ran = Ran()
    provider = ScriptedProvider([tool_call("p", "pay", {"amount": 1}), reply("done")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(AgentOptions(model="m", tools=(ran.tool("pay", True),)))
        await agent.send("pay")
        agent.inject("a note from a plugin")
        with pytest.raises(ApprovalsPending):
            agent.steer("go on")
        assert [e.type for e in agent.session.events].count("context/message") == 0
        await agent.approve("p")
        types = [e.type for e in agent.session.events]
        assert types.index("context/message") > types.index("tool/result")
        assert types.count("context/message") == 1
        check_log(agent)
