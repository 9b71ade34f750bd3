"""Hypothesis properties of the data core: derivation, replay, codec round trips, header
diff/apply, fork and transactional appends."""

from __future__ import annotations

from typing import Any

import attrs
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import (
    build_log,
    epoch_headers,
    event_data,
    header_deltas,
    header_transitions,
    noise_for,
    programs,
    session_events,
    surface_ops,
    valid_logs,
)

from actorloop.codecs.converter import (
    canonical_bytes,
    decode_event,
    encode_event,
    structure_as,
)
from actorloop.runtime.errors import SessionValidationError
from actorloop.runtime.log.header_algebra import apply_delta, canonical, diff, fold, headers_equal
from actorloop.runtime.log.session import Session
from actorloop.runtime.model.events import RequestHeaderEvent, SessionEvent, TurnEnd
from actorloop.runtime.model.header import EpochHeader, HeaderDelta

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CODEC = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def replay(events: Any) -> Session:
    return Session.from_events("replay", events)


# ----------------------------------------------------------------------- derivation


@FAST
@given(valid_logs())
def test_derivation_is_deterministic(log: tuple[SessionEvent, ...]) -> None:
    one, two = replay(log), replay(log)
    assert one.derive_messages() == two.derive_messages()
    assert one.derive_messages() is one.derive_messages()
    assert one.surface == two.surface
    assert one.replace_generation == two.replace_generation


@FAST
@given(valid_logs())
def test_seq_equals_index(log: tuple[SessionEvent, ...]) -> None:
    session = replay(log)
    assert [e.seq for e in session.events] == list(range(len(session)))
    assert [session.event(i).seq for i in range(len(session))] == list(range(len(session)))


@FAST
@given(st.data())
def test_incremental_derivation_equals_replay_from_a_seed(data: st.DataObject) -> None:
    """Appends with derivations at random points (so replaces hit a warm cache) always
    equal a from-scratch replay of the same events, and the fold of the same events."""
    log = data.draw(valid_logs(max_turns=5))
    checkpoints = data.draw(st.sets(st.integers(0, max(len(log) - 1, 0))))
    session = Session.create("live")
    for index, event in enumerate(log):
        assert session.append_event(event) == event
        if index in checkpoints:
            assert session.derive_messages() == replay(session.events).derive_messages()
    assert session.derive_messages() == replay(log).derive_messages()
    assert session.surface == replay(log).surface
    assert session.header() == fold(log)
    assert session.history_chain() == replay(log).history_chain()


@FAST
@given(st.data())
def test_interleaving_non_surface_events_never_changes_the_derivation(
    data: st.DataObject,
) -> None:
    program = data.draw(programs(open_last=None))
    noise = data.draw(noise_for(program))
    quiet, noisy = build_log(program), build_log(program, noise)
    assert replay(noisy).derive_messages() == replay(quiet).derive_messages()
    assert len(noisy) >= len(quiet)
    surface = [e.data for e in noisy if e.surface_op is not None]
    assert surface == [e.data for e in quiet if e.surface_op is not None]


@FAST
@given(valid_logs())
def test_every_derived_message_is_frozen(log: tuple[SessionEvent, ...]) -> None:
    for message in replay(log).derive_messages():
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            message.role = "system"  # type: ignore[misc]
        assert isinstance(message.content, tuple)
        for block in message.content:
            with pytest.raises(attrs.exceptions.FrozenInstanceError):
                block.text = "x"  # type: ignore[union-attr]


@FAST
@given(valid_logs())
def test_every_turn_end_is_a_fork_point_equal_to_a_replayed_prefix(
    log: tuple[SessionEvent, ...],
) -> None:
    parent = replay(log)
    for event in log:
        if isinstance(event.data, TurnEnd):
            child = parent.fork(event.seq, f"child-{event.seq}")
            prefix = log[: event.seq + 1]
            assert child.events == prefix
            assert child.derive_messages() == replay(prefix).derive_messages()
            assert child.header() == fold(prefix)
            assert child.meta.seed_length == event.seq + 1


# ---------------------------------------------------------------------- transactions


@FAST
@given(valid_logs(max_turns=3), event_data(), st.none() | surface_ops(), st.data())
def test_any_append_either_commits_consistently_or_changes_nothing(
    log: tuple[SessionEvent, ...],
    typed: tuple[str, Any],
    op: Any,
    data: st.DataObject,
) -> None:
    session = replay(log)
    session.derive_messages()
    before = (
        session.events,
        session.derive_messages(),
        session.header(),
        session.surface,
        session.replace_generation,
        session.open_turn,
        session.open_step,
    )
    seqs = data.draw(st.none() | st.lists(st.integers(0, len(log) + 1), max_size=3).map(tuple))
    event_type, event_data_ = typed
    event = SessionEvent(event_type, len(log), 1, event_data_, seqs, op)
    try:
        committed = session.append_event(event)
    except SessionValidationError as error:
        assert error.seq == len(log)
        after = (
            session.events,
            session.derive_messages(),
            session.header(),
            session.surface,
            session.replace_generation,
            session.open_turn,
            session.open_step,
        )
        assert after == before
    else:
        assert committed.seq == len(log)
        again = replay(session.events)
        assert again.derive_messages() == session.derive_messages()
        assert again.header() == session.header()
        assert decode_event(encode_event(committed)) == committed


# ----------------------------------------------------------------------------- codec


@CODEC
@given(session_events())
def test_events_encode_decode_encode_byte_identically(event: SessionEvent) -> None:
    raw = encode_event(event)
    decoded = decode_event(raw)
    assert encode_event(decoded) == raw
    assert decode_event(encode_event(decoded)) == decoded


@CODEC
@given(epoch_headers())
def test_headers_encode_decode_encode_byte_identically(header: EpochHeader) -> None:
    raw = canonical_bytes(header)
    decoded = structure_as(orjson.loads(raw), EpochHeader)
    assert canonical_bytes(decoded) == raw
    assert decoded == canonical(header)
    assert headers_equal(decoded, header)


@CODEC
@given(header_deltas())
def test_deltas_encode_decode_encode_byte_identically(delta: HeaderDelta) -> None:
    raw = canonical_bytes(delta)
    decoded = structure_as(orjson.loads(raw), HeaderDelta)
    assert decoded == delta  # presence of every branch (incl. message_prefix=()) survives
    assert canonical_bytes(decoded) == raw


@FAST
@given(valid_logs())
def test_a_whole_log_round_trips_through_the_codec(log: tuple[SessionEvent, ...]) -> None:
    decoded = [decode_event(encode_event(event)) for event in log]
    assert decoded == list(log)
    assert [encode_event(e) for e in decoded] == [encode_event(e) for e in log]
    assert replay(decoded).derive_messages() == replay(log).derive_messages()


# ---------------------------------------------------------------------------- header


def _expressible(old: EpochHeader, new: EpochHeader) -> bool:
    """Can drop-removed / replace-in-place / append-added produce new's tool order?"""
    old_names = [t.name for t in canonical(old).tools or ()]
    new_names = [t.name for t in canonical(new).tools or ()]
    kept = [n for n in old_names if n in new_names]
    added = [n for n in new_names if n not in old_names]
    return new_names == kept + added


@settings(max_examples=300, deadline=None)
@given(header_transitions())
def test_apply_of_diff_reproduces_new_or_diff_falls_back(
    pair: tuple[EpochHeader, EpochHeader],
) -> None:
    old, new = pair
    delta = diff(old, new)
    assert (delta is not None) == _expressible(old, new)
    if delta is None:
        return
    assert headers_equal(apply_delta(old, delta), new)
    assert apply_delta(old, delta) == canonical(new)
    assert delta.is_empty == headers_equal(old, new)
    # Only changed fields are present.
    assert (delta.config is None) == (canonical_bytes(old.config) == canonical_bytes(new.config))
    assert (delta.system is None) == (canonical(old).system == canonical(new).system)
    # The delta survives the codec and still applies exactly.
    restored = structure_as(orjson.loads(canonical_bytes(delta)), HeaderDelta)
    assert restored == delta
    assert headers_equal(apply_delta(old, restored), new)


@settings(max_examples=150, deadline=None)
@given(header_transitions())
def test_message_prefix_branch_round_trips_including_to_absent(
    pair: tuple[EpochHeader, EpochHeader],
) -> None:
    old, new = pair
    delta = diff(old, new)
    if delta is None:
        return
    old_prefix, new_prefix = canonical(old).message_prefix, canonical(new).message_prefix
    if old_prefix == new_prefix:
        assert delta.message_prefix is None
    elif new_prefix is None:
        assert delta.message_prefix == ()  # the transition to absent: key present, empty
    else:
        assert delta.message_prefix == new_prefix
    raw = canonical_bytes(delta)
    assert (b'"message_prefix"' in raw) == (delta.message_prefix is not None)
    restored = structure_as(orjson.loads(raw), HeaderDelta)
    assert restored.message_prefix == delta.message_prefix
    assert apply_delta(old, restored).message_prefix == new_prefix


@settings(max_examples=100, deadline=None)
@given(st.lists(header_transitions(), min_size=1, max_size=4))
def test_the_fold_of_written_header_events_equals_the_last_header(
    transitions: list[tuple[EpochHeader, EpochHeader]],
) -> None:
    """Write headers as the loop does (snapshot first, then delta or fallback snapshot)
    and check the fold equals each header at every point."""
    headers = [transitions[0][0]] + [new for _, new in transitions]
    events: list[SessionEvent] = []
    current: EpochHeader | None = None
    for header in headers:
        if current is None:
            data: Any = RequestHeaderEvent(header, "initial")
        else:
            delta = diff(current, header)
            if delta is not None and delta.is_empty:
                continue
            data = delta if delta is not None else RequestHeaderEvent(header, "fallback")
        event_type = "request/header-delta" if isinstance(data, HeaderDelta) else "request/header"
        events.append(SessionEvent(event_type, len(events), 0, data))
        current = fold(events)
        assert headers_equal(current, header)
        assert current == canonical(header)
    decoded = [decode_event(encode_event(e)) for e in events]
    assert fold(decoded) == fold(events)


@FAST
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["append", "replace", "prune", "derive"]),
            st.integers(0, 10_000),
            st.integers(0, 10_000),
        ),
        max_size=40,
    )
)
def test_random_replaces_keep_positions_and_derivation_exact(
    steps: list[tuple[str, int, int]],
) -> None:
    """Appends, span replaces, single-node rewrites and derivations in any order: the
    position index matches the surface and the derivation matches a replay."""
    from strategies import LogBuilder

    b = LogBuilder()
    session = Session.create("s")
    session.append_event(b.turn_start())
    session.append_event(b.step_start())
    for index, (kind, x, y) in enumerate(steps):
        if kind == "append" or not b.nodes:
            if x % 2:
                call = b.tool_call(f"k{index}")
                session.append_event(call)
                session.append_event(b.tool_result(f"k{index}", f"r{index}", call.seq))
            else:
                session.append_event(b.user(f"u{index}"))
        elif kind == "replace":
            start = x % len(b.nodes)
            end = start + y % (len(b.nodes) - start)
            session.append_event(b.replace(start, end, f"s{index}"))
        elif kind == "prune" and b.tool_results:
            session.append_event(b.prune(b.tool_results[x % len(b.tool_results)], f"p{index}"))
        else:
            assert session.derive_messages() == replay(session.events).derive_messages()
        fold_ = session.surface_fold
        assert session.surface == tuple(b.nodes)
        assert all(fold_.position(seq) == i for i, seq in enumerate(b.nodes))
    assert session.derive_messages() == replay(session.events).derive_messages()
    assert session.history_chain() == replay(session.events).history_chain()
