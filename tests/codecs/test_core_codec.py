"""The cattrs converter (docs/spec/session-log.md §9.5): canonical encoding of events, headers and
deltas; strict, typed decoding that names the seq; ignorable unknown types."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from strategies import HEADER, LogBuilder

from actorloop.codecs.converter import (
    canonical_bytes,
    decode_event,
    encode_event,
    event_from_dict,
    event_to_dict,
    structure_as,
    unstructure,
)
from actorloop.codecs.jsonvalue import FrozenDict, canonical_json
from actorloop.runtime.errors import SessionFormatError
from actorloop.runtime.log.session import Session
from actorloop.runtime.model.chunks import Finish, TextDelta, TokenUsage, UsageReport
from actorloop.runtime.model.events import (
    APPEND,
    AssistantChunk,
    AssistantMessage,
    ContextMessage,
    IgnorableData,
    Replace,
    SessionEvent,
    StepStart,
    ToolError,
    ToolResultEvent,
    UserMessage,
)
from actorloop.runtime.model.header import (
    EpochHeader,
    HeaderDelta,
    LlmCallConfig,
    SystemPatch,
    ToolSchema,
    ToolsDelta,
)
from actorloop.runtime.model.messages import USER, Message, Reasoning, Text, ToolCall, ToolResult


def encoded(event: SessionEvent) -> dict[str, Any]:
    return orjson.loads(encode_event(event))  # type: ignore[no-any-return]


def base(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": "user/message",
        "seq": 7,
        "time": 5,
        "data": {"content": [{"type": "text", "text": "hi"}], "source": {"kind": "user"}},
        "surface_op": {"op": "append"},
    }
    body.update(changes)
    return body


def decode_dict(body: Any) -> SessionEvent:
    return decode_event(orjson.dumps(body))


# ------------------------------------------------------------------------ encoding


def test_event_encoding_is_canonical_json() -> None:
    event = SessionEvent(
        "user/message",
        3,
        1000,
        UserMessage((Text("hi"), ToolCall("c", "n", "{}")), USER),
        (1, 2),
        APPEND,
    )
    assert encode_event(event) == (
        b'{"data":{"content":[{"text":"hi","type":"text"},'
        b'{"arguments":"{}","id":"c","name":"n","type":"tool_call"}],'
        b'"source":{"kind":"user"}},"seq":3,"source_event_seqs":[1,2],'
        b'"surface_op":{"op":"append"},"time":1000,"type":"user/message"}'
    )
    assert encode_event(event) == canonical_json(event_to_dict(event))


def test_defaults_and_absent_fields_are_omitted() -> None:
    event = SessionEvent("step/start", 0, 0, StepStart(1, 1))
    body = encoded(event)
    assert set(body) == {"type", "seq", "time", "data"}
    result = ToolResultEvent(1, 1, "c", (Text("x"),))
    assert orjson.loads(canonical_bytes(result)) == {
        "turn": 1,
        "step": 1,
        "call_id": "c",
        "content": [{"text": "x"}],
    }


def test_replace_and_tagged_unions_encode_with_their_tags() -> None:
    event = SessionEvent(
        "assistant/chunk", 4, 0, AssistantChunk(1, 1, UsageReport(TokenUsage(1, 2)))
    )
    assert encoded(event)["data"]["chunk"] == {"type": "usage", "usage": {"input": 1, "output": 2}}
    replace = SessionEvent("user/message", 9, 0, UserMessage((), USER), (1, 2), Replace(1, 2))
    assert encoded(replace)["surface_op"] == {"op": "replace", "start": 1, "end": 2}
    assert decode_event(encode_event(replace)) == replace


def test_header_encoding_omits_empty_fields() -> None:
    empty = EpochHeader(LlmCallConfig("m"), "", (), ())
    assert canonical_bytes(empty) == b'{"config":{"model":"m"}}'
    assert structure_as(unstructure(empty), EpochHeader) == EpochHeader(LlmCallConfig("m"))
    full = EpochHeader(
        LlmCallConfig("m", "p", 0.5, 10, ("x",)),
        "sys",
        (ToolSchema("t", "d", {"type": "object"}),),
        (Message.user("opener"),),
    )
    raw = canonical_bytes(full)
    assert structure_as(orjson.loads(raw), EpochHeader) == full
    assert canonical_bytes(structure_as(orjson.loads(raw), EpochHeader)) == raw


def test_delta_encoding_keeps_only_present_branches() -> None:
    assert canonical_bytes(HeaderDelta()) == b"{}"
    assert canonical_bytes(HeaderDelta(message_prefix=())) == b'{"message_prefix":[]}'
    assert canonical_bytes(HeaderDelta(tools=ToolsDelta())) == b'{"tools":{}}'
    assert structure_as({"tools": {}}, HeaderDelta) == HeaderDelta(tools=ToolsDelta())
    patch = HeaderDelta(system=SystemPatch(1, 0, ()))
    assert structure_as(orjson.loads(canonical_bytes(patch)), HeaderDelta) == patch


# --------------------------------------------------------------------- round trips


def every_event_type() -> list[SessionEvent]:
    b = LogBuilder(time=0)
    b.turn_start()
    b.user("hi")
    b.context("ctx", {"nested": {"list": [1, 2.5, None, True, "s"]}})
    b.steering("steer")
    b.step_start()
    b.header(HEADER)
    b.header_delta(HeaderDelta(config=LlmCallConfig("x"), message_prefix=()))
    chunk = b.chunk("x")
    b.add("assistant/chunk", AssistantChunk(1, 1, Finish("error")))
    b.add(
        "assistant/message",
        AssistantMessage(
            1,
            1,
            (Text("a"), Reasoning("r", "sig"), ToolCall("c1", "echo", '{"a":1}')),
            "prov",
            "model",
            TokenUsage(1, 2, 3, 4, 5),
            "ab" * 32,
        ),
        APPEND,
        (chunk.seq,),
    )
    call = b.tool_call("c1")
    b.add(
        "tool/result",
        ToolResultEvent(1, 1, "c1", (Text("out"),), True, ToolError("echo", "E")),
        APPEND,
        (call.seq,),
    )
    b.step_end()
    b.turn_end("aborted")
    return b.events


def test_every_event_type_round_trips_byte_identically() -> None:
    for event in every_event_type():
        raw = encode_event(event)
        decoded = decode_event(raw)
        assert decoded == event, event.type
        assert encode_event(decoded) == raw
        assert event_from_dict(event_to_dict(event)) == event


def test_a_decoded_log_loads_and_derives_the_same() -> None:
    events = every_event_type()
    decoded = [decode_event(encode_event(e)) for e in events]
    assert (
        Session.from_events("a", decoded).derive_messages()
        == Session.from_events("b", events).derive_messages()
    )


def test_decoded_values_are_frozen() -> None:
    event = decode_event(encode_event(every_event_type()[2]))
    assert isinstance(event.data, ContextMessage)
    assert isinstance(event.data.meta, FrozenDict)
    assert event.data.meta["nested"]["list"] == (1, 2.5, None, True, "s")
    assert isinstance(event.data.content, tuple)
    with pytest.raises(TypeError):
        event.data.meta["x"] = 1  # type: ignore[index]


def test_5000_deep_meta_appends_encodes_and_decodes() -> None:
    meta: Any = {"leaf": True}
    for i in range(5000):
        meta = {"k": [meta, i]}
    session = Session.create("deep")
    b = LogBuilder()
    session.append_event(b.turn_start())
    event = session.append(
        "context/message",
        {"content": [{"type": "text", "text": "c"}], "source": {"kind": "user"}, "meta": meta},
        surface_op=APPEND,
    )
    raw = encode_event(event)
    assert raw.count(b'"k"') == 5000
    decoded = decode_event(raw)
    assert encode_event(decoded) == raw
    reloaded = Session.from_events("again", (session.events[0], decoded))
    assert reloaded.derive_messages() == session.derive_messages()


# -------------------------------------------------------------------- decode errors


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (
            base(type="agent/thought"),
            "unknown event type 'agent/thought' \\(not marked ignorable\\)",
        ),
        (base(extra=1), "unknown envelope keys \\['extra'\\]"),
        (base(data={"content": [], "source": {"kind": "user"}, "x": 1}), "Extra fields"),
        (base(data={"content": []}), "missing key"),
        (base(time="5"), "expected int"),
        (base(time=True), "expected int"),
        (base(time=2**53), "outside"),
        (base(data={"content": "hi", "source": {"kind": "user"}}), "expected an array"),
        (base(data={"content": [{"type": "image"}], "source": {"kind": "user"}}), "'image'"),
        (base(data={"content": [], "source": {"kind": "robot"}}), "not in literal"),
        (base(surface_op={"op": "move"}), "'move'"),
        (base(surface_op={"op": "replace", "start": "1", "end": 2}), "expected int"),
        (base(source_event_seqs="12"), "expected an array"),
        (base(source_event_seqs=[1.5]), "expected int"),
        (base(ignorable="yes"), "ignorable must be a boolean"),
    ],
)
def test_decode_errors_are_typed_and_name_the_seq(body: dict[str, Any], fragment: str) -> None:
    with pytest.raises(SessionFormatError, match=fragment) as info:
        decode_dict(body)
    assert info.value.where == "event seq 7"
    assert str(info.value).startswith("event seq 7: ")


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        (b"{not json", "invalid JSON"),
        (b"[1, 2]", "expected an object, got list"),
        (b'{"type": "turn/start"}', "missing key"),
        (b'{"a": NaN}', "invalid JSON"),
        (b"\xff\xfe", "invalid JSON"),
    ],
)
def test_undecodable_bytes_raise_format_errors(raw: bytes, fragment: str) -> None:
    with pytest.raises(SessionFormatError, match=fragment):
        decode_event(raw, where="line 3")


def test_decode_error_uses_the_given_location() -> None:
    with pytest.raises(SessionFormatError) as info:
        decode_event(orjson.dumps(base(type="nope")), where="session s line 9")
    assert info.value.where == "session s line 9"


@pytest.mark.parametrize(
    ("value", "cls"),
    [
        ({"removed": "abc"}, ToolsDelta),
        ({"keep_start": 0, "keep_end": 0, "insert": "abc"}, SystemPatch),
        ({"model": "m", "temperature": -0.0}, LlmCallConfig),
        ({"model": "m", "temperature": "0.5"}, LlmCallConfig),
        ({"model": "m", "max_tokens": 1.0}, LlmCallConfig),
        ({"model": 5}, LlmCallConfig),
        ({"config": {"model": "m"}, "system": 3}, EpochHeader),
        ({"tool_call_id": "c", "content": "text"}, ToolResult),
    ],
)
def test_structure_never_coerces(value: Any, cls: type) -> None:
    with pytest.raises(SessionFormatError):
        structure_as(value, cls)


def test_ignorable_unknown_events_are_kept_verbatim() -> None:
    body = {
        "type": "x/telemetry",
        "seq": 4,
        "time": 1,
        "data": {"b": [1, {"c": 2}], "a": "s"},
        "ignorable": True,
    }
    event = decode_dict(body)
    assert event.ignorable and isinstance(event.data, IgnorableData)
    assert event.data.payload == {"a": "s", "b": (1, {"c": 2})}
    assert encode_event(event) == canonical_json(body)
    with pytest.raises(SessionFormatError, match="expected an object"):
        decode_dict({**body, "data": [1]})


def test_chunks_round_trip_through_the_tagged_union() -> None:
    for chunk in (TextDelta(0, "x"), Finish("stop"), UsageReport(TokenUsage(output=3))):
        event = SessionEvent("assistant/chunk", 0, 0, AssistantChunk(1, 1, chunk))
        assert decode_event(encode_event(event)) == event


def test_tool_result_block_inside_content() -> None:
    content = (ToolResult("c", (Text("r"),), True),)
    message = Message("user", content)
    raw = canonical_bytes(message)
    assert raw == (
        b'{"content":[{"content":[{"text":"r"}],"is_error":true,'
        b'"tool_call_id":"c","type":"tool_result"}],"role":"user"}'
    )
    assert structure_as(orjson.loads(raw), Message) == message
