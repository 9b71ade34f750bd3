"""JSON value discipline: validate, detach (deep-copy + deep-freeze) and canonically encode.

Every free-form value that enters a session (tool schemas, context meta, labels, and every
event's data when it is appended) passes through `freeze_json`, which is iterative so deeply
nested values never hit the recursion limit. Strings (keys too) must be encodable as UTF-8:
a lone surrogate is refused here, at append, in every store alike.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Mapping
from typing import Any, NoReturn, TypeAlias

import orjson

from ..runtime.errors import JsonValueError

MAX_SAFE_INT = 2**53 - 1

JsonValue: TypeAlias = Any
"""A value made only of None, bool, str, finite int/float, tuple and FrozenDict."""


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

SAFE_DEPTH = 100
"""Arrays whose subtree is deeper than this are frozen as `DeepTuple` (see there)."""


class DeepTuple(tuple[Any, ...]):
    """A frozen array with a subtree deeper than SAFE_DEPTH levels.

    orjson applies no recursion limit inside tuples and corrupts memory on deep
    tuple/dict nests (seen with orjson 3.13 from ~700 levels: 'malloc(): invalid size').
    orjson does not serialize tuple subclasses natively, so it hands a DeepTuple to our
    `default`, which encodes the subtree iteratively (same bytes). Equal to a tuple.
    """

    __slots__ = ()

    def __reduce__(self) -> tuple[Any, ...]:
        return (DeepTuple, (tuple(self),))


def _child_path(path: str, key: str | int) -> str:
    return f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}"


def _encodable(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_text(text: str, path: str = "$") -> None:
    """Refuse a string with no UTF-8 form (a lone surrogate such as "\\ud800"): JSON stores
    cannot encode it, so it must not get into a log. Raises JsonValueError naming `path`."""
    if _encodable(text):
        return
    index = next(i for i, char in enumerate(text) if 0xD800 <= ord(char) <= 0xDFFF)
    raise JsonValueError(
        path, f"lone surrogate U+{ord(text[index]):04X} at index {index} has no UTF-8 form"
    )


def _check_scalar(value: object, path: str) -> None:
    if isinstance(value, str):
        check_text(value, path)
        return
    if isinstance(value, bool) or value is None:
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
    with contextlib.suppress(_NotFast):
        return _freeze_fast(value, 0)
    # Deep, unusual or invalid: the exact walk below decides (and names the path).
    # Iterative post-order build: each container gets a slot list filled by its children,
    # and a height list so arrays know how deep their subtree is (see DeepTuple).
    root_holder: list[Any] = [None]
    root_height: list[int] = [0]
    on_stack: set[int] = set()
    # work items: (value, path, parent_list, parent_heights, index) or a finisher marker
    stack: list[tuple[Any, ...]] = [("visit", value, path, root_holder, root_height, 0)]
    while stack:
        item = stack.pop()
        if item[0] == "finish":
            _, node_id, kind, slots, heights, keys, parent, parent_heights, index = item
            on_stack.discard(node_id)
            height = 1 + max(heights, default=0)
            parent_heights[index] = height
            if kind == "object":
                parent[index] = FrozenDict(zip(keys, slots, strict=True))
            elif height > SAFE_DEPTH:
                parent[index] = DeepTuple(slots)
            else:
                parent[index] = tuple(slots)
            continue
        _, node, node_path, parent, parent_heights, index = item
        if isinstance(node, dict):
            node_id = id(node)
            if node_id in on_stack:
                raise JsonValueError(node_path, "cycle detected")
            keys = list(node.keys())
            for key in keys:
                if not isinstance(key, str):
                    raise JsonValueError(node_path, f"non-string key {key!r}")
                check_text(key, f"{node_path} (key {key!r})")
            slots = [None] * len(keys)
            heights = [0] * len(keys)
            on_stack.add(node_id)
            stack.append(
                ("finish", node_id, "object", slots, heights, keys, parent, parent_heights, index)
            )
            for i in range(len(keys) - 1, -1, -1):
                child_path = _child_path(node_path, keys[i])
                stack.append(("visit", node[keys[i]], child_path, slots, heights, i))
        elif isinstance(node, (list, tuple)):
            node_id = id(node)
            if node_id in on_stack:
                raise JsonValueError(node_path, "cycle detected")
            slots = [None] * len(node)
            heights = [0] * len(node)
            on_stack.add(node_id)
            stack.append(
                ("finish", node_id, "array", slots, heights, None, parent, parent_heights, index)
            )
            for i in range(len(node) - 1, -1, -1):
                stack.append(("visit", node[i], _child_path(node_path, i), slots, heights, i))
        else:
            _check_scalar(node, node_path)
            parent[index] = node
    return root_holder[0]


class _NotFast(Exception):
    pass


_FAST_DEPTH = 48  # < SAFE_DEPTH, so the fast path never needs a DeepTuple


def _freeze_fast(value: Any, depth: int) -> Any:
    """Recursive fast path for the common case: shallow, plain JSON types, valid.

    Exact type checks only; anything else (subclasses, bad values, deep or cyclic
    values) raises _NotFast and the iterative walk handles it with the error path.
    """
    kind = type(value)
    if kind is str:
        if _encodable(value):
            return value
        raise _NotFast
    if value is None or kind is bool:
        return value
    if kind is int:
        if -MAX_SAFE_INT <= value <= MAX_SAFE_INT:
            return value
        raise _NotFast
    if kind is float:
        if math.isfinite(value) and (value != 0.0 or math.copysign(1.0, value) > 0):
            return value
        raise _NotFast
    if depth >= _FAST_DEPTH:
        raise _NotFast
    if kind is dict or kind is FrozenDict:
        out = {}
        for key, item in value.items():
            if type(key) is not str or not _encodable(key):
                raise _NotFast
            out[key] = _freeze_fast(item, depth + 1)
        return FrozenDict(out)
    if kind is list or kind is tuple:
        return tuple([_freeze_fast(item, depth + 1) for item in value])
    raise _NotFast


def freeze_object(value: Mapping[str, object] | None, path: str = "$") -> FrozenDict:
    """Like `freeze_json` but the value must be an object (None gives the empty object)."""
    if value is None or value is EMPTY_OBJECT:
        # Ours, frozen and empty: shared rather than copied (every spawn's meta and
        # options pass one), so an idle agent holds no empty object of its own.
        return EMPTY_OBJECT
    if not isinstance(value, dict):
        raise JsonValueError(path, f"expected an object, got {type(value).__name__}")
    frozen = freeze_json(value, path)
    assert isinstance(frozen, FrozenDict)
    return frozen


def thaw_json(value: JsonValue) -> Any:
    """A plain mutable copy (dicts and lists) of a frozen JSON value."""
    return loads_json(_dumps(value, sort_keys=False))


def canonical_json(value: object) -> bytes:
    """Canonical bytes: orjson, sorted keys, no spaces. Equality checks compare these."""
    return _dumps(value, sort_keys=True)


def loads_json(raw: bytes | str) -> Any:
    """Parse JSON with orjson; nesting beyond orjson's depth limit is parsed iteratively,
    so whatever `canonical_json` writes can be read back (a 5,000-deep value included)."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        if "depth limit" not in str(exc):
            raise
        text = raw.decode("utf-8") if isinstance(raw, (bytes, bytearray, memoryview)) else raw
        return _loads_deep(str(text))


def _deep_sorted(value: object) -> orjson.Fragment:
    if isinstance(value, DeepTuple):
        return orjson.Fragment(_dumps_deep(value, True))
    raise TypeError(f"Type is not JSON serializable: {type(value).__name__}")


def _deep_unsorted(value: object) -> orjson.Fragment:
    if isinstance(value, DeepTuple):
        return orjson.Fragment(_dumps_deep(value, False))
    raise TypeError(f"Type is not JSON serializable: {type(value).__name__}")


def _dumps(value: object, *, sort_keys: bool) -> bytes:
    option, default = (orjson.OPT_SORT_KEYS, _deep_sorted) if sort_keys else (None, _deep_unsorted)
    try:
        return orjson.dumps(value, default=default, option=option)
    except TypeError as exc:
        if "Recursion limit" not in str(exc):
            raise
        return _dumps_deep(value, sort_keys)


_LITERAL, _VALUE, _LEAVE = 0, 1, 2


def _dumps_deep(value: object, sort_keys: bool) -> bytes:
    """Iterative encoder producing exactly orjson's bytes (every scalar and key is encoded
    by orjson itself); used only past orjson's recursion limit."""
    parts: list[bytes] = []
    active: set[int] = set()
    stack: list[tuple[int, Any]] = [(_VALUE, value)]
    while stack:
        kind, item = stack.pop()
        if kind == _LITERAL:
            parts.append(item)
            continue
        if kind == _LEAVE:
            active.discard(item)
            continue
        if isinstance(item, (dict, list, tuple)):
            if id(item) in active:
                raise TypeError("Recursion limit reached (cycle)")
            active.add(id(item))
            stack.append((_LEAVE, id(item)))
            if isinstance(item, dict):
                for key in item:
                    if not isinstance(key, str):
                        raise TypeError("Dict key must be str")
                keys = sorted(item) if sort_keys else list(item)
                stack.append((_LITERAL, b"}"))
                for index in range(len(keys) - 1, -1, -1):
                    stack.append((_VALUE, item[keys[index]]))
                    head = orjson.dumps(keys[index]) + b":"
                    stack.append((_LITERAL, b"," + head if index else head))
                stack.append((_LITERAL, b"{"))
            else:
                stack.append((_LITERAL, b"]"))
                for index in range(len(item) - 1, -1, -1):
                    stack.append((_VALUE, item[index]))
                    if index:
                        stack.append((_LITERAL, b","))
                stack.append((_LITERAL, b"["))
        else:
            parts.append(orjson.dumps(item))
    return b"".join(parts)


_TOKEN = re.compile(
    r"""[ \t\n\r]*(?:([\[\]{},:])|("(?:[^"\\\x00-\x1f]|\\.)*")"""
    r"""|(-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|true|false|null))"""
)
_WHITESPACE = re.compile(r"[ \t\n\r]*")


def _loads_deep(text: str) -> Any:
    """Iterative JSON parser (used only past orjson's depth limit). Strings, numbers and
    literals are decoded by orjson itself, so the values are exactly orjson's."""
    # frames: [container, pending key]; states: what the next token may be.
    stack: list[list[Any]] = []
    state = "value"
    root: Any = None
    done = False
    pos = 0

    def fail(problem: str) -> orjson.JSONDecodeError:
        return orjson.JSONDecodeError(f"{problem} at char {pos}", text, pos)

    while not done:
        match = _TOKEN.match(text, pos)
        if match is None:
            raise fail("invalid JSON")
        pos = match.end()
        punct, string, scalar = match.groups()
        produced = False
        value: Any = None
        if state in ("value", "value_or_close"):
            if punct == "[":
                stack.append([[], None])
                state = "value_or_close"
            elif punct == "{":
                stack.append([{}, None])
                state = "key_or_close"
            elif punct == "]" and state == "value_or_close":
                value, produced = stack.pop()[0], True
            elif punct is None:
                value, produced = orjson.loads(string if string is not None else scalar), True
            else:
                raise fail(f"unexpected {punct!r}")
        elif state in ("key", "key_or_close"):
            if string is not None:
                stack[-1][1] = orjson.loads(string)
                state = "colon"
            elif punct == "}" and state == "key_or_close":
                value, produced = stack.pop()[0], True
            else:
                raise fail("expected an object key")
        elif state == "colon":
            if punct != ":":
                raise fail("expected ':'")
            state = "value"
        else:  # after a value inside a container
            container = stack[-1][0]
            if punct == ",":
                state = "key" if isinstance(container, dict) else "value"
            elif punct == ("}" if isinstance(container, dict) else "]"):
                value, produced = stack.pop()[0], True
            else:
                raise fail("expected ',' or a closing bracket")
        if produced:
            if not stack:
                root, done = value, True
            else:
                frame = stack[-1]
                if isinstance(frame[0], dict):
                    frame[0][frame[1]] = value
                else:
                    frame[0].append(value)
                state = "next"
    end = _WHITESPACE.match(text, pos)
    if end is None or end.end() != len(text):
        raise fail("trailing data")
    return root
