"""Content vocabulary and stream chunks: messages/blocks helpers, token usage, the
ChunkAssembler that folds a provider stream into content, and the checks of what providers
(chunks) and tools (output) hand the loop."""

from __future__ import annotations

import attrs
import pytest

from actorloop.runtime.errors import ErrorCode, ToolOutputError
from actorloop.runtime.model.chunks import (
    BlockEnd,
    BlockStart,
    ChunkAssembler,
    ErrorInfo,
    Finish,
    ReasoningDelta,
    StreamProtocolError,
    TextDelta,
    TokenUsage,
    ToolCallDelta,
    UsageReport,
    check_chunk,
    check_tool_output,
)
from actorloop.runtime.model.messages import (
    USER,
    ContentError,
    Message,
    Reasoning,
    Source,
    Text,
    ToolCall,
    ToolResult,
    as_content,
    as_message_tuple,
)


def test_message_helpers() -> None:
    assert Message.user("hi") == Message("user", (Text("hi"),))
    assert Message.assistant("a").role == "assistant"
    assert Message.system("s").content == (Text("s"),)
    mixed = Message("assistant", (Text("a"), ToolCall("c", "n", "{}"), Text("b")))
    assert mixed.text == "ab"
    assert Source.of_plugin("p") == Source("plugin", "p")
    assert Source("user") == USER


def test_blocks_and_messages_are_frozen_and_hashable() -> None:
    message = Message("user", (Text("x"), ToolResult("c", (Text("r"),), True)))
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        message.content = ()  # type: ignore[misc]
    assert hash(message) == hash(Message("user", (Text("x"), ToolResult("c", (Text("r"),), True))))


def test_as_content_accepts_a_string_or_blocks() -> None:
    assert as_content("hi") == (Text("hi"),)
    blocks = [Text("a"), Reasoning("r")]
    content = as_content(blocks)
    assert content == (Text("a"), Reasoning("r")) and isinstance(content, tuple)
    blocks.append(Text("later"))
    assert len(content) == 2
    with pytest.raises(ContentError, match="content block 1 is str"):
        as_content([Text("a"), "b"])  # type: ignore[list-item]
    with pytest.raises(ContentError, match="must be a str or a tuple of blocks, got int"):
        as_content(3)  # type: ignore[arg-type]


def test_as_message_tuple_checks_listener_results() -> None:
    assert as_message_tuple([Message.user("a")], "prefix") == (Message.user("a"),)
    with pytest.raises(ContentError, match="prefix must return a tuple of Message, got str"):
        as_message_tuple("x", "prefix")
    with pytest.raises(ContentError, match="prefix item 0 is Text, not a Message"):
        as_message_tuple((Text("x"),), "prefix")


def test_token_usage_adds_bucket_by_bucket() -> None:
    total = TokenUsage(1, 2, 3, 4, 5) + TokenUsage(10, 20, 30, 40, 50)
    assert total == TokenUsage(11, 22, 33, 44, 55)
    assert total.prompt_total == 11 + 33 + 44


def test_assembler_folds_interleaved_blocks_in_index_order() -> None:
    assembler = ChunkAssembler()
    for chunk in (
        BlockStart(1, "text"),
        BlockStart(0, "reasoning"),
        TextDelta(1, "Hel"),
        ReasoningDelta(0, "think", None),
        TextDelta(1, "lo"),
        ReasoningDelta(0, "ing", "sig-1"),
        BlockStart(2, "tool_call", "call-1", "echo"),
        ToolCallDelta(2, '{"a":'),
        ToolCallDelta(2, "1}"),
        BlockEnd(1),
        BlockEnd(0),
        BlockEnd(2),
        UsageReport(TokenUsage(input=5)),
        UsageReport(TokenUsage(output=7)),
        Finish("tool-calls"),
    ):
        assembler.feed(chunk)
    assert assembler.content() == (
        Reasoning("thinking", "sig-1"),
        Text("Hello"),
        ToolCall("call-1", "echo", '{"a":1}'),
    )
    assert assembler.content(drop_tool_calls=True) == (
        Reasoning("thinking", "sig-1"),
        Text("Hello"),
    )
    assert assembler.usage == TokenUsage(input=5, output=7)
    assert assembler.finish == Finish("tool-calls")


def test_assembler_drops_empty_text_blocks() -> None:
    assembler = ChunkAssembler()
    assembler.feed(BlockStart(0, "text"))
    assembler.feed(BlockStart(1, "text"))
    assembler.feed(TextDelta(1, "x"))
    assert assembler.content() == (Text("x"),)
    assert ChunkAssembler().content() == ()
    assert ChunkAssembler().usage is None


def test_assembler_records_an_error_finish() -> None:
    assembler = ChunkAssembler()
    assembler.feed(Finish("error", ErrorInfo("boom", "OVERLOADED")))
    assert assembler.finish is not None and assembler.finish.error == ErrorInfo(
        "boom", "OVERLOADED"
    )


@pytest.mark.parametrize(
    ("chunks", "fragment"),
    [
        ([BlockStart(0, "text"), BlockStart(0, "text")], "block 0 started twice"),
        ([TextDelta(0, "x")], "TextDelta for block 0 that is not an open text block"),
        ([BlockStart(0, "text"), ToolCallDelta(0, "{")], "not an open tool_call block"),
        ([BlockStart(0, "reasoning"), TextDelta(0, "x")], "not an open text block"),
        ([BlockStart(0, "tool_call", None, "echo")], "lacks call_id or name"),
        ([BlockStart(0, "tool_call", "c", None)], "lacks call_id or name"),
    ],
)
def test_assembler_rejects_broken_streams(chunks: list[object], fragment: str) -> None:
    assembler = ChunkAssembler()
    with pytest.raises(StreamProtocolError, match=fragment):
        for chunk in chunks:
            assembler.feed(chunk)  # type: ignore[arg-type]


# ------------------------------------------------------------------------- seam checks

VALID_CHUNKS = [
    BlockStart(0, "text"),
    BlockStart(1, "tool_call", "c1", "echo"),
    TextDelta(0, "hé 😀"),
    ReasoningDelta(2, "think", "sig"),
    ToolCallDelta(1, '{"x": 1}'),
    BlockEnd(0),
    UsageReport(TokenUsage(1, 2, 3, 4, 5)),
    Finish("stop"),
    Finish("error", ErrorInfo("boom", "PROVIDER_ERROR")),
]


@pytest.mark.parametrize("chunk", VALID_CHUNKS, ids=lambda chunk: type(chunk).__name__)
def test_valid_chunks_pass_the_check_unchanged(chunk: object) -> None:
    assert check_chunk(chunk) is chunk


class TextDeltaSubclass(TextDelta):
    pass


@pytest.mark.parametrize(
    ("chunk", "fragment"),
    [
        (None, "provider yielded NoneType None, not a stream chunk"),
        ("text", "provider yielded str 'text', not a stream chunk"),
        ({"type": "text_delta"}, "provider yielded dict"),
        (Text("x"), "provider yielded Text"),
        (TextDelta(0, 5), "TextDelta.text must be a str, got int"),  # type: ignore[arg-type]
        (TextDelta(True, "x"), "TextDelta.index must be an int >= 0, got bool"),
        (TextDelta(-1, "x"), "TextDelta.index must be an int >= 0"),
        (TextDelta(0, "\ud800"), "TextDelta.text: lone surrogate U\\+D800"),
        (BlockStart(0, "image"), "BlockStart.kind must be one of text, reasoning, tool_call"),  # type: ignore[arg-type]
        (BlockStart(0, "tool_call", 7, "n"), "BlockStart.call_id must be a str or None"),  # type: ignore[arg-type]
        (ReasoningDelta(0, "t", b"sig"), "ReasoningDelta.signature must be a str or None"),  # type: ignore[arg-type]
        (ToolCallDelta(0, None), "ToolCallDelta.arguments must be a str"),  # type: ignore[arg-type]
        (BlockEnd("0"), "BlockEnd.index must be an int"),  # type: ignore[arg-type]
        (UsageReport({"input": 1}), "UsageReport.usage must be a TokenUsage"),  # type: ignore[arg-type]
        (UsageReport(TokenUsage(1.5)), "UsageReport.usage.input must be an int"),  # type: ignore[arg-type]
        (Finish("done"), "Finish.kind must be one of stop"),  # type: ignore[arg-type]
        (Finish("error", "boom"), "Finish.error must be an ErrorInfo or None"),  # type: ignore[arg-type]
        (Finish("error", ErrorInfo("m", 3)), "Finish.error.code must be a str or None"),  # type: ignore[arg-type]
        (TextDeltaSubclass(0, "x"), "a subclass of a stream chunk"),
    ],
)
def test_malformed_chunks_are_a_typed_protocol_error(chunk: object, fragment: str) -> None:
    with pytest.raises(StreamProtocolError, match=fragment):
        check_chunk(chunk)


def test_tool_output_is_normalized_to_text_blocks() -> None:
    assert check_tool_output("done") == (Text("done"),)
    assert check_tool_output([Text("a"), Text("b")]) == (Text("a"), Text("b"))
    assert check_tool_output(()) == ()


@pytest.mark.parametrize(
    ("output", "fragment"),
    [
        ((Text(5),), "block 0: Text.text is int, expected str"),  # type: ignore[arg-type]
        ((Text("a"), "b"), "block 1 is str, expected Text"),
        ((ToolCall("c", "n", "{}"),), "block 0 is ToolCall, expected Text"),
        (5, "tool returned int; expected a str or a tuple of Text"),
        (None, "tool returned NoneType"),
        (b"bytes", "tool returned bytes"),
        ("\ud800", "at output: lone surrogate"),
        ((Text("ok"), Text("\udfff")), r"at output\[1\]\.text: lone surrogate"),
    ],
)
def test_bad_tool_output_is_a_typed_error(output: object, fragment: str) -> None:
    with pytest.raises(ToolOutputError, match=fragment) as info:
        check_tool_output(output)
    assert info.value.code == ErrorCode.INVALID_TOOL_OUTPUT
