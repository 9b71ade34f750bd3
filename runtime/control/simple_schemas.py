"""A fast check of tool arguments against the simple JSON Schemas most tools declare (an object
of typed properties, some required): the same verdict as jsonschema, without its validator."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

SimpleCheck = Callable[[Mapping[str, Any]], bool]
"""Whether arguments (a JSON object, as `orjson.loads` gives it) are valid."""

ANNOTATIONS = frozenset({"description", "title", "default", "examples", "deprecated"})
"""Keywords that never change a verdict (JSON Schema 2020-12 annotations)."""


def _is_integer(value: object) -> bool:
    # jsonschema's `integer`: an int that is no bool, or a float with no fraction.
    kind = type(value)
    return (kind is int) or (kind is float and value.is_integer())  # type: ignore[attr-defined]


TYPES: dict[str, Callable[[object], bool]] = {
    "string": lambda value: type(value) is str,
    "integer": _is_integer,
    "number": lambda value: type(value) in (int, float),
    "boolean": lambda value: type(value) is bool,
    "null": lambda value: value is None,
    "array": lambda value: type(value) is list,
    "object": lambda value: type(value) is dict,
}
"""The JSON types as jsonschema's default type checker tells them apart, for the values
`orjson.loads` makes (a bool is no integer or number; 1.0 is an integer)."""


def _type_check(declared: object) -> Callable[[object], bool] | None:
    """The check of a `type` keyword (a name or a list of names), or None if not simple."""
    if isinstance(declared, str):
        return TYPES.get(declared)
    if isinstance(declared, (list, tuple)) and declared and all(t in TYPES for t in declared):
        checks = tuple(TYPES[t] for t in declared)
        return lambda value: any(check(value) for check in checks)
    return None


def _property_check(schema: object) -> Callable[[object], bool] | None:
    """The check of one property's schema: only `type` and annotations, else None."""
    if not isinstance(schema, Mapping) or "type" not in schema:
        return None
    if any(key != "type" and key not in ANNOTATIONS for key in schema):
        return None
    return _type_check(schema["type"])


def compile_simple(schema: Mapping[str, Any]) -> SimpleCheck | None:
    """A check for `schema` when it is simple — `type: object` with `properties` whose
    schemas are a `type` (a JSON type or a list of them), `required`, a boolean
    `additionalProperties`, annotations — or None, and the full validator decides. The
    schema must have passed `check_schema` already."""
    if schema.get("type") != "object":
        return None
    allowed = ANNOTATIONS | {"type", "properties", "required", "additionalProperties"}
    if any(key not in allowed for key in schema):
        return None
    properties = schema.get("properties", {})
    if not isinstance(properties, Mapping):
        return None
    checks: dict[str, Callable[[object], bool]] = {}
    for name, property_schema in properties.items():
        check = _property_check(property_schema)
        if check is None:
            return None
        checks[name] = check
    required = frozenset(schema.get("required", ()))
    closed = schema.get("additionalProperties", True)
    if not isinstance(closed, bool):
        return None
    closed = not closed

    def valid(args: Mapping[str, Any]) -> bool:
        if type(args) is not dict or not required.issubset(args):
            return False
        for name, value in args.items():
            check = checks.get(name)
            if check is None:
                if closed:
                    return False
            elif not check(value):
                return False
        return True

    return valid
