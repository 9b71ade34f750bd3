"""asyncio futures as the asyncio host uses them: awaited to the end through the waiting
task's cancellation, resolved or failed at most once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


async def wait_through_cancellation(
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


def resolve(future: asyncio.Future[T], value: T) -> None:
    """Give `future` its result unless it is done already."""
    if not future.done():
        future.set_result(value)


def fail(future: asyncio.Future[Any], error: BaseException) -> None:
    """Give `future` its exception unless it is done already."""
    if not future.done():
        future.set_exception(error)
