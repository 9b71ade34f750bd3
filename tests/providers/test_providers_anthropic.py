"""AnthropicProvider against a real local SSE server: bodies, breakpoints, streams, retries."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
from helpers import open_runtime
from provider_kit import PREFIX, TOOLS, Waits, WireCapture, assemble, fixture_stream
from sse_server import DROP_BEFORE_RESPONSE, Reply, SseServer, anthropic_stream, json_reply

from actorloop.codecs.converter import ordered_fragment
from actorloop.codecs.jsonvalue import canonical_json
from actorloop.runtime import AgentOptions
from actorloop.runtime.errors import CallConfigError, ProviderError
from actorloop.runtime.log.request import Request
from actorloop.runtime.log.verify import verify_log
from actorloop.runtime.model.chunks import (
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
from actorloop.runtime.model.header import LlmCallConfig, ResponseFormat, ToolChoice, ToolSchema
from actorloop.runtime.model.messages import Message, Reasoning, Text, ToolCall, ToolResult
from actorloop.runtime.providers.anthropic import AnthropicProvider
from actorloop.runtime.providers.retry import RetryPolicy

KEY = "sk-ant-test-key-0002"
EPHEMERAL = {"type": "ephemeral"}


def anthropic(server: SseServer, waits: Waits, **kwargs: Any) -> AnthropicProvider:
    return AnthropicProvider(server.url, KEY, retry=RetryPolicy(sleep=waits), **kwargs)


def make_request(
    *history: Message, prefix: tuple[Message, ...] = PREFIX, tools: tuple[ToolSchema, ...] = TOOLS
) -> Request:
    config = LlmCallConfig("claude-test", stop=("END",))
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
    # Canonical bytes, except that tool schemas keep the order written (decision 0007).
    for tool in expected["tools"]:
        tool["input_schema"] = ordered_fragment(tool["input_schema"])
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


PAUSED = anthropic_stream(
    message_start(input_tokens=5),
    block_start(0, {"type": "text", "text": ""}),
    block_delta(0, type="text_delta", text="Searching"),
    block_stop(0),
    message_delta("pause_turn", 3),
    MESSAGE_STOP,
)


TEXT_SEARCHING = {"type": "text", "text": "Searching"}


def uncached(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages without their (moving) cache breakpoints."""
    return [
        {**message, "content": [
            {k: v for k, v in block.items() if k != "cache_control"} for block in message["content"]
        ]}
        for message in messages
    ]  # fmt: skip


async def test_a_paused_turn_finishes_pause(server: SseServer, waits: Waits) -> None:
    server.push(PAUSED)
    chunks = await collect(anthropic(server, waits), make_request(Message.user("hi")))
    assert assemble(chunks).content() == (Text("Searching"),)
    assert chunks[-2:] == [UsageReport(TokenUsage(input=5, output=3)), Finish("pause")]


async def test_the_loop_continues_a_paused_turn_sending_the_paused_content_back(
    server: SseServer, waits: Waits
) -> None:
    server.push(PAUSED, HELLO)
    async with open_runtime(anthropic(server, waits)) as rt:
        agent = await rt.spawn(AgentOptions(model="claude-test"))
        result = await agent.send("hi")
        assert (result.reason, result.steps, result.text) == ("completed", 2, "Hello")
        first, second = (uncached(json.loads(seen.body)["messages"]) for seen in server.requests)
        # The paused answer goes back as-is, as the last (assistant) message: the model
        # resumes it.
        assert second == [*first, {"role": "assistant", "content": [TEXT_SEARCHING]}]
        assert verify_log(agent.session.meta, agent.session.events).requests_checked == 2


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


REDACTED_DATA = (
    "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpPkNRj2YfWXGmKDxH4"
    "mPnZ5sQ7vB5URj2pabbYcYgzjj4Nls"
)


async def test_redacted_thinking_is_kept_and_replayed_unchanged(
    server: SseServer, waits: Waits
) -> None:
    """D4: the API requires redacted_thinking blocks to be passed back as they came."""
    server.push(fixture_stream("anthropic_redacted_thinking.sse"), HELLO)
    provider = anthropic(server, waits)
    chunks = await collect(provider, make_request(Message.user("capital of France?")))
    content = assemble(chunks).content()
    assert content == (
        Reasoning(
            "The user wants the capital.",
            signature="EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds",
        ),
        Reasoning("", redacted=REDACTED_DATA),
        Text("Paris."),
    )
    assert chunks[-2:] == [
        UsageReport(TokenUsage(input=38, output=87, cache_write=1200)),
        Finish("stop"),
    ]
    await collect(
        provider,
        make_request(
            Message.user("capital of France?"), Message("assistant", content), Message.user("ok")
        ),
    )
    replayed = server.requests[1].json()["messages"][3]
    assert replayed == {
        "role": "assistant",
        "content": [
            {
                "type": "thinking",
                "thinking": "The user wants the capital.",
                "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds",
            },
            {"type": "redacted_thinking", "data": REDACTED_DATA},
            {"type": "text", "text": "Paris."},
        ],
    }


async def test_redacted_thinking_without_data_is_a_protocol_error(
    server: SseServer, waits: Waits
) -> None:
    server.push(
        anthropic_stream(
            message_start(input_tokens=5), block_start(0, {"type": "redacted_thinking"})
        )
    )
    with pytest.raises(ProviderError) as caught:
        await collect(anthropic(server, waits), make_request(Message.user("hi")))
    assert caught.value.code == "PROTOCOL_ERROR"


def thinking_request(**config: Any) -> Request:
    return Request("s", LlmCallConfig("claude-test", **config), None, TOOLS, (Message.user("q"),))


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        ({"thinking_budget": 500}, "below the minimum of 1024"),
        ({"thinking_budget": 2048, "max_tokens": 1024}, "must be below max_tokens 1024"),
        ({"thinking_budget": 2048, "temperature": 0.5}, "cannot be combined with thinking"),
    ],
)
def test_thinking_options_are_checked_when_the_config_is_made(
    config: dict[str, Any], problem: str
) -> None:
    """D5: these used to go out and fail at the API (or pass unchecked)."""
    with pytest.raises(CallConfigError, match=problem):
        LlmCallConfig("claude-test", **config)


@pytest.mark.parametrize(
    ("provider_budget", "config", "problem"),
    [
        (2048, {"max_tokens": 1024}, "thinking_budget 2048 must be below max_tokens 1024"),
        (2048, {"tool_choice": "required"}, "tool_choice 'required' cannot be combined"),
        (None, {"thinking_budget": 9000}, "thinking_budget 9000 must be below max_tokens 8192"),
    ],
)
async def test_thinking_conflicts_are_refused_before_sending(
    server: SseServer, waits: Waits, provider_budget: int | None, config: dict[str, Any],
    problem: str,
) -> None:  # fmt: skip
    provider = anthropic(server, waits, thinking_budget=provider_budget)
    with pytest.raises(ProviderError) as caught:
        await collect(provider, thinking_request(**config))
    assert caught.value.code == "INVALID_REQUEST" and problem in str(caught.value)
    assert server.requests == []


def test_a_provider_budget_below_the_minimum_is_refused() -> None:
    with pytest.raises(CallConfigError, match="below the minimum"):
        AnthropicProvider(api_key=KEY, thinking_budget=1000)


def test_the_config_budget_wins_over_the_provider_default() -> None:
    provider = AnthropicProvider(api_key=KEY, thinking_budget=1024)
    body = provider.build_body(thinking_request(thinking_budget=4096, max_tokens=8000))
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 4096}
    assert "temperature" not in body


async def test_cache_ttl_and_breakpoint_choice(server: SseServer, waits: Waits) -> None:
    server.push(HELLO, HELLO)
    provider = anthropic(server, waits)
    hour = LlmCallConfig("claude-test", cache_ttl="1h")
    await collect(provider, attrs.evolve(make_request(Message.user("hi")), config=hour))
    first = server.requests[0].json()
    assert breakpoints(first) == ["tool:now", "system", "message:1:0", "message:2:0"]
    assert first["tools"][-1]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    stable = LlmCallConfig("claude-test", cache_breakpoints=("tools", "prefix"))
    await collect(provider, attrs.evolve(make_request(Message.user("hi")), config=stable))
    assert breakpoints(server.requests[1].json()) == ["tool:now", "message:1:0"]


@pytest.mark.parametrize(
    ("config", "tool_choice"),
    [
        ({"tool_choice": "auto"}, {"type": "auto"}),
        ({"tool_choice": "required"}, {"type": "any"}),
        ({"tool_choice": "none", "parallel_tool_calls": False}, {"type": "none"}),
        (
            {"tool_choice": ToolChoice.tool("lookup"), "parallel_tool_calls": False},
            {"type": "tool", "name": "lookup", "disable_parallel_tool_use": True},
        ),
        ({"parallel_tool_calls": False}, {"type": "auto", "disable_parallel_tool_use": True}),
        ({"parallel_tool_calls": True}, None),
    ],
)
def test_tool_choice_and_parallel_calls(config: dict[str, Any], tool_choice: Any) -> None:
    body = AnthropicProvider(api_key=KEY).build_body(thinking_request(**config))
    assert body.get("tool_choice") == tool_choice


async def test_request_options_version_and_headers() -> None:
    capture = WireCapture(HELLO)
    schema = {"type": "object", "properties": {"reasoning": {}, "answer": {}}}
    config = LlmCallConfig(
        "claude-test",
        strict_tools=True,
        response_format=ResponseFormat.json_schema(schema),
        reasoning_effort="medium",
        user="u-1",
        extra_body={"service_tier": "standard_only"},
        extra_headers={"anthropic-beta": "fine-grained-tool-streaming-2025-05-14"},
    )
    provider = AnthropicProvider(
        "http://anthropic.test", KEY, api_version="2026-10-21", transport=capture.transport
    )
    await collect(provider, attrs.evolve(make_request(Message.user("hi")), config=config))
    [seen] = capture.requests
    assert seen.path == "/v1/messages"
    body = seen.json()
    assert seen.headers["anthropic-version"] == "2026-10-21"
    assert seen.headers["anthropic-beta"] == "fine-grained-tool-streaming-2025-05-14"
    assert [tool["strict"] for tool in body["tools"]] == [True, True]
    assert body["output_config"] == {
        "effort": "medium",
        "format": {"type": "json_schema", "schema": schema},
    }
    assert list(body["output_config"]["format"]["schema"]["properties"]) == [
        "reasoning",
        "answer",
    ]
    assert body["metadata"] == {"user_id": "u-1"}
    assert body["service_tier"] == "standard_only"


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        ({"metadata": {"team": "core"}}, "takes only user_id in metadata"),
        ({"response_format": ResponseFormat("json_object")}, "no json_object output mode"),
        ({"tool_choice": ToolChoice.tool("nope")}, "does not offer"),
        # anthropic 2.15's messages.create has no temperature parameter any more.
        ({"temperature": 0.5}, "takes no temperature"),
        ({"temperature": 1.0}, "takes no temperature"),
    ],
)
def test_options_the_messages_api_cannot_take_are_refused(
    config: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ProviderError) as caught:
        AnthropicProvider(api_key=KEY).build_body(thinking_request(**config))
    assert caught.value.code == "INVALID_REQUEST" and problem in str(caught.value)
