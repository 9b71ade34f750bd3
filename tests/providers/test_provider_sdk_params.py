"""Every field our adapters send exists in the official SDKs' typed request parameters.

The bodies are the bytes each adapter sent (captured by an httpx MockTransport given as the
adapter's `transport=`), built from a config that sets every option the adapter takes. They
are checked against the SDKs' own TypedDicts (`CompletionCreateParamsStreaming`,
`ResponseCreateParamsStreaming`, `MessageCreateParamsStreaming`), walked recursively: a key
the SDK does not know, a missing required key or a value outside a Literal is a finding. So a
parameter an SDK drops (anthropic 2.15 dropped `temperature`) fails here, not on a live API.
"""

from __future__ import annotations

import collections.abc
import types
import typing
from typing import Any, Literal, Required, Union, get_args, get_origin

import orjson
import pytest
import typing_extensions
from anthropic.types.message_create_params import MessageCreateParamsStreaming
from openai.types.chat.completion_create_params import CompletionCreateParamsStreaming
from openai.types.responses.response_create_params import ResponseCreateParamsStreaming
from provider_kit import TOOLS, WireCapture, fixture_stream

from actorloop.runtime.log.request import Request
from actorloop.runtime.model.header import LlmCallConfig, ResponseFormat, ToolChoice
from actorloop.runtime.model.messages import Message, Reasoning, Text, ToolCall, ToolResult
from actorloop.runtime.providers.anthropic import AnthropicProvider
from actorloop.runtime.providers.openai import DeepSeekProvider, OpenAIChatProvider
from actorloop.runtime.providers.responses import OpenAIResponsesProvider

KEY = "sk-test-params-key-0007"
SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}}
_SEQUENCES = {
    collections.abc.Iterable,
    collections.abc.Sequence,
    list,
    tuple,
}
_MAPPINGS = {dict, collections.abc.Mapping}


def _unwrap(annotation: Any) -> Any:
    while get_origin(annotation) in (Required, typing_extensions.Required, typing.NotRequired):
        (annotation,) = get_args(annotation)
    if get_origin(annotation) is typing.Annotated:
        annotation = get_args(annotation)[0]
    return annotation


def findings(value: Any, annotation: Any, path: str = "$") -> list[str]:
    """Where `value` (parsed JSON) leaves the SDK type `annotation`; empty when it conforms."""
    annotation = _unwrap(annotation)
    origin = get_origin(annotation)
    if annotation in (Any, object):
        return []
    if typing_extensions.is_typeddict(annotation):
        return _typeddict_findings(value, annotation, path)
    if origin in (Union, types.UnionType):
        branches = [findings(value, branch, path) for branch in get_args(annotation)]
        if any(not found for found in branches):
            return []
        # Report the branch the value's shape fits (its findings lie deeper), if any.
        fitting = [found for found in branches if not any(f.startswith(f"{path}: ") for f in found)]
        return min(fitting or branches, key=len)
    if origin is Literal:
        return [] if value in get_args(annotation) else [f"{path}: {value!r} not in {annotation}"]
    if annotation is type(None):
        return [] if value is None else [f"{path}: expected null"]
    if origin in _SEQUENCES or _is_sequence_not_str(annotation):
        if not isinstance(value, list):
            return [f"{path}: expected an array"]
        (item,) = get_args(annotation)[:1] or (Any,)
        return [
            problem for n, v in enumerate(value) for problem in findings(v, item, f"{path}[{n}]")
        ]
    if origin in _MAPPINGS:
        if not isinstance(value, dict):
            return [f"{path}: expected an object"]
        item = get_args(annotation)[1] if get_args(annotation) else Any
        return [problem for k, v in value.items() for problem in findings(v, item, f"{path}.{k}")]
    return _scalar_findings(value, annotation, path)


def _is_sequence_not_str(annotation: Any) -> bool:
    return getattr(annotation, "__name__", "") == "SequenceNotStr" or (
        getattr(get_origin(annotation), "__name__", "") == "SequenceNotStr"
    )


def _typeddict_findings(value: Any, annotation: Any, path: str) -> list[str]:
    if not isinstance(value, dict):
        return [f"{path}: expected an object ({annotation.__name__})"]
    hints = typing.get_type_hints(annotation, include_extras=True)
    found = [
        f"{path}.{key}: not a field of {annotation.__name__}" for key in value if key not in hints
    ]
    found += [
        f"{path}.{key}: required by {annotation.__name__}"
        for key, hint in hints.items()
        if _required(annotation, key, hint) and key not in value
    ]
    for key, item in value.items():
        if key in hints:
            found += findings(item, hints[key], f"{path}.{key}")
    return found


def _required(annotation: Any, key: str, hint: Any) -> bool:
    # The SDKs write their annotations as strings, so `__required_keys__` cannot see them;
    # without a marker a key is required when the class that declares it is total.
    origin = get_origin(hint)
    if origin in (Required, typing_extensions.Required):
        return True
    if origin in (typing.NotRequired, typing_extensions.NotRequired):
        return False
    return bool(_declaring(annotation, key).__total__)


def _declaring(annotation: Any, key: str) -> Any:
    for base in getattr(annotation, "__orig_bases__", ()):
        if typing_extensions.is_typeddict(base) and key in base.__annotations__:
            return _declaring(base, key)
    return annotation


def _scalar_findings(value: Any, annotation: Any, path: str) -> list[str]:
    if annotation is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif annotation is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(annotation, type):
        ok = isinstance(value, annotation)
    else:
        return [f"{path}: the checker cannot read {annotation!r}"]
    return [] if ok else [f"{path}: {value!r} is not {annotation.__name__}"]


def test_the_checker_finds_what_it_should() -> None:
    """The walker must be able to fail: unknown keys, missing required keys, bad literals."""
    body = {"model": "m", "max_tokens": 1, "messages": [], "stream": True, "temperature": 0.5}
    assert findings(body, MessageCreateParamsStreaming) == [
        "$.temperature: not a field of MessageCreateParamsStreaming"
    ]
    assert "$.max_tokens: required by MessageCreateParamsStreaming" in findings(
        {"model": "m", "messages": [], "stream": True}, MessageCreateParamsStreaming
    )
    tools = {"model": "m", "messages": [], "stream": True, "tool_choice": "sometimes"}
    assert findings(tools, CompletionCreateParamsStreaming)
    part = {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}
    nested = {"model": "m", "messages": [{"role": "user", "content": [part]}], "stream": True}
    assert findings(nested, CompletionCreateParamsStreaming) == [
        "$.messages[0].content[0].cache_control: not a field of ChatCompletionContentPartTextParam"
    ]


HISTORY = (
    Message.user("catalogue"),
    Message.assistant("noted"),
    Message.user("weather?"),
    Message(
        "assistant",
        (
            Reasoning("think", signature="sig", encrypted_content="enc", item_id="rs_1"),
            Text("checking"),
            ToolCall("call_1", "lookup", '{"q":"paris"}'),
        ),
    ),
    Message("user", (ToolResult("call_1", (Text("sunny"),)), Text("thanks"))),
)


def request_with(config: LlmCallConfig) -> Request:
    return Request("session-params", config, "You are terse.", TOOLS, HISTORY, prefix_length=2)


FULL_CHAT = LlmCallConfig(
    "gpt-4.1",
    temperature=0.2,
    max_tokens=256,
    stop=("END",),
    tool_choice=ToolChoice.tool("lookup"),
    parallel_tool_calls=False,
    strict_tools=True,
    response_format=ResponseFormat.json_schema(SCHEMA, name="verdict", strict=True),
    reasoning_effort="low",
    user="user-hash",
    metadata={"team": "core"},
)
FULL_DEEPSEEK = LlmCallConfig(
    "deepseek-chat",
    temperature=0.2,
    max_tokens=256,
    stop=("END",),
    tool_choice="required",
    parallel_tool_calls=False,
    response_format=ResponseFormat("json_object"),
)
FULL_RESPONSES = LlmCallConfig(
    "gpt-5",
    temperature=1.0,
    max_tokens=1024,
    tool_choice="required",
    parallel_tool_calls=True,
    strict_tools=False,
    response_format=ResponseFormat.json_schema(SCHEMA, strict=True, description="the answer"),
    reasoning_effort="medium",
    user="user-hash",
    metadata={"team": "core"},
)
FULL_ANTHROPIC = LlmCallConfig(
    "claude-test",
    max_tokens=4096,
    stop=("END",),
    thinking_budget=2048,
    tool_choice="auto",
    parallel_tool_calls=False,
    strict_tools=True,
    response_format=ResponseFormat.json_schema(SCHEMA),
    reasoning_effort="high",
    cache_ttl="1h",
    user="user-hash",
)

CASES = {
    "chat": (
        lambda transport: OpenAIChatProvider(
            "http://chat.test/v1", KEY, store=True, prompt_cache_key=True, transport=transport
        ),
        FULL_CHAT,
        "openai_chat_refusal.sse",
        CompletionCreateParamsStreaming,
        (),
    ),
    "deepseek": (
        lambda transport: DeepSeekProvider("http://deepseek.test", KEY, transport=transport),
        FULL_DEEPSEEK,
        "openai_chat_refusal.sse",
        CompletionCreateParamsStreaming,
        # DeepSeek's own field (its thinking mode needs the reasoning back), not OpenAI's.
        ("$.messages[4].reasoning_content: not a field of ChatCompletionAssistantMessageParam",),
    ),
    "responses": (
        lambda transport: OpenAIResponsesProvider(
            "http://responses.test/v1", KEY, prompt_cache_key=True, transport=transport
        ),
        FULL_RESPONSES,
        "responses_text_cached.sse",
        ResponseCreateParamsStreaming,
        (),
    ),
    "anthropic": (
        lambda transport: AnthropicProvider("http://anthropic.test", KEY, transport=transport),
        FULL_ANTHROPIC,
        "anthropic_redacted_thinking.sse",
        MessageCreateParamsStreaming,
        (),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_every_field_sent_is_in_the_sdk_typed_params(case: str) -> None:
    make, config, fixture, params, dialect_fields = CASES[case]
    capture = WireCapture(fixture_stream(fixture))
    provider = make(capture.transport)
    async for _chunk in provider.stream(request_with(config)):
        pass
    [sent] = capture.requests
    body = orjson.loads(sent.body)
    # The config set every option this adapter takes, so the body is as wide as it gets.
    assert len(body) >= 9
    assert findings(body, params) == list(dialect_fields)
