"""Options × adapters: each option is sent as docs/providers.md says, or refused with
`INVALID_REQUEST` before a byte goes out, never dropped in silence. The bytes are captured
in-process by an httpx MockTransport given as the adapter's `transport=`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from provider_kit import TOOLS, WireCapture, fixture_stream

from actorloop.runtime.errors import CallConfigError, ProviderError
from actorloop.runtime.log.request import Request
from actorloop.runtime.model.header import LlmCallConfig, ResponseFormat
from actorloop.runtime.model.messages import Message, Reasoning, Text
from actorloop.runtime.providers.anthropic import AnthropicProvider
from actorloop.runtime.providers.openai import DeepSeekProvider, OpenAIChatProvider
from actorloop.runtime.providers.responses import OpenAIResponsesProvider

KEY = "sk-test-refusals-key-0008"
SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}}
CHAT_STREAM = "openai_chat_refusal.sse"
RESPONSES_STREAM = "responses_text_cached.sse"
ANTHROPIC_STREAM = "anthropic_redacted_thinking.sse"

Factory = Callable[..., Any]
ADAPTERS: dict[str, tuple[Factory, str]] = {
    "chat": (lambda **kw: OpenAIChatProvider("http://chat.test/v1", KEY, **kw), CHAT_STREAM),
    "deepseek": (lambda **kw: DeepSeekProvider("http://ds.test", KEY, **kw), CHAT_STREAM),
    "responses": (
        lambda **kw: OpenAIResponsesProvider("http://r.test/v1", KEY, **kw),
        RESPONSES_STREAM,
    ),
    "anthropic": (lambda **kw: AnthropicProvider("http://a.test", KEY, **kw), ANTHROPIC_STREAM),
}


def request_of(config: LlmCallConfig, *history: Message) -> Request:
    return Request("session-refusals", config, "sys", TOOLS, history or (Message.user("hi"),))


async def sent_body(adapter: str, config: LlmCallConfig, **settings: Any) -> Any:
    """The body `adapter` sent for `config` (one request, answered by a stream fixture)."""
    make, fixture = ADAPTERS[adapter]
    capture = WireCapture(fixture_stream(fixture))
    provider = make(transport=capture.transport, **settings)
    async for _chunk in provider.stream(request_of(config)):
        pass
    [seen] = capture.requests
    return seen.json()


ANTHROPIC_ONLY = (
    {"thinking_budget": 2048},
    {"cache_ttl": "1h"},
    {"cache_breakpoints": ("tools", "system")},
)
REFUSED = [
    ("chat", {"metadata": {"team": "core"}}, "only for stored completions"),
    *[("chat", option, "is an Anthropic option") for option in ANTHROPIC_ONLY],
    *[("deepseek", option, "is an Anthropic option") for option in ANTHROPIC_ONLY],
    ("deepseek", {"response_format": ResponseFormat.json_schema(SCHEMA)}, "json_schema"),
    ("deepseek", {"reasoning_effort": "high"}, "does not take reasoning_effort"),
    ("deepseek", {"metadata": {"team": "core"}}, "does not take metadata"),
    ("deepseek", {"strict_tools": True}, "does not take strict_tools"),
    ("deepseek", {"strict_tools": False}, "does not take strict_tools"),
    ("deepseek", {"user": "user-hash"}, "does not take user"),
    ("responses", {"cache_ttl": "5m"}, "is an Anthropic option"),
    ("responses", {"cache_breakpoints": ("tools",)}, "is an Anthropic option"),
    ("responses", {"thinking_budget": 2048}, "takes reasoning_effort"),
    ("anthropic", {"temperature": 0.3}, "takes no temperature"),
]


@pytest.mark.parametrize(("adapter", "options", "problem"), REFUSED)
async def test_options_an_api_cannot_take_are_refused_before_sending(
    adapter: str, options: dict[str, Any], problem: str
) -> None:
    make, _fixture = ADAPTERS[adapter]
    capture = WireCapture()
    provider = make(transport=capture.transport)
    with pytest.raises(ProviderError) as caught:
        async for _chunk in provider.stream(request_of(LlmCallConfig("m", **options))):
            pass
    assert caught.value.code == "INVALID_REQUEST"
    assert problem in str(caught.value)
    assert capture.requests == []


async def test_chat_metadata_goes_out_with_store() -> None:
    config = LlmCallConfig("gpt-4.1", metadata={"team": "core"})
    body = await sent_body("chat", config, store=True)
    assert body["store"] is True and body["metadata"] == {"team": "core"}
    through_extra = LlmCallConfig("gpt-4.1", metadata={"team": "core"}, extra_body={"store": True})
    body = await sent_body("chat", through_extra)
    assert body["store"] is True and body["metadata"] == {"team": "core"}
    assert "store" not in await sent_body("chat", LlmCallConfig("gpt-4.1"))


def test_deepseek_keeps_no_completions() -> None:
    with pytest.raises(CallConfigError, match="keeps no completions"):
        DeepSeekProvider(api_key=KEY, store=True)


async def test_deepseek_takes_json_object_output() -> None:
    config = LlmCallConfig("deepseek-chat", response_format=ResponseFormat("json_object"))
    body = await sent_body("deepseek", config)
    assert body["response_format"] == {"type": "json_object"}


@pytest.mark.parametrize(
    ("adapter", "field"),
    [("chat", "safety_identifier"), ("responses", "safety_identifier"), ("anthropic", None)],
)
async def test_user_has_one_rule(adapter: str, field: str | None) -> None:
    """`user` is the end user's stable id: `safety_identifier` on both OpenAI formats (the
    SDK deprecates Chat's `user` for it), `metadata.user_id` on Anthropic."""
    body = await sent_body(adapter, LlmCallConfig("gpt-4.1", user="user-hash"))
    assert "user" not in body
    if field is None:
        assert body["metadata"] == {"user_id": "user-hash"}
    else:
        assert body[field] == "user-hash"


@pytest.mark.parametrize(
    ("model", "settings", "effort", "asked"),
    [
        ("gpt-4.1", {}, None, False),
        ("gpt-4o-mini", {}, None, False),
        ("gpt-5", {}, None, True),
        ("gpt-5.2-chat-latest", {}, None, False),
        ("o4-mini", {}, None, True),
        ("openai/o3", {}, None, True),
        ("gpt-4.1", {}, "low", True),
        ("gpt-5", {"encrypted_reasoning": False}, None, False),
        ("gpt-4.1", {"encrypted_reasoning": True}, None, True),
        ("gpt-5", {"store": True}, None, False),
    ],
)
async def test_encrypted_reasoning_is_asked_only_of_reasoning_models(
    model: str, settings: dict[str, Any], effort: str | None, asked: bool
) -> None:
    body = await sent_body("responses", LlmCallConfig(model, reasoning_effort=effort), **settings)
    assert ("include" in body) is asked
    if asked:
        assert body["include"] == ["reasoning.encrypted_content"]


async def test_without_encrypted_content_only_replayable_reasoning_is_sent() -> None:
    """A non-reasoning model's request carries no reasoning it could not resolve."""
    capture = WireCapture(fixture_stream(RESPONSES_STREAM))
    provider = OpenAIResponsesProvider("http://r.test/v1", KEY, transport=capture.transport)
    history = (
        Message.user("hi"),
        Message("assistant", (Reasoning("earlier", item_id="rs_1"), Text("hello"))),
        Message.user("again"),
    )
    async for _chunk in provider.stream(request_of(LlmCallConfig("gpt-4.1"), *history)):
        pass
    body = capture.requests[0].json()
    assert "include" not in body
    assert [item["type"] for item in body["input"]] == ["message", "message", "message"]
