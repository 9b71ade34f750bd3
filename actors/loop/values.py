"""What the loop's phases pass between them: the queued item, the open turn and step, the
step transitions, and the seams and constants a loop instance is built with."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, TypeAlias

import attrs
import trio
from attrs import define, field, frozen

from ...runtime.control.options import AgentOptions, Tool
from ...runtime.model.approvals import ApprovalDecision
from ...runtime.model.events import SessionEvent, TurnEndReason
from ...runtime.model.hook_values import ContextItem, ToolOutcome, TurnResult
from ...runtime.model.messages import Content, Source, ToolCall

Persist = Callable[[str, Sequence[SessionEvent]], Awaitable[None]]
PersistNow = Callable[[str, Sequence[SessionEvent]], bool]
"""`CodecActor.persist_now`: the barrier written by its caller (True), or nothing done (False:
await the `Persist`)."""
ItemKind = Literal["message", "injection", "compaction", "reconciliation", "approval"]
SessionStartKind = Literal["startup", "resume", "fork"]

CALLER_CANCELLED = "caller cancelled"
"""The cancel reason of a turn whose caller (the task awaiting its send) was cancelled."""

POST_STEP_GRACE = 5.0
"""Seconds `agent/post-step` listeners get in the shielded close of a cancelled turn."""

RECONFIGURABLE = frozenset(
    name
    for name in attrs.fields_dict(AgentOptions)
    if name not in ("provider", "labels", "inbox_capacity", "budget")
)
"""What `reconfigure()` may change: the provider, labels, inbox and budget are fixed per
instance."""


@define
class TurnItem:
    """One queued unit of work: one item = one turn."""

    kind: ItemKind
    content: Content
    source: Source
    meta: Any = None
    done: trio.Event = field(factory=trio.Event)
    result: TurnResult | None = None
    turn: int | None = None
    """The number of the turn it started (None while queued)."""

    def resolve(self, result: TurnResult) -> None:
        if self.result is None:
            self.result = result
            self.done.set()


@define
class OpenStep:
    """The open step: what the cleanup after a cancel or an error needs to know about it.

    Invariant: every call id in `answered` has a logged `tool/result`; `started` and
    `finished` only name calls in `logged_calls`.
    """

    turn: int
    number: int
    tools: Mapping[str, Tool]
    """The tools assembled for this step (what its calls run)."""
    max_parallel: int
    """`max_parallel_tool_calls` as the step began (a reconfigure applies from the next)."""
    requested: tuple[ToolCall, ...] = ()
    logged_calls: dict[str, int] = field(factory=dict)
    """call id -> seq of its `tool/call` event."""
    answered: set[str] = field(factory=set)
    started: set[str] = field(factory=set)
    finished: dict[str, ToolOutcome] = field(factory=dict)
    """Real outcomes of calls that ran to the end or were denied (a cancel still logs
    these)."""
    post_step_done: bool = False
    decided: dict[str, ApprovalDecision] = field(factory=dict)
    """The decisions of calls this step runs or rejects without asking again."""
    parked: list[str] = field(factory=list)
    """The calls of this step that wait for a decision (no result until then)."""


@define
class OpenTurn:
    """The turn in progress, from taking its item until its `turn/end` is appended.

    Invariants: `scope` is the one cancel scope every seam of the turn runs in; once
    `retired` is set (just before `turn/end`) no cancel reaches the turn any more; `step`
    is not None exactly while a step is open; `tool_batch` is not None from the
    tool-requesting `assistant/message` until the batch's last `tool/result`, and holds the
    contexts that must wait for it.
    """

    item: TurnItem
    number: int
    first_seq: int
    """Seq of the turn's `turn/start`."""
    scope: trio.CancelScope = field(factory=trio.CancelScope)
    cancel_reason: str | None = None
    retired: bool = False
    step: OpenStep | None = None
    steps: int = 0
    """Number of the latest step started (0 before the first)."""
    called_tools: bool = False
    """A step of this turn asked for tool calls (what `reset_tool_choice` waits for)."""
    tool_batch: list[ContextItem] | None = None
    overflow_retries: int = 0
    ended_step: OpenStep | None = None
    """The latest step closed with `step/end` (its post-step may still be owed)."""


@frozen
class NextStep:
    """Step transition: the turn goes on with another step."""


@frozen
class EndTurn:
    """Step transition: the turn ends with `reason`."""

    reason: TurnEndReason


StepOutcome: TypeAlias = NextStep | EndTurn


class TurnRejected(Exception):
    """Raised inside a turn that ends before its first step (`prompt/submit` blocked it)."""

    def __init__(self, reason: TurnEndReason) -> None:
        self.reason = reason


@frozen
class QueuedDecision:
    """A decision on its way to the log (the meta of an `approval` item, or the rejections
    a `send(reject_pending=True)` records first). `record` is False for a decision already
    logged whose call a crash left without a result (the resumed run)."""

    call_id: str
    decision: Literal["approve", "reject"]
    arguments: str | None = None
    reason: str | None = None
    meta: Any = None
    record: bool = True
