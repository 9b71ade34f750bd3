"""The `reconciliation` turn: calls a crash left in doubt get their real outcome from their
tool's `reconcile`, or an idempotent tool's call is re-run once with the same effect key
(docs/spec/session-log.md §10.7, docs/effects.md)."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import orjson

from ...runtime.control.handle import ToolContext
from ...runtime.control.options import Tool
from ...runtime.errors import ErrorCode, HookError
from ...runtime.log.effects import InDoubtCall, effect_key, in_doubt_calls
from ...runtime.log.session import Session
from ...runtime.model.events import (
    Replace,
    ToolError,
    ToolReconcile,
    ToolResultEvent,
    TurnEndReason,
)
from ...runtime.model.hook_values import ToolCallInfo, ToolOutcome
from ...runtime.model.messages import Source, Text
from .context import LoopContext, StepContext
from .inbox import enqueue_nowait
from .tools import _checked_outcome, describe, error_outcome, tool_text
from .values import OpenTurn, TurnItem

log = logging.getLogger("actorloop.loop")

NOT_RUN_TEXT = (
    "The session was interrupted around this tool call; reconciliation found that it never ran."
)


def _acts_on(tool: Tool | None, doubt: InDoubtCall) -> bool:
    """Whether this instance has something to do for `doubt`: its tool reconciles, or it is
    idempotent and was not re-run yet."""
    if tool is None:
        return False
    return tool.reconcile is not None or (tool.idempotent and doubt.reruns == 0)


RECONCILIATION_SOURCE = Source.of_plugin("reconciliation")


def queue_reconciliation(ctx: LoopContext) -> bool:
    """Queue a `reconciliation` turn as the first item of a loop that just started on a
    stored session, when it owes one; whether it did."""
    if not needs_reconciliation(ctx.session, ctx.options.tool_map()):
        return False
    enqueue_nowait(ctx, TurnItem("reconciliation", (), RECONCILIATION_SOURCE))
    return True


def needs_reconciliation(session: Session, tools: Mapping[str, Tool]) -> bool:
    """Whether a loop starting on `session` with `tools` owes a `reconciliation` turn."""
    if not any(tool.reconcile is not None or tool.idempotent for tool in tools.values()):
        return False
    return any(_acts_on(tools.get(doubt.data.name), doubt) for doubt in in_doubt_calls(session))


async def reconcile_turn(ctx: StepContext, turn: OpenTurn) -> TurnEndReason:
    """The body of a `reconciliation` turn: each call in doubt whose tool can act, in log
    order — `tool/reconcile` made durable first, then the action, then the outcome as a
    `tool/result` that replaces the repair closer."""
    tools = ctx.options.tool_map()
    for doubt in in_doubt_calls(ctx.session):
        tool = tools.get(doubt.data.name)
        if tool is not None and _acts_on(tool, doubt):
            await _reconcile_call(ctx, turn, tool, doubt)
    return TurnEndReason("completed")


async def _reconcile_call(ctx: StepContext, turn: OpenTurn, tool: Tool, doubt: InDoubtCall) -> None:
    data = doubt.data
    info = ToolCallInfo(data.turn, data.step, data.call_id, data.name, data.arguments)
    key = effect_key(ctx.session.meta, doubt.call.seq, data.call_id)
    context = ToolContext(ctx.agent, data.call_id, turn.scope, data.turn, data.step, key)
    outcome: ToolOutcome | None = None
    if tool.reconcile is not None:
        _mark(ctx, doubt, "reconcile")
        await ctx.barrier()
        try:
            answer = await tool.reconcile(info, context)
        except Exception as exc:
            # The call stays in doubt; the next load asks again.
            log.warning("reconcile of call %s (%s) failed: %r", data.call_id, data.name, exc)
            return
        if answer is not None:
            outcome = _checked_outcome(answer, info, f"reconcile of tool {tool.name!r}")
        elif not (tool.idempotent and doubt.reruns == 0):
            outcome = ToolOutcome(
                data.turn,
                data.step,
                data.call_id,
                data.name,
                data.arguments,
                (Text(NOT_RUN_TEXT),),
                True,
                ToolError(data.name, ErrorCode.TOOL_NOT_STARTED),
            )
    if outcome is None:
        _mark(ctx, doubt, "rerun")
        await ctx.barrier()  # durable before the effect: a crash now never re-runs it again
        outcome = await _rerun(tool, info, context)
    _record(ctx, doubt, outcome)
    await ctx.barrier()


def _mark(ctx: StepContext, doubt: InDoubtCall, action: str) -> None:
    data = doubt.data
    ctx.append_event(
        "tool/reconcile",
        ToolReconcile(doubt.call.seq, data.call_id, data.name, action),  # type: ignore[arg-type]
    )


async def _rerun(tool: Tool, info: ToolCallInfo, context: ToolContext) -> ToolOutcome:
    """Run the call once more, as its `tool/call` logged it (validated as on its first run)."""
    try:
        args = orjson.loads(info.arguments or "{}")
    except orjson.JSONDecodeError as exc:
        text = f"Arguments are not valid JSON: {exc}"
        return error_outcome(info, ErrorCode.INVALID_ARGUMENTS, text)
    if not isinstance(args, dict):
        return error_outcome(info, ErrorCode.INVALID_ARGUMENTS, "Arguments must be a JSON object.")
    problem = tool.validator.problem(args)
    if problem is not None:
        return error_outcome(info, ErrorCode.INVALID_ARGUMENTS, f"Invalid arguments: {problem}")
    try:
        output = await tool.execute(args, context)
    except Exception as exc:
        return error_outcome(info, ErrorCode.TOOL_FAILED, f"{type(exc).__name__}: {exc}")
    content = tool_text(output)
    if content is None:
        return error_outcome(
            info, ErrorCode.INVALID_TOOL_OUTPUT, f"The tool returned {describe(output)}."
        )
    return ToolOutcome(info.turn, info.step, info.call_id, info.name, info.arguments, content)


def _record(ctx: StepContext, doubt: InDoubtCall, outcome: ToolOutcome) -> None:
    """The outcome as the call's result: a `tool/result` replacing the closer's node."""
    closer = doubt.result.seq
    if tool_text(outcome.content) is None:
        raise HookError("a reconciled outcome's content must be a tuple of Text with str text")
    ctx.append(
        "tool/result",
        ToolResultEvent(
            doubt.data.turn,
            doubt.data.step,
            outcome.call_id,
            outcome.content,
            outcome.is_error,
            outcome.error,
        ),
        surface_op=Replace(closer, closer),
        sources=(doubt.call.seq, closer),
    )
