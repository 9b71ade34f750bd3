"""Offline verification of a stored log: every structural rule, and every recorded request
digest against the request rebuilt from the log (one incremental pass)."""

from __future__ import annotations

from collections.abc import Sequence

from attrs import frozen

from actorloop.codecs.converter import canonical_bytes
from actorloop.runtime.chunks import ChunkAssembler
from actorloop.runtime.errors import ActorloopError, VerificationFailed
from actorloop.runtime.events import AssistantChunk, AssistantMessage, SessionEvent, StepStart
from actorloop.runtime.request import request_digest
from actorloop.runtime.session import Session, SessionMeta
from actorloop.runtime.surface import chain_of


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
    for event in events:
        if isinstance(event.data, StepStart):
            boundary_chain = replay.history_chain()
        data = event.data
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
        assembler.feed(chunk.chunk)
    truncated = assembler.finish is not None and assembler.finish.kind == "max-tokens"
    assert isinstance(event.data, AssistantMessage)
    if event.data.rewritten:
        return  # a step-result listener replaced the content; the chunks still assembled
    if assembler.content(drop_tool_calls=truncated) != event.data.content:
        raise VerificationFailed(event.seq, "assistant/message content diverges from its chunks")
