"""The loop's inbox: items handed to the kernel mailbox, withdrawn when their caller gives
up, and the count of work outstanding that `idle` and `wait_idle()` derive from."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import trio
from attrs import evolve

from ...codecs.converter import unstructure
from ...codecs.jsonvalue import freeze_json, freeze_object
from ...runtime.errors import ActorStopped, AgentClosed, ErrorCode, InboxFull
from ...runtime.model.hook_values import ContextItem, InboxEvent, InboxEventKind, TurnResult
from ...runtime.model.messages import Content, Source
from ..kernel import ActorRef
from .context import InboxContext
from .values import CALLER_CANCELLED, OpenTurn, TurnItem


def cancellable_turn(ctx: InboxContext) -> OpenTurn | None:
    """The turn a cancel still reaches (None when idle or once the turn is retired)."""
    turn = ctx.current_turn
    return turn if turn is not None and not turn.retired else None


def refuse_if_closed(ctx: InboxContext) -> None:
    if ctx.closed:
        raise AgentClosed(f"agent {ctx.session.id!r} is {ctx.status}; it takes no more work")


def require_mailbox(ctx: InboxContext) -> ActorRef[TurnItem]:
    if ctx._mailbox is None:
        raise AgentClosed(f"agent {ctx.session.id!r} was never started")
    return ctx._mailbox


def inbox_event(
    ctx: InboxContext, kind: InboxEventKind, item: TurnItem, queued: int | None = None
) -> None:
    if ctx.chain("agent/inbox"):
        if queued is None:
            queued = ctx._mailbox.queued if ctx._mailbox is not None else 0
        ctx.notify("agent/inbox", InboxEvent(kind, item.kind, item.source, queued))


async def tell(ctx: InboxContext, item: TurnItem, *, waits_next: bool = False) -> None:
    """Queue `item`, waiting while the inbox is full; counted as work from here on.
    `waits_next`: the caller waits (for the item's end) right after, a scheduling point of
    its own, so with room in the inbox the item is queued after a cancel point only, not
    a yield: one resume fewer of the caller's await chain (a whole request's, for a send
    over HTTP)."""
    mailbox = require_mailbox(ctx)
    work_added(ctx)
    try:
        if waits_next:
            await trio.lowlevel.checkpoint_if_cancelled()
            try:
                mailbox.tell_nowait(item)
            except InboxFull:
                await mailbox.tell(item)
        else:
            await mailbox.tell(item)
    except ActorStopped as exc:
        work_done(ctx)
        raise AgentClosed(f"agent {ctx.session.id!r} is {ctx.status}") from exc
    except BaseException:
        work_done(ctx)
        raise
    inbox_event(ctx, "enqueue", item)


async def submit(ctx: InboxContext, item: TurnItem) -> TurnResult:
    """Queue `item` and wait for the result of its turn; a cancelled caller abandons it."""
    refuse_if_closed(ctx)
    await tell(ctx, item, waits_next=True)
    try:
        await item.done.wait()
    except trio.Cancelled:
        with trio.CancelScope(shield=True):
            await abandon(ctx, item)
        raise
    assert item.result is not None
    return item.result


async def abandon(ctx: InboxContext, item: TurnItem) -> None:
    """The caller of `item` was cancelled: its work, and only its work, is cancelled.

    Still queued: it is taken out of the inbox and never logged. Its turn running: that
    turn ends `aborted` (reason CALLER_CANCELLED unless a cancel came first), and the
    caller's cancellation goes on once the turn is closed; the inbox behind it runs.
    """
    if ctx._mailbox is not None and ctx._mailbox.withdraw(item):
        inbox_event(ctx, "discard", item)
        finish_item(ctx, item, TurnResult(None, "discarded"))
        return
    turn = cancellable_turn(ctx)
    if turn is not None and turn.item is item:
        if turn.cancel_reason is None:
            turn.cancel_reason = CALLER_CANCELLED
        turn.scope.cancel()
    await item.done.wait()


def enqueue_nowait(ctx: InboxContext, item: TurnItem) -> None:
    mailbox = require_mailbox(ctx)
    work_added(ctx)
    try:
        mailbox.tell_nowait(item)
    except InboxFull as exc:
        work_done(ctx)
        raise InboxFull(f"inbox of agent {ctx.session.id!r} is full") from exc
    except ActorStopped as exc:
        work_done(ctx)
        raise AgentClosed(f"agent {ctx.session.id!r} is {ctx.status}") from exc
    inbox_event(ctx, "enqueue", item)


def context_now(
    ctx: InboxContext, content: Content, source: Source, meta: Mapping[str, Any] | None
) -> TurnItem | None:
    """Log context into the open turn (or its tool batch); else the injection item that
    must be queued for a one-shot turn."""
    refuse_if_closed(ctx)
    frozen_meta = None if meta is None else freeze_object(meta, "$.meta")
    freeze_json(unstructure(content), "$.content")
    turn = ctx.current_turn
    if turn is None or ctx.session.open_turn is None:
        return TurnItem("injection", content, source, frozen_meta)
    context = ContextItem(content, source, frozen_meta)
    if turn.tool_batch is not None:
        turn.tool_batch.append(context)
    else:
        ctx.append_context(context)
    return None


def busy(ctx: InboxContext) -> bool:
    return bool(ctx._outstanding or ctx._owned)


def work_added(ctx: InboxContext, *, owned: trio.CancelScope | None = None) -> None:
    if owned is None:
        ctx._outstanding += 1
    else:
        if ctx._owned is None:
            ctx._owned = set()
        ctx._owned.add(owned)
    ctx.refresh_status()


def work_done(ctx: InboxContext) -> None:
    ctx._outstanding -= 1
    work_changed(ctx)


def work_changed(ctx: InboxContext) -> None:
    # Idle exactly when no work is left, however the last item ended (ran, or was
    # discarded by a cancel before it started) and once owned work has ended too.
    ctx.refresh_status()
    if not busy(ctx) and ctx._idle_event is not None:
        ctx._idle_event.set()
        ctx._idle_event = None


def finish_item(ctx: InboxContext, item: TurnItem, result: TurnResult) -> None:
    if result.reason == "error" and result.code is None:  # every error result has a code
        fallback = ErrorCode.INTERNAL_ERROR if ctx.failure is None else ErrorCode.AGENT_FAILED
        result = evolve(result, code=getattr(ctx.failure, "code", None) or fallback)
    if item.result is None:
        item.resolve(result)
        work_done(ctx)


def discard_queued(ctx: InboxContext) -> None:
    ctx.steering.clear()
    if ctx._mailbox is None:
        return
    items = ctx._mailbox.withdraw_all()
    for index, item in enumerate(items, 1):
        # Told one by one, as if each left the inbox in turn: what is still queued.
        inbox_event(ctx, "discard", item, len(items) - index)
        finish_item(ctx, item, TurnResult(None, "discarded"))
