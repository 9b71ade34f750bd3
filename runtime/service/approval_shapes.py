"""The approval routes' shapes: the decision body of `POST /v1/sessions/{id}/approvals/
{call_id}`, the pending list of `GET /v1/sessions/{id}/approvals`, and their JSON Schemas."""

from __future__ import annotations

from typing import Any, Literal

from attrs import frozen

from ..model.approvals import PendingApproval
from .schemas import JsonObject, object_schema


@frozen
class Decide:
    """`POST /v1/sessions/{id}/approvals/{call_id}`: approve (with edited `arguments`, a
    JSON object, if given) or reject (with `reason`) one waiting call."""

    decision: Literal["approve", "reject"]
    arguments: dict[str, Any] | None = None
    reason: str | None = None
    meta: dict[str, Any] | None = None


DECIDE_SCHEMA = object_schema(
    {
        "decision": {"enum": ["approve", "reject"]},
        "arguments": {"type": "object", "description": "Edited arguments (approve only)."},
        "reason": {"type": "string", "maxLength": 2000},
        "meta": {"type": "object", "description": "Who decided and why (logged)."},
    },
    ("decision",),
)


@frozen
class Approval:
    """One call waiting for a decision."""

    call_id: str
    tool: str
    arguments: str
    session_id: str

    @classmethod
    def of(cls, pending: PendingApproval) -> Approval:
        """The shape of a `PendingApproval`."""
        return cls(pending.call_id, pending.tool, pending.arguments, pending.session_id)


APPROVAL_SCHEMA: JsonObject = object_schema(
    {
        "call_id": {"type": "string"},
        "tool": {"type": "string"},
        "arguments": {"type": "string", "description": "The call's arguments, JSON text."},
        "session_id": {"type": "string"},
    },
    ("call_id", "tool", "arguments", "session_id"),
)


@frozen
class ApprovalList:
    """`GET /v1/sessions/{id}/approvals`: the calls waiting for a decision, in order."""

    id: str
    pending: tuple[Approval, ...]


APPROVAL_LIST_SCHEMA = object_schema(
    {"id": {"type": "string"}, "pending": {"type": "array", "items": APPROVAL_SCHEMA}},
    ("id", "pending"),
)
