"""Token usage totals over a session log: per turn and per session, the loop's model calls
(`assistant/message`) and the compaction summarizer's calls (`compaction/summary`) apart.

Pure functions of the events; nothing here reads a store or a clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from attrs import frozen

from ..model.chunks import TokenUsage
from ..model.events import (
    AssistantMessage,
    CompactionSummary,
    SessionEvent,
    TurnEnd,
    TurnStart,
)
from ..model.meta import SessionMeta

NO_USAGE = TokenUsage()


def cached_fraction(usage: TokenUsage) -> float | None:
    """The share of billed input served from the provider's prompt cache
    (`cache_read / (input + cache_read + cache_write)`); None when no input was billed."""
    billed = usage.prompt_total
    return usage.cache_read / billed if billed else None


@frozen
class UsageTotals:
    """Usage summed over some events.

    `model` sums the loop's model calls (`assistant/message` usage), `compaction` the
    summarizer's (`compaction/summary` usage); `model_calls` and `compaction_calls` count the
    calls, and `unreported` the model calls whose provider reported no usage at all.
    """

    model: TokenUsage = NO_USAGE
    compaction: TokenUsage = NO_USAGE
    model_calls: int = 0
    compaction_calls: int = 0
    unreported: int = 0

    @property
    def total(self) -> TokenUsage:
        """Model and compaction usage together: what the session was billed."""
        return self.model + self.compaction

    @property
    def cached_fraction(self) -> float | None:
        """The cached share of all billed input (model and compaction calls)."""
        return cached_fraction(self.total)

    def __add__(self, other: UsageTotals) -> UsageTotals:
        return UsageTotals(
            self.model + other.model,
            self.compaction + other.compaction,
            self.model_calls + other.model_calls,
            self.compaction_calls + other.compaction_calls,
            self.unreported + other.unreported,
        )


@frozen
class TurnUsage:
    """The usage of one turn (its number as in `turn/start`)."""

    turn: int
    usage: UsageTotals


class _Tally:
    """Accumulates one `UsageTotals` event by event."""

    __slots__ = ("compaction", "compaction_calls", "model", "model_calls", "unreported")

    def __init__(self) -> None:
        self.model = NO_USAGE
        self.compaction = NO_USAGE
        self.model_calls = 0
        self.compaction_calls = 0
        self.unreported = 0

    def add(self, event: SessionEvent) -> None:
        data = event.data
        if isinstance(data, AssistantMessage):
            self.model_calls += 1
            if data.usage is None:
                self.unreported += 1
            else:
                self.model += data.usage
        elif isinstance(data, CompactionSummary):
            self.compaction_calls += 1
            if data.usage is not None:
                self.compaction += data.usage

    def totals(self) -> UsageTotals:
        return UsageTotals(
            self.model, self.compaction, self.model_calls, self.compaction_calls, self.unreported
        )


USAGE_DATA: frozenset[type] = frozenset({AssistantMessage, CompactionSummary})
"""The data classes whose events count in usage totals (what `_Tally.add` looks at)."""


class UsageFold:
    """A session's own usage kept as events are appended (`Session.usage()`): the events
    from seq `start` on are counted (a fork child's seed, its parent's work, is not)."""

    __slots__ = ("_tally", "start")

    def __init__(self, start: int = 0) -> None:
        self.start = start
        self._tally = _Tally()

    def add(self, event: SessionEvent) -> None:
        """Count `event` if it is the session's own and carries usage."""
        if event.seq >= self.start and type(event.data) in USAGE_DATA:
            self._tally.add(event)

    def totals(self) -> UsageTotals:
        """The totals so far."""
        return self._tally.totals()

    @classmethod
    def restored(cls, start: int, totals: UsageTotals) -> UsageFold:
        """A fold that continues from `totals` (a fold snapshot's)."""
        fold = cls(start)
        tally = fold._tally
        tally.model, tally.compaction = totals.model, totals.compaction
        tally.model_calls, tally.compaction_calls = totals.model_calls, totals.compaction_calls
        tally.unreported = totals.unreported
        return fold


def usage_of(events: Iterable[SessionEvent]) -> UsageTotals:
    """Usage summed over `events` (any slice of a log: a turn, a session, a seed)."""
    tally = _Tally()
    for event in events:
        if type(event.data) in USAGE_DATA:  # what `add` counts; the rest pass, uncalled
            tally.add(event)
    return tally.totals()


def session_usage(meta: SessionMeta, events: Sequence[SessionEvent]) -> UsageTotals:
    """What this session itself used: a fork child's first `seed_length` events are its
    parent's (already counted there), so they are left out."""
    return usage_of(events[meta.seed_length or 0 :])


def inherited_usage(meta: SessionMeta, events: Sequence[SessionEvent]) -> UsageTotals:
    """What a fork child's seed used (its first `seed_length` events, its parent's work,
    counted in the parent); empty totals for a session that is no fork. With
    `session_usage` it splits a fork's log into inherited and own work."""
    return usage_of(events[: meta.seed_length or 0])


def usage_by_turn(events: Iterable[SessionEvent]) -> tuple[TurnUsage, ...]:
    """One `TurnUsage` per turn that starts in `events`, in log order; a turn still open at
    the end of `events` is included with what it has used so far."""
    turns: list[TurnUsage] = []
    current: tuple[int, _Tally] | None = None
    for event in events:
        data = event.data
        if isinstance(data, TurnStart):
            current = (data.turn, _Tally())
        elif current is not None:
            current[1].add(event)
            if isinstance(data, TurnEnd):
                turns.append(TurnUsage(current[0], current[1].totals()))
                current = None
    if current is not None:
        turns.append(TurnUsage(current[0], current[1].totals()))
    return tuple(turns)


def turn_usage(events: Sequence[SessionEvent], turn: int) -> UsageTotals:
    """The usage of turn number `turn` (empty totals if no such turn is in `events`);
    scans backwards, so asking for the latest turn of a long log is cheap."""
    end: int | None = None
    for index in range(len(events) - 1, -1, -1):
        data = events[index].data
        if isinstance(data, TurnEnd) and data.turn == turn:
            end = index
        elif isinstance(data, TurnStart) and data.turn == turn:
            return usage_of(events[index : (end + 1) if end is not None else len(events)])
    return UsageTotals()
