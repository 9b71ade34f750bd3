"""The request side of approvals in a step: whether a call needs a decision, its
`approval/request`, the `tools/approval` seam (a policy may decide at once), and the park."""

from __future__ import annotations

import orjson

from ...runtime.control.approvals import DeferredApprovals
from ...runtime.control.handle import ToolContext
from ...runtime.control.options import Tool
from ...runtime.errors import HookError
from ...runtime.model.approvals import (
    ApprovalDecision,
    ApprovalRequest,
    Approve,
    PendingApproval,
    Reject,
)
from ...runtime.model.hook_values import ToolCallInfo
from .context import TurnContext
from .values import OpenStep, OpenTurn

HOOK_META = {"by": "tools/approval"}
"""Who decided, for a decision a `tools/approval` listener gave without saying."""


def needs_approval(ctx: TurnContext, turn: OpenTurn, tool: Tool | None, info: ToolCallInfo) -> bool:
    """Whether the call waits for a decision: its tool asks for one (always, or its
    predicate says so for these arguments). A call whose arguments do not pass the tool's
    schema never runs, so it asks for nothing (it gets its INVALID_ARGUMENTS result)."""
    rule = getattr(tool, "needs_approval", False)
    if tool is None or rule is False:
        return False
    try:
        args = orjson.loads(info.arguments or "{}")
    except orjson.JSONDecodeError:
        return False
    if not isinstance(args, dict) or tool.validator.problem(args) is not None:
        return False
    if rule is True:
        return True
    context = ToolContext(ctx.agent, info.call_id, turn.scope, info.turn, info.step)
    return bool(rule(args, context))


async def request_approval(
    ctx: TurnContext, step: OpenStep, info: ToolCallInfo
) -> ApprovalDecision | None:
    """Log the call's `approval/request`, then ask `tools/approval`: the decision a
    listener gave (logged as the call's one `approval/decision`), or None — the call is
    parked and the step goes on without its result."""
    ctx.append_event(
        "approval/request",
        ApprovalRequest(info.turn, info.step, info.call_id, info.name, info.arguments),
    )
    pending = PendingApproval(info.call_id, info.name, info.arguments, ctx.session.id)
    answer = await ctx.seam("tools/approval", pending)
    if isinstance(answer, PendingApproval):
        if answer != pending:
            raise HookError("a tools/approval listener changed the pending call it was given")
        step.parked.append(info.call_id)
        return None
    if isinstance(answer, Approve):
        decision = ApprovalDecision(
            info.turn,
            info.step,
            info.call_id,
            "approve",
            answer.arguments,
            meta=answer.meta if answer.meta is not None else HOOK_META,
        )
    elif isinstance(answer, Reject):
        decision = ApprovalDecision(
            info.turn,
            info.step,
            info.call_id,
            "reject",
            reason=answer.reason,
            meta=answer.meta if answer.meta is not None else HOOK_META,
        )
    else:
        raise HookError(
            "tools/approval must return the PendingApproval (wait), Approve or Reject, got "
            f"{type(answer).__name__}"
        )
    ctx.append_event("approval/decision", decision)
    step.decided[info.call_id] = decision
    return decision


def park_deferred(
    ctx: TurnContext, step: OpenStep, info: ToolCallInfo, deferred: DeferredApprovals
) -> None:
    """Park the call `info` on the subagent calls `deferred` names: an `approval/request`
    for each (naming the subagent session and this call), decided through this agent."""
    for pending in deferred.pending:
        ctx.append_event(
            "approval/request",
            ApprovalRequest(
                info.turn,
                info.step,
                pending.call_id,
                pending.tool,
                pending.arguments,
                pending.session_id,
                info.call_id,
                info.name,
                info.arguments,
            ),
        )
        step.parked.append(pending.call_id)
    ctx.forwarders[info.call_id] = deferred.forward
