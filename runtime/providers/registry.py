"""Provider specs (`sim`, `sim:openai`, `openai:MODEL`, `openai-responses:MODEL`, ...) → a
configured provider and model."""

from __future__ import annotations

from collections.abc import Callable

from ..errors import ProviderSpecError
from .anthropic import AnthropicProvider
from .base import Provider
from .openai import DeepSeekProvider, OpenAIChatProvider
from .responses import OpenAIResponsesProvider
from .sim import SimProvider

SPEC_FORMS = (
    "sim, sim:anthropic, sim:openai, openai:MODEL, openai-responses:MODEL, anthropic:MODEL "
    "or deepseek:MODEL"
)

_HTTP: dict[str, Callable[..., Provider]] = {
    "openai": OpenAIChatProvider,
    "openai-responses": OpenAIResponsesProvider,
    "anthropic": AnthropicProvider,
    "deepseek": DeepSeekProvider,
}


def provider_from_spec(
    spec: str, *, base_url: str | None = None, api_key: str | None = None
) -> tuple[Provider, str | None]:
    """The provider for `spec` and the model it names (None for the simulator).

    The model is everything after the first colon, so `openai:ft:gpt-4o:org:id` works.
    HTTP providers read their key from the environment unless `api_key` is given.
    """
    kind, sep, rest = spec.strip().partition(":")
    if kind == "sim":
        mode = rest or "anthropic"
        if mode not in ("anthropic", "openai"):
            raise ProviderSpecError(spec, f"unknown simulator mode {mode!r} (anthropic, openai)")
        if base_url is not None or api_key is not None:
            raise ProviderSpecError(spec, "the simulator takes no base_url or api_key")
        return SimProvider("anthropic" if mode == "anthropic" else "openai"), None
    factory = _HTTP.get(kind)
    if factory is None:
        raise ProviderSpecError(spec, f"unknown provider; expected {SPEC_FORMS}")
    if not sep or not rest:
        raise ProviderSpecError(spec, f"missing model name; write {kind}:MODEL")
    if base_url is not None:
        return factory(base_url, api_key), rest
    return factory(api_key=api_key), rest
