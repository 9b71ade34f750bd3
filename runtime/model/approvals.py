"""Approvals: the `approval/request` and `approval/decision` event data, the pending call a
caller decides on, and the answers a `tools/approval` listener may give (docs/approvals.md)."""

from __future__ import annotations

from typing import Literal, TypeAlias

from attrs import field, frozen

from ...codecs.jsonvalue import FrozenDict, freeze_object

DecisionKind: TypeAlias = Literal["approve", "reject"]


def _optional_meta(value: object) -> FrozenDict | None:
    return None if value is None else freeze_object(value, "$.meta")  # type: ignore[arg-type]


@frozen
class ApprovalRequest:
    """`approval/request`: the model asked for a call that needs a decision; `arguments`
    are the call's arguments as the model gave them (what was asked)."""

    turn: int
    step: int
    call_id: str
    tool: str
    arguments: str
    session_id: str | None = None
    """The subagent session the call waits in (None: this session's own call)."""
    via_call: str | None = None
    """For a subagent's call: this session's call (the delegation) that waits on it."""
    via_tool: str | None = None
    via_arguments: str | None = None


@frozen
class ApprovalDecision:
    """`approval/decision`: the one decision on a requested call. `arguments` are the
    edited arguments an approval ran the call with (None: the original ones); `reason` is
    a rejection's; `meta` says who decided and why."""

    turn: int
    step: int
    call_id: str
    decision: DecisionKind
    arguments: str | None = None
    reason: str | None = None
    meta: FrozenDict | None = field(default=None, converter=_optional_meta)


@frozen
class PendingApproval:
    """A call waiting for a decision: its id, tool, arguments (JSON text, as the model
    gave them) and the session it waits in (a subagent's, when it surfaced from one)."""

    call_id: str
    tool: str
    arguments: str
    session_id: str


@frozen
class Approve:
    """A `tools/approval` answer: run the call now (with `arguments`, JSON text, if given)."""

    arguments: str | None = None
    meta: FrozenDict | None = field(default=None, converter=_optional_meta)


@frozen
class Reject:
    """A `tools/approval` answer: record the rejection as the call's result."""

    reason: str = "rejected"
    meta: FrozenDict | None = field(default=None, converter=_optional_meta)
