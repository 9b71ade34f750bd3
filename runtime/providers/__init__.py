"""Model providers: the seam, deterministic test providers, the simulator and HTTP adapters."""

from actorloop.runtime.providers.anthropic import AnthropicProvider
from actorloop.runtime.providers.base import ModelInfo, Provider
from actorloop.runtime.providers.openai import DeepSeekProvider, OpenAIChatProvider
from actorloop.runtime.providers.registry import ProviderSpecError, provider_from_spec
from actorloop.runtime.providers.retry import RetryPolicy
from actorloop.runtime.providers.sim import SimProvider

__all__ = [
    "AnthropicProvider",
    "DeepSeekProvider",
    "ModelInfo",
    "OpenAIChatProvider",
    "Provider",
    "ProviderSpecError",
    "RetryPolicy",
    "SimProvider",
    "provider_from_spec",
]
