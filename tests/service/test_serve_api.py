"""`actorloop serve` in-process: a real Hypercorn server on 127.0.0.1 in the test's trio run,
driven with httpx over real sockets — every endpoint, the error shapes, the busy-session
policy, idempotency keys, caller cancellation by a disconnecting client, SSE with resume,
auth, and the drain (docs/serve.md, docs/spec/runtime.md §15)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson
import trio
from helpers import open_runtime
from serve_kit import (
    TOKEN,
    HeldModel,
    Running,
    SseReader,
    app_config_for,
    read_events,
    running_server,
)
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from actorloop.codecs.converter import encode_event
from actorloop.runtime import AgentOptions
from actorloop.runtime.model.events import AssistantMessage
from actorloop.runtime.testing import EchoProvider

JSON = {"content-type": "application/json"}


def error_of(response: httpx.Response) -> str:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    return str(body["error"]["code"])


async def create(client: httpx.AsyncClient, session_id: str, **body: Any) -> None:
    response = await client.post("/v1/sessions", json={"session_id": session_id, **body})
    assert response.status_code == 201, response.text
    assert response.json() == {"id": session_id, "status": "idle"}


async def send(client: httpx.AsyncClient, session_id: str, content: str, **body: Any) -> Any:
    response = await client.post(
        f"/v1/sessions/{session_id}/messages", json={"content": content, **body}
    )
    assert response.status_code == 200, response.text
    return response.json()


def turn_ends(server: Running, session_id: str) -> list[dict[str, Any]]:
    agent = server.service.runtime.get(session_id)
    assert agent is not None
    return [
        orjson.loads(encode_event(e))["data"] for e in agent.session.events if e.type == "turn/end"
    ]


async def test_health_openapi_profiles_and_routes_another_edge_adds() -> None:
    async def page(_request: Any) -> Any:
        return PlainTextResponse("inspector")

    routes = [Route("/", page)]
    async with (
        running_server(app_config_for(HeldModel()), routes=routes, token=TOKEN) as server,
        server.client(headers={"Authorization": f"Bearer {TOKEN}"}) as client,
    ):
        async with server.client() as anonymous:
            assert (await anonymous.get("/")).text == "inspector"  # outside /v1: no token
        health = await client.get("/healthz")
        assert health.status_code == 200
        assert health.json() == {"status": "ok", "live_agents": 0, "open_streams": 0}
        document = (await client.get("/openapi.json")).json()
        assert document["openapi"].startswith("3.1")
        assert "/v1/sessions/{id}/requests/{seq}" in document["paths"]
        profiles = (await client.get("/v1/profiles")).json()["profiles"]
        assert [(p["name"], p["default"], p["tools"]) for p in profiles] == [
            ("default", True, ["lookup"]),
            ("prefixed", False, []),
        ]


async def test_sessions_messages_events_requests_and_verify() -> None:
    async with running_server(app_config_for(HeldModel())) as server, server.client() as client:
        await create(client, "s1")
        await create(client, "s2", profile="prefixed", options={"system": "Other system."})
        first = await send(client, "s1", "hi")
        assert first == {
            "id": "s1",
            "turn": 1,
            "reason": "completed",
            "text": "echo: hi",
            "message": None,
            "code": None,
            "steps": 1,
            "usage": first["usage"],
        }
        tooled = await send(client, "s1", "please call:lookup now")
        assert (tooled["turn"], tooled["steps"], tooled["reason"]) == (2, 2, "completed")
        await send(client, "s2", "with a prefix")

        page = (await client.get("/v1/sessions", params={"limit": 1})).json()
        assert [s["id"] for s in page["sessions"]] == ["s1"] and page["next_cursor"] == "s1"
        rest = (await client.get("/v1/sessions", params={"cursor": "s1"})).json()
        assert [s["id"] for s in rest["sessions"]] == ["s2"] and rest["next_cursor"] is None
        assert rest["sessions"][0]["live"] is True and rest["sessions"][0]["status"] == "idle"

        detail = (await client.get("/v1/sessions/s2")).json()
        assert detail["profile"] == "prefixed" and detail["turns"] == 1
        assert detail["header"]["system"] == "Other system."
        assert detail["header"]["message_prefix"][0]["content"][0]["text"].startswith("OPENER")
        assert detail["lineage"] == {"parent_session": None, "seed_length": None}
        assert detail["usage"]["model_calls"] == 1

        # The stored events, exactly as the codec encodes them, one SSE event each.
        async with client.stream("GET", "/v1/sessions/s1/events?follow=false") as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            events = await read_events(response)
        live = server.service.runtime.get("s1")
        assert live is not None
        assert [(int(e.id or -1), e.event) for e in events] == [
            (event.seq, event.type) for event in live.session.events
        ]
        assert [orjson.dumps(e.data) for e in events] == [
            encode_event(event) for event in live.session.events
        ]

        # Every model answer's request, rebuilt and digest-checked.
        answers = [e.seq for e in live.session.events if isinstance(e.data, AssistantMessage)]
        assert len(answers) == 3
        for seq in answers:
            request = (await client.get(f"/v1/sessions/s1/requests/{seq}")).json()
            assert request["verified"] is True
            assert request["digest"]["recorded"] == request["digest"]["rebuilt"]
            assert request["system"] == "Be brief." and request["tools"][0]["name"] == "lookup"
        prefixed = [
            e.seq
            for e in server.service.runtime.get("s2").session.events  # type: ignore[union-attr]
            if e.type == "assistant/message"
        ]
        request = (await client.get(f"/v1/sessions/s2/requests/{prefixed[0]}")).json()
        assert request["prefix"] == [
            {"role": "user", "content": [{"type": "text", "text": "OPENER: skills list"}]}
        ]
        assert request["history"][-1]["content"][0]["text"] == "with a prefix"
        not_answer = await client.get("/v1/sessions/s1/requests/0")
        assert (not_answer.status_code, error_of(not_answer)) == (422, "NOT_A_MODEL_ANSWER")
        beyond = await client.get("/v1/sessions/s1/requests/100000")
        assert (beyond.status_code, error_of(beyond)) == (404, "EVENT_NOT_FOUND")

        verdict = (await client.get("/v1/sessions/s1/verify")).json()
        assert verdict["ok"] is True and verdict["requests_checked"] == 3


async def test_fork_dispose_resume_and_their_refusals() -> None:
    async with running_server(app_config_for(HeldModel())) as server, server.client() as client:
        await create(client, "src", profile="prefixed")
        await send(client, "src", "one")
        await send(client, "src", "two")
        ends = [
            e.seq
            for e in server.service.runtime.get("src").session.events  # type: ignore[union-attr]
            if e.type == "turn/end"
        ]
        fork = await client.post("/v1/sessions/src/fork", json={"boundary": ends[0]})
        assert fork.status_code == 201, fork.text
        child = fork.json()
        assert child["parent_session"] == "src" and child["seed_length"] == ends[0] + 1
        forked = await send(client, child["id"], "in the child")
        assert forked["turn"] == 2
        detail = (await client.get(f"/v1/sessions/{child['id']}")).json()
        assert detail["profile"] == "prefixed"
        assert detail["lineage"] == {"parent_session": "src", "seed_length": ends[0] + 1}

        bad = await client.post("/v1/sessions/src/fork", json={"boundary": 1})
        assert (bad.status_code, error_of(bad)) == (409, "OPEN_TURN")  # a user/message
        bad = await client.post("/v1/sessions/src/fork", json={"boundary": 10_000})
        assert (bad.status_code, error_of(bad)) == (422, "INVALID_BOUNDARY")
        taken = await client.post("/v1/sessions/src/fork", json={"child_id": child["id"]})
        assert (taken.status_code, error_of(taken)) == (409, "SESSION_ALREADY_EXISTS")
        missing = await client.post("/v1/sessions/nobody/fork", json={})
        assert (missing.status_code, error_of(missing)) == (404, "SESSION_NOT_FOUND")

        gone = await client.delete("/v1/sessions/src")
        assert gone.json() == {"id": "src", "status": "disposed"}
        assert (await client.get("/v1/sessions/src")).json()["status"] == "stored"
        assert (await client.delete("/v1/sessions/src")).json()["status"] == "stored"
        resumed = (await client.post("/v1/sessions/src/resume", json={})).json()
        assert resumed == {"id": "src", "status": "idle", "profile": "prefixed", "resumed": True}
        again = (await client.post("/v1/sessions/src/resume", json={})).json()
        assert again["resumed"] is False
        other = await client.post("/v1/sessions/src/resume", json={"profile": "default"})
        assert (other.status_code, error_of(other)) == (409, "SESSION_BUSY")
        # A stored fork of a stored session (no live source) works too.
        await client.delete("/v1/sessions/src")
        stored_fork = await client.post("/v1/sessions/src/fork", json={"child_id": "src-2"})
        assert stored_fork.status_code == 201, stored_fork.text
        assert (await send(client, "src-2", "three"))["turn"] == 3


async def test_errors_are_typed_with_fitting_statuses() -> None:
    app_config = app_config_for(HeldModel())
    async with running_server(app_config, max_body_bytes=2048) as server, server.client() as client:
        await create(client, "e1")
        cases = [
            (
                client.post("/v1/sessions", json={"session_id": "e1"}),
                409,
                "SESSION_ALREADY_EXISTS",
            ),
            (
                client.post("/v1/sessions", json={"session_id": "a..b"}),
                400,
                "INVALID_SESSION_ID",
            ),
            (client.post("/v1/sessions", json={"profile": "nope"}), 422, "UNKNOWN_PROFILE"),
            (
                client.post("/v1/sessions", json={"options": {"model": 3}}),
                422,
                "VALIDATION_FAILED",
            ),
            (client.post("/v1/sessions", json={"extra": 1}), 422, "VALIDATION_FAILED"),
            (
                client.post("/v1/sessions", json={"options": {"provider": "absent"}}),
                422,
                "PROVIDER_NOT_CONFIGURED",
            ),
            (client.post("/v1/sessions", content=b"{not json", headers=JSON), 400, "INVALID_JSON"),
            (client.post("/v1/sessions", content=b"[" * 5000, headers=JSON), 413, "BODY_TOO_LARGE"),
            (client.post("/v1/sessions/e1/messages", json={}), 422, "VALIDATION_FAILED"),
            (
                client.post("/v1/sessions/zz/messages", json={"content": "x"}),
                404,
                "SESSION_NOT_FOUND",
            ),
            (client.get("/v1/sessions/zz"), 404, "SESSION_NOT_FOUND"),
            (client.get("/v1/sessions/.hidden"), 400, "INVALID_SESSION_ID"),
            (client.get("/v1/sessions/e1/requests/x"), 422, "VALIDATION_FAILED"),
            (client.get("/v1/sessions/e1/events?after=x"), 422, "VALIDATION_FAILED"),
            (client.get("/v1/sessions/e1/events?follow=maybe"), 422, "VALIDATION_FAILED"),
            (client.get("/v1/sessions", params={"limit": 0}), 422, "VALIDATION_FAILED"),
            (client.get("/v1/sessions/e1?verbose=1"), 422, "VALIDATION_FAILED"),
            (client.get("/v1/sessions", params={"cursor": ""}), 422, "VALIDATION_FAILED"),
            (client.get("/v1/nothing-here"), 404, "NOT_FOUND"),
            (client.put("/v1/sessions"), 405, "METHOD_NOT_ALLOWED"),
        ]
        for call, status, code in cases:
            response = await call
            assert (response.status_code, error_of(response)) == (status, code), response.text
        meta = await client.post(
            "/v1/sessions/e1/inject", json={"content": "x", "meta": {"n": 2**60}}
        )
        assert (meta.status_code, error_of(meta)) == (422, "INVALID_CONTENT")


async def test_a_busy_session_refuses_a_second_send_or_queues_it_on_request() -> None:
    model = HeldModel()
    async with running_server(app_config_for(model)) as server, server.client() as client:
        await create(client, "busy")
        results: dict[str, Any] = {}

        async def run(name: str, content: str, **body: Any) -> None:
            results[name] = await send(client, "busy", content, **body)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run, "first", "hold the line")
            await model.entered.wait()
            refused = await client.post("/v1/sessions/busy/messages", json={"content": "me too"})
            assert (refused.status_code, error_of(refused)) == (409, "SESSION_BUSY")
            # Accepted (202) means it has its place in line, behind the running turn.
            queued = await client.post(
                "/v1/sessions/busy/messages",
                json={
                    "content": "after you",
                    "if_busy": "queue",
                    "wait": False,
                    "idempotency_key": "q",
                },
            )
            assert queued.status_code == 202
            also = await client.post("/v1/sessions/busy/messages", json={"content": "and me"})
            assert (also.status_code, error_of(also)) == (409, "SESSION_BUSY")
            open_turn = await client.post("/v1/sessions/busy/fork", json={})
            assert (open_turn.status_code, error_of(open_turn)) == (409, "OPEN_TURN")
            assert len(turn_ends(server, "busy")) == 0
            model.release()
        assert (results["first"]["turn"], results["first"]["text"]) == (1, "echo: hold the line")
        results["queued"] = await send(client, "busy", "after you", idempotency_key="q")
        assert (results["queued"]["turn"], results["queued"]["text"]) == (2, "echo: after you")
        assert [end["reason"]["kind"] for end in turn_ends(server, "busy")] == ["completed"] * 2


async def test_an_idempotency_key_never_starts_a_second_turn() -> None:
    model = HeldModel()
    async with running_server(app_config_for(model)) as server, server.client() as client:
        await create(client, "idem")
        outcomes: list[Any] = []

        async def keyed() -> None:
            outcomes.append(await send(client, "idem", "hold once", idempotency_key="k1"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(keyed)
            await model.entered.wait()
            nursery.start_soon(keyed)  # the same key while its turn runs: waits for it
            accepted = await client.post(
                "/v1/sessions/idem/messages",
                json={"content": "hold once", "idempotency_key": "k1", "wait": False},
            )
            assert accepted.status_code == 202 and accepted.json()["status"] == "running"
            model.release()
        assert outcomes[0] == outcomes[1] and outcomes[0]["turn"] == 1
        assert outcomes[0] == await send(client, "idem", "hold once", idempotency_key="k1")
        reused = await client.post(
            "/v1/sessions/idem/messages", json={"content": "other", "idempotency_key": "k1"}
        )
        assert (reused.status_code, error_of(reused)) == (422, "IDEMPOTENCY_KEY_REUSED")
        assert len(turn_ends(server, "idem")) == 1

        # Not waiting, then collecting the outcome with the same key.
        started = await client.post(
            "/v1/sessions/idem/messages",
            json={"content": "later", "idempotency_key": "k2", "wait": False},
        )
        assert started.status_code == 202
        collected = await send(client, "idem", "later", idempotency_key="k2")
        assert (collected["turn"], collected["text"]) == (2, "echo: later")
        assert len(turn_ends(server, "idem")) == 2


async def test_a_client_that_disconnects_mid_send_cancels_its_turn_only() -> None:
    model = HeldModel()
    async with running_server(app_config_for(model)) as server, server.client() as client:
        await create(client, "gone")
        async with trio.open_nursery() as nursery:

            async def doomed() -> None:
                async with server.client() as own:
                    await own.post(
                        "/v1/sessions/gone/messages",
                        json={"content": "hold me", "idempotency_key": "left"},
                    )

            nursery.start_soon(doomed)
            await model.entered.wait()
            nursery.cancel_scope.cancel()  # the client goes away, its connection closes
        agent = server.service.runtime.get("gone")
        assert agent is not None
        await agent.wait_idle()
        assert turn_ends(server, "gone") == [
            {"turn": 1, "reason": {"kind": "aborted", "reason": "caller cancelled"}}
        ]
        model.release()
        after = await send(client, "gone", "next one")
        assert (after["turn"], after["reason"]) == (2, "completed")
        retried = await send(client, "gone", "hold me", idempotency_key="left")
        assert (retried["turn"], retried["reason"], retried["message"]) == (
            1,
            "aborted",
            "caller cancelled",
        )
        assert len(turn_ends(server, "gone")) == 2


async def test_steer_inject_and_cancel() -> None:
    model = HeldModel()
    async with running_server(app_config_for(model)) as server, server.client() as client:
        await create(client, "ctl")
        injected = await client.post(
            "/v1/sessions/ctl/inject", json={"content": "fact", "source": "ci", "meta": {"a": 1}}
        )
        assert injected.status_code == 202
        outcome: dict[str, Any] = {}

        async def held() -> None:
            outcome.update(await send(client, "ctl", "hold on"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(held)
            await model.entered.wait()
            steered = await client.post("/v1/sessions/ctl/steer", json={"content": "go left"})
            assert steered.status_code == 202 and steered.json()["status"] == "running"
            cancelled = await client.post("/v1/sessions/ctl/cancel", json={"reason": "stop it"})
            assert cancelled.json() == {"id": "ctl", "status": "running", "cancelled": True}
        assert (outcome["reason"], outcome["message"]) == ("aborted", "stop it")
        agent = server.service.runtime.get("ctl")
        assert agent is not None
        contexts = [e for e in agent.session.events if e.type == "context/message"]
        assert [c.data.source.plugin for c in contexts] == ["ci"]  # type: ignore[union-attr]
        idle = await client.post("/v1/sessions/ctl/cancel", json={})
        assert idle.json() == {"id": "ctl", "status": "idle", "cancelled": False}


async def test_sse_resumes_with_last_event_id_without_gap_or_duplicate() -> None:
    async with running_server(app_config_for(HeldModel())) as server, server.client() as client:
        await create(client, "sse")
        await send(client, "sse", "one")
        async with client.stream("GET", "/v1/sessions/sse/events") as response:
            head = await read_events(response, 4)
        last = head[-1].id
        seen = [int(e.id or -1) for e in head]
        async with trio.open_nursery() as nursery:
            received: list[int] = []

            async def follow() -> None:
                async with client.stream(
                    "GET", "/v1/sessions/sse/events", headers={"Last-Event-ID": str(last)}
                ) as response:
                    async for event in SseReader(response):
                        received.append(int(event.id or -1))
                        if event.event == "turn/end" and event.data["data"]["turn"] == 2:
                            return

            nursery.start_soon(follow)
            await send(client, "sse", "two")  # live events reach the open stream
        agent = server.service.runtime.get("sse")
        assert agent is not None
        assert seen + received == list(range(len(agent.session)))
        after = await client.get("/v1/sessions/sse/events?follow=false&after=3")
        ids = [line[4:] for line in after.text.splitlines() if line.startswith("id: ")]
        assert ids == [str(seq) for seq in range(4, len(agent.session))]


async def test_a_stream_follows_a_session_across_dispose_and_resume() -> None:
    async with running_server(app_config_for(HeldModel())) as server, server.client() as client:
        await create(client, "across")
        await send(client, "across", "one")
        turns: list[int] = []
        async with trio.open_nursery() as nursery:

            async def follow() -> None:
                async with client.stream("GET", "/v1/sessions/across/events") as response:
                    async for event in SseReader(response):
                        if event.event == "turn/end":
                            turns.append(event.data["data"]["turn"])
                            if len(turns) == 2:
                                return

            nursery.start_soon(follow)
            await client.delete("/v1/sessions/across")
            await send(client, "across", "two")  # resumes on demand; the stream goes on
        assert turns == [1, 2]


async def test_a_client_that_disconnects_mid_stream_ends_its_stream_only() -> None:
    async with running_server(app_config_for(HeldModel())) as server, server.client() as client:
        await create(client, "drop")
        await send(client, "drop", "one")
        async with client.stream("GET", "/v1/sessions/drop/events") as response:
            assert len(await read_events(response, 2)) == 2
            assert server.service.drain.open_streams == 1
        await server.service.drain.until_streams_at_most(0)
        assert (await send(client, "drop", "still here"))["reason"] == "completed"


async def test_a_stored_session_streams_from_the_store_without_taking_it(tmp_path: Path) -> None:
    store = f"sqlite:{tmp_path}/s.db"
    async with open_runtime(EchoProvider(), store=store) as rt:
        agent = await rt.spawn(AgentOptions(model="m"), session_id="old")
        await agent.send("before the server")
        expected = [encode_event(e) for e in agent.session.events]
    async with (
        running_server(app_config_for(HeldModel()), store=store) as server,
        server.client() as client,
    ):
        response = await client.get("/v1/sessions/old/events?follow=false")
        datas = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
        assert [d.encode() for d in datas] == expected
        assert server.service.runtime.get("old") is None
        detail = (await client.get("/v1/sessions/old")).json()
        assert (detail["status"], detail["live"], detail["profile"]) == ("stored", False, None)
        # A send resumes it on demand (no recorded profile: the default one).
        assert (await send(client, "old", "now served"))["turn"] == 2


async def test_auth_needs_the_bearer_token_on_v1_only() -> None:
    async with running_server(app_config_for(HeldModel()), token=TOKEN) as server:
        async with server.client() as anonymous:
            assert (await anonymous.get("/healthz")).status_code == 200
            document = (await anonymous.get("/openapi.json")).json()
            assert document["paths"]["/v1/sessions"]["post"]["security"] == [{"bearer": []}]
            refused = await anonymous.get("/v1/sessions")
            assert (refused.status_code, error_of(refused)) == (401, "UNAUTHORIZED")
            assert refused.headers["www-authenticate"].startswith("Bearer")
            wrong = await anonymous.get("/v1/sessions", headers={"Authorization": "Bearer nope"})
            assert wrong.status_code == 401
            basic = await anonymous.get("/v1/sessions", headers={"Authorization": f"Basic {TOKEN}"})
            assert basic.status_code == 401
            assert TOKEN not in refused.text + wrong.text + basic.text
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with server.client(headers=headers) as client:
            assert (await client.get("/v1/sessions")).status_code == 200
            await create(client, "authed")


async def test_the_drain_refuses_new_work_ends_streams_and_aborts_turns_after_the_grace() -> None:
    model = HeldModel()
    results: dict[str, Any] = {}
    async with (
        running_server(app_config_for(model), grace_seconds=0) as server,
        server.client() as client,
    ):
        await create(client, "d")
        stream_open = trio.Event()
        async with trio.open_nursery() as nursery:

            async def held() -> None:
                results["held"] = await send(client, "d", "hold until shutdown")

            async def stream() -> None:
                async with (
                    server.client() as own,
                    own.stream("GET", "/v1/sessions/d/events") as response,
                ):
                    reader = SseReader(response)
                    first = await reader.read(1)
                    stream_open.set()
                    results["streamed"] = first + await reader.read()

            nursery.start_soon(held)
            await model.entered.wait()
            queued = await client.post(
                "/v1/sessions/d/messages",
                json={"content": "behind", "if_busy": "queue", "wait": False},
            )
            assert queued.status_code == 202
            nursery.start_soon(stream)
            await stream_open.wait()
            server.control.drain()
        try:
            async with server.client() as fresh:
                refused = await fresh.post("/v1/sessions", json={})
            assert (refused.status_code, error_of(refused)) == (503, "SERVER_DRAINING")
        except httpx.ConnectError:
            pass  # the listener is closed already: refused either way
        agent = server.service.runtime.get("d")
        assert agent is not None
        assert turn_ends(server, "d") == [
            {"turn": 1, "reason": {"kind": "aborted", "reason": "server shutting down"}}
        ]
    assert (results["held"]["reason"], results["held"]["message"]) == (
        "aborted",
        "server shutting down",
    )
    # The stream ended at the drain's start (it returned), having begun with turn 1.
    assert results["streamed"][0].event == "turn/start"


async def test_a_forced_drain_cuts_the_grace_period_short() -> None:
    model = HeldModel()
    outcome: dict[str, Any] = {}
    async with (
        running_server(app_config_for(model), grace_seconds=3600) as server,
        server.client() as client,
    ):
        await create(client, "f")
        async with trio.open_nursery() as nursery:

            async def held() -> None:
                outcome.update(await send(client, "f", "hold for an hour"))

            nursery.start_soon(held)
            await model.entered.wait()
            server.control.drain()
            server.control.force()  # a second SIGTERM: no hour of grace
    assert (outcome["reason"], outcome["message"]) == ("aborted", "server shutting down")
