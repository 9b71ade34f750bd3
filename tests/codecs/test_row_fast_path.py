"""The tight row loop (`take_checked_rows`) against the checked path (`event_from_row`): a row
it takes is one the checked path gives the same event for, and a damaged row it never takes,
so the checked path reports it with its own typed error. Plus the instances the generated
decoders build: exactly the domain classes, frozen all the way down."""

from __future__ import annotations

from typing import Any

import attrs
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import session_events, valid_logs

from actorloop.codecs.converter import _checked_event_from_dict, decode_event, encode_event
from actorloop.codecs.rows import ReadRow, event_from_row, event_rows, take_checked_rows
from actorloop.runtime.errors import SessionFormatError
from actorloop.runtime.model.events import SessionEvent

SESSION = "rows"


def _read_rows(session_id: str, events: Any) -> list[ReadRow]:
    """The rows of `events` as a load reads them back (`READ_COLUMNS`: no session id)."""
    return [row[1:] for row in event_rows(session_id, events)]


def _checked(row: tuple[Any, ...], session_id: str = SESSION) -> SessionEvent | str:
    try:
        return event_from_row(session_id, row, "here")
    except SessionFormatError as exc:
        return f"error: {exc.problem}"


@settings(max_examples=60, deadline=None)
@given(valid_logs())
def test_intact_rows_are_all_taken_as_the_checked_path_reads_them(
    events: tuple[SessionEvent, ...],
) -> None:
    rows = _read_rows(SESSION, events)
    taken: list[SessionEvent] = []
    assert take_checked_rows(iter(rows), SESSION, taken, len(rows)) is None
    assert taken == [_checked(row) for row in rows] == list(events)


@settings(max_examples=60, deadline=None)
@given(valid_logs(), st.data())
def test_the_loop_stops_at_the_row_past_its_stop(
    events: tuple[SessionEvent, ...], data: st.DataObject
) -> None:
    rows = _read_rows(SESSION, events)
    if not rows:
        return
    stop = data.draw(st.integers(0, len(rows) - 1))
    taken: list[SessionEvent] = []
    assert take_checked_rows(iter(rows), SESSION, taken, stop) == rows[stop]
    assert taken == list(events[:stop])


def _damaged_rows() -> st.SearchStrategy[tuple[tuple[Any, ...], tuple[Any, ...]]]:
    """(the intact row, the row with one column or the body's bytes altered)."""

    @st.composite
    def build(draw: st.DrawFn) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        event = draw(session_events())
        row = _read_rows(SESSION, [event])[0]
        column = draw(st.integers(0, 4))
        damaged = list(row)
        if column == 3 and draw(st.booleans()):
            body = bytearray(row[3])
            index = draw(st.integers(0, len(body) - 1))
            body[index] = draw(st.integers(0, 255).filter(lambda b: b != body[index]))
            damaged[3] = bytes(body)
        else:
            damaged[column] = draw(
                st.sampled_from(
                    [None, True, 1.0, "x", b"x", -1, row[0] + 1, memoryview(row[3]), str(row[4])]
                )
            )
        return row, tuple(damaged)

    return build()


@settings(max_examples=1000, deadline=None)
@given(_damaged_rows())
def test_a_row_the_loop_takes_is_one_the_checked_path_gives_the_same_event_for(
    rows: tuple[tuple[Any, ...], tuple[Any, ...]],
) -> None:
    _intact, damaged = rows
    taken: list[SessionEvent] = []
    left = take_checked_rows(iter([damaged]), SESSION, taken, 1)
    if left is None:
        assert taken == [_checked(damaged)]
    else:
        assert left is damaged and taken == []


@settings(max_examples=300, deadline=None)
@given(_damaged_rows())
def test_a_row_with_a_wrong_checksum_or_key_is_never_taken(
    rows: tuple[tuple[Any, ...], tuple[Any, ...]],
) -> None:
    intact, damaged = rows
    if isinstance(_checked(damaged), str):  # the checked path refuses it: so must the loop
        assert take_checked_rows(iter([damaged]), SESSION, [], 1) is damaged
    if damaged[0] != intact[0]:
        # Another seq's row, even one that decodes: not this one's.
        assert take_checked_rows(iter([damaged]), SESSION, [], 1) is damaged


@settings(max_examples=100, deadline=None)
@given(session_events(), st.text(min_size=1, max_size=12).filter(lambda name: name != SESSION))
def test_a_row_read_for_another_session_is_refused_by_both_paths(
    event: SessionEvent, other: str
) -> None:
    """A load no longer reads the session id back per row: the checksum, which covers it,
    is what tells a row of another session (a query gone wrong, a row moved) from its own."""
    row = _read_rows(SESSION, [event])[0]
    assert take_checked_rows(iter([row]), other, [], 1) is row
    assert str(_checked(row, other)).startswith("error: row checksum mismatch")


def _instances(value: Any) -> list[Any]:
    found = []
    stack = [value]
    while stack:
        item = stack.pop()
        if attrs.has(type(item)):
            found.append(item)
            stack.extend(getattr(item, field.name) for field in attrs.fields(type(item)))
        elif isinstance(item, tuple):
            stack.extend(item)
    return found


@settings(max_examples=300, deadline=None)
@given(session_events())
def test_decoded_instances_are_exactly_the_domain_classes_and_frozen(event: SessionEvent) -> None:
    raw = encode_event(event)
    decoded = decode_event(raw)
    checked = _checked_event_from_dict(orjson.loads(raw), None)  # what cattrs builds
    assert decoded == checked
    for mine, theirs in zip(_instances(decoded), _instances(checked), strict=True):
        assert type(mine) is type(theirs)
        fields = attrs.fields(type(mine))
        if fields:
            with pytest.raises(attrs.exceptions.FrozenInstanceError):
                setattr(mine, fields[0].name, None)
        assert hash(mine) == hash(theirs)
    assert encode_event(decoded) == raw
