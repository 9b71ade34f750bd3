"""`CodecActor`: the one writer of a store. It group-commits the events every loop submits
(one `append_batch` for all sessions pending) and answers flush barriers once durable."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TypeAlias

import trio
from attrs import frozen

from ..runtime.errors import GroupCommitError, SessionWriteError, StoreError
from ..runtime.model.events import SessionEvent
from ..runtime.stores.base import Batch, Store, inline_store
from .kernel import Mailbox, Reply

log = logging.getLogger("actorloop.codec")

MAX_BATCH_MESSAGES = 4096
"""Most messages folded into one group commit (bounds a transaction's size)."""


@frozen(eq=False)
class _Submit:
    session_id: str
    events: tuple[SessionEvent, ...]
    reply: Reply[None] | None = None
    """Set by `persist`: a barrier riding on the submit (one message instead of two)."""


@frozen(eq=False)
class _Barrier:
    session_id: str | None
    reply: Reply[None]


_Message: TypeAlias = _Submit | _Barrier


def _nothing_runnable() -> bool:
    """Whether no other task is ready to run (this one is running, so it is not counted)."""
    return trio.lowlevel.current_statistics().tasks_runnable == 0


def _batch(writes: dict[str, list[SessionEvent]]) -> Batch:
    return tuple((session_id, tuple(events)) for session_id, events in writes.items())


class CodecActor:
    """Persists appended events for every session of one store.

    Messages are handled in arrival order. Each round takes everything queued (up to
    MAX_BATCH_MESSAGES), writes all of its events in one `append_batch`, and only then
    answers the barriers in that round, so a barrier returns once everything submitted
    before it is durable.

    Sessions are isolated: when the store could not write one session's events (the group
    commit raised GroupCommitError), that session's next barrier raises SessionWriteError
    (its later submits are not written until then) while every other session's barriers
    return. A failure of the store itself fails closed: the barriers of that round and
    every later submit or barrier raise StoreError. Nothing is dropped silently.
    """

    def __init__(
        self,
        store: Store,
        *,
        capacity: int = 1024,
        after_write: Callable[[], None] | None = None,
    ) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError("CodecActor capacity must be an int >= 1 (the mailbox is bounded)")
        self.store = store
        self._mailbox: Mailbox[_Message] = Mailbox(capacity)
        self._failure: BaseException | None = None
        self._session_failures: dict[str, Exception] = {}
        """Per-session failures not yet reported to a barrier of that session."""
        self._started = False
        self._closing = False
        self._stopped = trio.Event()
        self._in_round = False
        """The actor's task is writing a round: an inline barrier would overtake it."""
        self._inline = inline_store(store)
        """A store that can commit without waiting (the plain memory store; a plain SQLite
        store's small inline commit, when it can run): barriers with nothing queued ahead
        of them are then written by their caller."""
        self._inline_always = self._inline is not None and self._inline.inline_commits == "always"
        """Commits that cost nothing go inline whenever they may. One with a fixed cost
        (SQLite) goes inline only while sessions write one at a time (`_alone_next`), so
        that concurrent loops still share a group commit instead of taking one each."""
        self._sole_writer: str | None = None
        """The session that wrote the last round (inline or not) alone, if one did."""
        self._after_write = after_write
        """Called after every write the store made durable (the collector policy's
        `after_flush`), before the barriers it covers are answered."""

    # the actor ------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The actor's task; start it with `nursery.start(actor.run)`."""
        if self._started:
            raise RuntimeError("CodecActor.run was already started")
        self._started = True
        try:
            task_status.started()
            try:
                async for first in self._mailbox:
                    self._in_round = True
                    try:
                        await self._round(self._take_round(first))
                    finally:
                        self._in_round = False
            finally:
                # Stopped (cancelled) with work queued: whatever was not written must
                # make every waiting and later barrier fail, not vanish.
                self._abandon(self._drain())
        finally:
            self._mailbox.close()
            self._stopped.set()

    def _take_round(self, first: _Message) -> list[_Message]:
        batch = [first]
        while len(batch) < MAX_BATCH_MESSAGES:
            try:
                batch.append(self._mailbox.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel):
                break
        return batch

    def _drain(self) -> list[_Message]:
        pending: list[_Message] = []
        while True:
            try:
                pending.append(self._mailbox.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel):
                return pending

    async def _round(self, batch: list[_Message]) -> None:
        writes, barriers = self._plan(batch)
        self._sole_writer = next(iter(writes)) if len(writes) == 1 else None
        if writes and self._failure is None:
            try:
                await self.store.append_batch(_batch(writes))
            except trio.Cancelled:
                self._abandon(batch)
                raise
            except Exception as exc:
                self._failed(writes, exc)
            else:
                if self._after_write is not None:
                    self._after_write()
        self._answer(barriers)

    def _plan(
        self, batch: list[_Message]
    ) -> tuple[dict[str, list[SessionEvent]], list[tuple[str | None, Reply[None]]]]:
        """The round's writes by session and its barriers, in arrival order."""
        writes: dict[str, list[SessionEvent]] = {}
        barriers: list[tuple[str | None, Reply[None]]] = []
        for message in batch:
            # A session with an unreported failure writes nothing until its barrier has
            # reported it: those events are covered by that report.
            if (
                isinstance(message, _Submit)
                and message.events
                and message.session_id not in self._session_failures
            ):
                writes.setdefault(message.session_id, []).extend(message.events)
            if message.reply is not None:
                barriers.append((message.session_id, message.reply))
        return writes, barriers

    def _failed(self, writes: dict[str, list[SessionEvent]], exc: Exception) -> None:
        """Record a failed group commit: the sessions it names, or the whole store."""
        if isinstance(exc, GroupCommitError):
            for session_id, error in exc.failures:
                log.error(
                    "store %s could not write %d events of session %s; the other %d "
                    "sessions of the group commit were written",
                    self.store.url,
                    len(writes.get(session_id, ())),
                    session_id,
                    len(writes) - len(exc.failures),
                    exc_info=error,
                )
                self._session_failures.setdefault(session_id, error)
            return
        count = sum(len(events) for events in writes.values())
        log.error(
            "store %s failed on a group commit of %d events for %d sessions",
            self.store.url,
            count,
            len(writes),
            exc_info=exc,
        )
        self._failure = exc

    def _answer(self, barriers: list[tuple[str | None, Reply[None]]]) -> None:
        # Every barrier of a failed session in this round fails (not only the first): all
        # of them were answered after the events that were not written.
        failed = dict(self._session_failures)
        for barrier_of, reply in barriers:
            if self._failure is not None:
                reply.fail(self._error())
            elif barrier_of is None:
                if failed:
                    reply.fail(self._unwritten_error(failed))
                else:
                    reply.send(None)
            elif barrier_of in failed:
                self._session_failures.pop(barrier_of, None)  # reported
                reply.fail(self._session_error(barrier_of, failed[barrier_of]))
            else:
                reply.send(None)

    def _abandon(self, messages: list[_Message]) -> None:
        unwritten = any(isinstance(m, _Submit) and m.events for m in messages)
        if unwritten and self._failure is None:
            self._failure = RuntimeError("the codec actor stopped before writing them")
        for message in messages:
            if message.reply is not None and not message.reply.answered:
                message.reply.fail(self._error("the codec actor stopped"))

    def _error(self, fallback: str = "") -> StoreError:
        cause = self._failure
        if cause is None:
            error = StoreError(f"store {self.store.url}: {fallback}")
        else:
            error = StoreError(
                f"store {self.store.url} failed ({type(cause).__name__}: {cause}); "
                "events submitted since the last successful barrier may not be durable"
            )
        error.__cause__ = cause
        return error

    def _session_error(self, session_id: str, cause: Exception) -> SessionWriteError:
        error = SessionWriteError(
            session_id,
            f"store {self.store.url}: {type(cause).__name__}: {cause}; events submitted "
            "since its last successful barrier may not be durable",
        )
        error.__cause__ = cause
        return error

    def _unwritten_error(self, failures: dict[str, Exception]) -> StoreError:
        shown = ", ".join(repr(session_id) for session_id in sorted(failures))
        return StoreError(f"store {self.store.url}: sessions {shown} were not written")

    # the API --------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._failure is not None:
            raise self._error()
        if self._closing or self._stopped.is_set():
            raise self._error("the codec actor is closed")

    async def _send_message(self, message: _Message) -> None:
        self._check_open()
        try:
            await self._mailbox.send(message)
        except trio.ClosedResourceError:
            raise self._error("the codec actor is closed") from None

    async def _post(self, message: _Message) -> None:
        """`_send_message` for a message whose reply its caller awaits next. With room in
        the mailbox it queues with no schedule point of its own: the wait for the reply is
        the caller's, and a second one per barrier was a task switch for every loop of
        every group commit. A cancelled caller still queues nothing."""
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_open()
        try:
            self._mailbox.send_nowait(message)
        except trio.WouldBlock:
            await self._send_message(message)
        except trio.ClosedResourceError:
            raise self._error("the codec actor is closed") from None

    async def submit(self, session_id: str, events: Sequence[SessionEvent]) -> None:
        """Queue events for the next group commit; waits while the mailbox is full."""
        events = tuple(events)
        if events:
            await self._send_message(_Submit(session_id, events))
        else:
            self._check_open()

    async def flush(self, session_id: str | None = None) -> None:
        """Barrier: returns once everything submitted before it is durable.

        Raises StoreError if the store failed (now or earlier): the actor fails closed. A
        barrier of one session raises SessionWriteError if that session's events could not
        be written (the other sessions are unaffected); a barrier of all sessions (None)
        raises StoreError while any session has such a failure unreported.
        """
        reply: Reply[None] = Reply()
        await self._post(_Barrier(session_id, reply))
        await reply.wait()

    async def persist(self, session_id: str, events: Sequence[SessionEvent]) -> None:
        """Submit and wait until durable (a barrier of `session_id`, see `flush`). Written
        by its caller when nothing could share its commit (`persist_now`), it returns with
        no schedule point (persistence.md §4.2); otherwise `persist_queued`."""
        if not self.persist_now(session_id, events):
            await self.persist_queued(session_id, events)

    def persist_now(self, session_id: str, events: Sequence[SessionEvent]) -> bool:
        """`persist` here and now, when nothing is queued or being written and the store
        commits without waiting: True once durable (raising as the barrier would), False
        when it must queue (nothing was written or answered: call `persist_queued`).

        Nothing is queued or being written, so this round alone is next in line, and an
        inline commit never waits: it runs here, whole, with no task hop. No schedule point
        either: one now would run other tasks' work inside this caller's latency, before
        its request leaves (its cancel point follows in the caller; the loop yields when it
        awaits the provider). Planned, reported and failed as a round of the actor's."""
        store = self._inline
        if (
            store is None
            or self._in_round
            or self._mailbox
            or not (self._inline_always or self._alone_next(session_id))
        ):
            return False
        self._check_open()
        # A session with an unreported failure writes nothing until a barrier has reported
        # it (`_plan`): those events are covered by that report.
        if events and session_id not in self._session_failures:
            self._sole_writer = session_id
            try:
                if not store.append_batch_now(((session_id, events),)):
                    return False
            except Exception as exc:
                self._failed({session_id: list(events)}, exc)
            else:
                if self._after_write is not None:
                    self._after_write()
        if self._failure is not None:
            raise self._error()
        failure = self._session_failures.pop(session_id, None)
        if failure is not None:
            raise self._session_error(session_id, failure)
        return True

    async def persist_queued(self, session_id: str, events: Sequence[SessionEvent]) -> None:
        """`persist` through the actor's channel: the next round writes it, with whatever
        else is queued by then (a group commit), and answers it."""
        reply: Reply[None] = Reply()
        await self._post(_Submit(session_id, tuple(events), reply))
        await reply.wait()

    def _alone_next(self, session_id: str) -> bool:
        """Whether a SQLite commit of `session_id` made now would have nobody to share it:
        the session wrote the last round alone, or another did and no task is ready to run
        (none could submit before this commit ends). A round of several sessions says
        loops are flushing together: they queue, to share the next round. The task count
        is asked only here, past the cheap tests: it costs a few µs, more with many open
        sockets."""
        writer = self._sole_writer
        return writer == session_id or (writer is not None and _nothing_runnable())

    async def aclose(self) -> None:
        """Write everything queued, then stop; raises StoreError if anything is not durable."""
        if not self._closing:
            self._closing = True
            self._mailbox.close()
            await trio.lowlevel.checkpoint()
        if self._started:
            await self._stopped.wait()
        else:
            self._abandon(self._drain())
        if self._failure is not None:
            raise self._error()
        if self._session_failures:
            # Failures no barrier of their session has reported: say so now, not never.
            raise self._unwritten_error(self._session_failures)
