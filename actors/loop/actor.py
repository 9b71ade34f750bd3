"""`LoopActor`: one loop instance over one session — its body (one turn per inbox item), its
public surface (send, steer, inject, cancel, dispose, reconfigure), its status, its appends,
seams and flush barrier. The phases live beside it: `turn.py`, `step.py`, `tools.py`,
`inbox.py`, in the order of docs/spec/loop.md §3–§4."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs
import trio

from ...runtime.control.accounts import Account
from ...runtime.control.approvals import Forwarder
from ...runtime.control.handle import Agent, AgentStatus
from ...runtime.control.hooks import (
    HookRegistry,
    listeners_for,
    run_notify,
    run_serial,
    run_waterfall,
)
from ...runtime.control.options import AgentOptions, Tool
from ...runtime.log.approvals import LEDGER_DATA, ApprovalLedger
from ...runtime.log.session import Session
from ...runtime.log.tokens import TokenMeter
from ...runtime.model.approvals import DecisionKind, PendingApproval
from ...runtime.model.events import APPEND, ContextMessage, SessionEvent, SurfaceOp
from ...runtime.model.header import ToolSchema
from ...runtime.model.hook_values import ContextItem, TurnResult
from ...runtime.model.messages import Content, Message, Source, Text
from ...runtime.providers.base import Provider
from ..kernel import ActorRef, Mailbox
from . import decisions, inbox
from .context import Compactor
from .snapshots import SaveSnapshot, SnapshotKeeper
from .turn import run_item
from .values import (
    RECONFIGURABLE,
    OpenTurn,
    Persist,
    PersistNow,
    QueuedDecision,
    SessionStartKind,
    TurnItem,
)

FORKED_UNRUN = "decided before the fork and not run yet: it runs in the parent session only"


class LoopActor:
    """The only writer of its session. Its inbox is a bounded kernel mailbox of turn items;
    its turns (`turn.py`), steps (`step.py`) and tool calls (`tools.py`) are handed the
    actor through the narrow views of `context.py`."""

    # Slots: thousands of idle agents each hold one; a per-instance dict costs ~1.3 KiB.
    __slots__ = (
        "_appended",
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
        "_persist_now",
        "_persisted",
        "_snapshots",
        "account",
        "agent",
        "approvals",
        "budget_hold",
        "closed",
        "compactor",
        "configured_tools",
        "current_tools",
        "current_turn",
        "disposing",
        "failure",
        "forwarders",
        "held_contexts",
        "logged_header",
        "options",
        "origin",
        "prefix_chain",
        "provider",
        "seed_from_options",
        "session",
        "session_prefix",
        "status",
        "steering",
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
        save_snapshot: SaveSnapshot | None = None,
        persist_now: PersistNow | None = None,
    ) -> None:
        self.session = session
        self.options = options
        self.provider = provider
        self.origin = origin
        self._global_hooks = global_hooks
        self._persist = persist
        self._persist_now = persist_now
        """The barrier written here when the codec can (no schedule point, no hand-off);
        None: every barrier awaits `persist`."""
        self.compactor = compactor
        self._on_finished = on_finished
        self.agent = Agent(session, self)
        self.status: AgentStatus = "idle"
        self.current_tools: tuple[ToolSchema, ...] = ()
        self.configured_tools: tuple[AgentOptions, tuple[Tool, ...]] | None = None
        """The options' tools in their configured order, for the options they came from."""
        self.session_prefix: tuple[Message, ...] | None = None
        """Composed once per instance before its first pre-step; None until then."""
        self.prefix_chain = b""
        self.logged_header = False
        """Whether this instance wrote its anchoring `request/header` snapshot."""
        self.seed_from_options = True
        """The next request's config starts from the options (this instance's first
        request, or after `reconfigure` changed a call setting), else from the header."""
        self._flush_lock: trio.Lock | None = None
        """Serializes hand-offs to the codec; made by the first flush."""
        self._persisted = len(session)
        self._snapshots = None if save_snapshot is None else SnapshotKeeper(save_snapshot, session)
        # The mailbox is the kernel's: the supervisor hands it to `run` and the runtime
        # attaches the ref (send, withdraw, stop) right after spawning.
        self._mailbox: ActorRef[TurnItem] | None = None
        self.steering: list[tuple[Content, Source]] = []
        self.current_turn: OpenTurn | None = None
        self.disposing = False
        self.closed = False
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
        self.approvals = ApprovalLedger.of_log(session.id, len(session), session.event)
        """The calls that wait for a decision, rebuilt from the log and kept by `append`."""
        self.held_contexts: list[ContextItem] = []
        self.forwarders: dict[str, Forwarder] = {}
        """By delegating call id: how a decision on its subagent's calls reaches it."""
        """Contexts of a parked tool batch, logged once its last call has a result."""
        self.account: Account | None = None
        """The budget account (runtime/host/budgets.py attaches it); None: no budget."""
        self.budget_hold: Any = None

    # ------------------------------------------------------------------ public surface

    @property
    def id(self) -> str:
        return self.session.id

    @property
    def meter(self) -> TokenMeter:
        """The session's request-size estimate, made on first use (the compaction gate's
        first check): an agent that never steps holds none."""
        if self._meter is None:
            self._meter = TokenMeter(self.session)
        return self._meter

    def _meter_now(self) -> TokenMeter:
        return self.meter

    async def send(
        self, content: Content, source: Source, reject_pending: bool = False
    ) -> TurnResult:
        inbox.refuse_if_closed(self)
        rejections = decisions.send_rejections(self.approvals, reject_pending)
        item = TurnItem("message", content, source, rejections or None)
        return await self._submit_decided(item, rejections)

    def pending_approvals(self) -> tuple[PendingApproval, ...]:
        return self.approvals.pending()

    async def decide(
        self,
        call_id: str,
        kind: DecisionKind,
        arguments: str | None,
        reason: str | None,
        meta: Mapping[str, Any] | None,
        source: Source,
    ) -> TurnResult:
        """Claim the call's decision, then run the turn that logs it and goes on."""
        inbox.refuse_if_closed(self)
        decision = QueuedDecision(call_id, kind, arguments, reason, meta)
        decisions.claim(self.approvals, (decision,), self.forwarders)
        return await self._submit_decided(
            TurnItem("approval", (), source, (decision,)), (decision,)
        )

    async def _submit_decided(
        self, item: TurnItem, claimed: tuple[QueuedDecision, ...]
    ) -> TurnResult:
        try:
            return await inbox.submit(self, item)
        finally:
            # Logged decisions dropped their claims at the append; these were never logged.
            decisions.release(self.approvals, claimed)

    def steer(self, content: Content, source: Source) -> None:
        inbox.refuse_if_closed(self)
        if inbox.cancellable_turn(self) is not None:
            self.steering.append((content, source))
        else:
            decisions.send_rejections(self.approvals, False)
            inbox.enqueue_nowait(self, TurnItem("message", content, source))

    def _held(self, item: TurnItem | None) -> TurnItem | None:
        """An injection while calls wait is held until the last of them has a result (it
        must not split a call from its result), like the contexts of a parked batch."""
        if item is not None and self.current_turn is None and self.approvals.blocking:
            self.held_contexts.append(ContextItem(item.content, item.source, item.meta))
            return None
        return item

    def inject(self, content: Content, source: Source, meta: Mapping[str, Any] | None) -> None:
        item = self._held(inbox.context_now(self, content, source, meta))
        if item is not None:
            inbox.enqueue_nowait(self, item)

    async def deliver(
        self, content: Content, source: Source, meta: Mapping[str, Any] | None
    ) -> None:
        """`inject`, but waiting while the inbox is full instead of raising InboxFull."""
        item = self._held(inbox.context_now(self, content, source, meta))
        if item is not None:
            await inbox.tell(self, item)

    def own(self, scope: trio.CancelScope) -> Callable[[], None]:
        """Make background work (e.g. a subagent) part of this agent's work: while it runs
        the agent is `running` and `wait_idle()` waits; `cancel()` without `keep_inbox`
        and `dispose()` cancel it. Returns the release callable (call it when it ends)."""
        if self.closed:
            scope.cancel()
        inbox.work_added(self, owned=scope)

        def release() -> None:
            if self._owned is not None and scope in self._owned:
                self._owned.discard(scope)
                inbox.work_changed(self)

        return release

    def _cancel_owned(self) -> None:
        for scope in tuple(self._owned or ()):
            scope.cancel()

    def cancel(self, reason: str | None, keep_inbox: bool) -> None:
        if not keep_inbox:
            inbox.discard_queued(self)
            self._cancel_owned()
        turn = inbox.cancellable_turn(self)
        if turn is not None:
            if turn.cancel_reason is None:
                turn.cancel_reason = reason
            turn.scope.cancel()

    async def dispose(self) -> None:
        if not self.closed:
            self.closed = True
            self.disposing = True
            self.refresh_status()
            inbox.discard_queued(self)
            self._cancel_owned()
            turn = inbox.cancellable_turn(self)
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
        while inbox.busy(self):
            if self._idle_event is None:
                self._idle_event = trio.Event()
            await self._idle_event.wait()

    async def compact(self) -> TurnResult:
        return await inbox.submit(self, TurnItem("compaction", (), Source.of_plugin("compaction")))

    def reconfigure(self, changes: Mapping[str, Any]) -> AgentOptions:
        """New options from the next step on (the running step keeps what it assembled);
        a change of the system prompt, tools or call settings reaches the header as a
        delta (or a fallback snapshot) on the next request."""
        inbox.refuse_if_closed(self)
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
            self.seed_from_options = True
        self.options = options
        return options

    def attach(self, mailbox: ActorRef[TurnItem]) -> None:
        """Wire the kernel mailbox the supervisor created for this actor; decided calls a
        crash left without a result run first (their decisions are already logged)."""
        self._mailbox = mailbox
        # In a fork child such a call is its parent's to run: the child answers it as
        # not run (it never runs twice across a family).
        forked = self.origin == "fork"
        unrun = tuple(
            QueuedDecision(
                entry.request.call_id,
                "reject" if forked else entry.decision.decision,
                reason=FORKED_UNRUN if forked else None,
                record=False,
            )
            for entry in self.approvals.decided_unrun()
            if entry.decision is not None
        )
        if unrun:
            inbox.enqueue_nowait(
                self, TurnItem("approval", (), Source.of_plugin("approvals"), unrun)
            )

    # ------------------------------------------------------------------ hooks and seams

    def chain(self, name: str) -> tuple[Any, ...]:
        return listeners_for(name, self._global_hooks, self.agent.hooks)

    async def seam(self, name: str, value: Any) -> Any:
        """Run the waterfall `name`, then stop here if the turn was cancelled: a listener
        may cancel and return normally, and what it returned must then be dropped."""
        chain = self.chain(name)
        if chain:  # no listener: the value passes as it is, with no dispatch to set up
            value = await run_waterfall(name, chain, self.agent, value)
        await trio.lowlevel.checkpoint_if_cancelled()
        return value

    async def serial_seam(self, name: str, value: Any) -> None:
        """Run the serial event `name`, then stop here if the turn was cancelled."""
        chain = self.chain(name)
        if chain:
            await run_serial(chain, self.agent, value)
        await trio.lowlevel.checkpoint_if_cancelled()

    def notify(self, name: str, value: Any) -> None:
        chain = self.chain(name)
        if chain:
            run_notify(name, chain, self.agent, value)

    def refresh_status(self) -> None:
        """The one place the status changes: it is derived from the actor's state, and
        `agent/status` is notified when the derived value differs from the last one."""
        status: AgentStatus
        if self.failure is not None:
            status = "failed"
        elif self.closed:
            status = "disposed"
        elif inbox.busy(self):
            status = "running"
        else:
            status = "idle"
        if status != self.status:
            self.status = status
            self.notify("agent/status", status)

    # ------------------------------------------------------------------ actor body

    async def run(self, mailbox: Mailbox[TurnItem]) -> None:
        """The actor's body (spawned by the kernel's Supervisor): one turn per inbox item
        until disposed.

        A crash marks the agent failed and fires `agent/error` before the exception goes on
        to the supervisor, which reports and contains it: sibling loops keep running and
        the session stays resumable.
        """
        current: TurnItem | None = None
        try:
            async for item in mailbox:
                # The mailbox hands an item over atomically with the end of the receive
                # and the turn takes it without a checkpoint in between, so a cancel or
                # dispose finds it either queued or owned by a turn scope.
                current = item
                await run_item(self, item)
                current = None
        except Exception as exc:
            self.failure = exc
            self.closed = True
            self.refresh_status()
            self.notify("agent/error", exc)
            raise
        finally:
            self.closed = True
            self._cancel_owned()
            if current is not None:
                inbox.finish_item(
                    self,
                    current,
                    TurnResult(current.turn, "error", f"agent failed: {self.failure!r}")
                    if self.failure is not None
                    else TurnResult(current.turn, "disposed"),
                )
            inbox.discard_queued(self)
            self.refresh_status()
            self._ended = True
            if self._ended_event is not None:
                self._ended_event.set()
            if self._appended is not None:
                self._appended.unpark_all()
            self._on_finished(self)

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
        if type(event.data) in LEDGER_DATA:
            self.approvals.advance(event)
        chain = listeners_for("session/event", self._global_hooks, self.agent.hooks)
        if chain:
            run_notify("session/event", chain, self.agent, event)
        if self._appended is not None:
            self._appended.unpark_all()
        return event

    def append_event(
        self,
        event_type: str,
        data: Any,
        *,
        surface: bool = False,
        sources: tuple[int, ...] | None = None,
    ) -> SessionEvent:
        """`append`, onto the surface when `surface` (the turn's own appends)."""
        return self.append(
            event_type, data, surface_op=APPEND if surface else None, sources=sources
        )

    def append_context(self, item: ContextItem | str) -> None:
        if isinstance(item, str):
            item = ContextItem((Text(item),))
        content = (Text(item.content),) if isinstance(item.content, str) else item.content
        self.append_event(
            "context/message", ContextMessage(content, item.source, item.meta), surface=True
        )

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

    async def flush(self) -> None:
        """Barrier: everything appended so far is durable when this returns."""
        await self.barrier()

    async def barrier(self) -> None:
        if not self.barrier_now():
            await self.barrier_queued()
        await trio.lowlevel.checkpoint_if_cancelled()

    async def barrier_queued(self) -> None:
        """The barrier's hand-off through the codec's queue, for when `barrier_now` declined:
        shielded, and without the cancel point `barrier` adds after it."""
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
                keeper = self._snapshots
                snapshot = None if keeper is None else keeper.take(self.session, self._meter_now)
                await self._persist(self.session.id, events)
                if snapshot is not None:
                    assert keeper is not None
                    await keeper.save(self.session.id, snapshot)
            finally:
                lock.release()

    def barrier_now(self) -> bool:
        """The barrier's hand-off written by the codec here and now (True; raising as the
        barrier would), or nothing done (False: await `barrier_queued`): a hand-off is under way,
        the codec must queue this one, or a fold snapshot is due (saving it waits).

        With no hand-off under way there is nothing to shield and no lock to take: there is
        no schedule point until the caller's next one, so no other barrier of this loop can
        start in between (persistence.md §4.2)."""
        persist_now = self._persist_now
        lock = self._flush_lock
        keeper = self._snapshots
        if (
            persist_now is None
            or (lock is not None and lock.locked())
            or (keeper is not None and keeper.due(self.session))
        ):
            return False
        end = len(self.session)
        try:
            if not persist_now(self.session.id, self.session.events_since(self._persisted)):
                return False
        except BaseException:
            self._persisted = end  # handed off, and failed: as a queued hand-off that failed
            raise
        self._persisted = end
        return True
