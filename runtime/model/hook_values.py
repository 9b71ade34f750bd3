"""The values that flow through the loop's hook seams, and the decisions listeners return."""

from __future__ import annotations

from typing import Literal, TypeAlias

from attrs import field, frozen

from ...codecs.jsonvalue import FrozenDict
from ..errors import TurnFailed
from .approvals import PendingApproval
from .chunks import ErrorInfo, TokenUsage
from .events import ToolError
from .messages import Content, Message, Source, Text

HOOK_SOURCE = Source("plugin", "hook")


@frozen
class ContextItem:
    """Extra context a listener asks the loop to log as a `context/message`."""

    content: Content | str
    source: Source = HOOK_SOURCE
    meta: FrozenDict | None = None


AdditionalContext: TypeAlias = tuple[ContextItem | str, ...]


@frozen
class PromptSubmit:
    """`prompt/submit` input: what is about to become the turn's `user/message`."""

    turn: int
    content: Content
    source: Source


@frozen
class Allow:
    """`prompt/submit` decision: log the prompt (rewritten to `content` if given), then each
    of `additional_context` as a `context/message` after it."""

    content: Content | None = None
    additional_context: AdditionalContext = ()


@frozen
class Block:
    """`prompt/submit` decision: refuse the prompt; the turn ends `rejected{reason}`."""

    reason: str


@frozen
class PreStep:
    """`agent/pre-step` value: the step about to run, with the live system prompt and the
    frozen session prefix its request will carry."""

    turn: int
    step: int
    full_system_prompt: str
    session_prefix: tuple[Message, ...]


@frozen
class PostStep:
    """`agent/post-step` value: the step that just ended. `cancelled`: a cancel ended it
    (the listeners then run in the turn's shielded close, briefly, as they also do when an
    error ended the step)."""

    turn: int
    step: int
    cancelled: bool = False


@frozen
class TurnStop:
    """`agent/turn-stop` value: asked after every step that ran to its end (before
    `agent/turn-continuation`); a listener that returns anything but None stops the turn
    there, `completed` (pending steering is discarded)."""

    turn: int
    step: int


InboxEventKind: TypeAlias = Literal["enqueue", "dequeue", "discard"]


@frozen
class InboxEvent:
    """`agent/inbox` value: an item entered the inbox, was taken by the loop, or was
    discarded unrun (cancel, dispose, its caller cancelled); `queued` is how many items
    are in the inbox after the change."""

    kind: InboxEventKind
    item: Literal["message", "injection", "compaction", "reconciliation", "approval"]
    source: Source
    queued: int


@frozen
class ToolCallInfo:
    """`tools/pre-execute` input: one requested call, before it is logged or run."""

    turn: int
    step: int
    call_id: str
    name: str
    arguments: str


@frozen
class Deny:
    """`tools/pre-execute` decision: do not run the call; its result is an error
    `TOOL_DENIED` with `reason`."""

    reason: str


@frozen
class ToolOutcome:
    """`tools/post-execute` value: a listener may rewrite content or add context."""

    turn: int
    step: int
    call_id: str
    name: str
    arguments: str
    content: tuple[Text, ...]
    is_error: bool = False
    error: ToolError | None = None
    additional_context: AdditionalContext = ()


@frozen
class Continuation:
    """`agent/turn-continuation` value. `continue_turn` with a `reason` becomes steering."""

    turn: int
    step: int
    had_tool_calls: bool
    steering_pending: bool
    continue_turn: bool
    reason: str | None = None


@frozen
class RequestFailure:
    """`agent/request-error` value; a listener returns it with `retry=True` to retry."""

    turn: int
    step: int
    error: ErrorInfo
    attempt: int
    retry: bool = False


TurnResultReason: TypeAlias = Literal[
    "completed",
    "max-tokens",
    "max_steps",
    "rejected",
    "error",
    "aborted",
    "disposed",
    "discarded",
    "awaiting_approval",
    "budget_exhausted",
]


@frozen
class TurnResult:
    """What `send()` and `compact()` return once their turn has ended.

    `turn` is None when the item was discarded before its turn started. `message` says
    why an `error`/`rejected`/`aborted` turn ended (with `code` for errors). `reply` is the
    turn's last assistant message with content, `usage` the tokens of every model call
    the turn made (its steps and any summarizer call), `steps` how many steps ran.
    """

    turn: int | None
    reason: TurnResultReason
    message: str | None = None
    reply: Message | None = None
    usage: TokenUsage = field(factory=TokenUsage)
    steps: int = 0
    code: str | None = None
    pending: tuple[PendingApproval, ...] = ()
    """The calls waiting for a decision when the turn ended `awaiting_approval`."""

    @property
    def text(self) -> str:
        """The text of `reply` ("" when there is none)."""
        return self.reply.text if self.reply is not None else ""

    def raise_for_error(self) -> TurnResult:
        """Raise `TurnFailed` for an `error` turn; otherwise return this result."""
        if self.reason == "error":
            raise TurnFailed(self)
        return self
