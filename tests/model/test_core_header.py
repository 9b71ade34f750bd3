"""Request header algebra (docs/spec/session-log.md §6, §7): canonical form, equality, tool order,
system line patches, tools deltas, config, the message_prefix branch, and the fold."""

from __future__ import annotations

import attrs
import pytest
from strategies import LogBuilder

from actorloop.codecs.converter import canonical_bytes, structure_as, unstructure
from actorloop.runtime.errors import HeaderFoldError, SessionValidationError
from actorloop.runtime.log.header_algebra import (
    HeaderFold,
    ToolOrderError,
    apply_delta,
    apply_system,
    apply_tools,
    canonical,
    diff,
    diff_system,
    diff_tools,
    fold,
    headers_equal,
    order_tools,
)
from actorloop.runtime.log.session import Session
from actorloop.runtime.model.events import RequestHeaderEvent, SessionEvent
from actorloop.runtime.model.header import (
    EpochHeader,
    HeaderDelta,
    LlmCallConfig,
    SystemPatch,
    ToolSchema,
    ToolsDelta,
)
from actorloop.runtime.model.messages import Message

CONFIG = LlmCallConfig("m", temperature=0.5, max_tokens=100, stop=("a", "b"))
A, B, C = ToolSchema("a", "A"), ToolSchema("b", "B"), ToolSchema("c", "C")
OPENER = Message.user("opener")


def header(**kwargs: object) -> EpochHeader:
    return EpochHeader(kwargs.pop("config", CONFIG), **kwargs)  # type: ignore[arg-type]


# ---------------------------------------------------------------------- canonical form


def test_canonical_form_makes_empty_fields_absent() -> None:
    empty = header(system="", tools=(), message_prefix=())
    assert canonical(empty) == header()
    assert canonical(empty).system is None
    assert canonical(empty).tools is None
    assert canonical(empty).message_prefix is None
    full = header(system="s", tools=(A,), message_prefix=(OPENER,))
    assert canonical(full) is full


def test_encoding_omits_absent_and_empty_fields() -> None:
    assert canonical_bytes(header(system="", tools=(), message_prefix=())) == (
        b'{"config":{"max_tokens":100,"model":"m","stop":["a","b"],"temperature":0.5}}'
    )
    assert b"system" not in canonical_bytes(RequestHeaderEvent(header(system=""), "initial"))


# --------------------------------------------------------------------------- equality


def test_absent_equals_empty() -> None:
    assert headers_equal(header(), header(system="", tools=(), message_prefix=()))
    assert headers_equal(None, None)
    assert not headers_equal(header(), None)
    assert not headers_equal(None, header())


def test_a_tool_reorder_is_a_change() -> None:
    assert headers_equal(header(tools=(A, B)), header(tools=(A, B)))
    assert not headers_equal(header(tools=(A, B)), header(tools=(B, A)))


def test_tools_compare_by_their_encoding_in_the_order_written() -> None:
    """Decision 0007: parameters keep the order written, so a property reorder is a change."""
    one = ToolSchema("a", "d", {"type": "object", "properties": {"x": {}, "y": {}}})
    same = ToolSchema("a", "d", {"type": "object", "properties": {"x": {}, "y": {}}})
    two = ToolSchema("a", "d", {"properties": {"y": {}, "x": {}}, "type": "object"})
    assert headers_equal(header(tools=(one,)), header(tools=(same,)))
    assert not headers_equal(header(tools=(one,)), header(tools=(two,)))
    three = ToolSchema("a", "d", {"type": "object"})
    assert not headers_equal(header(tools=(one,)), header(tools=(three,)))


@pytest.mark.parametrize(
    "other",
    [
        LlmCallConfig("other", temperature=0.5, max_tokens=100, stop=("a", "b")),
        LlmCallConfig("m", temperature=0.6, max_tokens=100, stop=("a", "b")),
        LlmCallConfig("m", temperature=0.5, max_tokens=101, stop=("a", "b")),
        LlmCallConfig("m", temperature=0.5, max_tokens=100, stop=("b", "a")),  # stop in order
        LlmCallConfig("m", temperature=0.5, max_tokens=100),
        LlmCallConfig("m", "prov", temperature=0.5, max_tokens=100, stop=("a", "b")),
    ],
)
def test_config_compares_field_by_field(other: LlmCallConfig) -> None:
    assert not headers_equal(header(), header(config=other))


def test_config_normalises_numbers_and_stop() -> None:
    assert LlmCallConfig("m", temperature=1).temperature == 1.0
    assert isinstance(LlmCallConfig("m", temperature=1).temperature, float)
    assert LlmCallConfig("m", stop="END").stop == ("END",)
    assert LlmCallConfig("m", stop=["a", "b"]).stop == ("a", "b")  # type: ignore[arg-type]
    assert headers_equal(
        header(config=LlmCallConfig("m", temperature=1)),
        header(config=LlmCallConfig("m", temperature=1.0)),
    )
    with pytest.raises(TypeError, match="temperature must be a number"):
        LlmCallConfig("m", temperature="hot")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        LlmCallConfig("m", temperature=True)


def test_system_and_prefix_compare_exactly() -> None:
    assert not headers_equal(header(system="a"), header(system="a "))
    assert not headers_equal(header(message_prefix=(OPENER,)), header())
    assert headers_equal(header(message_prefix=(OPENER,)), header(message_prefix=(OPENER,)))


# ------------------------------------------------------------------------- tool order


def test_tools_are_ordered_lexicographically_by_default() -> None:
    assert order_tools([C, A, B]) == (A, B, C)
    assert order_tools([]) == ()


def test_tool_order_lists_names_first_then_the_rest_by_name() -> None:
    assert order_tools([A, B, C], ["c"]) == (C, A, B)
    assert order_tools([A, B, C], ["b", "a"]) == (B, A, C)
    assert order_tools([A, B, C], []) == (A, B, C)


def test_tool_order_naming_an_unknown_tool_raises() -> None:
    with pytest.raises(ToolOrderError, match="unknown tool 'zzz'"):
        order_tools([A, B], ["a", "zzz"])
    with pytest.raises(ValueError, match="duplicate tool name 'a'"):
        order_tools([A, A])


# ----------------------------------------------------------------------- system patch


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("a\nb\nc", "a\nX\nc"),
        ("a\nb\nc", "a\nb\nc\nd"),
        ("a\nb\nc", "z\na\nb\nc"),
        ("a\nb\nc", "a\nc"),
        ("a\nb\nc", "completely different"),
        ("x\nx\nx", "x\nx"),  # repeated lines
        ("x\nx", "x\nx\nx"),
        ("x\ny\nx\ny", "x\ny\nx\ny\nx\ny"),
        ("a\n\nb", "a\n\n\nb"),
        ("a\nb\n", "a\nb"),
        ("", "a"),
        (None, "a\nb"),
        ("a\nb", None),
        ("same", "same"),
    ],
)
def test_system_patch_round_trips(old: str | None, new: str | None) -> None:
    patch = diff_system(old, new)
    assert apply_system(old, patch) == (new or None)


def test_system_patch_keeps_prefix_and_suffix_lines() -> None:
    patch = diff_system("a\nb\nc\nd", "a\nb\nX\nd")
    assert patch == SystemPatch(keep_start=2, keep_end=1, insert=("X",))
    # Non-overlapping with repeated lines: keep_start + keep_end never exceeds either side.
    patch = diff_system("x\nx\nx", "x\nx")
    assert patch.keep_start + patch.keep_end <= 2
    assert apply_system("x\nx\nx", patch) == "x\nx"


def test_system_patch_degenerates_to_full_replacement() -> None:
    patch = SystemPatch(0, 0, ("entirely", "new"))
    assert apply_system("old\ntext", patch) == "entirely\nnew"
    assert apply_system(None, patch) == "entirely\nnew"


def test_system_patch_that_keeps_too_much_does_not_apply() -> None:
    with pytest.raises(HeaderFoldError, match="keeps 2\\+1 lines of a 2-line system prompt"):
        apply_system("a\nb", SystemPatch(2, 1, ()))
    with pytest.raises(HeaderFoldError):
        apply_system("a", SystemPatch(-1, 0, ()))


def test_patch_to_empty_system_is_absent() -> None:
    assert apply_system("a", SystemPatch(0, 0, ())) is None
    assert apply_system("a", SystemPatch(0, 0, ("",))) is None


# ------------------------------------------------------------------------ tools delta


def test_tools_delta_drops_replaces_in_place_and_appends() -> None:
    b2 = ToolSchema("b", "new B")
    delta = ToolsDelta(added=(C,), removed=("a",), changed=(b2,))
    assert apply_tools((A, B), delta) == (b2, C)
    assert diff_tools((A, B), (b2, C)) == delta
    assert apply_tools((A,), ToolsDelta(removed=("a",))) is None
    assert apply_tools(None, ToolsDelta(added=(A,))) == (A,)


@pytest.mark.parametrize(
    ("delta", "fragment"),
    [
        (ToolsDelta(removed=("z",)), "removes unknown tools"),
        (ToolsDelta(changed=(C,)), "changes unknown tool 'c'"),
        (ToolsDelta(added=(A,)), "adds existing tool 'a'"),
    ],
)
def test_tools_delta_that_does_not_fit_raises(delta: ToolsDelta, fragment: str) -> None:
    with pytest.raises(HeaderFoldError, match=fragment):
        apply_tools((A, B), delta)


# -------------------------------------------------------------------------------- diff


def test_diff_of_equal_headers_is_an_empty_delta() -> None:
    delta = diff(header(tools=(A,)), header(tools=(A,), system=""))
    assert delta == HeaderDelta()
    assert delta is not None and delta.is_empty


def test_diff_carries_only_changed_fields() -> None:
    old = header(system="a\nb", tools=(A, B))
    new = header(system="a\nc", tools=(A, B))
    delta = diff(old, new)
    assert delta == HeaderDelta(system=SystemPatch(1, 0, ("c",)))
    assert canonical_bytes(delta) == b'{"system":{"insert":["c"],"keep_end":0,"keep_start":1}}'
    config = LlmCallConfig("other")
    assert diff(old, attrs.evolve(old, config=config)) == HeaderDelta(config=config)


def test_pure_tool_reorder_needs_a_fallback_snapshot() -> None:
    assert diff(header(tools=(A, B)), header(tools=(B, A))) is None


def test_tool_inserted_in_the_middle_needs_a_fallback_snapshot() -> None:
    assert diff(header(tools=(A, C)), header(tools=(A, B, C))) is None
    delta = diff(header(tools=(A, B)), header(tools=(A, B, C)))
    assert delta == HeaderDelta(tools=ToolsDelta(added=(C,)))


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (header(), header(system="s", tools=(A,), message_prefix=(OPENER,))),
        (header(system="s", tools=(A,), message_prefix=(OPENER,)), header()),
        (header(tools=(A, B, C)), header(tools=(A, ToolSchema("b", "changed")))),
        (header(system="x\nx\nx"), header(system="x\ny\nx", config=LlmCallConfig("z"))),
    ],
)
def test_apply_of_diff_reproduces_new(old: EpochHeader, new: EpochHeader) -> None:
    delta = diff(old, new)
    assert delta is not None
    assert headers_equal(apply_delta(old, delta), new)


# ------------------------------------------------------------ message_prefix branch


def test_prefix_delta_to_absent_is_an_empty_array() -> None:
    old = header(message_prefix=(OPENER,))
    delta = diff(old, header())
    assert delta == HeaderDelta(message_prefix=())
    assert canonical_bytes(delta) == b'{"message_prefix":[]}'
    applied = apply_delta(old, delta)
    assert applied.message_prefix is None
    assert headers_equal(applied, header())


def test_prefix_presence_of_the_key_not_truthiness_counts() -> None:
    old = header(message_prefix=(OPENER,))
    assert apply_delta(old, HeaderDelta()).message_prefix == (OPENER,)  # key absent: keep
    assert apply_delta(old, HeaderDelta(message_prefix=())).message_prefix is None  # key: []
    decoded_absent = structure_as({}, HeaderDelta)
    decoded_empty = structure_as({"message_prefix": []}, HeaderDelta)
    assert decoded_absent.message_prefix is None
    assert decoded_empty.message_prefix == ()
    assert apply_delta(old, decoded_absent).message_prefix == (OPENER,)
    assert apply_delta(old, decoded_empty).message_prefix is None


def test_prefix_delta_sets_a_new_prefix() -> None:
    skills = Message.user("skills")
    delta = diff(header(), header(message_prefix=(OPENER, skills)))
    assert delta == HeaderDelta(message_prefix=(OPENER, skills))
    restored = structure_as(unstructure(delta), HeaderDelta)
    assert restored == delta
    assert apply_delta(header(), restored).message_prefix == (OPENER, skills)


# -------------------------------------------------------------------------------- fold


def _event(seq: int, data: object) -> SessionEvent:
    event_type = (
        "request/header" if isinstance(data, RequestHeaderEvent) else "request/header-delta"
    )
    return SessionEvent(event_type, seq, 0, data)  # type: ignore[arg-type]


def test_fold_snapshot_replaces_with_the_canonical_form_and_deltas_apply() -> None:
    snapshot = RequestHeaderEvent(header(system="", tools=(A,)), "initial")
    events = [
        _event(0, snapshot),
        _event(1, HeaderDelta(tools=ToolsDelta(added=(B,)))),
        _event(2, HeaderDelta(config=LlmCallConfig("z"))),
    ]
    assert fold(events) == EpochHeader(LlmCallConfig("z"), None, (A, B), None)
    resumed = RequestHeaderEvent(header(system="again"), "resume")
    assert fold([*events, _event(3, resumed)]) == header(system="again")
    assert fold([]) is None


def test_fold_raises_on_a_delta_before_any_snapshot() -> None:
    with pytest.raises(HeaderFoldError, match="event 0: header delta before any snapshot"):
        fold([_event(0, HeaderDelta(config=CONFIG))])
    header_fold = HeaderFold()
    with pytest.raises(HeaderFoldError):
        header_fold.feed(_event(5, HeaderDelta()))
    assert header_fold.current is None


def test_fold_raises_on_a_delta_that_does_not_apply() -> None:
    events = [
        _event(0, RequestHeaderEvent(header(), "initial")),
        _event(1, HeaderDelta(tools=ToolsDelta(removed=("a",)))),
    ]
    with pytest.raises(HeaderFoldError, match="event 1: tools delta removes unknown tools"):
        fold(events)


def test_fold_preview_does_not_change_the_fold() -> None:
    header_fold = HeaderFold()
    header_fold.feed(_event(0, RequestHeaderEvent(header(), "initial")))
    before = header_fold.current
    preview = header_fold.preview(_event(1, HeaderDelta(config=LlmCallConfig("z"))))
    assert preview is not None and preview.config.model == "z"
    assert header_fold.current is before


def test_session_header_is_the_incremental_fold() -> None:
    b = LogBuilder()
    b.turn_start()
    b.step_start()
    session = Session.from_events("s", b.events)
    assert session.header() is None
    session.append_event(b.header(header(system="one")))
    assert session.header() == header(system="one")
    session.append_event(b.header_delta(HeaderDelta(system=diff_system("one", "one\ntwo"))))
    assert session.header() == header(system="one\ntwo")
    assert session.header() == fold(session.events)
    assert Session.from_events("r", session.events).header() == session.header()
    with pytest.raises(SessionValidationError, match="keeps"):
        session.append("request/header-delta", HeaderDelta(system=SystemPatch(9, 9, ())))
    assert session.header() == header(system="one\ntwo")


def test_the_folded_header_is_frozen() -> None:
    folded = fold([_event(0, RequestHeaderEvent(header(tools=(A,)), "initial"))])
    assert folded is not None
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        folded.system = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        folded.tools[0].parameters["x"] = 1  # type: ignore[index]
