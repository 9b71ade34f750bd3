"""Kill -9 at every point of a tool call, on SQLite and PostgreSQL, against a real HTTP payment
server that deduplicates on the effect key (issue 35's acceptance, docs/effects.md).

A trial is four sessions, one per tool mode (plain, reconcile, idempotent, both), each making
one `pay` call. `tests/kits/effect_child.py` runs a batch of trials at once in a real
subprocess, which is killed -9 once every call has reached the point (before its
`tool/call` is durable, after it, during the charge request, after the charge answered
but before its `tool/result` is durable).
This process then resumes each session with the same tools, twice, and checks against the
server's books: exactly one effect for every logged call whose tool is idempotent (re-run
once with the same key), the real outcome for every call whose tool reconciles, zero
effects for calls that were not logged, and no new charge request ever for a plain tool
(its call stays TOOL_OUTCOME_UNKNOWN).

Bounded by default: `ACTORLOOP_EFFECT_TRIALS` trials per point and store (3, one child run
each); batches of at most 25 trials per child. Full mode, as the issue asks:
`ACTORLOOP_EFFECT_TRIALS=200 pytest -q tests/loop/test_effect_crashes.py -s` (8 child runs
per point and store; `-s` prints the figures).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
from effect_child import PARAMS, POINTS, flags_for, session_ids
from payment_server import PaymentServer

from actorloop.runtime import AgentOptions, Runtime, Tool
from actorloop.runtime.log.effects import effect_key, in_doubt_calls
from actorloop.runtime.log.verify import verify_log
from actorloop.runtime.model.events import SessionEvent, ToolCallEvent, ToolResultEvent
from actorloop.runtime.model.hook_values import ToolCallInfo, ToolOutcome
from actorloop.runtime.model.messages import Text
from actorloop.runtime.testing import ScriptedProvider

TRIALS = int(os.environ.get("ACTORLOOP_EFFECT_TRIALS", "3"))
BATCH = 25
CHILD = Path(__file__).parent.parent / "kits" / "effect_child.py"
TOTALS: Counter[str] = Counter()
"""Figures over the run (printed with `-s`): trials, calls, effects, duplicates."""


def tools_for(mode: str, pay_url: str) -> tuple[Tool, ...]:
    """The resumed agent's `pay`, the same mode as the child's, talking to the server."""

    async def charge(args: dict[str, Any], ctx: Any) -> str:
        async with httpx.AsyncClient(timeout=30) as client:
            body = {"key": ctx.effect_key, "amount": args["amount"]}
            response = await client.post(f"{pay_url}/charges", json=body)
        return f"charged {response.json()['id']}"

    async def find(call: ToolCallInfo, ctx: Any) -> ToolOutcome | None:
        async with httpx.AsyncClient(timeout=30) as client:
            response = await client.get(f"{pay_url}/charges/{ctx.effect_key}")
        if response.status_code == 404:
            return None
        content = (Text(f"charged {response.json()['id']}"),)
        return ToolOutcome(call.turn, call.step, call.call_id, call.name, call.arguments, content)

    return (Tool("pay", "charge", PARAMS, charge, **flags_for(mode, find)),)


def crash(url: str, prefix: str, pay_url: str, point: str, trials: int) -> None:
    """One child run, killed -9 at `point` (by itself, or by the server for `during`)."""
    child = subprocess.run(
        [sys.executable, str(CHILD), url, prefix, pay_url, point, str(trials)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode == -9, (child.returncode, child.stdout, child.stderr[-2000:])


def current_result(events: tuple[SessionEvent, ...], surface: tuple[int, ...]) -> Any:
    """The `c1` result the surface holds for the crashed turn (turn 1)."""
    for seq in surface:
        data = events[seq].data
        if isinstance(data, ToolResultEvent) and data.call_id == "c1" and data.turn == 1:
            return data
    return None


async def resume_all(url: str, sessions: Any, pay_url: str) -> dict[str, Any]:
    """Resume every session in one runtime, let its reconciliation run, and return what each
    log says: (its meta, its `tool/call`s, the current `c1` result, its doubts)."""
    found: dict[str, Any] = {}
    async with Runtime.open(store=url, provider=ScriptedProvider([])) as rt:
        agents = [
            await rt.resume(session_id, AgentOptions(model="m", tools=tools_for(mode, pay_url)))
            for session_id, mode in sessions
        ]
        for agent in agents:
            await agent.wait_idle()
            session = agent.session
            verify_log(session.meta, session.events)
            calls = [e for e in session.events if isinstance(e.data, ToolCallEvent)]
            result = current_result(session.events, session.surface)
            found[agent.id] = (session.meta, calls, result, in_doubt_calls(session))
    return found


async def resume_and_check(url: str, sessions: Any, server: PaymentServer, point: str) -> None:
    before = {key: server.posts[key] for key in server.posts}
    found = await resume_all(url, sessions, server.url)
    again = await resume_all(url, sessions, server.url)  # a second load finds nothing to do
    assert [(m, c, r) for m, c, r, _ in again.values()] == [
        (m, c, r) for m, c, r, _ in found.values()
    ]
    for session_id, mode in sessions:
        meta, calls, result, doubts = found[session_id]
        TOTALS["calls"] += 1
        if point == "before_call":
            # Never logged: no effect, nothing to reconcile, never run.
            assert calls == [] and doubts == ()
            assert result is None or result.error.code == "TOOL_NOT_STARTED"
            TOTALS["unlogged"] += 1
            continue
        (call,) = calls
        key = effect_key(meta, call.seq, "c1")
        effects = server.effects[key]
        TOTALS["logged"] += 1
        TOTALS["effects"] += effects
        TOTALS["duplicates"] += max(effects - 1, 0)
        assert effects <= 1, (mode, point, effects)
        charged = f"charged {server.charges[key]['id']}" if key in server.charges else None
        if mode == "plain":
            # Unknown for good, and never re-run: no charge request after the crash.
            assert result.error.code == "TOOL_OUTCOME_UNKNOWN" and len(doubts) == 1
            assert server.posts[key] == before.get(key, 0)
            TOTALS["unknown"] += 1
        elif mode == "reconcile" and charged is None:
            assert result.error.code == "TOOL_NOT_STARTED" and effects == 0
            TOTALS["reconciled_not_run"] += 1
        else:
            # reconcile found the charge, or an idempotent tool re-ran under the same key:
            # exactly one effect, and the log holds the real outcome.
            assert effects == 1 and result.content == (Text(charged or ""),), (mode, point)
            assert not result.is_error and doubts == ()
            TOTALS["real_outcome"] += 1


@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_kill_9_at_each_point_of_a_tool_call(
    kind: str, point: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    pg_url = str(request.getfixturevalue("pg_url")) if kind == "postgres" else ""
    for batch, start in enumerate(range(0, TRIALS, BATCH)):
        trials = min(BATCH, TRIALS - start)
        if kind == "sqlite":
            url = f"sqlite:{tmp_path / f'batch{batch}.db'}"
        else:
            # The restarted process takes the node name of the killed one, so it reclaims
            # the sessions at once (persistence.md §10.3) instead of waiting out the lease.
            url = f"{pg_url}{'&' if '?' in pg_url else '?'}node=effects-{batch}"
        prefix = f"b{batch}t"
        sessions = session_ids(prefix, trials)
        with PaymentServer() as server:
            crash(url, prefix, server.url, point, trials)
            if point == "before_call" or point == "after_call":
                assert server.effects.total() == 0
            else:
                assert len(server.charges) == len(sessions)
            await resume_and_check(url, sessions, server, point)
        TOTALS["trials"] += trials
    print(f"\n{kind} {point}: {dict(TOTALS)}")
