"""The approval routes of `actorloop serve` over real sockets: `GET /v1/sessions/{id}/
approvals`, `POST /v1/sessions/{id}/approvals/{call_id}` (one decision: a second is 409
APPROVAL_ALREADY_DECIDED, an unknown call 404 APPROVAL_NOT_FOUND; an `Idempotency-Key`
repeat answers the first outcome), 409 APPROVALS_PENDING on a send, the request and decision
events on SSE, the document listing both routes, and the inspector's badge, pending list
and decision note (docs/approvals.md)."""

from __future__ import annotations

from typing import Any

import httpx
import trio
from serve_kit import read_events, running_server

from actorloop.runtime import AgentOptions, Tool
from actorloop.runtime.service.profiles import AppConfig
from actorloop.runtime.testing import ScriptedProvider, reply, tool_call

RUNS: list[dict[str, Any]] = []


async def _pay(args: dict[str, Any], ctx: Any) -> str:
    RUNS.append(args)
    return f"paid {args['amount']}"


PAY = Tool(
    "pay",
    "pays",
    {"type": "object", "properties": {"amount": {"type": "integer"}}},
    _pay,
    needs_approval=True,
)


def config(provider: ScriptedProvider) -> AppConfig:
    app = AppConfig(provider=provider, model=None, store_url="memory:")  # type: ignore[arg-type]
    app.add_profile("default", AgentOptions(model="m", tools=(PAY,)))
    return app


def code_of(response: httpx.Response) -> str:
    return str(response.json()["error"]["code"])


async def test_list_decide_conflicts_idempotency_and_events() -> None:
    RUNS.clear()
    provider = ScriptedProvider(
        [
            tool_call("p1", "pay", {"amount": 5}),
            reply("paid it"),
            tool_call("p2", "pay", {}),
            reply("not paid"),
        ]
    )
    async with running_server(config(provider)) as server, server.client() as client:
        created = await client.post("/v1/sessions", json={"session_id": "s1"})
        assert created.status_code == 201
        sent = await client.post("/v1/sessions/s1/messages", json={"content": "pay"})
        assert sent.status_code == 200, sent.text
        assert sent.json()["reason"] == "awaiting_approval"
        listed = (await client.get("/v1/sessions/s1/approvals")).json()
        assert listed == {
            "id": "s1",
            "pending": [
                {"call_id": "p1", "tool": "pay", "arguments": '{"amount": 5}', "session_id": "s1"}
            ],
        }
        index = (await client.get("/")).text
        assert "1 approval waiting" in index
        page = (await client.get("/sessions/s1")).text
        assert 'class="pending-approvals"' in page and 'data-call="p1"' in page
        assert "pay p1 waits for approval" in page
        refused = await client.post("/v1/sessions/s1/messages", json={"content": "other"})
        assert refused.status_code == 409 and code_of(refused) == "APPROVALS_PENDING"
        missing = await client.post("/v1/sessions/s1/approvals/nope", json={"decision": "approve"})
        assert missing.status_code == 404 and code_of(missing) == "APPROVAL_NOT_FOUND"

        answers: list[httpx.Response] = []

        async def approve(key: str) -> None:
            answers.append(
                await client.post(
                    "/v1/sessions/s1/approvals/p1",
                    json={"decision": "approve", "arguments": {"amount": 4}},
                    headers={"Idempotency-Key": key},
                )
            )

        async with trio.open_nursery() as nursery:
            nursery.start_soon(approve, "k1")
            nursery.start_soon(approve, "k2")
        statuses = sorted(answer.status_code for answer in answers)
        assert statuses == [200, 409], [a.text for a in answers]
        winner = next(a for a in answers if a.status_code == 200)
        loser = next(a for a in answers if a.status_code == 409)
        assert code_of(loser) == "APPROVAL_ALREADY_DECIDED"
        assert winner.json()["reason"] == "completed" and winner.json()["text"] == "paid it"
        winner_key = winner.request.headers["Idempotency-Key"]
        again = await client.post(
            "/v1/sessions/s1/approvals/p1",
            json={"decision": "approve", "arguments": {"amount": 4}},
            headers={"Idempotency-Key": winner_key},
        )
        assert again.status_code == 200 and again.json() == winner.json()
        assert RUNS == [{"amount": 4}]
        page = (await client.get("/sessions/s1")).text
        assert "pending-approvals" not in page
        assert "p1 approved" in page and "edited arguments" in page

        parked = await client.post("/v1/sessions/s1/messages", json={"content": "pay more"})
        assert parked.json()["reason"] == "awaiting_approval"
        rejected = await client.post(
            "/v1/sessions/s1/approvals/p2", json={"decision": "reject", "reason": "enough"}
        )
        assert rejected.status_code == 200, rejected.text
        assert RUNS == [{"amount": 4}]

        async with client.stream("GET", "/v1/sessions/s1/events?follow=false") as response:
            events = await read_events(response)
        types = [event.event for event in events]
        assert types.count("approval/request") == 2
        assert types.count("approval/decision") == 2
        document = (await client.get("/openapi.json")).json()
        assert "/v1/sessions/{id}/approvals/{call_id}" in document["paths"]
        assert "/v1/sessions/{id}/approvals" in document["paths"]
