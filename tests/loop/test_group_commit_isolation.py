"""One bad session never takes the others down: a group commit writes every session it can
and names the ones it could not (each store), the CodecActor fails only the barriers of
those sessions, and under the Runtime only that session's agent fails."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from helpers import open_runtime
from session_logs import begin_turn, closed_log, tool_turn

from actorloop.actors.codec import CodecActor
from actorloop.runtime import AgentOptions
from actorloop.runtime.errors import (
    ActorloopError,
    GroupCommitError,
    SessionCorruptError,
    SessionValidationError,
    SessionWriteError,
    StoreError,
)
from actorloop.runtime.log.session import Session
from actorloop.runtime.log.verify import verify_log
from actorloop.runtime.model.events import SessionEvent, UserMessage
from actorloop.runtime.model.messages import Text
from actorloop.runtime.stores import SqliteStore, Store, open_store
from actorloop.runtime.stores.base import Batch
from actorloop.runtime.testing import EchoProvider

IDS = ("a", "b", "c")


def url_for(kind: str, tmp_path: Path, request: pytest.FixtureRequest | None = None) -> str:
    if kind == "postgres":
        assert request is not None
        return str(request.getfixturevalue("pg_url"))
    return {
        "memory": "memory:",
        "sqlite": f"sqlite:{tmp_path / 'iso.db'}",
        "jsonl": f"jsonl:{tmp_path / 'logs'}",
    }[kind]


@pytest.fixture(params=("memory", "sqlite", "jsonl", "postgres"))
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    opened = open_store(url_for(request.param, tmp_path, request))
    yield opened
    await opened.close()


@pytest.fixture(params=("sqlite", "jsonl", "postgres"))
async def durable(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    opened = open_store(url_for(request.param, tmp_path, request))
    yield opened
    await opened.close()


async def created(store: Store) -> dict[str, Session]:
    logs = {session_id: closed_log(session_id, 2) for session_id in IDS}
    for session in logs.values():
        await store.create(session.meta)
    return logs


class Recording:
    """The real store, with each group commit's sessions recorded (proof of one batch)."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.url = inner.url
        self.batches: list[list[str]] = []

    async def append_batch(self, batch: Batch) -> None:
        self.batches.append([session_id for session_id, _ in batch])
        await self.inner.append_batch(batch)


def with_lone_surrogate(event: SessionEvent) -> SessionEvent:
    """A hand-built event (bypassing Session, which refuses it) carrying "\\ud800"."""
    assert isinstance(event.data, UserMessage)
    return attrs.evolve(event, data=attrs.evolve(event.data, content=(Text("bad \ud800"),)))


# the stores --------------------------------------------------------------------------------


async def test_a_session_failing_its_tail_check_writes_nothing_the_others_commit(
    store: Store,
) -> None:
    logs = await created(store)
    await store.append("b", logs["b"].events[:5])  # "b"'s stored tail moved on meanwhile
    with pytest.raises(GroupCommitError) as info:
        await store.append_batch([(sid, logs[sid].events) for sid in IDS])
    [(failed, error)] = info.value.failures
    assert failed == "b" and isinstance(error, SessionValidationError)
    assert (await store.load("a"))[1] == logs["a"].events
    assert (await store.load("c"))[1] == logs["c"].events
    assert (await store.load("b", repair=False))[1] == logs["b"].events[:5]


async def test_an_unencodable_event_fails_only_its_session(durable: Store) -> None:
    logs = await created(durable)
    bad = list(logs["b"].events)
    bad[1] = with_lone_surrogate(bad[1])
    with pytest.raises(GroupCommitError) as info:
        await durable.append_batch([("a", logs["a"].events), ("b", bad), ("c", logs["c"].events)])
    assert [session_id for session_id, _ in info.value.failures] == ["b"]
    assert "surrogates" in str(info.value.failures[0][1])
    for session_id in ("a", "c"):
        assert (await durable.load(session_id))[1] == logs[session_id].events
    assert (await durable.load("b", repair=False))[1] == ()


async def test_sqlite_isolates_a_row_over_the_length_limit(tmp_path: Path) -> None:
    """A statement failing for one session's row (SQLite's SQLITE_LIMIT_LENGTH, lowered
    here on the store's own connection) sends the commit session by session."""
    store = SqliteStore(tmp_path / "limit.db")
    logs = await created(store)
    await store.exists("a")  # opens the connection
    assert store._db is not None
    store._db.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 4000)
    long = Session.create("b")
    begin_turn(long, "x" * 5000)
    try:
        with pytest.raises(GroupCommitError) as info:
            await store.append_batch(
                [("a", logs["a"].events), ("b", long.events), ("c", logs["c"].events)]
            )
        [(failed, error)] = info.value.failures
        assert failed == "b" and isinstance(error, StoreError)
        assert isinstance(error.__cause__, sqlite3.DataError)
        assert (await store.load("a"))[1] == logs["a"].events
        assert (await store.load("c"))[1] == logs["c"].events
        assert (await store.load("b", repair=False))[1] == ()
    finally:
        await store.close()


async def test_jsonl_isolates_a_session_whose_log_tail_is_damaged(tmp_path: Path) -> None:
    store = open_store(url_for("jsonl", tmp_path))
    logs = await created(store)
    with (tmp_path / "logs" / "b" / "log.jsonl").open("ab") as log:
        log.write(b"not a frame\n")
    try:
        with pytest.raises(GroupCommitError) as info:
            await store.append_batch([(sid, logs[sid].events) for sid in IDS])
        [(failed, error)] = info.value.failures
        assert failed == "b" and isinstance(error, SessionCorruptError)
        for session_id in ("a", "c"):
            assert (await store.load(session_id))[1] == logs[session_id].events
    finally:
        await store.close()


# the codec actor ---------------------------------------------------------------------------


async def test_the_codec_fails_only_the_barriers_of_the_session_not_written(
    durable: Store, caplog: pytest.LogCaptureFixture
) -> None:
    logs = await created(durable)
    await durable.append("b", logs["b"].events[:5])
    recording = Recording(durable)
    actor = CodecActor(recording)  # type: ignore[arg-type]
    # Queued before the actor runs: its first round is one group commit of all three.
    for session_id in IDS:
        await actor.submit(session_id, logs[session_id].events)
    with caplog.at_level(logging.CRITICAL, logger="actorloop"):
        async with trio.open_nursery() as nursery:
            await nursery.start(actor.run)
            with pytest.raises(StoreError, match="'b' were not written"):
                await actor.flush()
            await actor.flush("a")
            await actor.flush("c")
            with pytest.raises(SessionWriteError) as info:
                await actor.flush("b")
            assert info.value.session_id == "b"
            assert isinstance(info.value.__cause__, SessionValidationError)
            # Reported once; the actor is open for every session, "b" included.
            await actor.flush()
            more = closed_log("a", 3).events[len(logs["a"]) :]
            await actor.persist("a", more)
            await actor.persist("b", logs["b"].events[5:])
            await actor.aclose()  # nothing unreported: no error
    assert recording.batches[0] == list(IDS)
    assert (await durable.load("a"))[1] == (*logs["a"].events, *more)
    assert (await durable.load("b"))[1] == logs["b"].events
    assert (await durable.load("c"))[1] == logs["c"].events


async def test_an_unreported_session_failure_fails_aclose(durable: Store) -> None:
    logs = await created(durable)
    await durable.append("b", logs["b"].events[:5])
    actor = CodecActor(durable)
    for session_id in IDS:
        await actor.submit(session_id, logs[session_id].events)
    async with trio.open_nursery() as nursery:
        await nursery.start(actor.run)
        with pytest.raises(StoreError, match="'b' were not written"):
            await actor.aclose()
    assert (await durable.load("a"))[1] == logs["a"].events


# the runtime -------------------------------------------------------------------------------

OPTIONS = AgentOptions(model="m")


@pytest.mark.parametrize("kind", ["sqlite", "jsonl", "postgres"])
async def test_only_the_agent_whose_session_cannot_be_written_fails(
    tmp_path: Path, kind: str, caplog: pytest.LogCaptureFixture, request: pytest.FixtureRequest
) -> None:
    url = url_for(kind, tmp_path, request)
    async with open_runtime(EchoProvider(), store=url) as rt:
        victim = await rt.spawn(OPTIONS, session_id="victim")
        siblings = [await rt.spawn(OPTIONS, session_id=f"sib{n}") for n in range(3)]
        assert (await victim.send("before")).reason == "completed"
        # Another writer of this process continues the victim's stored log behind its
        # loop's back: the loop's next batch no longer continues the stored tail.
        rival = Session.from_events("victim", victim.session.events, victim.session.meta)
        tool_turn(rival, "the rival's turn")
        await rt.store.append("victim", rival.events_since(len(victim.session)))
        await rt.store.flush("victim")
        results: dict[str, Any] = {}

        async def drive(agent: Any) -> None:
            results[agent.id] = await agent.send("during")

        with caplog.at_level(logging.CRITICAL, logger="actorloop"):
            async with trio.open_nursery() as nursery:
                for agent in (victim, *siblings):
                    nursery.start_soon(drive, agent)
        assert results["victim"].reason == "error"
        assert victim.status == "failed"
        for sibling in siblings:
            assert results[sibling.id].reason == "completed"
            assert (await sibling.send("more")).reason == "completed"
        # The victim's stored log is the rival's, whole and loadable.
        again = await rt.resume("victim", OPTIONS)
        assert again.session.events == rival.events
        assert (await again.send("after")).reason == "completed"
    # Leaving the runtime raised nothing: the failure was reported to the victim alone.


async def test_every_barrier_of_the_failed_session_in_that_round_fails(durable: Store) -> None:
    logs = await created(durable)
    await durable.append("b", logs["b"].events[:5])
    actor = CodecActor(durable)
    outcomes: list[tuple[str, str]] = []

    async def barrier(session_id: str, events: Sequence[SessionEvent]) -> None:
        try:
            await actor.persist(session_id, events)
            outcomes.append((session_id, "ok"))
        except SessionWriteError:
            outcomes.append((session_id, "failed"))

    async with trio.open_nursery() as services:
        async with trio.open_nursery() as loops:
            # All queued before the actor runs: one round, "b" twice.
            loops.start_soon(barrier, "a", logs["a"].events)
            loops.start_soon(barrier, "b", logs["b"].events[:13])
            loops.start_soon(barrier, "b", logs["b"].events[13:])
            await trio.testing.wait_all_tasks_blocked()
            await services.start(actor.run)
        await actor.aclose()
    assert sorted(outcomes) == [("a", "ok"), ("b", "failed"), ("b", "failed")]
    assert (await durable.load("b", repair=False))[1] == logs["b"].events[:5]


@pytest.mark.parametrize("kind", ["memory", "sqlite", "jsonl", "postgres"])
async def test_a_lone_surrogate_fails_only_its_own_turn_in_every_store(
    tmp_path: Path, kind: str, caplog: pytest.LogCaptureFixture, request: pytest.FixtureRequest
) -> None:
    """The case that took every agent down: a "\\ud800" sent by one agent used to pass the
    append and break the group commit (and the runtime's exit) for all of them."""
    url = url_for(kind, tmp_path, request)
    with caplog.at_level(logging.CRITICAL, logger="actorloop"):
        async with open_runtime(EchoProvider(), store=url) as rt:
            bad = await rt.spawn(OPTIONS, session_id="bad")
            good = await rt.spawn(OPTIONS, session_id="good")
            try:
                outcome = (await bad.send("hello \ud800")).reason
            except ActorloopError:
                outcome = "refused"  # a caller-side check is as good as a failed turn
            assert outcome in ("error", "refused")
            assert (await good.send("fine")).reason == "completed"
            assert (await bad.send("fine now")).reason == "completed"
            stored = {sid: await rt.store.load(sid, repair=False) for sid in ("bad", "good")}
    for meta, events in stored.values():
        verify_log(meta, events)
        assert all("\ud800" not in repr(event) for event in events)
