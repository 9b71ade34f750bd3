"""The runtime driven from asyncio (FastAPI, aiohttp, ...): `aio.Runtime` and `aio.Agent`
mirror the trio API while trio runs as a guest on the asyncio event loop; cancellation
crosses both ways (decision 0008, docs/asyncio.md, docs/spec/runtime.md §12). The guest run,
the listener and tool adapters and the events hand-off are `host/aio_*.py`."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import trio

from .control.collector import CollectorPolicy
from .control.handle import Agent as TrioAgent
from .control.handle import AgentStatus, SourceSpec
from .control.hooks import Unsubscribe
from .control.options import AgentOptions
from .errors import RuntimeClosed, sole_error
from .host.aio_adapters import adapt_listener
from .host.aio_adapters import asyncio_tool as asyncio_tool  # re-exported: aio.asyncio_tool
from .host.aio_events import EVENTS_BUFFER, EventFeed, first_seq
from .host.aio_futures import fail, resolve, wait_through_cancellation
from .host.aio_guest import GuestRun
from .host.runtime import Runtime as TrioRuntime
from .model.approvals import PendingApproval
from .model.events import SessionEvent
from .model.hook_values import TurnResult
from .model.messages import Block, Content

if TYPE_CHECKING:
    from ..actors.loop import Compactor
    from .host.telemetry import TelemetrySetting
    from .log.session import Session
    from .log.usage import UsageTotals
    from .model.header import ToolSchema
    from .model.meta import DamagedSession, SessionMeta
    from .providers.base import Provider
    from .stores.base import Store

T = TypeVar("T")


class Runtime:
    """The trio `Runtime`, driven from asyncio: `async with aio.Runtime.open(...) as rt`.

    Every coroutine method runs its trio counterpart in a trio task owned by this runtime
    and returns (or raises) what it does; cancelling the awaiting asyncio task cancels that
    trio task, and the CancelledError comes once the trio side has finished (for `send`: the
    turn is closed). Leaving the block closes every agent first, as the trio runtime does.
    """

    def __init__(self, host: GuestRun) -> None:
        self._host = host
        self._runtime: TrioRuntime | None = None
        self._calls: trio.Nursery | None = None
        self._stop = trio.Event()
        self._ready: asyncio.Future[None] = host.loop.create_future()
        self._finished: asyncio.Future[None] = host.loop.create_future()
        # By the trio handle's id: an entry lives while its aio handle does (which keeps the
        # trio handle, so the id cannot be reused meanwhile).
        self._handles: weakref.WeakValueDictionary[int, Agent] = weakref.WeakValueDictionary()

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        store: str | Store = "memory:",
        provider: Provider | None = None,
        *,
        providers: Mapping[str, Provider] | None = None,
        dev_invariants: bool = False,
        compactor: Compactor | None = None,
        compaction: bool = True,
        telemetry: TelemetrySetting = None,
        collector: CollectorPolicy | None = None,
    ) -> AsyncIterator[Runtime]:
        """Open a runtime from asyncio; the arguments are those of the trio
        `Runtime.open`. Leaving the block disposes every agent (running turns end
        `disposed`, the log is flushed) and closes the store before it returns — also when
        the task is being cancelled, which then re-raises its CancelledError."""
        host = await GuestRun.acquire()
        try:
            runtime = cls(host)
            opener = partial(
                TrioRuntime.open,
                store,
                provider,
                providers=providers,
                dev_invariants=dev_invariants,
                compactor=compactor,
                compaction=compaction,
                telemetry=telemetry,
                collector=collector,
            )
            assert host.nursery is not None
            host.nursery.start_soon(runtime._serve, opener)
            try:
                cancelled = await wait_through_cancellation(runtime._ready)
                if cancelled is not None:
                    raise cancelled
                runtime._ready.result()
                yield runtime
            finally:
                runtime._stop.set()
                cancelled = await wait_through_cancellation(runtime._finished)
                runtime._finished.result()
                if cancelled is not None:
                    raise cancelled
        finally:
            await host.release()

    async def _serve(self, opener: Callable[[], Any]) -> None:
        """The trio side: the calls nursery encloses the trio runtime, so calls still
        running while it shuts down (a `send` whose turn ends `disposed`) get their answer."""
        try:
            async with trio.open_nursery() as calls:
                try:
                    async with opener() as runtime:
                        self._runtime = runtime
                        self._calls = calls
                        resolve(self._ready, None)
                        await self._stop.wait()
                finally:
                    self._calls = None
                    calls.cancel_scope.cancel()
        except trio.Cancelled:
            self._report(RuntimeClosed("the trio host run ended before the runtime closed"))
            raise
        except BaseException as exc:
            self._report(sole_error(exc))
            if not isinstance(exc, Exception):
                raise
        finally:
            resolve(self._ready, None)
            resolve(self._finished, None)

    def _report(self, error: BaseException) -> None:
        fail(self._finished if self._ready.done() else self._ready, error)

    # ------------------------------------------------------------------ the bridge

    async def run_trio(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Await the trio function `fn(*args)` in a trio task this runtime owns and return
        its result (or raise its exception). Cancelling the awaiting asyncio task cancels
        that trio task; the CancelledError is raised once the trio side has finished."""
        calls = self._calls
        if calls is None:
            raise RuntimeClosed("the runtime is closed; it runs no more calls")
        done: asyncio.Future[T] = self._host.loop.create_future()
        scope = trio.CancelScope()
        calls.start_soon(_call_in_trio, scope, done, fn, args)
        cancelled = await wait_through_cancellation(done, scope.cancel)
        if cancelled is not None:
            if not done.cancelled():
                done.exception()  # it is superseded by the cancellation; mark it retrieved
            raise cancelled
        return done.result()

    def _trio(self) -> TrioRuntime:
        if self._runtime is None:
            raise RuntimeClosed("the runtime is not open")
        return self._runtime

    def _handle(self, agent: TrioAgent) -> Agent:
        handle = self._handles.get(id(agent))
        if handle is None:
            handle = self._handles[id(agent)] = Agent(self, agent)
        return handle

    # ------------------------------------------------------------------ the trio API

    @property
    def trio_runtime(self) -> TrioRuntime:
        """The trio `Runtime` inside (for trio-native code: listeners registered on it run
        as trio code; its coroutines must be awaited through `run_trio`)."""
        return self._trio()

    def on(self, name: str, listener: Any) -> Unsubscribe:
        """A runtime-wide listener, run as asyncio code (see docs/asyncio.md, Listeners):
        called on the asyncio thread with the `aio.Agent`; returns an unsubscribe."""
        return self._trio().on(name, adapt_listener(name, listener, self._handle))

    def get(self, agent_id: str) -> Agent | None:
        """The live agent of session `agent_id`, or None."""
        agent = self._trio().get(agent_id)
        return None if agent is None else self._handle(agent)

    @property
    def agents(self) -> tuple[Agent, ...]:
        """Every live agent of this runtime."""
        return tuple(self._handle(agent) for agent in self._trio().agents)

    @property
    def invariant_checks(self) -> int:
        """How many requests the dev invariant has checked and passed."""
        return self._trio().invariant_checks

    async def list_sessions(self) -> tuple[SessionMeta | DamagedSession, ...]:
        """Every stored session, live or not: its meta, or a `DamagedSession` in its place."""
        return await self.run_trio(self._trio().list_sessions)

    async def spawn(self, options: AgentOptions, session_id: str | None = None) -> Agent:
        """A new agent on a new session (`Runtime.spawn`)."""
        return self._handle(await self.run_trio(self._trio().spawn, options, session_id))

    async def resume(self, session_id: str, options: AgentOptions | None = None) -> Agent:
        """A new loop instance on a stored session (`Runtime.resume`; without `options`
        they are restored from its last request header, tools excepted)."""
        return self._handle(await self.run_trio(self._trio().resume, session_id, options))

    async def fork(
        self,
        session_id: str,
        boundary: int | None = None,
        child_id: str | None = None,
        options: AgentOptions | None = None,
    ) -> Agent:
        """A child agent seeded with the source's events up to `boundary` (`Runtime.fork`)."""
        child = await self.run_trio(self._trio().fork, session_id, boundary, child_id, options)
        return self._handle(child)


async def _call_in_trio(
    scope: trio.CancelScope,
    done: asyncio.Future[Any],
    fn: Callable[..., Awaitable[Any]],
    args: tuple[Any, ...],
) -> None:
    """One bridged call; its outcome goes to `done` (never an exception group)."""
    try:
        with scope:
            resolve(done, await fn(*args))
        # Cancelled through `scope`: the asyncio caller raises its own CancelledError.
        resolve(done, None)
    except trio.Cancelled:
        fail(done, RuntimeClosed("the runtime closed while the call was running"))
        raise
    except BaseException as exc:
        fail(done, sole_error(exc))
        if not isinstance(exc, Exception):
            raise


class Agent:
    """The asyncio handle of one agent; each member behaves as its trio `Agent` counterpart.

    Synchronous members (`steer`, `inject`, `cancel`, `session`, `status`, ...) act on the
    trio handle directly: trio runs on the same thread, so they raise exactly what it
    raises. Coroutines go through `Runtime.run_trio` (cancellation crosses both ways).
    """

    def __init__(self, runtime: Runtime, agent: TrioAgent) -> None:
        self._runtime = runtime
        self.trio_agent = agent
        """The trio `Agent` inside (its coroutines must go through `rt.run_trio`)."""

    @property
    def id(self) -> str:
        """The session id."""
        return self.trio_agent.id

    @property
    def session(self) -> Session:
        """The session log (`events`, `derive_messages()`, `header()`, `meta`, ...)."""
        return self.trio_agent.session

    @property
    def options(self) -> AgentOptions:
        """The options this loop instance runs with (read-only)."""
        return self.trio_agent.options

    @property
    def status(self) -> AgentStatus:
        """`idle`, `running`, `disposed` or `failed`."""
        return self.trio_agent.status

    @property
    def current_tools(self) -> tuple[ToolSchema, ...]:
        """The tool schemas assembled for the latest step."""
        return self.trio_agent.current_tools

    def usage(self) -> UsageTotals:
        """The tokens this session's model and summarizer calls used."""
        return self.trio_agent.usage()

    def reconfigure(self, **changes: Any) -> AgentOptions:
        """Change this agent's options from the next step (`Agent.reconfigure`); tools
        written for asyncio need `asyncio_tool` here too."""
        return self.trio_agent.reconfigure(**changes)

    def on(self, name: str, listener: Any) -> Unsubscribe:
        """Subscribe `listener` to hook `name` for this agent, run as asyncio code."""
        return self.trio_agent.on(name, adapt_listener(name, listener, self._runtime._handle))

    async def send(
        self,
        content: str | Content | list[Block],
        *,
        source: SourceSpec = None,
        reject_pending: bool = False,
    ) -> TurnResult:
        """Queue one turn and wait until it ends (`Agent.send`). Cancelled while queued, the
        item is withdrawn; while its turn runs, the turn ends `aborted` ("caller cancelled")
        and the CancelledError comes once the turn is closed and flushed."""
        return await self._runtime.run_trio(
            partial(self.trio_agent.send, content, source=source, reject_pending=reject_pending)
        )

    def pending_approvals(self) -> tuple[PendingApproval, ...]:
        """The calls waiting for a decision (`Agent.pending_approvals`)."""
        return self.trio_agent.pending_approvals()

    async def approve(
        self,
        call_id: str,
        arguments: str | Mapping[str, Any] | None = None,
        *,
        meta: Mapping[str, Any] | None = None,
        source: SourceSpec = None,
    ) -> TurnResult:
        """Approve a waiting call, run it and continue the turn (`Agent.approve`)."""
        return await self._runtime.run_trio(
            partial(self.trio_agent.approve, call_id, arguments, meta=meta, source=source)
        )

    async def reject(
        self,
        call_id: str,
        reason: str = "no",
        *,
        meta: Mapping[str, Any] | None = None,
        source: SourceSpec = None,
    ) -> TurnResult:
        """Reject a waiting call and continue the turn (`Agent.reject`)."""
        return await self._runtime.run_trio(
            partial(self.trio_agent.reject, call_id, reason, meta=meta, source=source)
        )

    def steer(self, content: str | Content | list[Block], *, source: SourceSpec = None) -> None:
        """Redirect the running turn (`Agent.steer`)."""
        self.trio_agent.steer(content, source=source)

    def inject(
        self,
        content: str | Content | list[Block],
        source: SourceSpec = "plugin",
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        """Add durable context to the conversation (`Agent.inject`)."""
        self.trio_agent.inject(content, source, meta)

    async def deliver(
        self,
        content: str | Content | list[Block],
        source: SourceSpec = "plugin",
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        """`inject` that waits for room in a full inbox (`Agent.deliver`)."""
        await self._runtime.run_trio(self.trio_agent.deliver, content, source, meta)

    def cancel(self, reason: str | None = None, keep_inbox: bool = False) -> None:
        """Cancel the running turn (and, without `keep_inbox`, what is queued)."""
        self.trio_agent.cancel(reason, keep_inbox)

    async def dispose(self) -> None:
        """Stop the agent for good; returns once its loop has ended (`Agent.dispose`)."""
        await self._runtime.run_trio(self.trio_agent.dispose)

    async def wait_idle(self) -> None:
        """Wait until no turn runs and nothing is queued (`Agent.wait_idle`)."""
        await self._runtime.run_trio(self.trio_agent.wait_idle)

    async def compact(self) -> TurnResult:
        """Compact now, as a one-shot turn (`Agent.compact`)."""
        return await self._runtime.run_trio(self.trio_agent.compact)

    async def events(
        self, after: int | None = None, *, buffer: int = EVENTS_BUFFER
    ) -> AsyncGenerator[SessionEvent, None]:
        """The session's events after seq `after` (all when None): the stored ones, then
        each new one, in seq order, until the agent is closed (`Agent.events`).

        A trio task reads the log and hands events over through a buffer of at most
        `buffer` events; while it is full that reader pauses. The loop never waits for it
        (the log is the loop's buffer), so a slow consumer makes nothing wait, be lost or
        be reordered. Close it early with `contextlib.aclosing`.
        """
        position = first_seq(after)
        if isinstance(buffer, bool) or not isinstance(buffer, int) or buffer < 1:
            raise ValueError(f"buffer must be an int >= 1, got {buffer!r}")
        calls = self._runtime._calls
        if calls is not None:
            feed = EventFeed(buffer)
            calls.start_soon(feed.pump, self.trio_agent, after)
            try:
                while True:
                    while feed.buffer:
                        event = feed.take()
                        position = event.seq + 1
                        yield event
                    if feed.ended.done():
                        break
                    feed.arrived.clear()
                    await feed.arrived.wait()
            finally:
                feed.scope.cancel()
                cancelled = await wait_through_cancellation(feed.ended)
                feed.ended.exception()  # retrieved here; raised below unless superseded
                if cancelled is not None:
                    raise cancelled
            feed.ended.result()
            if not feed.cut_short:
                return
        # The runtime has closed, and so has every agent: the rest of the log is in memory.
        while position < len(self.session):
            yield self.session.event(position)
            position += 1

    def __repr__(self) -> str:
        return f"aio.Agent(id={self.id!r}, status={self.status!r})"
