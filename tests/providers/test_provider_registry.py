"""`provider_from_spec`: specs map to configured providers and models; bad specs are typed."""

from __future__ import annotations

import pytest

from actorloop.runtime.providers.anthropic import AnthropicProvider
from actorloop.runtime.providers.openai import DeepSeekProvider, OpenAIChatProvider
from actorloop.runtime.providers.registry import ProviderSpecError, provider_from_spec
from actorloop.runtime.providers.responses import OpenAIResponsesProvider
from actorloop.runtime.providers.sim import SimProvider


@pytest.mark.parametrize(
    ("spec", "mode"),
    [("sim", "anthropic"), ("sim:anthropic", "anthropic"), ("sim:openai", "openai")],
)
def test_sim_specs(spec: str, mode: str) -> None:
    provider, model = provider_from_spec(spec)
    assert isinstance(provider, SimProvider) and provider.mode == mode
    assert model is None


@pytest.mark.parametrize(
    ("spec", "kind", "base", "model"),
    [
        ("openai:gpt-4o", OpenAIChatProvider, "https://api.openai.com/v1", "gpt-4o"),
        (
            "anthropic:claude-sonnet-4-5",
            AnthropicProvider,
            "https://api.anthropic.com",
            "claude-sonnet-4-5",
        ),
        ("deepseek:deepseek-chat", DeepSeekProvider, "https://api.deepseek.com", "deepseek-chat"),
        (
            "openai-responses:gpt-5",
            OpenAIResponsesProvider,
            "https://api.openai.com/v1",
            "gpt-5",
        ),
        (
            "openai:ft:gpt-4o:org:abc",
            OpenAIChatProvider,
            "https://api.openai.com/v1",
            "ft:gpt-4o:org:abc",
        ),
    ],
)
def test_http_specs(spec: str, kind: type, base: str, model: str) -> None:
    provider, named = provider_from_spec(spec)
    assert type(provider) is kind
    assert isinstance(provider, OpenAIChatProvider | AnthropicProvider | OpenAIResponsesProvider)
    assert provider.base_url == base and named == model


def test_base_url_and_key_are_passed_through() -> None:
    provider, model = provider_from_spec(
        "openai:local-model", base_url="http://127.0.0.1:8000/v1/", api_key="sk-local-123"
    )
    assert isinstance(provider, OpenAIChatProvider)
    assert provider.base_url == "http://127.0.0.1:8000/v1" and model == "local-model"
    assert "sk-local-123" not in repr(provider)
    assert provider.url == "http://127.0.0.1:8000/v1/chat/completions"


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("gemini:pro", "unknown provider; expected sim, sim:anthropic, sim:openai"),
        ("openai", "missing model name; write openai:MODEL"),
        ("anthropic:", "missing model name; write anthropic:MODEL"),
        ("sim:bard", "unknown simulator mode 'bard'"),
    ],
)
def test_bad_specs_raise_one_line_typed_errors(spec: str, problem: str) -> None:
    with pytest.raises(ProviderSpecError) as caught:
        provider_from_spec(spec)
    message = str(caught.value)
    assert "\n" not in message and problem in message and caught.value.spec == spec
    assert isinstance(caught.value, ValueError)


def test_sim_takes_no_endpoint() -> None:
    with pytest.raises(ProviderSpecError, match="no base_url"):
        provider_from_spec("sim", base_url="http://x")


def test_the_responses_adapter_is_exported_lazily() -> None:
    from actorloop.runtime import providers

    assert providers.OpenAIResponsesProvider is OpenAIResponsesProvider
    assert "OpenAIResponsesProvider" in dir(providers)
