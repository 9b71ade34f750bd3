"""The decision side of approvals: the claim a decision takes before it is queued, and the
resolution step that logs it, runs (or rejects) the call — or hands it to the subagent it
waits in — and lets the turn go on."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from attrs import evolve

from ...runtime.control.approvals import DeferredApprovals, Forwarder
from ...runtime.errors import (
    ApprovalAlreadyDecided,
    ApprovalNotFound,
    ApprovalsPending,
    ErrorCode,
)
from ...runtime.log.approvals import ApprovalEntry, ApprovalLedger
from ...runtime.model.approvals import ApprovalDecision
from ...runtime.model.events import StepStart, TurnEndReason
from ...runtime.model.hook_values import ToolCallInfo, ToolOutcome
from ...runtime.model.messages import ToolCall
from .approvals import park_deferred
from .context import StepContext
from .step import assemble, end_step
from .tools import describe, error_outcome, log_call, log_result, run_tools, tool_text
from .values import OpenStep, OpenTurn, QueuedDecision

SEND_REJECTION = "a new message was sent instead of a decision"
"""The reason recorded for the calls a `send(reject_pending=True)` rejects."""


def claim(
    ledger: ApprovalLedger,
    decisions: Sequence[QueuedDecision],
    forwarders: Mapping[str, Forwarder] | None = None,
) -> None:
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
        via = entry.request.via_call if entry is not None else None
        if (
            entry is not None
            and via is not None
            and forwarders is not None
            and (via not in forwarders)
        ):
            raise ApprovalNotFound(
                f"call {queued.call_id!r} waits in subagent session "
                f"{entry.request.session_id!r}, which this loop instance did not start: "
                "resume that session and decide it there"
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


def _logged(ctx: StepContext, step: OpenStep, queued: QueuedDecision) -> ApprovalEntry:
    """The entry of `queued`, its decision logged now (unless logged before a crash)."""
    entry = ctx.approvals.entries.get(queued.call_id)
    if entry is None:
        raise ApprovalNotFound(f"no call {queued.call_id!r} waits for a decision")
    if queued.record:
        if entry.decision is not None:
            raise ApprovalAlreadyDecided(f"call {queued.call_id!r} was already decided")
        ctx.append_event(
            "approval/decision",
            ApprovalDecision(
                step.turn,
                step.number,
                queued.call_id,
                queued.decision,
                queued.arguments,
                queued.reason,
                queued.meta,
            ),
        )
    assert entry.decision is not None  # the ledger took it at the append
    return entry


async def resolve(
    ctx: StepContext, turn: OpenTurn, decisions: Sequence[QueuedDecision]
) -> TurnEndReason | None:
    """The resolution step: each decision logged (`approval/decision`) and made durable,
    then the decided calls run (or get their rejection) as the step's calls, and decisions
    on a subagent's calls go to the subagent. The reason the turn ends with when calls
    still wait, else None: the turn goes on."""
    _system, tools = await assemble(ctx)
    turn.steps += 1
    ctx.append_event("step/start", StepStart(turn.number, turn.steps))
    step = turn.step = OpenStep(
        turn.number,
        turn.steps,
        {tool.name: tool for tool in tools},
        ctx.options.max_parallel_tool_calls,
    )
    own: list[ToolCall] = []
    forwarded: list[tuple[QueuedDecision, ApprovalEntry]] = []
    for queued in decisions:
        entry = _logged(ctx, step, queued)
        request = entry.request
        if request.via_call is not None:
            forwarded.append((queued, entry))
            continue
        assert entry.decision is not None
        decided = entry.decision
        if not queued.record and queued.decision != decided.decision:
            # A fork child's copy of a decided call its parent runs: answered, not run.
            decided = evolve(decided, decision=queued.decision, reason=queued.reason)
        step.decided[queued.call_id] = decided
        own.append(ToolCall(request.call_id, request.tool, request.arguments))
    # The decisions are durable before any decided call runs.
    await ctx.barrier()
    step.requested = tuple(own)
    turn.tool_batch = []
    # Decisions handed to subagents first: run_tools then logs (or holds, when something
    # parked again) the batch's contexts after every result of the step.
    await _forward(ctx, step, forwarded)
    delegations, step.requested = step.requested[len(own) :], tuple(own)
    await run_tools(ctx, turn, step)
    step.requested += delegations
    await end_step(ctx, turn)
    if ctx.approvals.blocking:
        return TurnEndReason("awaiting_approval")
    held, ctx.held_contexts[:] = tuple(ctx.held_contexts), []
    for item in held:
        ctx.append_context(item)
    return None


async def _forward(
    ctx: StepContext, step: OpenStep, forwarded: Sequence[tuple[QueuedDecision, ApprovalEntry]]
) -> None:
    """Hand each decision on a subagent's call to its subagent (through the delegating
    call's forwarder): the delegating call is logged again in this step, and gets its
    result once the subagent answers — or parks again on what the subagent waits for."""
    for queued, entry in forwarded:
        request = entry.request
        assert request.via_call is not None and request.via_tool is not None
        via = request.via_call
        forward = ctx.forwarders.get(via)
        info = ToolCallInfo(
            step.turn, step.number, via, request.via_tool, request.via_arguments or "{}"
        )
        if via not in step.logged_calls:
            step.requested += (ToolCall(via, info.name, info.arguments),)
            log_call(ctx, step, info)
            await ctx.barrier()
        elif via in step.answered:
            continue  # an earlier decision of this batch already settled the delegation
        step.started.add(via)
        try:
            if forward is None:
                raise ApprovalNotFound(f"no forwarder for the delegating call {via!r}")
            output = await forward(
                queued.call_id, queued.decision, queued.arguments, queued.reason, queued.meta
            )
        except DeferredApprovals as again:
            park_deferred(ctx, step, info, again)
            continue
        except Exception as exc:
            outcome = error_outcome(info, ErrorCode.TOOL_FAILED, f"{type(exc).__name__}: {exc}")
        else:
            content = tool_text(output)
            outcome = (
                ToolOutcome(step.turn, step.number, via, info.name, info.arguments, content)
                if content is not None
                else error_outcome(
                    info, ErrorCode.INVALID_TOOL_OUTPUT, f"The tool returned {describe(output)}"
                )
            )
        step.finished[via] = outcome
        ctx.forwarders.pop(via, None)
        log_result(ctx, step, outcome)
