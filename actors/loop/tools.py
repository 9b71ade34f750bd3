"""The step's tool calls: pools of parallel calls and exclusive calls alone, each call
through `tools/pre-execute`, its `tool/call` and a barrier, `tools/execute` around the tool
and `tools/post-execute`; results appended in model order, and the cleanup's missing ones."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial

import orjson
import trio
from attrs import evolve

from ...codecs.jsonvalue import check_text
from ...runtime.control.approvals import DeferredApprovals
from ...runtime.control.handle import ToolContext
from ...runtime.control.hooks import run_waterfall
from ...runtime.control.options import Tool
from ...runtime.errors import ErrorCode, HookError, JsonValueError, sole_error
from ...runtime.log.effects import effect_key
from ...runtime.model.events import ToolCallEvent, ToolError, ToolResultEvent
from ...runtime.model.hook_values import ContextItem, Deny, ToolCallInfo, ToolOutcome
from ...runtime.model.messages import Text, ToolCall
from .approvals import needs_approval, park_deferred, request_approval
from .context import TurnContext
from .values import OpenStep, OpenTurn


def error_outcome(info: ToolCallInfo, code: ErrorCode, message: str) -> ToolOutcome:
    """An error result for a call that produced no real one (denied, failed, cancelled)."""
    return ToolOutcome(
        info.turn,
        info.step,
        info.call_id,
        info.name,
        info.arguments,
        (Text(message),),
        True,
        ToolError(info.name, code),
    )


def tool_text(output: object) -> tuple[Text, ...] | None:
    """A tool's output as result blocks (a str, or a tuple of Text with str text whose
    values the log can hold), or None when it is anything else."""
    if isinstance(output, str):
        blocks: tuple[Text, ...] = (Text(output),)
    elif isinstance(output, (tuple, list)) and all(
        type(block) is Text and type(block.text) is str for block in output
    ):
        blocks = tuple(output)
    else:
        return None
    try:
        for block in blocks:
            check_text(block.text, "$.output")  # the log holds only text with a UTF-8 form
    except JsonValueError:
        return None
    return blocks


def describe(value: object) -> str:
    """A short description of an unexpected value, for an error message."""
    text = repr(value)
    return f"{type(value).__name__} {text[:80]}{'...' if len(text) > 80 else ''}"


def _same_call(info: ToolCallInfo, call_id: str, name: str, hook: str) -> None:
    if (call_id, name) != (info.call_id, info.name):
        raise HookError(
            f"a {hook} listener changed call {info.call_id!r} ({info.name}) into "
            f"{call_id!r} ({name}); a call keeps the id and name the model gave it"
        )


def _checked_outcome(outcome: object, info: ToolCallInfo, hook: str) -> ToolOutcome:
    if not isinstance(outcome, ToolOutcome):
        raise HookError(f"{hook} must return a ToolOutcome, got {describe(outcome)}")
    _same_call(info, outcome.call_id, outcome.name, hook)
    if tool_text(outcome.content) is None:
        raise HookError(f"{hook} returned content that is not a tuple of Text with str text")
    return outcome


def _tool_groups(
    calls: Sequence[ToolCall], tools: Mapping[str, Tool]
) -> list[list[tuple[int, ToolCall]]]:
    """The calls in model order, cut into groups: a run of non-exclusive calls is one
    group (a pool), an exclusive call a group of its own (a barrier)."""
    groups: list[list[tuple[int, ToolCall]]] = []
    pooled = False
    for index, call in enumerate(calls):
        tool = tools.get(call.name)
        exclusive = tool is not None and tool.exclusive
        if exclusive or not pooled:
            groups.append([])
        groups[-1].append((index, call))
        pooled = not exclusive
    return groups


class _ResultsInOrder:
    """Appends a step's tool results in model order as their outcomes come in (a pool
    finishes in any order), and queues their post-execute contexts in the same order."""

    def __init__(self, ctx: TurnContext, turn: OpenTurn, step: OpenStep) -> None:
        self._ctx = ctx
        self._turn = turn
        self._step = step
        self._next = 0
        self._ready: dict[int, ToolOutcome] = {}

    def ready(self, index: int, outcome: ToolOutcome | None) -> None:
        """`outcome` for the call at `index` (None: the call is parked, it has none yet)."""
        self._ready[index] = outcome  # type: ignore[assignment]
        while self._next in self._ready:
            outcome = self._ready.pop(self._next)
            if outcome is None:
                self._next += 1
                continue
            log_result(self._ctx, self._step, outcome)
            assert self._turn.tool_batch is not None
            self._turn.tool_batch.extend(
                item if isinstance(item, ContextItem) else ContextItem((Text(item),))
                for item in outcome.additional_context
            )
            self._next += 1


async def run_tools(ctx: TurnContext, turn: OpenTurn, step: OpenStep) -> None:
    """Run the step's calls: consecutive non-exclusive calls as one pool (at most
    `max_parallel_tool_calls` at a time), each exclusive call alone, as a barrier
    between pools. Calls start in model order; their results are appended in model
    order; the batch's contexts after the last result."""
    results = _ResultsInOrder(ctx, turn, step)
    for group in _tool_groups(step.requested, step.tools):
        await trio.lowlevel.checkpoint_if_cancelled()  # an observer may have cancelled
        if len(group) == 1:
            index, call = group[0]
            info = await _start_call(ctx, turn, step, results, index, call)
            if info is not None:
                await _finish_call(ctx, turn, step, results, index, info, None)
            continue
        slots = trio.Semaphore(step.max_parallel)
        try:
            async with trio.open_nursery() as pool:
                for index, call in group:
                    await slots.acquire()
                    try:
                        info = await _start_call(ctx, turn, step, results, index, call)
                    except BaseException:
                        slots.release()
                        raise
                    if info is None:
                        slots.release()
                    else:
                        pool.start_soon(_finish_call, ctx, turn, step, results, index, info, slots)
        except BaseExceptionGroup as group_error:
            # One failing call cancels its pool; the turn sees that error, not a group.
            error = sole_error(group_error)
            if error is group_error:
                raise
            raise error from group_error
    # On a cancel or error the batch stays open: the cleanup writes the missing results
    # first, then these contexts.
    if step.parked:
        # Parked calls have no result yet: the contexts wait for the last one's.
        ctx.held_contexts.extend(turn.tool_batch or ())
        turn.tool_batch = None
    else:
        flush_tool_batch(ctx, turn)


async def _start_call(
    ctx: TurnContext,
    turn: OpenTurn,
    step: OpenStep,
    results: _ResultsInOrder,
    index: int,
    call: ToolCall,
) -> ToolCallInfo | None:
    """Start one call in model order: `tools/pre-execute`, then its `tool/call` and a
    barrier (the call is durable before its side effects). None when it was denied,
    rejected or parked for a decision."""
    info = ToolCallInfo(step.turn, step.number, call.id, call.name, call.arguments)
    decided = step.decided.get(call.id)
    if decided is None and needs_approval(ctx, turn, step.tools.get(call.name), info):
        decided = await request_approval(ctx, step, info)
        if decided is None:
            results.ready(index, None)
            return None
    if decided is not None and decided.decision == "reject":
        log_call(ctx, step, info)
        rejected = error_outcome(
            info, ErrorCode.APPROVAL_REJECTED, f"Tool call rejected: {decided.reason}"
        )
        step.finished[info.call_id] = rejected
        results.ready(index, rejected)
        return None
    if decided is not None and decided.arguments is not None:
        info = evolve(info, arguments=decided.arguments)
    decision = await ctx.seam("tools/pre-execute", info)
    if isinstance(decision, Deny):
        log_call(ctx, step, info)
        denied = error_outcome(info, ErrorCode.TOOL_DENIED, f"Tool call denied: {decision.reason}")
        step.finished[info.call_id] = denied
        results.ready(index, denied)
        return None
    if isinstance(decision, ToolCallInfo):
        _same_call(info, decision.call_id, decision.name, "tools/pre-execute")
        info = decision
    log_call(ctx, step, info)
    await ctx.barrier()
    return info


async def _finish_call(
    ctx: TurnContext,
    turn: OpenTurn,
    step: OpenStep,
    results: _ResultsInOrder,
    index: int,
    info: ToolCallInfo,
    slots: trio.Semaphore | None,
) -> None:
    """Run a started call (`tools/execute` around the tool, then `tools/post-execute`)
    and hand its outcome to `results`."""
    try:
        try:
            outcome = await run_waterfall(
                "tools/execute",
                ctx.chain("tools/execute"),
                ctx.agent,
                info,
                terminal=partial(_execute_logged, ctx, turn, step, info),
            )
        except DeferredApprovals as deferred:
            # The tool's work waits for decisions in a subagent: the call parks on them.
            park_deferred(ctx, step, info, deferred)
            results.ready(index, None)
            return
        await trio.lowlevel.checkpoint_if_cancelled()
        outcome = _checked_outcome(outcome, info, "tools/execute")
        # A listener's own outcome (a short-circuit) is this call's real result too.
        step.finished.setdefault(info.call_id, outcome)
        # A listener may have cancelled and returned normally: the seam drops its rewrite
        # and context; the cleanup writes the tool's real result (it finished).
        posted = await ctx.seam("tools/post-execute", outcome)
        # The outcome itself back (no listener rewrote it) was checked just above.
        if posted is not outcome:
            outcome = _checked_outcome(posted, info, "tools/post-execute")
        results.ready(index, outcome)
    finally:
        if slots is not None:
            slots.release()


def flush_tool_batch(ctx: TurnContext, turn: OpenTurn) -> None:
    """Append the contexts that waited for the batch's last result."""
    batch, turn.tool_batch = turn.tool_batch, None
    for item in batch or ():
        ctx.append_context(item)


def log_call(ctx: TurnContext, step: OpenStep, info: ToolCallInfo) -> None:
    event = ctx.append_event(
        "tool/call",
        ToolCallEvent(step.turn, step.number, info.call_id, info.name, info.arguments),
    )
    step.logged_calls[info.call_id] = event.seq


def log_result(ctx: TurnContext, step: OpenStep, outcome: ToolOutcome) -> None:
    ctx.append_event(
        "tool/result",
        ToolResultEvent(
            step.turn,
            step.number,
            outcome.call_id,
            outcome.content,
            outcome.is_error,
            outcome.error,
        ),
        surface=True,
        sources=(step.logged_calls[outcome.call_id],),
    )
    step.answered.add(outcome.call_id)


async def _execute_logged(
    ctx: TurnContext, turn: OpenTurn, step: OpenStep, logged: ToolCallInfo, info: object
) -> ToolOutcome:
    """The innermost `tools/execute`: it runs the call exactly as its `tool/call` logged
    it (a listener's `next(replacement)` may not run another tool or other arguments)."""
    if info is not logged and info != logged:
        raise HookError(
            f"a tools/execute listener passed a different call down for {logged.call_id!r}; "
            "the call that runs is the one its tool/call logged (rewrite calls in "
            "tools/pre-execute)"
        )
    return await _execute(ctx, turn, step, logged)


async def _execute(
    ctx: TurnContext, turn: OpenTurn, step: OpenStep, info: ToolCallInfo
) -> ToolOutcome:
    """Run the tool of `info` (the innermost `tools/execute`): validate its arguments
    against the tool's schema, call it, check what it returned."""

    def failed(code: ErrorCode, message: str) -> ToolOutcome:
        return error_outcome(info, code, message)

    tool = step.tools.get(info.name)
    if tool is None:
        return failed(ErrorCode.TOOL_NOT_FOUND, f"No tool named {info.name!r} is available.")
    try:
        args = orjson.loads(info.arguments or "{}")
    except orjson.JSONDecodeError as exc:
        return failed(ErrorCode.INVALID_ARGUMENTS, f"Arguments are not valid JSON: {exc}")
    if not isinstance(args, dict):
        return failed(ErrorCode.INVALID_ARGUMENTS, "Arguments must be a JSON object.")
    problem = tool.validator.problem(args)
    if problem is not None:
        return failed(ErrorCode.INVALID_ARGUMENTS, f"Invalid arguments: {problem}")
    key = effect_key(ctx.session.meta, step.logged_calls[info.call_id], info.call_id)
    context = ToolContext(ctx.agent, info.call_id, turn.scope, step.turn, step.number, key)
    step.started.add(info.call_id)
    try:
        output = await tool.execute(args, context)
    except DeferredApprovals:
        raise
    except Exception as exc:
        return failed(ErrorCode.TOOL_FAILED, f"{type(exc).__name__}: {exc}")
    content = tool_text(output)
    if content is None:
        return failed(
            ErrorCode.INVALID_TOOL_OUTPUT,
            f"The tool returned {describe(output)}; a tool returns a str or a tuple of "
            "Text blocks with str text.",
        )
    outcome = ToolOutcome(step.turn, step.number, info.call_id, info.name, info.arguments, content)
    step.finished[info.call_id] = outcome
    return outcome


def answer_missing_calls(ctx: TurnContext, turn: OpenTurn, step: OpenStep) -> None:
    """After a cancel or error: a result for every requested call without one (its real
    outcome if it had one, else why it has none), then the batch's contexts."""
    for call in step.requested:
        if call.id in step.answered:
            continue
        info = ToolCallInfo(step.turn, step.number, call.id, call.name, call.arguments)
        if call.id not in step.logged_calls:
            log_call(ctx, step, info)
        if call.id in step.finished:
            outcome = step.finished[call.id]
        elif call.id in step.started:
            outcome = error_outcome(
                info, ErrorCode.TOOL_CANCELLED, "The tool call was cancelled while running."
            )
        else:
            outcome = error_outcome(
                info,
                ErrorCode.TOOL_ABORTED_BEFORE_DISPATCH,
                "The turn was cancelled before this tool call started.",
            )
        log_result(ctx, step, evolve(outcome, additional_context=()))
    flush_tool_batch(ctx, turn)
