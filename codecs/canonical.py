"""Whether a domain value already has the exact form the strict codec would give it.

`Session.append` detaches what it is given by copying it through the codec (unstructure →
freeze → strict structure). A value that is already deeply immutable, exactly typed and
canonical comes out of that copy equal to itself, so the copy can be skipped: `is_canonical`
decides that by walking the value in place, and anything it is not sure of answers False,
which sends the value down the checking copy (and its typed errors) as before.
"""

from __future__ import annotations

import itertools
import math
import threading
import types
from collections.abc import Callable
from typing import Any, Literal, Union, get_args, get_origin

import attrs

from .jsonvalue import MAX_SAFE_INT, FrozenDict

Check = Callable[[Any], bool]

_DEPTH = 48
"""Deepest free-form JSON checked in place; deeper values take the copy (which may need a
`DeepTuple`, see codecs/jsonvalue.py)."""


def _never(_: Any) -> bool:
    return False


def _text(value: Any) -> bool:
    if type(value) is not str:
        return False
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _int(value: Any) -> bool:
    return type(value) is int and -MAX_SAFE_INT <= value <= MAX_SAFE_INT


def _float(value: Any) -> bool:
    # The copy turns an int into a float and refuses non-finite values and negative zero.
    return (
        type(value) is float
        and math.isfinite(value)
        and (value != 0.0 or math.copysign(1.0, value) > 0)
    )


def _json(value: Any, depth: int) -> bool:
    """A frozen JSON value exactly as `freeze_json` builds it (tuples, FrozenDicts)."""
    kind = type(value)
    if kind is str:
        return _text(value)
    if value is None or kind is bool:
        return True
    if kind is int:
        return _int(value)
    if kind is float:
        return _float(value)
    if depth >= _DEPTH:
        return False
    if kind is FrozenDict:
        return all(_text(key) and _json(item, depth + 1) for key, item in value.items())
    if kind is tuple:
        return all(_json(item, depth + 1) for item in value)
    return False


def _frozen_object(value: Any) -> bool:
    return type(value) is FrozenDict and _json(value, 0)


class CanonicalChecks:
    """Checkers generated once per type from the attrs fields' annotations.

    `tagged` lists the member sets of the tagged unions the codec knows, so a union value is
    dispatched on its exact class; `empty_is_absent` names the fields the codec writes as
    absent when empty (they come back as None, so an empty value there is not canonical).
    """

    def __init__(
        self,
        tagged: tuple[tuple[type, ...], ...],
        empty_is_absent: dict[type, tuple[str, ...]],
    ) -> None:
        self._tagged = frozenset(frozenset(members) for members in tagged)
        self._empty_is_absent = empty_is_absent
        self._checks: dict[type, Check] = {}
        self._names: dict[Any, str] = {}
        self._sources: list[str] = []
        self._globals: dict[str, Any] = {
            "MAX": MAX_SAFE_INT,
            "text": _text,
            "json_float": _float,
            "frozen_object": _frozen_object,
            "never": _never,
        }
        self._counter = itertools.count()
        # Stores validate loads in worker threads: generation (names registered, sources
        # pending, one exec) must not interleave, or a thread finds a name not yet compiled.
        self._generating = threading.Lock()

    def check(self, value: Any) -> bool:
        """True if `value` (an attrs instance) would come out of the codec's copy as itself."""
        checker = self._checks.get(type(value))
        if checker is None:
            checker = self.for_type(type(value))
        return checker(value)

    def for_type(self, cls: type) -> Check:
        """The checker for instances of the attrs class `cls` (generated on first use)."""
        found = self._checks.get(cls)
        if found is not None:
            return found
        if not attrs.has(cls):
            return _never
        with self._generating:
            found = self._checks.get(cls)
            if found is not None:
                return found
            name = self._class_function(cls)
            source = "\n\n".join(self._sources)
            self._sources.clear()
            exec(compile(source, "<actorloop generated canonical checks>", "exec"), self._globals)
            checker: Check = self._globals[name]
            self._checks[cls] = checker
            return checker

    def _constant(self, value: Any, prefix: str) -> str:
        name = f"_{prefix}{next(self._counter)}"
        self._globals[name] = value
        return name

    def _class_function(self, cls: type) -> str:
        found = self._names.get(cls)
        if found is not None:
            return found
        name = f"c{next(self._counter)}_{cls.__name__}"
        self._names[cls] = name
        attrs.resolve_types(cls)
        lines = [f"def {name}(v):", f"    if type(v) is not {self._constant(cls, 'cls')}:"]
        lines.append("        return False")
        for field_name in self._empty_is_absent.get(cls, ()):
            lines.append(f"    x = v.{field_name}")
            lines.append("    if x is not None and not x:")
            lines.append("        return False")
        for field in attrs.fields(cls):
            lines.append(f"    x = v.{field.name}")
            lines.append(f"    if not ({self._expression(field.type, 'x')}):")
            lines.append("        return False")
        lines.append("    return True")
        self._sources.append("\n".join(lines))
        return name

    def _expression(self, tp: Any, var: str) -> str:
        """A boolean expression: `var` is canonical for the annotation `tp`."""
        if tp is str:
            return f"type({var}) is str and ({var}.isascii() or text({var}))"
        if tp is int:
            return f"type({var}) is int and -MAX <= {var} <= MAX"
        if tp is float:
            return f"json_float({var})"
        if tp is bool:
            return f"type({var}) is bool"
        if tp is FrozenDict:
            return f"frozen_object({var})"
        origin = get_origin(tp)
        if origin is Literal:
            allowed = self._constant(tuple((type(arg), arg) for arg in get_args(tp)), "literal")
            return f"(type({var}), {var}) in {allowed}"
        if origin is tuple:
            args = get_args(tp)
            if len(args) != 2 or args[1] is not Ellipsis:
                return "False"
            return f"{self._tuple_function(args[0])}({var})"
        if origin is Union or origin is types.UnionType:
            members = get_args(tp)
            rest = tuple(member for member in members if member is not type(None))
            optional = type(None) in members
            if len(rest) == 1:
                inner = self._expression(rest[0], var)
                return f"{var} is None or ({inner})" if optional else inner
            if frozenset(rest) not in self._tagged:
                return "False"  # an untagged union: the codec's choice is not ours to predict
            name = self._union_table(rest)
            dispatch = f"{name}.get(type({var}), never)({var})"
            return f"{var} is None or {dispatch}" if optional else dispatch
        if isinstance(tp, type) and attrs.has(tp):
            return f"{self._class_function(tp)}({var})"
        return "False"

    def _union_table(self, members: tuple[type, ...]) -> str:
        """The name of a dict from member class to its checker (filled when the generated
        module runs, after every member's function exists)."""
        key = (frozenset(members), "union")
        found = self._names.get(key)
        if found is not None:
            return found
        name = self._constant({}, "members")
        self._names[key] = name
        table = {member: self._class_function(member) for member in members}
        entries = ", ".join(f"{self._constant(m, 'cls')}: {f}" for m, f in table.items())
        self._sources.append(f"{name}.update({{{entries}}})")
        return name

    def _tuple_function(self, item: Any) -> str:
        key = (item, "tuple")
        found = self._names.get(key)
        if found is not None:
            return found
        name = f"t{next(self._counter)}"
        self._names[key] = name
        self._sources.append(
            "\n".join(
                [
                    f"def {name}(v):",
                    "    if type(v) is not tuple:",
                    "        return False",
                    "    for x in v:",
                    f"        if not ({self._expression(item, 'x')}):",
                    "            return False",
                    "    return True",
                ]
            )
        )
        return name
