"""The runtime driven from asyncio (FastAPI, aiohttp, ...): `aio.Runtime` and `aio.Agent`
mirror the trio API while trio runs as a guest on the asyncio event loop; cancellation
crosses both ways (decision 0008, docs/asyncio.md, docs/spec/runtime.md §12)."""

from __future__ import annotations

import asyncio
import inspect
import weakref
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from contextlib import aclosing, asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, cast

import trio
from attrs import evolve

from .control.collector import CollectorPolicy
from .control.handle import Agent as TrioAgent
from .control.handle import AgentStatus, SourceSpec
from .control.hooks import HOOK_KINDS, Unsubscribe
from .control.options import AgentOptions, Tool, ToolContext, ToolOutput
from .errors import (
    HookError,
    HostError,
    HostTaskCancelled,
    RuntimeClosed,
    UnknownHookError,
    sole_error,
)
from .host.runtime import Runtime as TrioRuntime
from .model.events import SessionEvent
from .model.hook_values import TurnResult
from .model.messages import Block, Content

if TYPE_CHECKING:
    from outcome import Outcome

    from ..actors.loop import Compactor
    from .host.telemetry import TelemetrySetting
    from .log.session import Session
    from .log.usage import UsageTotals
    from .model.header import ToolSchema
    from .model.meta import DamagedSession, SessionMeta
    from .providers.base import Provider
    from .stores.base import Store

T = TypeVar("T")

EVENTS_BUFFER = 64
"""Default bound of the hand-off between a trio events reader and its asyncio consumer."""


# ---------------------------------------------------------------------- asyncio side waits


async def _wait_through_cancellation(
    future: asyncio.Future[Any], on_cancel: Callable[[], object] | None = None
) -> asyncio.CancelledError | None:
    """Wait until `future` is done even if the waiting task is cancelled meanwhile (asyncio
    has no shield for the waiter itself). `on_cancel` runs at the first cancellation; the
    last CancelledError caught is returned so the caller re-raises it once it is done."""
    caught: asyncio.CancelledError | None = None
    while not future.done():
        try:
            await asyncio.wait((future,))
        except asyncio.CancelledError as exc:
            if caught is None and on_cancel is not None:
                on_cancel()
            caught = exc
    return caught


def _resolve(future: asyncio.Future[T], value: T) -> None:
    if not future.done():
        future.set_result(value)


def _fail(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


# ---------------------------------------------------------------------- the guest run


class _Host:
    """The trio guest run on one asyncio event loop, shared by every `aio.Runtime` opened on
    it (trio allows one run per thread). Trio's tasks run in callbacks of the asyncio loop,
    on its thread; only trio's wait for I/O sits in a worker thread. It starts with the
    first runtime and ends, awaited, when the last one has closed."""

    _running: ClassVar[weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Host]] = (
        weakref.WeakKeyDictionary()
    )

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.users = 0
        self.stopping = False
        self.nursery: trio.Nursery | None = None
        self.ready: asyncio.Future[None] = loop.create_future()
        self.done: asyncio.Future[Outcome[None]] = loop.create_future()
        self._stop = trio.Event()

    @classmethod
    async def acquire(cls) -> _Host:
        """The running loop's host, started if there is none; the caller must `release`."""
        loop = asyncio.get_running_loop()
        while True:
            host = cls._running.get(loop)
            if host is None:
                host = cls(loop)
                host._start()
                cls._running[loop] = host
            if not host.stopping:
                break
            await asyncio.wait((host.done,))  # the previous run is ending: start anew after it
        host.users += 1
        try:
            cancelled = await _wait_through_cancellation(host.ready)
            if cancelled is not None:
                raise cancelled
        except BaseException:
            await host.release()
            raise
        return host

    def _start(self) -> None:
        try:
            trio.lowlevel.start_guest_run(
                self._main,
                run_sync_soon_threadsafe=self.loop.call_soon_threadsafe,
                run_sync_soon_not_threadsafe=self.loop.call_soon,
                done_callback=self._finished,
                # asyncio owns signal.set_wakeup_fd (add_signal_handler); trio must not take it.
                host_uses_signal_set_wakeup_fd=True,
            )
        except RuntimeError as exc:
            raise HostError(
                "actorloop.runtime.aio runs trio as a guest of the asyncio loop, but trio is "
                "already running on this thread; from trio code use actorloop.runtime.Runtime"
            ) from exc

    async def _main(self) -> None:
        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            _resolve(self.ready, None)
            await self._stop.wait()

    def _finished(self, run: Outcome[None]) -> None:
        # Normally after the last release; early only if the run itself failed (a
        # KeyboardInterrupt trio delivered): either way no new runtime may join it.
        self.stopping = True
        if self._running.get(self.loop) is self:
            del self._running[self.loop]
        _resolve(self.done, run)

    async def release(self) -> None:
        """One runtime less; the last one ends the guest run and waits until it has ended
        (so the trio run always finishes before the asyncio loop can close)."""
        self.users -= 1
        if self.users:
            return
        self.stopping = True
        self._stop.set()
        cancelled = await _wait_through_cancellation(self.done)
        self.done.result().unwrap()
        if cancelled is not None:
            raise cancelled


# ---------------------------------------------------------------------- trio side awaiting asyncio


class _Wakeup:
    """A re-armable trio wake-up that asyncio callbacks fire on the shared thread."""

    def __init__(self) -> None:
        self._event = trio.Event()

    def fire(self) -> None:
        self._event.set()

    async def wait(self) -> None:
        await self._event.wait()
        self._event = trio.Event()


class _Downstream:
    """The `next` an adapted waterfall listener awaits on asyncio: each call is queued for the
    trio task running the listener, which runs the rest of the chain (inside the turn's
    cancel scope) and hands the value back through an asyncio future."""

    def __init__(self, trio_next: Callable[..., Awaitable[Any]], wakeup: _Wakeup) -> None:
        self._trio_next = trio_next
        self.wakeup = wakeup
        self.calls: deque[tuple[tuple[Any, ...], asyncio.Future[Any]]] = deque()

    def __call__(self, *replacement: Any) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.calls.append((replacement, future))
        self.wakeup.fire()
        return future

    async def run_one(self) -> None:
        replacement, future = self.calls.popleft()
        try:
            value = await self._trio_next(*replacement)
        except trio.Cancelled:
            future.cancel()
            raise
        except Exception as exc:
            _fail(future, exc)
        else:
            _resolve(future, value)


async def _await_on_asyncio(
    awaitable: Awaitable[T],
    cancelled_outside: Callable[[], Exception],
    downstream: _Downstream | None = None,
) -> T:
    """Await `awaitable` as an asyncio task from a trio task. A trio cancellation (the turn
    is cancelled) cancels the asyncio task and waits, shielded, until it has ended before
    it propagates; a waterfall's `next` calls are served meanwhile."""
    task = asyncio.ensure_future(awaitable)
    wakeup = downstream.wakeup if downstream is not None else _Wakeup()
    task.add_done_callback(lambda _: wakeup.fire())
    try:
        while not task.done():
            if downstream is not None and downstream.calls:
                await downstream.run_one()
            else:
                await wakeup.wait()
    except BaseException:
        task.cancel()
        with trio.CancelScope(shield=True):
            while not task.done():
                await wakeup.wait()
        if not task.cancelled():
            task.exception()  # superseded by the trio cancellation; marked as retrieved
        raise
    if task.cancelled():
        raise cancelled_outside()
    return task.result()


# ---------------------------------------------------------------------- listeners and tools


def _adapt_listener(name: str, listener: Any, handle_of: Callable[[TrioAgent], Agent]) -> Any:
    """The trio listener that runs `listener` as asyncio code: it is called on the asyncio
    thread with the `aio.Agent`; an awaitable it returns runs as an asyncio task inside the
    turn (cancelled with it); a waterfall listener gets a `next` it can await on asyncio."""
    kind = HOOK_KINDS.get(name)
    if kind is None:
        raise UnknownHookError(name, ", ".join(sorted(HOOK_KINDS)))
    if not callable(listener):
        raise HookError(f"listener for {name!r} is not callable")

    def cancelled_outside() -> Exception:
        return HookError(f"{name} listener {listener!r}: its asyncio task was cancelled")

    if kind == "notify":
        if inspect.iscoroutinefunction(listener) or inspect.iscoroutinefunction(
            getattr(listener, "__call__", None)  # noqa: B004 - objects with an async __call__
        ):
            raise TypeError(
                f"{name} is a notify event: its listeners are called synchronously and must "
                f"be plain functions (def), not async ({listener!r})"
            )

        def notify(agent: TrioAgent, value: Any) -> None:
            listener(handle_of(agent), value)

        return notify

    if kind == "serial":

        async def serial(agent: TrioAgent, value: Any) -> Any:
            # The answer matters to some serial hooks (`agent/turn-stop`): pass it on.
            result = listener(handle_of(agent), value)
            if inspect.isawaitable(result):
                return await _await_on_asyncio(result, cancelled_outside)
            return result

        return serial

    async def waterfall(agent: TrioAgent, value: Any, trio_next: Any) -> Any:
        downstream = _Downstream(trio_next, _Wakeup())
        result = listener(handle_of(agent), value, downstream)
        if not inspect.isawaitable(result):
            return result
        return await _await_on_asyncio(result, cancelled_outside, downstream)

    return waterfall


class _OnAsyncio:
    """A tool's `execute` run as asyncio code (see `asyncio_tool`)."""

    def __init__(self, name: str, execute: Callable[..., Any]) -> None:
        self.name = name
        self.inner = execute

    async def __call__(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        result = self.inner(args, ctx)
        if not inspect.isawaitable(result):
            return cast(ToolOutput, result)

        def cancelled_outside() -> Exception:
            return HostTaskCancelled(f"tool {self.name!r}: its asyncio task was cancelled")

        return await _await_on_asyncio(result, cancelled_outside)


def asyncio_tool(tool: Tool) -> Tool:
    """`tool` with its `execute` run as asyncio code: called on the asyncio thread, an
    awaitable it returns runs as an asyncio task; cancelling the turn cancels that task and
    the call ends `TOOL_CANCELLED` once it has stopped. `ctx` is the trio `ToolContext`
    (its `agent` is the trio handle: use its synchronous members). Idempotent."""
    if isinstance(tool.execute, _OnAsyncio):
        return tool
    return evolve(tool, execute=_OnAsyncio(tool.name, tool.execute))


# ---------------------------------------------------------------------- events


def _first_seq(after: int | None) -> int:
    if after is not None and (isinstance(after, bool) or not isinstance(after, int)):
        raise TypeError(f"after must be a seq (int) or None, got {after!r}")
    return 0 if after is None else max(after + 1, 0)


class _EventFeed:
    """The bounded hand-off between a trio reader of `agent.events()` and one asyncio
    consumer. Both run on the loop's thread, so the deque needs no lock; the reader waits
    while it is full and, since the trio iterator only keeps a position in the log, that
    wait never holds the loop up, drops or reorders anything."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.buffer: deque[SessionEvent] = deque()
        self.scope = trio.CancelScope()
        self.arrived = asyncio.Event()
        self.ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.cut_short = False
        """The reader was stopped by the runtime's end, not by the log's: every agent is
        closed by then, so the consumer reads the rest from the in-memory log."""
        self._room = trio.Event()

    async def pump(self, agent: TrioAgent, after: int | None) -> None:
        try:
            with self.scope:
                async with aclosing(agent.events(after)) as events:
                    async for event in events:
                        while len(self.buffer) >= self.capacity:
                            self._room = trio.Event()
                            await self._room.wait()
                        self.buffer.append(event)
                        self.arrived.set()
        except trio.Cancelled:
            self.cut_short = True
            raise
        except BaseException as exc:
            _fail(self.ended, sole_error(exc))
            if not isinstance(exc, Exception):
                raise
        finally:
            _resolve(self.ended, None)
            self.arrived.set()

    def take(self) -> SessionEvent:
        event = self.buffer.popleft()
        self._room.set()
        return event


# ---------------------------------------------------------------------- the facade


class Runtime:
    """The trio `Runtime`, driven from asyncio: `async with aio.Runtime.open(...) as rt`.

    Every coroutine method runs its trio counterpart in a trio task owned by this runtime
    and returns (or raises) what it does; cancelling the awaiting asyncio task cancels that
    trio task, and the CancelledError comes once the trio side has finished (for `send`: the
    turn is closed). Leaving the block closes every agent first, as the trio runtime does.
    """

    def __init__(self, host: _Host) -> None:
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
        host = await _Host.acquire()
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
                cancelled = await _wait_through_cancellation(runtime._ready)
                if cancelled is not None:
                    raise cancelled
                runtime._ready.result()
                yield runtime
            finally:
                runtime._stop.set()
                cancelled = await _wait_through_cancellation(runtime._finished)
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
                        _resolve(self._ready, None)
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
            _resolve(self._ready, None)
            _resolve(self._finished, None)

    def _report(self, error: BaseException) -> None:
        _fail(self._finished if self._ready.done() else self._ready, error)

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
        cancelled = await _wait_through_cancellation(done, scope.cancel)
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
        return self._trio().on(name, _adapt_listener(name, listener, self._handle))

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
            _resolve(done, await fn(*args))
        # Cancelled through `scope`: the asyncio caller raises its own CancelledError.
        _resolve(done, None)
    except trio.Cancelled:
        _fail(done, RuntimeClosed("the runtime closed while the call was running"))
        raise
    except BaseException as exc:
        _fail(done, sole_error(exc))
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
        return self.trio_agent.on(name, _adapt_listener(name, listener, self._runtime._handle))

    async def send(
        self, content: str | Content | list[Block], *, source: SourceSpec = None
    ) -> TurnResult:
        """Queue one turn and wait until it ends (`Agent.send`). Cancelled while queued, the
        item is withdrawn; while its turn runs, the turn ends `aborted` ("caller cancelled")
        and the CancelledError comes once the turn is closed and flushed."""
        return await self._runtime.run_trio(partial(self.trio_agent.send, content, source=source))

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
        position = _first_seq(after)
        if isinstance(buffer, bool) or not isinstance(buffer, int) or buffer < 1:
            raise ValueError(f"buffer must be an int >= 1, got {buffer!r}")
        calls = self._runtime._calls
        if calls is not None:
            feed = _EventFeed(buffer)
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
                cancelled = await _wait_through_cancellation(feed.ended)
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
