"""`WriterThread`: one long-lived worker thread per store that runs its blocking work in
arrival order, handed over from trio without a `trio.to_thread` round per call."""

from __future__ import annotations

import contextlib
import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar, cast

import trio

from ..errors import StoreError

T = TypeVar("T")


class _Job(Generic[T]):
    """One piece of work, its waiting task and what the work produced."""

    __slots__ = ("error", "result", "task", "token", "work")

    def __init__(self, work: Callable[[], T], *, waited: bool = True) -> None:
        self.work = work
        self.task = trio.lowlevel.current_task() if waited else None
        self.token = trio.lowlevel.current_trio_token() if waited else None
        self.result: T | None = None
        self.error: BaseException | None = None


_STOP = None
"""Put on the queue to end the thread after the jobs before it."""


def _serve(jobs: queue.SimpleQueue[_Job[Any] | None]) -> None:
    # Holds no reference to the owner: a store dropped without `close` is collected, and
    # its finalizer stops this thread.
    while True:
        job = jobs.get()
        if job is _STOP:
            return
        try:
            job.result = job.work()
        except BaseException as exc:  # handed to the waiting task, which re-raises it
            job.error = exc
        del job.work
        if job.task is None or job.token is None:
            continue  # posted: its work reports its own errors
        # A run that ended meanwhile (it crashed around its waiting task) has no one to
        # wake; the thread must go on serving the store's later work.
        with contextlib.suppress(trio.RunFinishedError):
            job.token.run_sync_soon(trio.lowlevel.reschedule, job.task)


class WriterThread:
    """Runs `work` on one dedicated thread, one call after another.

    `run` waits for its work to finish and cannot be cancelled half-way: a cancelled
    caller still waits until its work has finished (the cancellation is delivered right
    after), so a commit is never left running unreported, exactly as
    `trio.to_thread.run_sync` without `abandon_on_cancel`. The thread starts on first use
    and ends in `close` (or when `owner` is garbage-collected without it).
    """

    def __init__(self, owner: object, name: str) -> None:
        self._jobs: queue.SimpleQueue[_Job[Any] | None] = queue.SimpleQueue()
        self._name = name
        self._thread: threading.Thread | None = None
        self._closed = False
        self._mutex = threading.Lock()
        weakref.finalize(owner, self._jobs.put, _STOP)

    @property
    def closed(self) -> bool:
        """Whether `close` was called (no more work is accepted)."""
        return self._closed

    def _start(self) -> None:
        with self._mutex:
            if self._closed:
                raise StoreError(f"{self._name} is closed")
            if self._thread is None:
                self._thread = threading.Thread(
                    target=_serve, args=(self._jobs,), name=self._name, daemon=True
                )
                self._thread.start()

    async def run(self, work: Callable[[], T]) -> T:
        """`work()` on the writer thread; its result, or its exception re-raised here."""
        if self._thread is None or self._closed:
            self._start()
        job = _Job(work)
        self._jobs.put(job)
        await trio.lowlevel.wait_task_rescheduled(lambda _: trio.lowlevel.Abort.FAILED)
        if job.error is not None:
            error, job.error = job.error, None
            raise error
        return cast(T, job.result)

    def post(self, work: Callable[[], object]) -> None:
        """Queue `work` after everything queued so far, without waiting for it; it must
        handle its own errors (what it raises is dropped)."""
        if self._thread is None or self._closed:
            self._start()
        self._jobs.put(_Job(work, waited=False))

    async def close(self) -> None:
        """End the thread once the work queued before has run (idempotent)."""
        with self._mutex:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
        if thread is not None:
            self._jobs.put(_STOP)
            await trio.to_thread.run_sync(thread.join)
