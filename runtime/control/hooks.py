"""Named hook events with waterfall, serial and notify dispatch over global + agent listeners.

Order: runtime-wide listeners first, then the agent's own, each in registration order; the
first-registered waterfall listener is outermost, so `return (mine, *await next())` puts
contributions on the wire in registration order.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Literal, Protocol, TypeAlias, TypeVar

from ..errors import HookError, UnknownHookError

log = logging.getLogger("actorloop.hooks")

HookKind: TypeAlias = Literal["waterfall", "serial", "notify"]
Unsubscribe: TypeAlias = Callable[[], None]

V = TypeVar("V")
# A listener's first argument is the `Agent` the hook runs for (control/handle.py). The
# registry stands below the handle, so the protocols name it `Any`: a listener annotated
# `agent: Agent` fits them as it is.
V_contra = TypeVar("V_contra", contravariant=True)


class Next(Protocol[V]):
    """The `next` a waterfall listener gets: the downstream value (at most one call);
    `next(replacement)` passes a different value down."""

    def __call__(self, replacement: V = ..., /) -> Awaitable[V]: ...


class WaterfallListener(Protocol[V]):
    """`async def listener(agent, value, next) -> value`: return the (new) value; the value
    passed in is frozen. Runs inside the turn's cancel scope."""

    def __call__(self, agent: Any, value: V, next: Next[V], /) -> Awaitable[V] | V: ...


class SerialListener(Protocol[V_contra]):
    """`async def listener(agent, value) -> None`, awaited in order inside the turn's cancel
    scope."""

    def __call__(self, agent: Any, value: V_contra, /) -> Awaitable[None] | None: ...


class NotifyListener(Protocol[V_contra]):
    """`def listener(agent, value) -> None`, called synchronously; a raised exception is
    logged and contained. Must not be async."""

    def __call__(self, agent: Any, value: V_contra, /) -> None: ...


Listener: TypeAlias = WaterfallListener[Any] | SerialListener[Any] | NotifyListener[Any]
"""Any listener; docs/hooks.md lists each hook with its kind and value type."""

HOOK_KINDS: dict[str, HookKind] = {
    "agent/session-prefix": "waterfall",
    "system-prompt/assemble": "waterfall",
    "prompt/submit": "waterfall",
    "agent/request": "waterfall",
    "agent/request-error": "waterfall",
    "tools/pre-execute": "waterfall",
    "tools/approval": "waterfall",
    "tools/post-execute": "waterfall",
    "agent/turn-continuation": "waterfall",
    "tools/assemble": "waterfall",
    "agent/step-result": "waterfall",
    "tools/execute": "waterfall",
    "agent/pre-step": "serial",
    "agent/post-step": "serial",
    "agent/turn-stop": "serial",
    "agent/inbox": "notify",
    "agent/session-start": "notify",
    "session/event": "notify",
    "agent/status": "notify",
    "agent/error": "notify",
}


Chain: TypeAlias = tuple[Callable[..., Any], ...]
"""A dispatch chain: the listeners of one hook, in call order (their kind is the hook's)."""


class HookRegistry:
    """Listeners by hook name for one scope (the runtime, or one agent)."""

    __slots__ = ("_chains", "_listeners")

    def __init__(self) -> None:
        self._listeners: dict[str, list[Callable[..., Any]]] = {}
        self._chains: dict[str, Chain] = {}
        """Snapshot of each name's listeners, dropped whenever that name's list changes."""

    def on(self, name: str, listener: Listener) -> Unsubscribe:
        """Add `listener` for the hook `name`; returns a callable that removes it again."""
        if name not in HOOK_KINDS:
            raise UnknownHookError(name, ", ".join(sorted(HOOK_KINDS)))
        if not callable(listener):
            raise HookError(f"listener for {name!r} is not callable")
        if HOOK_KINDS[name] == "notify" and _is_async(listener):
            raise TypeError(
                f"{name} is a notify event: its listeners are called synchronously and must "
                f"be plain functions (def), not async ({listener!r})"
            )
        bucket: list[Callable[..., Any]] = self._listeners.setdefault(name, [])
        bucket.append(listener)
        self._chains.pop(name, None)

        def unsubscribe() -> None:
            if listener in bucket:
                bucket.remove(listener)
                self._chains.pop(name, None)

        return unsubscribe

    def get(self, name: str) -> list[Callable[..., Any]]:
        """The listeners of `name`, in registration order (a copy)."""
        return list(self.chain(name))

    def chain(self, name: str) -> Chain:
        """The listeners of `name` as an immutable snapshot, kept until they change."""
        chain = self._chains.get(name)
        if chain is None:
            chain = self._chains[name] = tuple(self._listeners.get(name, ()))
        return chain


def listeners_for(name: str, outer: HookRegistry, inner: HookRegistry) -> Chain:
    """The dispatch chain for `name` (the runtime's listeners, then the agent's): a
    snapshot, so (un)subscribing mid-dispatch is safe. Looked up on every seam and append:
    no list, and often no copy."""
    first, second = outer.chain(name), inner.chain(name)
    return first + second if first and second else first or second


def _is_async(listener: Callable[..., Any]) -> bool:
    call = getattr(listener, "__call__", None)  # noqa: B004 - objects with an async __call__
    return inspect.iscoroutinefunction(listener) or inspect.iscoroutinefunction(call)


async def _settle(result: Any) -> Any:
    return await result if inspect.isawaitable(result) else result


async def run_waterfall(
    name: str,
    chain: Chain,
    agent: Any,
    value: Any,
    terminal: Callable[[Any], Awaitable[Any]] | None = None,
) -> Any:
    """Run `chain` outermost-first; each listener gets `(agent, value, next)`.

    `await next()` returns the downstream value (optionally `next(new_value)` passes a
    different value down); not calling it short-circuits; calling it twice raises. With a
    `terminal`, the innermost `next()` returns `await terminal(value)` instead of the value
    (the waterfall wraps an action, e.g. `tools/execute` around running the tool).
    """
    if not chain:
        return value if terminal is None else await terminal(value)

    async def call(index: int, current: Any) -> Any:
        if index == len(chain):
            return current if terminal is None else await terminal(current)
        used = False

        async def next_(replacement: Any = _UNSET) -> Any:
            nonlocal used
            if used:
                raise HookError(f"{name}: next() called twice by listener {index}")
            used = True
            return await call(index + 1, current if replacement is _UNSET else replacement)

        return await _settle(chain[index](agent, current, next_))

    return await call(0, value)


async def run_serial(chain: Chain, agent: Any, value: Any) -> None:
    """Await each listener in order with `(agent, value)`."""
    for listener in chain:
        await _settle(listener(agent, value))


async def run_until_answer(chain: Chain, agent: Any, value: Any) -> Any:
    """Await serial listeners in order until one returns something other than None; that
    answer (None if every listener returned None)."""
    for listener in chain:
        answer = await _settle(listener(agent, value))
        if answer is not None:
            return answer
    return None


def run_notify(name: str, chain: Chain, agent: Any, value: Any) -> None:
    """Call each listener synchronously; an exception is logged and contained."""
    for listener in chain:
        try:
            result = listener(agent, value)
            if result is not None and inspect.isawaitable(result):
                # A coroutine here would never run; close it and say so loudly.
                result.close()  # type: ignore[attr-defined]
                raise HookError(f"{name} listeners must be plain functions, not async")
        except Exception:
            log.exception("%s listener %r failed", name, listener)


class _Unset:
    pass


_UNSET: Any = _Unset()
