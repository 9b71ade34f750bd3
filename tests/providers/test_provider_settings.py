"""One `HttpSettings` value configures every HTTP adapter: the old keyword arguments build it,
a shared value can be handed to all four, and its `transport` reaches the httpx client (so
body checks need no threaded server)."""

from __future__ import annotations

import pickle
from typing import Any

import attrs
import httpx
import pytest
from provider_kit import WireCapture, fixture_stream

from actorloop.runtime.log.request import Request
from actorloop.runtime.model.header import LlmCallConfig
from actorloop.runtime.model.messages import Message
from actorloop.runtime.providers import (
    AnthropicProvider,
    DeepSeekProvider,
    OpenAIChatProvider,
    OpenAIResponsesProvider,
)
from actorloop.runtime.providers.registry import provider_from_spec
from actorloop.runtime.providers.retry import RetryPolicy
from actorloop.runtime.providers.settings import HttpOptions, HttpSettings

KEY = "sk-test-settings-key-0010"
ADAPTERS: list[Any] = [
    OpenAIChatProvider,
    DeepSeekProvider,
    OpenAIResponsesProvider,
    AnthropicProvider,
]
STREAMS = {
    OpenAIChatProvider: ("openai_chat_refusal.sse", "/v1/chat/completions"),
    DeepSeekProvider: ("openai_chat_refusal.sse", "/v1/chat/completions"),
    OpenAIResponsesProvider: ("responses_text_cached.sse", "/v1/responses"),
    AnthropicProvider: ("anthropic_redacted_thinking.sse", "/v1/messages"),
}


def test_the_keyword_arguments_are_the_settings_fields() -> None:
    """The adapters' keywords and the settings value cannot drift apart."""
    fields = {field.name for field in attrs.fields(HttpSettings)}
    assert set(HttpOptions.__annotations__) == fields - {"base_url", "api_key"}


@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda kind: kind.__name__)
async def test_one_settings_value_serves_every_adapter(adapter: Any) -> None:
    fixture, path = STREAMS[adapter]
    capture = WireCapture(fixture_stream(fixture))
    shared = HttpSettings(
        base_url="http://shared.test/v1",
        api_key=KEY,
        retry=RetryPolicy(max_retries=0),
        context_windows={"m": 64_000},
        transport=capture.transport,
    )
    base = "http://shared.test" if adapter is AnthropicProvider else None
    provider = adapter(base, settings=shared)
    assert provider.name == adapter.default_name and provider.retry.max_retries == 0
    assert provider.model_info("m").context_window == 64_000
    request = Request("s", LlmCallConfig("m"), None, (), (Message.user("hi"),))
    async for _chunk in provider.stream(request):
        pass
    [seen] = capture.requests
    assert seen.path == path
    assert KEY in (seen.headers.get("authorization", "") + seen.headers.get("x-api-key", ""))


def test_keywords_win_over_the_settings_value() -> None:
    shared = HttpSettings(base_url="http://a.test/v1", name="a", max_retries=5)
    provider = OpenAIChatProvider("http://b.test/v1", settings=shared, name="b", max_retries=1)
    assert (provider.base_url, provider.name, provider.retry.max_retries) == (
        "http://b.test/v1",
        "b",
        1,
    )
    assert shared.name == "a"  # frozen: the shared value is untouched
    kept = OpenAIChatProvider(settings=shared)
    assert (kept.base_url, kept.name, kept.retry.max_retries) == ("http://a.test/v1", "a", 5)


def test_the_old_keyword_form_still_works() -> None:
    provider = AnthropicProvider(
        "http://x.test",
        KEY,
        name="claude",
        key_env="MY_KEY",
        timeout=12.0,
        max_retries=2,
        retry=RetryPolicy(base_delay=1.0),
        context_windows={"claude-x": 200_000},
        api_version="2026-10-21",
    )
    assert provider.settings.timeout == httpx.Timeout(12.0)
    assert (provider.name, provider.key_env, provider.api_version) == (
        "claude",
        "MY_KEY",
        "2026-10-21",
    )
    assert provider.retry == RetryPolicy(max_retries=2, base_delay=1.0)


def test_an_unknown_keyword_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="timeuot"):
        OpenAIChatProvider(api_key=KEY, timeuot=3.0)  # type: ignore[call-arg]


def test_the_settings_value_keeps_its_key_secret() -> None:
    settings = HttpSettings(api_key=KEY)
    assert KEY not in repr(settings) and KEY not in str(settings)
    with pytest.raises(TypeError):
        pickle.dumps(settings)
    assert settings == HttpSettings(api_key=KEY)


def test_specs_still_build_the_adapters() -> None:
    provider, model = provider_from_spec("deepseek:deepseek-chat", api_key=KEY)
    assert isinstance(provider, DeepSeekProvider) and model == "deepseek-chat"
    assert provider.settings.transport is None
