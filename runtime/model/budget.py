"""Budgets and spend: the limit a subagent tree shares (`Budget`), what it spent (`Spend`),
and the two ledger events a budgeted model call leaves in the log (docs/spec/budgets.md)."""

from __future__ import annotations

from typing import Any

from attrs import field, frozen

from .chunks import TokenUsage


def _none_or_non_negative(_instance: object, attribute: Any, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        name = getattr(attribute, "name", "value")
        raise ValueError(f"Budget.{name} must be None or a number >= 0, got {value!r}")


@frozen
class Budget:
    """The most an agent and its subagents may spend: dollars, tokens, model calls.

    Each limit is optional (None: no limit on it). `usd` needs a price for the model
    (the `prices` extra, genai-prices); `tokens` counts billed input (uncached, cache
    read, cache write) plus output of every model call; `model_calls` counts the calls.
    """

    usd: float | None = field(default=None, validator=_none_or_non_negative)
    tokens: int | None = field(default=None, validator=_none_or_non_negative)
    model_calls: int | None = field(default=None, validator=_none_or_non_negative)

    @property
    def unlimited(self) -> bool:
        """No limit is set at all."""
        return self.usd is None and self.tokens is None and self.model_calls is None


def add_usd(a: float | None, b: float | None) -> float | None:
    """Dollars added, an unknown price making the sum unknown (never zero)."""
    return None if a is None or b is None else a + b


@frozen
class Spend:
    """What some model calls cost: tokens (billed input plus output), calls, and dollars
    (None when a call's price is unknown: the model is not in genai-prices, or the
    `prices` extra is not installed)."""

    tokens: int = 0
    model_calls: int = 0
    usd: float | None = 0.0

    def __add__(self, other: Spend) -> Spend:
        return Spend(
            self.tokens + other.tokens,
            self.model_calls + other.model_calls,
            add_usd(self.usd, other.usd),
        )

    def __sub__(self, other: Spend) -> Spend:
        usd = None if self.usd is None or other.usd is None else self.usd - other.usd
        return Spend(self.tokens - other.tokens, self.model_calls - other.model_calls, usd)


NO_SPEND = Spend()


def usage_tokens(usage: TokenUsage) -> int:
    """The tokens a call is billed for: its billed input plus its output (reasoning is part
    of the output)."""
    return usage.prompt_total + usage.output


@frozen
class BudgetReserve:
    """`budget/reserve`: before a model call leaves, the most it may cost is held against
    the budget: the estimated input plus the most output it may produce, one call, and
    those tokens' price (None: no dollar limit applies, so none was needed)."""

    turn: int
    step: int
    provider: str
    model: str
    tokens: int
    usd: float | None = None


@frozen
class BudgetSettle:
    """`budget/settle`: a reserved call that left no `assistant/message` (it failed or was
    cancelled) is settled with the usage the provider reported (None: none reported)."""

    turn: int
    step: int
    usage: TokenUsage | None = None
