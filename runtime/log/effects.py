"""Effect keys of tool calls and the calls a crash left in doubt, both read from the log
alone (docs/spec/session-log.md §10.7), so every process computes the same ones."""

from __future__ import annotations

import hashlib

from attrs import frozen

from ..model.events import APPEND, SessionEvent, ToolCallEvent, ToolReconcile, ToolResultEvent
from ..model.meta import SessionMeta
from .session import Session
from .surface import RECONCILABLE_CODES

EFFECT_KEY_PREFIX = "alfx_"
"""Every effect key starts with it: 'alfx_' and 32 lowercase hex digits (37 characters)."""


def recording_session(meta: SessionMeta, seq: int) -> str:
    """The id of the session whose log first recorded the event at `seq`: a fork child's
    seed (`seq < seed_length`) was recorded by its parent, anything after by the child."""
    if meta.parent_session is not None and meta.seed_length is not None and seq < meta.seed_length:
        return meta.parent_session
    return meta.id


def effect_key(meta: SessionMeta, call_seq: int, call_id: str) -> str:
    """The effect key of the call whose `tool/call` is at `call_seq`: a digest of the
    session that recorded that event, its seq and the call id. Retries, resumes, repairs,
    failovers and fork children that inherit the call compute the same key; a new
    `tool/call` (a new call, or the same call made again in a fork child) has a new seq or
    a new recording session, so a new key."""
    material = f"{recording_session(meta, call_seq)}\x00{call_seq}\x00{call_id}".encode()
    return EFFECT_KEY_PREFIX + hashlib.sha256(material).hexdigest()[:32]


@frozen
class InDoubtCall:
    """A call whose current result is crash repair's `TOOL_OUTCOME_UNKNOWN` closer."""

    call: SessionEvent
    """Its `tool/call` event."""
    result: SessionEvent
    """The closer standing as its result (a surface node)."""
    reruns: int
    """How many `tool/reconcile{rerun}` events name it (an idempotent tool is re-run once)."""

    @property
    def data(self) -> ToolCallEvent:
        """The logged call."""
        assert isinstance(self.call.data, ToolCallEvent)
        return self.call.data


def in_doubt_calls(session: Session) -> tuple[InDoubtCall, ...]:
    """The calls in doubt, in log order: each surface node that is a `tool/result` appended
    with a code of `RECONCILABLE_CODES` and a logged `tool/call` as its provenance."""
    found: list[tuple[SessionEvent, SessionEvent]] = []
    for seq in session.surface:
        event = session.event(seq)
        data = event.data
        if (
            not isinstance(data, ToolResultEvent)
            or event.surface_op != APPEND
            or data.error is None
            or data.error.code not in RECONCILABLE_CODES
            or not event.source_event_seqs
        ):
            continue
        call = session.event(event.source_event_seqs[0])
        if isinstance(call.data, ToolCallEvent):
            found.append((call, event))
    if not found:
        return ()
    reruns: dict[int, int] = {}
    for event in session.events_since(min(result.seq for _, result in found)):
        if isinstance(event.data, ToolReconcile) and event.data.action == "rerun":
            reruns[event.data.call_seq] = reruns.get(event.data.call_seq, 0) + 1
    return tuple(InDoubtCall(call, result, reruns.get(call.seq, 0)) for call, result in found)
