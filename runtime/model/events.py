"""Session events: the envelope, surface ops, and one frozen data class per event type."""

from __future__ import annotations

from typing import Literal, TypeAlias

from attrs import field, frozen

from ...codecs.jsonvalue import FrozenDict, freeze_object
from .approvals import ApprovalDecision, ApprovalRequest
from .budget import BudgetReserve, BudgetSettle
from .chunks import ErrorInfo, StreamChunk, TokenUsage
from .header import EpochHeader, HeaderDelta
from .messages import Content, Source, Text


@frozen
class Append:
    """Surface op: add the event as a new node at the tail."""


@frozen
class Replace:
    """Surface op: swap the inclusive node span `start..end` (seqs) for this event."""

    start: int
    end: int


SurfaceOp: TypeAlias = Append | Replace
APPEND = Append()

TurnEndKind: TypeAlias = Literal[
    "completed",
    "max-tokens",
    "max_steps",
    "rejected",
    "error",
    "aborted",
    "disposed",
    "interrupted",
    "awaiting_approval",
    "budget_exhausted",
]
TriggerKind: TypeAlias = Literal["message", "injection", "compaction", "reconciliation", "approval"]
HeaderReason: TypeAlias = Literal["initial", "resume", "fallback"]


@frozen
class Trigger:
    kind: TriggerKind
    source: Source


@frozen
class TurnEndReason:
    """Why a turn ended: `rejected` carries `reason`; `error` carries step, message, code."""

    kind: TurnEndKind
    reason: str | None = None
    step: int | None = None
    message: str | None = None
    code: str | None = None


@frozen
class TurnStart:
    turn: int
    trigger: Trigger


@frozen
class TurnEnd:
    turn: int
    reason: TurnEndReason


@frozen
class StepStart:
    turn: int
    step: int


@frozen
class StepEnd:
    turn: int
    step: int


@frozen
class UserMessage:
    content: Content
    source: Source


@frozen
class PromptBlocked:
    content: Content
    source: Source
    reason: str


def _optional_meta(value: object) -> FrozenDict | None:
    return None if value is None else freeze_object(value, "$.meta")  # type: ignore[arg-type]


@frozen
class ContextMessage:
    content: Content
    source: Source
    meta: FrozenDict | None = field(default=None, converter=_optional_meta)


@frozen
class SteeringMessage:
    turn: int
    content: Content
    source: Source


@frozen
class AssistantChunk:
    turn: int
    step: int
    chunk: StreamChunk


@frozen
class AssistantMessage:
    turn: int
    step: int
    content: Content
    provider: str
    model: str
    usage: TokenUsage | None = None
    request_digest: str | None = None
    rewritten: bool = False
    """The content is an `agent/step-result` listener's replacement of what the chunks
    (still the provenance) assembled to."""


@frozen
class ToolCallEvent:
    turn: int
    step: int
    call_id: str
    name: str
    arguments: str


@frozen
class ToolError:
    name: str
    code: str


@frozen
class ToolResultEvent:
    turn: int
    step: int
    call_id: str
    content: tuple[Text, ...]
    is_error: bool = False
    error: ToolError | None = None


@frozen
class RequestHeaderEvent:
    header: EpochHeader
    reason: HeaderReason


@frozen
class CompactionStart:
    compaction_id: str
    turn: int


@frozen
class CompactionSummary:
    compaction_id: str
    summary: str
    shadowed_seqs: tuple[int, ...]
    shadowed_token_count: int
    provider: str
    model: str
    max_tokens: int
    usage: TokenUsage | None = None


@frozen
class CompactionEnd:
    compaction_id: str
    turn: int
    error: ErrorInfo | None = None


@frozen
class CompactionPrune:
    shadowed_seqs: tuple[int, ...]
    shadowed_token_count: int


ReconcileAction: TypeAlias = Literal["reconcile", "rerun"]


@frozen
class ToolReconcile:
    """A call left in doubt by a crash is about to be reconciled (its tool's `reconcile`
    asked) or re-run once (an idempotent tool), in a `reconciliation` turn; durable before
    the action starts (docs/spec/session-log.md §10.7)."""

    call_seq: int
    """The seq of the in-doubt call's `tool/call`."""
    call_id: str
    name: str
    action: ReconcileAction


@frozen
class IgnorableData:
    """An event of a type this version does not know, kept verbatim because it was marked
    ignorable by its writer; it takes no part in structure or derivation."""

    payload: FrozenDict


EventData: TypeAlias = (
    TurnStart
    | TurnEnd
    | StepStart
    | StepEnd
    | UserMessage
    | PromptBlocked
    | ContextMessage
    | SteeringMessage
    | AssistantChunk
    | AssistantMessage
    | ToolCallEvent
    | ToolResultEvent
    | RequestHeaderEvent
    | HeaderDelta
    | CompactionStart
    | CompactionSummary
    | CompactionEnd
    | CompactionPrune
    | ToolReconcile
    | ApprovalRequest
    | ApprovalDecision
    | BudgetReserve
    | BudgetSettle
    | IgnorableData
)

DATA_BY_TYPE: dict[str, type] = {
    "turn/start": TurnStart,
    "turn/end": TurnEnd,
    "step/start": StepStart,
    "step/end": StepEnd,
    "user/message": UserMessage,
    "prompt/blocked": PromptBlocked,
    "context/message": ContextMessage,
    "steering/message": SteeringMessage,
    "assistant/chunk": AssistantChunk,
    "assistant/message": AssistantMessage,
    "tool/call": ToolCallEvent,
    "tool/result": ToolResultEvent,
    "request/header": RequestHeaderEvent,
    "request/header-delta": HeaderDelta,
    "compaction/start": CompactionStart,
    "compaction/summary": CompactionSummary,
    "compaction/end": CompactionEnd,
    "compaction/prune": CompactionPrune,
    "tool/reconcile": ToolReconcile,
    "approval/request": ApprovalRequest,
    "approval/decision": ApprovalDecision,
    "budget/reserve": BudgetReserve,
    "budget/settle": BudgetSettle,
}
TYPE_BY_DATA: dict[type, str] = {cls: name for name, cls in DATA_BY_TYPE.items()}

SURFACE_TYPES = frozenset(
    {"user/message", "context/message", "steering/message", "assistant/message", "tool/result"}
)


@frozen
class SessionEvent:
    """One log entry. `seq` equals its index; `time` is epoch milliseconds."""

    type: str
    seq: int
    time: int
    data: EventData
    source_event_seqs: tuple[int, ...] | None = None
    surface_op: SurfaceOp | None = None
    ignorable: bool = False
