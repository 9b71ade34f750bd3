"""Routing between serve instances on one PostgreSQL store, in one trio run (each instance a
real server on a real socket, its own runtime and store): a request for a session another
live instance owns is answered by the owner, its event stream followed from anywhere, a
caller that goes away cancels the owner's turn, and a session released by its owner is
claimed by the instance a request reaches. Requests and answers travel in the notifications
when they fit, through the rows when they do not, and the poll makes up for lost
notifications (decision 0020)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import orjson
import psycopg
import pytest
import trio
from serve_kit import HeldModel, Running, SseReader, app_config_for, running_server

from actorloop.runtime.service.routing import Router
from actorloop.runtime.stores.postgres import inbox
from actorloop.runtime.stores.postgres.config import parse_url
from actorloop.runtime.stores.postgres.inbox import (
    PAYLOAD_MAX,
    Handed,
    Inbox,
    Notice,
    parse_notice,
)


@asynccontextmanager
async def instances(pg_url: str, count: int) -> AsyncIterator[list[tuple[Running, HeldModel]]]:
    url = f"{pg_url}?lease_s=2&poll_s=0.05"
    async with AsyncExitStack() as stack:
        started = []
        for _ in range(count):
            model = HeldModel()
            server = await stack.enter_async_context(
                running_server(app_config_for(model, url), store=url, grace_seconds=0.5)
            )
            started.append((server, model))
        yield started


def owner_node(pg_url: str, session_id: str) -> str | None:
    with psycopg.connect(parse_url(pg_url).conninfo) as conn:
        row = conn.execute(
            "SELECT owner_node FROM actorloop.sessions WHERE id = %s", (session_id,)
        ).fetchone()
    return None if row is None else row[0]


async def test_a_request_for_a_session_owned_elsewhere_is_answered_by_its_owner(
    pg_url: str,
) -> None:
    async with instances(pg_url, 2) as [(a, _), (b, _)]:
        node_a = a.service.runtime.store.node  # type: ignore[attr-defined]
        async with a.client() as at_a, b.client() as at_b:
            assert (await at_a.post("/v1/sessions", json={"session_id": "s1"})).status_code == 201
            sent = await at_b.post("/v1/sessions/s1/messages", json={"content": "hi"})
            assert sent.status_code == 200, sent.text
            assert (sent.json()["turn"], sent.json()["text"]) == (1, "echo: hi")
            # The turn ran at the owner; the other instance started no agent.
            assert b.service.runtime.get("s1") is None
            assert owner_node(pg_url, "s1") == node_a
            detail = (await at_b.get("/v1/sessions/s1")).json()
            assert (detail["live"], detail["status"], detail["turns"]) == (True, "idle", 1)
            # Errors come back as the owner answered them.
            busy = await at_b.post("/v1/sessions/s1/messages", json={"content": 5})
            assert (busy.status_code, busy.json()["error"]["code"]) == (422, "VALIDATION_FAILED")
            # A stream at the other instance follows the owner's durable log.
            async with at_b.stream("GET", "/v1/sessions/s1/events?after=-1") as stream:
                reader = SseReader(stream)
                seen = [event async for event in _until_turn_end(reader, 1)]
                second = await at_b.post("/v1/sessions/s1/messages", json={"content": "more"})
                assert second.json()["turn"] == 2
                seen += [event async for event in _until_turn_end(reader, 2)]
            assert [int(event.id) for event in seen] == list(range(len(seen)))
            assert (await at_b.get("/v1/sessions/s1/verify")).json()["ok"] is True


async def _until_turn_end(reader: SseReader, turn: int) -> AsyncIterator[object]:
    async for event in reader:
        yield event
        if event.event == "turn/end" and event.data["data"]["turn"] == turn:
            return


async def test_a_caller_going_away_cancels_the_owners_turn(pg_url: str) -> None:
    async with (
        instances(pg_url, 2) as [(a, model_a), (b, _)],
        a.client() as at_a,
        b.client() as at_b,
    ):
        await at_a.post("/v1/sessions", json={"session_id": "s2"})
        with trio.move_on_after(30):
            async with trio.open_nursery() as nursery:

                async def send() -> None:
                    await at_b.post("/v1/sessions/s2/messages", json={"content": "hold on"})

                nursery.start_soon(send)
                await model_a.entered.wait()  # the held model call runs at the owner
                nursery.cancel_scope.cancel()  # the client at b goes away
        agent = a.service.runtime.get("s2")
        assert agent is not None
        await agent.wait_idle()
        events = agent.session.events
        ends = [e.data for e in events if e.type == "turn/end"]
        assert [(end.reason.kind, end.reason.reason) for end in ends] == [  # type: ignore[attr-defined]
            ("aborted", "caller cancelled")
        ]
        after = await at_b.post("/v1/sessions/s2/messages", json={"content": "again"})
        assert (after.json()["turn"], after.json()["reason"]) == (2, "completed")


async def test_a_session_its_owner_released_is_claimed_where_a_request_arrives(
    pg_url: str,
) -> None:
    async with instances(pg_url, 2) as [(a, _), (b, _)]:
        node_b = b.service.runtime.store.node  # type: ignore[attr-defined]
        async with a.client() as at_a, b.client() as at_b:
            await at_a.post("/v1/sessions", json={"session_id": "s3"})
            await at_a.post("/v1/sessions/s3/messages", json={"content": "one"})
            disposed = await at_b.delete("/v1/sessions/s3")  # handed to the owner
            assert disposed.json()["status"] == "disposed"
            await a.service.runtime.store.write_releases()  # type: ignore[attr-defined]
            sent = await at_b.post("/v1/sessions/s3/messages", json={"content": "two"})
            assert (sent.json()["turn"], sent.json()["reason"]) == (2, "completed")
            assert owner_node(pg_url, "s3") == node_b
            assert b.service.runtime.get("s3") is not None
            assert (await at_a.get("/v1/sessions/s3")).json()["live"] is True  # from b


def recording_notices(monkeypatch: pytest.MonkeyPatch) -> list[Notice]:
    """Every notice the instances' listeners read (both share the module), in order."""
    seen: list[Notice] = []

    def parse(channel: str, payload: str, node: str) -> Notice | None:
        notice = parse_notice(channel, payload, node)
        if notice is not None:
            seen.append(notice)
        return notice

    monkeypatch.setattr(inbox, "parse_notice", parse)
    return seen


def of_kind(notices: list[Notice], kind: str) -> list[Notice]:
    return [notice for notice in notices if notice.kind == kind]


async def test_the_request_and_the_answer_travel_in_the_notifications(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the poll switched off, routed requests are still answered: the owner runs the
    request its notification carried, and the sender answers with what the answer's
    notification carried. A send is taken (by id, its row not read); a GET is not."""

    async def no_poll(self: Router) -> None:
        await trio.lowlevel.checkpoint()

    monkeypatch.setattr(Router, "_tick", no_poll)
    notices = recording_notices(monkeypatch)
    took: list[Handed | None] = []
    take_one = Inbox.take_one

    async def spy(self: Inbox, row_id: int, carried: Handed | None) -> Handed | None:
        took.append(carried)
        return await take_one(self, row_id, carried)

    monkeypatch.setattr(Inbox, "take_one", spy)
    async with instances(pg_url, 2) as [(a, _), (b, _)], a.client() as at_a, b.client() as at_b:
        await at_a.post("/v1/sessions", json={"session_id": "p1"})
        sent = await at_b.post(
            "/v1/sessions/p1/messages",
            json={"content": "héllo"},
            headers={"idempotency-key": "k-1"},
        )
        assert (sent.status_code, sent.json()["text"]) == (200, "echo: héllo")
        detail = await at_b.get("/v1/sessions/p1")
        assert (detail.status_code, detail.json()["turns"]) == (200, 1)
        # The key travelled with the request: the same send again is the same turn.
        again = await at_b.post(
            "/v1/sessions/p1/messages",
            json={"content": "héllo"},
            headers={"idempotency-key": "k-1"},
        )
        assert again.json()["turn"] == 1
    requests = of_kind(notices, "request")
    assert [orjson.loads(n.handed.request)["method"] for n in requests if n.handed] == [
        "POST",
        "GET",
        "POST",
    ]
    assert orjson.loads(requests[0].handed.body) == {"content": "héllo"}  # type: ignore[union-attr]
    answers = [n.answer for n in of_kind(notices, "answer")]
    assert [(answer.status, orjson.loads(answer.response)) for answer in answers if answer] == [
        (200, sent.json()),
        (200, detail.json()),
        (200, again.json()),
    ]
    assert len(took) == 2 and all(carried is not None for carried in took)  # the sends only


async def test_a_request_and_an_answer_too_large_to_carry_go_through_the_row(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    notices = recording_notices(monkeypatch)
    content = "x" * (PAYLOAD_MAX + 100)
    async with instances(pg_url, 2) as [(a, _), (b, _)], a.client() as at_a, b.client() as at_b:
        await at_a.post("/v1/sessions", json={"session_id": "p2"})
        sent = await at_b.post("/v1/sessions/p2/messages", json={"content": content})
        assert (sent.status_code, sent.json()["text"]) == (200, f"echo: {content}")
        small = await at_b.post("/v1/sessions/p2/messages", json={"content": "small"})
        assert small.json()["turn"] == 2
    requests, answers = of_kind(notices, "request"), of_kind(notices, "answer")
    assert [n.handed is None for n in requests] == [True, False]
    assert [n.answer is None for n in answers] == [True, False]


async def test_lost_notifications_are_made_up_for_by_the_poll(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every notification lost (the listeners hear nothing): requests handed over and
    their answers are still found in the rows, a poll interval later."""
    lost: list[str] = []

    def deaf(channel: str, payload: str, node: str) -> Notice | None:
        lost.append(payload)
        return None

    monkeypatch.setattr(inbox, "parse_notice", deaf)
    async with instances(pg_url, 2) as [(a, _), (b, _)], a.client() as at_a, b.client() as at_b:
        await at_a.post("/v1/sessions", json={"session_id": "p3"})
        sent = await at_b.post("/v1/sessions/p3/messages", json={"content": "anyone?"})
        assert (sent.status_code, sent.json()["text"]) == (200, "echo: anyone?")
        detail = await at_b.get("/v1/sessions/p3")
        assert (detail.json()["live"], detail.json()["turns"]) == (True, 1)
    assert len(lost) >= 4  # two requests and two answers were sent, and none heard
