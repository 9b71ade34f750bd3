"""Approvals inside a subagent (docs/approvals.md): the child's call that needs a decision
surfaces on the parent's turn (`awaiting_approval`, its pending naming the child session),
is decided through the parent, and the child's answer becomes the delegation's result; a
child that waits twice parks the parent twice."""

from __future__ import annotations

from typing import Any

from helpers import open_runtime
from test_subagents import Router

from actorloop.runtime import AgentOptions, Tool
from actorloop.runtime.host.subagents import subagent_tool
from actorloop.runtime.log.verify import verify_log
from actorloop.runtime.testing import reply, tool_call, tool_calls


async def test_a_childs_approval_is_decided_through_the_parent() -> None:
    runs: list[str] = []

    async def pay(args: dict[str, Any], ctx: Any) -> str:
        runs.append(ctx.call_id)
        return "paid"

    pay_tool = Tool("pay", "pays", {"type": "object"}, pay, needs_approval=True)
    router = Router(
        {
            "P": [tool_call("d1", "delegate", {"task": "pay twice"}), reply("the child paid")],
            "P.d1": [tool_call("k1", "pay", {}), tool_calls(("k2", "pay", {})), reply("both")],
        }
    )
    async with open_runtime(router) as rt:
        child_options = AgentOptions(model="m", tools=(pay_tool,))
        parent = await rt.spawn(
            AgentOptions(model="m", tools=(subagent_tool(rt, options=child_options),)),
            session_id="P",
        )
        first = await parent.send("delegate the payments")
        assert first.reason == "awaiting_approval"
        assert [(p.call_id, p.session_id) for p in first.pending] == [("k1", "P.d1")]
        assert parent.pending_approvals() == first.pending
        second = await parent.approve("k1")
        assert second.reason == "awaiting_approval"
        assert [(p.call_id, p.session_id) for p in second.pending] == [("k2", "P.d1")]
        done = await parent.reject("k2", reason="once is enough")
        assert done.reason == "completed" and done.text == "the child paid"
        assert runs == ["k1"]
        assert parent.pending_approvals() == ()
        results = [e.data for e in parent.session.events if e.type == "tool/result"]
        assert [r.call_id for r in results] == ["d1"]
        assert results[0].content[0].text == "both"
        verify_log(parent.session.meta, parent.session.events)
