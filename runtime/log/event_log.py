"""The storage under a `Session`: `EventLog` (append-only, a fork sharing its parent's events
instead of copying them) and `FoldState` (the folds over it, replaced as a unit)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from ..model.events import SessionEvent
from .header_algebra import HeaderFold
from .structure import TurnStructure
from .surface import SurfaceFold
from .usage import UsageFold


class EventLog:
    """Append-only event storage; a fork points at its parent's storage instead of copying.

    The parent's list only ever grows, so `parent[0:base_len]` stays valid forever.
    """

    __slots__ = ("_base", "_base_len", "_own", "_snapshot")

    def __init__(
        self,
        base: EventLog | None = None,
        base_len: int = 0,
        events: Iterable[SessionEvent] = (),
    ) -> None:
        self._base = base
        self._base_len = base_len
        self._own: list[SessionEvent] = list(events)
        self._snapshot: tuple[SessionEvent, ...] | None = None

    def __len__(self) -> int:
        return self._base_len + len(self._own)

    def __getitem__(self, index: int) -> SessionEvent:
        if index < 0:
            index += len(self)
        if index < self._base_len:
            assert self._base is not None
            return self._base[index]
        return self._own[index - self._base_len]

    def __iter__(self) -> Iterator[SessionEvent]:
        if self._base is not None:
            for index in range(self._base_len):
                yield self._base[index]
        yield from self._own

    def append(self, event: SessionEvent) -> None:
        self._own.append(event)
        self._snapshot = None

    def snapshot(self) -> tuple[SessionEvent, ...]:
        if self._snapshot is None:
            if self._base is None:
                self._snapshot = tuple(self._own)
            else:
                self._snapshot = self._base.snapshot()[: self._base_len] + tuple(self._own)
        return self._snapshot

    def since(self, start: int) -> list[SessionEvent]:
        """Events from `start` to the end (used to hand new events to the store)."""
        if start >= self._base_len:
            return self._own[start - self._base_len :]
        return [self[index] for index in range(start, len(self))]

    def replay_target(self) -> list[SessionEvent]:
        """The list a replay appends to directly, for a log of only its own events (no fork
        base); its snapshot is dropped first, as nothing reads one while a replay runs."""
        assert self._base is None  # a new session: its events are all its own
        self._snapshot = None
        return self._own


class FoldState:
    """Everything folded from the log; replaceable as a unit so appends stay transactional."""

    __slots__ = ("header", "structure", "surface", "usage")

    def __init__(self, usage_from: int = 0) -> None:
        self.structure = TurnStructure()
        self.surface = SurfaceFold()
        self.header = HeaderFold()
        self.usage = UsageFold(usage_from)
        """The session's own usage: from its first own seq (a fork's seed length) on."""
