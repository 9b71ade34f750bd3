"""Effect keys and the reconciliation of calls a crash left in doubt (issue 35,
docs/effects.md): stable keys, `reconcile`, `idempotent` re-runs, never a re-run without them,
and logs that still verify byte for byte afterwards."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from actorloop.runtime import AgentOptions, Runtime, Tool
from actorloop.runtime.control.handle import ToolContext
from actorloop.runtime.log.effects import effect_key, in_doubt_calls
from actorloop.runtime.log.session import SessionMeta
from actorloop.runtime.log.verify import verify_log
from actorloop.runtime.model.events import (
    Replace,
    ToolCallEvent,
    ToolError,
    ToolReconcile,
    ToolResultEvent,
    TurnEnd,
    TurnStart,
)
from actorloop.runtime.model.hook_values import ToolCallInfo, ToolOutcome
from actorloop.runtime.model.messages import Text, ToolResult
from actorloop.runtime.stores import open_store
from actorloop.runtime.testing import ScriptedProvider, reply
from actorloop.runtime.testing import tool_call as call_chunks

PARAMS = {"type": "object", "properties": {"amount": {"type": "integer"}}}


class Ledger:
    """What the tools saw: the effect keys of the runs and of the reconciliations."""

    def __init__(self) -> None:
        self.runs: list[str] = []
        self.asked: list[str] = []

    async def execute(self, args: dict[str, Any], ctx: ToolContext) -> str:
        self.runs.append(ctx.effect_key)
        return f"charged {args.get('amount')} under {ctx.effect_key}"

    async def reconcile(self, call: ToolCallInfo, ctx: ToolContext) -> ToolOutcome | None:
        self.asked.append(ctx.effect_key)
        if ctx.effect_key in self.runs:
            content = (Text(f"charged (reconciled) under {ctx.effect_key}"),)
            return ToolOutcome(
                call.turn, call.step, call.call_id, call.name, call.arguments, content
            )
        return None


def pay_tool(ledger: Ledger, **flags: Any) -> Tool:
    return Tool("pay", "charge a card", PARAMS, ledger.execute, **flags)


async def crashed_session(url: str, session_id: str) -> int:
    """A stored log as a crash leaves it: a real loop's turn, cut off while its `pay` tool
    ran (its `tool/call` durable, no result); the seq of that `tool/call`. The next load
    repairs it with a TOOL_OUTCOME_UNKNOWN closer."""
    running = trio.Event()

    async def hang(_args: dict[str, Any], _ctx: ToolContext) -> str:
        running.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    tool = Tool("pay", "charge a card", PARAMS, hang)
    script = ScriptedProvider([reply("hello"), call_chunks("c1", "pay", {"amount": 5})])
    async with Runtime.open(store="memory:", provider=script) as rt:
        agent = await rt.spawn(AgentOptions(model="m", tools=(tool,)), session_id)
        await agent.send("hi")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.send, "pay it")
            await running.wait()
            meta, events = await rt.store.load(session_id, repair=False)
            nursery.cancel_scope.cancel()
    store = open_store(url)
    await store.create(meta)
    await store.append(session_id, events)
    await store.flush(session_id)
    await store.close()
    (call,) = [e for e in events if isinstance(e.data, ToolCallEvent)]
    return call.seq


def results_of(events: Any, call_id: str) -> list[Any]:
    """The results of `call_id` in the crashed turn (turn 2)."""
    return [
        e
        for e in events
        if isinstance(e.data, ToolResultEvent) and e.data.call_id == call_id and e.data.turn == 2
    ]


async def test_the_effect_key_is_stable_across_resume_and_new_for_a_new_call(
    tmp_path: Path,
) -> None:
    url = f"sqlite:{tmp_path / 's.db'}"
    ledger = Ledger()
    calling = [call_chunks("c1", "pay", {"amount": 1}), reply("ok")]
    script = ScriptedProvider(calling * 3)
    options = AgentOptions(model="m", tools=(pay_tool(ledger),))
    async with Runtime.open(store=url, provider=script) as rt:
        agent = await rt.spawn(options)
        await agent.send("one")
        first_end = len(agent.session) - 1
        await agent.send("one")
        session_id = agent.id
        calls = [e for e in agent.session.events if isinstance(e.data, ToolCallEvent)]
        keys = [effect_key(agent.session.meta, e.seq, "c1") for e in calls]
        child = await rt.fork(session_id, boundary=first_end, options=options)
        await child.send("one")
        child_meta = child.session.meta
        (remade,) = [
            e for e in child.session.events[first_end + 1 :] if isinstance(e.data, ToolCallEvent)
        ]
    # Two calls (the provider reused the id): two keys, each the one its tool saw.
    assert ledger.runs[:2] == keys and len(set(keys)) == 2
    # The same call made again in a fork child: a new key.
    assert ledger.runs[2] not in keys
    assert all(key.startswith("alfx_") and len(key) == 37 for key in keys)
    # The key is a function of the log: a later process computes the same one, and a fork
    # child that inherited the first call keeps its key ...
    async with Runtime.open(store=url, provider=ScriptedProvider([])) as rt:
        again = await rt.resume(session_id)
        assert effect_key(again.session.meta, calls[0].seq, "c1") == keys[0]
    assert effect_key(child_meta, calls[0].seq, "c1") == keys[0]
    # ... while the call the child made itself is keyed by the child.
    assert effect_key(child_meta, remade.seq, "c1") == ledger.runs[2]


async def test_reconcile_records_the_real_outcome_as_the_calls_result(tmp_path: Path) -> None:
    url = f"sqlite:{tmp_path / 's.db'}"
    call_seq = await crashed_session(url, "paid")
    ledger = Ledger()
    ledger.runs.append(effect_key(SessionMeta("paid"), call_seq, "c1"))  # it had run
    tool = pay_tool(ledger, reconcile=ledger.reconcile)
    async with Runtime.open(store=url, provider=ScriptedProvider([reply("thanks")])) as rt:
        agent = await rt.resume("paid", AgentOptions(model="m", tools=(tool,)))
        await agent.wait_idle()
        events = agent.session.events
        closer, reconciled = results_of(events, "c1")
        assert closer.data.error == ToolError("pay", "TOOL_OUTCOME_UNKNOWN")
        assert reconciled.surface_op == Replace(closer.seq, closer.seq)
        assert reconciled.source_event_seqs == (call_seq, closer.seq)
        assert not reconciled.data.is_error and reconciled.data.error is None
        assert reconciled.data.content == (Text(f"charged (reconciled) under {ledger.runs[0]}"),)
        marks = [e.data for e in events if isinstance(e.data, ToolReconcile)]
        assert marks == [ToolReconcile(call_seq, "c1", "pay", "reconcile")]
        starts = [e.data for e in events if isinstance(e.data, TurnStart)]
        assert starts[-1].trigger.kind == "reconciliation"
        assert isinstance(events[-1].data, TurnEnd) and events[-1].data.reason.kind == "completed"
        # The model now sees the real outcome in place of the unknown one.
        results = [
            block
            for message in agent.session.derive_messages()
            for block in message.content
            if isinstance(block, ToolResult)
        ]
        assert results[-1].content == reconciled.data.content
        assert in_doubt_calls(agent.session) == ()
        await agent.send("next")
        verify_log(agent.session.meta, agent.session.events)
    assert ledger.runs == [ledger.asked[0]] and len(ledger.asked) == 1  # never re-run
    # Reconciled once: a later load has nothing to do.
    async with Runtime.open(store=url, provider=ScriptedProvider([])) as rt:
        agent = await rt.resume("paid", AgentOptions(model="m", tools=(tool,)))
        await agent.wait_idle()
    assert len(ledger.asked) == 1


async def test_reconcile_answering_not_run_records_that_it_never_ran(tmp_path: Path) -> None:
    url = f"sqlite:{tmp_path / 's.db'}"
    await crashed_session(url, "unpaid")
    ledger = Ledger()
    tool = pay_tool(ledger, reconcile=ledger.reconcile)
    async with Runtime.open(store=url, provider=ScriptedProvider([])) as rt:
        agent = await rt.resume("unpaid", AgentOptions(model="m", tools=(tool,)))
        await agent.wait_idle()
        _, reconciled = results_of(agent.session.events, "c1")
        verify_log(agent.session.meta, agent.session.events)
    assert reconciled.data.error == ToolError("pay", "TOOL_NOT_STARTED")
    assert ledger.runs == [] and len(ledger.asked) == 1


async def test_without_reconcile_the_call_stays_unknown_and_never_reruns(tmp_path: Path) -> None:
    url = f"sqlite:{tmp_path / 's.db'}"
    await crashed_session(url, "plain")
    ledger = Ledger()
    for _ in range(2):
        async with Runtime.open(store=url, provider=ScriptedProvider([])) as rt:
            agent = await rt.resume("plain", AgentOptions(model="m", tools=(pay_tool(ledger),)))
            await agent.wait_idle()
            (closer,) = results_of(agent.session.events, "c1")
            assert closer.data.error == ToolError("pay", "TOOL_OUTCOME_UNKNOWN")
            assert [d.call.seq for d in in_doubt_calls(agent.session)] == [
                closer.source_event_seqs[0]
            ]
            assert not any(isinstance(e.data, ToolReconcile) for e in agent.session.events)
    assert ledger.runs == []


async def test_an_idempotent_call_in_doubt_is_rerun_once_with_its_key(tmp_path: Path) -> None:
    url = f"sqlite:{tmp_path / 's.db'}"
    call_seq = await crashed_session(url, "again")
    ledger = Ledger()
    tool = pay_tool(ledger, idempotent=True)
    async with Runtime.open(store=url, provider=ScriptedProvider([])) as rt:
        agent = await rt.resume("again", AgentOptions(model="m", tools=(tool,)))
        await agent.wait_idle()
        _, rerun = results_of(agent.session.events, "c1")
        key = effect_key(agent.session.meta, call_seq, "c1")
        verify_log(agent.session.meta, agent.session.events)
    assert ledger.runs == [key]
    assert rerun.data.content == (Text(f"charged 5 under {key}"),)
    async with Runtime.open(store=url, provider=ScriptedProvider([])) as rt:
        agent = await rt.resume("again", AgentOptions(model="m", tools=(tool,)))
        await agent.wait_idle()
    assert ledger.runs == [key]


async def test_a_rerun_cut_short_by_a_crash_is_not_run_a_third_time(tmp_path: Path) -> None:
    """A crash during the re-run leaves `tool/reconcile{rerun}` durable: the next load
    leaves the call in doubt instead of running it again."""
    url = f"sqlite:{tmp_path / 's.db'}"
    call_seq = await crashed_session(url, "twice")
    running = trio.Event()

    async def hang(_args: dict[str, Any], _ctx: ToolContext) -> str:
        running.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    hanging = Tool("pay", "charge a card", PARAMS, hang, idempotent=True)
    async with Runtime.open(store=url, provider=ScriptedProvider([])) as rt:
        await rt.resume("twice", AgentOptions(model="m", tools=(hanging,)))
        await running.wait()
        meta, events = await rt.store.load("twice", repair=False)
    assert events[-1].data == ToolReconcile(call_seq, "c1", "pay", "rerun")
    crashed = f"sqlite:{tmp_path / 'crashed.db'}"
    store = open_store(crashed)
    await store.create(meta)
    await store.append("twice", events)
    await store.flush("twice")
    await store.close()
    ledger = Ledger()
    options = AgentOptions(model="m", tools=(pay_tool(ledger, idempotent=True),))
    async with Runtime.open(store=crashed, provider=ScriptedProvider([])) as rt:
        agent = await rt.resume("twice", options)
        await agent.wait_idle()
        (closer,) = results_of(agent.session.events, "c1")
        verify_log(agent.session.meta, agent.session.events)
        assert [d.call.seq for d in in_doubt_calls(agent.session)] == [call_seq]
    assert closer.data.error == ToolError("pay", "TOOL_OUTCOME_UNKNOWN")
    assert ledger.runs == []


async def test_cancel_stops_a_reconcile_that_hangs(tmp_path: Path) -> None:
    url = f"sqlite:{tmp_path / 's.db'}"
    await crashed_session(url, "stuck")
    asked = trio.Event()

    async def hangs(_call: ToolCallInfo, _ctx: ToolContext) -> ToolOutcome | None:
        asked.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    tool = pay_tool(Ledger(), reconcile=hangs)
    async with Runtime.open(store=url, provider=ScriptedProvider([reply("later")])) as rt:
        agent = await rt.resume("stuck", AgentOptions(model="m", tools=(tool,)))
        await asked.wait()
        assert agent.status == "running"
        agent.cancel("operator")
        await agent.wait_idle()
        events = agent.session.events
        (closer,) = results_of(events, "c1")
        assert closer.data.error == ToolError("pay", "TOOL_OUTCOME_UNKNOWN")
        assert isinstance(events[-1].data, TurnEnd) and events[-1].data.reason.kind == "aborted"
        assert (await agent.send("next")).reason == "completed"
        verify_log(agent.session.meta, agent.session.events)
