"""Turn outcomes as the API answers them: from a loop's `TurnResult`, or read back from the
log when the caller that awaited the turn is gone (so an idempotency key still answers)."""

from __future__ import annotations

from collections.abc import Sequence

from ..log.usage import usage_of
from ..model.budget import Spend
from ..model.chunks import TokenUsage
from ..model.events import AssistantMessage, SessionEvent, StepStart, TurnEnd, TurnStart
from ..model.hook_values import TurnResult
from .schemas import SpendReport, TurnOutcome, Usage


def usage_json(usage: TokenUsage) -> Usage:
    """`TokenUsage` with every bucket present."""
    return Usage(usage.input, usage.output, usage.cache_read, usage.cache_write, usage.reasoning)


def spend_report(spend: Spend) -> SpendReport:
    """The response shape of a `Spend`."""
    return SpendReport(spend.tokens, spend.model_calls, spend.usd)


def turn_outcome(session_id: str, result: TurnResult) -> TurnOutcome:
    """The response shape of a `TurnResult`."""
    return TurnOutcome(
        id=session_id,
        turn=result.turn,
        reason=result.reason,
        text=result.text,
        message=result.message,
        code=result.code,
        steps=result.steps,
        usage=usage_json(result.usage),
    )


def outcome_from_log(session_id: str, events: Sequence[SessionEvent]) -> TurnOutcome:
    """The outcome of the first turn that starts in `events` (what its `TurnResult` said),
    or `discarded` if none started: used when the caller that awaited the turn was
    cancelled, so the idempotency key still answers with what happened."""
    start = next((i for i, e in enumerate(events) if isinstance(e.data, TurnStart)), None)
    if start is None:
        return turn_outcome(session_id, TurnResult(None, "discarded"))
    turn = events[start].data
    assert isinstance(turn, TurnStart)
    span: list[SessionEvent] = []
    end: TurnEnd | None = None
    for event in events[start:]:
        span.append(event)
        if isinstance(event.data, TurnEnd) and event.data.turn == turn.turn:
            end = event.data
            break
    reply = next(
        (e.data for e in reversed(span) if isinstance(e.data, AssistantMessage) and e.data.content),
        None,
    )
    text = "".join(getattr(block, "text", "") for block in reply.content) if reply else ""
    reason = end.reason if end is not None else None
    return TurnOutcome(
        id=session_id,
        turn=turn.turn,
        reason=reason.kind if reason is not None else "aborted",
        text=text,
        message=(reason.message or reason.reason) if reason is not None else None,
        code=reason.code if reason is not None else None,
        steps=sum(1 for e in span if isinstance(e.data, StepStart)),
        usage=usage_json(usage_of(span).total),
    )
