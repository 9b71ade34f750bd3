"""The decision side of approvals: the claim a decision takes before it is queued, and the
resolution step that logs it, runs (or rejects) the call and lets the turn go on."""

from __future__ import annotations

from collections.abc import Sequence

from ...runtime.errors import ApprovalAlreadyDecided, ApprovalNotFound, ApprovalsPending
from ...runtime.log.approvals import ApprovalLedger
from ...runtime.model.approvals import ApprovalDecision
from ...runtime.model.events import StepStart, TurnEndReason
from ...runtime.model.messages import ToolCall
from .context import StepContext
from .step import assemble, end_step
from .tools import run_tools
from .values import OpenStep, OpenTurn, QueuedDecision

SEND_REJECTION = "a new message was sent instead of a decision"
"""The reason recorded for the calls a `send(reject_pending=True)` rejects."""


def claim(ledger: ApprovalLedger, decisions: Sequence[QueuedDecision]) -> None:
    """Take the claim of each decision's call, or raise without taking any: an unknown call
    is ApprovalNotFound, a decided one (or one whose decision is on its way)
    ApprovalAlreadyDecided. No checkpoint: two callers never both get a call's claim."""
    for queued in decisions:
        entry = ledger.entries.get(queued.call_id)
        taken = queued.call_id in ledger.claimed or queued.call_id in ledger.decided
        if entry is None and not taken:
            raise ApprovalNotFound(
                f"no call {queued.call_id!r} waits for a decision in session {ledger.session_id!r}"
            )
        if taken or (entry is not None and entry.decision is not None):
            raise ApprovalAlreadyDecided(
                f"call {queued.call_id!r} of session {ledger.session_id!r} was already decided"
            )
    ledger.claimed.update(queued.call_id for queued in decisions)


def release(ledger: ApprovalLedger, decisions: Sequence[QueuedDecision]) -> None:
    """Give back the claims of decisions that were never logged (their item was dropped)."""
    for queued in decisions:
        ledger.claimed.discard(queued.call_id)


def send_rejections(ledger: ApprovalLedger, reject_pending: bool) -> tuple[QueuedDecision, ...]:
    """What a send must record first: nothing when no call waits; the rejection of every
    waiting call with `reject_pending` (claimed now); else ApprovalsPending."""
    if not ledger.blocking:
        return ()
    if not reject_pending or len(ledger.undecided()) != len(ledger.entries):
        raise ApprovalsPending(
            f"session {ledger.session_id!r} has calls waiting for a decision "
            f"({', '.join(ledger.entries)}): approve or reject them, or send with "
            "reject_pending=True"
        )
    decisions = tuple(
        QueuedDecision(call_id, "reject", reason=SEND_REJECTION, meta={"by": "send"})
        for call_id in ledger.undecided()
    )
    claim(ledger, decisions)
    return decisions


async def resolve(
    ctx: StepContext, turn: OpenTurn, decisions: Sequence[QueuedDecision]
) -> TurnEndReason | None:
    """The resolution step: each decision logged (`approval/decision`) and made durable,
    then the decided calls run (or get their rejection) as the step's calls. The reason the
    turn ends with when calls still wait, else None: the turn goes on."""
    _system, tools = await assemble(ctx)
    turn.steps += 1
    ctx.append_event("step/start", StepStart(turn.number, turn.steps))
    step = turn.step = OpenStep(
        turn.number,
        turn.steps,
        {tool.name: tool for tool in tools},
        ctx.options.max_parallel_tool_calls,
    )
    calls: list[ToolCall] = []
    for queued in decisions:
        entry = ctx.approvals.entries.get(queued.call_id)
        if entry is None:
            raise ApprovalNotFound(f"no call {queued.call_id!r} waits for a decision")
        if queued.record:
            if entry.decision is not None:
                raise ApprovalAlreadyDecided(f"call {queued.call_id!r} was already decided")
            ctx.append_event(
                "approval/decision",
                ApprovalDecision(
                    turn.number,
                    step.number,
                    queued.call_id,
                    queued.decision,
                    queued.arguments,
                    queued.reason,
                    queued.meta,
                ),
            )
        decision = entry.decision
        assert decision is not None  # the ledger took it at the append
        step.decided[queued.call_id] = decision
        request = entry.request
        calls.append(ToolCall(request.call_id, request.tool, request.arguments))
    # The decisions are durable before any decided call runs.
    await ctx.barrier()
    step.requested = tuple(calls)
    turn.tool_batch = []
    await run_tools(ctx, turn, step)
    await end_step(ctx, turn)
    if ctx.approvals.blocking:
        return TurnEndReason("awaiting_approval")
    held, ctx.held_contexts[:] = tuple(ctx.held_contexts), []
    for item in held:
        ctx.append_context(item)
    return None
