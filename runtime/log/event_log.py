"""The storage under a `Session`: `EventLog` (append-only, a fork sharing its parent's events
instead of copying them) and `FoldState` (the folds over it, replaced as a unit)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice

from ..model.events import SessionEvent
from .header_algebra import HeaderFold
from .structure import TurnStructure
from .surface import SurfaceFold
from .usage import UsageFold

PICK_WINDOW = 256
"""Events a restored prefix reads at once for an index it has not read yet."""


class LazyPrefix:
    """The first `length` events of a session restored from a fold snapshot: read from the
    store on first access (`read()`, all of them, checked), or a few by seq (`pick(seqs)`)
    while the whole prefix is not needed. Those events never change, so nothing read goes
    stale; a read that fails raises the store's error at the access."""

    __slots__ = ("_events", "_known", "_length", "_pick", "_read")

    def __init__(
        self,
        length: int,
        read: Callable[[], Sequence[SessionEvent]],
        pick: Callable[[Sequence[int]], Sequence[SessionEvent]] | None = None,
        known: Iterable[SessionEvent] = (),
    ) -> None:
        self._length = length
        self._read = read
        self._pick = pick
        self._known: dict[int, SessionEvent] = {event.seq: event for event in known}
        self._events: tuple[SessionEvent, ...] | None = None

    def __len__(self) -> int:
        return self._length

    @property
    def loaded(self) -> bool:
        """Whether the whole prefix has been read."""
        return self._events is not None

    def __getitem__(self, index: int) -> SessionEvent:
        if self._events is not None:
            return self._events[index]
        known = self._known.get(index)
        if known is not None:
            return known
        if self._pick is None or not 0 <= index < self._length:
            return self.snapshot()[index]
        # A window from `index` on: one read serves a reader walking the log in order.
        self.pick(range(index, min(index + PICK_WINDOW, self._length)))
        return self._known[index]

    def pick(self, seqs: Sequence[int]) -> list[SessionEvent]:
        """The events at `seqs` (each < length), reading only those not read yet."""
        if self._events is not None:
            events = self._events
            return [events[seq] for seq in seqs]
        known = self._known
        missing = [seq for seq in seqs if seq not in known]
        if missing:
            if self._pick is None:
                return list(self.snapshot()[seq] for seq in seqs)
            for event in self._pick(missing):
                known[event.seq] = event
        return [known[seq] for seq in seqs]

    def snapshot(self) -> tuple[SessionEvent, ...]:
        """Every event of the prefix, in seq order (read once)."""
        if self._events is None:
            events = tuple(self._read())
            if len(events) != self._length:
                raise ValueError(f"a restored prefix read {len(events)} of {self._length} events")
            self._events = events
            self._known = {}
        return self._events


class EventLog:
    """Append-only event storage; a fork points at its parent's storage instead of copying.

    The parent's list only ever grows, so `parent[0:base_len]` stays valid forever.
    """

    __slots__ = ("_base", "_base_len", "_own", "_snapshot")

    def __init__(
        self,
        base: EventLog | LazyPrefix | None = None,
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
        if isinstance(self._base, LazyPrefix):
            yield from self._base.snapshot()[: self._base_len]
        elif self._base is not None:
            # The parent's own iteration (a restored prefix under it is read in one go,
            # not event by event); its list only grows, so the first base_len stay put.
            yield from islice(iter(self._base), self._base_len)
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
