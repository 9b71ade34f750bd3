"""The budget ledger folded over a session log (docs/spec/budgets.md): what the session's
model calls spent, settled by their recorded usage, a reservation left unsettled by a crash
counted at its reserved amount. Pure functions of the events."""

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
    calls = compaction = NO_SPEND
    open_reserve: BudgetReserve | None = None
    unsettled = 0
    for event in events:
        data = event.data
        if isinstance(data, AssistantMessage):
            calls += spend_of(data.usage, data.model, data.provider)
            if _settles(open_reserve, data):
                open_reserve = None
        elif isinstance(data, BudgetReserve):
            if open_reserve is not None:
                calls += _reserved(open_reserve)
                unsettled += 1
            open_reserve = data
        elif isinstance(data, BudgetSettle):
            if open_reserve is not None and _settles(open_reserve, data):
                calls += spend_of(data.usage, open_reserve.model, open_reserve.provider)
                open_reserve = None
        elif isinstance(data, CompactionSummary):
            compaction += spend_of(data.usage, data.model, data.provider)
    if open_reserve is not None:
        calls += _reserved(open_reserve)
        unsettled += 1
    return Ledger(calls, compaction, unsettled)


def _settles(reserve: BudgetReserve | None, data: AssistantMessage | BudgetSettle) -> bool:
    return reserve is not None and (reserve.turn, reserve.step) == (data.turn, data.step)


def session_ledger(meta: SessionMeta, events: Sequence[SessionEvent]) -> Ledger:
    """What this session itself spent: a fork child's first `seed_length` events are its
    parent's (charged there), so they are left out."""
    return ledger_of(events[meta.seed_length or 0 :])
