"""Prompt-cache health of a session log: per model request its uncached input, cache-read
and cache-write tokens, what changed between it and the request before it (in the request
header fold, or in the surface by compaction), and, where the cached fraction drops, why.

Pure functions of the events; nothing here reads a store or a clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, TypeAlias

from attrs import evolve, frozen

from ...codecs.converter import canonical_bytes, unstructure
from ..model.chunks import TokenUsage
from ..model.events import (
    AssistantMessage,
    Replace,
    RequestHeaderEvent,
    SessionEvent,
    StepStart,
    ToolResultEvent,
    UserMessage,
)
from ..model.header import EpochHeader, HeaderDelta
from .header_algebra import HeaderFold, diff_system, diff_tools
from .usage import cached_fraction

ChangeKind: TypeAlias = Literal["system", "tools", "prefix", "model", "config", "compaction"]
"""What can change between two requests so that the provider's cached prefix no longer
matches: the system slot, the tool schemas, the session prefix, the model (or provider),
another call option, or the history itself (compaction replaced part of the surface)."""

DropCause: TypeAlias = Literal["changed", "new-input", "unexplained"]
"""Why a cached fraction dropped: something changed (the `changes` say what); nothing
cached was lost but more new input came in; or cached tokens were lost and the log shows
no change (the provider's entry expired or was evicted)."""

DROP_TOLERANCE = 0.05
"""A cached fraction counts as dropped when it falls by more than this (5 points) from the
request before; smaller moves are the noise of a growing conversation."""

_HEADER_FIELDS: tuple[ChangeKind, ...] = ("system", "tools", "prefix", "model", "config")


@frozen
class CacheChange:
    """One change between a request and the one before it: its `kind`, the event that made
    it (`seq`, and `source`: the event type, with a snapshot's reason), and what changed in
    words (`detail`)."""

    kind: ChangeKind
    seq: int
    source: str
    detail: str


@frozen
class CacheDrop:
    """A cached fraction that fell from `before` (the request before) to `after`."""

    before: float
    after: float
    cause: DropCause


@frozen
class RequestCache:
    """One model request (`seq` is its `assistant/message`): its usage, the changes since
    the request before it (`previous_seq`; `gap_ms` between that answer and this step's
    start), and the drop of its cached fraction, if any."""

    seq: int
    turn: int
    step: int
    model: str
    usage: TokenUsage | None
    previous_seq: int | None
    gap_ms: int | None
    changes: tuple[CacheChange, ...]
    drop: CacheDrop | None

    @property
    def cached_fraction(self) -> float | None:
        """The share of this request's billed input read from the cache (None: no usage)."""
        return None if self.usage is None else cached_fraction(self.usage)


def cache_health(
    events: Sequence[SessionEvent], *, since: int = 0, tolerance: float = DROP_TOLERANCE
) -> tuple[RequestCache, ...]:
    """Every model request of `events` (a validated log) with seq >= `since`, in log order.

    A fork child passes `since=seed_length`: its seed's requests are its parent's, but the
    last of them is still the one its first request is compared with.
    """
    requests: list[RequestCache] = []
    fold = HeaderFold()
    changed_by: dict[ChangeKind, SessionEvent] = {}
    replaced: list[SessionEvent] = []
    previous: tuple[SessionEvent, AssistantMessage, EpochHeader | None] | None = None
    step_start: SessionEvent | None = None
    for event in events:
        data = event.data
        if isinstance(data, (RequestHeaderEvent, HeaderDelta)):
            before = fold.current
            fold.feed(event)
            for kind in _changed_fields(before, fold.current):
                changed_by[kind] = event
        elif isinstance(data, StepStart):
            step_start = event
        elif isinstance(event.surface_op, Replace):
            replaced.append(event)
        elif isinstance(data, AssistantMessage):
            header = fold.current
            if event.seq >= since:
                requests.append(
                    _request(
                        event, data, header, previous, changed_by, replaced, step_start, tolerance
                    )
                    if previous is not None
                    else RequestCache(
                        event.seq,
                        data.turn,
                        data.step,
                        data.model,
                        data.usage,
                        None,
                        None,
                        (),
                        None,
                    )
                )
            previous = (event, data, header)
            changed_by = {}
            replaced = []
    return tuple(requests)


def _request(
    event: SessionEvent,
    data: AssistantMessage,
    header: EpochHeader | None,
    previous: tuple[SessionEvent, AssistantMessage, EpochHeader | None],
    changed_by: dict[ChangeKind, SessionEvent],
    replaced: list[SessionEvent],
    step_start: SessionEvent | None,
    tolerance: float,
) -> RequestCache:
    previous_event, previous_data, previous_header = previous
    changes = [
        _header_change(kind, changed_by[kind], previous_header, header)
        for kind in _changed_fields(previous_header, header)
        if kind in changed_by
    ]
    changes += [_surface_change(replacement) for replacement in replaced]
    gap = None if step_start is None else max(0, step_start.time - previous_event.time)
    return RequestCache(
        seq=event.seq,
        turn=data.turn,
        step=data.step,
        model=data.model,
        usage=data.usage,
        previous_seq=previous_event.seq,
        gap_ms=gap,
        changes=tuple(changes),
        drop=_drop(previous_data.usage, data.usage, bool(changes), tolerance),
    )


def _drop(
    before: TokenUsage | None, after: TokenUsage | None, changed: bool, tolerance: float
) -> CacheDrop | None:
    if before is None or after is None:
        return None
    was, now = cached_fraction(before), cached_fraction(after)
    if was is None or now is None or now >= was - tolerance:
        return None
    if changed:
        return CacheDrop(was, now, "changed")
    # What the request before left in the cache: what it read back plus what it wrote.
    lost = after.cache_read < before.cache_read + before.cache_write
    return CacheDrop(was, now, "unexplained" if lost else "new-input")


def _changed_fields(old: EpochHeader | None, new: EpochHeader | None) -> list[ChangeKind]:
    if old is None or new is None:
        return []
    return [kind for kind in _HEADER_FIELDS if _part(old, kind) != _part(new, kind)]


def _part(header: EpochHeader, kind: ChangeKind) -> object:
    if kind == "system":
        return header.system
    if kind == "tools":
        return canonical_bytes(header.tools or ())
    if kind == "prefix":
        return canonical_bytes(header.message_prefix or ())
    if kind == "model":
        return (header.config.model, header.config.provider)
    return canonical_bytes(evolve(header.config, model="", provider=None))


def _source(event: SessionEvent) -> str:
    data = event.data
    return f"{event.type} ({data.reason})" if isinstance(data, RequestHeaderEvent) else event.type


def _header_change(
    kind: ChangeKind, event: SessionEvent, old: EpochHeader | None, new: EpochHeader | None
) -> CacheChange:
    assert old is not None and new is not None
    on_resume = isinstance(event.data, RequestHeaderEvent) and event.data.reason == "resume"
    when = " on resume" if on_resume else ""
    if kind == "system":
        detail = _system_detail(old.system, new.system) + when
    elif kind == "tools":
        detail = _tools_detail(old, new) + when
    elif kind == "prefix":
        was, now = len(old.message_prefix or ()), len(new.message_prefix or ())
        detail = f"session prefix changed{when} ({_messages(was)} → {_messages(now)})"
    elif kind == "model":
        parts = []
        if old.config.model != new.config.model:
            parts.append(f"model {old.config.model} → {new.config.model}")
        if old.config.provider != new.config.provider:
            parts.append(
                f"provider {old.config.provider or 'default'} → {new.config.provider or 'default'}"
            )
        detail = ", ".join(parts) + when
    else:
        before, after = unstructure(old.config), unstructure(new.config)
        names = sorted(
            name
            for name in set(before) | set(after)
            if name not in ("model", "provider") and before.get(name) != after.get(name)
        )
        detail = f"call config changed ({', '.join(names)}){when}"
    return CacheChange(kind, event.seq, _source(event), detail)


def _messages(count: int) -> str:
    return "1 message" if count == 1 else f"{count} messages"


def _system_detail(old: str | None, new: str | None) -> str:
    if old is None:
        return "system prompt added"
    if new is None:
        return "system prompt removed"
    patch = diff_system(old, new)
    inserted = len(patch.insert)
    return (
        f"system prompt changed (kept {patch.keep_start} leading and {patch.keep_end} "
        f"trailing lines, {inserted} new {'line' if inserted == 1 else 'lines'})"
    )


def _tools_detail(old: EpochHeader, new: EpochHeader) -> str:
    delta = diff_tools(old.tools, new.tools)
    names = [f"+{tool.name}" for tool in delta.added]
    names += [f"−{name}" for name in delta.removed]
    names += [f"~{tool.name}" for tool in delta.changed]
    return f"tools changed ({' '.join(names)})" if names else "tools reordered"


def _surface_change(event: SessionEvent) -> CacheChange:
    op = event.surface_op
    assert isinstance(op, Replace)
    data = event.data
    if isinstance(data, UserMessage):
        detail = f"compaction replaced events {op.start}–{op.end} with a summary"
    elif isinstance(data, ToolResultEvent):
        detail = f"compaction pruned the tool result at seq {op.start}"
    else:
        detail = f"the surface span {op.start}–{op.end} was replaced"
    return CacheChange("compaction", event.seq, event.type, detail)
