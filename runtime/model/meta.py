"""`SessionMeta`: the record a store keeps about one session (id, lineage, labels) and the
log format version it was written in."""

from __future__ import annotations

import time

from attrs import field, frozen

from ...codecs.jsonvalue import EMPTY_OBJECT, FrozenDict, freeze_object

FORMAT_VERSION = 1
"""The log format this build writes and reads; stores refuse any other version."""


def now_ms() -> int:
    """Wall-clock time in epoch milliseconds (event `time`, meta `created_at`)."""
    return time.time_ns() // 1_000_000


@frozen
class SessionMeta:
    """A stored session's identity: `parent_session` and `seed_length` are set together on
    a fork child (its first `seed_length` events are its parent's); `labels` is free-form."""

    id: str
    created_at: int = field(factory=now_ms)
    parent_session: str | None = None
    seed_length: int | None = None
    version: int = FORMAT_VERSION
    labels: FrozenDict = field(default=EMPTY_OBJECT, converter=freeze_object)


@frozen
class DamagedSession:
    """A stored session whose record cannot be read. `Store.list()` reports it in place of
    its `SessionMeta`, so one damaged session never hides (or breaks) the listing of the
    others; `problem` says what is wrong and where."""

    id: str
    problem: str
