"""The runtime's side of budgets: the account each budgeted agent starts with (folded from
its log and its subagents' on resume), subagents joined to their parent's account, and
what the stored sessions of a tree spent (docs/budgets.md)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ...actors.loop.actor import LoopActor
from ..control.accounts import Account, Canceller
from ..control.options import AgentOptions
from ..errors import BudgetError, PriceUnknown
from ..log.ledger import session_ledger
from ..log.prices import PRICES_NOTE, max_call_usd, prices_available, spend_of
from ..log.session import Session
from ..model.budget import NO_SPEND, Budget, Spend
from ..model.events import CompactionSummary, SessionEvent
from ..stores.base import Store
from ..stores.spend import tree_spend

BUDGET_LABEL = "actorloop.budget"
"""The session label a budgeted agent's spawn records its budget under, so `resume`
without options keeps the budget (docs/budgets.md)."""
LIMITS = ("usd", "tokens", "model_calls")


def labels_with_budget(options: AgentOptions) -> Mapping[str, Any]:
    """The labels a new session of `options` is stored with: its own, and its budget."""
    budget = options.budget
    if budget is None:
        return options.labels
    limits = {
        name: value
        for name, value in zip(LIMITS, (budget.usd, budget.tokens, budget.model_calls), strict=True)
        if value is not None
    }
    return {**options.labels, BUDGET_LABEL: limits}


def stored_budget(labels: Mapping[str, Any]) -> tuple[dict[str, Any], Budget | None]:
    """A stored session's labels without the budget label, and the budget it records
    (None: none); BudgetError for a budget label that is no budget."""
    rest = {key: value for key, value in labels.items() if key != BUDGET_LABEL}
    limits = labels.get(BUDGET_LABEL)
    if limits is None:
        return rest, None
    if not isinstance(limits, Mapping) or set(limits) - set(LIMITS):
        raise BudgetError(f"label {BUDGET_LABEL!r} is not a budget: {limits!r}")
    try:
        return rest, Budget(**{key: limits[key] for key in LIMITS if key in limits})
    except ValueError as exc:
        raise BudgetError(f"label {BUDGET_LABEL!r}: {exc}") from exc


class Budgets:
    """Attaches accounts to budgeted loops; one per runtime."""

    def __init__(self, store: Store, loops: Mapping[str, LoopActor]) -> None:
        self._store = store
        self._loops = loops
        self._resumed: dict[str, Spend] = {}
        self._observed: dict[str, Callable[[], None]] = {}
        """Budgeted sessions whose summarizer calls are charged as they are logged."""

    def check(self, options: AgentOptions, provider: str) -> None:
        """Refuse a dollar budget for a model with no known price up front (PriceUnknown),
        before anything is created: it could not reserve a single call."""
        budget = options.budget
        if budget is None or budget.usd is None:
            return
        if max_call_usd(1, 1, options.model, provider) is None:
            raise PriceUnknown(
                f"a dollar budget is set but model {options.model!r} has no known price "
                f"({PRICES_NOTE if not prices_available() else 'not in genai-prices'})"
            )

    async def preload(self, session: Session, options: AgentOptions) -> None:
        """Before a resumed budgeted loop starts: what its tree spent so far, from its own
        log and the stored logs of its subagents (the ledger survives a crash)."""
        if options.budget is None:
            return
        own = session_ledger(session.meta, session.events).total
        below = await tree_spend(self._store, session.id, include_root=False)
        self._resumed[session.id] = own + below.total

    def attach(self, loop: LoopActor, options: AgentOptions) -> None:
        """Give a starting loop its own root account if its options carry a budget."""
        spent = self._resumed.pop(loop.session.id, NO_SPEND)
        if options.budget is not None:
            loop.account = Account(options.budget, None, spent, cancel=_canceller(loop))
            self._charge_summaries(loop)

    def adopt(self, parent_id: str, child_id: str) -> None:
        """Charge the live subagent `child_id` to its live parent's account: its own budget
        is kept as a further limit on its subtree only if it differs from every budget
        above it."""
        parent, child = self._loops.get(parent_id), self._loops.get(child_id)
        above = parent.account if parent is not None else None
        if above is None or child is None:
            return
        own = child.options.budget
        budget: Budget | None = own
        if own is None or any(account.budget == own for account in above.chain()):
            budget = None
        spent = child.account.spent if child.account is not None else NO_SPEND
        child.account = Account(budget, above, NO_SPEND, cancel=_canceller(child))
        if spent != NO_SPEND:
            child.account.charge(spent)
        self._charge_summaries(child)

    def _charge_summaries(self, loop: LoopActor) -> None:
        """Charge the loop's summarizer calls (not reserved: the compaction gate runs
        before the step's reservation) to its account as their `compaction/summary` is
        logged."""
        if loop.session.id in self._observed:
            return

        def charge(event: SessionEvent) -> None:
            data = event.data
            if isinstance(data, CompactionSummary) and loop.account is not None:
                loop.account.charge(spend_of(data.usage, data.model, data.provider))

        self._observed[loop.session.id] = loop.session.observe(charge)

    def detach(self, loop: LoopActor) -> None:
        """A finished loop takes no more cancels (its account's spend stays in the tree). A
        hold a failed loop left open is charged at what it held, as the ledger counts it,
        so no reservation of the tree waits for it forever."""
        if loop.account is not None:
            loop.account.cancel = None
        unobserve = self._observed.pop(loop.session.id, None)
        if unobserve is not None:
            unobserve()
        open_hold = loop.budget_hold
        if open_hold is not None:
            loop.budget_hold = None
            open_hold.hold.account.settle(open_hold.hold, open_hold.hold.amount)


def _canceller(loop: LoopActor) -> Canceller:
    def cancel(reason: str) -> None:
        # The running turn only: queued work meets the exhausted budget at its first call,
        # and background work is stopped where it runs (every agent of the tree is told).
        if not loop.closed:
            loop.cancel(reason, True)

    return cancel
