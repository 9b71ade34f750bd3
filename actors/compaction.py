"""`CompactionActor`: prefix-aware token pressure, tool-pair-balanced region selection and the
summarizer call. The loop appends every event; the actor only runs summarizer requests."""

from __future__ import annotations

import logging
import uuid
from itertools import accumulate
from typing import TYPE_CHECKING

import trio
from attrs import define, field, frozen

from ..runtime.errors import CompactionFailed, ErrorCode
from ..runtime.log.request import Request
from ..runtime.log.surface import project
from ..runtime.log.tokens import estimate_message
from ..runtime.model.chunks import ChunkAssembler, ErrorInfo, TokenUsage
from ..runtime.model.events import (
    CompactionEnd,
    CompactionPrune,
    CompactionStart,
    CompactionSummary,
    Replace,
    SessionEvent,
    ToolResultEvent,
    UserMessage,
)
from ..runtime.model.header import LlmCallConfig, ToolSchema
from ..runtime.model.messages import Message, Source, Text, ToolCall, ToolResult
from ..runtime.providers.base import Provider, opened_stream
from .kernel import ActorRef, Mailbox

if TYPE_CHECKING:
    from .loop.context import LoopView

log = logging.getLogger("actorloop.compaction")

COMPACTION_SOURCE = Source.of_plugin("compaction")
SUMMARY_OPEN = "<conversation-summary>"
SUMMARY_CLOSE = "</conversation-summary>"
INSTRUCTION = (
    "Summarize the conversation above so it can replace it. Keep every fact, decision, "
    "open task, file name and tool result that later turns may need; if it begins with an "
    "earlier summary, merge that summary in. Answer with the summary text only."
)
PRUNE_OVER = 8192
PRUNE_HEAD = 4096
PRUNE_TAIL = 1024


@frozen
class Region:
    """A run of surface nodes (from the head) chosen for one summary."""

    seqs: tuple[int, ...]
    messages: tuple[Message, ...]
    tokens: int


@frozen
class SummaryJob:
    provider: Provider
    request: Request


@frozen
class SummaryOutcome:
    text: str
    usage: TokenUsage | None


@define
class _Pending:
    job: SummaryJob
    scope: trio.CancelScope = field(factory=trio.CancelScope)
    done: trio.Event = field(factory=trio.Event)
    outcome: SummaryOutcome | None = None
    error: BaseException | None = None


def frame_summary(text: str) -> str:
    return f"{SUMMARY_OPEN}\n{text}\n{SUMMARY_CLOSE}"


def is_summary(event: SessionEvent) -> bool:
    data = event.data
    return isinstance(data, UserMessage) and data.source == COMPACTION_SOURCE


def balanced_cut(nodes: list[tuple[int, Message | None]], cut: int) -> int:
    """Move `cut` toward the head until no tool call is separated from its result.

    Call ids are unique within a step only, so an id may come back in a later step: each
    result pairs with the latest earlier unanswered call of its id, and a cut is balanced
    when no such pair has its call before the cut and its result at or after it.
    """
    open_calls: dict[str, list[int]] = {}
    # a difference array: the pair (call, result) crosses every cut c with call < c <= result
    straddle = [0] * (len(nodes) + 2)
    for index, (_seq, message) in enumerate(nodes):
        if message is None:
            continue
        for block in message.content:
            if isinstance(block, ToolCall):
                open_calls.setdefault(block.id, []).append(index)
            elif isinstance(block, ToolResult) and open_calls.get(block.tool_call_id):
                call = open_calls[block.tool_call_id].pop()
                straddle[call + 1] += 1
                straddle[index + 1] -= 1
    crossing = list(accumulate(straddle))
    while cut > 0 and crossing[cut] > 0:
        cut -= 1
    return cut


def _summary_request(
    loop: LoopView,
    region: Region,
    full_system_prompt: str,
    session_prefix: tuple[Message, ...],
) -> Request:
    """The summarizer's one-shot request: the session prefix, the region, the instruction,
    under the session's header (system and tools), with the summary's own call settings."""
    config = loop.options.compaction
    session = loop.session
    header = session.header()
    base = header.config if header is not None else loop.options.call_config()
    call_config = LlmCallConfig(
        model=config.summary_model or base.model,
        provider=base.provider,
        max_tokens=config.summary_max_tokens,
        # What the deployment needs on every call (a gateway's headers and body fields,
        # the cache settings, the end-user tag) carries over; the agent's answer shape
        # (tool choice, response format, thinking) does not: a summary is plain text.
        extra_headers=base.extra_headers,
        extra_body=base.extra_body,
        cache_ttl=base.cache_ttl,
        cache_breakpoints=base.cache_breakpoints,
        user=base.user,
        metadata=base.metadata,
    )
    system = header.system if header is not None else full_system_prompt or None
    tools = (header.tools or ()) if header is not None else loop.current_tools
    request = Request(
        session.id,
        call_config,
        system,
        tools,
        (*session_prefix, *region.messages, Message.user(INSTRUCTION)),
        prefix_length=len(session_prefix),
        one_shot=True,
    )
    return request


class CompactionActor:
    """One per runtime, supervised by the kernel. `run()` serves summarizer jobs from its
    mailbox, each in its own task of the actor's nursery so one agent's slow summary never
    delays another's; the loop-side methods below run in the calling loop's task, which
    stays the session's only writer."""

    def __init__(self, capacity: int = 256) -> None:
        self.capacity = capacity
        self._mailbox: ActorRef[_Pending] | None = None
        self.compactions = 0
        self.failures = 0

    def attach(self, mailbox: ActorRef[_Pending]) -> None:
        """Wire the kernel mailbox the supervisor created for this actor."""
        self._mailbox = mailbox

    async def run(self, mailbox: Mailbox[_Pending]) -> None:
        """The actor's body (spawned by the kernel's Supervisor)."""
        async with trio.open_nursery() as nursery:
            async for pending in mailbox:
                nursery.start_soon(self._serve, pending)

    async def _serve(self, pending: _Pending) -> None:
        with pending.scope:
            try:
                pending.outcome = await _summarize(pending.job)
            except Exception as exc:
                pending.error = exc
        if pending.outcome is None and pending.error is None:
            pending.error = CompactionFailed("summarizer call was cancelled", ErrorCode.CANCELLED)
        pending.done.set()

    async def summarize(self, job: SummaryJob) -> SummaryOutcome:
        """Ask the actor for a summary; a cancel of the caller cancels the job too."""
        if self._mailbox is None:
            raise CompactionFailed("the compaction actor is not running", ErrorCode.NOT_RUNNING)
        pending = _Pending(job)
        try:
            await self._mailbox.tell(pending)
            await pending.done.wait()
        except BaseException:
            pending.scope.cancel()
            raise
        if pending.error is not None:
            raise pending.error
        assert pending.outcome is not None
        return pending.outcome

    # ------------------------------------------------------------------ loop side

    def context_window(self, loop: LoopView) -> int | None:
        if loop.options.context_window is not None:
            return loop.options.context_window
        info = loop.provider.model_info(loop.options.model)
        return info.context_window if info is not None else None

    def pressure(
        self,
        loop: LoopView,
        system: str,
        tools: tuple[ToolSchema, ...],
        prefix: tuple[Message, ...],
    ) -> int:
        return loop.meter.total(system, tools, prefix)

    async def compact_if_needed(
        self,
        loop: LoopView,
        full_system_prompt: str,
        session_prefix: tuple[Message, ...],
        cancel: trio.CancelScope,
    ) -> None:
        window = self.context_window(loop)
        if window is None:
            return
        config = loop.options.compaction
        threshold = config.threshold_ratio * window
        tools = loop.current_tools
        if self.pressure(loop, full_system_prompt, tools, session_prefix) <= threshold:
            return
        # A pre-step listener may have cancelled and returned normally: write nothing.
        await trio.lowlevel.checkpoint_if_cancelled()
        if config.prune:
            self.prune(loop)
            if self.pressure(loop, full_system_prompt, tools, session_prefix) <= threshold:
                return
        for _attempt in range(config.compaction_retries + 1):
            await self.compact_now(loop, full_system_prompt, session_prefix, cancel)
            if self.pressure(loop, full_system_prompt, tools, session_prefix) <= threshold:
                return
        log.warning(
            "session %s is still over %d tokens after compaction; the turn continues",
            loop.session.id,
            int(threshold),
        )

    def retain_tokens(self, loop: LoopView) -> int:
        config = loop.options.compaction
        if config.retain_tokens is not None:
            return config.retain_tokens
        window = self.context_window(loop) or 0
        return int(config.retain_ratio * window)

    def select_region(self, loop: LoopView, retain: int) -> Region | None:
        """Head-anchored region leaving >= `retain` tokens in the tail, tool-pair balanced,
        never reaching into an open step."""
        session = loop.session
        surface = session.surface
        nodes = [(seq, project(session.event(seq))) for seq in surface]
        limit = len(nodes)
        if session.open_step is not None:
            step_start = max(
                (i for i in range(len(session)) if session.event(i).type == "step/start"),
                default=-1,
            )
            limit = sum(1 for seq, _ in nodes if seq < step_start)
        kept = 0
        cut = limit
        while cut > 0 and kept < retain:
            message = nodes[cut - 1][1]
            kept += estimate_message(message) if message is not None else 0
            cut -= 1
        cut = balanced_cut(nodes[:limit], cut)
        region = nodes[:cut]
        if not region:
            return None
        if len(region) == 1 and is_summary(session.event(region[0][0])):
            return None
        messages = tuple(message for _seq, message in region if message is not None)
        return Region(
            tuple(seq for seq, _ in region),
            messages,
            sum(estimate_message(message) for message in messages),
        )

    async def compact_now(
        self,
        loop: LoopView,
        full_system_prompt: str,
        session_prefix: tuple[Message, ...],
        cancel: trio.CancelScope,
        *,
        retain_zero: bool = False,
    ) -> bool:
        """One compaction transaction; returns True if the surface was rewritten."""
        region = self.select_region(loop, 0 if retain_zero else self.retain_tokens(loop))
        if region is None:
            return False
        config = loop.options.compaction
        session = loop.session
        request = _summary_request(loop, region, full_system_prompt, session_prefix)
        await trio.lowlevel.checkpoint_if_cancelled()  # a cancelled turn starts nothing
        compaction_id = uuid.uuid4().hex
        turn = session.open_turn
        assert turn is not None, "compaction runs inside a turn"
        start = loop.append("compaction/start", CompactionStart(compaction_id, turn))
        try:
            outcome = await self.summarize(SummaryJob(loop.provider, request))
            # A cancel or dispose requested while the answer came in (e.g. by a task started
            # in the same scheduling batch) still discards the summary: one schedule point
            # lets it land. The commit below stays atomic (no yield between its appends).
            await trio.lowlevel.checkpoint()
            framed = frame_summary(outcome.text)
            summary_tokens = estimate_message(Message.user(framed))
            if summary_tokens >= region.tokens:
                raise CompactionFailed(
                    f"summary ({summary_tokens} tokens) is not smaller than the "
                    f"{region.tokens} tokens it would replace",
                    ErrorCode.SUMMARY_TOO_LARGE,
                )
        except BaseException as exc:
            code = getattr(exc, "code", None) or (
                ErrorCode.CANCELLED
                if isinstance(exc, trio.Cancelled)
                else ErrorCode.COMPACTION_FAILED
            )
            loop.append(
                "compaction/end",
                CompactionEnd(compaction_id, turn, ErrorInfo(str(exc) or type(exc).__name__, code)),
            )
            self.failures += 1
            if isinstance(exc, Exception):
                # Fail closed: only cancellation propagates; the turn goes on
                # (docs/spec/compaction.md §7.7).
                log.warning("compaction of %s failed: %r", session.id, exc)
                return False
            raise
        # Commit without yielding: nothing can interleave between these three appends.
        summary = loop.append(
            "compaction/summary",
            CompactionSummary(
                compaction_id,
                outcome.text,
                region.seqs,
                region.tokens,
                loop.provider.name,
                request.model,
                config.summary_max_tokens,
                outcome.usage,
            ),
        )
        loop.append(
            "user/message",
            UserMessage((Text(framed),), COMPACTION_SOURCE),
            surface_op=Replace(region.seqs[0], region.seqs[-1]),
            sources=(start.seq, summary.seq, *region.seqs),
        )
        loop.append("compaction/end", CompactionEnd(compaction_id, turn))
        self.compactions += 1
        return True

    def prune(self, loop: LoopView) -> int:
        """Shrink oversized tool results (deterministic); returns how many were pruned."""
        session = loop.session
        pruned = 0
        for seq in session.surface:
            event = session.event(seq)
            data = event.data
            if not isinstance(data, ToolResultEvent):
                continue
            text = "".join(block.text for block in data.content)
            if len(text) <= PRUNE_OVER:
                continue
            dropped = len(text) - PRUNE_HEAD - PRUNE_TAIL
            shortened = (
                f"{text[:PRUNE_HEAD]}\n[... {dropped} characters pruned ...]\n{text[-PRUNE_TAIL:]}"
            )
            message = project(event)
            assert message is not None
            prune = loop.append(
                "compaction/prune", CompactionPrune((seq,), estimate_message(message))
            )
            loop.append(
                "tool/result",
                ToolResultEvent(
                    data.turn,
                    data.step,
                    data.call_id,
                    (Text(shortened),),
                    data.is_error,
                    data.error,
                ),
                surface_op=Replace(seq, seq),
                sources=(prune.seq, seq),
            )
            pruned += 1
        return pruned


async def _summarize(job: SummaryJob) -> SummaryOutcome:
    assembler = ChunkAssembler()
    async with opened_stream(job.provider, job.request) as stream:
        async for chunk in stream:
            assembler.feed(chunk)
    finish = assembler.finish
    if finish is None:
        raise CompactionFailed(
            "summarizer stream ended without a finish", ErrorCode.STREAM_INCOMPLETE
        )
    if finish.kind == "error":
        error = finish.error
        raise CompactionFailed(
            error.message if error else "summarizer error",
            (error.code if error else None) or ErrorCode.PROVIDER_ERROR,
        )
    if finish.kind == "max-tokens":
        raise CompactionFailed("summarizer hit max tokens", ErrorCode.SUMMARY_TRUNCATED)
    text = "".join(block.text for block in assembler.content() if isinstance(block, Text)).strip()
    if not text:
        raise CompactionFailed("summarizer returned no text", ErrorCode.SUMMARY_EMPTY)
    return SummaryOutcome(text, assembler.usage)
