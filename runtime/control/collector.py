"""`CollectorPolicy`: how a runtime manages Python's cyclic garbage collector while it is open
(thresholds, and `gc.freeze()` once an agent's loop has started) — docs/performance.md."""

from __future__ import annotations

import gc
from collections.abc import Callable

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
    order). `freeze_after_start`: `gc.freeze()` once an agent's loop has started (spawn,
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

    @classmethod
    def many_agents(cls) -> CollectorPolicy:
        """The documented setting for thousands of long-lived agents in one process:
        `MANY_AGENTS_THRESHOLDS` and a freeze after every start."""
        return cls(thresholds=MANY_AGENTS_THRESHOLDS, freeze_after_start=True)

    def apply(self) -> Callable[[], None]:
        """Set the thresholds; returns what undoes this policy (restores the thresholds it
        replaced and unfreezes) when the runtime closes."""
        saved = gc.get_threshold()
        if self.thresholds is not None:
            gc.set_threshold(*self.thresholds)

        def restore() -> None:
            if self.thresholds is not None:
                gc.set_threshold(*saved)
            if self.freeze_after_start:
                gc.unfreeze()

        return restore

    def after_start(self) -> None:
        """Called once an agent's loop has started."""
        if self.freeze_after_start:
            gc.freeze()

    def after_finish(self) -> None:
        """Called once an agent's loop has ended."""
        if self.freeze_after_start:
            gc.unfreeze()
