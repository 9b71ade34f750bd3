"""The generated decoders against the strict converter: on well-formed events they give
equal events (and the same bytes back); on damaged ones the result, or the typed error and
its text, is exactly the converter's."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import json_values, session_events, valid_logs

from actorloop.codecs.converter import (
    _checked_event_from_dict,
    _fast_event,
    decode_event,
    encode_event,
    event_from_dict,
)
from actorloop.runtime.errors import SessionFormatError
from actorloop.runtime.model.events import SessionEvent


def _checked(body: Any) -> SessionEvent | str:
    try:
        return _checked_event_from_dict(copy.deepcopy(body), None)
    except SessionFormatError as exc:
        return f"error: {exc}"


def _decoded(body: Any) -> SessionEvent | str:
    try:
        return event_from_dict(copy.deepcopy(body))
    except SessionFormatError as exc:
        return f"error: {exc}"


@settings(max_examples=500, deadline=None)
@given(session_events())
def test_well_formed_events_take_the_generated_decoder(event: SessionEvent) -> None:
    raw = encode_event(event)
    fast = _fast_event(orjson.loads(raw))  # raises if the generated decoder gave up
    assert fast == _checked(orjson.loads(raw))
    assert encode_event(fast) == raw
    assert decode_event(raw) == fast


@settings(max_examples=40, deadline=None)
@given(valid_logs())
def test_loop_shaped_logs_decode_identically(events: tuple[SessionEvent, ...]) -> None:
    for event in events:
        raw = encode_event(event)
        assert _fast_event(orjson.loads(raw)) == _checked(orjson.loads(raw)) == event


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*path, index))
    return found


def _damage(body: Any, path: tuple[Any, ...], how: str, value: Any) -> Any:
    body = copy.deepcopy(body)
    if not path:
        return value if how == "replace" else body
    parent = body
    for key in path[:-1]:
        parent = parent[key]
    last = path[-1]
    if how == "replace":
        parent[last] = value
    elif how == "delete":
        del parent[last]
    elif isinstance(parent, dict):  # "add": an unknown key beside the damaged one
        parent[f"{last}_x"] = value
    return body


@settings(max_examples=1500, deadline=None)
@given(
    session_events(),
    st.data(),
    st.sampled_from(["replace", "delete", "add"]),
    json_values(4) | st.sampled_from([True, 2**53, -(2**53), 1.5, -0.0, "", [], {}]),
)
def test_damaged_events_fail_exactly_as_the_converter_says(
    event: SessionEvent, data: st.DataObject, how: str, value: Any
) -> None:
    body = orjson.loads(encode_event(event))
    path = data.draw(st.sampled_from(_paths(body)))
    damaged = _damage(body, path, how, value)
    assert _decoded(damaged) == _checked(damaged)


@pytest.mark.parametrize(
    "body",
    [
        # Python-built bodies (tuples, str subclasses): the converter decides, same result.
        {"type": "step/start", "seq": 1, "time": 2, "data": {"turn": 1, "step": 1}},
        {
            "type": "user/message",
            "seq": 1,
            "time": 2,
            "data": {"content": ({"type": "text", "text": "t"},), "source": {"kind": "user"}},
            "surface_op": {"op": "append"},
            "source_event_seqs": (0,),
        },
    ],
)
def test_python_built_bodies_decode_like_the_converter(body: dict[str, Any]) -> None:
    assert _decoded(body) == _checked(body)
    assert isinstance(_decoded(body), SessionEvent)
