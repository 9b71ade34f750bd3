"""The budget ledger is the log (docs/budgets.md): a process killed with SIGKILL while a
budgeted call is in flight leaves its reservation durable, and a resume charges it (with
the subagents' stored spend); a fork child is not charged for the history it shares and
leaves its parent's spend unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import kill_child, open_runtime, start_ready_child

from actorloop.runtime import AgentOptions
from actorloop.runtime.log.ledger import ledger_of, session_ledger
from actorloop.runtime.model.budget import Budget, BudgetReserve, Spend
from actorloop.runtime.model.chunks import TokenUsage
from actorloop.runtime.stores.loading import load_session
from actorloop.runtime.testing import ScriptedProvider, reply

USAGE = TokenUsage(input=300, output=50)
BUDGET = Budget(tokens=100_000, model_calls=10)

WORKER = r"""
import sys
import trio
from actorloop.runtime import AgentOptions, Runtime
from actorloop.runtime.host.subagents import subagent_tool
from actorloop.runtime.model.budget import Budget
from actorloop.runtime.model.chunks import TokenUsage
from actorloop.runtime.testing import reply, tool_call

USAGE = TokenUsage(input=300, output=50)


class Provider:
    name = "scripted"

    def __init__(self):
        self.calls = 0

    def model_info(self, model):
        return None

    async def stream(self, request):
        self.calls += 1
        if request.session_id != "root":
            chunks = reply("child answer", USAGE)  # the subagent answers at once
        elif self.calls == 1:
            chunks = tool_call("d1", "delegate", {"task": "sub"})
        else:
            print("READY", flush=True)  # the second root call is in flight: kill me now
            await trio.sleep_forever()
        for chunk in chunks:
            yield chunk


async def main(path):
    async with Runtime.open(store=f"sqlite:{path}", provider=Provider()) as rt:
        delegate = subagent_tool(rt, keep_child=True)
        budget = Budget(tokens=100_000, model_calls=10)
        agent = await rt.spawn(
            AgentOptions(model="m", max_tokens=100, tools=(delegate,), budget=budget),
            session_id="root",
        )
        await agent.send("go")


trio.run(main, sys.argv[1])
"""


async def test_kill_9_mid_call_then_resume_keeps_the_ledger(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    proc = start_ready_child(WORKER, str(path))
    kill_child(proc)
    async with open_runtime(ScriptedProvider([reply("after", USAGE)]), f"sqlite:{path}") as rt:
        stored = await load_session(rt.store, "root", repair=False)
        reserves = [e.data for e in stored.events if isinstance(e.data, BudgetReserve)]
        assert len(reserves) == 2  # the second one, in flight, was durable before the request
        child_id = next(s.id for s in await rt.list_sessions() if s.id != "root")
        child = await load_session(rt.store, child_id, repair=False)
        child_spend = ledger_of(child.events).total
        assert child_spend == Spend(350, 1, None)
        root_ledger = ledger_of(stored.events)
        assert root_ledger.unsettled == 1  # charged at what it reserved
        agent = await rt.resume("root", AgentOptions(model="m", max_tokens=100, budget=BUDGET))
        before = agent.spent()
        assert before == root_ledger.total + child_spend
        assert before.model_calls == 3 and before.tokens >= 350 + reserves[1].tokens
        assert (await agent.send("again")).reason == "completed"
        assert agent.spent() == before + Spend(350, 1, None)
        # The resumed log's own fold agrees with the live account (repair closed the turn).
        assert session_ledger(agent.session.meta, agent.session.events).total + child_spend == (
            agent.spent()
        )


async def test_a_fork_is_not_charged_for_the_shared_history() -> None:
    provider = ScriptedProvider([reply("one", USAGE), reply("two", USAGE), reply("three", USAGE)])
    async with open_runtime(provider) as rt:
        parent = await rt.spawn(AgentOptions(model="m", budget=BUDGET))
        await parent.send("hi")
        await parent.send("again")
        spent = parent.spent()
        assert spent == Spend(700, 2, None)
        child = await rt.fork(
            parent.id, options=AgentOptions(model="m", budget=Budget(model_calls=1))
        )
        assert child.spent() == Spend(0, 0, 0.0)
        assert (await child.send("fork work")).reason == "completed"
        assert child.spent() == Spend(350, 1, None)
        assert parent.spent() == spent
        # Its own budget, not the parent's: one call, then exhausted.
        assert (await child.send("more")).reason == "budget_exhausted"
        assert provider.calls == 3
        # No budget at all on a fork: the same, and still not charged for the seed.
        free = await rt.fork(parent.id, options=AgentOptions(model="m"))
        assert free.spent() == Spend(0, 0, 0.0)
        assert parent.spent() == spent


@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
async def test_every_durable_store_keeps_the_ledger(tmp_path: Path, kind: str) -> None:
    store = f"sqlite:{tmp_path / 's.db'}" if kind == "sqlite" else f"jsonl:{tmp_path / 'j'}"
    options = AgentOptions(model="m", max_tokens=100, budget=Budget(model_calls=3))
    async with open_runtime(ScriptedProvider([reply("a", USAGE), reply("b", USAGE)]), store) as rt:
        agent = await rt.spawn(options, session_id="s")
        await agent.send("one")
        await agent.send("two")
        spent = agent.spent()
    async with open_runtime(ScriptedProvider([reply("c", USAGE)]), store) as rt:
        again = await rt.resume("s", options)
        assert again.spent() == spent == Spend(700, 2, None)
        assert (await again.send("three")).reason == "completed"
        assert (await again.send("four")).reason == "budget_exhausted"  # 3 calls in all


async def test_resume_without_options_keeps_the_budget(tmp_path: Path) -> None:
    store = f"sqlite:{tmp_path / 's.db'}"
    budget = Budget(usd=None, tokens=10_000, model_calls=2)
    provider = ScriptedProvider([reply("a", USAGE)])
    async with open_runtime(provider, store) as rt:
        agent = await rt.spawn(AgentOptions(model="m", labels={"team": "x"}, budget=budget))
        await agent.send("one")
        session_id = agent.id
    async with open_runtime(ScriptedProvider([reply("b", USAGE)]), store) as rt:
        again = await rt.resume(session_id)  # options from the log: the budget too
        assert again.options.budget == budget
        assert dict(again.options.labels) == {"team": "x"}
        assert again.spent() == Spend(350, 1, None)
        assert (await again.send("two")).reason == "completed"
        assert (await again.send("three")).reason == "budget_exhausted"


def test_a_budget_label_that_is_no_budget_is_refused() -> None:
    from actorloop.runtime.errors import BudgetError
    from actorloop.runtime.host.budgets import BUDGET_LABEL, stored_budget

    assert stored_budget({"a": 1}) == ({"a": 1}, None)
    assert stored_budget({BUDGET_LABEL: {"tokens": 5}}) == ({}, Budget(tokens=5))
    for bad in ({"dollars": 1}, {"tokens": -1}, "lots"):
        with pytest.raises(BudgetError):
            stored_budget({BUDGET_LABEL: bad})
