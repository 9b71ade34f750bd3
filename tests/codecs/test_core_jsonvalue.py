"""JSON value discipline (docs/spec/session-log.md §9): validation with paths, detaching frozen
copies, iterative handling of deep nesting, canonical JSON."""

from __future__ import annotations

import copy
import math
import pickle
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import json_values

from actorloop.codecs.jsonvalue import (
    EMPTY_OBJECT,
    MAX_SAFE_INT,
    FrozenDict,
    JsonValueError,
    canonical_json,
    freeze_json,
    freeze_object,
    loads_json,
    thaw_json,
)


class Opaque:
    pass


# ------------------------------------------------------------------------- accepted


@pytest.mark.parametrize(
    "value",
    [None, True, False, 0, -1, MAX_SAFE_INT, -MAX_SAFE_INT, 0.0, 1.5, -2.25e-300, "", "é\n"],
)
def test_scalars_are_accepted_unchanged(value: Any) -> None:
    assert freeze_json(value) is value or freeze_json(value) == value


def test_containers_become_tuples_and_frozen_dicts() -> None:
    frozen = freeze_json({"a": [1, {"b": (2, 3)}], "c": {}})
    assert frozen == {"a": (1, {"b": (2, 3)}), "c": {}}
    assert isinstance(frozen, FrozenDict)
    assert isinstance(frozen["a"], tuple)
    assert isinstance(frozen["a"][1], FrozenDict)
    assert isinstance(frozen["c"], FrozenDict)


def test_the_copy_is_detached_from_the_caller() -> None:
    inner = [1, 2]
    value = {"k": inner, "d": {"x": 1}}
    frozen = freeze_json(value)
    inner.append(3)
    value["d"]["x"] = 99  # type: ignore[index]
    value["new"] = 1  # type: ignore[assignment]
    assert frozen == {"k": (1, 2), "d": {"x": 1}}


def test_shared_subtrees_are_not_cycles() -> None:
    shared = [1, 2]
    assert freeze_json({"a": shared, "b": shared, "c": [shared, shared]}) == {
        "a": (1, 2),
        "b": (1, 2),
        "c": ((1, 2), (1, 2)),
    }


# ------------------------------------------------------------------------- rejected


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        (math.nan, "non-finite float nan"),
        (math.inf, "non-finite float inf"),
        (-math.inf, "non-finite float -inf"),
        (-0.0, "negative zero"),
        ({1: "x"}, "non-string key 1"),
        ({None: "x"}, "non-string key None"),
        ({"a", "b"}, "unsupported type set"),
        (frozenset(), "unsupported type frozenset"),
        (b"x", "unsupported type bytes"),
        (bytearray(b"x"), "unsupported type bytearray"),
        (Opaque(), "unsupported type Opaque"),
        (1 + 2j, "unsupported type complex"),
        (2**53, "outside ±(2^53−1)"),
        (-(2**53), "outside ±(2^53−1)"),
        (10**40, "outside"),
    ],
)
def test_non_json_values_are_rejected_with_the_path(bad: Any, problem: str) -> None:
    with pytest.raises(JsonValueError, match="not JSON-representable") as info:
        freeze_json({"outer": [0, {"inner": bad}]})
    path = "$.outer[1].inner"
    assert info.value.path == path
    assert problem in info.value.problem
    assert path in str(info.value)
    assert isinstance(info.value, ValueError)
    with pytest.raises(JsonValueError) as top:
        freeze_json(bad, "$data")
    assert top.value.path == "$data"


def test_cycles_are_rejected_with_the_path() -> None:
    loop: list[Any] = [1]
    loop.append(loop)
    with pytest.raises(JsonValueError, match="cycle detected") as info:
        freeze_json({"x": loop})
    assert info.value.path == "$.x[1]"
    mapping: dict[str, Any] = {}
    mapping["self"] = {"again": mapping}
    with pytest.raises(JsonValueError, match="cycle") as info:
        freeze_json(mapping)
    assert info.value.path == "$.self.again"


def test_freeze_object_requires_an_object() -> None:
    assert freeze_object(None) is EMPTY_OBJECT
    assert freeze_object({"a": [1]}) == {"a": (1,)}
    with pytest.raises(JsonValueError, match="expected an object, got list"):
        freeze_object([1])  # type: ignore[arg-type]


# ----------------------------------------------------------------------- deep values


def nested(depth: int) -> Any:
    value: Any = {"leaf": 1.5}
    for i in range(depth):
        value = {"k": [value, i]} if i % 2 else [value]
    return value


def test_5000_deep_nesting_freezes_iteratively() -> None:
    deep = nested(5000)
    frozen = freeze_json(deep)
    node = frozen
    depth = 0
    while not (isinstance(node, FrozenDict) and "leaf" in node):
        node = node["k"][0] if isinstance(node, FrozenDict) else node[0]
        depth += 1
    assert depth == 5000 and node["leaf"] == 1.5


def test_5000_deep_nesting_reports_a_deep_path() -> None:
    value: Any = [math.nan]
    for _ in range(5000):
        value = [value]
    with pytest.raises(JsonValueError) as info:
        freeze_json(value)
    assert info.value.path == "$" + "[0]" * 5001


def test_5000_deep_canonical_json_and_loads_round_trip() -> None:
    frozen = freeze_json(nested(5000))
    raw = canonical_json(frozen)
    assert raw.startswith(b'{"k":[[{"k"') and b" " not in raw
    assert canonical_json(loads_json(raw)) == raw
    assert canonical_json(freeze_json(loads_json(raw))) == raw
    assert canonical_json(thaw_json(frozen)) == raw
    assert isinstance(hash(frozen), int)


def test_deep_canonical_json_still_rejects_cycles_and_bad_keys() -> None:
    loop: list[Any] = [nested(400)]
    loop.append(loop)
    with pytest.raises(TypeError):
        canonical_json(loop)
    deep: Any = {1: "x"}
    for _ in range(400):
        deep = [deep]
    with pytest.raises(TypeError):
        canonical_json(deep)


@pytest.mark.parametrize(
    "raw",
    [b"[" * 2000 + b"]" * 1999, b"[" * 2000 + b"1," + b"]" * 2000, b"[" * 1500 + b'{"a" 1}'],
)
def test_deep_invalid_json_is_rejected(raw: bytes) -> None:
    with pytest.raises(orjson.JSONDecodeError):
        loads_json(raw)


# ------------------------------------------------------------------- canonical JSON


def test_canonical_json_sorts_keys_without_spaces() -> None:
    assert canonical_json({"b": 1, "a": [1, 2.5, None, True], "c": {"z": "", "y": ()}}) == (
        b'{"a":[1,2.5,null,true],"b":1,"c":{"y":[],"z":""}}'
    )
    assert canonical_json(freeze_json({"b": 1, "a": 2})) == canonical_json({"a": 2, "b": 1})


def test_canonical_equality_ignores_key_order_only() -> None:
    assert canonical_json({"x": 1, "y": 2}) == canonical_json({"y": 2, "x": 1})
    assert canonical_json([1, 2]) != canonical_json([2, 1])
    assert canonical_json(1) != canonical_json(1.0)


@settings(max_examples=150, deadline=None)
@given(json_values(max_leaves=20))
def test_freeze_then_canonical_equals_orjson_sorted(value: Any) -> None:
    frozen = freeze_json(value)
    raw = canonical_json(frozen)
    assert raw == orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    assert freeze_json(loads_json(raw)) == frozen
    assert canonical_json(thaw_json(frozen)) == raw


@settings(max_examples=100, deadline=None)
@given(json_values(max_leaves=15), st.integers(min_value=300, max_value=600))
def test_the_deep_encoder_emits_orjsons_exact_bytes(value: Any, depth: int) -> None:
    """Past orjson's limit the iterative encoder must match orjson byte for byte."""
    deep: Any = value
    for _ in range(depth):
        deep = [deep]
    raw = canonical_json(deep)
    expected = b"[" * depth + orjson.dumps(value, option=orjson.OPT_SORT_KEYS) + b"]" * depth
    assert raw == expected
    assert canonical_json(loads_json(raw)) == raw


@settings(max_examples=100, deadline=None)
@given(json_values(max_leaves=15))
def test_the_deep_parser_reads_what_orjson_reads(value: Any) -> None:
    raw = orjson.dumps([value])
    deep = b"[" * 1100 + raw + b"]" * 1100
    parsed = loads_json(deep)
    for _ in range(1100):
        assert isinstance(parsed, list) and len(parsed) == 1
        parsed = parsed[0]
    assert parsed == orjson.loads(raw)


# ---------------------------------------------------------------------- FrozenDict


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.__setitem__("a", 2),
        lambda d: d.__delitem__("a"),
        lambda d: d.clear(),
        lambda d: d.pop("a"),
        lambda d: d.popitem(),
        lambda d: d.setdefault("z", 1),
        lambda d: d.update({"z": 1}),
        lambda d: d.__ior__({"z": 1}),
    ],
)
def test_frozen_dict_refuses_mutation(mutate: Any) -> None:
    frozen = freeze_object({"a": 1})
    with pytest.raises(TypeError, match="immutable"):
        mutate(frozen)
    assert frozen == {"a": 1}


def test_frozen_dict_is_hashable_copyable_and_picklable() -> None:
    one = freeze_object({"a": 1, "b": (1,)})
    two = freeze_object({"b": [1], "a": 1})
    assert hash(one) == hash(two) and one == two
    assert copy.copy(one) is one and copy.deepcopy(one) is one
    restored = pickle.loads(pickle.dumps(one))
    assert restored == one and isinstance(restored, FrozenDict)
    assert orjson.dumps(one, option=orjson.OPT_SORT_KEYS) == b'{"a":1,"b":[1]}'


def test_thaw_gives_a_mutable_plain_copy() -> None:
    thawed = thaw_json(freeze_json({"a": [1, {"b": 2}]}))
    thawed["a"].append(3)
    thawed["a"][1]["b"] = 5
    assert type(thawed) is dict and thawed == {"a": [1, {"b": 5}, 3]}


CRASH_SHAPES = """
import sys
from actorloop.codecs.jsonvalue import canonical_json, freeze_json, loads_json
for depth in (300, 700, 2000, 6000):
    for shape in ("dict-in-array", "array-pair", "arrays"):
        value = {"leaf": 1}
        for i in range(depth):
            if shape == "dict-in-array":
                value = [{"k": value}]
            elif shape == "array-pair":
                value = {"k": [value, i]} if i % 2 else [value]
            else:
                value = [value]
        raw = canonical_json(freeze_json(value))
        assert canonical_json(loads_json(raw)) == raw, (depth, shape)
print("ok")
"""


def test_deep_frozen_values_never_reach_orjsons_tuple_serializer() -> None:
    """orjson has no recursion limit inside tuples and corrupts memory on deep tuple/dict
    nests; run the shapes that crashed it in a child process so a regression cannot take
    the test session down with it."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", CRASH_SHAPES], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"


def test_deep_arrays_freeze_as_deep_tuples() -> None:
    from actorloop.codecs.jsonvalue import SAFE_DEPTH, DeepTuple

    shallow = freeze_json([[[1]]])
    assert type(shallow) is tuple
    deep: Any = [1]
    for _ in range(SAFE_DEPTH + 5):
        deep = [deep]
    frozen = freeze_json(deep)
    assert isinstance(frozen, DeepTuple) and isinstance(frozen, tuple)
    assert frozen == freeze_json(deep) and hash(frozen) == hash(freeze_json(deep))
    restored = pickle.loads(pickle.dumps(frozen))
    assert type(restored) is DeepTuple and restored == frozen
    assert canonical_json(frozen) == orjson.dumps(deep)


MAYBE_BAD_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**54), max_value=2**54)
    | st.floats()
    | st.text(max_size=4)
    | st.sampled_from([b"x", Opaque(), {1, 2}])
)


@settings(max_examples=200, deadline=None)
@given(
    value=st.recursive(
        MAYBE_BAD_SCALARS,
        lambda children: (
            st.lists(children, max_size=3)
            | st.tuples(children)
            | st.dictionaries(st.text(max_size=3) | st.integers(0, 2), children, max_size=3)
        ),
        max_leaves=10,
    )
)
def test_the_fast_path_agrees_with_the_exact_walk(value: Any) -> None:
    """freeze_json has a recursive fast path; it must give exactly what the iterative
    walk gives: the same frozen value, or the same error at the same path."""
    import actorloop.codecs.jsonvalue as jv

    def outcome() -> Any:
        try:
            frozen = freeze_json(value)
        except JsonValueError as error:
            return ("error", error.path, error.problem)
        return ("ok", canonical_json(frozen), repr(frozen), type(frozen))

    fast = outcome()
    saved = jv._FAST_DEPTH
    jv._FAST_DEPTH = 0  # every container takes the exact walk
    try:
        exact = outcome()
    finally:
        jv._FAST_DEPTH = saved
    assert fast == exact


# ------------------------------------------------------------------------- lone surrogates


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ("\ud800", "$"),
        ({"a": ["ok", "x\udfff"]}, "$.a[1]"),
        ({"\ud83d": 1}, "$ (key '\\ud83d')"),
        ([{"deep": "é\udc00"}], "$[0].deep"),
    ],
)
def test_a_lone_surrogate_is_refused_naming_its_path(value: Any, path: str) -> None:
    with pytest.raises(JsonValueError) as info:
        freeze_json(value)
    assert info.value.path == path
    assert "lone surrogate" in info.value.problem


def test_a_lone_surrogate_deep_in_a_nest_is_refused_by_the_iterative_walk() -> None:
    value: Any = "\ud800"
    for _ in range(300):
        value = [value]
    with pytest.raises(JsonValueError, match="lone surrogate U\\+D800"):
        freeze_json(value)


def test_paired_and_non_ascii_text_is_accepted() -> None:
    assert freeze_json({"é": "😀 ü \u2028"}) == {"é": "😀 ü \u2028"}
    with pytest.raises(JsonValueError):
        freeze_json("\ud83d\ude00")  # a surrogate pair spelled as two code points
