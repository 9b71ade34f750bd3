"""The actor kernel: bounded mailboxes, actor refs with tell/ask, one-shot replies, and a
supervisor that owns every actor task in one trio nursery and contains their failures."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, Generic, TypeVar

import trio

from ..runtime.errors import ActorStopped, InboxFull

log = logging.getLogger("actorloop.kernel")

M = TypeVar("M")
R = TypeVar("R")

FailureHandler = Callable[[str, BaseException], None]


class Reply(Generic[R]):
    """A one-shot reply slot: answered exactly once with `send` or `fail`."""

    __slots__ = ("_done", "_error", "_value")

    def __init__(self) -> None:
        self._done = trio.Event()
        self._value: R | None = None
        self._error: BaseException | None = None

    @property
    def answered(self) -> bool:
        return self._done.is_set()

    def send(self, value: R) -> None:
        self._settle()
        self._value = value
        self._done.set()

    def fail(self, exc: BaseException) -> None:
        self._settle()
        self._error = exc
        self._done.set()

    def _settle(self) -> None:
        if self._done.is_set():
            raise RuntimeError("this reply was already answered (replies are one-shot)")

    async def wait(self) -> R:
        """The value given to `send`, or raise the exception given to `fail`."""
        await self._done.wait()
        return self.result()

    def result(self) -> R:
        """What `wait` returns or raises, for a reply already `answered`: no schedule point."""
        if not self._done.is_set():
            raise RuntimeError("this reply is not answered yet (wait for it)")
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


def _is_cancellation(exc: BaseException) -> bool:
    if isinstance(exc, trio.Cancelled):
        return True
    if isinstance(exc, BaseExceptionGroup):
        # A nursery inside the body wraps Cancelled in a group; a group holding only
        # cancellations is still a cancellation, not a failure of the actor.
        _, rest = exc.split(trio.Cancelled)
        return rest is None
    return False


class Mailbox(Generic[M]):
    """A bounded FIFO of messages for one actor.

    Like a trio memory channel (senders wait while it is full; after `close()` the actor
    drains what is queued, then iteration ends), with one addition: a sender may
    `withdraw` a message that is still queued, e.g. a caller that gave up before the
    actor took its message. A message is taken by the actor atomically with the end of
    its `receive`: it is either still queued (and can be withdrawn) or handed over.
    """

    __slots__ = ("_capacity", "_closed", "_queue", "_receivers", "_senders")

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._queue: deque[M] = deque()
        self._closed = False
        # Receivers waiting, first come first served. Not a trio ParkingLot: every idle
        # actor is parked here for as long as it idles, and a lot (its dict and list, the
        # `park` frame) was a fifth of what an idle actor's kernel state kept alive.
        self._receivers: list[trio.lowlevel.Task] = []
        # Senders park only on a full mailbox, which most never are: their lot is created
        # by the first sender that waits (thousands of idle actors each hold a mailbox).
        self._senders: trio.lowlevel.ParkingLot | None = None

    def __len__(self) -> int:
        return len(self._queue)

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def closed(self) -> bool:
        return self._closed

    def send_nowait(self, message: M) -> None:
        """Queue `message`; trio.WouldBlock when full, trio.ClosedResourceError when closed."""
        if self._closed:
            raise trio.ClosedResourceError("the mailbox is closed")
        if len(self._queue) >= self._capacity:
            raise trio.WouldBlock
        self._queue.append(message)
        if self._receivers:
            trio.lowlevel.reschedule(self._receivers.pop(0))

    async def send(self, message: M) -> None:
        """Queue `message`, waiting while the mailbox is full (a cancel queues nothing)."""
        await trio.lowlevel.checkpoint()
        while not self._closed and len(self._queue) >= self._capacity:
            if self._senders is None:
                self._senders = trio.lowlevel.ParkingLot()
            await self._senders.park()
        self.send_nowait(message)

    def withdraw(self, message: M) -> bool:
        """Remove `message` (by identity) if it is still queued; whether it was."""
        for index, queued in enumerate(self._queue):
            if queued is message:
                del self._queue[index]
                self._unpark_sender()
                return True
        return False

    def withdraw_all(self) -> list[M]:
        """Remove every message still queued, oldest first (the owner dropping what the
        actor has not taken, also before its first step)."""
        taken = list(self._queue)
        self._queue.clear()
        if taken and self._senders is not None:
            self._senders.unpark(count=len(taken))
        return taken

    def receive_nowait(self) -> M:
        """The next message; trio.WouldBlock if none, trio.EndOfChannel once closed and
        drained."""
        if self._queue:
            self._unpark_sender()
            return self._queue.popleft()
        if self._closed:
            raise trio.EndOfChannel
        raise trio.WouldBlock

    def _unpark_sender(self) -> None:
        if self._senders is not None:
            self._senders.unpark()

    def _park_receiver(self) -> Callable[[Any], trio.lowlevel.Abort]:
        """Queue the current task as a receiver; the abort function for its wait (a
        cancelled receiver leaves the queue, and the cancel is delivered)."""
        task = trio.lowlevel.current_task()
        self._receivers.append(task)
        task.custom_sleep_data = self._receivers

        def abort(_raise_cancel: Any) -> trio.lowlevel.Abort:
            task.custom_sleep_data.remove(task)
            return trio.lowlevel.Abort.SUCCEEDED

        return abort

    async def receive(self) -> M:
        """Wait for the next message; trio.EndOfChannel once closed and drained."""
        # Parking is itself a checkpoint: the explicit one is only for a message already
        # queued, so an idle actor parks at once instead of taking a scheduler round first.
        if self._queue or self._closed:
            await trio.lowlevel.checkpoint()
        while not self._queue and not self._closed:
            await trio.lowlevel.wait_task_rescheduled(self._park_receiver())
        # No checkpoint between taking the message and returning it: whoever looks at the
        # mailbox meanwhile sees it either queued or handed over, never in between.
        return self.receive_nowait()

    def close(self) -> None:
        """No more sends; the actor still receives what is queued, then iteration ends."""
        self._closed = True
        receivers, self._receivers = self._receivers, []
        for task in receivers:
            trio.lowlevel.reschedule(task)
        if self._senders is not None:
            self._senders.unpark_all()

    def __aiter__(self) -> Mailbox[M]:
        return self

    async def __anext__(self) -> M:
        # `receive` written out rather than awaited: every idle actor is parked here, and
        # its await chain (kept for as long as it idles) is one coroutine frame shorter.
        if self._queue or self._closed:
            await trio.lowlevel.checkpoint()
        while not self._queue and not self._closed:
            await trio.lowlevel.wait_task_rescheduled(self._park_receiver())
        if self._queue:
            self._unpark_sender()
            return self._queue.popleft()
        raise StopAsyncIteration


class _Cell:
    """The supervisor's record of one actor: its mailbox, pending asks and end state."""

    __slots__ = ("_end_waiters", "ended", "failure", "mailbox", "name", "pending")

    def __init__(self, name: str, capacity: int) -> None:
        self.name = name
        self.mailbox: Mailbox[Any] = Mailbox(capacity)
        self.pending: set[Reply[Any]] | None = None
        """Replies asked for and not yet answered; created by the first `ask`."""
        self.failure: BaseException | None = None
        self.ended = False
        # An event only once someone waits for the end (`stop`): most actors' ends are
        # never awaited, and thousands of idle actors would each hold one.
        self._end_waiters: trio.Event | None = None

    def mark_ended(self) -> None:
        self.ended = True
        if self._end_waiters is not None:
            self._end_waiters.set()

    async def wait_ended(self) -> None:
        """Wait until the actor has ended (a checkpoint, like `trio.Event.wait`)."""
        if self.ended:
            await trio.lowlevel.checkpoint()
            return
        if self._end_waiters is None:
            self._end_waiters = trio.Event()
        await self._end_waiters.wait()

    def stopped_error(self, problem: str) -> ActorStopped:
        error = ActorStopped(self.name, problem)
        error.__cause__ = self.failure
        return error

    def fail_pending(self) -> None:
        if not self.pending:
            return
        problem = "failed before answering" if self.failure else "stopped before answering"
        for reply in tuple(self.pending):
            if not reply.answered:
                reply.fail(self.stopped_error(problem))
        self.pending.clear()


class ActorRef(Generic[M]):
    """The only handle to an actor: send it messages, or ask and await a reply."""

    __slots__ = ("_cell", "name")

    def __init__(self, cell: _Cell) -> None:
        self._cell = cell
        self.name = cell.name

    @property
    def alive(self) -> bool:
        return not self._cell.ended

    @property
    def queued(self) -> int:
        """How many messages wait in the mailbox (also before the actor's first step)."""
        return len(self._cell.mailbox)

    async def tell(self, message: M) -> None:
        """Enqueue `message`, waiting while the mailbox is full (backpressure)."""
        try:
            await self._cell.mailbox.send(message)
        except trio.ClosedResourceError:
            raise self._cell.stopped_error("is not taking messages") from self._cell.failure

    def tell_nowait(self, message: M) -> None:
        """Enqueue `message` now; raises InboxFull when the mailbox is full."""
        try:
            self._cell.mailbox.send_nowait(message)
        except trio.WouldBlock:
            raise InboxFull(
                f"actor {self.name!r} mailbox is full ({self._cell.mailbox.capacity} messages)"
            ) from None
        except trio.ClosedResourceError:
            raise self._cell.stopped_error("is not taking messages") from self._cell.failure

    def withdraw(self, message: M) -> bool:
        """Take back `message` if the actor has not received it yet; whether it was queued."""
        return self._cell.mailbox.withdraw(message)

    def withdraw_all(self) -> list[M]:
        """Take back every message the actor has not received yet, oldest first."""
        return self._cell.mailbox.withdraw_all()

    async def stop(self) -> None:
        """Close the actor's mailbox (it drains what is queued) and wait for it to end."""
        self._cell.mailbox.close()
        await self._cell.wait_ended()

    async def ask(self, make_message: Callable[[Reply[R]], M]) -> R:
        """Send a message carrying a fresh Reply and await the answer.

        Re-raises the exception given to `reply.fail`; raises ActorStopped if the actor
        ends (stops or fails) before answering.
        """
        reply: Reply[R] = Reply()
        pending = self._cell.pending
        if pending is None:
            pending = self._cell.pending = set()
        pending.add(reply)
        try:
            await self.tell(make_message(reply))
            return await reply.wait()
        finally:
            pending.discard(reply)


class Supervisor:
    """Owns actor tasks: a failing actor is reported and contained, its siblings keep running.

    Leaving the context closes every mailbox and waits for the actors to drain and end; if
    the context body raised, the actors are cancelled instead.
    """

    def __init__(self, nursery: trio.Nursery, on_failure: FailureHandler | None) -> None:
        self._nursery = nursery
        self._on_failure = on_failure
        self._cells: dict[str, _Cell] = {}
        self._closed = False

    @classmethod
    @asynccontextmanager
    async def open(cls, on_failure: FailureHandler | None = None) -> AsyncIterator[Supervisor]:
        body_error: BaseException | None = None
        async with trio.open_nursery() as nursery:
            supervisor = cls(nursery, on_failure)
            try:
                yield supervisor
            except BaseException as exc:
                # Actors are cancelled and the error is re-raised below, outside the nursery,
                # so callers see it as raised rather than wrapped in an ExceptionGroup.
                body_error = exc
                nursery.cancel_scope.cancel()
            supervisor._closed = True
            for cell in tuple(supervisor._cells.values()):
                cell.mailbox.close()
        if body_error is not None:
            raise body_error

    def spawn(
        self,
        name: str,
        body: Callable[[Mailbox[M]], Awaitable[None]],
        *,
        capacity: int = 64,
    ) -> ActorRef[M]:
        """Start `body(mailbox)` as a supervised actor; `capacity` bounds its mailbox."""
        if self._closed:
            raise RuntimeError(f"cannot spawn {name!r}: the supervisor is closed")
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(
                f"actor {name!r}: capacity must be an int >= 1 (mailboxes are bounded)"
            )
        existing = self._cells.get(name)
        if existing is not None and not existing.ended:
            raise ValueError(f"an actor named {name!r} is already running")
        cell = _Cell(name, capacity)
        self._cells[name] = cell
        self._nursery.start_soon(self._run, cell, body, name=f"actor:{name}")
        return ActorRef(cell)

    async def stop(self, ref: ActorRef[Any]) -> None:
        """Close the actor's mailbox (it drains what is queued) and wait for it to end."""
        await ref.stop()

    async def _run(self, cell: _Cell, body: Callable[[Mailbox[Any]], Awaitable[None]]) -> None:
        try:
            await body(cell.mailbox)
        except BaseException as exc:
            if _is_cancellation(exc) or not isinstance(exc, Exception):
                raise
            cell.failure = exc
            self._report(cell.name, exc)
        finally:
            cell.mailbox.close()
            cell.fail_pending()
            cell.mark_ended()
            if self._cells.get(cell.name) is cell:
                del self._cells[cell.name]

    def _report(self, name: str, exc: BaseException) -> None:
        log.error("actor %r failed", name, exc_info=exc)
        if self._on_failure is None:
            return
        try:
            self._on_failure(name, exc)
        except Exception:
            log.exception("on_failure handler raised while reporting actor %r", name)
