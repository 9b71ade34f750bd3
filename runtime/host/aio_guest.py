"""The trio guest run on an asyncio event loop (`GuestRun`): started by the first
`aio.Runtime` opened on the loop, shared by every one after it, ended by the last."""

from __future__ import annotations

import asyncio
import weakref
from typing import TYPE_CHECKING, ClassVar

import trio

from ..errors import HostError
from .aio_futures import resolve, wait_through_cancellation

if TYPE_CHECKING:
    from outcome import Outcome


class GuestRun:
    """The trio guest run on one asyncio event loop, shared by every `aio.Runtime` opened on
    it (trio allows one run per thread). Trio's tasks run in callbacks of the asyncio loop,
    on its thread; only trio's wait for I/O sits in a worker thread. It starts with the
    first runtime and ends, awaited, when the last one has closed."""

    _running: ClassVar[weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, GuestRun]] = (
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
    async def acquire(cls) -> GuestRun:
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
            cancelled = await wait_through_cancellation(host.ready)
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
            resolve(self.ready, None)
            await self._stop.wait()

    def _finished(self, run: Outcome[None]) -> None:
        # Normally after the last release; early only if the run itself failed (a
        # KeyboardInterrupt trio delivered): either way no new runtime may join it.
        self.stopping = True
        if self._running.get(self.loop) is self:
            del self._running[self.loop]
        resolve(self.done, run)

    async def release(self) -> None:
        """One runtime less; the last one ends the guest run and waits until it has ended
        (so the trio run always finishes before the asyncio loop can close)."""
        self.users -= 1
        if self.users:
            return
        self.stopping = True
        self._stop.set()
        cancelled = await wait_through_cancellation(self.done)
        self.done.result().unwrap()
        if cancelled is not None:
            raise cancelled
