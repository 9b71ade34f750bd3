"""Prices (runtime/log/prices.py): genai-prices applied to recorded usage — the linear rates
read once per model give exactly what genai-prices computes, tiered prices are left to it,
an unknown model is None (never zero), and dollars format with four significant digits."""

from __future__ import annotations

import pytest

from actorloop.runtime.log.prices import format_usd, max_call_usd, price_usage
from actorloop.runtime.model.chunks import TokenUsage

genai_prices = pytest.importorskip("genai_prices")

USAGES = (
    TokenUsage(input=1234, output=567, cache_read=890, cache_write=12, reasoning=100),
    TokenUsage(input=300_000, output=10),
    TokenUsage(),
)


def direct(usage: TokenUsage, model: str, provider_id: str) -> float:
    return float(
        genai_prices.calc_price(
            genai_prices.Usage(
                input_tokens=usage.input + usage.cache_read + usage.cache_write,
                cache_read_tokens=usage.cache_read,
                cache_write_tokens=usage.cache_write,
                output_tokens=usage.output,
            ),
            model,
            provider_id=provider_id,
        ).total_price
    )


@pytest.mark.parametrize(
    ("model", "provider", "provider_id"),
    [
        ("gpt-4o-mini", "openai", "openai"),
        ("o3-mini", "openai-responses", "openai"),
        ("claude-sonnet-4-5", "anthropic", "anthropic"),  # tiered above 200k input
        ("gpt-4o-mini", "scripted", "openai"),  # an unknown provider: the model decides
    ],
)
def test_prices_are_genai_prices_on_the_recorded_buckets(
    model: str, provider: str, provider_id: str
) -> None:
    for usage in USAGES:
        assert price_usage(usage, model, provider) == direct(usage, model, provider_id)


def test_unknown_models_price_as_unknown() -> None:
    assert price_usage(TokenUsage(input=10), "sim-1", "sim") is None
    assert max_call_usd(10, 10, "sim-1", None) is None
    # The most a call may cost: its input at the dearer of the uncached and write rates.
    most = max_call_usd(1000, 100, "claude-sonnet-4-5", "anthropic")
    assert most == direct(
        TokenUsage(cache_write=1000, output=100), "claude-sonnet-4-5", "anthropic"
    )


def test_format_usd() -> None:
    assert format_usd(None) == "?"
    assert format_usd(0) == "$0"
    assert format_usd(0.0004455) == "$0.0004455"
    assert format_usd(1.5) == "$1.500"
    assert format_usd(1234.5) == "$1,234.500"
