"""AnthropicProvider against a real local SSE server: bodies, breakpoints, streams, retries."""

from __future__ import annotations

from typing import Any

import pytest
from provider_kit import PREFIX, TOOLS, Waits
from sse_server import DROP_BEFORE_RESPONSE, Reply, SseServer, anthropic_stream, json_reply

from actorloop.codecs.jsonvalue import canonical_json
from actorloop.runtime.chunks import (
    BlockEnd,
    BlockStart,
    ChunkAssembler,
    ErrorInfo,
    Finish,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    TokenUsage,
    ToolCallDelta,
    UsageReport,
)
from actorloop.runtime.errors import ProviderError
from actorloop.runtime.header import LlmCallConfig, ToolSchema
from actorloop.runtime.messages import Message, Reasoning, Text, ToolCall, ToolResult
from actorloop.runtime.providers.anthropic import AnthropicProvider
from actorloop.runtime.providers.retry import RetryPolicy
from actorloop.runtime.request import Request

KEY = "sk-ant-test-key-0002"
EPHEMERAL = {"type": "ephemeral"}


def anthropic(server: SseServer, waits: Waits, **kwargs: Any) -> AnthropicProvider:
    return AnthropicProvider(server.url, KEY, retry=RetryPolicy(sleep=waits), **kwargs)


def make_request(
    *history: Message, prefix: tuple[Message, ...] = PREFIX, tools: tuple[ToolSchema, ...] = TOOLS
) -> Request:
    config = LlmCallConfig("claude-test", temperature=0.5, stop=("END",))
    return Request(
        "session-1", config, "You are terse.", tools, prefix + history, prefix_length=len(prefix)
    )


async def collect(provider: AnthropicProvider, request: Request) -> list[StreamChunk]:
    return [chunk async for chunk in provider.stream(request)]


def message_start(**usage: int) -> dict[str, Any]:
    return {
        "type": "message_start",
        "message": {"id": "msg_1", "role": "assistant", "content": [], "usage": usage},
    }


def block_start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def block_delta(index: int, **delta: Any) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": delta}


def block_stop(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


def message_delta(stop_reason: str, output_tokens: int) -> dict[str, Any]:
    return {
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": None},
        "usage": {"output_tokens": output_tokens},
    }


MESSAGE_STOP = {"type": "message_stop"}
PING = {"type": "ping"}

HELLO = anthropic_stream(
    message_start(
        input_tokens=12, cache_creation_input_tokens=2048, cache_read_input_tokens=4096,
        output_tokens=1,
    ),
    block_start(0, {"type": "text", "text": ""}),
    PING,
    block_delta(0, type="text_delta", text="Hel"),
    block_delta(0, type="text_delta", text="lo"),
    block_stop(0),
    message_delta("end_turn", 15),
    MESSAGE_STOP,
)  # fmt: skip
HELLO_CHUNKS = [
    BlockStart(0, "text"),
    TextDelta(0, "Hel"),
    TextDelta(0, "lo"),
    BlockEnd(0),
    UsageReport(TokenUsage(input=12, output=15, cache_read=4096, cache_write=2048)),
    Finish("stop"),
]


def breakpoints(body: dict[str, Any]) -> list[str]:
    """Where the cache_control markers sit, in wire order."""
    found = [f"tool:{tool['name']}" for tool in body.get("tools", ()) if "cache_control" in tool]
    found += ["system" for block in body.get("system", ()) if "cache_control" in block]
    for position, message in enumerate(body["messages"]):
        for index, block in enumerate(message["content"]):
            if "cache_control" in block:
                found.append(f"message:{position}:{index}")
    return found


async def test_text_stream_usage_and_exact_request(server: SseServer, waits: Waits) -> None:
    server.push(HELLO)
    chunks = await collect(anthropic(server, waits), make_request(Message.user("hi")))
    assert chunks == HELLO_CHUNKS
    [seen] = server.requests
    assert seen.path == "/v1/messages"
    assert seen.headers["x-api-key"] == KEY
    assert seen.headers["anthropic-version"] == "2023-06-01"
    assert seen.headers["content-type"] == "application/json"
    expected = {
        "model": "claude-test",
        "max_tokens": 8192,
        "stream": True,
        "temperature": 0.5,
        "stop_sequences": ["END"],
        "tools": [
            {
                "name": "lookup",
                "description": "Find a word",
                "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
            },
            {
                "name": "now",
                "input_schema": {"type": "object", "properties": {}},
                "cache_control": EPHEMERAL,
            },
        ],
        "system": [{"type": "text", "text": "You are terse.", "cache_control": EPHEMERAL}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "catalogue: skills A, B"}]},
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "noted", "cache_control": EPHEMERAL}],
            },
            {
                "role": "user",
                "content": [{"type": "text", "text": "hi", "cache_control": EPHEMERAL}],
            },
        ],
    }
    assert seen.json() == expected
    assert seen.body == canonical_json(expected)


async def test_breakpoints_without_prefix_or_tools(server: SseServer, waits: Waits) -> None:
    server.push(HELLO, HELLO)
    provider = anthropic(server, waits)
    await collect(provider, make_request(Message.user("a"), prefix=(), tools=()))
    await collect(provider, make_request(prefix=PREFIX, tools=TOOLS))
    first, second = (seen.json() for seen in server.requests)
    assert breakpoints(first) == ["system", "message:0:0"]
    # With no history, the prefix end is the last breakpoint.
    assert breakpoints(second) == ["tool:now", "system", "message:1:0"]


async def test_thinking_and_tool_use_with_split_input(server: SseServer, waits: Waits) -> None:
    server.push(
        anthropic_stream(
            message_start(input_tokens=30, output_tokens=1),
            block_start(0, {"type": "thinking", "thinking": ""}),
            block_delta(0, type="thinking_delta", thinking="Need "),
            block_delta(0, type="thinking_delta", thinking="a lookup."),
            block_delta(0, type="signature_delta", signature="sig-abc"),
            block_stop(0),
            block_start(1, {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {}}),
            block_delta(1, type="input_json_delta", partial_json=""),
            block_delta(1, type="input_json_delta", partial_json='{"q": '),
            block_delta(1, type="input_json_delta", partial_json='"z"}'),
            block_stop(1),
            block_start(2, {"type": "tool_use", "id": "toolu_2", "name": "now", "input": {}}),
            block_stop(2),
            message_delta("tool_use", 40),
            MESSAGE_STOP,
        ).rechunked(11)
    )
    chunks = await collect(anthropic(server, waits), make_request(Message.user("find z")))
    assert chunks == [
        BlockStart(0, "reasoning"),
        ReasoningDelta(0, "Need "),
        ReasoningDelta(0, "a lookup."),
        ReasoningDelta(0, "", signature="sig-abc"),
        BlockEnd(0),
        BlockStart(1, "tool_call", call_id="toolu_1", name="lookup"),
        ToolCallDelta(1, '{"q": '),
        ToolCallDelta(1, '"z"}'),
        BlockEnd(1),
        BlockStart(2, "tool_call", call_id="toolu_2", name="now"),
        ToolCallDelta(2, "{}"),
        BlockEnd(2),
        UsageReport(TokenUsage(input=30, output=40)),
        Finish("tool-calls"),
    ]
    assembler = ChunkAssembler()
    for chunk in chunks:
        assembler.feed(chunk)
    assert assembler.content() == (
        Reasoning("Need a lookup.", "sig-abc"),
        ToolCall("toolu_1", "lookup", '{"q": "z"}'),
        ToolCall("toolu_2", "now", "{}"),
    )


async def test_history_blocks_map_to_anthropic_content(server: SseServer, waits: Waits) -> None:
    server.push(HELLO)
    history = (
        Message.user("find z"),
        Message(
            "assistant",
            (
                Reasoning("Need a lookup.", "sig-abc"),
                Reasoning("unsigned, from another provider"),
                ToolCall("toolu_1", "lookup", '{"q": "z"}'),
            ),
        ),
        Message("user", (Text("note"), ToolResult("toolu_1", (Text("none"),), is_error=True))),
    )
    prefix = (Message.system("house rules"),)
    await collect(anthropic(server, waits), make_request(*history, prefix=prefix))
    messages = server.requests[0].json()["messages"]
    assert messages == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "house rules", "cache_control": EPHEMERAL}],
        },
        {"role": "user", "content": [{"type": "text", "text": "find z"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Need a lookup.", "signature": "sig-abc"},
                {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": "z"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [{"type": "text", "text": "none"}],
                    "is_error": True,
                },
                {"type": "text", "text": "note", "cache_control": EPHEMERAL},
            ],
        },
    ]


async def test_at_most_four_breakpoints_and_never_on_thinking(
    server: SseServer, waits: Waits
) -> None:
    server.push(HELLO)
    history = (
        Message.user("go"),
        Message("assistant", (Text("ok"), Reasoning("private", "sig-1"))),
    )
    await collect(anthropic(server, waits), make_request(*history))
    body = server.requests[0].json()
    assert breakpoints(body) == ["tool:now", "system", "message:1:0", "message:3:0"]
    assert body["messages"][3]["content"][1] == {
        "type": "thinking",
        "thinking": "private",
        "signature": "sig-1",
    }


async def test_max_tokens_stop_reason(server: SseServer, waits: Waits) -> None:
    server.push(
        anthropic_stream(
            message_start(input_tokens=5, output_tokens=1),
            block_start(0, {"type": "text", "text": ""}),
            block_delta(0, type="text_delta", text="trunc"),
            block_stop(0),
            message_delta("max_tokens", 7),
            MESSAGE_STOP,
        )
    )
    chunks = await collect(anthropic(server, waits), make_request(Message.user("hi")))
    assert chunks[-2:] == [UsageReport(TokenUsage(input=5, output=7)), Finish("max-tokens")]


async def test_error_event_mid_stream(server: SseServer, waits: Waits) -> None:
    server.push(
        anthropic_stream(
            message_start(input_tokens=5, output_tokens=1),
            block_start(0, {"type": "text", "text": ""}),
            block_delta(0, type="text_delta", text="par"),
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        )
    )
    chunks = await collect(anthropic(server, waits), make_request(Message.user("hi")))
    assert chunks == [
        BlockStart(0, "text"),
        TextDelta(0, "par"),
        Finish("error", ErrorInfo("anthropic: Overloaded", "OVERLOADED")),
    ]
    assert len(server.requests) == 1


async def test_prompt_too_long_is_context_window_exceeded(server: SseServer, waits: Waits) -> None:
    server.push(
        json_reply(
            400,
            {
                "type": "error",
                "error": {
                    "type": "invalid_request_error",
                    "message": "prompt is too long: 208310 tokens > 200000 maximum",
                },
            },
        )
    )
    with pytest.raises(ProviderError) as caught:
        await collect(anthropic(server, waits), make_request(Message.user("hi")))
    assert caught.value.code == "CONTEXT_WINDOW_EXCEEDED"
    assert str(caught.value) == (
        "anthropic: HTTP 400: prompt is too long: 208310 tokens > 200000 maximum"
    )
    assert len(server.requests) == 1 and waits.calls == []


async def test_429_retry_after_then_success(server: SseServer, waits: Waits) -> None:
    limited = {"type": "error", "error": {"type": "rate_limit_error", "message": "slow"}}
    server.push(json_reply(429, limited, [("retry-after", "7")]), HELLO)
    chunks = await collect(anthropic(server, waits), make_request(Message.user("hi")))
    assert chunks == HELLO_CHUNKS
    assert waits.calls == [7.0]
    assert len(server.requests) == 2


@pytest.mark.parametrize("status", [500, 529])
async def test_server_error_then_success(server: SseServer, waits: Waits, status: int) -> None:
    server.push(json_reply(status, {"type": "error", "error": {"type": "api_error"}}), HELLO)
    chunks = await collect(anthropic(server, waits), make_request(Message.user("hi")))
    assert chunks == HELLO_CHUNKS
    assert len(server.requests) == 2 and len(waits.calls) == 1


async def test_overloaded_exhaustion_keeps_the_code(server: SseServer, waits: Waits) -> None:
    server.push(*[json_reply(529, {"type": "error"})] * 2)
    with pytest.raises(ProviderError) as caught:
        await collect(anthropic(server, waits, max_retries=1), make_request(Message.user("hi")))
    assert caught.value.code == "OVERLOADED"
    assert len(server.requests) == 2


async def test_drop_before_first_byte_then_success(server: SseServer, waits: Waits) -> None:
    server.push(DROP_BEFORE_RESPONSE, HELLO)
    chunks = await collect(anthropic(server, waits), make_request(Message.user("hi")))
    assert chunks == HELLO_CHUNKS
    assert len(server.requests) == 2 and len(waits.calls) == 1


async def test_drop_after_first_byte_is_interrupted(server: SseServer, waits: Waits) -> None:
    server.push(Reply(pieces=HELLO.pieces, drop_after=3), HELLO)
    seen: list[StreamChunk] = []
    with pytest.raises(ProviderError) as caught:
        async for chunk in anthropic(server, waits).stream(make_request(Message.user("hi"))):
            seen.append(chunk)
    assert caught.value.code == "STREAM_INTERRUPTED"
    assert seen == [BlockStart(0, "text")]
    assert len(server.requests) == 1 and waits.calls == []


async def test_request_bytes_extend_across_steps(server: SseServer, waits: Waits) -> None:
    server.push(HELLO, HELLO)
    provider = anthropic(server, waits)
    await collect(provider, make_request(Message.user("hi")))
    await collect(
        provider, make_request(Message.user("hi"), Message.assistant("Hello"), Message.user("more"))
    )
    body1, body2 = (seen.body for seen in server.requests)
    # Only request 1's tail block differs (it carried the moving breakpoint); every byte
    # before it — prefix, its breakpoint, earlier history — is shared.
    tail = canonical_json({"cache_control": EPHEMERAL, "text": "hi", "type": "text"})
    start = body1.index(tail)
    assert body2[:start] == body1[:start]
    assert body2[start:].startswith(canonical_json({"text": "hi", "type": "text"}))
    assert body1[:start].count(b"cache_control") == 1  # the prefix breakpoint


async def test_tool_use_without_id_is_a_protocol_error(server: SseServer, waits: Waits) -> None:
    server.push(
        anthropic_stream(
            message_start(input_tokens=5),
            block_start(0, {"type": "tool_use", "name": "lookup", "input": {}}),
        )
    )
    with pytest.raises(ProviderError) as caught:
        await collect(anthropic(server, waits), make_request(Message.user("hi")))
    assert caught.value.code == "PROTOCOL_ERROR"
