"""`LoopActor`: one loop instance over one session — turns, steps, the session prefix seam,
header recording, streaming, tools and cancellation, in the order of docs/spec/loop.md §3–§4."""

from __future__ import annotations

import logging
import math
import operator
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import Any, Literal, Protocol, TypeAlias, get_args

import attrs
import orjson
import trio
from attrs import define, evolve, field, frozen

from ..codecs.converter import structure_as, unstructure
from ..codecs.jsonvalue import freeze_json, freeze_object
from ..runtime.control.handle import Agent, AgentStatus
from ..runtime.control.hooks import (
    HookRegistry,
    listeners_for,
    run_notify,
    run_serial,
    run_until_answer,
    run_waterfall,
)
from ..runtime.control.options import AgentOptions, Tool, ToolContext
from ..runtime.errors import (
    ActorStopped,
    AgentClosed,
    ErrorCode,
    HookError,
    InboxFull,
    JsonValueError,
    ProviderError,
    SessionValidationError,
    sole_error,
)
from ..runtime.log.header_algebra import canonical, diff, headers_equal, order_tools
from ..runtime.log.request import Request, request_digest
from ..runtime.log.session import Session
from ..runtime.log.surface import chain_of
from ..runtime.log.tokens import TokenMeter
from ..runtime.log.usage import usage_of
from ..runtime.model.chunks import ChunkAssembler, ErrorInfo, StreamChunk
from ..runtime.model.events import (
    APPEND,
    AssistantChunk,
    AssistantMessage,
    ContextMessage,
    PromptBlocked,
    RequestHeaderEvent,
    SessionEvent,
    SteeringMessage,
    StepEnd,
    StepStart,
    SurfaceOp,
    ToolCallEvent,
    ToolError,
    ToolResultEvent,
    Trigger,
    TurnEnd,
    TurnEndReason,
    TurnStart,
    UserMessage,
)
from ..runtime.model.header import EpochHeader, LlmCallConfig, ToolSchema
from ..runtime.model.hook_values import (
    Allow,
    Block,
    ContextItem,
    Continuation,
    Deny,
    InboxEvent,
    InboxEventKind,
    PostStep,
    PreStep,
    PromptSubmit,
    RequestFailure,
    ToolCallInfo,
    ToolOutcome,
    TurnResult,
    TurnStop,
)
from ..runtime.model.messages import (
    Content,
    Message,
    Reasoning,
    Source,
    Text,
    ToolCall,
    as_message_tuple,
)
from ..runtime.providers.base import Provider, opened_stream
from .kernel import ActorRef, Mailbox

log = logging.getLogger("actorloop.loop")

Persist = Callable[[str, Sequence[SessionEvent]], Awaitable[None]]
ItemKind = Literal["message", "injection", "compaction"]
SessionStartKind = Literal["startup", "resume", "fork"]

CALLER_CANCELLED = "caller cancelled"
"""The cancel reason of a turn whose caller (the task awaiting its send) was cancelled."""

POST_STEP_GRACE = 5.0
"""Seconds `agent/post-step` listeners get in the shielded close of a cancelled turn."""

CHUNK_TYPES = frozenset(get_args(StreamChunk))

RECONFIGURABLE = frozenset(
    name
    for name in attrs.fields_dict(AgentOptions)
    if name not in ("provider", "labels", "inbox_capacity")
)
"""What `reconfigure()` may change: the provider, labels and inbox are fixed per instance."""


class Compactor(Protocol):
    """The compaction gate the loop consults at `agent/pre-step` (and on overflow)."""

    async def compact_if_needed(
        self,
        loop: LoopActor,
        full_system_prompt: str,
        session_prefix: tuple[Message, ...],
        cancel: trio.CancelScope,
    ) -> None: ...

    async def compact_now(
        self,
        loop: LoopActor,
        full_system_prompt: str,
        session_prefix: tuple[Message, ...],
        cancel: trio.CancelScope,
        *,
        retain_zero: bool = False,
    ) -> bool: ...


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
class _Step:
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


@define
class _Turn:
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
    step: _Step | None = None
    steps: int = 0
    """Number of the latest step started (0 before the first)."""
    tool_batch: list[ContextItem] | None = None
    overflow_retries: int = 0
    ended_step: _Step | None = None
    """The latest step closed with `step/end` (its post-step may still be owed)."""


@frozen
class NextStep:
    """Step transition: the turn goes on with another step."""


@frozen
class EndTurn:
    """Step transition: the turn ends with `reason`."""

    reason: TurnEndReason


StepOutcome: TypeAlias = NextStep | EndTurn


class _TurnRejected(Exception):
    def __init__(self, reason: TurnEndReason) -> None:
        self.reason = reason


def _render_system(base: str | None, sections: object) -> str:
    if not isinstance(sections, tuple) or not all(isinstance(s, str) for s in sections):
        raise TypeError("system-prompt/assemble listeners must return a tuple of str")
    return "\n\n".join(part for part in (base or "", *sections) if part)


def _error_outcome(info: ToolCallInfo, code: ErrorCode, message: str) -> ToolOutcome:
    """An error result for a call that produced no real one (denied, failed, cancelled)."""
    return ToolOutcome(
        info.turn,
        info.step,
        info.call_id,
        info.name,
        info.arguments,
        (Text(message),),
        True,
        ToolError(info.name, code),
    )


def _tool_text(output: object) -> tuple[Text, ...] | None:
    """A tool's output as result blocks (a str, or a tuple of Text with str text whose
    values the log can hold), or None when it is anything else."""
    if isinstance(output, str):
        blocks: tuple[Text, ...] = (Text(output),)
    elif isinstance(output, (tuple, list)) and all(
        type(block) is Text and type(block.text) is str for block in output
    ):
        blocks = tuple(output)
    else:
        return None
    try:
        freeze_json([block.text for block in blocks], "$.output")
    except JsonValueError:
        return None
    return blocks


def _describe(value: object) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:80]}{'...' if len(text) > 80 else ''}"


def _same_call(info: ToolCallInfo, call_id: str, name: str, hook: str) -> None:
    if (call_id, name) != (info.call_id, info.name):
        raise HookError(
            f"a {hook} listener changed call {info.call_id!r} ({info.name}) into "
            f"{call_id!r} ({name}); a call keeps the id and name the model gave it"
        )


def _checked_outcome(outcome: object, info: ToolCallInfo, hook: str) -> ToolOutcome:
    if not isinstance(outcome, ToolOutcome):
        raise HookError(f"{hook} must return a ToolOutcome, got {_describe(outcome)}")
    _same_call(info, outcome.call_id, outcome.name, hook)
    if _tool_text(outcome.content) is None:
        raise HookError(f"{hook} returned content that is not a tuple of Text with str text")
    return outcome


def _checked_reply(reply: object, *, allow_tool_calls: bool) -> Content:
    """The content of an `agent/step-result` answer: an assistant Message of text,
    reasoning and (unless the answer was cut at max-tokens) tool-call blocks."""
    if not isinstance(reply, Message) or reply.role != "assistant":
        raise HookError(
            f"agent/step-result must return an assistant Message, got {_describe(reply)}"
        )
    allowed = (Text, Reasoning, ToolCall) if allow_tool_calls else (Text, Reasoning)
    for block in reply.content:
        if type(block) not in allowed:
            raise HookError(
                f"agent/step-result returned a {type(block).__name__} block; an assistant "
                f"message holds {', '.join(kind.__name__ for kind in allowed)} blocks"
            )
    return reply.content


def _duplicate_call_ids(content: Content) -> ErrorInfo | None:
    ids = [block.id for block in content if isinstance(block, ToolCall)]
    repeated = sorted({call_id for call_id in ids if ids.count(call_id) > 1})
    if not repeated:
        return None
    return ErrorInfo(
        f"the model asked for several tool calls with the same id {repeated}; "
        "no call can be paired with its result",
        ErrorCode.DUPLICATE_TOOL_CALL_ID,
    )


def _ordered_tools(tools: Sequence[Tool], tool_order: Sequence[str] | None) -> tuple[Tool, ...]:
    """The options' tools in their configured order (`tool_order` first, then by name)."""
    by_name = {tool.name: tool for tool in tools}
    return tuple(
        by_name[schema.name] for schema in order_tools((t.schema for t in tools), tool_order)
    )


def _checked_tools(value: object) -> tuple[Tool, ...]:
    if not isinstance(value, (tuple, list)) or not all(isinstance(t, Tool) for t in value):
        raise HookError(f"tools/assemble must return a tuple of Tool, got {_describe(value)}")
    names = [tool.name for tool in value]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise HookError(f"tools/assemble returned several tools named {repeated}")
    return tuple(value)


def _tool_groups(
    calls: Sequence[ToolCall], tools: Mapping[str, Tool]
) -> list[list[tuple[int, ToolCall]]]:
    """The calls in model order, cut into groups: a run of non-exclusive calls is one
    group (a pool), an exclusive call a group of its own (a barrier)."""
    groups: list[list[tuple[int, ToolCall]]] = []
    pooled = False
    for index, call in enumerate(calls):
        tool = tools.get(call.name)
        exclusive = tool is not None and tool.exclusive
        if exclusive or not pooled:
            groups.append([])
        groups[-1].append((index, call))
        pooled = not exclusive
    return groups


class _ResultsInOrder:
    """Appends a step's tool results in model order as their outcomes come in (a pool
    finishes in any order), and queues their post-execute contexts in the same order."""

    def __init__(self, loop: LoopActor, turn: _Turn, step: _Step) -> None:
        self._loop = loop
        self._turn = turn
        self._step = step
        self._next = 0
        self._ready: dict[int, ToolOutcome] = {}

    def ready(self, index: int, outcome: ToolOutcome) -> None:
        self._ready[index] = outcome
        while self._next in self._ready:
            outcome = self._ready.pop(self._next)
            self._loop._log_result(self._step, outcome)
            assert self._turn.tool_batch is not None
            self._turn.tool_batch.extend(
                item if isinstance(item, ContextItem) else ContextItem((Text(item),))
                for item in outcome.additional_context
            )
            self._next += 1


class LoopActor:
    """The only writer of its session. Its inbox is a bounded kernel mailbox of turn items."""

    # Slots: thousands of idle agents each hold one; a per-instance dict costs ~1.3 KiB.
    __slots__ = (
        "_appended",
        "_closed",
        "_compactor",
        "_configured_tools",
        "_disposing",
        "_ended",
        "_ended_event",
        "_flush_lock",
        "_global_hooks",
        "_idle_event",
        "_mailbox",
        "_meter",
        "_on_finished",
        "_outstanding",
        "_owned",
        "_persist",
        "_persisted",
        "_prefix_chain",
        "_seed_from_options",
        "_steering",
        "_turn",
        "agent",
        "current_tools",
        "failure",
        "logged_header",
        "options",
        "origin",
        "provider",
        "session",
        "session_prefix",
        "status",
    )

    def __init__(
        self,
        *,
        session: Session,
        options: AgentOptions,
        provider: Provider,
        global_hooks: HookRegistry,
        persist: Persist,
        compactor: Compactor | None,
        origin: SessionStartKind,
        on_finished: Callable[[LoopActor], None] = lambda _loop: None,
    ) -> None:
        self.session = session
        self.options = options
        self.provider = provider
        self.origin = origin
        self._global_hooks = global_hooks
        self._persist = persist
        self._compactor = compactor
        self._on_finished = on_finished
        self.agent = Agent(session, self)
        self.status: AgentStatus = "idle"
        self.current_tools: tuple[ToolSchema, ...] = ()
        self._configured_tools: tuple[AgentOptions, tuple[Tool, ...]] | None = None
        """The options' tools in their configured order, for the options they came from."""
        self.session_prefix: tuple[Message, ...] | None = None
        """Composed once per instance before its first pre-step; None until then."""
        self._prefix_chain = b""
        self.logged_header = False
        """Whether this instance wrote its anchoring `request/header` snapshot."""
        self._seed_from_options = True
        """The next request's config starts from the options (this instance's first
        request, or after `reconfigure` changed a call setting), else from the header."""
        self._flush_lock: trio.Lock | None = None
        """Serializes hand-offs to the codec; made by the first flush."""
        self._persisted = len(session)
        # The mailbox is the kernel's: the supervisor hands it to `run` and the runtime
        # attaches the ref (send, withdraw, stop) right after spawning.
        self._mailbox: ActorRef[TurnItem] | None = None
        self._steering: list[tuple[Content, Source]] = []
        self._turn: _Turn | None = None
        self._disposing = False
        self._closed = False
        self._outstanding = 0
        """Items sent and not yet ended (running, queued, or handed over)."""
        # An idle agent holds no events: each is made by the first task that waits for
        # what it signals, and dropped once set.
        self._idle_event: trio.Event | None = None
        """Set when the agent next becomes idle; exists only while someone waits."""
        self._ended = False
        """The actor's body has returned (the loop takes no more work)."""
        self._ended_event: trio.Event | None = None
        """Set when `_ended` becomes true; exists only while someone waits."""
        self._appended: trio.lowlevel.ParkingLot | None = None
        """Readers of `events()` waiting for the next append (or the end of the loop);
        created by the first reader that waits, so an agent nobody reads holds none."""
        self.failure: BaseException | None = None
        self._owned: set[trio.CancelScope] | None = None
        """Background work owned with `own()`; created on first use."""
        self._meter: TokenMeter | None = None

    # ------------------------------------------------------------------ public surface

    @property
    def meter(self) -> TokenMeter:
        """The session's request-size estimate, made on first use (the compaction gate's
        first check): an agent that never steps holds none."""
        if self._meter is None:
            self._meter = TokenMeter(self.session)
        return self._meter

    async def send(self, content: Content, source: Source) -> TurnResult:
        return await self._submit(TurnItem("message", content, source))

    def steer(self, content: Content, source: Source) -> None:
        self._refuse_if_closed()
        if self._cancellable_turn() is not None:
            self._steering.append((content, source))
        else:
            self._enqueue_nowait(TurnItem("message", content, source))

    def inject(self, content: Content, source: Source, meta: Mapping[str, Any] | None) -> None:
        item = self._context_now(content, source, meta)
        if item is not None:
            self._enqueue_nowait(item)

    async def deliver(
        self, content: Content, source: Source, meta: Mapping[str, Any] | None
    ) -> None:
        """`inject`, but waiting while the inbox is full instead of raising InboxFull."""
        item = self._context_now(content, source, meta)
        if item is None:
            return
        mailbox = self._require_mailbox()
        self._work_added()
        try:
            await mailbox.tell(item)
        except ActorStopped as exc:
            self._work_done()
            raise AgentClosed(f"agent {self.session.id!r} is {self.status}") from exc
        except BaseException:
            self._work_done()
            raise
        self._inbox_event("enqueue", item)

    def _context_now(
        self, content: Content, source: Source, meta: Mapping[str, Any] | None
    ) -> TurnItem | None:
        """Log context into the open turn (or its tool batch); else the injection item that
        must be queued for a one-shot turn."""
        self._refuse_if_closed()
        frozen_meta = None if meta is None else freeze_object(meta, "$.meta")
        freeze_json(unstructure(content), "$.content")
        turn = self._turn
        if turn is None or self.session.open_turn is None:
            return TurnItem("injection", content, source, frozen_meta)
        context = ContextItem(content, source, frozen_meta)
        if turn.tool_batch is not None:
            turn.tool_batch.append(context)
        else:
            self._append_context(context)
        return None

    def own(self, scope: trio.CancelScope) -> Callable[[], None]:
        """Make background work (e.g. a subagent) part of this agent's work: while it runs
        the agent is `running` and `wait_idle()` waits; `cancel()` without `keep_inbox`
        and `dispose()` cancel it. Returns the release callable (call it when it ends)."""
        if self._closed:
            scope.cancel()
        self._work_added(owned=scope)

        def release() -> None:
            if self._owned is not None and scope in self._owned:
                self._owned.discard(scope)
                self._work_changed()

        return release

    def _cancel_owned(self) -> None:
        for scope in tuple(self._owned or ()):
            scope.cancel()

    def cancel(self, reason: str | None, keep_inbox: bool) -> None:
        if not keep_inbox:
            self._discard_queued()
            self._cancel_owned()
        turn = self._cancellable_turn()
        if turn is not None:
            if turn.cancel_reason is None:
                turn.cancel_reason = reason
            turn.scope.cancel()

    async def dispose(self) -> None:
        if not self._closed:
            self._closed = True
            self._disposing = True
            self._refresh_status()
            self._discard_queued()
            self._cancel_owned()
            turn = self._cancellable_turn()
            if turn is not None:
                turn.scope.cancel()
            if self._mailbox is not None:
                await self._mailbox.stop()
        if self._ended:
            await trio.lowlevel.checkpoint()
        else:
            if self._ended_event is None:
                self._ended_event = trio.Event()
            await self._ended_event.wait()
        # Owned background work was cancelled above; it ends (and records its own end)
        # before dispose returns.
        await self.wait_idle()

    async def wait_idle(self) -> None:
        """Return once no turn is running, nothing is queued and no owned background work
        (background subagents) runs."""
        while self._busy():
            if self._idle_event is None:
                self._idle_event = trio.Event()
            await self._idle_event.wait()

    async def compact(self) -> TurnResult:
        return await self._submit(TurnItem("compaction", (), Source.of_plugin("compaction")))

    def reconfigure(self, changes: Mapping[str, Any]) -> AgentOptions:
        """New options from the next step on (the running step keeps what it assembled);
        a change of the system prompt, tools or call settings reaches the header as a
        delta (or a fallback snapshot) on the next request."""
        self._refuse_if_closed()
        unknown = sorted(set(changes) - set(attrs.fields_dict(AgentOptions)))
        if unknown:
            raise TypeError(f"reconfigure got unknown options {unknown}")
        fixed = sorted(set(changes) - RECONFIGURABLE)
        if fixed:
            raise ValueError(
                f"reconfigure cannot change {fixed}: the provider, labels and inbox capacity "
                "are fixed for a loop instance (resume it with other options instead)"
            )
        options = attrs.evolve(self.options, **changes)
        if options.call_config() != self.options.call_config():
            self._seed_from_options = True
        self.options = options
        return options

    def _cancellable_turn(self) -> _Turn | None:
        turn = self._turn
        return turn if turn is not None and not turn.retired else None

    # ------------------------------------------------------------------ hooks and seams

    def _chain(self, name: str) -> tuple[Any, ...]:
        return listeners_for(name, self._global_hooks, self.agent.hooks)

    async def _seam(self, name: str, value: Any) -> Any:
        """Run the waterfall `name`, then stop here if the turn was cancelled: a listener
        may cancel and return normally, and what it returned must then be dropped."""
        result = await run_waterfall(name, self._chain(name), self.agent, value)
        await trio.lowlevel.checkpoint_if_cancelled()
        return result

    async def _serial_seam(self, name: str, value: Any) -> None:
        """Run the serial event `name`, then stop here if the turn was cancelled."""
        await run_serial(self._chain(name), self.agent, value)
        await trio.lowlevel.checkpoint_if_cancelled()

    async def _observers_may_have_cancelled(self) -> None:
        """`session/event` observers run synchronously inside an append and cannot stop
        the loop there; one that cancelled is honoured here, before the next action."""
        await trio.lowlevel.checkpoint_if_cancelled()

    def notify(self, name: str, value: Any) -> None:
        chain = self._chain(name)
        if chain:
            run_notify(name, chain, self.agent, value)

    def _inbox_event(self, kind: InboxEventKind, item: TurnItem, queued: int | None = None) -> None:
        if self._chain("agent/inbox"):
            if queued is None:
                queued = self._mailbox.queued if self._mailbox is not None else 0
            self.notify("agent/inbox", InboxEvent(kind, item.kind, item.source, queued))

    def _refresh_status(self) -> None:
        """The one place the status changes: it is derived from the actor's state, and
        `agent/status` is notified when the derived value differs from the last one."""
        status: AgentStatus
        if self.failure is not None:
            status = "failed"
        elif self._closed:
            status = "disposed"
        elif self._busy():
            status = "running"
        else:
            status = "idle"
        if status != self.status:
            self.status = status
            self.notify("agent/status", status)

    # ------------------------------------------------------------------ inbox

    def _refuse_if_closed(self) -> None:
        if self._closed:
            raise AgentClosed(f"agent {self.session.id!r} is {self.status}; it takes no more work")

    def attach(self, mailbox: ActorRef[TurnItem]) -> None:
        """Wire the kernel mailbox the supervisor created for this actor."""
        self._mailbox = mailbox

    def _require_mailbox(self) -> ActorRef[TurnItem]:
        if self._mailbox is None:
            raise AgentClosed(f"agent {self.session.id!r} was never started")
        return self._mailbox

    async def _submit(self, item: TurnItem) -> TurnResult:
        self._refuse_if_closed()
        mailbox = self._require_mailbox()
        self._work_added()
        try:
            await mailbox.tell(item)
        except ActorStopped as exc:
            self._work_done()
            raise AgentClosed(f"agent {self.session.id!r} is {self.status}") from exc
        except BaseException:
            self._work_done()
            raise
        self._inbox_event("enqueue", item)
        try:
            await item.done.wait()
        except trio.Cancelled:
            with trio.CancelScope(shield=True):
                await self._abandon(item)
            raise
        assert item.result is not None
        return item.result

    async def _abandon(self, item: TurnItem) -> None:
        """The caller of `item` was cancelled: its work, and only its work, is cancelled.

        Still queued: it is taken out of the inbox and never logged. Its turn running: that
        turn ends `aborted` (reason CALLER_CANCELLED unless a cancel came first), and the
        caller's cancellation goes on once the turn is closed; the inbox behind it runs.
        """
        if self._mailbox is not None and self._mailbox.withdraw(item):
            self._inbox_event("discard", item)
            self._finish_item(item, TurnResult(None, "discarded"))
            return
        turn = self._cancellable_turn()
        if turn is not None and turn.item is item:
            if turn.cancel_reason is None:
                turn.cancel_reason = CALLER_CANCELLED
            turn.scope.cancel()
        await item.done.wait()

    def _enqueue_nowait(self, item: TurnItem) -> None:
        mailbox = self._require_mailbox()
        self._work_added()
        try:
            mailbox.tell_nowait(item)
        except InboxFull as exc:
            self._work_done()
            raise InboxFull(f"inbox of agent {self.session.id!r} is full") from exc
        except ActorStopped as exc:
            self._work_done()
            raise AgentClosed(f"agent {self.session.id!r} is {self.status}") from exc
        self._inbox_event("enqueue", item)

    def _busy(self) -> bool:
        return bool(self._outstanding or self._owned)

    def _work_added(self, *, owned: trio.CancelScope | None = None) -> None:
        if owned is None:
            self._outstanding += 1
        else:
            if self._owned is None:
                self._owned = set()
            self._owned.add(owned)
        self._refresh_status()

    def _work_done(self) -> None:
        self._outstanding -= 1
        self._work_changed()

    def _work_changed(self) -> None:
        # Idle exactly when no work is left, however the last item ended (ran, or was
        # discarded by a cancel before it started) and once owned work has ended too.
        self._refresh_status()
        if not self._busy() and self._idle_event is not None:
            self._idle_event.set()
            self._idle_event = None

    def _finish_item(self, item: TurnItem, result: TurnResult) -> None:
        if result.reason == "error" and result.code is None:  # every error result has a code
            fallback = ErrorCode.INTERNAL_ERROR if self.failure is None else ErrorCode.AGENT_FAILED
            result = evolve(result, code=getattr(self.failure, "code", None) or fallback)
        if item.result is None:
            item.resolve(result)
            self._work_done()

    def _discard_queued(self) -> None:
        self._steering.clear()
        if self._mailbox is None:
            return
        items = self._mailbox.withdraw_all()
        for index, item in enumerate(items, 1):
            # Told one by one, as if each left the inbox in turn: what is still queued.
            self._inbox_event("discard", item, len(items) - index)
            self._finish_item(item, TurnResult(None, "discarded"))

    # ------------------------------------------------------------------ actor body

    async def run(self, inbox: Mailbox[TurnItem]) -> None:
        """The actor's body (spawned by the kernel's Supervisor): one turn per inbox item
        until disposed.

        A crash marks the agent failed and fires `agent/error` before the exception goes on
        to the supervisor, which reports and contains it: sibling loops keep running and
        the session stays resumable.
        """
        current: TurnItem | None = None
        try:
            async for item in inbox:
                # The mailbox hands an item over atomically with the end of the receive
                # and the turn takes it without a checkpoint in between, so a cancel or
                # dispose finds it either queued or owned by a turn scope.
                current = item
                await self._run_item(item)
                current = None
        except Exception as exc:
            self.failure = exc
            self._closed = True
            self._refresh_status()
            self.notify("agent/error", exc)
            raise
        finally:
            self._closed = True
            self._cancel_owned()
            if current is not None:
                self._finish_item(
                    current,
                    TurnResult(current.turn, "error", f"agent failed: {self.failure!r}")
                    if self.failure is not None
                    else TurnResult(current.turn, "disposed"),
                )
            self._discard_queued()
            self._refresh_status()
            self._ended = True
            if self._ended_event is not None:
                self._ended_event.set()
            if self._appended is not None:
                self._appended.unpark_all()
            self._on_finished(self)

    async def _run_item(self, item: TurnItem) -> None:
        # No checkpoint between receiving the item and owning its scope, so cancel() always
        # finds either nothing (the item still queued) or this scope.
        turn = self._turn = _Turn(item, self.session.last_turn + 1, len(self.session))
        item.turn = turn.number
        # Told once the turn owns the item: a listener's cancel() reaches this very turn.
        self._inbox_event("dequeue", item)
        trigger_kind = "message" if item.kind == "message" else item.kind
        self._append("turn/start", TurnStart(turn.number, Trigger(trigger_kind, item.source)))
        reason: TurnEndReason | None = None
        error: BaseException | None = None
        reported: BaseException | None = None
        scope = turn.scope
        try:
            with scope:
                try:
                    reason = await self._turn_body(turn)
                except _TurnRejected as rejected:
                    reason = rejected.reason
                except Exception as exc:
                    error = exc
                    reason = TurnEndReason(
                        "error",
                        step=turn.steps,
                        message=f"{type(exc).__name__}: {exc}",
                        code=getattr(exc, "code", None),
                    )
        except Exception as exc:
            # What is left of an exception group once trio stripped this scope's Cancelled
            # from it (e.g. a tool's nursery whose child failed while being cancelled). Only a
            # cancelled turn gets here: it ends aborted/disposed and the error is not reported.
            if not scope.cancel_called:
                raise
            log.debug("turn %d of %s: error while cancelling: %r", turn.number, self.id, exc)
        finally:
            # Retire the scope first: a cancel from here on does nothing to this turn.
            turn.retired = True
            if scope.cancel_called or reason is None:
                # Cancelled from outside the turn's own scope (the runtime's scope: shutdown)
                # is a disposal, even when a cancel of the turn itself came first.
                outer = trio.current_effective_deadline() == -math.inf
                reason = TurnEndReason(
                    "disposed" if self._disposing or outer else "aborted",
                    reason=turn.cancel_reason,
                )
            else:
                reported = error
            with trio.CancelScope(shield=True):
                self._close_open_step(turn)
                owed = turn.ended_step
                if owed is not None and not owed.post_step_done:
                    await self._post_step_in_close(owed, cancelled=scope.cancel_called)
                self._append("turn/end", TurnEnd(turn.number, reason))
                self._turn = None
                await self._flush()
        if reported is not None:
            # After the turn is closed, so what a listener injects cannot land mid-batch.
            log.warning("turn %d of %s failed: %r", turn.number, self.id, reported)
            self.notify("agent/error", reported)
        if self._steering and not self._closed and self._outstanding <= 1:
            # Steering that arrived in the turn's last step has no next step to join: like a
            # steer on an idle agent, it starts the next turn (the rest joins its first step).
            content, source = self._steering.pop(0)
            self._enqueue_nowait(TurnItem("message", content, source))
        self._finish_item(item, self._result_of(turn, reason))

    def _result_of(self, turn: _Turn, reason: TurnEndReason) -> TurnResult:
        """The closed turn's result: its reply, and the usage of every model call in it."""
        events = self.session.events_since(turn.first_seq)
        reply = next(
            (
                Message("assistant", event.data.content)
                for event in reversed(events)
                if isinstance(event.data, AssistantMessage) and event.data.content
            ),
            None,
        )
        return TurnResult(
            turn.number,
            reason.kind,  # type: ignore[arg-type]
            reason.message or reason.reason,
            reply,
            usage_of(events).total,
            turn.steps,
            reason.code,
        )

    @property
    def id(self) -> str:
        return self.session.id

    # ------------------------------------------------------------------ appends

    def append(
        self,
        event_type: str,
        data: Any,
        *,
        surface_op: SurfaceOp | None = None,
        sources: tuple[int, ...] | None = None,
    ) -> SessionEvent:
        """Append to the session and notify `session/event` listeners right after."""
        event = self.session.append(
            event_type, data, surface_op=surface_op, source_event_seqs=sources
        )
        chain = self._chain("session/event")
        if chain:
            run_notify("session/event", chain, self.agent, event)
        if self._appended is not None:
            self._appended.unpark_all()
        return event

    async def wait_for_events(self, seen: int) -> bool:
        """Wait until the log holds more than `seen` events (True) or the loop has ended
        with no more to read (False)."""
        while len(self.session) <= seen:
            if self._ended:
                return False
            if self._appended is None:
                self._appended = trio.lowlevel.ParkingLot()
            await self._appended.park()
        return True

    def _append(
        self,
        event_type: str,
        data: Any,
        *,
        surface: bool = False,
        sources: tuple[int, ...] | None = None,
    ) -> SessionEvent:
        return self.append(
            event_type, data, surface_op=APPEND if surface else None, sources=sources
        )

    def _append_context(self, item: ContextItem | str) -> None:
        if isinstance(item, str):
            item = ContextItem((Text(item),))
        content = (Text(item.content),) if isinstance(item.content, str) else item.content
        self._append(
            "context/message", ContextMessage(content, item.source, item.meta), surface=True
        )

    async def flush(self) -> None:
        """Barrier: everything appended so far is durable when this returns."""
        await self._flush()

    async def _flush(self) -> None:
        # `_persisted` moves past the events handed off, so the hand-off must not be cut
        # short: a cancel landing before they reach the codec would leave a gap in the
        # store, which then refuses every later batch. The barrier is shielded (a pending
        # cancel lands at the checkpoint right after it, before anything is dispatched),
        # and hand-offs are serialized so concurrent barriers reach the codec in seq order.
        with trio.CancelScope(shield=True):
            lock = self._flush_lock
            if lock is None:
                lock = self._flush_lock = trio.Lock()
            if lock.locked():
                await lock.acquire()
            else:
                lock.acquire_nowait()  # uncontended: no schedule point here
            try:
                events = self.session.events_since(self._persisted)
                self._persisted = len(self.session)
                await self._persist(self.session.id, events)
            finally:
                lock.release()
        await trio.lowlevel.checkpoint_if_cancelled()

    # ------------------------------------------------------------------ the turn

    async def _turn_body(self, turn: _Turn) -> TurnEndReason:
        item = turn.item
        if item.kind == "injection":
            self._append_context(ContextItem(item.content, item.source, item.meta))
            return TurnEndReason("completed")
        if item.kind == "compaction":
            await self._manual_compaction()
            return TurnEndReason("completed")
        await self._submit_prompt(item, turn.number)
        while True:
            turn.steps += 1
            outcome = await self._step(turn, turn.steps)
            if isinstance(outcome, EndTurn):
                return outcome.reason

    async def _submit_prompt(self, item: TurnItem, turn: int) -> None:
        decision = await self._seam("prompt/submit", PromptSubmit(turn, item.content, item.source))
        if isinstance(decision, PromptSubmit):
            decision = Allow(decision.content if decision.content != item.content else None)
        if isinstance(decision, Block):
            self._append(
                "prompt/blocked", PromptBlocked(item.content, item.source, decision.reason)
            )
            raise _TurnRejected(TurnEndReason("rejected", reason=decision.reason))
        if not isinstance(decision, Allow):
            raise TypeError(f"prompt/submit returned {type(decision).__name__}, not Allow/Block")
        content = decision.content if decision.content is not None else item.content
        self._append("user/message", UserMessage(content, item.source), surface=True)
        for extra in decision.additional_context:
            self._append_context(extra)

    async def _assemble(self) -> tuple[str, tuple[Tool, ...]]:
        """The full system prompt and the tools of this step (`system-prompt/assemble`,
        `tools/assemble`); the tools' schemas, in this order, are what the header records."""
        sections = await self._seam("system-prompt/assemble", ())
        system = _render_system(self.options.system, sections)
        tools = _checked_tools(await self._seam("tools/assemble", self._configured()))
        schemas = tuple(tool.schema for tool in tools)
        if len(schemas) != len(self.current_tools) or not all(
            map(operator.is_, schemas, self.current_tools)
        ):
            # Kept when it holds the very same schemas: the header then compares by identity.
            self.current_tools = schemas
        return system, tools

    def _configured(self) -> tuple[Tool, ...]:
        options = self.options
        if self._configured_tools is None or self._configured_tools[0] is not options:
            ordered = _ordered_tools(options.tools, options.tool_order)
            self._configured_tools = (options, ordered)
        return self._configured_tools[1]

    async def _session_prefix(self) -> tuple[Message, ...]:
        """This instance's frozen session prefix, composed on first use.

        The composition seam checks for a cancel before anything is kept: a composition
        that a cancel or dispose interrupted is discarded (never cached, logged or sent),
        and the next turn composes again.
        """
        if self.session_prefix is None:
            composed = await self._seam("agent/session-prefix", ())
            messages = as_message_tuple(composed, "agent/session-prefix")
            detached = structure_as(
                freeze_json(unstructure(messages), "$.session_prefix"), tuple[Message, ...]
            )
            self.session_prefix = tuple(detached)
            self._prefix_chain = chain_of(self.session_prefix)
        return self.session_prefix

    async def _step(self, turn: _Turn, number: int) -> StepOutcome:
        for content, source in self._steering:
            self._append(
                "steering/message", SteeringMessage(turn.number, content, source), surface=True
            )
        self._steering.clear()

        system, tools = await self._assemble()
        prefix = await self._session_prefix()

        await self._serial_seam("agent/pre-step", PreStep(turn.number, number, system, prefix))
        if self._compactor is not None and self.options.compaction.auto:
            await self._compactor.compact_if_needed(self, system, prefix, turn.scope)
            await self._observers_may_have_cancelled()

        boundary = self.session.derive_messages()
        history_chain = self.session.history_chain()
        self._append("step/start", StepStart(turn.number, number))
        step = turn.step = _Step(
            turn.number,
            number,
            {tool.name: tool for tool in tools},
            self.options.max_parallel_tool_calls,
        )
        await self._observers_may_have_cancelled()

        seed = self.options.call_config() if self._seed_from_options else self._folded_config()
        config = await self._seam("agent/request", seed)
        if not isinstance(config, LlmCallConfig):
            raise TypeError(f"agent/request returned {type(config).__name__}, not LlmCallConfig")

        header = canonical(EpochHeader(config, system, self.current_tools, prefix))
        self._record_header(header)
        self._seed_from_options = False
        request = Request(
            self.session.id,
            config,
            header.system,
            header.tools or (),
            prefix + boundary,
            len(prefix),
        )
        digest = request_digest(header, self._prefix_chain, history_chain)
        await self._flush()

        assembler = ChunkAssembler()
        chunk_seqs: list[int] = []
        failure = await self._stream(request, step, assembler, chunk_seqs)
        if failure is not None:
            return await self._request_failed(turn, step, failure)

        assert assembler.finish is not None
        max_tokens = assembler.finish.kind == "max-tokens"
        assembled = Message("assistant", assembler.content(drop_tool_calls=max_tokens))
        reply = await self._seam("agent/step-result", assembled)
        content = _checked_reply(reply, allow_tool_calls=not max_tokens)
        failure = _duplicate_call_ids(content)
        if failure is not None:
            return await self._request_failed(turn, step, failure)
        if any(isinstance(block, ToolCall) for block in content):
            # From the tool-requesting message on, contexts wait for the batch's last result:
            # an observer of this very append may inject, and must not split call from result.
            turn.tool_batch = []
        self._append(
            "assistant/message",
            AssistantMessage(
                turn.number,
                number,
                content,
                self.provider.name,
                config.model,
                assembler.usage,
                digest,
                rewritten=content != assembled.content,
            ),
            surface=True,
            sources=tuple(chunk_seqs),
        )
        step.requested = tuple(block for block in content if isinstance(block, ToolCall))
        await self._observers_may_have_cancelled()
        if max_tokens:
            await self._end_step(turn)
            return EndTurn(TurnEndReason("max-tokens"))

        if step.requested:
            await self._run_tools(turn, step)

        await self._end_step(turn)
        stop = await run_until_answer(
            self._chain("agent/turn-stop"), self.agent, TurnStop(turn.number, number)
        )
        await trio.lowlevel.checkpoint_if_cancelled()
        if stop is not None:
            self._steering.clear()
            return EndTurn(
                TurnEndReason(
                    "completed", reason=stop if isinstance(stop, str) else "agent/turn-stop"
                )
            )
        decision = await self._seam(
            "agent/turn-continuation",
            Continuation(
                turn.number,
                number,
                had_tool_calls=bool(step.requested),
                steering_pending=bool(self._steering),
                continue_turn=bool(step.requested) or bool(self._steering),
            ),
        )
        if not isinstance(decision, Continuation):
            raise TypeError("agent/turn-continuation must return a Continuation")
        if not decision.continue_turn:
            return EndTurn(TurnEndReason("completed"))
        if decision.reason:
            self._steering.append(((Text(decision.reason),), Source.of_plugin("turn-continuation")))
        return NextStep()

    async def _stream(
        self,
        request: Request,
        step: _Step,
        assembler: ChunkAssembler,
        chunk_seqs: list[int],
    ) -> ErrorInfo | None:
        """Stream the model's answer into `assistant/chunk` events; the failure, if any."""
        try:
            # Closed before anything is appended after the stream: the provider's cleanup
            # runs inside the step, on completion, error and cancel alike.
            async with opened_stream(self.provider, request) as stream:
                async for chunk in stream:
                    if type(chunk) not in CHUNK_TYPES:
                        return ErrorInfo(
                            f"{self.provider.name} yielded a {type(chunk).__name__}, "
                            "not a stream chunk",
                            ErrorCode.PROTOCOL_ERROR,
                        )
                    try:
                        event = self._append(
                            "assistant/chunk", AssistantChunk(step.turn, step.number, chunk)
                        )
                    except SessionValidationError as exc:
                        return ErrorInfo(
                            f"{self.provider.name} yielded a chunk the log refuses: {exc.rule}",
                            ErrorCode.PROTOCOL_ERROR,
                        )
                    chunk_seqs.append(event.seq)
                    assembler.feed(chunk)
                    await self._observers_may_have_cancelled()
        except ProviderError as exc:
            return ErrorInfo(str(exc), exc.code)
        finish = assembler.finish
        if finish is None:
            return ErrorInfo(
                "provider stream ended without a finish chunk", ErrorCode.STREAM_INCOMPLETE
            )
        if finish.kind == "error":
            return finish.error or ErrorInfo("provider reported an error", ErrorCode.PROVIDER_ERROR)
        return None

    def _folded_config(self) -> LlmCallConfig:
        header = self.session.header()
        return header.config if header is not None else self.options.call_config()

    def _record_header(self, header: EpochHeader) -> None:
        folded = self.session.header()
        if not self.logged_header:
            self._append(
                "request/header",
                RequestHeaderEvent(header, "initial" if folded is None else "resume"),
            )
            self.logged_header = True
            return
        assert folded is not None
        if headers_equal(folded, header):
            return
        delta = diff(folded, header)
        if delta is None:
            self._append("request/header", RequestHeaderEvent(header, "fallback"))
        else:
            self._append("request/header-delta", delta)

    async def _end_step(self, turn: _Turn) -> None:
        """Close the step (`step/end`), then run `agent/post-step` for it."""
        step = self._close_step(turn)
        if step is not None:
            # An observer of step/end (or of the batch's last appends) may have cancelled.
            await self._observers_may_have_cancelled()
            step.post_step_done = True
            await self._serial_seam("agent/post-step", PostStep(step.turn, step.number))

    def _close_step(self, turn: _Turn) -> _Step | None:
        step = turn.step
        turn.step = None
        if step is None or self.session.open_step is None:
            return None
        self._append("step/end", StepEnd(step.turn, step.number))
        turn.ended_step = step
        return step

    async def _request_failed(self, turn: _Turn, step: _Step, failure: ErrorInfo) -> StepOutcome:
        await self._end_step(turn)
        retry = False
        if (
            failure.code == ErrorCode.CONTEXT_WINDOW_EXCEEDED
            and self._compactor is not None
            and turn.overflow_retries < self.options.compaction.max_overflow_retries
            and self.session_prefix is not None
        ):
            turn.overflow_retries += 1
            system, _tools = await self._assemble()
            retry = await self._compactor.compact_now(
                self, system, self.session_prefix, turn.scope, retain_zero=True
            )
        decision = await self._seam(
            "agent/request-error",
            RequestFailure(step.turn, step.number, failure, attempt=step.number, retry=retry),
        )
        if isinstance(decision, RequestFailure) and decision.retry:
            return NextStep()
        return EndTurn(
            TurnEndReason("error", step=step.number, message=failure.message, code=failure.code)
        )

    # ------------------------------------------------------------------ tools

    async def _run_tools(self, turn: _Turn, step: _Step) -> None:
        """Run the step's calls: consecutive non-exclusive calls as one pool (at most
        `max_parallel_tool_calls` at a time), each exclusive call alone, as a barrier
        between pools. Calls start in model order; their results are appended in model
        order; the batch's contexts after the last result."""
        results = _ResultsInOrder(self, turn, step)
        for group in _tool_groups(step.requested, step.tools):
            await self._observers_may_have_cancelled()
            if len(group) == 1:
                index, call = group[0]
                info = await self._start_call(step, results, index, call)
                if info is not None:
                    await self._finish_call(turn, step, results, index, info, None)
                continue
            slots = trio.Semaphore(step.max_parallel)
            try:
                async with trio.open_nursery() as pool:
                    for index, call in group:
                        await slots.acquire()
                        try:
                            info = await self._start_call(step, results, index, call)
                        except BaseException:
                            slots.release()
                            raise
                        if info is None:
                            slots.release()
                        else:
                            pool.start_soon(
                                self._finish_call, turn, step, results, index, info, slots
                            )
            except BaseExceptionGroup as group_error:
                # One failing call cancels its pool; the turn sees that error, not a group.
                error = sole_error(group_error)
                if error is group_error:
                    raise
                raise error from group_error
        # On a cancel or error the batch stays open: the cleanup writes the missing results
        # first, then these contexts.
        self._flush_tool_batch(turn)

    async def _start_call(
        self, step: _Step, results: _ResultsInOrder, index: int, call: ToolCall
    ) -> ToolCallInfo | None:
        """Start one call in model order: `tools/pre-execute`, then its `tool/call` and a
        barrier (the call is durable before its side effects). None when it was denied."""
        info = ToolCallInfo(step.turn, step.number, call.id, call.name, call.arguments)
        decision = await self._seam("tools/pre-execute", info)
        if isinstance(decision, Deny):
            self._log_call(step, info)
            denied = _error_outcome(
                info, ErrorCode.TOOL_DENIED, f"Tool call denied: {decision.reason}"
            )
            step.finished[info.call_id] = denied
            results.ready(index, denied)
            return None
        if isinstance(decision, ToolCallInfo):
            _same_call(info, decision.call_id, decision.name, "tools/pre-execute")
            info = decision
        self._log_call(step, info)
        await self._flush()
        return info

    async def _finish_call(
        self,
        turn: _Turn,
        step: _Step,
        results: _ResultsInOrder,
        index: int,
        info: ToolCallInfo,
        slots: trio.Semaphore | None,
    ) -> None:
        """Run a started call (`tools/execute` around the tool, then `tools/post-execute`)
        and hand its outcome to `results`."""
        try:
            outcome = await run_waterfall(
                "tools/execute",
                self._chain("tools/execute"),
                self.agent,
                info,
                terminal=partial(self._execute_logged, turn, step, info),
            )
            await trio.lowlevel.checkpoint_if_cancelled()
            outcome = _checked_outcome(outcome, info, "tools/execute")
            # A listener's own outcome (a short-circuit) is this call's real result too.
            step.finished.setdefault(info.call_id, outcome)
            # A listener may have cancelled and returned normally: the seam drops its rewrite
            # and context; the cleanup writes the tool's real result (it finished).
            outcome = _checked_outcome(
                await self._seam("tools/post-execute", outcome), info, "tools/post-execute"
            )
            results.ready(index, outcome)
        finally:
            if slots is not None:
                slots.release()

    def _flush_tool_batch(self, turn: _Turn) -> None:
        batch, turn.tool_batch = turn.tool_batch, None
        for item in batch or ():
            self._append_context(item)

    def _log_call(self, step: _Step, info: ToolCallInfo) -> None:
        event = self._append(
            "tool/call",
            ToolCallEvent(step.turn, step.number, info.call_id, info.name, info.arguments),
        )
        step.logged_calls[info.call_id] = event.seq

    def _log_result(self, step: _Step, outcome: ToolOutcome) -> None:
        self._append(
            "tool/result",
            ToolResultEvent(
                step.turn,
                step.number,
                outcome.call_id,
                outcome.content,
                outcome.is_error,
                outcome.error,
            ),
            surface=True,
            sources=(step.logged_calls[outcome.call_id],),
        )
        step.answered.add(outcome.call_id)

    async def _execute_logged(
        self, turn: _Turn, step: _Step, logged: ToolCallInfo, info: object
    ) -> ToolOutcome:
        """The innermost `tools/execute`: it runs the call exactly as its `tool/call` logged
        it (a listener's `next(replacement)` may not run another tool or other arguments)."""
        if info != logged:
            raise HookError(
                f"a tools/execute listener passed a different call down for {logged.call_id!r}; "
                "the call that runs is the one its tool/call logged (rewrite calls in "
                "tools/pre-execute)"
            )
        return await self._execute(turn, step, logged)

    async def _execute(self, turn: _Turn, step: _Step, info: ToolCallInfo) -> ToolOutcome:
        """Run the tool of `info` (the innermost `tools/execute`): validate its arguments
        against the tool's schema, call it, check what it returned."""

        def failed(code: ErrorCode, message: str) -> ToolOutcome:
            return _error_outcome(info, code, message)

        tool = step.tools.get(info.name)
        if tool is None:
            return failed(ErrorCode.TOOL_NOT_FOUND, f"No tool named {info.name!r} is available.")
        try:
            args = orjson.loads(info.arguments or "{}")
        except orjson.JSONDecodeError as exc:
            return failed(ErrorCode.INVALID_ARGUMENTS, f"Arguments are not valid JSON: {exc}")
        if not isinstance(args, dict):
            return failed(ErrorCode.INVALID_ARGUMENTS, "Arguments must be a JSON object.")
        problem = tool.validator.problem(args)
        if problem is not None:
            return failed(ErrorCode.INVALID_ARGUMENTS, f"Invalid arguments: {problem}")
        ctx = ToolContext(self.agent, info.call_id, turn.scope, step.turn, step.number)
        step.started.add(info.call_id)
        try:
            output = await tool.execute(args, ctx)
        except Exception as exc:
            return failed(ErrorCode.TOOL_FAILED, f"{type(exc).__name__}: {exc}")
        content = _tool_text(output)
        if content is None:
            return failed(
                ErrorCode.INVALID_TOOL_OUTPUT,
                f"The tool returned {_describe(output)}; a tool returns a str or a tuple of "
                "Text blocks with str text.",
            )
        outcome = ToolOutcome(
            step.turn, step.number, info.call_id, info.name, info.arguments, content
        )
        step.finished[info.call_id] = outcome
        return outcome

    # ------------------------------------------------------------------ cleanup

    def _close_open_step(self, turn: _Turn) -> None:
        """After a cancel or error: results for every requested call, contexts, step/end."""
        step = turn.step
        if step is None or self.session.open_step is None:
            turn.step = None
            return
        for call in step.requested:
            if call.id in step.answered:
                continue
            info = ToolCallInfo(step.turn, step.number, call.id, call.name, call.arguments)
            if call.id not in step.logged_calls:
                self._log_call(step, info)
            if call.id in step.finished:
                outcome = step.finished[call.id]
            elif call.id in step.started:
                outcome = _error_outcome(
                    info, ErrorCode.TOOL_CANCELLED, "The tool call was cancelled while running."
                )
            else:
                outcome = _error_outcome(
                    info,
                    ErrorCode.TOOL_ABORTED_BEFORE_DISPATCH,
                    "The turn was cancelled before this tool call started.",
                )
            self._log_result(step, evolve(outcome, additional_context=()))
        self._flush_tool_batch(turn)
        self._close_step(turn)

    async def _post_step_in_close(self, step: _Step, *, cancelled: bool) -> None:
        """`agent/post-step` for a step that a cancel or an error ended: it runs in the
        turn's shielded close, bounded by POST_STEP_GRACE; a failure is logged, not
        reported (the turn's reason is already decided)."""
        step.post_step_done = True
        with trio.move_on_after(POST_STEP_GRACE):
            try:
                await run_serial(
                    self._chain("agent/post-step"),
                    self.agent,
                    PostStep(step.turn, step.number, cancelled=cancelled),
                )
            except Exception:
                log.exception("agent/post-step listener failed while %s closed a turn", self.id)

    # ------------------------------------------------------------------ compaction

    async def _manual_compaction(self) -> None:
        if self._compactor is None:
            raise RuntimeError("this runtime has no compactor")
        system, _tools = await self._assemble()
        prefix = await self._session_prefix()
        turn = self._turn
        assert turn is not None
        await self._compactor.compact_now(self, system, prefix, turn.scope)
