"""asyncio code run from trio tasks: an awaitable run as an asyncio task inside the turn
and cancelled with it (`await_on_asyncio`), and through it asyncio listeners (with a
waterfall's `next` served on trio) and asyncio tools (`asyncio_tool`)."""

from __future__ import annotations

import asyncio
import inspect
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

import trio
from attrs import evolve

from ..control.handle import Agent as TrioAgent
from ..control.handle import ToolContext
from ..control.hooks import HOOK_KINDS
from ..control.options import Tool, ToolOutput
from ..errors import HookError, HostTaskCancelled, UnknownHookError
from .aio_futures import fail, resolve

T = TypeVar("T")


class Wakeup:
    """A re-armable trio wake-up that asyncio callbacks fire on the shared thread."""

    def __init__(self) -> None:
        self._event = trio.Event()

    def fire(self) -> None:
        """Wake the waiting trio task (or the next one to wait)."""
        self._event.set()

    async def wait(self) -> None:
        """Wait until fired, then re-arm."""
        await self._event.wait()
        self._event = trio.Event()


class Downstream:
    """The `next` an adapted waterfall listener awaits on asyncio: each call is queued for the
    trio task running the listener, which runs the rest of the chain (inside the turn's
    cancel scope) and hands the value back through an asyncio future."""

    def __init__(self, trio_next: Callable[..., Awaitable[Any]], wakeup: Wakeup) -> None:
        self._trio_next = trio_next
        self.wakeup = wakeup
        self.calls: deque[tuple[tuple[Any, ...], asyncio.Future[Any]]] = deque()

    def __call__(self, *replacement: Any) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.calls.append((replacement, future))
        self.wakeup.fire()
        return future

    async def run_one(self) -> None:
        """Run the oldest queued `next` call on trio and hand its outcome back."""
        replacement, future = self.calls.popleft()
        try:
            value = await self._trio_next(*replacement)
        except trio.Cancelled:
            future.cancel()
            raise
        except Exception as exc:
            fail(future, exc)
        else:
            resolve(future, value)


async def await_on_asyncio(
    awaitable: Awaitable[T],
    cancelled_outside: Callable[[], Exception],
    downstream: Downstream | None = None,
) -> T:
    """Await `awaitable` as an asyncio task from a trio task. A trio cancellation (the turn
    is cancelled) cancels the asyncio task and waits, shielded, until it has ended before
    it propagates; a waterfall's `next` calls are served meanwhile."""
    task = asyncio.ensure_future(awaitable)
    wakeup = downstream.wakeup if downstream is not None else Wakeup()
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


def adapt_listener(name: str, listener: Any, handle_of: Callable[[TrioAgent], object]) -> Any:
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
                return await await_on_asyncio(result, cancelled_outside)
            return result

        return serial

    async def waterfall(agent: TrioAgent, value: Any, trio_next: Any) -> Any:
        downstream = Downstream(trio_next, Wakeup())
        result = listener(handle_of(agent), value, downstream)
        if not inspect.isawaitable(result):
            return result
        return await await_on_asyncio(result, cancelled_outside, downstream)

    return waterfall


class OnAsyncio:
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

        return await await_on_asyncio(result, cancelled_outside)


def asyncio_tool(tool: Tool) -> Tool:
    """`tool` with its `execute` run as asyncio code: called on the asyncio thread, an
    awaitable it returns runs as an asyncio task; cancelling the turn cancels that task and
    the call ends `TOOL_CANCELLED` once it has stopped. `ctx` is the trio `ToolContext`
    (its `agent` is the trio handle: use its synchronous members). Idempotent."""
    if isinstance(tool.execute, OnAsyncio):
        return tool
    return evolve(tool, execute=OnAsyncio(tool.name, tool.execute))
