"""Header algebra: canonical form, equality, diff/apply of deltas, and the incremental fold."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from attrs import evolve

from ...codecs.converter import canonical_bytes
from ..errors import HeaderFoldError, ToolOrderError
from ..model.events import RequestHeaderEvent, SessionEvent
from ..model.header import (
    EpochHeader,
    HeaderDelta,
    SystemPatch,
    ToolSchema,
    ToolsDelta,
)


def order_tools(
    tools: Iterable[ToolSchema], tool_order: Sequence[str] | None = None
) -> tuple[ToolSchema, ...]:
    """Listed names first (in `tool_order`), then the rest lexicographically by name."""
    by_name: dict[str, ToolSchema] = {}
    for tool in tools:
        if tool.name in by_name:
            raise ValueError(f"duplicate tool name {tool.name!r}")
        by_name[tool.name] = tool
    ordered: list[ToolSchema] = []
    if tool_order:
        for name in tool_order:
            if name not in by_name:
                raise ToolOrderError(f"tool_order names unknown tool {name!r}")
            ordered.append(by_name.pop(name))
    ordered.extend(by_name[name] for name in sorted(by_name))
    return tuple(ordered)


def canonical(header: EpochHeader) -> EpochHeader:
    """Empty system/tools/prefix become absent (None)."""
    system = header.system or None
    tools = header.tools or None
    prefix = header.message_prefix or None
    if (system, tools, prefix) == (header.system, header.tools, header.message_prefix):
        return header
    return EpochHeader(header.config, system, tools, prefix)


def header_bytes(header: EpochHeader) -> bytes:
    """Canonical JSON of the canonical form: the basis of header equality."""
    return canonical_bytes(canonical(header))


def headers_equal(a: EpochHeader | None, b: EpochHeader | None) -> bool:
    """Equality of canonical bytes; headers built from the very same config, tools and
    prefix objects (what a loop does step after step) are equal without encoding them."""
    if a is None or b is None:
        return a is b
    if a is b:
        return True
    a, b = canonical(a), canonical(b)
    if (
        a.config is b.config
        and a.tools is b.tools
        and a.message_prefix is b.message_prefix
        and a.system == b.system
    ):
        return True
    return header_bytes(a) == header_bytes(b)


def _lines(system: str | None) -> list[str]:
    return (system or "").split("\n")


def diff_system(old: str | None, new: str | None) -> SystemPatch:
    a, b = _lines(old), _lines(new)
    keep_start = 0
    limit = min(len(a), len(b))
    while keep_start < limit and a[keep_start] == b[keep_start]:
        keep_start += 1
    keep_end = 0
    while keep_end < limit - keep_start and a[len(a) - 1 - keep_end] == b[len(b) - 1 - keep_end]:
        keep_end += 1
    return SystemPatch(keep_start, keep_end, tuple(b[keep_start : len(b) - keep_end]))


def apply_system(old: str | None, patch: SystemPatch) -> str | None:
    a = _lines(old)
    if patch.keep_start < 0 or patch.keep_end < 0 or patch.keep_start + patch.keep_end > len(a):
        raise HeaderFoldError(
            f"system patch keeps {patch.keep_start}+{patch.keep_end} lines of a "
            f"{len(a)}-line system prompt"
        )
    lines = [*a[: patch.keep_start], *patch.insert, *a[len(a) - patch.keep_end :]]
    return "\n".join(lines) or None


def diff_tools(
    old: tuple[ToolSchema, ...] | None, new: tuple[ToolSchema, ...] | None
) -> ToolsDelta:
    old_tools, new_tools = old or (), new or ()
    old_by_name = {tool.name: tool for tool in old_tools}
    new_names = {tool.name for tool in new_tools}
    return ToolsDelta(
        added=tuple(tool for tool in new_tools if tool.name not in old_by_name),
        removed=tuple(tool.name for tool in old_tools if tool.name not in new_names),
        changed=tuple(
            tool
            for tool in new_tools
            if tool.name in old_by_name
            and canonical_bytes(old_by_name[tool.name]) != canonical_bytes(tool)
        ),
    )


def apply_tools(
    old: tuple[ToolSchema, ...] | None, delta: ToolsDelta
) -> tuple[ToolSchema, ...] | None:
    tools = [tool for tool in old or () if tool.name not in set(delta.removed)]
    names = [tool.name for tool in tools]
    if len(tools) + len(delta.removed) != len(old or ()):
        raise HeaderFoldError(f"tools delta removes unknown tools {list(delta.removed)}")
    for tool in delta.changed:
        if tool.name not in names:
            raise HeaderFoldError(f"tools delta changes unknown tool {tool.name!r}")
        tools[names.index(tool.name)] = tool
    for tool in delta.added:
        if tool.name in names:
            raise HeaderFoldError(f"tools delta adds existing tool {tool.name!r}")
        names.append(tool.name)
        tools.append(tool)
    return tuple(tools) or None


def apply_delta(old: EpochHeader, delta: HeaderDelta) -> EpochHeader:
    header = old
    if delta.system is not None:
        header = evolve(header, system=apply_system(header.system, delta.system))
    if delta.tools is not None:
        header = evolve(header, tools=apply_tools(header.tools, delta.tools))
    if delta.config is not None:
        header = evolve(header, config=delta.config)
    if delta.message_prefix is not None:
        header = evolve(header, message_prefix=delta.message_prefix or None)
    return canonical(header)


def diff(old: EpochHeader, new: EpochHeader) -> HeaderDelta | None:
    """The delta taking `old` to `new`, an empty delta if equal, or None if no delta can
    express the change (e.g. a pure tool reorder): the writer then logs a fallback snapshot."""
    old, new = canonical(old), canonical(new)
    delta = HeaderDelta(
        system=None if old.system == new.system else diff_system(old.system, new.system),
        tools=None
        if canonical_bytes(old.tools or ()) == canonical_bytes(new.tools or ())
        else diff_tools(old.tools, new.tools),
        config=None if canonical_bytes(old.config) == canonical_bytes(new.config) else new.config,
        message_prefix=None
        if canonical_bytes(old.message_prefix or ()) == canonical_bytes(new.message_prefix or ())
        else new.message_prefix or (),
    )
    try:
        reproduced = apply_delta(old, delta)
    except HeaderFoldError:
        return None
    return delta if headers_equal(reproduced, new) else None


class HeaderFold:
    """Incremental fold of header events: snapshots replace, deltas apply on top."""

    __slots__ = ("current",)

    def __init__(self) -> None:
        self.current: EpochHeader | None = None

    def feed(self, event: SessionEvent) -> None:
        data = event.data
        if isinstance(data, RequestHeaderEvent):
            self.current = canonical(data.header)
        elif isinstance(data, HeaderDelta):
            if self.current is None:
                raise HeaderFoldError(f"event {event.seq}: header delta before any snapshot")
            try:
                self.current = apply_delta(self.current, data)
            except HeaderFoldError as exc:
                raise HeaderFoldError(f"event {event.seq}: {exc}") from exc

    def preview(self, event: SessionEvent) -> EpochHeader | None:
        """The header after `event` without changing the fold (used for transactional append)."""
        probe = HeaderFold()
        probe.current = self.current
        probe.feed(event)
        return probe.current


def fold(events: Iterable[SessionEvent]) -> EpochHeader | None:
    header_fold = HeaderFold()
    for event in events:
        header_fold.feed(event)
    return header_fold.current
