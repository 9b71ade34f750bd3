"""One model step, in the order of docs/spec/loop.md §4: steering, assembly, the session
prefix, pre-step and the compaction gate, `step/start`, the request and its header, the
barrier, the stream, the reply, the tools, `step/end` and post-step, then the transition."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import get_args

import trio
from attrs import evolve

from ...codecs.converter import structure_as, unstructure
from ...codecs.jsonvalue import freeze_json
from ...runtime.control.hooks import run_until_answer
from ...runtime.control.options import Tool
from ...runtime.errors import ErrorCode, HookError, ProviderError, SessionValidationError
from ...runtime.log.header_algebra import canonical, diff, headers_equal, order_tools
from ...runtime.log.request import Request, request_digest
from ...runtime.log.surface import chain_of
from ...runtime.model.chunks import ChunkAssembler, ErrorInfo, StreamChunk
from ...runtime.model.events import (
    AssistantChunk,
    AssistantMessage,
    RequestHeaderEvent,
    SteeringMessage,
    StepEnd,
    StepStart,
    TurnEndReason,
)
from ...runtime.model.header import EpochHeader, LlmCallConfig
from ...runtime.model.hook_values import Continuation, PostStep, PreStep, RequestFailure, TurnStop
from ...runtime.model.messages import (
    Content,
    Message,
    Reasoning,
    Source,
    Text,
    ToolCall,
    as_message_tuple,
)
from ...runtime.providers.base import opened_stream
from .budget import reserve_call, settle_answered, settle_unanswered
from .context import StepContext, TurnContext
from .tools import describe, run_tools
from .values import EndTurn, NextStep, OpenStep, OpenTurn, StepOutcome

FORCING = frozenset({"required", "tool"})
"""The `tool_choice` modes that force a tool call (what `reset_tool_choice` lifts)."""

CHUNK_TYPES = frozenset(get_args(StreamChunk))


def _render_system(base: str | None, sections: object) -> str:
    if sections == ():  # no listener contributed (the usual case): the base prompt alone
        return base or ""
    if not isinstance(sections, tuple) or not all(isinstance(s, str) for s in sections):
        raise TypeError("system-prompt/assemble listeners must return a tuple of str")
    return "\n\n".join(part for part in (base or "", *sections) if part)


def _checked_reply(reply: object, *, allow_tool_calls: bool) -> Content:
    """The content of an `agent/step-result` answer: an assistant Message of text,
    reasoning and (unless the answer was cut at max-tokens) tool-call blocks."""
    if not isinstance(reply, Message) or reply.role != "assistant":
        raise HookError(
            f"agent/step-result must return an assistant Message, got {describe(reply)}"
        )
    allowed = (Text, Reasoning, ToolCall) if allow_tool_calls else (Text, Reasoning)
    for block in reply.content:
        if type(block) not in allowed:
            raise HookError(
                f"agent/step-result returned a {type(block).__name__} block; an assistant "
                f"message holds {', '.join(kind.__name__ for kind in allowed)} blocks"
            )
    return reply.content


def _duplicate_call_ids(content: Content) -> ErrorInfo | None:
    ids = [block.id for block in content if isinstance(block, ToolCall)]
    repeated = sorted({call_id for call_id in ids if ids.count(call_id) > 1})
    if not repeated:
        return None
    return ErrorInfo(
        f"the model asked for several tool calls with the same id {repeated}; "
        "no call can be paired with its result",
        ErrorCode.DUPLICATE_TOOL_CALL_ID,
    )


def _ordered_tools(tools: Sequence[Tool], tool_order: Sequence[str] | None) -> tuple[Tool, ...]:
    """The options' tools in their configured order (`tool_order` first, then by name)."""
    by_name = {tool.name: tool for tool in tools}
    return tuple(
        by_name[schema.name] for schema in order_tools((t.schema for t in tools), tool_order)
    )


def _checked_tools(value: object) -> tuple[Tool, ...]:
    if not isinstance(value, (tuple, list)) or not all(isinstance(t, Tool) for t in value):
        raise HookError(f"tools/assemble must return a tuple of Tool, got {describe(value)}")
    names = [tool.name for tool in value]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise HookError(f"tools/assemble returned several tools named {repeated}")
    return tuple(value)


async def assemble(ctx: StepContext) -> tuple[str, tuple[Tool, ...]]:
    """The full system prompt and the tools of this step (`system-prompt/assemble`,
    `tools/assemble`); the tools' schemas, in this order, are what the header records."""
    sections = await ctx.seam("system-prompt/assemble", ())
    system = _render_system(ctx.options.system, sections)
    tools = _checked_tools(await ctx.seam("tools/assemble", _configured(ctx)))
    schemas = tuple(tool.schema for tool in tools)
    if len(schemas) != len(ctx.current_tools) or not all(
        map(operator.is_, schemas, ctx.current_tools)
    ):
        # Kept when it holds the very same schemas: the header then compares by identity.
        ctx.current_tools = schemas
    return system, tools


def _configured(ctx: StepContext) -> tuple[Tool, ...]:
    options = ctx.options
    if ctx.configured_tools is None or ctx.configured_tools[0] is not options:
        ordered = _ordered_tools(options.tools, options.tool_order)
        ctx.configured_tools = (options, ordered)
    return ctx.configured_tools[1]


async def session_prefix(ctx: StepContext) -> tuple[Message, ...]:
    """This instance's frozen session prefix, composed on first use.

    The composition seam checks for a cancel before anything is kept: a composition
    that a cancel or dispose interrupted is discarded (never cached, logged or sent),
    and the next turn composes again.
    """
    if ctx.session_prefix is None:
        composed = await ctx.seam("agent/session-prefix", ())
        messages = as_message_tuple(composed, "agent/session-prefix")
        detached = structure_as(
            freeze_json(unstructure(messages), "$.session_prefix"), tuple[Message, ...]
        )
        ctx.session_prefix = tuple(detached)
        ctx.prefix_chain = chain_of(ctx.session_prefix)
    return ctx.session_prefix


async def run_step(ctx: StepContext, turn: OpenTurn, number: int) -> StepOutcome:
    """Step `number` of `turn` up to its request leaving (the barrier), then the answer.

    A `session/event` observer runs inside an append and cannot stop the loop there: one
    that cancelled is honoured at the `checkpoint_if_cancelled` after it.
    """
    for content, source in ctx.steering:
        ctx.append_event(
            "steering/message", SteeringMessage(turn.number, content, source), surface=True
        )
    ctx.steering.clear()

    system, tools = await assemble(ctx)
    prefix = await session_prefix(ctx)

    await ctx.serial_seam("agent/pre-step", PreStep(turn.number, number, system, prefix))
    if ctx.compactor is not None and ctx.options.compaction.auto:
        await ctx.compactor.compact_if_needed(ctx, system, prefix, turn.scope)
        await trio.lowlevel.checkpoint_if_cancelled()

    boundary = ctx.session.derive_messages()
    history_chain = ctx.session.history_chain()
    ctx.append_event("step/start", StepStart(turn.number, number))
    step = turn.step = OpenStep(
        turn.number,
        number,
        {tool.name: tool for tool in tools},
        ctx.options.max_parallel_tool_calls,
    )
    await trio.lowlevel.checkpoint_if_cancelled()

    seed = ctx.options.call_config() if ctx.seed_from_options else _folded_config(ctx)
    config = await ctx.seam("agent/request", _tool_choice_for(ctx, turn, seed))
    if not isinstance(config, LlmCallConfig):
        raise TypeError(f"agent/request returned {type(config).__name__}, not LlmCallConfig")

    header = canonical(EpochHeader(config, system, ctx.current_tools, prefix))
    _record_header(ctx, header)
    ctx.seed_from_options = False
    request = Request(
        ctx.session.id,
        config,
        header.system,
        header.tools or (),
        prefix + boundary,
        len(prefix),
    )
    digest = request_digest(header, ctx.prefix_chain, history_chain)
    refused = await reserve_call(ctx, step, request, prefix)
    if refused is not None:
        # Shielded: the other agents the exhausted budget stops may cancel this one's
        # ancestors, and through them this turn; its reason is decided already.
        with trio.CancelScope(shield=True):
            await end_step(ctx, turn)
        return EndTurn(refused)
    await ctx.barrier()
    return await _answer(ctx, turn, step, request, digest)


async def _answer(
    ctx: StepContext, turn: OpenTurn, step: OpenStep, request: Request, digest: str
) -> StepOutcome:
    """The model's answer: streamed, through `agent/step-result`, logged; its tools run;
    the step closed, then what comes next."""
    assembler = ChunkAssembler()
    chunk_seqs: list[int] = []
    failure = await _stream(ctx, request, step, assembler, chunk_seqs)
    if failure is not None:
        settle_unanswered(ctx)
        return await _request_failed(ctx, turn, step, failure)

    assert assembler.finish is not None
    max_tokens = assembler.finish.kind == "max-tokens"
    assembled = Message("assistant", assembler.content(drop_tool_calls=max_tokens))
    reply = await ctx.seam("agent/step-result", assembled)
    content = _checked_reply(reply, allow_tool_calls=not max_tokens)
    failure = _duplicate_call_ids(content)
    if failure is not None:
        settle_unanswered(ctx)
        return await _request_failed(ctx, turn, step, failure)
    if any(isinstance(block, ToolCall) for block in content):
        # From the tool-requesting message on, contexts wait for the batch's last result:
        # an observer of this very append may inject, and must not split call from result.
        turn.tool_batch = []
    ctx.append_event(
        "assistant/message",
        AssistantMessage(
            turn.number,
            step.number,
            content,
            ctx.provider.name,
            request.config.model,
            assembler.usage,
            digest,
            rewritten=content != assembled.content,
        ),
        surface=True,
        sources=tuple(chunk_seqs),
    )
    settle_answered(ctx, assembler.usage)
    step.requested = tuple(block for block in content if isinstance(block, ToolCall))
    await trio.lowlevel.checkpoint_if_cancelled()
    if max_tokens:
        await end_step(ctx, turn)
        return EndTurn(TurnEndReason("max-tokens"))

    if step.requested:
        turn.called_tools = True
        await run_tools(ctx, turn, step)

    await end_step(ctx, turn)
    if step.parked:
        # The turn ends here and holds no task: the log alone keeps what waits.
        return EndTurn(TurnEndReason("awaiting_approval"))
    return await _transition(ctx, turn, step, paused=assembler.finish.kind == "pause")


async def _transition(
    ctx: StepContext, turn: OpenTurn, step: OpenStep, *, paused: bool
) -> StepOutcome:
    """After the step: `agent/turn-stop`, then `agent/turn-continuation`. A paused answer
    continues the turn: the next request re-sends the history, which holds it."""
    stop = await run_until_answer(
        ctx.chain("agent/turn-stop"), ctx.agent, TurnStop(turn.number, step.number)
    )
    await trio.lowlevel.checkpoint_if_cancelled()
    if stop is not None:
        ctx.steering.clear()
        return EndTurn(
            TurnEndReason("completed", reason=stop if isinstance(stop, str) else "agent/turn-stop")
        )
    decision = await ctx.seam(
        "agent/turn-continuation",
        Continuation(
            turn.number,
            step.number,
            had_tool_calls=bool(step.requested),
            steering_pending=bool(ctx.steering),
            continue_turn=bool(step.requested) or bool(ctx.steering) or paused,
        ),
    )
    if not isinstance(decision, Continuation):
        raise TypeError("agent/turn-continuation must return a Continuation")
    if not decision.continue_turn:
        return EndTurn(TurnEndReason("completed"))
    if decision.reason:
        ctx.steering.append(((Text(decision.reason),), Source.of_plugin("turn-continuation")))
    return NextStep()


async def _stream(
    ctx: StepContext,
    request: Request,
    step: OpenStep,
    assembler: ChunkAssembler,
    chunk_seqs: list[int],
) -> ErrorInfo | None:
    """Stream the model's answer into `assistant/chunk` events; the failure, if any."""
    provider = ctx.provider
    try:
        # Closed before anything is appended after the stream: the provider's cleanup
        # runs inside the step, on completion, error and cancel alike.
        async with opened_stream(provider, request) as stream:
            async for chunk in stream:
                if type(chunk) not in CHUNK_TYPES:
                    return ErrorInfo(
                        f"{provider.name} yielded a {type(chunk).__name__}, not a stream chunk",
                        ErrorCode.PROTOCOL_ERROR,
                    )
                try:
                    # `append` itself, not `append_event`: a chunk is no surface event.
                    event = ctx.append(
                        "assistant/chunk", AssistantChunk(step.turn, step.number, chunk)
                    )
                except SessionValidationError as exc:
                    return ErrorInfo(
                        f"{provider.name} yielded a chunk the log refuses: {exc.rule}",
                        ErrorCode.PROTOCOL_ERROR,
                    )
                chunk_seqs.append(event.seq)
                assembler.feed(chunk)
                await trio.lowlevel.checkpoint_if_cancelled()
    except ProviderError as exc:
        return ErrorInfo(str(exc), exc.code)
    finish = assembler.finish
    if finish is None:
        return ErrorInfo(
            "provider stream ended without a finish chunk", ErrorCode.STREAM_INCOMPLETE
        )
    if finish.kind == "error":
        return finish.error or ErrorInfo("provider reported an error", ErrorCode.PROVIDER_ERROR)
    return None


def _tool_choice_for(ctx: StepContext, turn: OpenTurn, seed: LlmCallConfig) -> LlmCallConfig:
    """The seed with the options' forcing `tool_choice` lifted once the turn called tools,
    and restored at a turn's first step (the folded header still holds the lifted one)."""
    options = ctx.options
    if not options.reset_tool_choice or options.tool_choice is None:
        return seed  # nothing to lift or restore (and no config to build: the usual case)
    forced = options.call_config().tool_choice
    if forced is None or forced.mode not in FORCING:
        return seed
    wanted = None if turn.called_tools else forced
    return seed if seed.tool_choice == wanted else evolve(seed, tool_choice=wanted)


def _folded_config(ctx: StepContext) -> LlmCallConfig:
    header = ctx.session.header()
    return header.config if header is not None else ctx.options.call_config()


def _record_header(ctx: StepContext, header: EpochHeader) -> None:
    folded = ctx.session.header()
    if not ctx.logged_header:
        ctx.append_event(
            "request/header",
            RequestHeaderEvent(header, "initial" if folded is None else "resume"),
        )
        ctx.logged_header = True
        return
    assert folded is not None
    if headers_equal(folded, header):
        return
    delta = diff(folded, header)
    if delta is None:
        ctx.append_event("request/header", RequestHeaderEvent(header, "fallback"))
    else:
        ctx.append_event("request/header-delta", delta)


async def end_step(ctx: TurnContext, turn: OpenTurn) -> None:
    """Close the step (`step/end`), then run `agent/post-step` for it."""
    step = close_step(ctx, turn)
    if step is not None:
        # An observer of step/end (or of the batch's last appends) may have cancelled.
        await trio.lowlevel.checkpoint_if_cancelled()
        step.post_step_done = True
        await ctx.serial_seam("agent/post-step", PostStep(step.turn, step.number))


def close_step(ctx: TurnContext, turn: OpenTurn) -> OpenStep | None:
    """Append `step/end` for the open step, if one is open; the step it closed."""
    step = turn.step
    turn.step = None
    if step is None or ctx.session.open_step is None:
        return None
    ctx.append_event("step/end", StepEnd(step.turn, step.number))
    turn.ended_step = step
    return step


async def _request_failed(
    ctx: StepContext, turn: OpenTurn, step: OpenStep, failure: ErrorInfo
) -> StepOutcome:
    await end_step(ctx, turn)
    retry = False
    if (
        failure.code == ErrorCode.CONTEXT_WINDOW_EXCEEDED
        and ctx.compactor is not None
        and turn.overflow_retries < ctx.options.compaction.max_overflow_retries
        and ctx.session_prefix is not None
    ):
        turn.overflow_retries += 1
        system, _tools = await assemble(ctx)
        retry = await ctx.compactor.compact_now(
            ctx, system, ctx.session_prefix, turn.scope, retain_zero=True
        )
    decision = await ctx.seam(
        "agent/request-error",
        RequestFailure(step.turn, step.number, failure, attempt=step.number, retry=retry),
    )
    if isinstance(decision, RequestFailure) and decision.retry:
        return NextStep()
    return EndTurn(
        TurnEndReason("error", step=step.number, message=failure.message, code=failure.code)
    )
