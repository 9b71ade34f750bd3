"""Idempotency keys kept by the store (issue 35, docs/serve.md §5): the same key after a
restart of the server, and after kill -9 of the server that owned the session (SQLite: a
restarted server on the file; PostgreSQL: another instance takes over), answers with the
first turn's outcome, says it is a replay (`Idempotent-Replayed: true`) and never starts a
second turn; the other state-changing routes replay their first response too.

Bounded by default: `ACTORLOOP_IDEMPOTENT_SESSIONS` sessions per test (10). Full mode, as the
issue asks: `ACTORLOOP_IDEMPOTENT_SESSIONS=100 pytest -q tests/service/test_serve_durable_keys.py`.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from serve_kit import HeldModel, ServerProcess, SseReader, app_config_for, child_env, running_server

from actorloop.runtime.errors import AgentBusy
from actorloop.runtime.model.events import UserMessage
from actorloop.runtime.model.messages import Text
from actorloop.runtime.service.durable_keys import DurableKeys, ReplayFlag, StoredResponse
from actorloop.runtime.service.idempotency import fingerprint
from actorloop.runtime.stores import open_store
from actorloop.runtime.stores.idempotency import KeyRecord, key_table, now_ms

SESSIONS = int(os.environ.get("ACTORLOOP_IDEMPOTENT_SESSIONS", "10"))
REPLAYED = "idempotent-replayed"


async def turns_with(url: str, session_id: str, text: str) -> int:
    """How many turns of the stored session have `text` as their user message."""
    store = open_store(url)
    try:
        _meta, events = await store.load(session_id, repair=False)
    finally:
        await store.close()
    return sum(
        1
        for event in events
        if isinstance(event.data, UserMessage) and event.data.content == (Text(text),)
    )


async def test_keys_survive_a_restart_of_the_server(tmp_path: Path) -> None:
    store = f"sqlite:{tmp_path / 'serve.db'}"
    first: dict[int, Any] = {}
    async with (
        running_server(app_config_for(HeldModel(), store), store=store) as server,
        server.client() as client,
    ):
        for index in range(SESSIONS):
            assert (
                await client.post("/v1/sessions", json={"session_id": f"s{index}"})
            ).status_code == 201
            response = await client.post(
                f"/v1/sessions/s{index}/messages",
                json={"content": f"hi {index}"},
                headers={"Idempotency-Key": f"k{index}"},
            )
            assert response.status_code == 200 and REPLAYED not in response.headers
            first[index] = response.json()
        forked = await client.post(
            "/v1/sessions/s0/fork",
            json={"child_id": "child"},
            headers={"Idempotency-Key": "f1"},
        )
        assert forked.status_code == 201, forked.text
    async with (
        running_server(app_config_for(HeldModel(), store), store=store) as server,
        server.client() as client,
    ):
        for index in range(SESSIONS):
            again = await client.post(
                f"/v1/sessions/s{index}/messages",
                json={"content": f"hi {index}"},
                headers={"Idempotency-Key": f"k{index}"},
            )
            assert again.status_code == 200 and again.headers[REPLAYED] == "true"
            assert again.json() == first[index]
        # The body's key is the same key as the header's.
        body_key = await client.post(
            "/v1/sessions/s0/messages", json={"content": "hi 0", "idempotency_key": "k0"}
        )
        assert body_key.json() == first[0] and body_key.headers[REPLAYED] == "true"
        other = await client.post(
            "/v1/sessions/s0/messages",
            json={"content": "something else"},
            headers={"Idempotency-Key": "k0"},
        )
        assert (
            other.status_code == 422 and other.json()["error"]["code"] == "IDEMPOTENCY_KEY_REUSED"
        )
        refork = await client.post(
            "/v1/sessions/s0/fork",
            json={"child_id": "child"},
            headers={"Idempotency-Key": "f1"},
        )
        assert (refork.status_code, refork.json()) == (201, forked.json())
        assert refork.headers[REPLAYED] == "true"
    for index in range(SESSIONS):
        assert await turns_with(store, f"s{index}", f"hi {index}") == 1


async def _until_model_called(client: httpx.AsyncClient, session_id: str) -> None:
    """Until the session's turn has begun its first step (live; durable a moment later, at
    the barrier before the model call, which the kill may or may not beat)."""
    async with client.stream("GET", f"/v1/sessions/{session_id}/events") as response:
        async for event in SseReader(response):
            if event.event == "step/start":
                return


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_keys_survive_kill_9_of_the_owner(
    tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    """SQLite: the killed server is restarted on its file. PostgreSQL: another instance
    takes the sessions over once the dead owner's leases ran out."""
    if kind == "sqlite":
        url = f"sqlite:{tmp_path / 'serve.db'}"
    else:
        pg_url = str(request.getfixturevalue("pg_url"))
        url = f"{pg_url}{'&' if '?' in pg_url else '?'}lease_s=2&poll_s=0.05"
    owner = await trio.to_thread.run_sync(
        lambda: ServerProcess(["--store", url, "--sim-latency-ms", "600000"], child_env(), tmp_path)
    )
    try:
        async with httpx.AsyncClient(base_url=owner.url, timeout=60) as client:
            for index in range(SESSIONS):
                session_id = f"p{index}"
                assert (
                    await client.post("/v1/sessions", json={"session_id": session_id})
                ).status_code == 201
                accepted = await client.post(
                    f"/v1/sessions/{session_id}/messages",
                    json={"content": f"pay {index}", "wait": False},
                    headers={"Idempotency-Key": f"k{index}"},
                )
                assert accepted.status_code == 202, accepted.text
                await _until_model_called(client, session_id)
        owner.proc.send_signal(signal.SIGKILL)
        await trio.to_thread.run_sync(owner.wait)
    finally:
        if owner.proc.poll() is None:
            owner.proc.kill()
    # Another instance: each session is claimed once the dead owner's lease ran out, and
    # the retried key finds its turn in the log (closed `interrupted` by the repair).
    replays = 0
    async with (
        running_server(app_config_for(HeldModel(), url), store=url) as other,
        other.client() as client,
    ):
        for index in range(SESSIONS):
            retried = await client.post(
                f"/v1/sessions/p{index}/messages",
                json={"content": f"pay {index}"},
                headers={"Idempotency-Key": f"k{index}"},
            )
            assert retried.status_code == 200, retried.text
            body = retried.json()
            if retried.headers.get(REPLAYED) == "true":
                # Its turn had become durable: the retry gets it, closed by the repair.
                assert (body["turn"], body["reason"]) == (1, "interrupted")
                replays += 1
            else:
                # Killed before the turn's first barrier: no turn was logged, so the
                # retry runs the first one.
                assert (body["turn"], body["reason"]) == (1, "completed"), body
        fresh = await client.post(
            "/v1/sessions/p0/messages",
            json={"content": "next"},
            headers={"Idempotency-Key": "new"},
        )
        assert (fresh.json()["turn"], fresh.json()["reason"]) == (2, "completed")
        assert REPLAYED not in fresh.headers
    duplicates = 0
    for index in range(SESSIONS):
        turns = await turns_with(url, f"p{index}", f"pay {index}")
        assert turns >= 1
        duplicates += turns - 1
    print(
        f"\n{kind} kill -9 of the owner: {SESSIONS} sessions, {replays} replayed, {duplicates} dups"
    )
    assert duplicates == 0


async def test_a_key_sent_to_two_instances_at_once_starts_one_turn(pg_url: str) -> None:
    """The header travels with a request handed to the session's owner: the same key sent
    at once to the owner and (twice) to the other instance starts one turn."""
    url = f"{pg_url}{'&' if '?' in pg_url else '?'}lease_s=2&poll_s=0.05"
    answers: list[httpx.Response] = []
    async with (
        running_server(app_config_for(HeldModel(), url), store=url) as owner,
        running_server(app_config_for(HeldModel(), url), store=url) as other,
        owner.client() as at_owner,
        other.client() as elsewhere,
    ):
        assert (await at_owner.post("/v1/sessions", json={"session_id": "r"})).status_code == 201

        async def send(client: httpx.AsyncClient) -> None:
            answers.append(
                await client.post(
                    "/v1/sessions/r/messages",
                    json={"content": "once"},
                    headers={"Idempotency-Key": "k"},
                )
            )

        async with trio.open_nursery() as nursery:
            for client in (elsewhere, at_owner, elsewhere):
                nursery.start_soon(send, client)
    assert [a.status_code for a in answers] == [200, 200, 200]
    assert len({a.json()["turn"] for a in answers}) == 1
    assert await turns_with(url, "r", "once") == 1


async def test_a_pending_key_of_a_gone_server_is_taken_over_or_answered_from_the_log(
    tmp_path: Path,
) -> None:
    """Claims a dead server left unsettled: with no turn after the claim's head the key is
    taken over and its turn runs once; with its turn in the log, that turn answers."""
    store = f"sqlite:{tmp_path / 'serve.db'}"
    async with (
        running_server(app_config_for(HeldModel(), store), store=store) as server,
        server.client() as client,
    ):
        for session_id in ("none", "logged"):
            assert (
                await client.post("/v1/sessions", json={"session_id": session_id})
            ).status_code == 201
        ran = await client.post("/v1/sessions/logged/messages", json={"content": "done"})
        assert ran.status_code == 200
    opened = open_store(store)
    keys = key_table(opened)
    for session_id, content in (("none", "fresh"), ("logged", "done")):
        stamp = fingerprint((Text(content),))
        gone = KeyRecord(session_id, "messages:k", stamp, "serve-gone", 0, now_ms())
        assert (await keys.claim(gone, 3600))[1]
    await opened.close()
    async with (
        running_server(app_config_for(HeldModel(), store), store=store) as server,
        server.client() as client,
    ):
        taken = await client.post(
            "/v1/sessions/none/messages",
            json={"content": "fresh"},
            headers={"Idempotency-Key": "k"},
        )
        assert taken.status_code == 200 and REPLAYED not in taken.headers
        assert (taken.json()["turn"], taken.json()["reason"]) == (1, "completed")
        found = await client.post(
            "/v1/sessions/logged/messages",
            json={"content": "done"},
            headers={"Idempotency-Key": "k"},
        )
        assert found.headers[REPLAYED] == "true" and found.json() == ran.json()
        again = await client.post(
            "/v1/sessions/none/messages",
            json={"content": "fresh"},
            headers={"Idempotency-Key": "k"},
        )
        assert again.headers[REPLAYED] == "true" and again.json() == taken.json()
    assert await turns_with(store, "none", "fresh") == 1
    assert await turns_with(store, "logged", "done") == 1


async def test_a_key_running_on_another_instance_is_busy_until_it_settles(
    tmp_path: Path,
) -> None:
    """Two service instances on one store (`DurableKeys` each): a keyed fork or create that
    runs at one is 409 at the other until it settles, then replayed there."""
    store = open_store(f"sqlite:{tmp_path / 's.db'}")
    first, second = DurableKeys(store), DurableKeys(store)
    release = trio.Event()
    started = trio.Event()

    async def slow() -> StoredResponse:
        started.set()
        await release.wait()
        return StoredResponse(201, b'{"id": "child"}')

    async def never() -> StoredResponse:
        raise AssertionError("the key's first request answers")

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(first.respond, "fork", "s", "k", b"{}", slow, ReplayFlag())
            await started.wait()
            with pytest.raises(AgentBusy):
                await second.respond("fork", "s", "k", b"{}", never, ReplayFlag())
            release.set()
        flag = ReplayFlag()
        replay = await second.respond("fork", "s", "k", b"{}", never, flag)
        assert (replay, flag.replayed) == (StoredResponse(201, b'{"id": "child"}'), True)
    finally:
        await store.close()
