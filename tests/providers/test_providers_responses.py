"""OpenAIResponsesProvider against a real local SSE server: bodies, streams, usage, errors."""

from __future__ import annotations

from typing import Any

import pytest
from provider_kit import PREFIX, TOOLS, Waits, WireCapture, assemble, fixture_stream
from sse_server import DROP_BEFORE_RESPONSE, Reply, SseServer, json_reply, sse_event

from actorloop.runtime.errors import ProviderError
from actorloop.runtime.log.request import Request
from actorloop.runtime.model.chunks import (
    BlockEnd,
    BlockStart,
    ErrorInfo,
    Finish,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    TokenUsage,
    ToolCallDelta,
    UsageReport,
)
from actorloop.runtime.model.header import LlmCallConfig, ResponseFormat, ToolChoice
from actorloop.runtime.model.messages import Message, Reasoning, Text, ToolCall, ToolResult
from actorloop.runtime.providers.chat_body import prompt_cache_key
from actorloop.runtime.providers.responses import OpenAIResponsesProvider
from actorloop.runtime.providers.retry import RetryPolicy

KEY = "sk-test-responses-key-0004"
ENCRYPTED = "gAAAAABoReasoningEncrypted0123456789abcdef=="


def responses(server: SseServer, waits: Waits, **kwargs: Any) -> OpenAIResponsesProvider:
    return OpenAIResponsesProvider(
        server.url + "/v1", KEY, retry=RetryPolicy(sleep=waits), **kwargs
    )


def make_request(*history: Message, config: LlmCallConfig | None = None) -> Request:
    return Request(
        "session-r",
        config or LlmCallConfig("o4-mini", max_tokens=512),
        "You are terse.",
        TOOLS,
        PREFIX + history,
        prefix_length=len(PREFIX),
    )


async def collect(provider: OpenAIResponsesProvider, request: Request) -> list[StreamChunk]:
    return [chunk async for chunk in provider.stream(request)]


def events(*payloads: dict[str, Any]) -> Reply:
    return Reply(pieces=tuple(sse_event(payload, payload["type"]) for payload in payloads))


def completed(usage: dict[str, Any] | None = None, **response: Any) -> dict[str, Any]:
    return {
        "type": "response.completed",
        "response": {"status": "completed", "usage": usage, **response},
    }


async def test_text_stream_with_cached_usage_and_exact_request(
    server: SseServer, waits: Waits
) -> None:
    server.push(fixture_stream("responses_text_cached.sse"))
    chunks = await collect(responses(server, waits), make_request(Message.user("weather?")))
    assert chunks == [
        BlockStart(0, "text"),
        TextDelta(0, "It is sunny"),
        TextDelta(0, " in Paris."),
        BlockEnd(0),
        UsageReport(TokenUsage(input=252, output=7, cache_read=2048)),
        Finish("stop"),
    ]
    [seen] = server.requests
    assert seen.path == "/v1/responses"
    assert seen.headers["authorization"] == f"Bearer {KEY}"
    assert seen.json() == {
        "model": "o4-mini",
        "instructions": "You are terse.",
        "input": [
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "catalogue: skills A, B"}],
            },
            {"type": "message", "role": "assistant", "content": "noted"},
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "weather?"}],
            },
        ],
        "tools": [
            {
                "type": "function",
                "name": "lookup",
                "description": "Find a word",
                "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
                "strict": False,
            },
            {
                "type": "function",
                "name": "now",
                "parameters": {"type": "object", "properties": {}},
                "strict": False,
            },
        ],
        "max_output_tokens": 512,
        "stream": True,
        "store": False,
        "include": ["reasoning.encrypted_content"],
    }
    # A local server is not OpenAI's endpoint: no prompt_cache_key unless asked for.
    assert "prompt_cache_key" not in seen.json()


async def test_reasoning_and_function_call_then_replay_from_the_log(
    server: SseServer, waits: Waits
) -> None:
    server.push(fixture_stream("responses_reasoning_tool_call.sse"), fixture_stream(
        "responses_text_cached.sse"
    ))  # fmt: skip
    provider = responses(server, waits)
    chunks = await collect(provider, make_request(Message.user("weather in Paris?")))
    assert chunks == [
        BlockStart(0, "reasoning"),
        ReasoningDelta(0, "**Checking weather**"),
        ReasoningDelta(0, "I will call the tool.", part=1),
        ReasoningDelta(0, "", encrypted_content=ENCRYPTED, item_id="rs_01"),
        BlockEnd(0),
        BlockStart(1, "tool_call", call_id="call_Xy12", name="get_weather"),
        ToolCallDelta(1, '{"city":'),
        ToolCallDelta(1, '"Paris"}'),
        BlockEnd(1),
        UsageReport(TokenUsage(input=230, output=88, cache_read=1920, reasoning=64)),
        Finish("tool-calls"),
    ]
    content = assemble(chunks).content()
    assert content == (
        Reasoning(
            "**Checking weather**\n\nI will call the tool.",
            encrypted_content=ENCRYPTED,
            item_id="rs_01",
            parts=("**Checking weather**", "I will call the tool."),
        ),
        ToolCall("call_Xy12", "get_weather", '{"city":"Paris"}'),
    )
    follow_up = make_request(
        Message.user("weather in Paris?"),
        Message("assistant", content),
        Message("user", (ToolResult("call_Xy12", (Text("sunny"),)),)),
    )
    await collect(provider, follow_up)
    replayed = server.requests[1].json()["input"][3:]
    assert replayed == [
        {
            "type": "reasoning",
            "id": "rs_01",
            # The summary's parts go back as they came, not joined into one.
            "summary": [
                {"type": "summary_text", "text": "**Checking weather**"},
                {"type": "summary_text", "text": "I will call the tool."},
            ],
            "encrypted_content": ENCRYPTED,
        },
        {
            "type": "function_call",
            "call_id": "call_Xy12",
            "name": "get_weather",
            "arguments": '{"city":"Paris"}',
        },
        {"type": "function_call_output", "call_id": "call_Xy12", "output": "sunny"},
    ]


async def test_reasoning_that_cannot_be_replayed_is_not_sent(
    server: SseServer, waits: Waits
) -> None:
    """Another provider's reasoning, or a Responses item without its encrypted content when
    nothing is stored, has no meaning to the API."""
    server.push(fixture_stream("responses_text_cached.sse"))
    history = (
        Message.user("q"),
        Message(
            "assistant",
            (
                Reasoning("anthropic thought", signature="sig"),
                Reasoning("no content", item_id="rs_9"),
                Text("a"),
                Text("b"),
            ),
        ),
    )
    await collect(responses(server, waits), make_request(*history))
    assert server.requests[0].json()["input"][3:] == [
        {"type": "message", "role": "assistant", "content": "ab"}
    ]


async def test_request_options_reach_the_body() -> None:
    capture = WireCapture(fixture_stream("responses_text_cached.sse"))
    schema = {"type": "object", "properties": {"reasoning": {}, "answer": {}}}
    config = LlmCallConfig(
        "gpt-5",
        temperature=0.3,
        tool_choice=ToolChoice.tool("lookup"),
        parallel_tool_calls=False,
        strict_tools=True,
        response_format=ResponseFormat.json_schema(schema, name="verdict", strict=True),
        reasoning_effort="low",
        user="user-hash-1",
        metadata={"team": "core"},
        extra_body={"reasoning": {"effort": "low", "summary": "auto"}, "service_tier": "flex"},
        extra_headers={"OpenAI-Beta": "responses=v1"},
    )
    provider = OpenAIResponsesProvider(
        "http://r.test/v1", KEY, prompt_cache_key=True, transport=capture.transport
    )
    await collect(provider, make_request(Message.user("hi"), config=config))
    [seen] = capture.requests
    assert seen.path == "/v1/responses"
    body = seen.json()
    assert body["tool_choice"] == {"type": "function", "name": "lookup"}
    assert body["parallel_tool_calls"] is False
    assert [tool["strict"] for tool in body["tools"]] == [True, True]
    assert body["text"] == {
        "format": {"type": "json_schema", "name": "verdict", "schema": schema, "strict": True}
    }
    assert list(body["text"]["format"]["schema"]["properties"]) == ["reasoning", "answer"]
    # extra_body wins over the field the adapter set (reasoning.effort alone).
    assert body["reasoning"] == {"effort": "low", "summary": "auto"}
    assert body["service_tier"] == "flex"
    assert body["safety_identifier"] == "user-hash-1"
    assert body["metadata"] == {"team": "core"}
    assert body["temperature"] == 0.3
    assert body["prompt_cache_key"] == prompt_cache_key("session-r")
    assert seen.headers["openai-beta"] == "responses=v1"


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        (LlmCallConfig("m", stop=("END",)), "no stop sequences"),
        (LlmCallConfig("m", tool_choice=ToolChoice.tool("missing")), "does not offer"),
        (LlmCallConfig("m", thinking_budget=2048), "reasoning_effort"),
    ],
)
async def test_requests_the_api_cannot_take_are_refused_before_sending(
    server: SseServer, waits: Waits, config: LlmCallConfig, problem: str
) -> None:
    with pytest.raises(ProviderError) as caught:
        await collect(responses(server, waits), make_request(Message.user("hi"), config=config))
    assert caught.value.code == "INVALID_REQUEST" and problem in str(caught.value)
    assert server.requests == []


async def test_refusal_ends_with_refused(server: SseServer, waits: Waits) -> None:
    server.push(
        events(
            {"type": "response.output_item.added", "output_index": 0, "item": {"type": "message"}},
            {
                "type": "response.refusal.delta",
                "output_index": 0,
                "content_index": 0,
                "delta": "I can't help with that.",
            },
            {"type": "response.output_item.done", "output_index": 0, "item": {"type": "message"}},
            completed({"input_tokens": 10, "output_tokens": 6}),
        )
    )
    chunks = await collect(responses(server, waits), make_request(Message.user("hi")))
    assert chunks == [
        BlockStart(0, "text"),
        TextDelta(0, "I can't help with that."),
        UsageReport(TokenUsage(input=10, output=6)),
        Finish(
            "error",
            ErrorInfo("openai-responses: the model refused: I can't help with that.", "REFUSED"),
        ),
    ]


async def test_whole_items_without_deltas_still_assemble(server: SseServer, waits: Waits) -> None:
    """Some compatible servers send only the finished items."""
    call = {"type": "function_call", "call_id": "c1", "name": "now", "arguments": ""}
    message = {"type": "message", "content": [{"type": "output_text", "text": "done"}]}
    server.push(
        events(
            {"type": "response.output_item.added", "output_index": 0, "item": message},
            {"type": "response.output_item.done", "output_index": 0, "item": message},
            {"type": "response.output_item.added", "output_index": 1, "item": call},
            {"type": "response.output_item.done", "output_index": 1, "item": call},
            completed(),
        )
    )
    chunks = await collect(responses(server, waits), make_request(Message.user("hi")))
    assert assemble(chunks).content() == (Text("done"), ToolCall("c1", "now", "{}"))
    assert chunks[-1] == Finish("tool-calls")


@pytest.mark.parametrize("kind", ["response.completed", "response.incomplete"])
async def test_items_only_inside_the_terminal_response_still_assemble(
    server: SseServer, waits: Waits, kind: str
) -> None:
    """A server that sends no item events puts the whole output in the terminal response."""
    output = [
        {"type": "reasoning", "id": "rs_9", "summary": [{"type": "summary_text", "text": "hm"}],
         "encrypted_content": ENCRYPTED},
        {"type": "message", "content": [{"type": "output_text", "text": "It is noon."}]},
        {"type": "function_call", "call_id": "c1", "name": "now", "arguments": '{"tz":"UTC"}'},
    ]  # fmt: skip
    terminal = {"type": kind, "response": {"output": output, "usage": {"input_tokens": 9}}}
    if kind == "response.incomplete":
        terminal["response"]["incomplete_details"] = {"reason": "max_output_tokens"}
    server.push(events({"type": "response.created", "response": {}}, terminal))
    chunks = await collect(responses(server, waits), make_request(Message.user("hi")))
    assert assemble(chunks).content() == (
        Reasoning("hm", encrypted_content=ENCRYPTED, item_id="rs_9"),
        Text("It is noon."),
        ToolCall("c1", "now", '{"tz":"UTC"}'),
    )
    assert chunks[-1] == Finish("tool-calls" if kind == "response.completed" else "max-tokens")


async def test_items_streamed_as_deltas_are_not_read_twice_from_the_terminal_response(
    server: SseServer, waits: Waits
) -> None:
    message = {"type": "message", "content": [{"type": "output_text", "text": "once"}]}
    server.push(
        events(
            {"type": "response.output_text.delta", "output_index": 0, "delta": "once"},
            completed(output=[message]),
        )
    )
    chunks = await collect(responses(server, waits), make_request(Message.user("hi")))
    assert assemble(chunks).content() == (Text("once"),)


@pytest.mark.parametrize(
    ("terminal", "finish"),
    [
        (
            {
                "type": "response.incomplete",
                "response": {"incomplete_details": {"reason": "max_output_tokens"}},
            },
            Finish("max-tokens"),
        ),
        (
            {
                "type": "response.incomplete",
                "response": {"incomplete_details": {"reason": "content_filter"}},
            },
            Finish(
                "error",
                ErrorInfo(
                    "openai-responses: the provider's content filter stopped the answer",
                    "CONTENT_FILTERED",
                ),
            ),
        ),
        (
            {
                "type": "response.failed",
                "response": {
                    "error": {"code": "rate_limit_exceeded", "message": "Slow down, key sk-x"}
                },
            },
            Finish("error", ErrorInfo("openai-responses: Slow down, key sk-x", "RATE_LIMITED")),
        ),
        (
            {"type": "error", "code": "context_length_exceeded", "message": "Too long"},
            Finish("error", ErrorInfo("openai-responses: Too long", "CONTEXT_WINDOW_EXCEEDED")),
        ),
    ],
)
async def test_terminal_events(
    server: SseServer, waits: Waits, terminal: dict[str, Any], finish: Finish
) -> None:
    server.push(events({"type": "response.created", "response": {}}, terminal))
    chunks = await collect(responses(server, waits), make_request(Message.user("hi")))
    assert chunks[-1] == finish


async def test_a_stream_cut_before_completion_is_interrupted(
    server: SseServer, waits: Waits
) -> None:
    cut = fixture_stream("responses_text_cached.sse")
    server.push(Reply(pieces=cut.pieces[:-1]))
    with pytest.raises(ProviderError) as caught:
        await collect(responses(server, waits), make_request(Message.user("hi")))
    assert caught.value.code == "STREAM_INTERRUPTED"


async def test_failures_before_the_first_byte_are_retried(server: SseServer, waits: Waits) -> None:
    server.push(
        DROP_BEFORE_RESPONSE,
        json_reply(429, {"error": {"message": "slow"}}, [("retry-after-ms", "1500")]),
        fixture_stream("responses_text_cached.sse"),
    )
    chunks = await collect(responses(server, waits), make_request(Message.user("hi")))
    assert chunks[-1] == Finish("stop")
    assert len(server.requests) == 3 and waits.calls[1] == 1.5


async def test_context_overflow_status_is_typed(server: SseServer, waits: Waits) -> None:
    server.push(
        json_reply(
            400,
            {"error": {"message": "Your input exceeds the context window of this model."}},
        )
    )
    with pytest.raises(ProviderError) as caught:
        await collect(responses(server, waits), make_request(Message.user("hi")))
    assert caught.value.code == "CONTEXT_WINDOW_EXCEEDED" and not caught.value.retryable


async def test_store_true_replays_reasoning_by_id(server: SseServer, waits: Waits) -> None:
    server.push(fixture_stream("responses_text_cached.sse"))
    history = (Message.user("q"), Message("assistant", (Reasoning("", item_id="rs_7"),)))
    await collect(responses(server, waits, store=True), make_request(*history))
    body = server.requests[0].json()
    assert body["store"] is True and "include" not in body
    assert body["input"][-1] == {"type": "reasoning", "id": "rs_7", "summary": []}
