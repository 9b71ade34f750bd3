"""One turn, from taking its item to its `turn/end` and the barrier after it: `turn/start`,
`prompt/submit`, the steps, and the shielded close that a cancel or an error still runs
(missing results, `step/end`, the owed post-step)."""

from __future__ import annotations

import logging
import math

import trio

from ...runtime.control.hooks import run_serial
from ...runtime.errors import ApprovalsPending
from ...runtime.log.usage import usage_of
from ...runtime.model.events import (
    AssistantMessage,
    PromptBlocked,
    Trigger,
    TurnEnd,
    TurnEndReason,
    TurnStart,
    UserMessage,
)
from ...runtime.model.hook_values import (
    Allow,
    Block,
    ContextItem,
    PostStep,
    PromptSubmit,
    TurnResult,
)
from ...runtime.model.messages import Message
from .budget import settle_unanswered
from .context import LoopContext, StepContext, TurnContext
from .decisions import resolve
from .effects import reconcile_turn
from .inbox import enqueue_nowait, finish_item, inbox_event
from .step import assemble, close_step, run_step, session_prefix
from .tools import answer_missing_calls
from .values import POST_STEP_GRACE, EndTurn, OpenStep, OpenTurn, TurnItem, TurnRejected

log = logging.getLogger("actorloop.loop")


async def run_item(ctx: LoopContext, item: TurnItem) -> None:
    """The turn of `item`: its body in the turn's cancel scope, then the shielded close."""
    # No checkpoint between receiving the item and owning its scope, so cancel() always
    # finds either nothing (the item still queued) or this scope.
    turn = ctx.current_turn = OpenTurn(item, ctx.session.last_turn + 1, len(ctx.session))
    item.turn = turn.number
    # Told once the turn owns the item: a listener's cancel() reaches this very turn.
    inbox_event(ctx, "dequeue", item)
    trigger_kind = "message" if item.kind == "message" else item.kind
    ctx.append_event("turn/start", TurnStart(turn.number, Trigger(trigger_kind, item.source)))
    reason: TurnEndReason | None = None
    error: BaseException | None = None
    reported: BaseException | None = None
    scope = turn.scope
    try:
        with scope:
            try:
                reason = await _turn_body(ctx, turn)
            except TurnRejected as rejected:
                reason = rejected.reason
            except Exception as exc:
                error = exc
                reason = TurnEndReason(
                    "error",
                    step=turn.steps,
                    message=f"{type(exc).__name__}: {exc}",
                    code=getattr(exc, "code", None),
                )
    except Exception as exc:
        # What is left of an exception group once trio stripped this scope's Cancelled
        # from it (e.g. a tool's nursery whose child failed while being cancelled). Only a
        # cancelled turn gets here: it ends aborted/disposed and the error is not reported.
        if not scope.cancel_called:
            raise
        log.debug("turn %d of %s: error while cancelling: %r", turn.number, ctx.id, exc)
    finally:
        # Retire the scope first: a cancel from here on does nothing to this turn.
        turn.retired = True
        if reason is None or (scope.cancel_called and reason.kind != "budget_exhausted"):
            # Cancelled from outside the turn's own scope (the runtime's scope: shutdown)
            # is a disposal, even when a cancel of the turn itself came first.
            outer = trio.current_effective_deadline() == -math.inf
            reason = TurnEndReason(
                "disposed" if ctx.disposing or outer else "aborted",
                reason=turn.cancel_reason,
            )
        else:
            reported = error
        await _close(ctx, turn, reason)
    if reported is not None:
        # After the turn is closed, so what a listener injects cannot land mid-batch.
        log.warning("turn %d of %s failed: %r", turn.number, ctx.id, reported)
        ctx.notify("agent/error", reported)
    if ctx.steering and not ctx.closed and ctx._outstanding <= 1:
        # Steering that arrived in the turn's last step has no next step to join: like a
        # steer on an idle agent, it starts the next turn (the rest joins its first step).
        content, source = ctx.steering.pop(0)
        enqueue_nowait(ctx, TurnItem("message", content, source))
    finish_item(ctx, item, _result_of(ctx, turn, reason))


async def _close(ctx: LoopContext, turn: OpenTurn, reason: TurnEndReason) -> None:
    """The turn's close: the open step closed, the owed post-step, `turn/end`, then the
    barrier. What awaits runs shielded; the rest (and a barrier written inline, the usual
    case) passes no schedule point, so it has nothing to shield."""
    _close_open_step(ctx, turn)
    owed = turn.ended_step
    if owed is not None and not owed.post_step_done:
        with trio.CancelScope(shield=True):
            await _post_step_in_close(ctx, owed, cancelled=turn.scope.cancel_called)
    ctx.append_event("turn/end", TurnEnd(turn.number, reason))
    ctx.current_turn = None
    if not ctx.barrier_now():
        await ctx.barrier_queued()  # shielded itself; asking barrier() would retry the inline write


def _result_of(ctx: TurnContext, turn: OpenTurn, reason: TurnEndReason) -> TurnResult:
    """The closed turn's result: its reply, and the usage of every model call in it."""
    events = ctx.session.events_since(turn.first_seq)
    reply = next(
        (
            Message("assistant", event.data.content)
            for event in reversed(events)
            if isinstance(event.data, AssistantMessage) and event.data.content
        ),
        None,
    )
    return TurnResult(
        turn.number,
        reason.kind,  # type: ignore[arg-type]
        reason.message or reason.reason,
        reply,
        usage_of(events).total,
        turn.steps,
        reason.code,
        pending=ctx.approvals.pending() if reason.kind == "awaiting_approval" else (),
    )


async def _turn_body(ctx: StepContext, turn: OpenTurn) -> TurnEndReason:
    item = turn.item
    if item.kind == "injection":
        ctx.append_context(ContextItem(item.content, item.source, item.meta))
        return TurnEndReason("completed")
    if item.kind == "compaction":
        await _manual_compaction(ctx, turn)
        return TurnEndReason("completed")
    if item.kind == "reconciliation":
        return await reconcile_turn(ctx, turn)
    if item.kind == "approval" or item.meta:
        # The decisions first (an approval item's, or a send's rejections of what waits).
        turn.called_tools = True
        parked = await resolve(ctx, turn, item.meta)
        if parked is not None:
            return parked
    elif ctx.approvals.blocking:
        raise ApprovalsPending(
            f"session {ctx.session.id!r} parked calls for a decision before this message "
            "ran: approve or reject them, or send with reject_pending=True"
        )
    if item.kind == "message":
        await _submit_prompt(ctx, item, turn.number)
    while True:
        turn.steps += 1
        outcome = await run_step(ctx, turn, turn.steps)
        if isinstance(outcome, EndTurn):
            return outcome.reason
        cap = ctx.options.max_steps
        if cap is not None and turn.steps >= cap:
            return TurnEndReason("max_steps", message=f"the turn took max_steps={cap} steps")


async def _submit_prompt(ctx: TurnContext, item: TurnItem, turn: int) -> None:
    decision = await ctx.seam("prompt/submit", PromptSubmit(turn, item.content, item.source))
    if isinstance(decision, PromptSubmit):
        decision = Allow(decision.content if decision.content != item.content else None)
    if isinstance(decision, Block):
        ctx.append_event(
            "prompt/blocked", PromptBlocked(item.content, item.source, decision.reason)
        )
        raise TurnRejected(TurnEndReason("rejected", reason=decision.reason))
    if not isinstance(decision, Allow):
        raise TypeError(f"prompt/submit returned {type(decision).__name__}, not Allow/Block")
    content = decision.content if decision.content is not None else item.content
    ctx.append_event("user/message", UserMessage(content, item.source), surface=True)
    for extra in decision.additional_context:
        ctx.append_context(extra)


def _close_open_step(ctx: TurnContext, turn: OpenTurn) -> None:
    """After a cancel or error: results for every requested call, contexts, step/end."""
    settle_unanswered(ctx)
    step = turn.step
    if step is None or ctx.session.open_step is None:
        turn.step = None
        return
    answer_missing_calls(ctx, turn, step)
    close_step(ctx, turn)


async def _post_step_in_close(ctx: LoopContext, step: OpenStep, *, cancelled: bool) -> None:
    """`agent/post-step` for a step that a cancel or an error ended: it runs in the
    turn's shielded close, bounded by POST_STEP_GRACE; a failure is logged, not
    reported (the turn's reason is already decided)."""
    step.post_step_done = True
    with trio.move_on_after(POST_STEP_GRACE):
        try:
            await run_serial(
                ctx.chain("agent/post-step"),
                ctx.agent,
                PostStep(step.turn, step.number, cancelled=cancelled),
            )
        except Exception:
            log.exception("agent/post-step listener failed while %s closed a turn", ctx.id)


async def _manual_compaction(ctx: StepContext, turn: OpenTurn) -> None:
    if ctx.compactor is None:
        raise RuntimeError("this runtime has no compactor")
    system, _tools = await assemble(ctx)
    prefix = await session_prefix(ctx)
    await ctx.compactor.compact_now(ctx, system, prefix, turn.scope)
