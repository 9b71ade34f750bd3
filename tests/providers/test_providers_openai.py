"""OpenAIChatProvider and DeepSeekProvider against a real local SSE server."""

from __future__ import annotations

import hashlib
from typing import Any

import httpx
import pytest
import trio
from provider_kit import PREFIX, TOOLS, Waits, WireCapture, assemble, fixture_stream
from sse_server import DROP_BEFORE_RESPONSE, Reply, SseServer, json_reply, openai_stream

from actorloop.codecs.converter import ordered_fragment
from actorloop.codecs.jsonvalue import canonical_json
from actorloop.runtime.errors import ProviderError
from actorloop.runtime.log.request import Request
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
from actorloop.runtime.model.header import LlmCallConfig, ResponseFormat, ToolChoice
from actorloop.runtime.model.messages import Message, Reasoning, Text, ToolCall, ToolResult
from actorloop.runtime.providers.openai import (
    DeepSeekProvider,
    OpenAIChatProvider,
    usage_from_openai,
)
from actorloop.runtime.providers.retry import RetryPolicy

KEY = "sk-test-openai-key-0001"


def openai(server: SseServer, waits: Waits, **kwargs: Any) -> OpenAIChatProvider:
    return OpenAIChatProvider(server.url + "/v1", KEY, retry=RetryPolicy(sleep=waits), **kwargs)


def make_request(*history: Message, session: str = "session-1") -> Request:
    config = LlmCallConfig("gpt-test", temperature=0.2, max_tokens=256, stop=("END",))
    return Request(
        session, config, "You are terse.", TOOLS, PREFIX + history, prefix_length=len(PREFIX)
    )


async def collect(provider: OpenAIChatProvider, request: Request) -> list[StreamChunk]:
    return [chunk async for chunk in provider.stream(request)]


def delta(**fields: Any) -> dict[str, Any]:
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": fields}]}


def finish(reason: str) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]}


def usage(**fields: Any) -> dict[str, Any]:
    return {"choices": [], "usage": fields}


HELLO = openai_stream(
    delta(role="assistant", content="Hel"),
    delta(content="lo"),
    finish("stop"),
    usage(prompt_tokens=50, completion_tokens=2, prompt_tokens_details={"cached_tokens": 0}),
)
HELLO_CHUNKS = [
    BlockStart(0, "text"),
    TextDelta(0, "Hel"),
    TextDelta(0, "lo"),
    BlockEnd(0),
    UsageReport(TokenUsage(input=50, output=2)),
    Finish("stop"),
]
EXPECTED_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Find a word",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    },
    {
        "type": "function",
        "function": {"name": "now", "parameters": {"type": "object", "properties": {}}},
    },
]


async def test_text_stream_and_exact_request(server: SseServer, waits: Waits) -> None:
    server.push(HELLO)
    provider = openai(server, waits, prompt_cache_key=True)
    chunks = await collect(provider, make_request(Message.user("hi")))
    assert chunks == HELLO_CHUNKS
    [seen] = server.requests
    assert seen.path == "/v1/chat/completions"
    assert seen.headers["authorization"] == f"Bearer {KEY}"
    assert seen.headers["content-type"] == "application/json"
    expected = {
        "model": "gpt-test",
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "catalogue: skills A, B"},
            {"role": "assistant", "content": "noted"},
            {"role": "user", "content": "hi"},
        ],
        "tools": EXPECTED_TOOLS,
        "temperature": 0.2,
        "max_completion_tokens": 256,
        "stop": ["END"],
        "stream": True,
        "stream_options": {"include_usage": True},
        "prompt_cache_key": "actorloop-" + hashlib.sha256(b"session-1").hexdigest()[:32],
    }
    assert seen.json() == expected
    # Canonical bytes, except that tool schemas keep the order written (decision 0007).
    for tool in expected["tools"]:
        tool["function"]["parameters"] = ordered_fragment(tool["function"]["parameters"])
    assert seen.body == canonical_json(expected)
    assert b"session-1" not in seen.body
    assert waits.calls == []


async def test_tool_calls_with_split_arguments_and_cached_usage(
    server: SseServer, waits: Waits
) -> None:
    server.push(
        openai_stream(
            delta(
                role="assistant",
                content=None,
                tool_calls=[
                    {
                        "index": 0,
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": ""},
                    }
                ],
            ),
            delta(tool_calls=[{"index": 0, "function": {"arguments": '{"q":'}}]),
            delta(tool_calls=[{"index": 0, "function": {"arguments": '"y"}'}}]),
            delta(
                tool_calls=[
                    {
                        "index": 1,
                        "id": "call_b",
                        "type": "function",
                        "function": {"name": "now", "arguments": ""},
                    }
                ]
            ),
            finish("tool_calls"),
            usage(
                prompt_tokens=2000,
                completion_tokens=30,
                prompt_tokens_details={"cached_tokens": 1920},
                completion_tokens_details={"reasoning_tokens": 0},
            ),
        ).rechunked(7)
    )
    history = (
        Message.user("look up x"),
        Message("assistant", (Text("checking"), ToolCall("call_1", "lookup", '{"q":"x"}'))),
        Message("user", (ToolResult("call_1", (Text("found"),)), Text("also consider y"))),
    )
    chunks = await collect(openai(server, waits), make_request(*history))
    assert chunks == [
        BlockStart(0, "tool_call", call_id="call_a", name="lookup"),
        ToolCallDelta(0, '{"q":'),
        ToolCallDelta(0, '"y"}'),
        BlockStart(1, "tool_call", call_id="call_b", name="now"),
        BlockEnd(0),
        ToolCallDelta(1, "{}"),
        BlockEnd(1),
        UsageReport(TokenUsage(input=80, output=30, cache_read=1920)),
        Finish("tool-calls"),
    ]
    assembler = ChunkAssembler()
    for chunk in chunks:
        assembler.feed(chunk)
    assert assembler.content() == (
        ToolCall("call_a", "lookup", '{"q":"y"}'),
        ToolCall("call_b", "now", "{}"),
    )
    assert server.requests[0].json()["messages"][3:] == [
        {"role": "user", "content": "look up x"},
        {
            "role": "assistant",
            "content": "checking",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"q":"x"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "found"},
        {"role": "user", "content": "also consider y"},
    ]


async def test_deepseek_reasoning_and_cache_usage(server: SseServer, waits: Waits) -> None:
    server.push(
        openai_stream(
            delta(role="assistant", reasoning_content="Let me "),
            delta(reasoning_content="think."),
            delta(content="Answer"),
            finish("stop"),
            usage(
                prompt_tokens=100,
                completion_tokens=20,
                prompt_cache_hit_tokens=64,
                prompt_cache_miss_tokens=36,
                completion_tokens_details={"reasoning_tokens": 12},
            ),
        )
    )
    provider = DeepSeekProvider(server.url, KEY, retry=RetryPolicy(sleep=waits))
    history = (
        Message.user("q"),
        Message("assistant", (Reasoning("prior thought"), ToolCall("c1", "now", ""))),
        Message("user", (ToolResult("c1", (Text("noon"),)),)),
    )
    chunks = await collect(provider, make_request(*history))
    assert chunks == [
        BlockStart(0, "reasoning"),
        ReasoningDelta(0, "Let me "),
        ReasoningDelta(0, "think."),
        BlockEnd(0),
        BlockStart(1, "text"),
        TextDelta(1, "Answer"),
        BlockEnd(1),
        UsageReport(TokenUsage(input=36, output=20, cache_read=64, reasoning=12)),
        Finish("stop"),
    ]
    [seen] = server.requests
    assert seen.path == "/chat/completions"
    body = seen.json()
    assert "prompt_cache_key" not in body
    assert body["max_tokens"] == 256 and "max_completion_tokens" not in body
    assert body["messages"][4] == {
        "role": "assistant",
        "content": None,
        "reasoning_content": "prior thought",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "now", "arguments": "{}"}}
        ],
    }
    assert body["messages"][5] == {"role": "tool", "tool_call_id": "c1", "content": "noon"}


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("length", Finish("max-tokens")),
        (
            "content_filter",
            Finish(
                "error",
                ErrorInfo(
                    "openai: the provider's content filter stopped the answer", "CONTENT_FILTERED"
                ),
            ),
        ),
        (
            "insufficient_system_resource",
            Finish(
                "error",
                ErrorInfo(
                    "openai: generation ended early (finish_reason 'insufficient_system_resource')",
                    "OVERLOADED",
                ),
            ),
        ),
    ],
)
async def test_finish_reasons(
    server: SseServer, waits: Waits, reason: str, expected: Finish
) -> None:
    server.push(openai_stream(delta(content="cut"), finish(reason)))
    chunks = await collect(openai(server, waits), make_request(Message.user("hi")))
    assert chunks == [BlockStart(0, "text"), TextDelta(0, "cut"), BlockEnd(0), expected]


async def test_error_event_mid_stream_ends_with_error_finish(
    server: SseServer, waits: Waits
) -> None:
    server.push(
        openai_stream(
            delta(content="par"),
            {"error": {"message": "The server had an error", "type": "server_error"}},
            done=False,
        )
    )
    chunks = await collect(openai(server, waits), make_request(Message.user("hi")))
    assert chunks == [
        BlockStart(0, "text"),
        TextDelta(0, "par"),
        Finish("error", ErrorInfo("openai: The server had an error", "PROVIDER_ERROR")),
    ]
    assert len(server.requests) == 1


async def test_context_window_exceeded_is_typed_and_not_retried(
    server: SseServer, waits: Waits
) -> None:
    server.push(
        json_reply(
            400,
            {
                "error": {
                    "message": "This model's maximum context length is 128000 tokens.",
                    "type": "invalid_request_error",
                    "code": "context_length_exceeded",
                }
            },
        )
    )
    with pytest.raises(ProviderError) as caught:
        await collect(openai(server, waits), make_request(Message.user("hi")))
    assert caught.value.code == "CONTEXT_WINDOW_EXCEEDED"
    assert not caught.value.retryable
    assert "maximum context length" in str(caught.value)
    assert len(server.requests) == 1 and waits.calls == []


async def test_authentication_error_is_not_retried(server: SseServer, waits: Waits) -> None:
    server.push(json_reply(401, {"error": {"message": "bad key", "type": "invalid_api_key"}}))
    with pytest.raises(ProviderError) as caught:
        await collect(openai(server, waits), make_request(Message.user("hi")))
    assert caught.value.code == "AUTHENTICATION"
    assert len(server.requests) == 1


async def test_429_honours_retry_after_then_succeeds(server: SseServer, waits: Waits) -> None:
    server.push(json_reply(429, {"error": {"message": "slow down"}}, [("retry-after", "3")]), HELLO)
    chunks = await collect(openai(server, waits), make_request(Message.user("hi")))
    assert chunks == HELLO_CHUNKS
    assert waits.calls == [3.0]
    assert len(server.requests) == 2
    assert server.requests[0].body == server.requests[1].body


async def test_retry_after_beyond_the_bound_surfaces_rate_limited(
    server: SseServer, waits: Waits
) -> None:
    server.push(json_reply(429, {"error": {"message": "quota"}}, [("retry-after", "3600")]))
    with pytest.raises(ProviderError) as caught:
        await collect(openai(server, waits), make_request(Message.user("hi")))
    assert caught.value.code == "RATE_LIMITED"
    assert len(server.requests) == 1 and waits.calls == []


async def test_500_then_success_with_jittered_backoff(server: SseServer, waits: Waits) -> None:
    server.push(json_reply(500, {"error": {"message": "oops"}}), HELLO)
    chunks = await collect(openai(server, waits), make_request(Message.user("hi")))
    assert chunks == HELLO_CHUNKS
    assert len(server.requests) == 2
    [wait] = waits.calls
    assert 0.1 <= wait <= 0.5  # full jitter, floored at RetryPolicy.min_delay


async def test_retries_are_bounded(server: SseServer, waits: Waits) -> None:
    server.push(*[json_reply(503, {"error": {"message": "down"}})] * 3)
    with pytest.raises(ProviderError) as caught:
        await collect(openai(server, waits, max_retries=2), make_request(Message.user("hi")))
    assert caught.value.code == "PROVIDER_ERROR"
    assert "HTTP 503" in str(caught.value)
    assert len(server.requests) == 3 and len(waits.calls) == 2


@pytest.mark.parametrize(
    "failure",
    [
        DROP_BEFORE_RESPONSE,
        Reply(drop_after=0),
        Reply(stall=1.0, pieces=(b"data: late\n\n",)),
    ],
    ids=["no-response", "headers-then-close", "read-timeout"],
)
async def test_failure_before_first_byte_is_retried(
    server: SseServer, waits: Waits, failure: Reply
) -> None:
    server.push(failure, HELLO)
    provider = openai(server, waits, timeout=httpx.Timeout(5.0, read=0.3))
    chunks = await collect(provider, make_request(Message.user("hi")))
    assert chunks == HELLO_CHUNKS
    assert len(server.requests) == 2 and len(waits.calls) == 1


async def test_drop_after_first_byte_is_interrupted_not_retried(
    server: SseServer, waits: Waits
) -> None:
    cut = Reply(pieces=HELLO.pieces, drop_after=1)
    server.push(cut, HELLO)
    seen: list[StreamChunk] = []
    with pytest.raises(ProviderError) as caught:
        async for chunk in openai(server, waits).stream(make_request(Message.user("hi"))):
            seen.append(chunk)
    assert caught.value.code == "STREAM_INTERRUPTED"
    assert not caught.value.retryable
    assert seen == [BlockStart(0, "text"), TextDelta(0, "Hel")]
    assert len(server.requests) == 1 and waits.calls == []


async def test_clean_end_without_finish_is_interrupted(server: SseServer, waits: Waits) -> None:
    server.push(openai_stream(delta(content="Hel"), done=False))
    with pytest.raises(ProviderError) as caught:
        await collect(openai(server, waits), make_request(Message.user("hi")))
    assert caught.value.code == "STREAM_INTERRUPTED"
    assert len(server.requests) == 1


async def test_request_bytes_extend_across_steps(server: SseServer, waits: Waits) -> None:
    server.push(HELLO, HELLO)
    provider = openai(server, waits)
    first_history = (Message.user("hi"),)
    await collect(provider, make_request(*first_history))
    await collect(
        provider, make_request(*first_history, Message.assistant("Hello"), Message.user("more"))
    )
    body1, body2 = (seen.body for seen in server.requests)
    tail = canonical_json({"role": "user", "content": "hi"})
    end = body1.index(tail) + len(tail)
    # Request 2 repeats request 1 byte for byte up to request 1's history tail.
    assert body2[:end] == body1[:end]
    assert body1[end : end + 1] == b"]" and body2[end : end + 1] == b","
    assert body2[end:].startswith(b',{"content":"Hello","role":"assistant"}')


async def test_json_instead_of_a_stream_is_a_protocol_error(
    server: SseServer, waits: Waits
) -> None:
    server.push(json_reply(200, {"error": {"message": "streaming unsupported"}}))
    with pytest.raises(ProviderError) as caught:
        await collect(openai(server, waits), make_request(Message.user("hi")))
    assert caught.value.code == "PROTOCOL_ERROR"
    assert "streaming unsupported" in str(caught.value)
    assert len(server.requests) == 1 and waits.calls == []


async def test_cancel_before_the_first_byte_is_not_retried(server: SseServer, waits: Waits) -> None:
    server.push(Reply(stall=0.5, pieces=HELLO.pieces), HELLO)
    provider = openai(server, waits)
    await provider.open()  # the client is made before the deadline starts counting
    with trio.move_on_after(0.1) as scope:
        await collect(provider, make_request(Message.user("hi")))
    assert scope.cancelled_caught
    assert len(server.requests) == 1 and waits.calls == []
    # The provider stays usable after a cancelled call.
    server.requests.clear()
    server.push(HELLO)
    assert await collect(provider, make_request(Message.user("hi"))) == HELLO_CHUNKS


async def test_cancel_mid_stream_stops_cleanly(server: SseServer, waits: Waits) -> None:
    server.push(Reply(pieces=HELLO.pieces[:1], drop_after=None, stall=0.0))
    seen: list[StreamChunk] = []
    with trio.CancelScope() as scope:
        async for chunk in openai(server, waits).stream(make_request(Message.user("hi"))):
            seen.append(chunk)
            scope.cancel()
    assert seen == [BlockStart(0, "text")]
    assert len(server.requests) == 1


async def test_tool_call_deltas_without_index_are_told_apart_by_id(
    server: SseServer, waits: Waits
) -> None:
    """Some OpenAI-compatible servers omit `index`: a new id is a new call, and argument
    deltas without an id continue the latest call."""
    server.push(
        openai_stream(
            {
                "choices": [
                    {
                        "index": 0,
                        "delta": {
                            "tool_calls": [
                                {
                                    "id": "a",
                                    "type": "function",
                                    "function": {"name": "f", "arguments": '{"x"'},
                                }
                            ]
                        },
                    }
                ]
            },
            {
                "choices": [
                    {"index": 0, "delta": {"tool_calls": [{"function": {"arguments": ": 1}"}}]}}
                ]
            },
            {
                "choices": [
                    {
                        "index": 0,
                        "delta": {
                            "tool_calls": [
                                {
                                    "id": "b",
                                    "type": "function",
                                    "function": {"name": "g", "arguments": "{}"},
                                }
                            ]
                        },
                    }
                ]
            },
            finish("tool_calls"),
        )
    )
    chunks = await collect(openai(server, waits), make_request(Message.user("hi")))
    assembler = ChunkAssembler()
    for chunk in chunks:
        assembler.feed(chunk)
    assert assembler.content() == (ToolCall("a", "f", '{"x": 1}'), ToolCall("b", "g", "{}"))


@pytest.mark.parametrize(
    ("base_url", "setting", "sent"),
    [
        ("https://api.openai.com/v1", None, True),
        ("https://litellm.internal.example/v1", None, False),
        ("http://127.0.0.1:4000/v1", None, False),
        ("https://litellm.internal.example/v1", True, True),
        ("https://api.openai.com/v1", False, False),
    ],
)
def test_prompt_cache_key_is_sent_by_default_only_to_openai(
    base_url: str, setting: bool | None, sent: bool
) -> None:
    """D1: a gateway in front of another provider rejects the unknown field."""
    provider = OpenAIChatProvider(base_url, KEY, prompt_cache_key=setting)
    body = provider.build_body(make_request(Message.user("hi")))
    assert ("prompt_cache_key" in body) is sent


async def test_no_prompt_cache_key_to_a_compatible_server(server: SseServer, waits: Waits) -> None:
    server.push(HELLO)
    await collect(openai(server, waits), make_request(Message.user("hi")))
    assert "prompt_cache_key" not in server.requests[0].json()
    deepseek = DeepSeekProvider("https://api.deepseek.com", KEY)
    assert "prompt_cache_key" not in deepseek.build_body(make_request(Message.user("hi")))


async def test_gateway_cache_writes_are_not_counted_as_fresh_input(
    server: SseServer, waits: Waits
) -> None:
    """D2: the same Claude call is 176 input / 300 written on the OpenAI route as well."""
    server.push(fixture_stream("openai_chat_gateway_cache_write.sse"))
    chunks = await collect(openai(server, waits), make_request(Message.user("capital?")))
    assert UsageReport(TokenUsage(input=176, output=5, cache_write=300)) in chunks
    assert chunks[-1] == Finish("stop")


@pytest.mark.parametrize(
    ("usage_fields", "expected"),
    [
        (
            {
                "prompt_tokens": 2000,
                "completion_tokens": 9,
                "prompt_tokens_details": {"cached_tokens": 1024, "cache_write_tokens": 512},
            },
            TokenUsage(input=464, output=9, cache_read=1024, cache_write=512),
        ),
        (
            {
                "prompt_tokens": 1500,
                "completion_tokens": 3,
                "cache_read_input_tokens": 1200,
                "cache_creation_input_tokens": 100,
            },
            TokenUsage(input=200, output=3, cache_read=1200, cache_write=100),
        ),
        (
            {"prompt_tokens": 10, "completion_tokens": True, "prompt_tokens_details": None},
            TokenUsage(input=10),
        ),
    ],
)
def test_usage_buckets_stay_disjoint(usage_fields: dict[str, Any], expected: TokenUsage) -> None:
    assert usage_from_openai(usage_fields) == expected


async def test_a_refusal_is_an_error_that_keeps_its_text(server: SseServer, waits: Waits) -> None:
    """D3: the refusal used to vanish and the turn ended `completed` and empty."""
    server.push(fixture_stream("openai_chat_refusal.sse"))
    chunks = await collect(openai(server, waits), make_request(Message.user("do it")))
    refusal = "I'm sorry, but I can't help with that."
    assert assemble(chunks).content() == (Text(refusal),)
    assert chunks[-1] == Finish(
        "error", ErrorInfo(f"openai: the model refused: {refusal}", "REFUSED")
    )


async def test_request_options_and_extra_headers() -> None:
    capture = WireCapture(HELLO)
    schema = {"type": "object", "properties": {"reasoning": {}, "answer": {}}}
    config = LlmCallConfig(
        "gpt-test",
        tool_choice=ToolChoice.tool("lookup"),
        parallel_tool_calls=False,
        strict_tools=True,
        response_format=ResponseFormat.json_schema(schema, name="verdict", description="d"),
        reasoning_effort="minimal",
        user="u-1",
        metadata={"k": "v"},
        extra_body={"thinking": {"type": "enabled"}, "stream_options": {"include_usage": False}},
        extra_headers={"X-Gateway-Route": "blue"},
    )
    request = Request("s", config, None, TOOLS, (Message.user("hi"),))
    provider = OpenAIChatProvider(
        "http://gateway.test/v1", KEY, store=True, transport=capture.transport
    )
    await collect(provider, request)
    [seen] = capture.requests
    body = seen.json()
    assert seen.path == "/v1/chat/completions"
    assert body["tool_choice"] == {"type": "function", "function": {"name": "lookup"}}
    assert body["parallel_tool_calls"] is False
    assert [tool["function"]["strict"] for tool in body["tools"]] == [True, True]
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "verdict", "schema": schema, "description": "d"},
    }
    assert body["reasoning_effort"] == "minimal"
    # `user` is deprecated in the SDK for safety_identifier; metadata is kept only if stored.
    assert body["safety_identifier"] == "u-1" and "user" not in body
    assert body["metadata"] == {"k": "v"} and body["store"] is True
    assert body["thinking"] == {"type": "enabled"}
    assert body["stream_options"] == {"include_usage": False}  # extra_body wins
    assert seen.headers["x-gateway-route"] == "blue"


def test_tool_options_are_left_out_without_tools() -> None:
    config = LlmCallConfig("m", tool_choice="none", parallel_tool_calls=True)
    body = OpenAIChatProvider(api_key=KEY).build_body(Request("s", config, None, (), ()))
    assert "tool_choice" not in body and "parallel_tool_calls" not in body
    json_mode = LlmCallConfig("m", response_format=ResponseFormat("json_object"))
    body = OpenAIChatProvider(api_key=KEY).build_body(Request("s", json_mode, None, (), ()))
    assert body["response_format"] == {"type": "json_object"}


@pytest.mark.parametrize(
    ("choice", "problem"),
    [
        (ToolChoice.tool("missing"), "forces tool 'missing', which the request does not offer"),
        ("required", "tool_choice 'required' but the request has no tools"),
    ],
)
async def test_an_impossible_tool_choice_is_refused_before_sending(
    server: SseServer, waits: Waits, choice: Any, problem: str
) -> None:
    tools = TOOLS if isinstance(choice, ToolChoice) else ()
    request = Request("s", LlmCallConfig("m", tool_choice=choice), None, tools, ())
    with pytest.raises(ProviderError) as caught:
        await collect(openai(server, waits), request)
    assert caught.value.code == "INVALID_REQUEST" and problem in str(caught.value)
    assert server.requests == []


@pytest.mark.parametrize(
    ("headers", "wait"),
    [
        ([("retry-after-ms", "250")], 0.25),
        ([("llm_provider-retry-after", "4")], 4.0),
        ([("llm_provider-retry-after-ms", "1500")], 1.5),
        ([("retry-after", "2"), ("llm_provider-retry-after", "9")], 2.0),
        ([("retry-after", "soon"), ("llm_provider-retry-after", "5")], 5.0),
    ],
)
async def test_gateway_retry_hints_are_honoured(
    server: SseServer, waits: Waits, headers: list[tuple[str, str]], wait: float
) -> None:
    server.push(json_reply(429, {"error": {"message": "slow down"}}, headers), HELLO)
    chunks = await collect(openai(server, waits), make_request(Message.user("hi")))
    assert chunks == HELLO_CHUNKS
    assert waits.calls == [wait]


def test_deepseek_passes_back_only_reasoning_with_text() -> None:
    history = (
        Message.user("q"),
        Message("assistant", (Reasoning("", redacted="opaque"), Reasoning("kept"), Text("a"))),
    )
    body = DeepSeekProvider(api_key=KEY).build_body(make_request(*history))
    assert body["messages"][4] == {"role": "assistant", "content": "a", "reasoning_content": "kept"}
    only_opaque = (
        Message.user("q"),
        Message("assistant", (Reasoning("", redacted="x"), Text("a"))),
    )
    body = DeepSeekProvider(api_key=KEY).build_body(make_request(*only_opaque))
    assert "reasoning_content" not in body["messages"][4]
