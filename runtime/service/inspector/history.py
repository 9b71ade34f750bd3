"""Where each message of a rebuilt request's history came from: the event that put it on
the surface and the turn it was logged in, so the request view can mark the prompts of
turns that were cancelled or failed (they stay in history: a cancelled prompt is followed
by the next one, two user messages in a row)."""

from __future__ import annotations

from collections.abc import Sequence

from attrs import frozen

from ...log.session import EventLog, Session
from ...log.surface import project
from ...model.events import SessionEvent, TurnEnd, TurnEndReason, TurnStart
from ...model.meta import SessionMeta

UNFINISHED = frozenset({"aborted", "disposed", "interrupted", "error"})
"""Turn endings whose messages the request view marks: the turn did not complete."""


@frozen
class HistoryOrigin:
    """One history message's source: the event at `seq`, logged in turn `turn` (None for
    a message logged outside any turn), which ended `reason` (None: still open)."""

    seq: int
    turn: int | None
    reason: TurnEndReason | None

    @property
    def unfinished(self) -> bool:
        """Whether its turn was cancelled, disposed, interrupted or failed."""
        return self.reason is not None and self.reason.kind in UNFINISHED


def history_origins(
    session_id: str, events: Sequence[SessionEvent], step_start: int
) -> tuple[HistoryOrigin, ...] | None:
    """One `HistoryOrigin` per message the surface derives at `step_start` (the request's
    step boundary), in history order; None if the surface does not line up with them."""
    boundary = Session(SessionMeta(session_id), EventLog(events=events[:step_start]))
    seqs = [seq for seq in boundary.surface if project(events[seq]) is not None]
    if len(seqs) != len(boundary.derive_messages()):
        return None
    turn_of: dict[int, int] = {}
    reasons: dict[int, TurnEndReason] = {}
    current: int | None = None
    for event in events:
        data = event.data
        if isinstance(data, TurnStart):
            current = data.turn
        elif isinstance(data, TurnEnd):
            reasons[data.turn] = data.reason
            current = None
        elif current is not None:
            turn_of[event.seq] = current
    origins = []
    for seq in seqs:
        turn = turn_of.get(seq)
        origins.append(HistoryOrigin(seq, turn, None if turn is None else reasons.get(turn)))
    return tuple(origins)
