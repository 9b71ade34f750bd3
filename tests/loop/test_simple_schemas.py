"""The fast check of simple tool schemas (runtime/control/simple_schemas.py) gives
jsonschema's verdict on every schema it accepts, and declines every other schema."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from actorloop.runtime import Tool
from actorloop.runtime.control.simple_schemas import TYPES, compile_simple

NAMES = st.sampled_from(["x", "y", "count", "path", "flag", "é"])
TYPE_NAMES = st.sampled_from(sorted(TYPES))
TYPE_KEYWORD = TYPE_NAMES | st.lists(TYPE_NAMES, min_size=1, max_size=3, unique=True)
PROPERTY = st.fixed_dictionaries(
    {"type": TYPE_KEYWORD}, optional={"description": st.text(max_size=5)}
)


@st.composite
def simple_schemas(draw: st.DrawFn) -> dict[str, Any]:
    properties = draw(st.dictionaries(NAMES, PROPERTY, max_size=4))
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    names = sorted(properties) + draw(st.lists(NAMES, min_size=1, max_size=1))
    schema["required"] = sorted(set(draw(st.lists(st.sampled_from(names), max_size=3))))
    extra = draw(st.sampled_from([None, True, False]))
    if extra is not None:
        schema["additionalProperties"] = extra
    return schema


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([0.0, 1.0, -3.0, 2.5])
    | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(NAMES, inner, max_size=2),
    max_leaves=4,
)


@settings(max_examples=400, deadline=None)
@given(schema=simple_schemas(), args=st.dictionaries(NAMES, JSON_VALUES, max_size=4))
def test_the_verdict_is_jsonschemas(schema: dict[str, Any], args: dict[str, Any]) -> None:
    check = compile_simple(schema)
    assert check is not None
    decoded = orjson.loads(orjson.dumps(args))  # the values a tool call's arguments hold
    assert check(decoded) == Draft202012Validator(schema).is_valid(decoded)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"x": {"type": "string", "minLength": 2}}},
        {"type": "object", "properties": {"x": {"enum": [1, 2]}}},
        {"type": "object", "properties": {"x": True}},
        {"type": "object", "patternProperties": {"^a": {"type": "string"}}},
        {"type": "object", "additionalProperties": {"type": "string"}},
        {"type": "object", "properties": {"x": {"type": "array", "items": {"type": "string"}}}},
        {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"},
        {"properties": {"x": {"type": "string"}}},
        {"type": "array"},
    ],
)
def test_other_schemas_go_to_the_full_validator(schema: dict[str, Any]) -> None:
    assert compile_simple(schema) is None


async def _noop(args: dict[str, Any], ctx: Any) -> str:
    return ""


def test_a_tool_reports_the_full_validators_problem() -> None:
    schema = {
        "type": "object",
        "properties": {"x": {"type": "string"}},
        "required": ["x"],
        "additionalProperties": False,
    }
    validator = Tool("echo", "", schema, _noop).validator
    assert validator.simple is not None
    assert validator.problem({"x": "fine"}) is None
    assert validator.problem({"x": 3}) == "$.x: 3 is not of type 'string'"
    assert validator.problem({}) == "$: 'x' is a required property"
    assert validator.problem({"x": "a", "y": 1}) == (
        "$: Additional properties are not allowed ('y' was unexpected)"
    )
