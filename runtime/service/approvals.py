"""The service's approvals: the calls a session's turn left waiting (from the live agent, or
from the stored log), and one decision per call, idempotent under an `Idempotency-Key`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson

from ..log.approvals import ApprovalLedger
from .approval_shapes import Approval, ApprovalList, Decide
from .outcomes import turn_outcome
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


async def decide(
    service: SessionService, session_id: str, call_id: str, body: Decide
) -> TurnOutcome:
    """Record the decision on `call_id` and run the continuation; its outcome (a key's
    replay is the handler's, through the store: `DurableKeys.respond`)."""
    service.drain.refuse()
    agent = await service.live_agent(session_id)
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
    return turn_outcome(session_id, result)
