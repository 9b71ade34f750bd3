"""The narrow views of a loop instance its phases are handed (the actor implements them all):
the turn's appends, seams and barrier; what a step reads and keeps; the inbox's state; and
what the compaction gate sees."""

from __future__ import annotations

from typing import Any, Protocol

import trio

from ...runtime.control.accounts import Account
from ...runtime.control.approvals import Forwarder
from ...runtime.control.handle import Agent, AgentStatus
from ...runtime.control.options import AgentOptions, Tool
from ...runtime.log.approvals import ApprovalLedger
from ...runtime.log.session import Session
from ...runtime.log.tokens import TokenMeter
from ...runtime.model.events import SessionEvent, SurfaceOp
from ...runtime.model.header import ToolSchema
from ...runtime.model.hook_values import ContextItem
from ...runtime.model.messages import Content, Message, Source
from ...runtime.providers.base import Provider
from ..kernel import ActorRef
from .values import OpenTurn, TurnItem


class LoopView(Protocol):
    """What the compaction gate reads and appends through."""

    session: Session
    options: AgentOptions
    provider: Provider
    current_tools: tuple[ToolSchema, ...]

    @property
    def meter(self) -> TokenMeter: ...

    def append(
        self,
        event_type: str,
        data: Any,
        *,
        surface_op: SurfaceOp | None = None,
        sources: tuple[int, ...] | None = None,
    ) -> SessionEvent: ...


class Compactor(Protocol):
    """The compaction gate the loop consults at `agent/pre-step` (and on overflow)."""

    async def compact_if_needed(
        self,
        loop: LoopView,
        full_system_prompt: str,
        session_prefix: tuple[Message, ...],
        cancel: trio.CancelScope,
    ) -> None: ...

    async def compact_now(
        self,
        loop: LoopView,
        full_system_prompt: str,
        session_prefix: tuple[Message, ...],
        cancel: trio.CancelScope,
        *,
        retain_zero: bool = False,
    ) -> bool: ...


class TurnContext(Protocol):
    """A turn's appends (the session's only writer), its seams and its flush barrier."""

    session: Session
    agent: Agent
    approvals: ApprovalLedger
    """The calls that wait for a decision (or were decided and have no result yet)."""
    held_contexts: list[ContextItem]
    """Contexts of a parked tool batch, logged once its last call has a result."""
    forwarders: dict[str, Forwarder]
    """By delegating call id: how a decision on its subagent's calls reaches the subagent."""
    account: Account | None
    """The budget account the agent's model calls are charged to (None: no budget)."""
    budget_hold: Any
    """The reservation of the model call in flight (actors/loop/budget.py), or None."""

    def append_event(
        self,
        event_type: str,
        data: Any,
        *,
        surface: bool = False,
        sources: tuple[int, ...] | None = None,
    ) -> SessionEvent:
        """Append (`surface`: onto the surface) and notify `session/event` listeners."""
        ...

    def append_context(self, item: ContextItem | str) -> None:
        """Append a `context/message` onto the surface."""
        ...

    def chain(self, name: str) -> tuple[Any, ...]:
        """The listeners of hook `name`, global ones first."""
        ...

    async def seam(self, name: str, value: Any) -> Any:
        """Run the waterfall `name`; a cancel it left pending lands here."""
        ...

    async def serial_seam(self, name: str, value: Any) -> None:
        """Run the serial event `name`; a cancel it left pending lands here."""
        ...

    async def barrier(self) -> None:
        """Everything appended so far is handed to the codec and durable."""
        ...

    def barrier_now(self) -> bool:
        """The barrier written here with no schedule point (True), or nothing done (False:
        await `barrier_queued`)."""
        ...

    async def barrier_queued(self) -> None:
        """The barrier handed to the codec's queue (shielded), once `barrier_now` declined."""
        ...


class StepContext(TurnContext, LoopView, Protocol):
    """What a step reads (options, provider, compactor, steering) and keeps between steps
    (the tools and prefix it composed, the header it recorded)."""

    compactor: Compactor | None
    steering: list[tuple[Content, Source]]
    """Steering messages waiting for the next step."""
    configured_tools: tuple[AgentOptions, tuple[Tool, ...]] | None
    """The options' tools in their configured order, for the options they came from."""
    session_prefix: tuple[Message, ...] | None
    """Composed once per instance before its first pre-step; None until then."""
    prefix_chain: bytes
    logged_header: bool
    """Whether this instance wrote its anchoring `request/header` snapshot."""
    seed_from_options: bool
    """The next request's config starts from the options (this instance's first request,
    or after `reconfigure` changed a call setting), else from the header."""


class InboxContext(Protocol):
    """The inbox's state: the kernel mailbox, the work outstanding, who waits for idle."""

    session: Session
    status: AgentStatus
    closed: bool
    steering: list[tuple[Content, Source]]
    current_turn: OpenTurn | None
    _mailbox: ActorRef[TurnItem] | None
    _outstanding: int
    """Items sent and not yet ended (running, queued, or handed over)."""
    _owned: set[trio.CancelScope] | None
    """Background work owned with `own()`; created on first use."""
    _idle_event: trio.Event | None
    """Set when the agent next becomes idle; exists only while someone waits."""
    failure: BaseException | None
    """What ended the loop instance, once it failed."""

    def chain(self, name: str) -> tuple[Any, ...]: ...

    def notify(self, name: str, value: Any) -> None: ...

    def refresh_status(self) -> None:
        """Derive the status from the state; notify `agent/status` when it changed."""
        ...

    def append_context(self, item: ContextItem | str) -> None: ...


class LoopContext(StepContext, InboxContext, Protocol):
    """A whole loop instance, as its turn sees it."""

    disposing: bool

    @property
    def id(self) -> str: ...
