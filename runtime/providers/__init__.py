"""Model providers: the seam, deterministic test providers, the simulator and HTTP adapters.

Re-exported lazily: importing the `Provider` seam (`providers.base`) does not load httpx.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

if TYPE_CHECKING:
    from ..errors import ProviderSpecError
    from .anthropic import AnthropicProvider
    from .base import ModelInfo, Provider
    from .openai import DeepSeekProvider, OpenAIChatProvider
    from .registry import provider_from_spec
    from .responses import OpenAIResponsesProvider
    from .retry import RetryPolicy
    from .settings import HttpSettings
    from .sim import SimProvider

__getattr__, __dir__ = lazy_exports(
    globals(),
    {
        "AnthropicProvider": "actorloop.runtime.providers.anthropic",
        "DeepSeekProvider": "actorloop.runtime.providers.openai",
        "HttpSettings": "actorloop.runtime.providers.settings",
        "ModelInfo": "actorloop.runtime.providers.base",
        "OpenAIChatProvider": "actorloop.runtime.providers.openai",
        "OpenAIResponsesProvider": "actorloop.runtime.providers.responses",
        "Provider": "actorloop.runtime.providers.base",
        "ProviderSpecError": "actorloop.runtime.errors",
        "RetryPolicy": "actorloop.runtime.providers.retry",
        "SimProvider": "actorloop.runtime.providers.sim",
        "provider_from_spec": "actorloop.runtime.providers.registry",
    },
)

__all__ = [
    "AnthropicProvider",
    "DeepSeekProvider",
    "HttpSettings",
    "ModelInfo",
    "OpenAIChatProvider",
    "OpenAIResponsesProvider",
    "Provider",
    "ProviderSpecError",
    "RetryPolicy",
    "SimProvider",
    "provider_from_spec",
]
