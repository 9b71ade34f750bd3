"""The approvals fold: which calls of a session wait for a decision and which were decided
but have no result yet, rebuilt from the log (docs/spec/approvals.md)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from attrs import define, field

from ..model.approvals import ApprovalDecision, ApprovalRequest, PendingApproval
from ..model.events import Replace, SessionEvent, ToolResultEvent, UserMessage

LEDGER_DATA: frozenset[type] = frozenset({ApprovalRequest, ApprovalDecision, ToolResultEvent})
"""The data classes `ApprovalLedger.advance` folds; it passes over every other event."""


@define
class ApprovalEntry:
    """One requested call not answered yet: its request and, once decided, its decision."""

    request: ApprovalRequest
    decision: ApprovalDecision | None = None


@define
class ApprovalLedger:
    """The open approvals of one session, in request order, advanced event by event.

    An entry opens at `approval/request`, takes its one `approval/decision`, and closes at
    the first `tool/result` for its call id (the decided call's result, a rejection, or the
    crash-repair result of a step that never parked). `claimed` names the calls whose
    decision is on its way (queued, not logged yet): they take no second decision, nor do
    the `decided` ones.
    """

    session_id: str
    entries: dict[str, ApprovalEntry] = field(factory=dict)
    claimed: set[str] = field(factory=set)
    decided: set[str] = field(factory=set)
    """Every call id decided since the latest `user/message` before the fold began: a
    second decision on one is refused as already decided, not as unknown."""

    @classmethod
    def of_log(
        cls, session_id: str, length: int, event_at: Callable[[int], SessionEvent]
    ) -> ApprovalLedger:
        """The ledger of a log of `length` events: read back to its last `user/message`
        (a message is refused while calls wait, so nothing before one is still open), then
        folded forward from there."""
        ledger = cls(session_id)
        start = length
        while start > 0:
            event = event_at(start - 1)
            if isinstance(event.data, UserMessage):
                break
            start -= 1
        for seq in range(start, length):
            ledger.advance(event_at(seq))
        return ledger

    @classmethod
    def of_events(cls, session_id: str, events: Sequence[SessionEvent]) -> ApprovalLedger:
        """The ledger of a stored log's events."""
        return cls.of_log(session_id, len(events), events.__getitem__)

    def advance(self, event: SessionEvent) -> None:
        """Fold one appended event in."""
        data = event.data
        if isinstance(data, ApprovalRequest):
            self.entries[data.call_id] = ApprovalEntry(data)
        elif isinstance(data, ApprovalDecision):
            entry = self.entries.get(data.call_id)
            if entry is not None and entry.decision is None:
                entry.decision = data
            self.claimed.discard(data.call_id)
            self.decided.add(data.call_id)
        elif (
            isinstance(data, ToolResultEvent)
            and self.entries
            and not isinstance(event.surface_op, Replace)
        ):
            self.entries.pop(data.call_id, None)
            self.claimed.discard(data.call_id)
            for call_id in [
                call_id
                for call_id, entry in self.entries.items()
                if entry.request.via_call == data.call_id
            ]:
                del self.entries[call_id]
                self.claimed.discard(call_id)

    def pending(self) -> tuple[PendingApproval, ...]:
        """The calls that wait for a decision, in request order."""
        return tuple(
            PendingApproval(
                entry.request.call_id,
                entry.request.tool,
                entry.request.arguments,
                entry.request.session_id or self.session_id,
            )
            for entry in self.entries.values()
            if entry.decision is None
        )

    def undecided(self) -> tuple[str, ...]:
        """The call ids that wait for a decision and have none on its way."""
        return tuple(
            call_id
            for call_id, entry in self.entries.items()
            if entry.decision is None and call_id not in self.claimed
        )

    def decided_unrun(self) -> tuple[ApprovalEntry, ...]:
        """The decided calls without a result (their run was cut short by a crash)."""
        return tuple(
            entry
            for entry in self.entries.values()
            if entry.decision is not None and entry.request.via_call is None
        )

    @property
    def blocking(self) -> bool:
        """Whether a new message must wait: some requested call has no result yet."""
        return bool(self.entries)
