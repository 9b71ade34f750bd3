"""Budgets (docs/budgets.md): a reservation before each model call, settled by the recorded
usage; an exhausted budget ends the turn `budget_exhausted` before any request leaves;
the ledger is part of the log (verify and rebuild hold byte for byte)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio
import trio.testing
from helpers import open_runtime

from actorloop.runtime import AgentOptions
from actorloop.runtime.cli.render import timeline
from actorloop.runtime.control.accounts import Account, Hold
from actorloop.runtime.errors import PriceUnknown
from actorloop.runtime.log.ledger import ledger_of
from actorloop.runtime.log.request import Request
from actorloop.runtime.log.verify import verify_log
from actorloop.runtime.model.budget import NO_SPEND, Budget, BudgetReserve, Spend
from actorloop.runtime.model.chunks import StreamChunk, TokenUsage
from actorloop.runtime.model.events import TurnEnd
from actorloop.runtime.providers.base import ModelInfo
from actorloop.runtime.testing import ScriptedProvider, reply, tool_call

USAGE = TokenUsage(input=100, output=20)


def echo_tool() -> object:
    from actorloop.runtime import Tool

    async def run(args: dict[str, object], ctx: object) -> str:
        return "done"

    return Tool("echo", "echo", {"type": "object"}, run)


async def test_model_calls_budget_ends_the_turn_before_the_request() -> None:
    provider = ScriptedProvider([tool_call("c1", "echo")] * 5)
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(
            AgentOptions(model="m", tools=(echo_tool(),), budget=Budget(model_calls=2))
        )
        result = await agent.send("go")
        assert result.reason == "budget_exhausted"
        assert result.code == "BUDGET_EXHAUSTED"
        assert provider.calls == 2
        events = agent.session.events
        assert [e.type for e in events].count("budget/reserve") == 2
        end = [e.data for e in events if isinstance(e.data, TurnEnd)][-1]
        assert end.reason.kind == "budget_exhausted"
        spent = agent.spent()
        assert spent.model_calls == 2
        assert spent == ledger_of(events).total
        # The ledger takes no part in the requests: the log verifies byte for byte.
        report = verify_log(agent.session.meta, events)
        assert report.requests_checked == 2
        # `sessions show` says which limit ended the turn.
        shown = [line.plain for line in timeline(agent.session.meta, events)]
        assert "budget_exhausted (the budget model_calls=2 would be exceeded)" in shown[-1]
        # Exhausted stays exhausted: the next turn sends nothing either.
        again = await agent.send("more")
        assert again.reason == "budget_exhausted"
        assert provider.calls == 2


async def test_tokens_budget_reserves_input_estimate_plus_max_output() -> None:
    provider = ScriptedProvider([reply("a", USAGE), reply("b", USAGE), reply("c", USAGE)])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(AgentOptions(model="m", max_tokens=100, budget=Budget(tokens=400)))
        assert (await agent.send("one")).reason == "completed"
        reserve = next(e.data for e in agent.session.events if isinstance(e.data, BudgetReserve))
        assert reserve.tokens > 100  # the input estimate plus max_tokens
        assert agent.spent() == Spend(120, 1, None)  # "m" has no price: unknown, not zero
        assert (await agent.send("two")).reason == "completed"
        # 240 spent: a third call may cost more than the 160 left, so it is not made.
        assert (await agent.send("three")).reason == "budget_exhausted"
        assert provider.calls == 2


async def test_a_dollar_budget_needs_a_price() -> None:
    provider = ScriptedProvider([reply("a", USAGE)])
    async with open_runtime(provider) as rt:
        with pytest.raises(PriceUnknown, match="no-such-model"):
            await rt.spawn(AgentOptions(model="no-such-model", budget=Budget(usd=1.0)))
        assert await rt.list_sessions() == ()  # refused before anything was created
        # A model that lost its price later (a reconfigure) fails the turn, typed.
        agent = await rt.spawn(AgentOptions(model="gpt-4o-mini", budget=Budget(usd=1.0)))
        agent.reconfigure(model="no-such-model")
        result = await agent.send("hi")
        assert (result.reason, result.code) == ("error", "PRICE_UNKNOWN")
        assert provider.calls == 0
    assert issubclass(PriceUnknown, LookupError)
    assert PriceUnknown.code == "PRICE_UNKNOWN"


def test_budget_refuses_negative_limits() -> None:
    with pytest.raises(ValueError):
        Budget(tokens=-1)


WITHOUT_PRICES = r"""
import sys
sys.modules["genai_prices"] = None  # as if the `prices` extra were not installed
import trio
from actorloop.runtime import AgentOptions, Runtime
from actorloop.runtime.errors import PriceUnknown
from actorloop.runtime.log.prices import PRICES_NOTE, prices_available, price_usage
from actorloop.runtime.model.budget import Budget
from actorloop.runtime.model.chunks import StreamChunk, TokenUsage
from actorloop.runtime.testing import ScriptedProvider, reply


async def main():
    assert not prices_available()
    assert price_usage(TokenUsage(input=10, output=5), "gpt-4o-mini", "openai") is None
    assert "prices" in PRICES_NOTE and "genai-prices" in PRICES_NOTE
    provider = ScriptedProvider([reply("a"), reply("b")])
    async with Runtime.open(provider=provider) as rt:
        free = await rt.spawn(AgentOptions(model="gpt-4o-mini"))
        await free.send("hi")
        spent = free.spent()
        assert spent.model_calls == 1 and spent.usd is None, spent  # unknown, never zero
        tokens_only = await rt.spawn(AgentOptions(model="gpt-4o-mini", budget=Budget(tokens=10**6)))
        assert (await tokens_only.send("hi")).reason == "completed"
        try:
            await rt.spawn(AgentOptions(model="gpt-4o-mini", budget=Budget(usd=1.0)))
        except PriceUnknown as exc:
            assert "prices" in str(exc), exc
        else:
            raise AssertionError("a dollar budget without prices was accepted")
        assert provider.calls == 2
    print("OK")


trio.run(main)
"""


def test_without_the_prices_extra_dollars_are_unknown() -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_PRICES], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "OK"


class Gated:
    """Answers at once, but holds session `held`'s first call until `release` is set."""

    name = "gated"

    def __init__(self, held: str) -> None:
        self.held = held
        self.order: list[str] = []
        self.started = trio.Event()
        self.release = trio.Event()

    def model_info(self, model: str) -> ModelInfo | None:
        return ModelInfo(None)

    async def stream(self, request: Request) -> AsyncIterator[StreamChunk]:
        self.order.append(f"request {request.session_id}")
        if request.session_id == self.held and not self.started.is_set():
            self.started.set()
            await self.release.wait()
        for chunk in reply("ok", TokenUsage(input=5, output=5)):
            yield chunk
        self.order.append(f"answered {request.session_id}")


async def test_a_reservation_kept_out_by_calls_in_flight_waits_for_them() -> None:
    provider = Gated("a")
    async with open_runtime(provider) as rt:
        # Alone, a call reserves about 102 tokens (its input, max_tokens 100); two do not
        # fit in 120 at once.
        options = AgentOptions(model="m", max_tokens=100, budget=Budget(tokens=120))
        a = await rt.spawn(options, session_id="a")
        b = await rt.spawn(AgentOptions(model="m", max_tokens=100), session_id="b")
        rt.budgets.adopt("a", "b")  # b draws from a's budget, as a subagent does
        async with trio.open_nursery() as nursery:
            nursery.start_soon(a.send, "first")
            await provider.started.wait()
            nursery.start_soon(b.send, "second")
            await trio.testing.wait_all_tasks_blocked()
            assert provider.order == ["request a"]  # b waits: a's call holds the room
            provider.release.set()
        assert provider.order == ["request a", "answered a", "request b", "answered b"]
        assert a.spent() == Spend(20, 2, None)  # both calls, charged to the root
        assert b.spent() == Spend(10, 1, None)
        # 20 spent: a third call's ~103 would pass 120, with nothing in flight to wait for.
        assert (await b.send("third")).reason == "budget_exhausted"


async def test_summarizer_calls_are_charged_as_they_are_logged() -> None:
    summary_usage = TokenUsage(input=50, output=7)
    answers = [reply(letter * 400, USAGE) for letter in "abc"]
    provider = ScriptedProvider([*answers, reply("SUMMARY of it", summary_usage)])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(AgentOptions(model="m", budget=Budget(tokens=10**6)))
        for text in ("one", "two", "three"):
            await agent.send(text * 50)
        assert (await agent.compact()).reason == "completed"
        ledger = ledger_of(agent.session.events)
        assert ledger.compaction == Spend(57, 1, None)
        assert agent.spent() == ledger.total == Spend(3 * 120 + 57, 4, None)


def test_accounts_check_every_budget_up_the_chain() -> None:
    root = Account(Budget(usd=1.0, model_calls=10))
    team = Account(Budget(tokens=1000), parent=root)
    worker = Account(None, parent=team)
    call = Spend(400, 1, 0.3)
    first = worker.reserve(call)
    assert isinstance(first, Hold)
    assert root.reserved == team.reserved == worker.reserved == call
    # A second call fits the root's dollars but not the team's tokens while the first holds.
    refused = worker.reserve(Spend(700, 1, 0.3))
    assert refused is team and team.waits_for(Spend(700, 1, 0.3))
    worker.settle(first, Spend(100, 1, 0.1 + 0.2 - 0.2))  # float residue is not kept
    assert root.reserved == NO_SPEND and root.spent.model_calls == 1
    second = worker.reserve(Spend(700, 1, 0.3))
    assert isinstance(second, Hold)
    worker.settle(second, Spend(700, 1, 0.3))
    # 800 spent: 400 more can never fit, nothing is in flight to wait for.
    refused = worker.reserve(call)
    assert refused is team and not team.waits_for(call)
    assert team.exhausted == "the budget tokens=1000 would be exceeded"
    assert root.exhausted is None  # the root's own budget still has room
    assert isinstance(Account(None, parent=root).reserve(call), Hold)
    with pytest.raises(PriceUnknown):
        root.reserve(Spend(1, 1, None))


async def test_an_awaited_subagent_draws_from_its_parents_budget() -> None:
    from actorloop.runtime.host.subagents import subagent_tool
    from actorloop.runtime.model.events import ToolResultEvent

    provider = ScriptedProvider(
        [tool_call("d1", "delegate", {"task": "dig"}), tool_call("c1", "echo")]
        + [tool_call("c2", "echo")] * 3
    )
    async with open_runtime(provider) as rt:
        child = AgentOptions(model="m", tools=(echo_tool(),))
        parent = await rt.spawn(
            AgentOptions(
                model="m",
                tools=(subagent_tool(rt, options=child, keep_child=True),),
                budget=Budget(model_calls=2),
            ),
            session_id="p",
        )
        result = await parent.send("go")
        # Call 1: the parent delegates; call 2: the child; the child's next call is refused,
        # its failure is the parent's tool result, and the parent's next call is refused too.
        assert result.reason == "budget_exhausted"
        assert provider.calls == 2
        kid = rt.get("p.d1")
        assert kid is not None
        assert _ends(kid.session.events) == ["budget_exhausted"]
        failed = [e.data for e in parent.session.events if isinstance(e.data, ToolResultEvent)]
        assert failed[0].is_error and "budget_exhausted" in failed[0].content[0].text
        assert parent.spent().model_calls == 2 and kid.spent().model_calls == 1


def _ends(events: tuple[object, ...]) -> list[str]:
    return [e.data.reason.kind for e in events if isinstance(e.data, TurnEnd)]  # type: ignore[attr-defined]
