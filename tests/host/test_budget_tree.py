"""A budget shared by a subagent tree (docs/budgets.md): a coordinator with 20 background
subagents on a scripted provider stops, as a whole, when the budget is spent — no request
after the refusal, every other subagent's turn aborted, the bill bounded by the budget plus
one call per agent in flight — and the dollars shown are genai-prices applied to the
recorded usage."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
from helpers import open_runtime

from actorloop.runtime import AgentOptions, Tool
from actorloop.runtime.host.subagents import subagent_tool
from actorloop.runtime.log.request import Request
from actorloop.runtime.log.verify import verify_log
from actorloop.runtime.model.budget import Budget, BudgetSettle
from actorloop.runtime.model.chunks import StreamChunk, TokenUsage, UsageReport
from actorloop.runtime.model.events import AssistantMessage, SessionEvent, TurnEnd, TurnEndReason
from actorloop.runtime.providers.base import ModelInfo
from actorloop.runtime.stores.spend import tree_spend
from actorloop.runtime.testing import reply, tool_call, tool_calls

genai_prices = pytest.importorskip("genai_prices")

MODEL = "gpt-4o-mini"
CALL_USAGE = TokenUsage(input=900, output=100, cache_read=100)
CHILDREN = 20


def usd_of(usage: TokenUsage) -> float:
    """genai-prices on its own, as a user would call it on the recorded usage."""
    price = genai_prices.calc_price(
        genai_prices.Usage(
            input_tokens=usage.input + usage.cache_read + usage.cache_write,
            cache_read_tokens=usage.cache_read,
            cache_write_tokens=usage.cache_write,
            output_tokens=usage.output,
        ),
        MODEL,
        provider_id="openai",
    )
    return float(price.total_price)


def with_usage(chunks: tuple[StreamChunk, ...]) -> tuple[StreamChunk, ...]:
    return tuple(UsageReport(CALL_USAGE) if isinstance(c, UsageReport) else c for c in chunks)


class Fanout:
    """The coordinator (session `coord`) delegates 20 tasks in one step, then answers; every
    subagent calls a tool step after step, forever. Every request is recorded in `order`."""

    name = "openai"

    def __init__(self, order: list[tuple[str, str]]) -> None:
        self.order = order
        self.requests = 0

    def model_info(self, model: str) -> ModelInfo | None:
        return ModelInfo(None)

    async def stream(self, request: Request) -> AsyncIterator[StreamChunk]:
        self.requests += 1
        self.order.append(("request", request.session_id))
        if request.session_id == "coord":
            if len(request.messages) == 1:
                calls = [(f"d{i}", "delegate", {"task": f"task {i}"}) for i in range(CHILDREN)]
                chunks = with_usage(tool_calls(*calls))
            else:
                chunks = with_usage(reply("waiting"))
        else:
            chunks = with_usage(tool_call("w", "work"))
        for chunk in chunks:
            await trio.lowlevel.checkpoint()
            yield chunk


async def work(args: dict[str, Any], ctx: Any) -> str:
    await trio.lowlevel.checkpoint()
    return "worked"


async def test_twenty_background_subagents_share_one_budget() -> None:
    order: list[tuple[str, str]] = []
    provider = Fanout(order)
    budget = Budget(usd=40 * usd_of(CALL_USAGE))
    async with open_runtime(provider) as rt:

        def record(agent: Any, event: SessionEvent) -> None:
            data = event.data
            if isinstance(data, TurnEnd):
                if data.reason.kind == "budget_exhausted":
                    order.append(("exhausted", agent.id))
                order.append(("end", agent.id))

        rt.on("session/event", record)
        child_options = AgentOptions(
            model=MODEL, max_tokens=200, tools=(Tool("work", "w", {}, work),)
        )
        delegate = subagent_tool(rt, options=child_options, background=True, keep_child=True)
        coordinator = await rt.spawn(
            AgentOptions(model=MODEL, max_tokens=200, tools=(delegate,), budget=budget),
            session_id="coord",
        )
        first = await coordinator.send("fan out")
        # Its second step races the subagents for the budget: it answers, or the budget is
        # gone first and its own reservation is refused. (The budget's own agent is never
        # cancelled by it: it meets the exhausted budget at its next call.)
        assert first.reason in ("completed", "budget_exhausted")
        # Every subagent was spawned in that turn's tool step; each runs until stopped.
        children = [a for a in rt.agents if a.id != "coord"]
        assert len(children) == CHILDREN
        with trio.fail_after(10):
            for child in children:
                await child.wait_idle()

        # After the first refusal no request reaches the provider.
        exhausted_at = order.index(next(e for e in order if e[0] == "exhausted"))
        assert [e for e in order[exhausted_at:] if e[0] == "request"] == []

        # Every subagent's turn ended once the budget was spent, none on its own: cancelled
        # by the budget while its call was in flight (`aborted`), or refused at its next
        # reservation (`budget_exhausted`: the first refusal, and every reservation that
        # was waiting for calls in flight to settle and then met the exhausted budget).
        ends = [_last_end(a.session.events) for a in children]
        assert {end.kind for end in ends} <= {"aborted", "budget_exhausted"}
        assert all(end.reason == "budget exhausted" for end in ends if end.kind == "aborted")
        assert all(a.status == "idle" for a in children)
        for child in children:
            last = max(i for i, entry in enumerate(order) if entry == ("end", child.id))
            assert last > exhausted_at
            # Ledger events (settles of cut calls included) leave every request rebuildable
            # (verify_log raises at the first request that does not rebuild byte for byte).
            verify_log(child.session.meta, child.session.events)

        # The bill: at most the budget plus one call per agent that had a call in flight.
        # (a call cut by the cancel is billed what its stream reported: `budget/settle`)
        settled = [
            e.data
            for a in rt.agents
            for e in a.session.events
            if isinstance(e.data, (AssistantMessage, BudgetSettle))
        ]
        billed = sum(usd_of(d.usage) for d in settled if d.usage is not None)
        in_flight = CHILDREN + 1
        assert budget.usd is not None
        assert billed <= budget.usd + in_flight * usd_of(CALL_USAGE)

        # What `spent()` shows is genai-prices on the recorded usage, for the whole tree.
        spent = coordinator.spent()
        calls = len(settled)
        assert calls == provider.requests
        assert spent.model_calls == calls
        assert spent.usd == pytest.approx(billed)
        stored = await tree_spend(rt.store, "coord")
        assert stored.total.usd == pytest.approx(billed)
        assert stored.total.model_calls == calls


def _last_end(events: tuple[SessionEvent, ...]) -> TurnEndReason:
    ends = [e.data.reason for e in events if isinstance(e.data, TurnEnd)]
    return ends[-1]
