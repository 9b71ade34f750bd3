"""Dollar prices of recorded usage through genai-prices (the optional `prices` extra):
a model it does not know, or no extra installed, prices as unknown (None), never as zero."""

from __future__ import annotations

import functools
import math
from decimal import Decimal
from typing import Any

from attrs import frozen

from ..model.budget import Spend, usage_tokens
from ..model.chunks import TokenUsage

PRICES_NOTE = "dollars need the `prices` extra (pip install 'actorloop[prices]': genai-prices)"
"""Why every price is unknown when genai-prices is not installed."""

PROVIDER_IDS = {"openai-responses": "openai"}
"""actorloop provider names whose genai-prices provider id is spelled otherwise; any other
name is tried as it is, then the model alone decides (a scripted or simulated provider
answering as `gpt-4o-mini` prices as OpenAI's)."""


@functools.cache
def _genai_prices() -> Any:
    try:
        import genai_prices
    except ImportError:
        return None
    return genai_prices


def prices_available() -> bool:
    """Whether genai-prices is importable (else every price is None, see `PRICES_NOTE`)."""
    return _genai_prices() is not None


@functools.cache
def _provider_id(provider: str | None, model: str) -> tuple[bool, str | None]:
    """Whether genai-prices knows `model` at all, and the provider id to ask it with."""
    prices = _genai_prices()
    candidates = [PROVIDER_IDS.get(provider, provider)] if provider else []
    for candidate in (*candidates, None):
        try:
            prices.calc_price(prices.Usage(input_tokens=0), model, provider_id=candidate)
        except LookupError:
            continue
        return True, candidate
    return False, None


def price_usage(usage: TokenUsage, model: str, provider: str | None = None) -> float | None:
    """The dollars genai-prices charges for `usage` on `model` (at `provider`), or None
    when the price is unknown. Recorded buckets map as genai-prices counts them: its input
    includes cache reads and writes; output includes reasoning."""
    key = (model, provider)
    if key in _RATES:
        rates = _RATES[key]
    elif _genai_prices() is None:
        return None
    else:
        rates = _RATES[key] = _look_up_rates(model, provider)
    if rates is None:
        return None
    if isinstance(rates, _Rates):
        return rates.price(usage)
    return float(_calc(rates, model, usage))


@frozen
class _Rates:
    """A linear price (no tiers): a per-request base and a price per million tokens of
    each bucket, read from genai-prices once per model (its calculation is ~0.1 ms; a
    step prices a reservation and a settlement)."""

    base: Decimal
    uncached: Decimal
    cache_read: Decimal
    cache_write: Decimal
    output: Decimal

    def price(self, usage: TokenUsage) -> float:
        total = (
            usage.input * self.uncached
            + usage.cache_read * self.cache_read
            + usage.cache_write * self.cache_write
            + usage.output * self.output
        )
        return float(self.base + total / MILLION)


MILLION = 1_000_000


def _calc(provider_id: str | None, model: str, usage: TokenUsage) -> Decimal:
    prices = _genai_prices()
    calc = prices.calc_price(
        prices.Usage(
            input_tokens=usage.prompt_total,
            cache_read_tokens=usage.cache_read,
            cache_write_tokens=usage.cache_write,
            output_tokens=usage.output,
        ),
        model,
        provider_id=provider_id,
    )
    total: Decimal = calc.total_price
    return total


_RATES: dict[tuple[str, str | None], _Rates | str | None] = {}
"""What genai-prices said of each (model, provider) priced in this process (see `_look_up_rates`),
or was told by `seed_rates`."""


def _look_up_rates(model: str, provider: str | None) -> _Rates | str | None:
    """`model`'s linear rates; its genai-prices provider id when its price has tiers (each
    usage is then priced by genai-prices itself); None when it has no known price."""
    known, provider_id = _provider_id(provider, model)
    if not known:
        return None
    prices = _genai_prices()
    probe = prices.calc_price(prices.Usage(input_tokens=0), model, provider_id=provider_id)
    tiered = getattr(prices.types, "TieredPrices", ())
    if any(isinstance(value, tiered) for value in vars(probe.model_price).values()):
        return provider_id or ""
    base = _calc(provider_id, model, TokenUsage())

    def rate(usage: TokenUsage) -> Decimal:
        return _calc(provider_id, model, usage) - base

    return _Rates(
        base,
        rate(TokenUsage(input=MILLION)),
        rate(TokenUsage(cache_read=MILLION)),
        rate(TokenUsage(cache_write=MILLION)),
        rate(TokenUsage(output=MILLION)),
    )


def spend_of(usage: TokenUsage | None, model: str, provider: str | None) -> Spend:
    """One model call's `Spend`: its tokens and price (a call with no reported usage
    counts as one call of zero tokens and zero dollars)."""
    if usage is None:
        return Spend(0, 1, 0.0)
    return Spend(usage_tokens(usage), 1, price_usage(usage, model, provider))


def max_call_usd(
    input_tokens: int, output_tokens: int, model: str, provider: str | None
) -> float | None:
    """The most a call may cost: `input_tokens` of input, all of it billed at the dearer
    of the uncached and the cache-write rate, and `output_tokens` of output."""
    uncached = price_usage(TokenUsage(input=input_tokens, output=output_tokens), model, provider)
    written = price_usage(
        TokenUsage(cache_write=input_tokens, output=output_tokens), model, provider
    )
    if uncached is None or written is None:
        return None
    return max(uncached, written)


UNKNOWN_USD = "?"
"""How a listing shows a price it does not know."""


def format_usd(usd: float | None) -> str:
    """Dollars for a listing: four significant digits below a cent (`$0.004455`), cents
    and a tenth above (`$1.234`); `?` when unknown."""
    if usd is None:
        return UNKNOWN_USD
    if usd == 0:
        return "$0"
    decimals = min(8, max(3, 3 - math.floor(math.log10(abs(usd)))))
    return f"${usd:,.{decimals}f}"


@frozen
class KnownRates:
    """What genai-prices said of one model at one provider, in a form a cache can keep:
    linear `rates` (base, uncached, cache read, cache write, output: dollars per request
    and per million tokens, as decimal strings), or a price with tiers that genai-prices
    itself computes per call (`tiered_provider_id`), or no known price (neither)."""

    model: str
    provider: str | None
    rates: tuple[str, str, str, str, str] | None = None
    tiered_provider_id: str | None = None
    tiered: bool = False


def known_rates() -> tuple[KnownRates, ...]:
    """Every (model, provider) priced in this process so far (or seeded), to be cached."""
    known: list[KnownRates] = []
    for (model, provider), rates in _RATES.items():
        if isinstance(rates, _Rates):
            linear = (
                str(rates.base),
                str(rates.uncached),
                str(rates.cache_read),
                str(rates.cache_write),
                str(rates.output),
            )
            known.append(KnownRates(model, provider, rates=linear))
        elif isinstance(rates, str):
            known.append(KnownRates(model, provider, tiered_provider_id=rates or None, tiered=True))
        else:
            known.append(KnownRates(model, provider))
    return tuple(known)


def seed_rates(known: tuple[KnownRates, ...]) -> None:
    """Take `known` (from `known_rates` of an earlier process with the same genai-prices,
    the same day) as what genai-prices would say: a linear price is then computed without
    importing it (its import is ~0.2 s of CPU, most of a CLI listing's start)."""
    for entry in known:
        if entry.rates is not None:
            rates: _Rates | str | None = _Rates(*map(Decimal, entry.rates))
        elif entry.tiered:
            rates = entry.tiered_provider_id or ""
        else:
            rates = None
        _RATES[(entry.model, entry.provider)] = rates
