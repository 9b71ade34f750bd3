"""Subagents: a tool that spawns (or forks) a child agent and either awaits its turn and
returns the answer, or lets it run in the background and injects the answer later — always
owned by the parent, so cancelling or disposing the parent cancels the child's turn."""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

import trio

from ..control.approvals import DeferredApprovals
from ..control.handle import ToolContext
from ..control.options import AgentOptions, Tool
from ..errors import AgentClosed, SubagentError
from ..model.events import AssistantMessage, TurnEnd
from ..model.hook_values import TurnResult
from ..stores.ids import MAX_SESSION_ID_LENGTH

if TYPE_CHECKING:
    from ..control.handle import Agent
    from .runtime import Runtime

log = logging.getLogger("actorloop.subagents")

SubagentMode = Literal["spawn", "fork"]

TASK_PARAMETERS = {
    "type": "object",
    "properties": {"task": {"type": "string", "description": "What the subagent should do."}},
    "required": ["task"],
}


def last_answer(agent: Agent) -> str:
    """The text of the child's latest assistant message."""
    for event in reversed(agent.session.events):
        if isinstance(event.data, AssistantMessage) and event.data.content:
            return "".join(getattr(block, "text", "") for block in event.data.content)
    return ""


def last_turn_end(agent: Agent) -> int | None:
    for event in reversed(agent.session.events):
        if isinstance(event.data, TurnEnd):
            return event.seq
    return None


async def run_child_turn(child: Agent, task: str) -> TurnResult:
    """Send `task` to `child`; if the caller is cancelled, cancel the child's turn and wait
    until its log is closed before re-raising."""
    try:
        return await child.send(task)
    except trio.Cancelled:
        with trio.CancelScope(shield=True):
            child.cancel("parent turn cancelled")
            await child.wait_idle()
        raise


def subagent_tool(
    runtime: Runtime,
    *,
    name: str = "delegate",
    description: str = "Delegate a self-contained task to a subagent and return its answer.",
    options: AgentOptions | Callable[[Agent], AgentOptions] | None = None,
    mode: SubagentMode = "spawn",
    keep_child: bool = False,
    background: bool = False,
) -> Tool:
    """A tool whose call runs one turn of a child agent.

    `spawn` starts a fresh session (labelled with its parent); `fork` seeds the child with
    the parent's log up to its last closed turn. By default the tool awaits the child and
    returns its answer; a cancel of the parent's turn cancels the child's. With
    `background`, the tool returns at once and the answer is injected into the parent as a
    `context/message` (source `subagent`) when it arrives; the child then belongs to the
    parent agent: `cancel()` (without `keep_inbox`) or `dispose()` of the parent cancels it.
    Unless `keep_child`, the child is disposed after answering (its session stays stored
    and resumable).
    """

    async def execute(args: dict[str, Any], ctx: ToolContext) -> str:
        task = args.get("task")
        if not isinstance(task, str) or not task:
            raise SubagentError("the 'task' argument must be a non-empty string")
        parent = ctx.agent
        child_options = options(parent) if callable(options) else options or parent.options
        child_id = await _child_id(runtime, parent.id, ctx.call_id)
        if mode == "fork":
            boundary = last_turn_end(parent)
            if boundary is None:
                raise SubagentError("the parent has no closed turn to fork from")
            child = await runtime.fork(parent.id, boundary, child_id, child_options)
        else:
            labels = {**child_options.labels, "parent_agent": parent.id, "parent_call": ctx.call_id}
            child = await runtime.spawn(_with_labels(child_options, labels), session_id=child_id)
        # Before its first turn: the child's calls are charged to its parent's budget (a
        # fork child is not charged for the seed it shares with the parent).
        runtime.budgets.adopt(parent.id, child.id)
        if background:
            runtime.run_owned(parent, _answer_later(parent, child, task, ctx.call_id, keep_child))
            return f"Subagent {child.id} started; its answer will arrive as a context message."
        return await _awaited(child, partial(run_child_turn, child, task), keep_child)

    return Tool(name, description, TASK_PARAMETERS, execute)


async def _awaited(
    child: Agent, turn: Callable[[], Awaitable[TurnResult]], keep_child: bool
) -> str:
    """The answer of the child's turn. A turn that waits for approvals keeps the child
    and raises DeferredApprovals: the parent's call parks on them, and a decision taken
    through the parent continues the child's turn here (`forward`)."""
    parked = False
    try:
        result = await turn()
        if result.reason == "awaiting_approval":
            parked = True
            raise DeferredApprovals(result.pending, partial(_forward, child, keep_child))
        if result.reason != "completed":
            raise SubagentError(f"subagent {child.id} ended its turn {result.reason}")
        return last_answer(child)
    finally:
        if not keep_child and not parked:
            with trio.CancelScope(shield=True):
                await child.dispose()


async def _forward(
    child: Agent,
    keep_child: bool,
    call_id: str,
    decision: str,
    arguments: str | None,
    reason: str | None,
    meta: Any,
) -> str:
    """A decision taken through the parent, made in the child; the answer once it has one."""

    async def decide() -> TurnResult:
        try:
            if decision == "approve":
                return await child.approve(call_id, arguments, meta=meta)
            return await child.reject(call_id, reason or "rejected", meta=meta)
        except trio.Cancelled:
            with trio.CancelScope(shield=True):
                child.cancel("parent turn cancelled")
                await child.wait_idle()
            raise

    return await _awaited(child, decide, keep_child)


def _answer_later(
    parent: Agent, child: Agent, task: str, call_id: str, keep_child: bool
) -> Callable[[], Awaitable[None]]:
    """The background work of one delegation: run the child's turn, then deliver what
    came of it — the answer, or why there is none — into the parent's log. A full parent
    inbox is waited on, never a reason to drop the answer; a cancel (the parent cancelled
    or disposed) is recorded in the child's log by its aborted turn."""

    async def answer() -> None:
        meta = {"child": child.id, "call_id": call_id}
        try:
            try:
                result = await run_child_turn(child, task)
            except (trio.Cancelled, AgentClosed):
                raise
            except Exception as exc:
                text = f"Subagent {child.id} failed: {type(exc).__name__}: {exc}"
            else:
                if result.reason == "completed":
                    text = f"Subagent {child.id} answered:\n{last_answer(child)}"
                else:
                    text = f"Subagent {child.id} ended its turn {result.reason} without an answer."
            try:
                await parent.deliver(text, source="subagent", meta=meta)
            except AgentClosed:
                log.warning(
                    "subagent %s answered after its parent %s closed; the answer is only in "
                    "the child's log",
                    child.id,
                    parent.id,
                )
        finally:
            if not keep_child:
                with trio.CancelScope(shield=True):
                    await child.dispose()

    return answer


_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
_MAX_BASE = MAX_SESSION_ID_LENGTH - 16


async def _child_id(runtime: Runtime, parent_id: str, call_id: str) -> str:
    """`<parent>.<call id>` made a valid, unused session id: models may reuse call ids
    across turns ("call_0") or use characters a session id cannot hold."""
    base = f"{parent_id}.{_UNSAFE.sub('_', call_id) or 'call'}".replace("..", ".")
    if len(base) > _MAX_BASE:
        digest = hashlib.sha256(base.encode()).hexdigest()[:16]
        base = f"{base[: _MAX_BASE - 17]}-{digest}"
    candidate, n = base, 1
    while runtime.get(candidate) is not None or await runtime.store.exists(candidate):
        n += 1
        candidate = f"{base}-{n}"
    return candidate


def _with_labels(options: AgentOptions, labels: dict[str, Any]) -> AgentOptions:
    from attrs import evolve

    return evolve(options, labels=labels)
