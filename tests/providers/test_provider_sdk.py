"""Our wire bodies and stream readings against the official SDKs (`openai`, `anthropic`).

Bodies: the same conversation is built once as our `Request` (sent through an httpx
MockTransport given as our adapter's `transport=`) and once through the SDK's own typed
request methods, whose request goes to a MockTransport that only captures its body. The two
must agree field by field, and a tool or response schema must keep its key order in both.

Streams: each fixture of tests/fixtures/providers is read by our adapter over the real
server and by the SDK's own stream accumulator (fed the same bytes through the transport);
the assembled answers must agree. The SDK wheels ship no stream fixtures of their own, so
these fixtures are ours, written after the documented event formats.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import orjson
import pytest
from provider_kit import WireCapture, assemble, fixture_bytes, fixture_stream
from sse_server import SseServer

from actorloop.runtime.log.request import Request
from actorloop.runtime.model.chunks import Finish, StreamChunk
from actorloop.runtime.model.header import LlmCallConfig, ResponseFormat, ToolChoice, ToolSchema
from actorloop.runtime.model.messages import Message, Reasoning, Text, ToolCall, ToolResult
from actorloop.runtime.providers.anthropic import AnthropicProvider
from actorloop.runtime.providers.chat_body import prompt_cache_key
from actorloop.runtime.providers.openai import OpenAIChatProvider
from actorloop.runtime.providers.responses import OpenAIResponsesProvider
from actorloop.runtime.providers.retry import RetryPolicy

KEY = "sk-test-sdk-key-0005"
BASE = "http://ours.test"
SESSION = "session-sdk"
EMPTY_STREAM = b"data: [DONE]\n\n"

WEATHER_PARAMS = {
    "type": "object",
    "properties": {"reasoning": {"type": "string"}, "city": {"type": "string"}},
    "required": ["reasoning", "city"],
    "additionalProperties": False,
}
ANSWER_SCHEMA = {
    "type": "object",
    "properties": {"reasoning": {"type": "string"}, "answer": {"type": "string"}},
    "required": ["reasoning", "answer"],
    "additionalProperties": False,
}
TOOLS = (ToolSchema("get_weather", "Weather of a city", WEATHER_PARAMS), ToolSchema("now"))
PREFIX = (Message.user("catalogue: skills A, B"), Message.assistant("noted"))
CALL = ToolCall("call_1", "get_weather", '{"reasoning":"asked","city":"Paris"}')
RESULT = Message("user", (ToolResult("call_1", (Text("sunny"),)), Text("thanks")))
SIGNED = Reasoning("The user wants the weather.", signature="sig-1")
REDACTED = Reasoning("", redacted="EmwKAhgBEgy3va3pzix")
ENCRYPTED = Reasoning("Need the tool.", encrypted_content="gAAAAB-enc", item_id="rs_1")


def request_of(config: LlmCallConfig, *assistant: Any) -> Request:
    history = (
        Message.user("weather in Paris?"),
        Message("assistant", (*assistant, Text("checking"), CALL)),
        RESULT,
    )
    return Request(
        SESSION, config, "You are terse.", TOOLS, PREFIX + history, prefix_length=len(PREFIX)
    )


class Capture:
    """The transport handler: records the SDK's request and answers with `stream`."""

    def __init__(self, stream: bytes = EMPTY_STREAM) -> None:
        self.stream = stream
        self.bodies: list[Any] = []
        self.headers: list[Mapping[str, str]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(orjson.loads(request.content))
        self.headers.append(request.headers)
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, content=self.stream
        )

    def anthropic(self, request: httpx2.Request) -> httpx2.Response:
        answer = self(httpx.Request(request.method, str(request.url), content=request.content))
        self.headers[-1] = request.headers
        return httpx2.Response(200, headers=dict(answer.headers), content=answer.content)


def openai_client(capture: Capture) -> openai.OpenAI:
    return openai.OpenAI(
        api_key=KEY,
        base_url="http://sdk.test/v1",
        max_retries=0,
        http_client=httpx.Client(transport=httpx.MockTransport(capture)),
    )


def anthropic_client(capture: Capture) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        api_key=KEY,
        base_url="http://sdk.test",
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(capture.anthropic)),
    )


def drain(stream: Any) -> None:
    for _event in stream:
        pass


def key_paths(value: object, path: str = "$") -> Iterator[str]:
    """Every object key with its path, in document order (schemas must keep theirs)."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield f"{path}.{key}"
            yield from key_paths(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from key_paths(item, f"{path}[{index}]")


def schema_order(ours: Any, sdk: Any, schemas: Callable[[Any], Any]) -> bool:
    """Whether the schemas `schemas` picks from both bodies list their keys in the same order
    (and are not empty: the check must look at something)."""
    paths = list(key_paths(schemas(ours)))
    return bool(paths) and paths == list(key_paths(schemas(sdk)))


def assert_same_fields(ours: Mapping[str, Any], sdk: Mapping[str, Any]) -> None:
    assert sorted(ours) == sorted(sdk)
    for field in sdk:
        assert ours[field] == sdk[field], field


async def ours_on_the_wire(
    make: Callable[..., Any], request: Request, fixture: str
) -> tuple[Any, Mapping[str, str]]:
    """The body and headers our adapter `make(transport=...)` sent for `request`."""
    capture = WireCapture(fixture_stream(fixture))
    async for _chunk in make(transport=capture.transport).stream(request):
        pass
    [seen] = capture.requests
    return orjson.loads(seen.body), seen.headers


async def test_chat_completions_body_matches_the_sdk() -> None:
    config = LlmCallConfig(
        "gpt-4.1",
        temperature=0.2,
        max_tokens=256,
        stop=("END",),
        tool_choice="required",
        parallel_tool_calls=False,
        strict_tools=True,
        response_format=ResponseFormat.json_schema(ANSWER_SCHEMA, name="verdict", strict=True),
        reasoning_effort="low",
        user="user-hash-1",
        metadata={"team": "core"},
        extra_body={"store": True},
    )
    ours, _headers = await ours_on_the_wire(
        lambda **kw: OpenAIChatProvider(BASE + "/v1", KEY, prompt_cache_key=True, **kw),
        request_of(config),
        "openai_chat_refusal.sse",
    )

    capture = Capture()
    drain(
        openai_client(capture).chat.completions.create(
            model="gpt-4.1",
            messages=[
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "catalogue: skills A, B"},
                {"role": "assistant", "content": "noted"},
                {"role": "user", "content": "weather in Paris?"},
                {
                    "role": "assistant",
                    "content": "checking",
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": CALL.arguments},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
                {"role": "user", "content": "thanks"},
            ],
            tools=[
                {
                    "type": "function",
                    "function": {
                        "name": "get_weather",
                        "parameters": WEATHER_PARAMS,
                        "description": "Weather of a city",
                        "strict": True,
                    },
                },
                {
                    "type": "function",
                    "function": {
                        "name": "now",
                        "parameters": {"type": "object", "properties": {}},
                        "strict": True,
                    },
                },
            ],
            tool_choice="required",
            parallel_tool_calls=False,
            temperature=0.2,
            max_completion_tokens=256,
            stop=["END"],
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "verdict", "schema": ANSWER_SCHEMA, "strict": True},
            },
            reasoning_effort="low",
            safety_identifier="user-hash-1",
            metadata={"team": "core"},
            store=True,
            prompt_cache_key=prompt_cache_key(SESSION),
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    [sdk] = capture.bodies
    assert_same_fields(ours, sdk)
    assert schema_order(
        ours, sdk, lambda body: [t["function"]["parameters"] for t in body["tools"]]
    )
    assert schema_order(ours, sdk, lambda body: body["response_format"]["json_schema"]["schema"])


async def test_messages_body_matches_the_sdk() -> None:
    config = LlmCallConfig(
        "claude-model-under-test",
        max_tokens=4096,
        stop=("END",),
        thinking_budget=2048,
        tool_choice="auto",
        parallel_tool_calls=False,
        response_format=ResponseFormat.json_schema(ANSWER_SCHEMA),
        reasoning_effort="high",
        cache_ttl="1h",
        user="user-hash-1",
        extra_headers={"anthropic-beta": "context-1m-2025-08-07"},
    )
    ours, headers = await ours_on_the_wire(
        lambda **kw: AnthropicProvider(BASE, KEY, **kw),
        request_of(config, SIGNED, REDACTED),
        "anthropic_redacted_thinking.sse",
    )
    assert headers["anthropic-beta"] == "context-1m-2025-08-07"

    hour = {"type": "ephemeral", "ttl": "1h"}
    capture = Capture(fixture_bytes("anthropic_redacted_thinking.sse"))
    with anthropic_client(capture).messages.stream(
        model="claude-model-under-test",
        max_tokens=4096,
        system=[{"type": "text", "text": "You are terse.", "cache_control": hour}],
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "catalogue: skills A, B"}]},
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "noted", "cache_control": hour}],
            },
            {"role": "user", "content": [{"type": "text", "text": "weather in Paris?"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": SIGNED.text, "signature": "sig-1"},
                    {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"},
                    {"type": "text", "text": "checking"},
                    {
                        "type": "tool_use",
                        "id": "call_1",
                        "name": "get_weather",
                        "input": {"reasoning": "asked", "city": "Paris"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "call_1",
                        "content": [{"type": "text", "text": "sunny"}],
                    },
                    {"type": "text", "text": "thanks", "cache_control": hour},
                ],
            },
        ],
        tools=[
            {
                "name": "get_weather",
                "input_schema": WEATHER_PARAMS,
                "description": "Weather of a city",
            },
            {
                "name": "now",
                "input_schema": {"type": "object", "properties": {}},
                "cache_control": hour,
            },
        ],
        tool_choice={"type": "auto", "disable_parallel_tool_use": True},
        thinking={"type": "enabled", "budget_tokens": 2048},
        output_config={
            "effort": "high",
            "format": {"type": "json_schema", "schema": ANSWER_SCHEMA},
        },
        metadata={"user_id": "user-hash-1"},
        stop_sequences=["END"],
        extra_headers={"anthropic-beta": "context-1m-2025-08-07"},
    ) as stream:
        stream.get_final_message()
    [sdk] = capture.bodies
    assert_same_fields(ours, sdk)
    assert schema_order(ours, sdk, lambda body: [tool["input_schema"] for tool in body["tools"]])
    assert schema_order(ours, sdk, lambda body: body["output_config"]["format"]["schema"])
    assert capture.headers[0]["anthropic-beta"] == "context-1m-2025-08-07"


async def test_responses_body_matches_the_sdk() -> None:
    config = LlmCallConfig(
        "gpt-5",
        max_tokens=1024,
        tool_choice=ToolChoice.tool("get_weather"),
        parallel_tool_calls=True,
        response_format=ResponseFormat.json_schema(ANSWER_SCHEMA, name="verdict", strict=True),
        reasoning_effort="medium",
        user="user-hash-1",
        metadata={"team": "core"},
    )
    ours, _headers = await ours_on_the_wire(
        lambda **kw: OpenAIResponsesProvider(BASE + "/v1", KEY, prompt_cache_key=True, **kw),
        request_of(config, ENCRYPTED),
        "responses_text_cached.sse",
    )

    capture = Capture()
    drain(
        openai_client(capture).responses.create(
            model="gpt-5",
            instructions="You are terse.",
            input=[
                {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "catalogue: skills A, B"}],
                },
                {"type": "message", "role": "assistant", "content": "noted"},
                {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "weather in Paris?"}],
                },
                {
                    "type": "reasoning",
                    "id": "rs_1",
                    "summary": [{"type": "summary_text", "text": "Need the tool."}],
                    "encrypted_content": "gAAAAB-enc",
                },
                {"type": "message", "role": "assistant", "content": "checking"},
                {
                    "type": "function_call",
                    "call_id": "call_1",
                    "name": "get_weather",
                    "arguments": CALL.arguments,
                },
                {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
                {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "thanks"}],
                },
            ],
            tools=[
                {
                    "type": "function",
                    "name": "get_weather",
                    "description": "Weather of a city",
                    "parameters": WEATHER_PARAMS,
                    "strict": False,
                },
                {
                    "type": "function",
                    "name": "now",
                    "parameters": {"type": "object", "properties": {}},
                    "strict": False,
                },
            ],
            tool_choice={"type": "function", "name": "get_weather"},
            parallel_tool_calls=True,
            max_output_tokens=1024,
            text={
                "format": {
                    "type": "json_schema",
                    "name": "verdict",
                    "schema": ANSWER_SCHEMA,
                    "strict": True,
                }
            },
            reasoning={"effort": "medium"},
            safety_identifier="user-hash-1",
            metadata={"team": "core"},
            store=False,
            include=["reasoning.encrypted_content"],
            prompt_cache_key=prompt_cache_key(SESSION),
            stream=True,
        )
    )
    [sdk] = capture.bodies
    assert_same_fields(ours, sdk)
    assert schema_order(ours, sdk, lambda body: [tool["parameters"] for tool in body["tools"]])
    assert schema_order(ours, sdk, lambda body: body["text"]["format"]["schema"])


# ---------------------------------------------------------------- stream fixtures


async def read_ours(server: SseServer, provider: Any, fixture: str) -> list[StreamChunk]:
    server.push(fixture_stream(fixture))
    request = Request(SESSION, LlmCallConfig("m"), None, (), (Message.user("hi"),))
    return [chunk async for chunk in provider.stream(request)]


def openai_provider(server: SseServer, kind: Callable[..., Any]) -> Any:
    return kind(server.url + "/v1", KEY, retry=RetryPolicy(max_retries=0))


async def test_chat_refusal_reads_as_the_sdk_reads_it(server: SseServer) -> None:
    ours = await read_ours(server, openai_provider(server, OpenAIChatProvider), (
        "openai_chat_refusal.sse"
    ))  # fmt: skip
    capture = Capture(fixture_bytes("openai_chat_refusal.sse"))
    with openai_client(capture).chat.completions.stream(
        model="m", messages=[{"role": "user", "content": "hi"}]
    ) as stream:
        sdk = stream.get_final_completion().choices[0].message
    assert sdk.content is None and sdk.refusal
    assembled = assemble(ours)
    assert assembled.content() == (Text(sdk.refusal),)
    finish = ours[-1]
    assert isinstance(finish, Finish) and finish.error is not None
    assert finish.error.code == "REFUSED"
    assert finish.error.message == f"openai: the model refused: {sdk.refusal}"


async def test_gateway_cache_writes_read_as_the_sdk_reports_them(server: SseServer) -> None:
    ours = assemble(
        await read_ours(
            server,
            openai_provider(server, OpenAIChatProvider),
            "openai_chat_gateway_cache_write.sse",
        )
    )
    capture = Capture(fixture_bytes("openai_chat_gateway_cache_write.sse"))
    with openai_client(capture).chat.completions.stream(
        model="m", messages=[{"role": "user", "content": "hi"}]
    ) as stream:
        sdk = stream.get_final_completion()
    assert ours.content() == (Text(sdk.choices[0].message.content or ""),)
    assert sdk.usage is not None and ours.usage is not None
    written = (sdk.usage.model_extra or {})["cache_creation_input_tokens"]
    assert ours.usage.cache_write == written == 300
    assert ours.usage.prompt_total == sdk.usage.prompt_tokens
    assert ours.usage.input == 176


async def test_redacted_thinking_reads_as_the_sdk_reads_it(server: SseServer) -> None:
    provider = AnthropicProvider(server.url, KEY, retry=RetryPolicy(max_retries=0))
    ours = assemble(await read_ours(server, provider, "anthropic_redacted_thinking.sse"))
    capture = Capture(fixture_bytes("anthropic_redacted_thinking.sse"))
    with anthropic_client(capture).messages.stream(
        model="m", max_tokens=4096, messages=[{"role": "user", "content": "hi"}]
    ) as stream:
        sdk = stream.get_final_message()
    expected: list[Any] = []
    for block in sdk.content:
        if block.type == "thinking":
            expected.append(Reasoning(block.thinking, signature=block.signature))
        elif block.type == "redacted_thinking":
            expected.append(Reasoning("", redacted=block.data))
        elif block.type == "text":
            expected.append(Text(block.text))
    assert ours.content() == tuple(expected)
    assert [block.type for block in sdk.content] == ["thinking", "redacted_thinking", "text"]
    assert ours.usage is not None
    assert (ours.usage.input, ours.usage.output, ours.usage.cache_write) == (
        sdk.usage.input_tokens,
        sdk.usage.output_tokens,
        sdk.usage.cache_creation_input_tokens,
    )


@pytest.mark.parametrize(
    "fixture", ["responses_reasoning_tool_call.sse", "responses_text_cached.sse"]
)
async def test_responses_streams_read_as_the_sdk_reads_them(
    server: SseServer, fixture: str
) -> None:
    ours = assemble(
        await read_ours(server, openai_provider(server, OpenAIResponsesProvider), fixture)
    )
    capture = Capture(fixture_bytes(fixture))
    with openai_client(capture).responses.stream(model="m", input="hi") as stream:
        sdk = stream.get_final_response()
    expected: list[Any] = []
    for item in sdk.output:
        if item.type == "reasoning":
            texts = tuple(part.text for part in item.summary)
            expected.append(
                Reasoning(
                    "\n\n".join(texts),
                    encrypted_content=item.encrypted_content,
                    item_id=item.id,
                    parts=texts if len(texts) > 1 else None,
                )
            )
        elif item.type == "function_call":
            expected.append(ToolCall(item.call_id, item.name, item.arguments))
        elif item.type == "message":
            expected.extend(Text(part.text) for part in item.content if part.type == "output_text")
    assert ours.content() == tuple(expected)
    assert sdk.usage is not None and ours.usage is not None
    details = sdk.usage.input_tokens_details
    assert ours.usage.cache_read == details.cached_tokens
    assert ours.usage.prompt_total == sdk.usage.input_tokens
    assert ours.usage.output == sdk.usage.output_tokens
    assert ours.usage.reasoning == sdk.usage.output_tokens_details.reasoning_tokens


async def test_a_summary_of_several_parts_is_replayed_as_the_sdk_replays_it(
    server: SseServer,
) -> None:
    """Issue 39 item 11: the parts come back as separate `summary_text` parts, exactly as
    the SDK sends the reasoning item it parsed from the same stream."""
    fixture = "responses_reasoning_tool_call.sse"
    ours_read = assemble(
        await read_ours(server, openai_provider(server, OpenAIResponsesProvider), fixture)
    )
    [reasoning] = [block for block in ours_read.content() if isinstance(block, Reasoning)]
    assert reasoning.parts is not None and len(reasoning.parts) == 2
    ours, _headers = await ours_on_the_wire(
        lambda **kw: OpenAIResponsesProvider(BASE + "/v1", KEY, **kw),
        request_of(LlmCallConfig("gpt-5"), reasoning),
        "responses_text_cached.sse",
    )
    [our_item] = [item for item in ours["input"] if item["type"] == "reasoning"]

    with openai_client(Capture(fixture_bytes(fixture))).responses.stream(
        model="m", input="hi"
    ) as stream:
        sdk_item = next(
            item for item in stream.get_final_response().output if item.type == "reasoning"
        )
    capture = Capture()
    drain(
        openai_client(capture).responses.create(
            model="gpt-5",
            input=[sdk_item.model_dump(exclude_none=True, exclude={"status"})],  # type: ignore[list-item]
            stream=True,
        )
    )
    [sdk_body] = capture.bodies
    assert our_item == sdk_body["input"][0]
    assert [part["text"] for part in our_item["summary"]] == list(reasoning.parts)
