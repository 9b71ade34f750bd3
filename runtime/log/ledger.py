"""The budget ledger folded over a session log (docs/spec/budgets.md): what the session's
model calls spent, settled by their recorded usage, a reservation left unsettled by a crash
counted at its reserved amount: a function of the events, and `LedgerFold`, the same fold
kept as a log grows."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from attrs import frozen

from ..model.budget import NO_SPEND, BudgetReserve, BudgetSettle, Spend
from ..model.events import AssistantMessage, CompactionSummary, SessionEvent
from ..model.meta import SessionMeta
from .prices import spend_of


@frozen
class Ledger:
    """A session's spend: `calls` by the loop's model calls (what a budget limits),
    `compaction` by the summarizer's, `unsettled` the reservations no answer or
    `budget/settle` closed (already included in `calls`)."""

    calls: Spend = NO_SPEND
    compaction: Spend = NO_SPEND
    unsettled: int = 0

    def __add__(self, other: Ledger) -> Ledger:
        return Ledger(
            self.calls + other.calls,
            self.compaction + other.compaction,
            self.unsettled + other.unsettled,
        )

    @property
    def total(self) -> Spend:
        """Every model call of the session: the loop's and the summarizer's."""
        return self.calls + self.compaction


def _reserved(reserve: BudgetReserve) -> Spend:
    return Spend(reserve.tokens, 1, reserve.usd)


def ledger_of(events: Iterable[SessionEvent]) -> Ledger:
    """The ledger of `events` (any slice of a log). A `budget/reserve` is settled by the
    `assistant/message` or `budget/settle` of its turn and step; one still open at the end
    of `events` (the call may have been billed before a crash) counts what it reserved."""
    fold = LedgerFold()
    fold.add(events)
    return fold.ledger()


class LedgerFold:
    """`ledger_of` kept as events come: `add` folds more of one log, `ledger()` is the
    ledger of everything added (an open reservation counted as `ledger_of` counts it), so a
    reader of a growing log pays for its new events only."""

    def __init__(self) -> None:
        self.folded = 0
        """How many events were added."""
        self._calls = NO_SPEND
        self._compaction = NO_SPEND
        self._open: BudgetReserve | None = None
        self._unsettled = 0

    def add(self, events: Iterable[SessionEvent]) -> None:
        """Fold `events`, the ones that follow those already added."""
        for event in events:
            self.folded += 1
            data = event.data
            if isinstance(data, AssistantMessage):
                self._calls += spend_of(data.usage, data.model, data.provider)
                if _settles(self._open, data):
                    self._open = None
            elif isinstance(data, BudgetReserve):
                if self._open is not None:
                    self._calls += _reserved(self._open)
                    self._unsettled += 1
                self._open = data
            elif isinstance(data, BudgetSettle):
                if self._open is not None and _settles(self._open, data):
                    self._calls += spend_of(data.usage, self._open.model, self._open.provider)
                    self._open = None
            elif isinstance(data, CompactionSummary):
                self._compaction += spend_of(data.usage, data.model, data.provider)

    def ledger(self) -> Ledger:
        """The ledger of the events added so far."""
        if self._open is None:
            return Ledger(self._calls, self._compaction, self._unsettled)
        return Ledger(self._calls + _reserved(self._open), self._compaction, self._unsettled + 1)


def _settles(reserve: BudgetReserve | None, data: AssistantMessage | BudgetSettle) -> bool:
    return reserve is not None and (reserve.turn, reserve.step) == (data.turn, data.step)


def session_ledger(meta: SessionMeta, events: Sequence[SessionEvent]) -> Ledger:
    """What this session itself spent: a fork child's first `seed_length` events are its
    parent's (charged there), so they are left out."""
    return ledger_of(events[meta.seed_length or 0 :])
