"""Two `actorloop serve` instances on one PostgreSQL store receive the same approval at
once: exactly one decision is recorded, the other request is 409 APPROVAL_ALREADY_DECIDED,
and the tool's side effects equal the approvals (the instance that does not own the session
hands its request to the owner, docs/deployment.md).

Bounded by default (`APPROVALS_PG_SESSIONS` × `APPROVALS_PG_TRIALS`, default 4 × 1); full
mode: `APPROVALS_PG_SESSIONS=100 APPROVALS_PG_TRIALS=10`.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import httpx
import trio
from serve_kit import Running, running_server

from actorloop.runtime import AgentOptions, Tool
from actorloop.runtime.service.profiles import AppConfig
from actorloop.runtime.testing import ScriptedProvider, reply, tool_call

SESSIONS = int(os.environ.get("APPROVALS_PG_SESSIONS", "4"))
TRIALS = int(os.environ.get("APPROVALS_PG_TRIALS", "1"))
EFFECTS: list[str] = []


async def _pay(args: dict[str, Any], ctx: Any) -> str:
    EFFECTS.append(ctx.agent.id)
    return "paid"


PAY = Tool("pay", "pays", {"type": "object"}, _pay, needs_approval=True)


def script() -> list[Any]:
    one = [tool_call("p", "pay", {})] * SESSIONS + [reply("done")] * SESSIONS
    return one * TRIALS


@asynccontextmanager
async def two_instances(pg_url: str) -> AsyncIterator[list[Running]]:
    url = f"{pg_url}?lease_s=2&poll_s=0.05"
    async with AsyncExitStack() as stack:
        started = []
        for _ in range(2):
            app = AppConfig(provider=ScriptedProvider(script()), model=None, store_url=url)  # type: ignore[arg-type]
            app.add_profile("default", AgentOptions(model="m", tools=(PAY,)))
            started.append(
                await stack.enter_async_context(running_server(app, store=url, grace_seconds=0.5))
            )
        yield started


async def test_the_same_approval_at_two_instances_is_decided_once(pg_url: str) -> None:
    EFFECTS.clear()
    async with (
        two_instances(pg_url) as [a, b],
        a.client() as client_a,
        b.client() as client_b,
    ):
        decided = 0
        for trial in range(TRIALS):
            ids = [f"s{trial}-{n}" for n in range(SESSIONS)]
            for session_id in ids:
                created = await client_a.post("/v1/sessions", json={"session_id": session_id})
                assert created.status_code == 201, created.text
                sent = await client_a.post(
                    f"/v1/sessions/{session_id}/messages", json={"content": "pay"}
                )
                assert sent.json()["reason"] == "awaiting_approval", sent.text
            statuses: dict[str, list[int]] = {session_id: [] for session_id in ids}

            async def approve(
                client: httpx.AsyncClient,
                session_id: str,
                statuses: dict[str, list[int]] = statuses,
            ) -> None:
                response = await client.post(
                    f"/v1/sessions/{session_id}/approvals/p", json={"decision": "approve"}
                )
                if response.status_code == 409:
                    assert response.json()["error"]["code"] == "APPROVAL_ALREADY_DECIDED"
                statuses[session_id].append(response.status_code)

            async with trio.open_nursery() as nursery:
                for session_id in ids:
                    nursery.start_soon(approve, client_a, session_id)
                    nursery.start_soon(approve, client_b, session_id)
            for session_id in ids:
                assert sorted(statuses[session_id]) == [200, 409], statuses[session_id]
                listed = (await client_b.get(f"/v1/sessions/{session_id}/approvals")).json()
                assert listed["pending"] == []
            decided += len(ids)
        assert sorted(EFFECTS) == sorted(
            f"s{trial}-{n}" for trial in range(TRIALS) for n in range(SESSIONS)
        )
        assert len(EFFECTS) == decided
