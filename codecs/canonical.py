"""Whether a domain value already has the exact form the strict codec would give it.

`Session.append` detaches what it is given by copying it through the codec (unstructure →
freeze → strict structure). A value that is already deeply immutable, exactly typed and
canonical comes out of that copy equal to itself, so the copy can be skipped: `is_canonical`
decides that by walking the value in place, and anything it is not sure of answers False,
which sends the value down the checking copy (and its typed errors) as before.
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable
from typing import Any, Literal, Union, get_args, get_origin

import attrs

from actorloop.codecs.jsonvalue import MAX_SAFE_INT, FrozenDict

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


def _bool(value: Any) -> bool:
    return type(value) is bool


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
    """Checkers built once per type from the attrs fields' annotations.

    `tagged` maps each tagged union the codec knows (by its member set) so a union value is
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
        self._checks: dict[Any, Check] = {}

    def check(self, value: Any) -> bool:
        """True if `value` (an attrs instance) would come out of the codec's copy as itself."""
        checker = self._checks.get(type(value))
        if checker is None:
            checker = self.for_type(type(value))
        return checker(value)

    def for_type(self, tp: Any) -> Check:
        """The checker for the annotation `tp` (memoized)."""
        found = self._checks.get(tp)
        if found is not None:
            return found
        # A placeholder first, so a self-referencing type cannot recurse forever.
        self._checks[tp] = _never
        built = self._build(tp)
        self._checks[tp] = built
        return built

    def _build(self, tp: Any) -> Check:
        if tp is str:
            return _text
        if tp is int:
            return _int
        if tp is float:
            return _float
        if tp is bool:
            return _bool
        if tp is FrozenDict:
            return _frozen_object
        origin = get_origin(tp)
        if origin is Literal:
            allowed = tuple((type(arg), arg) for arg in get_args(tp))
            return lambda value: (type(value), value) in allowed
        if origin is tuple:
            args = get_args(tp)
            if len(args) != 2 or args[1] is not Ellipsis:
                return _never
            item = self.for_type(args[0])
            return lambda value: type(value) is tuple and all(item(part) for part in value)
        if origin is Union or origin is types.UnionType:
            return self._union(get_args(tp))
        if isinstance(tp, type) and attrs.has(tp):
            return self._attrs(tp)
        return _never

    def _union(self, members: tuple[Any, ...]) -> Check:
        optional = type(None) in members
        rest = tuple(member for member in members if member is not type(None))
        if len(rest) == 1:
            inner = self.for_type(rest[0])
            if optional:
                return lambda value: value is None or inner(value)
            return inner
        if frozenset(rest) not in self._tagged:
            return _never  # an untagged union: the codec's choice is not ours to predict
        by_type = {member: self.for_type(member) for member in rest}

        def check(value: Any) -> bool:
            if value is None:
                return optional
            member = by_type.get(type(value))
            return member is not None and member(value)

        return check

    def _attrs(self, cls: type) -> Check:
        attrs.resolve_types(cls)
        fields = tuple((field.name, self.for_type(field.type)) for field in attrs.fields(cls))
        non_empty = self._empty_is_absent.get(cls, ())

        def check(value: Any) -> bool:
            if type(value) is not cls:
                return False
            for name in non_empty:
                part = getattr(value, name)
                if part is not None and not part:
                    return False
            return all(field_check(getattr(value, name)) for name, field_check in fields)

        return check
