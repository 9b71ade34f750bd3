"""The exact request an `assistant/message` answered, rebuilt from the log alone: its system
slot, session prefix, history, tools and config, the header events it came from, and its
digest checked against the recorded one (docs/spec/session-log.md §8, runtime.md §15.7)."""

from __future__ import annotations

from collections.abc import Sequence

from attrs import frozen

from ..errors import ErrorCode, RequestRebuildError, VerificationFailed
from ..model.events import (
    AssistantMessage,
    RequestHeaderEvent,
    SessionEvent,
    StepStart,
)
from ..model.header import EpochHeader, HeaderDelta, LlmCallConfig, ToolSchema
from ..model.messages import Message
from ..model.meta import SessionMeta
from .event_log import EventLog
from .header_algebra import HeaderFold
from .request import Request, digest_of
from .session import Session


@frozen
class RebuiltRequest:
    """One model request as the log rebuilds it, with where each part came from.

    `request` is the frozen `Request` the loop sent (wire order: system slot, prefix,
    history); `header` is the request header folded up to the answer; `snapshot_seq` is
    the `request/header` snapshot that fold starts from and `header_seq` the last header
    event (snapshot or delta) it applied; `step_start_seq` is the step boundary whose
    surface the history is. `recorded_digest` is what the `assistant/message` recorded
    (None for a log written without digests) and `digest` what the rebuilt parts hash to.
    """

    session_id: str
    seq: int
    turn: int
    step: int
    step_start_seq: int
    snapshot_seq: int
    header_seq: int
    header: EpochHeader
    request: Request
    recorded_digest: str | None
    digest: str

    @property
    def system(self) -> str | None:
        """The system slot (the full system prompt the step assembled)."""
        return self.request.system

    @property
    def prefix(self) -> tuple[Message, ...]:
        """The session prefix (request-only; its record is the header snapshot)."""
        return self.request.prefix

    @property
    def history(self) -> tuple[Message, ...]:
        """The derived history at the step boundary."""
        return self.request.history

    @property
    def tools(self) -> tuple[ToolSchema, ...]:
        """The tool schemas, in request order."""
        return self.request.tools

    @property
    def config(self) -> LlmCallConfig:
        """The model-call configuration."""
        return self.request.config

    @property
    def verified(self) -> bool:
        """Whether a recorded digest exists and the rebuilt request hashes to it."""
        return self.recorded_digest is not None and self.recorded_digest == self.digest


def rebuild_request(session_id: str, events: Sequence[SessionEvent], seq: int) -> RebuiltRequest:
    """Rebuild the request answered by the `assistant/message` at `seq` of `events` (a log
    that passed validation: a store's load or a live session).

    Raises `RequestRebuildError` (EVENT_NOT_FOUND, NOT_A_MODEL_ANSWER) when `seq` is not
    such an event. The digest is computed, not checked: see `check_digest`.
    """
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq < len(events):
        raise RequestRebuildError(
            ErrorCode.EVENT_NOT_FOUND, seq, f"the log has events 0..{len(events) - 1}"
        )
    answer = events[seq]
    data = answer.data
    if not isinstance(data, AssistantMessage):
        raise RequestRebuildError(
            ErrorCode.NOT_A_MODEL_ANSWER, seq, f"is {answer.type}, not assistant/message"
        )
    step_start = _step_start(events, seq, data)
    snapshot_seq, header_seq, header = _header_at(events, seq)
    # The boundary snapshot: the surface as it stood when step/start was appended (the loop
    # derives it just before that append; step/start itself is not a surface event).
    boundary = Session(SessionMeta(session_id), EventLog(events=events[:step_start]))
    history = boundary.derive_messages()
    prefix = header.message_prefix or ()
    request = Request(
        session_id,
        header.config,
        header.system,
        header.tools or (),
        prefix + history,
        len(prefix),
    )
    return RebuiltRequest(
        session_id=session_id,
        seq=seq,
        turn=data.turn,
        step=data.step,
        step_start_seq=step_start,
        snapshot_seq=snapshot_seq,
        header_seq=header_seq,
        header=header,
        request=request,
        recorded_digest=data.request_digest,
        digest=digest_of(header, prefix, history),
    )


def check_digest(rebuilt: RebuiltRequest) -> RebuiltRequest:
    """`rebuilt`, if its recorded digest matches (or none was recorded); else raise
    `VerificationFailed` naming both digests: the log does not rebuild what was sent."""
    recorded = rebuilt.recorded_digest
    if recorded is not None and recorded != rebuilt.digest:
        raise VerificationFailed(
            rebuilt.seq,
            f"request digest mismatch: recorded {recorded}, rebuilt from the log {rebuilt.digest}",
        )
    return rebuilt


def _step_start(events: Sequence[SessionEvent], seq: int, answer: AssistantMessage) -> int:
    for index in range(seq - 1, -1, -1):
        data = events[index].data
        if isinstance(data, StepStart):
            if (data.turn, data.step) != (answer.turn, answer.step):
                break
            return index
    raise RequestRebuildError(
        ErrorCode.NOT_A_MODEL_ANSWER,
        seq,
        f"no step/start of turn {answer.turn} step {answer.step} precedes it",
    )


def _header_at(events: Sequence[SessionEvent], seq: int) -> tuple[int, int, EpochHeader]:
    """(snapshot seq, last header event seq, folded header) as of `seq`."""
    snapshot = None
    for index in range(seq - 1, -1, -1):
        if isinstance(events[index].data, RequestHeaderEvent):
            snapshot = index
            break
    if snapshot is None:
        raise RequestRebuildError(
            ErrorCode.NOT_A_MODEL_ANSWER, seq, "no request/header snapshot precedes it"
        )
    fold = HeaderFold()
    last = snapshot
    for index in range(snapshot, seq):
        event = events[index]
        if isinstance(event.data, (RequestHeaderEvent, HeaderDelta)):
            fold.feed(event)
            last = index
    assert fold.current is not None
    return snapshot, last, fold.current
