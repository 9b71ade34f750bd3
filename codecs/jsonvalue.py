"""JSON value discipline: validate, detach (deep-copy + deep-freeze) and canonically encode.

Every free-form value that enters a session (tool schemas, context meta, labels) passes
through `freeze_json`, which is iterative so deeply nested values never hit the recursion
limit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NoReturn, TypeAlias

import orjson

MAX_SAFE_INT = 2**53 - 1

JsonValue: TypeAlias = Any
"""A value made only of None, bool, str, finite int/float, tuple and FrozenDict."""


class JsonValueError(ValueError):
    """A value is not losslessly representable as JSON; `path` names where."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"not JSON-representable at {path}: {problem}")
        self.path = path
        self.problem = problem


class FrozenDict(dict[str, Any]):
    """A dict that refuses mutation; orjson encodes it natively as an object."""

    __slots__ = ()

    def _refuse(self, *_args: object, **_kwargs: object) -> NoReturn:
        raise TypeError("FrozenDict is immutable")

    __setitem__ = _refuse
    __delitem__ = _refuse
    __ior__ = _refuse
    clear = _refuse
    pop = _refuse
    popitem = _refuse
    setdefault = _refuse
    update = _refuse

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(canonical_json(self))

    def __copy__(self) -> FrozenDict:
        return self

    def __deepcopy__(self, _memo: object) -> FrozenDict:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenDict, (dict(self),))


EMPTY_OBJECT = FrozenDict()


def _child_path(path: str, key: str | int) -> str:
    return f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}"


def _check_scalar(value: object, path: str) -> None:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, int):
        if not -MAX_SAFE_INT <= value <= MAX_SAFE_INT:
            raise JsonValueError(path, f"integer {value} is outside ±(2^53−1)")
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise JsonValueError(path, f"non-finite float {value!r}")
        if value == 0.0 and math.copysign(1.0, value) < 0:
            raise JsonValueError(path, "negative zero has no lossless JSON form")
        return
    raise JsonValueError(path, f"unsupported type {type(value).__name__}")


def freeze_json(value: object, path: str = "$") -> JsonValue:
    """Validate `value` and return a detached, deeply frozen copy.

    Lists/tuples become tuples and dicts become FrozenDicts. Already-frozen subtrees are
    still walked (they may have been built by hand), but nothing the caller holds is shared
    mutably with the result.
    """
    if not isinstance(value, (dict, list, tuple)):
        _check_scalar(value, path)
        return value
    # Iterative post-order build: each container gets a slot list filled by its children.
    root_holder: list[Any] = [None]
    on_stack: set[int] = set()
    # work items: (value, path, parent_list, index) or a finisher marker
    stack: list[tuple[Any, ...]] = [("visit", value, path, root_holder, 0)]
    while stack:
        item = stack.pop()
        if item[0] == "finish":
            _, node_id, kind, slots, keys, parent, index = item
            on_stack.discard(node_id)
            if kind == "object":
                parent[index] = FrozenDict(zip(keys, slots, strict=True))
            else:
                parent[index] = tuple(slots)
            continue
        _, node, node_path, parent, index = item
        if isinstance(node, dict):
            node_id = id(node)
            if node_id in on_stack:
                raise JsonValueError(node_path, "cycle detected")
            keys = list(node.keys())
            for key in keys:
                if not isinstance(key, str):
                    raise JsonValueError(node_path, f"non-string key {key!r}")
            slots: list[Any] = [None] * len(keys)
            on_stack.add(node_id)
            stack.append(("finish", node_id, "object", slots, keys, parent, index))
            for i in range(len(keys) - 1, -1, -1):
                stack.append(("visit", node[keys[i]], _child_path(node_path, keys[i]), slots, i))
        elif isinstance(node, (list, tuple)):
            node_id = id(node)
            if node_id in on_stack:
                raise JsonValueError(node_path, "cycle detected")
            slots = [None] * len(node)
            on_stack.add(node_id)
            stack.append(("finish", node_id, "array", slots, None, parent, index))
            for i in range(len(node) - 1, -1, -1):
                stack.append(("visit", node[i], _child_path(node_path, i), slots, i))
        else:
            _check_scalar(node, node_path)
            parent[index] = node
    return root_holder[0]


def freeze_object(value: Mapping[str, object] | None, path: str = "$") -> FrozenDict:
    """Like `freeze_json` but the value must be an object (None gives the empty object)."""
    if value is None:
        return EMPTY_OBJECT
    if not isinstance(value, dict):
        raise JsonValueError(path, f"expected an object, got {type(value).__name__}")
    frozen = freeze_json(value, path)
    assert isinstance(frozen, FrozenDict)
    return frozen


def thaw_json(value: JsonValue) -> Any:
    """A plain mutable copy (dicts and lists) of a frozen JSON value."""
    return orjson.loads(orjson.dumps(value))


def canonical_json(value: object) -> bytes:
    """Canonical bytes: orjson, sorted keys, no spaces. Equality checks compare these."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
