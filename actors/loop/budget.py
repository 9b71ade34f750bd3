"""The budget gate of a step (docs/spec/budgets.md): before the request leaves, reserve its
most expensive outcome on the agent's account (`budget/reserve`) or end the turn
`budget_exhausted`; after it, settle with the recorded usage (the `assistant/message`, or a
`budget/settle` for a call that left none)."""

from __future__ import annotations

from collections.abc import Sequence

from attrs import frozen

from ...runtime.control.accounts import EXHAUSTED, Account, Hold
from ...runtime.errors import ErrorCode
from ...runtime.log.prices import max_call_usd, spend_of
from ...runtime.log.request import Request
from ...runtime.model.budget import BudgetReserve, BudgetSettle, Spend
from ...runtime.model.chunks import TokenUsage, UsageReport
from ...runtime.model.events import AssistantChunk, TurnEndReason
from ...runtime.model.messages import Message
from .context import StepContext, TurnContext
from .values import OpenStep

ASSUMED_MAX_OUTPUT = 4096
"""The output a reservation assumes when the request sets no `max_tokens`."""


@frozen
class OpenHold:
    """The reservation of the call in flight: the account's hold and the logged event."""

    hold: Hold
    reserve: BudgetReserve
    seq: int


async def reserve_call(
    ctx: StepContext, step: OpenStep, request: Request, prefix: Sequence[Message]
) -> TurnEndReason | None:
    """Reserve this step's call on the agent's account (nothing without one) and log it;
    while only calls in flight keep it out, wait for them to settle. The `budget_exhausted`
    reason when the account (or one above it) refuses for good, after the other agents
    drawing from the refusing budget (but those above this one) were told to stop."""
    account: Account | None = ctx.account
    if account is None:
        return None
    config = request.config
    output = config.max_tokens or ASSUMED_MAX_OUTPUT
    input_tokens = ctx.meter.total(request.system, request.tools, tuple(prefix))
    provider = ctx.provider.name
    usd = max_call_usd(input_tokens, output, config.model, provider)
    amount = Spend(input_tokens + output, 1, usd)
    granted = account.reserve(amount)
    while isinstance(granted, Account):
        if not granted.waits_for(amount):
            granted.stop_subtree(EXHAUSTED, refused=account)
            return TurnEndReason(
                "budget_exhausted", message=granted.exhausted, code=ErrorCode.BUDGET_EXHAUSTED
            )
        await granted.settled()
        granted = account.reserve(amount)
    reserve = BudgetReserve(
        step.turn, step.number, provider, config.model, input_tokens + output, usd
    )
    event = ctx.append_event("budget/reserve", reserve)
    ctx.budget_hold = OpenHold(granted, reserve, event.seq)
    return None


def settle_answered(ctx: TurnContext, usage: TokenUsage | None) -> None:
    """The call in flight answered (its `assistant/message` is logged): its recorded usage
    settles the reservation."""
    open_hold: OpenHold | None = ctx.budget_hold
    if open_hold is None:
        return
    ctx.budget_hold = None
    reserve = open_hold.reserve
    open_hold.hold.account.settle(open_hold.hold, spend_of(usage, reserve.model, reserve.provider))


def settle_unanswered(ctx: TurnContext) -> None:
    """The call in flight left no `assistant/message` (it failed, was refused by a
    listener, or its turn was cancelled or failed): log `budget/settle` with the usage its
    stream reported and settle with it."""
    open_hold: OpenHold | None = ctx.budget_hold
    if open_hold is None:
        return
    ctx.budget_hold = None
    reserve = open_hold.reserve
    usage = reported_usage(ctx, open_hold.seq)
    if ctx.session.open_turn is not None:
        ctx.append_event("budget/settle", BudgetSettle(reserve.turn, reserve.step, usage))
    open_hold.hold.account.settle(open_hold.hold, spend_of(usage, reserve.model, reserve.provider))


def reported_usage(ctx: TurnContext, since: int) -> TokenUsage | None:
    """The usage the provider's chunks reported after seq `since` (None: none)."""
    usage: TokenUsage | None = None
    for event in ctx.session.events_since(since):
        data = event.data
        if isinstance(data, AssistantChunk) and isinstance(data.chunk, UsageReport):
            usage = data.chunk.usage if usage is None else usage + data.chunk.usage
    return usage
