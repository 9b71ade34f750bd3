"""The timeline of one session as the inspector draws it: turns → steps → the model call and
the tool calls of each step, with durations from event times, cancellations and crash
repairs marked, compaction transactions and what they summarized. A pure function of the
session's meta and events."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, TypeAlias

from attrs import define, field, frozen

from ...cli.render import arguments_text, reason_text, trigger_text
from ...errors import ErrorCode
from ...model.approvals import ApprovalDecision, ApprovalRequest
from ...model.chunks import Finish, TokenUsage
from ...model.events import (
    AssistantChunk,
    AssistantMessage,
    CompactionEnd,
    CompactionPrune,
    CompactionStart,
    CompactionSummary,
    ContextMessage,
    IgnorableData,
    PromptBlocked,
    RequestHeaderEvent,
    SessionEvent,
    SteeringMessage,
    StepEnd,
    StepStart,
    ToolCallEvent,
    ToolResultEvent,
    TurnEnd,
    TurnEndReason,
    TurnStart,
    UserMessage,
)
from ...model.header import HeaderDelta
from ...model.messages import Content, Reasoning, Source, Text, ToolCall
from ...model.meta import SessionMeta

MarkKind: TypeAlias = Literal["cancelled", "repaired", "error", "warning", "compacted"]
NoteKind: TypeAlias = Literal[
    "user",
    "context",
    "steering",
    "blocked",
    "header",
    "compaction",
    "prune",
    "ignored",
    "approval",
    "decision",
]

CANCELLED_TOOL_CODES = frozenset({ErrorCode.TOOL_CANCELLED, ErrorCode.TOOL_ABORTED_BEFORE_DISPATCH})
"""Tool results the loop writes for calls a cancellation stopped."""
REPAIRED_TOOL_CODES = frozenset({ErrorCode.TOOL_OUTCOME_UNKNOWN, ErrorCode.TOOL_NOT_STARTED})
"""Tool results crash repair writes for calls whose outcome the log never got."""
PREVIEW_CHARS = 240


@frozen
class Mark:
    """Something a reader must not miss: a cancellation, a crash repair, an error."""

    kind: MarkKind
    text: str


@frozen
class Note:
    """A log entry that is not part of a step's calls: a prompt, context, steering, a
    blocked prompt, a request-header event, compaction work, an approval request or
    decision, an event of an unknown type."""

    seq: int
    time: int
    kind: NoteKind
    title: str
    text: str


@frozen
class ModelCall:
    """One model call: from the step's request (its start) to the `assistant/message` at
    `seq`; `first_chunk_at` is when the first streamed chunk was logged."""

    seq: int
    model: str
    provider: str
    started_at: int
    ended_at: int
    first_chunk_at: int | None
    usage: TokenUsage | None
    text: str
    tool_calls: int
    rewritten: bool
    has_digest: bool


@frozen
class ToolRun:
    """One tool call, from its `tool/call` to its `tool/result` (None while it runs)."""

    call_id: str
    name: str
    arguments: str
    call_seq: int
    started_at: int
    result_seq: int | None
    ended_at: int | None
    result: str
    is_error: bool
    mark: Mark | None


@frozen
class Step:
    """One step: its request header event (if the step logged one), the model call (None
    while it streams, or when the call failed), the tool calls in model order."""

    step: int
    start_seq: int
    started_at: int
    end_seq: int | None
    ended_at: int | None
    header: Note | None
    model: ModelCall | None
    chunks: int
    failure: str | None
    tools: tuple[ToolRun, ...]


@frozen
class Turn:
    """One turn and what happened in it, in log order (`entries`: steps and notes).
    `inherited` is true for a fork child's turns that belong to its parent's seed."""

    turn: int
    start_seq: int
    started_at: int
    trigger: str
    end_seq: int | None
    ended_at: int | None
    reason: TurnEndReason | None
    reason_text: str | None
    marks: tuple[Mark, ...]
    entries: tuple[Step | Note, ...]
    inherited: bool
    last_time: int

    @property
    def duration_ms(self) -> int:
        """The turn's length; for an open turn, up to its last event so far."""
        return (self.ended_at if self.ended_at is not None else self.last_time) - self.started_at

    @property
    def steps(self) -> tuple[Step, ...]:
        """The turn's steps."""
        return tuple(entry for entry in self.entries if isinstance(entry, Step))


@frozen
class Compaction:
    """One compaction transaction: `start_seq` to `end_seq`, the summary at `summary_seq`
    and the event seqs it replaced (`shadowed`); `error` when it failed closed."""

    compaction_id: str
    turn: int
    start_seq: int
    end_seq: int | None
    summary_seq: int | None
    shadowed: tuple[int, ...]
    shadowed_tokens: int
    model: str | None
    error: str | None


@frozen
class Timeline:
    """A session's turns (and notes logged outside any turn) in log order, its compaction
    transactions, where a fork's seed ends, and the last seq (the live view goes on
    after it)."""

    blocks: tuple[Turn | Note, ...]
    compactions: tuple[Compaction, ...]
    seed_length: int
    parent: str | None
    last_seq: int
    open_turn: int | None

    @property
    def turns(self) -> tuple[Turn, ...]:
        """Only the turns."""
        return tuple(block for block in self.blocks if isinstance(block, Turn))


def preview(text: str, limit: int = PREVIEW_CHARS) -> str:
    """`text` on one line, cut to `limit` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def content_preview(content: Content) -> str:
    """Content blocks as one short line: text, reasoning, tool calls by name."""
    parts: list[str] = []
    for block in content:
        if isinstance(block, Text):
            parts.append(block.text)
        elif isinstance(block, Reasoning):
            parts.append(f"(reasoning) {block.text}")
        elif isinstance(block, ToolCall):
            parts.append(f"→ {block.name}({arguments_text(block.arguments)})")
    return preview(" ".join(parts))


def _source(source: Source) -> str:
    return "user" if source.kind == "user" else f"plugin {source.plugin}"


def turn_marks(reason: TurnEndReason | None) -> tuple[Mark, ...]:
    """The marks a turn's end deserves."""
    if reason is None:
        return ()
    kind = reason.kind
    if kind in ("aborted", "disposed"):
        return (Mark("cancelled", reason_text(reason)),)
    if kind == "interrupted":
        return (Mark("repaired", "interrupted: closed by crash repair"),)
    if kind == "error":
        return (Mark("error", reason_text(reason)),)
    if kind in ("rejected", "max-tokens", "budget_exhausted"):
        return (Mark("warning", reason_text(reason)),)
    return ()


def tool_mark(data: ToolResultEvent) -> Mark | None:
    """The mark of a tool result: cancelled, repaired or failed (None when it answered)."""
    if not data.is_error:
        return None
    code = data.error.code if data.error is not None else None
    if code in CANCELLED_TOOL_CODES:
        return Mark("cancelled", str(code))
    if code in REPAIRED_TOOL_CODES:
        return Mark("repaired", f"{code}: written by crash repair")
    return Mark("error", str(code) if code else "error")


@define
class _ToolBuilder:
    call: SessionEvent | None
    call_id: str
    name: str
    arguments: str
    result: SessionEvent | None = None

    def build(self) -> ToolRun:
        result = self.result
        data = result.data if result is not None else None
        assert data is None or isinstance(data, ToolResultEvent)
        start = self.call or result
        assert start is not None
        return ToolRun(
            call_id=self.call_id,
            name=self.name,
            arguments=arguments_text(self.arguments) if self.call is not None else "",
            call_seq=start.seq,
            started_at=start.time,
            result_seq=None if result is None else result.seq,
            ended_at=None if result is None else result.time,
            result=preview("".join(block.text for block in data.content)) if data else "",
            is_error=bool(data and data.is_error),
            mark=tool_mark(data) if data is not None else None,
        )


@define
class _StepBuilder:
    start: SessionEvent
    step: int
    request_at: int
    end: SessionEvent | None = None
    header: Note | None = None
    answer: ModelCall | None = None
    chunks: int = 0
    first_chunk_at: int | None = None
    failure: str | None = None
    tools: dict[str, _ToolBuilder] = field(factory=dict)

    def build(self) -> Step:
        return Step(
            step=self.step,
            start_seq=self.start.seq,
            started_at=self.start.time,
            end_seq=None if self.end is None else self.end.seq,
            ended_at=None if self.end is None else self.end.time,
            header=self.header,
            model=self.answer,
            chunks=self.chunks,
            failure=self.failure,
            tools=tuple(tool.build() for tool in self.tools.values()),
        )


@define
class _TurnBuilder:
    start: SessionEvent
    data: TurnStart
    inherited: bool
    entries: list[_StepBuilder | Note] = field(factory=list)
    end: SessionEvent | None = None
    last_time: int = 0
    last_seq: int = 0

    @property
    def step(self) -> _StepBuilder | None:
        for entry in reversed(self.entries):
            if isinstance(entry, _StepBuilder):
                return entry if entry.end is None else None
        return None

    def step_of(self, number: int) -> _StepBuilder | None:
        """The step numbered `number` (the last one, should a log repeat a number)."""
        for entry in reversed(self.entries):
            if isinstance(entry, _StepBuilder) and entry.step == number:
                return entry
        return None

    def build(self, shadowed_by: dict[int, int]) -> Turn:
        reason = self.end.data.reason if self.end and isinstance(self.end.data, TurnEnd) else None
        summaries = sorted(
            {
                summary
                for seq, summary in shadowed_by.items()
                if self.start.seq <= seq <= self.last_seq
            }
        )
        compacted = tuple(
            Mark("compacted", f"summarized by the compaction at seq {summary}")
            for summary in summaries
        )
        return Turn(
            turn=self.data.turn,
            start_seq=self.start.seq,
            started_at=self.start.time,
            trigger=trigger_text(self.data.trigger),
            end_seq=None if self.end is None else self.end.seq,
            ended_at=None if self.end is None else self.end.time,
            reason=reason,
            reason_text=None if reason is None else reason_text(reason),
            marks=turn_marks(reason) + compacted,
            entries=tuple(e.build() if isinstance(e, _StepBuilder) else e for e in self.entries),
            inherited=self.inherited,
            last_time=self.last_time,
        )


def _note(event: SessionEvent) -> Note | None:
    data = event.data
    seq, time = event.seq, event.time
    if isinstance(data, UserMessage):
        title = (
            "summary"
            if data.source.plugin == "compaction"
            else f"prompt from {_source(data.source)}"
        )
        return Note(seq, time, "user", title, content_preview(data.content))
    if isinstance(data, ContextMessage):
        return Note(
            seq,
            time,
            "context",
            f"context from {_source(data.source)}",
            content_preview(data.content),
        )
    if isinstance(data, SteeringMessage):
        return Note(
            seq,
            time,
            "steering",
            f"steering from {_source(data.source)}",
            content_preview(data.content),
        )
    if isinstance(data, PromptBlocked):
        return Note(
            seq, time, "blocked", f"prompt blocked: {data.reason}", content_preview(data.content)
        )
    if isinstance(data, RequestHeaderEvent):
        return Note(seq, time, "header", f"header snapshot ({data.reason})", "")
    if isinstance(data, HeaderDelta):
        return Note(seq, time, "header", "header delta", "")
    if isinstance(data, CompactionPrune):
        return Note(
            seq,
            time,
            "prune",
            "tool result pruned",
            f"~{data.shadowed_token_count:,} tokens at seq {data.shadowed_seqs[0]}",
        )
    if isinstance(data, ApprovalRequest):
        where = f" in {data.session_id}" if data.session_id else ""
        return Note(
            seq,
            time,
            "approval",
            f"{data.tool} {data.call_id} waits for approval{where}",
            preview(data.arguments),
        )
    if isinstance(data, ApprovalDecision):
        verb = "approved" if data.decision == "approve" else "rejected"
        who = (data.meta.get("by") or data.meta.get("via")) if data.meta else None
        details = [f"by {who}" if isinstance(who, str) else ""]
        if data.arguments is not None:
            details.append(f"edited arguments {preview(data.arguments)}")
        if data.reason:
            details.append(data.reason)
        return Note(
            seq, time, "decision", f"{data.call_id} {verb}", " · ".join(d for d in details if d)
        )
    if isinstance(data, IgnorableData):
        return Note(seq, time, "ignored", event.type, "an event type this version does not know")
    return None


def build_timeline(meta: SessionMeta, events: Sequence[SessionEvent]) -> Timeline:
    """The timeline of the session `meta` whose log is `events` (durable or live)."""
    seed = meta.seed_length or 0
    blocks: list[_TurnBuilder | Note] = []
    compactions: dict[str, dict[str, SessionEvent]] = {}
    turn: _TurnBuilder | None = None
    for event in events:
        data = event.data
        if turn is not None:
            turn.last_time, turn.last_seq = event.time, event.seq
        if isinstance(data, TurnStart):
            turn = _TurnBuilder(event, data, event.seq < seed, last_time=event.time)
            turn.last_seq = event.seq
            blocks.append(turn)
            continue
        if isinstance(data, (CompactionStart, CompactionSummary, CompactionEnd)):
            parts = compactions.setdefault(data.compaction_id, {})
            parts[type(data).__name__] = event
        if turn is None:
            note = _note(event)
            if note is not None:
                blocks.append(note)
            continue
        _add(turn, event)
        if isinstance(data, TurnEnd):
            turn.end = event
            turn = None
    done = tuple(_compaction(parts) for parts in compactions.values())
    shadowed_by = {
        seq: compaction.summary_seq
        for compaction in done
        if compaction.summary_seq is not None
        for seq in compaction.shadowed
    }
    return Timeline(
        blocks=tuple(b.build(shadowed_by) if isinstance(b, _TurnBuilder) else b for b in blocks),
        compactions=done,
        seed_length=seed,
        parent=meta.parent_session,
        last_seq=len(events) - 1,
        open_turn=turn.data.turn if turn is not None else None,
    )


def _add(turn: _TurnBuilder, event: SessionEvent) -> None:
    """Add one event of an open turn to it."""
    data = event.data
    step = turn.step
    if isinstance(data, StepStart):
        turn.entries.append(_StepBuilder(event, data.step, event.time))
    elif isinstance(data, StepEnd) and step is not None:
        step.end = event
    elif isinstance(data, AssistantChunk) and step is not None:
        step.chunks += 1
        if step.first_chunk_at is None:
            step.first_chunk_at = event.time
        chunk = data.chunk
        if isinstance(chunk, Finish) and chunk.error is not None:
            step.failure = chunk.error.message
    elif isinstance(data, AssistantMessage) and step is not None:
        step.answer = ModelCall(
            seq=event.seq,
            model=data.model,
            provider=data.provider,
            started_at=step.request_at,
            ended_at=event.time,
            first_chunk_at=step.first_chunk_at,
            usage=data.usage,
            text=content_preview(tuple(b for b in data.content if not isinstance(b, ToolCall))),
            tool_calls=sum(1 for block in data.content if isinstance(block, ToolCall)),
            rewritten=data.rewritten,
            has_digest=data.request_digest is not None,
        )
    elif isinstance(data, ToolCallEvent) and (owner := turn.step_of(data.step)) is not None:
        owner.tools[data.call_id] = _ToolBuilder(event, data.call_id, data.name, data.arguments)
    elif isinstance(data, ToolResultEvent) and (owner := turn.step_of(data.step)) is not None:
        tool = owner.tools.get(data.call_id)
        if tool is None:
            # crash repair answers a call that never got its tool/call (TOOL_NOT_STARTED)
            name = data.error.name if data.error is not None else "tool"
            tool = owner.tools[data.call_id] = _ToolBuilder(None, data.call_id, name, "")
        tool.result = event
    elif isinstance(data, (RequestHeaderEvent, HeaderDelta)) and step is not None:
        step.header = _note(event)
        step.request_at = event.time
    elif isinstance(data, CompactionSummary):
        turn.entries.append(
            Note(
                event.seq,
                event.time,
                "compaction",
                f"compaction summary by {data.model}",
                f"replaces {len(data.shadowed_seqs)} events "
                f"(~{data.shadowed_token_count:,} tokens): {preview(data.summary)}",
            )
        )
    elif isinstance(data, CompactionEnd) and data.error is not None:
        turn.entries.append(
            Note(
                event.seq,
                event.time,
                "compaction",
                "compaction failed",
                f"{data.error.code or ''} {data.error.message}".strip(),
            )
        )
    elif not isinstance(data, (CompactionStart, CompactionEnd, TurnEnd)):
        note = _note(event)
        if note is not None:
            turn.entries.append(note)


def _compaction(parts: dict[str, SessionEvent]) -> Compaction:
    start, summary, end = (
        parts.get(name) for name in ("CompactionStart", "CompactionSummary", "CompactionEnd")
    )
    first = start or summary or end
    assert first is not None
    head = first.data
    assert isinstance(head, (CompactionStart, CompactionSummary, CompactionEnd))
    summary_data = summary.data if summary is not None else None
    end_data = end.data if end is not None else None
    assert summary_data is None or isinstance(summary_data, CompactionSummary)
    assert end_data is None or isinstance(end_data, CompactionEnd)
    turn = head.turn if isinstance(head, (CompactionStart, CompactionEnd)) else 0
    error = end_data.error if end_data is not None else None
    return Compaction(
        compaction_id=head.compaction_id,
        turn=turn,
        start_seq=first.seq,
        end_seq=None if end is None else end.seq,
        summary_seq=None if summary is None else summary.seq,
        shadowed=summary_data.shadowed_seqs if summary_data else (),
        shadowed_tokens=summary_data.shadowed_token_count if summary_data else 0,
        model=summary_data.model if summary_data else None,
        error=None if error is None else f"{error.code or ''} {error.message}".strip(),
    )
