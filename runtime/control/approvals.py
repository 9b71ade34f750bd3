"""What a caller's decision carries, checked before it is queued (edited arguments as the
JSON object text the call runs with), and the signal a tool gives when its work waits for
decisions in a subagent (`DeferredApprovals`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson

from ...codecs.jsonvalue import freeze_json, thaw_json
from ..model.approvals import PendingApproval
from .options import ToolOutput


def decision_arguments(arguments: str | Mapping[str, Any] | None) -> str | None:
    """Edited arguments as JSON object text (None: the call runs as the model asked).
    A mapping is encoded; a str must already be a JSON object (TypeError/ValueError)."""
    if arguments is None:
        return None
    if isinstance(arguments, str):
        try:
            value = orjson.loads(arguments)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"edited arguments are not valid JSON: {exc}") from None
        if not isinstance(value, dict):
            raise ValueError("edited arguments must be a JSON object")
        return arguments
    if not isinstance(arguments, Mapping):
        raise TypeError(f"arguments must be a JSON object text or a mapping, got {arguments!r}")
    frozen = freeze_json(dict(arguments), "$.arguments")
    return orjson.dumps(thaw_json(frozen)).decode()


Forwarder = Callable[[str, str, str | None, str | None, Any], Awaitable[ToolOutput]]
"""`async forward(call_id, decision, arguments, reason, meta)`: a decision taken through a
parent, made in the subagent; the delegation's output once the subagent answers (raises
DeferredApprovals when the subagent waits again)."""


class DeferredApprovals(Exception):
    """Raised by a tool (the subagent tool) whose work waits for decisions elsewhere: the
    call parks with these `pending` calls, decided through this agent by `forward`."""

    def __init__(self, pending: tuple[PendingApproval, ...], forward: Forwarder) -> None:
        super().__init__(f"{len(pending)} call(s) wait for a decision in a subagent")
        self.pending = pending
        self.forward = forward
