"""The service's approvals: the calls a session's turn left waiting (from the live agent, or
from the stored log), and one decision per call, idempotent under an `Idempotency-Key`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson
import trio

from ...codecs.converter import canonical_bytes
from ..log.approvals import ApprovalLedger
from ..model.messages import Text
from .approval_shapes import Approval, ApprovalList, Decide
from .outcomes import outcome_from_log, turn_outcome
from .schemas import TurnOutcome

if TYPE_CHECKING:
    from .service import SessionService


async def pending_list(service: SessionService, session_id: str) -> ApprovalList:
    """The calls of `session_id` waiting for a decision: the live agent's, or those its
    stored log leaves waiting (nothing is resumed to answer)."""
    await service.require(session_id)
    agent = service.runtime.get(session_id)
    if agent is not None:
        pending = agent.pending_approvals()
    else:
        session = await service.session(session_id)
        pending = ApprovalLedger.of_log(session.id, len(session), session.event).pending()
    return ApprovalList(session_id, tuple(Approval.of(item) for item in pending))


def _request_text(call_id: str, body: Decide) -> tuple[Text, ...]:
    """What makes two decision requests "the same" for an idempotency key."""
    value = {"call_id": call_id, **{k: v for k, v in vars_of(body).items() if v is not None}}
    return (Text(canonical_bytes(value).decode()),)


def vars_of(body: Decide) -> dict[str, object]:
    """The body's fields by name."""
    return {
        "decision": body.decision,
        "arguments": body.arguments,
        "reason": body.reason,
        "meta": body.meta,
    }


async def decide(
    service: SessionService, session_id: str, call_id: str, body: Decide, key: str | None
) -> TurnOutcome:
    """Record the decision on `call_id` and run the continuation; its outcome. Under a
    key already seen, the first request's outcome (waiting for it if it still runs)."""
    service.drain.refuse()
    while True:
        agent = await service.live_agent(session_id)
        entry = None
        if key is not None:
            entry, first = service.keys.claim(session_id, key, _request_text(call_id, body))
            if not first:
                outcome = await entry.wait()
                if outcome is None:
                    continue  # the first request decided nothing: this one may
                return outcome
        first_seq = len(agent.session)
        try:
            if body.decision == "approve":
                arguments = None if body.arguments is None else orjson.dumps(body.arguments)
                result = await agent.approve(
                    call_id,
                    None if arguments is None else arguments.decode(),
                    meta=body.meta or {"via": "http"},
                )
            else:
                result = await agent.reject(
                    call_id, body.reason or "rejected", meta=body.meta or {"via": "http"}
                )
        except trio.Cancelled:
            if entry is not None:
                service.keys.settle(
                    entry, outcome_from_log(session_id, agent.session.events_since(first_seq))
                )
            raise
        except BaseException:
            if entry is not None:
                service.keys.forget(entry)
            raise
        outcome = turn_outcome(session_id, result)
        if entry is not None:
            service.keys.settle(entry, outcome)
        return outcome
