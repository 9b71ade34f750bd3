"""`Agent`: the public handle of one loop instance; every call goes to its LoopActor."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias

import trio
from attrs import frozen

from ..log.ledger import session_ledger
from ..log.session import Session
from ..log.usage import UsageTotals
from ..model.approvals import DecisionKind, PendingApproval
from ..model.budget import Spend
from ..model.events import SessionEvent
from ..model.hook_values import TurnResult
from ..model.messages import USER, Block, Content, Source, as_content
from .accounts import Account
from .approvals import decision_arguments
from .hooks import HookRegistry, Listener, Unsubscribe
from .options import AgentOptions

if TYPE_CHECKING:
    from ..model.header import ToolSchema

AgentStatus: TypeAlias = Literal["idle", "running", "disposed", "failed"]
"""`idle`: no work outstanding. `running`: a turn runs or work is queued. `disposed`: it takes
no more work (disposed, or its runtime closed). `failed`: its loop crashed (see
`agent/error`); the session stays resumable."""

SourceSpec: TypeAlias = str | Source | None
"""Who produced a message: a plugin name, a `Source`, or None for the default."""


class LoopHandle(Protocol):
    """What an Agent needs from its loop instance (implemented by actors.loop.LoopActor)."""

    status: AgentStatus
    options: AgentOptions
    current_tools: tuple[ToolSchema, ...]
    account: Account | None

    async def send(
        self, content: Content, source: Source, reject_pending: bool = False
    ) -> TurnResult: ...

    def pending_approvals(self) -> tuple[PendingApproval, ...]: ...

    async def decide(
        self,
        call_id: str,
        kind: DecisionKind,
        arguments: str | None,
        reason: str | None,
        meta: Mapping[str, Any] | None,
        source: Source,
    ) -> TurnResult: ...

    def steer(self, content: Content, source: Source) -> None: ...

    def inject(self, content: Content, source: Source, meta: Mapping[str, Any] | None) -> None: ...

    async def deliver(
        self, content: Content, source: Source, meta: Mapping[str, Any] | None
    ) -> None: ...

    def cancel(self, reason: str | None, keep_inbox: bool) -> None: ...

    async def dispose(self) -> None: ...

    async def wait_idle(self) -> None: ...

    async def compact(self) -> TurnResult: ...

    async def wait_for_events(self, seen: int) -> bool: ...

    def reconfigure(self, changes: Mapping[str, Any]) -> AgentOptions: ...


def as_source(source: SourceSpec, default: Source) -> Source:
    """A `Source` from what callers pass: None (the default), a plugin name or a Source."""
    if source is None:
        return default
    if isinstance(source, Source):
        return source
    if isinstance(source, str) and source:
        return Source.of_plugin(source)
    raise TypeError(f"source must be a plugin name or a Source, got {source!r}")


class Agent:
    """One live agent: a loop instance over one session.

    `id` is its session id; lineage (`parent_session`, `seed_length`) is on `session.meta`.
    Get one from `Runtime.spawn`, `Runtime.resume` or `Runtime.fork`; it stays usable until
    it is disposed (explicitly, or when its runtime closes) or its loop fails.
    """

    def __init__(self, session: Session, loop: LoopHandle) -> None:
        self.session = session
        """The session log: `events`, `derive_messages()`, `header()`, `meta`."""
        self.hooks = HookRegistry()
        """This agent's own listeners (`on()` adds to it); they run after runtime-wide ones."""
        self._loop = loop

    @property
    def id(self) -> str:
        """The session id."""
        return self.session.id

    @property
    def options(self) -> AgentOptions:
        """The options this loop instance runs with (read-only)."""
        return self._loop.options

    @property
    def status(self) -> AgentStatus:
        """`idle`, `running`, `disposed` or `failed` (see `AgentStatus`)."""
        return self._loop.status

    @property
    def current_tools(self) -> tuple[ToolSchema, ...]:
        """The tool schemas assembled for the latest step (what the compaction gate counts)."""
        return self._loop.current_tools

    def reconfigure(self, **changes: Any) -> AgentOptions:
        """Change this agent's options (`system=`, `tools=`, `tool_order=`, `model=`,
        sampling settings, ...); returns the new options. Effective from the next step;
        the request header records the change (a delta, or a fallback snapshot for a pure
        tool reorder). The provider, labels and inbox capacity are fixed per instance."""
        return self._loop.reconfigure(changes)

    def on(self, name: str, listener: Listener) -> Unsubscribe:
        """Subscribe `listener` to the hook `name` for this agent only; returns a callable
        that unsubscribes it. Listener shapes per hook kind are in docs/hooks.md."""
        return self.hooks.on(name, listener)

    async def send(
        self,
        content: str | Content | list[Block],
        *,
        source: SourceSpec = None,
        reject_pending: bool = False,
    ) -> TurnResult:
        """Queue one turn with `content` as its user message and wait until it ends.

        Waits while the inbox is full (backpressure). Returns the `TurnResult`; a message
        dropped before its turn starts (by `cancel()` or `dispose()`) returns
        `TurnResult(turn=None, reason="discarded")` — it never hangs. Raises `AgentClosed`
        once the agent is disposed or failed, and `ApprovalsPending` while calls wait for
        a decision — unless `reject_pending`: then each is rejected first.
        """
        return await self._loop.send(as_content(content), as_source(source, USER), reject_pending)

    def pending_approvals(self) -> tuple[PendingApproval, ...]:
        """The calls waiting for a decision, in the order the model asked for them (rebuilt
        from the log: the same after `rt.resume` in another process)."""
        return self._loop.pending_approvals()

    async def approve(
        self,
        call_id: str,
        arguments: str | Mapping[str, Any] | None = None,
        *,
        meta: Mapping[str, Any] | None = None,
        source: SourceSpec = None,
    ) -> TurnResult:
        """Approve the waiting call `call_id` (with edited `arguments`, if given): the one
        decision is logged (`meta`: who and why), the call runs, and the turn goes on;
        returns that continuation's `TurnResult` (it may wait for approvals again).
        Raises `ApprovalAlreadyDecided` for a decided call, `ApprovalNotFound` for an
        unknown one."""
        return await self._loop.decide(
            call_id,
            "approve",
            decision_arguments(arguments),
            None,
            meta,
            as_source(source, USER),
        )

    async def reject(
        self,
        call_id: str,
        reason: str = "no",
        *,
        meta: Mapping[str, Any] | None = None,
        source: SourceSpec = None,
    ) -> TurnResult:
        """Reject the waiting call `call_id`: the decision is logged and the rejection is
        the call's result (an `APPROVAL_REJECTED` error the model sees); then the turn goes
        on, as with `approve`."""
        return await self._loop.decide(
            call_id, "reject", None, reason, meta, as_source(source, USER)
        )

    def steer(self, content: str | Content | list[Block], *, source: SourceSpec = None) -> None:
        """Redirect the running turn: `content` becomes a `steering/message` at the start of
        its next step. On an idle agent it starts a turn, like `send` (without waiting).

        Steering differs from `inject` in that it is a user instruction that makes the turn
        continue; raises `InboxFull` if it must be queued and the inbox is full.
        """
        self._loop.steer(as_content(content), as_source(source, USER))

    def inject(
        self,
        content: str | Content | list[Block],
        source: SourceSpec = "plugin",
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        """Add context to the conversation as a durable `context/message`.

        During a turn it is appended now (or, during a tool batch, right after the batch's
        last result, never between a call and its result); on an idle agent it is recorded
        in a one-shot `injection` turn that calls no model. It does not by itself make the
        model answer. Non-JSON `content`/`meta` raise at the call; `InboxFull` if it must be
        queued and the inbox is full.
        """
        self._loop.inject(as_content(content), as_source(source, USER), meta)

    async def deliver(
        self,
        content: str | Content | list[Block],
        source: SourceSpec = "plugin",
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        """`inject` for producers that must not lose their content: when it has to be
        queued and the inbox is full, wait for room (backpressure) instead of raising
        `InboxFull`. Returns once the context is logged or queued."""
        await self._loop.deliver(as_content(content), as_source(source, USER), meta)

    def cancel(self, reason: str | None = None, keep_inbox: bool = False) -> None:
        """Cancel the running turn (it ends `aborted`, with `reason` if it is the first).

        Without `keep_inbox`, queued turns and pending steering are discarded too (never
        logged; their `send()` returns `discarded`) and background work the agent owns
        (background subagents) is cancelled. With `keep_inbox=True` only the running turn
        is cancelled and the next queued item runs. On an idle agent with nothing queued it
        does nothing and leaves no mark: the next send runs normally.
        """
        self._loop.cancel(reason, keep_inbox)

    async def dispose(self) -> None:
        """Stop the agent for good: the running turn ends `disposed`, queued work never
        starts, background work is cancelled, the log is flushed. Later calls that take
        work raise `AgentClosed`. Returns once the loop has ended; idempotent."""
        await self._loop.dispose()

    async def wait_idle(self) -> None:
        """Wait until no turn runs and nothing is queued. Awaited from inside the agent's
        own turn (a tool or a listener) it cannot return: await it from outside."""
        await self._loop.wait_idle()

    async def events(self, after: int | None = None) -> AsyncGenerator[SessionEvent, None]:
        """The session's events after seq `after` (all of them when None): those already
        in the log first, then each new one as it is appended, in seq order, until the agent
        is closed and every event has been yielded.

        The log itself is the buffer: a reader keeps only its position, so a slow reader
        never makes the loop wait, lose or reorder anything, and a fast one waits for the
        next append. Events of a session that is not live come from the store
        (`load_session`).
        """
        if after is not None and (isinstance(after, bool) or not isinstance(after, int)):
            raise TypeError(f"after must be a seq (int) or None, got {after!r}")
        cursor = 0 if after is None else max(after + 1, 0)
        while True:
            while cursor < len(self.session):
                yield self.session.event(cursor)
                cursor += 1
            if not await self._loop.wait_for_events(cursor):
                return

    def usage(self) -> UsageTotals:
        """The tokens this session's model and summarizer calls used, from its log (a fork
        child's seed is its parent's usage and is not counted again)."""
        return self.session.usage()

    def spent(self) -> Spend:
        """What this agent's model calls cost (tokens, calls, dollars or None if a price is
        unknown). With a budget in its tree: this agent and its subagents, live, as the
        budget counts (docs/budgets.md); without: this session's own calls, from its log.
        Summarizer (compaction) calls are included."""
        account = self._loop.account
        if account is not None:
            return account.spent
        return session_ledger(self.session.meta, self.session.events).total

    async def compact(self) -> TurnResult:
        """Compact now, recorded as a one-shot turn (`turn/start{trigger: compaction}` …
        `turn/end`); queued like a send. Without a compactor the turn ends `error`."""
        return await self._loop.compact()

    def __repr__(self) -> str:
        return f"Agent(id={self.id!r}, status={self.status!r})"


@frozen
class ToolContext:
    """What a running tool can see: its agent, its call id, the turn's cancel scope, and
    the call's effect key."""

    agent: Agent
    call_id: str
    cancel_scope: trio.CancelScope
    """The turn's scope: cancelling it cancels the whole turn, not only this call."""
    turn: int
    step: int
    effect_key: str = ""
    """The key to hand a downstream API that deduplicates (a payment's idempotency key):
    the same for this call across retries, resume, repair and failover, different for any
    other call, a fork child's new call included (docs/effects.md). Empty only for a
    context built by hand outside a loop."""
