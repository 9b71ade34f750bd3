"""Plain words for the cache numbers the inspector shows: why a request read nothing from
the prompt cache, and which drops of the cached fraction are harmless."""

from __future__ import annotations

from ...log.cache_health import RequestCache
from ...model.chunks import TokenUsage

PROVIDER_MIN_CACHE_TOKENS = 1024
"""The shortest prompt prefix providers cache: 1,024 tokens for OpenAI and for most
Anthropic models (some need 2,048 or 4,096); the simulator models 1,024. A shorter prompt
is never cached, so 0% cached is then expected, not a fault."""


def why_uncached(usage: TokenUsage | None) -> str | None:
    """Why `usage` shows nothing read from the cache (None when it read some, or billed no
    input): a prompt below the providers' minimum, a first write, or no write at all."""
    if usage is None or usage.cache_read or not usage.prompt_total:
        return None
    if usage.prompt_total < PROVIDER_MIN_CACHE_TOKENS:
        return (
            f"{usage.prompt_total:,} input tokens is below the {PROVIDER_MIN_CACHE_TOKENS:,}-token "
            "minimum providers cache: nothing could be cached yet"
        )
    if usage.cache_write:
        written = f"{usage.cache_write:,}"
        return f"the prefix was written to the cache ({written} tokens) for the next request"
    return (
        "nothing was written to the cache either: the prompt up to its last cache breakpoint "
        f"is below the {PROVIDER_MIN_CACHE_TOKENS:,}-token minimum, or the provider does not cache"
    )


def harmless(request: RequestCache) -> bool:
    """Whether a request's drop lost nothing cached (new input grew faster than the
    cached part): shown, but not as a fault."""
    return request.drop is not None and request.drop.cause == "new-input"
