"""What an event must pass to enter a session's log, and the copy of it the log keeps: the
envelope rules at its seq, the header fold's preview, the detached strictly typed copy."""

from __future__ import annotations

from types import NoneType
from typing import Any

from ...codecs.converter import is_canonical, structure_as, unstructure
from ...codecs.jsonvalue import MAX_SAFE_INT, freeze_json, freeze_object
from ..errors import HeaderFoldError, SessionFormatError, SessionValidationError
from ..model.events import (
    DATA_BY_TYPE,
    SURFACE_TYPES,
    Append,
    AssistantMessage,
    IgnorableData,
    Replace,
    RequestHeaderEvent,
    SessionEvent,
)
from ..model.header import HeaderDelta
from .header_algebra import HeaderFold

HEADER_DATA = frozenset(
    cls for cls in DATA_BY_TYPE.values() if issubclass(cls, (RequestHeaderEvent, HeaderDelta))
)
"""The data classes the header fold takes (`HeaderFold.feed` passes over every other)."""


def preview_header(header: HeaderFold, event: SessionEvent, seq: int) -> None:
    """Check that the header fold takes `event` (at `seq`), changing nothing."""
    try:
        header.preview(event)
    except HeaderFoldError as exc:
        problem = str(exc).removeprefix(f"event {seq}: ")
        raise SessionValidationError(seq, f"{event.type}: {problem}") from exc


def check_envelope(event: SessionEvent, expected_seq: int) -> None:
    """Raise the first envelope rule `event` breaks as the event at `expected_seq`."""
    problem = envelope_problem(event, expected_seq)
    if problem is not None:
        raise SessionValidationError(expected_seq, f"{event.type}: {problem}")


def envelope_problem(event: SessionEvent, expected_seq: int) -> str | None:
    """The first envelope rule `event` breaks as the event at `expected_seq`, or None."""
    if type(event.seq) is not int or event.seq != expected_seq:
        return f"seq {event.seq!r} is not the next index {expected_seq}"
    if type(event.time) is not int or not 0 <= event.time <= MAX_SAFE_INT:
        return f"time must be an int >= 0 (epoch ms), got {event.time!r}"
    if event.ignorable or isinstance(event.data, IgnorableData):
        if not (event.ignorable and isinstance(event.data, IgnorableData)):
            return "only unknown event types marked ignorable carry opaque data"
        if event.surface_op is not None or event.source_event_seqs is not None:
            return "an ignorable event takes no part in the surface"
        return None
    # A type that is no string (an unhashable one included) is no known type either.
    expected = DATA_BY_TYPE.get(event.type) if isinstance(event.type, str) else None
    if expected is None:
        return "unknown event type (not marked ignorable)"
    if type(event.data) is not expected:
        return f"data must be {expected.__name__}, got {type(event.data).__name__}"
    surface = event.type in SURFACE_TYPES
    op = event.surface_op
    if surface and op is None:
        return "surface_op is required on surface events"
    if not surface and op is not None:
        return "surface_op is forbidden on non-surface events"
    if isinstance(op, Replace):
        if type(op.start) is not int or type(op.end) is not int:
            return f"replace start/end must be int seqs, got {op.start!r}, {op.end!r}"
    elif surface and not isinstance(op, Append):
        return f"surface_op must be Append or Replace, got {type_name(op)}"
    seqs = event.source_event_seqs
    if seqs is None:
        return None
    if not surface:
        return "source_event_seqs are allowed only on surface events"
    if not seqs and not isinstance(event.data, AssistantMessage):
        return "source_event_seqs must be non-empty"
    if len(set(seqs)) != len(seqs):
        return "source_event_seqs must be unique"
    for seq in seqs:
        if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq < expected_seq:
            return f"source_event_seqs entry {seq!r} does not refer to an earlier event"
    return None


def structure_data(value: object, cls: type, seq: int, event_type: str) -> Any:
    """`value` (JSON) structured as the data class `cls` of the event at `seq`."""
    try:
        return structure_as(value, cls)
    except SessionFormatError as exc:
        raise SessionValidationError(seq, f"{event_type}: invalid data: {exc.problem}") from exc


def detached(event: SessionEvent, seq: int, *, data_detached: bool = False) -> SessionEvent:
    """A deep, strictly typed copy of `event` (docs/spec/session-log.md §2.3: appends are
    deep-copied; §9: the data must be losslessly JSON-representable, i.e. the codec can decode
    what it encodes).

    Data that is already deeply immutable, exactly typed and canonical (what the loop builds
    from values it has validated) would come out of the copy equal to itself: it is kept.
    """
    data = event.data
    if data_detached or is_canonical(data):
        pass
    elif isinstance(data, IgnorableData):
        data = IgnorableData(freeze_object(data.payload, f"$[{seq}].data"))
    else:
        path = f"$[{seq}].data"
        data = structure_data(freeze_json(unstructure(data), path), type(data), seq, event.type)
    seqs = event.source_event_seqs
    if data is event.data and type(event) is SessionEvent and type(seqs) in (tuple, NoneType):
        return event  # every part already immutable and normalized: the copy would be equal
    return SessionEvent(
        event.type,
        event.seq,
        event.time,
        data,
        None if seqs is None else tuple(seqs),
        event.surface_op,
        event.ignorable,
    )


def type_name(value: object) -> str:
    """The name of `value`'s type, for error messages."""
    return type(value).__name__
