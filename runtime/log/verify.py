"""Offline verification of a stored log: every structural rule, every recorded request
digest against the request rebuilt from the log, and the pairing of each step's tool calls
with their logged calls and results (one incremental pass)."""

from __future__ import annotations

from collections.abc import Sequence

from attrs import frozen

from ...codecs.converter import canonical_bytes
from ..errors import ActorloopError, StreamProtocolError, VerificationFailed
from ..model.approvals import ApprovalRequest
from ..model.chunks import ChunkAssembler
from ..model.events import (
    AssistantChunk,
    AssistantMessage,
    Replace,
    SessionEvent,
    StepEnd,
    StepStart,
    ToolCallEvent,
    ToolResultEvent,
)
from ..model.messages import ToolCall
from .request import request_digest
from .session import Session, SessionMeta
from .surface import chain_of


@frozen
class VerifyReport:
    session_id: str
    events: int
    turns: int
    requests_checked: int
    requests_without_digest: int


def verify_log(meta: SessionMeta, events: Sequence[SessionEvent]) -> VerifyReport:
    """Replay `events` into a fresh session (re-checking every rule) and rebuild the request
    each `assistant/message` answered; raise VerificationFailed naming the first bad event."""
    replay = Session.create(meta.id)
    boundary_chain = b""
    checked = 0
    missing = 0
    prefix_chains: dict[bytes, bytes] = {}
    calls = _StepCalls()
    for event in events:
        if isinstance(event.data, StepStart):
            boundary_chain = replay.history_chain()
        data = event.data
        calls.check(event)
        if isinstance(data, AssistantMessage):
            if data.request_digest is None:
                missing += 1
            else:
                header = replay.header()
                if header is None:
                    raise VerificationFailed(
                        event.seq, "assistant/message without a request header"
                    )
                prefix = header.message_prefix or ()
                key = canonical_bytes(prefix)
                if key not in prefix_chains:
                    prefix_chains[key] = chain_of(prefix)
                rebuilt = request_digest(header, prefix_chains[key], boundary_chain)
                if rebuilt != data.request_digest:
                    raise VerificationFailed(
                        event.seq,
                        f"request digest mismatch: recorded {data.request_digest[:16]}…, "
                        f"rebuilt from the log {rebuilt[:16]}…",
                    )
                checked += 1
        if isinstance(data, AssistantMessage) and event.source_event_seqs:
            _check_chunks(replay, event)
        try:
            replay.append_event(event)
        except ActorloopError as exc:
            raise VerificationFailed(event.seq, str(exc)) from exc
    return VerifyReport(meta.id, len(events), replay.last_turn, checked, missing)


def _check_chunks(replay: Session, event: SessionEvent) -> None:
    """An assistant message must be exactly what its provenance chunks assemble to."""
    assembler = ChunkAssembler()
    for seq in event.source_event_seqs or ():
        chunk = replay.event(seq).data
        if not isinstance(chunk, AssistantChunk):
            raise VerificationFailed(event.seq, f"provenance seq {seq} is not an assistant/chunk")
        try:
            assembler.feed(chunk.chunk)
        except StreamProtocolError as exc:
            raise VerificationFailed(event.seq, f"provenance chunk seq {seq}: {exc}") from exc
    truncated = assembler.finish is not None and assembler.finish.kind == "max-tokens"
    assert isinstance(event.data, AssistantMessage)
    if event.data.rewritten:
        return  # a step-result listener replaced the content; the chunks still assembled
    if assembler.content(drop_tool_calls=truncated) != event.data.content:
        raise VerificationFailed(event.seq, "assistant/message content diverges from its chunks")


class _StepCalls:
    """Within one step: every `tool/call` is one the step's assistant message requested
    (same id and name), and by `step/end` every requested call has its `tool/result`. A
    listener rewriting a call's id would otherwise leave the real call unanswered."""

    def __init__(self) -> None:
        self.requested: dict[str, str] = {}
        self.answered: set[str] = set()
        self.parked: dict[str, str] = {}
        """Calls with an `approval/request` and no result yet: they may be answered in a
        later step (after their decision), and a step may end without their result."""

    def check(self, event: SessionEvent) -> None:
        data = event.data
        if isinstance(data, StepStart):
            self.requested.clear()
            self.answered.clear()
        elif isinstance(data, AssistantMessage):
            for block in data.content:
                if isinstance(block, ToolCall):
                    self.requested[block.id] = block.name
        elif isinstance(data, ApprovalRequest):
            if data.via_call is not None and data.via_tool is not None:
                self.parked[data.via_call] = data.via_tool  # the delegation waits
            else:
                self.parked[data.call_id] = data.tool
        elif isinstance(data, ToolCallEvent):
            name = self.requested.get(data.call_id) or self.parked.get(data.call_id)
            if name is None:
                raise VerificationFailed(
                    event.seq,
                    f"tool/call {data.call_id!r} names no call the step's assistant message "
                    f"requested (requested: {sorted(self.requested) or 'none'})",
                )
            if name != data.name:
                raise VerificationFailed(
                    event.seq,
                    f"tool/call {data.call_id!r} names tool {data.name!r}, the assistant "
                    f"message requested {name!r}",
                )
        elif isinstance(data, ToolResultEvent) and not isinstance(event.surface_op, Replace):
            self.answered.add(data.call_id)
            self.parked.pop(data.call_id, None)
        elif isinstance(data, StepEnd):
            missing = sorted(self.requested.keys() - self.answered - self.parked.keys())
            if missing:
                raise VerificationFailed(
                    event.seq,
                    f"step {data.step} ends with requested tool calls unanswered: {missing}",
                )
