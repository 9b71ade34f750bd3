"""`CollectorPolicy`: how a runtime manages Python's cyclic garbage collector while it is open
(thresholds, and `gc.freeze()` once an agent's loop has started) — docs/performance.md; and
`gc_paused`, the pause every store's `load` runs in."""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

from attrs import field, frozen

from ..errors import CollectorPolicyError

MANY_AGENTS_THRESHOLDS = (100_000, 50, 100)
"""Collector thresholds for a process holding thousands of agents: a young collection every
100,000 net allocations instead of 700, the middle generation every 50 young collections
instead of 10, the oldest every 100 middle ones instead of 10. A loop's long-lived state
(frozen events, messages, requests) forms no reference cycles, so rarer collections free the
same memory with far fewer pauses; each young collection is longer (~0.1 s with 10,000
agents on the benchmark machine), docs/performance.md."""


def _thresholds(value: object) -> tuple[int, int, int] | None:
    if value is None:
        return None
    if (
        not isinstance(value, tuple)
        or len(value) != 3
        or not all(type(item) is int and item >= 0 for item in value)
    ):
        raise CollectorPolicyError(
            f"collector thresholds must be a tuple of three ints >= 0, got {value!r}"
        )
    return value


@frozen
class CollectorPolicy:
    """What a runtime does to the process-wide collector (the default changes nothing).

    `thresholds`: passed to `gc.set_threshold` when the runtime opens; the previous
    thresholds are restored when it closes (runtimes opened inside each other restore in
    order). `freeze_after_flush`: `gc.freeze()` after every store write (see the field).
    `freeze_after_start`: `gc.freeze()` once an agent's loop has started (spawn,
    resume, fork), so the session it loaded and the state it built move to the permanent
    generation and no later collection walks them again; when a loop ends, and when the
    runtime closes, `gc.unfreeze()` hands everything frozen back to the collector, whose
    next full collection reclaims the ended agent's reference cycles. Meant for a process
    that holds its agents for a long time: one that keeps starting and ending agents gains
    little and may keep an ended agent's cycles until a later end or the close. Both
    settings act on the whole process, not only this runtime.
    """

    thresholds: tuple[int, int, int] | None = field(default=None, converter=_thresholds)
    freeze_after_start: bool = False
    freeze_after_flush: bool = False
    """`gc.freeze()` after every write of the store's codec (a group commit, or a barrier
    written by its loop): the events it made durable, and what the turns built around them,
    move to the permanent generation, so young collections stop walking them again. Undone
    as `freeze_after_start` is: when a loop ends and when the runtime closes. Not part of
    `many_agents()`: every reference cycle alive at some write (an application's per-turn
    state, a caught exception's traceback) is kept after it dies, until a loop ends or the
    close, so memory grows with the turns of a process whose agents live long."""

    @classmethod
    def many_agents(cls) -> CollectorPolicy:
        """The documented setting for thousands of long-lived agents in one process:
        `MANY_AGENTS_THRESHOLDS` and a freeze after every start."""
        return cls(thresholds=MANY_AGENTS_THRESHOLDS, freeze_after_start=True)

    @property
    def freezes(self) -> bool:
        """Whether this policy freezes anything (so it unfreezes when loops end, and at the
        close)."""
        return self.freeze_after_start or self.freeze_after_flush

    def apply(self) -> Callable[[], None]:
        """Set the thresholds; returns what undoes this policy (restores the thresholds it
        replaced and unfreezes) when the runtime closes."""
        saved = gc.get_threshold()
        if self.thresholds is not None:
            gc.set_threshold(*self.thresholds)

        def restore() -> None:
            if self.thresholds is not None:
                gc.set_threshold(*saved)
            if self.freezes:
                gc.unfreeze()

        return restore

    def after_start(self) -> None:
        """Called once an agent's loop has started."""
        if self.freeze_after_start:
            gc.freeze()

    def after_flush(self) -> Callable[[], None] | None:
        """What the codec calls after each write it made durable (`gc.freeze`), or None when
        this policy does nothing then."""
        return gc.freeze if self.freeze_after_flush else None

    def after_finish(self) -> None:
        """Called once an agent's loop has ended."""
        if self.freezes:
            gc.unfreeze()


class _GcPause:
    """Pauses the cyclic collector while any load runs (loads may overlap, in threads too).

    A load allocates hundreds of thousands of acyclic objects that all survive; collecting
    while it runs only rescans them, generation after generation. The collector is restored
    by the last load to finish, and only if it was enabled when the first began.

    Restoring it would leave all those objects in the youngest generation, for the next
    young collection to scan at once (a tenth of a second for 100,000 events) and then the
    middle one: so, when nothing is frozen, the last load hands them to the oldest
    generation without a scan (`gc.freeze()` then `gc.unfreeze()` moves every tracked
    object there), where only full collections, as rare as ever, look at them. With objects
    frozen (a `CollectorPolicy` freezing after starts, or the application) nothing is moved:
    unfreezing would release what someone else froze.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active = 0
        self._restore = False

    @contextmanager
    def during(self) -> Iterator[None]:
        with self._lock:
            if self._active == 0:
                self._restore = gc.isenabled()
                gc.disable()
            self._active += 1
        try:
            yield
        finally:
            with self._lock:
                self._active -= 1
                if self._active == 0 and self._restore:
                    if gc.get_freeze_count() == 0:
                        gc.freeze()
                        gc.unfreeze()
                    gc.enable()


_gc_pause = _GcPause()


def gc_paused() -> AbstractContextManager[None]:
    """A context in which the cyclic GC is paused (nestable, thread-safe): wrap loads."""
    return _gc_pause.during()
