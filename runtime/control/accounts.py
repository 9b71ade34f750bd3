"""Budget accounts: one per agent of a budgeted tree, each charged with its own calls and
its subagents' (reserve, then settle), checked against every budget above it; a reservation
that only the calls in flight keep out waits for them to settle; an exhausted budget stops
the agents drawing from it (docs/budgets.md)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import trio
from attrs import frozen

from ..errors import PriceUnknown
from ..model.budget import NO_SPEND, Budget, Spend

Canceller = Callable[[str], None]
"""Cancels one agent's running turn and background work, with a reason."""

EXHAUSTED = "budget exhausted"
"""The cancel reason of the agents an exhausted budget stops."""


@frozen
class Hold:
    """One granted reservation: what it holds on every account of its chain."""

    account: Account
    amount: Spend


class Account:
    """The spend of one agent and its subagents (`spent`), what their calls in flight hold
    (`reserved`), and the agent's own `budget` (None: only the budgets above apply)."""

    __slots__ = (
        "_settled",
        "budget",
        "cancel",
        "children",
        "exhausted",
        "parent",
        "reserved",
        "spent",
    )

    def __init__(
        self,
        budget: Budget | None,
        parent: Account | None = None,
        spent: Spend = NO_SPEND,
        cancel: Canceller | None = None,
    ) -> None:
        self.budget = budget
        self.parent = parent
        self.spent = spent
        """Settled spend of the subtree, reservations a crash left open included."""
        self.reserved = NO_SPEND
        self.cancel = cancel
        self.children: list[Account] = []
        self.exhausted: str | None = None
        """Why this account's budget refused a reservation, once it has."""
        self._settled: trio.lowlevel.ParkingLot | None = None
        """Reservations waiting for a call in flight to settle; made by the first."""
        if parent is not None:
            parent.children.append(self)

    def chain(self) -> Iterator[Account]:
        """This account, then each one above it up to the root."""
        account: Account | None = self
        while account is not None:
            yield account
            account = account.parent

    def subtree(self) -> Iterator[Account]:
        """This account and every one below it."""
        stack = [self]
        while stack:
            account = stack.pop()
            yield account
            stack.extend(account.children)

    def reserve(self, amount: Spend) -> Hold | Account:
        """Hold `amount` on every account of the chain, or the account that refuses it
        (nothing held then): one whose budget is exhausted, or whose budget `amount` would
        exceed with what its calls in flight hold (`waits_for` tells the two apart).
        PriceUnknown if a dollar limit applies and `amount` has no price."""
        for account in self.chain():
            if account.budget is not None and account._over(account.reserved + amount):
                return account
        for account in self.chain():
            account.reserved += amount
        return Hold(self, amount)

    def waits_for(self, amount: Spend) -> bool:
        """Whether this refusing account would take `amount` once its calls in flight
        settle (they hold more than they may cost); if not, it is now exhausted."""
        if self.exhausted is None and self.reserved.model_calls and not self._over(amount):
            return True
        if self.exhausted is None:
            limit = self._limit(amount) or self._limit(self.reserved + amount)
            self.exhausted = f"the budget {limit} would be exceeded"
        return False

    async def settled(self) -> None:
        """Wait until one of this account's calls in flight settles."""
        if self._settled is None:
            self._settled = trio.lowlevel.ParkingLot()
        await self._settled.park()

    def _over(self, amount: Spend) -> bool:
        return self.exhausted is not None or self._limit(amount) is not None

    def _limit(self, amount: Spend) -> str | None:
        """The limit `spent + amount` exceeds (None: none does)."""
        budget = self.budget
        assert budget is not None
        after = self.spent + amount
        if budget.model_calls is not None and after.model_calls > budget.model_calls:
            return f"model_calls={budget.model_calls}"
        if budget.tokens is not None and after.tokens > budget.tokens:
            return f"tokens={budget.tokens}"
        if budget.usd is not None:
            if amount.usd is None:
                raise PriceUnknown(
                    "a dollar budget is set but the model's price is unknown "
                    "(not in genai-prices, or the `prices` extra is not installed)"
                )
            if after.usd is None or after.usd > budget.usd:
                return f"usd={budget.usd}"
        return None

    def charge(self, spend: Spend) -> None:
        """Charge `spend` (a call that reserved nothing: a summarizer's) up the chain."""
        for account in self.chain():
            account.spent += spend

    def settle(self, hold: Hold, actual: Spend) -> None:
        """Release `hold` and charge what the call really cost, up the chain; wake the
        reservations waiting on any of those accounts."""
        for account in hold.account.chain():
            account.reserved -= hold.amount
            if not account.reserved.model_calls:
                account.reserved = NO_SPEND  # no float residue once nothing is held
            account.spent += actual
            if account._settled is not None:
                account._settled.unpark_all()

    def stop_subtree(self, reason: str, refused: Account) -> int:
        """Cancel the running turn of every agent drawing from this account's budget but
        those on `refused`'s chain: the agent whose reservation was refused ends its turn
        `budget_exhausted` itself, and each one above it (this account's own among them)
        meets the exhausted budget at its next call — an awaiting parent gets its child's
        failure as the tool's result first. How many were told."""
        spared = {id(account) for account in refused.chain()}
        told = 0
        for account in self.subtree():
            if id(account) not in spared and account.cancel is not None:
                account.cancel(reason)
                told += 1
        return told
