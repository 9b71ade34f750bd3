"""The SQLite group-commit path's shortcuts: rows built in one loop are the canonical
encoding and checksum, a batch of leased sessions with remembered tails refuses exactly what
the checked path refuses and stores the same bytes, the busy timeout inline commits turn
off is back for every piece of thread work, and a lone writer's barrier committed in its
caller writes and refuses what the actor's round does and returns with no schedule point;
writers taking turns commit in their callers, writers flushing together share the actor's
rounds."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager, closing
from pathlib import Path

import pytest
import trio
import trio.testing
from session_logs import closed_log, tool_turn

from actorloop.actors.codec import CodecActor
from actorloop.codecs.converter import encode_event
from actorloop.codecs.rows import event_crc, event_rows
from actorloop.runtime.errors import (
    GroupCommitError,
    InvalidSessionId,
    SessionBusy,
    SessionValidationError,
    SessionWriteError,
    StoreError,
)
from actorloop.runtime.log.session import Session
from actorloop.runtime.stores import SqliteStore
from actorloop.runtime.stores.base import Batch
from actorloop.runtime.stores.leases import Lease


def test_event_rows_are_the_canonical_encoding_and_its_checksum() -> None:
    log = closed_log("rows", 3)
    rows = event_rows("rows", log.events)
    assert len(rows) == len(log)
    for row, event in zip(rows, log.events, strict=True):
        body = encode_event(event)
        assert row == (
            "rows",
            event.seq,
            event.type,
            event.time,
            body,
            event_crc("rows", event.seq, body),
        )
    assert event_rows("rows", ()) == []


def stored(path: Path, session_id: str) -> list[tuple[object, ...]]:
    with closing(sqlite3.connect(path)) as db:
        return db.execute(
            "SELECT * FROM events WHERE session_id = ? ORDER BY seq", (session_id,)
        ).fetchall()


async def test_leased_sessions_with_remembered_tails_refuse_what_the_checked_path_refuses(
    tmp_path: Path,
) -> None:
    first = {name: closed_log(name, 1) for name in ("a", "b", "c")}
    more = {}
    for name, log in first.items():
        grown = Session.from_events(name, log.events, log.meta)
        tool_turn(grown, "more")
        more[name] = grown.events_since(len(log))
    fast = SqliteStore(tmp_path / "fast.db")
    leases = [fast.claim("a"), fast.claim("b")]
    other = SqliteStore(tmp_path / "fast.db")  # another writer holds c
    held_elsewhere = other.claim("c")
    checked = SqliteStore(tmp_path / "checked.db")  # no lease: every commit checked
    try:
        for store in (fast, checked):
            for log in first.values():
                await store.create(log.meta)
        await fast.append_batch((("a", first["a"].events), ("b", first["b"].events)))
        assert set(fast._tails) == {"a", "b"}  # the next commit trusts these tails
        batch = (
            ("a", more["a"]),
            ("b", more["b"][1:]),  # a gap behind b's remembered tail
            ("c", more["c"]),
            ("../escape", more["a"]),
        )
        with pytest.raises(GroupCommitError) as raised:
            await fast.append_batch(batch)
        failures = dict(raised.value.failures)
        assert set(failures) == {"b", "c", "../escape"}
        assert isinstance(failures["b"], SessionValidationError)
        assert isinstance(failures["c"], SessionBusy)
        assert isinstance(failures["../escape"], InvalidSessionId)
        # The checked path writes the same session the same way.
        await checked.append_batch((("a", first["a"].events), ("b", first["b"].events)))
        await checked.append_batch((("a", more["a"]),))
        assert stored(tmp_path / "fast.db", "a") == stored(tmp_path / "checked.db", "a")
        assert len(stored(tmp_path / "fast.db", "a")) == len(first["a"]) + len(more["a"])
        assert len(stored(tmp_path / "fast.db", "b")) == len(first["b"])
        assert stored(tmp_path / "fast.db", "c") == []
        # The refused session is no longer trusted; its next commit is checked and lands.
        assert "b" not in fast._tails
        await fast.append_batch((("b", more["b"]),))
        assert len(stored(tmp_path / "fast.db", "b")) == len(first["b"]) + len(more["b"])
    finally:
        for lease in (*leases, held_elsewhere):
            lease.release()
        for store in (fast, other, checked):
            await store.close()


async def test_thread_work_waits_for_the_write_lock_after_inline_commits(tmp_path: Path) -> None:
    log = closed_log("s", 2)
    store = SqliteStore(tmp_path / "s.db")
    lease = store.claim("s")

    def busy_ms() -> int:
        return int(store._locked(lambda db: db.execute("PRAGMA busy_timeout").fetchone()[0]))

    try:
        await store.create(log.meta)
        seen_inline: list[int] = []
        for start in range(0, len(log), 5):
            await store.append_batch((("s", log.events[start : start + 5]),))
            assert store._inline(lambda: seen_inline.append(busy_ms()))
            assert await store._writer.run(busy_ms) == 10_000
        assert store._inline_commits >= len(log) // 5
        assert set(seen_inline) == {0}
    finally:
        lease.release()
        await store.close()


# the codec actor on SQLite: a lone writer's barrier commits in its caller -------------


def counted_rounds(store: SqliteStore) -> list[int]:
    """The sessions of every `append_batch` (an actor's round) the store gets from now on."""
    calls: list[int] = []
    plain = store.append_batch

    async def counted(batch: Batch) -> None:
        calls.append(len(batch))
        await plain(batch)

    store.append_batch = counted  # type: ignore[method-assign]
    return calls


@asynccontextmanager
async def persisting(
    tmp_path: Path, logs: Mapping[str, Session]
) -> AsyncIterator[tuple[SqliteStore, dict[str, Lease], CodecActor, list[int]]]:
    """A store at `tmp_path / "s.db"` with the sessions of `logs` created and leased (the
    leases by session), a running CodecActor on it, and its rounds counted
    (`counted_rounds`); the actor is closed on leaving, then the leases and the store."""
    store = SqliteStore(tmp_path / "s.db")
    leases = {name: store.claim(name) for name in logs}
    rounds = counted_rounds(store)
    try:
        for log in logs.values():
            await store.create(log.meta)
        async with trio.open_nursery() as nursery:
            actor = CodecActor(store)
            await nursery.start(actor.run)
            yield store, leases, actor, rounds
            await actor.aclose()
    finally:
        for lease in leases.values():
            lease.release()
        await store.close()


async def test_a_lone_sqlite_barrier_commits_in_its_caller_with_the_actors_bytes(
    tmp_path: Path,
) -> None:
    log = closed_log("s", 3)
    rounds = {}
    for name, synchronous in (("caller", "NORMAL"), ("actor", "FULL")):  # FULL never inline
        store = SqliteStore(tmp_path / f"{name}.db", synchronous=synchronous)
        calls = counted_rounds(store)
        lease = store.claim("s")
        await store.create(log.meta)
        async with trio.open_nursery() as nursery:
            actor = CodecActor(store)
            await nursery.start(actor.run)
            for start in range(0, len(log), 5):
                await actor.persist("s", log.events[start : start + 5])
            await actor.aclose()
        rounds[name] = len(calls)
        lease.release()
        await store.close()
    barriers = -(-len(log) // 5)
    # Only the first barrier went through the actor's round (it made "s" the sole writer).
    assert rounds == {"caller": 1, "actor": barriers}
    assert stored(tmp_path / "caller.db", "s") == stored(tmp_path / "actor.db", "s")
    assert len(stored(tmp_path / "caller.db", "s")) == len(log)


async def test_sqlite_barriers_taking_turns_commit_in_their_callers_when_nothing_else_runs(
    tmp_path: Path,
) -> None:
    logs = {name: closed_log(name, 2) for name in ("a", "b")}
    async with persisting(tmp_path, logs) as (store, leases, actor, rounds):
        barriers = 0
        for start in range(0, len(logs["a"]), 5):
            for name, log in logs.items():  # a, b, a, b, ...: never the same twice
                await actor.persist(name, log.events[start : start + 5])
                barriers += 1
        await actor.aclose()
        # The first barrier (nobody wrote alone before it) went through the actor's round;
        # every later one found no other task ready to share a commit with.
        assert len(rounds) == 1 and barriers > 4
        for name, log in logs.items():
            assert (await store.load(name, lease=leases[name]))[1] == log.events


async def test_a_barrier_committed_in_its_caller_returns_with_no_schedule_point(
    tmp_path: Path,
) -> None:
    log = closed_log("s", 2)
    events = log.events
    async with persisting(tmp_path, {"s": log}) as (store, _, actor, rounds):
        ran: list[int] = []

        async def other_task() -> None:
            ran.append(store._inline_commits)

        async with trio.open_nursery() as nursery:
            await actor.persist("s", events[:5])  # the actor's round: "s" now writes alone
            before = store._inline_commits
            nursery.start_soon(other_task)  # ready to run from here on
            await actor.persist("s", events[5:10])
            # Committed in the caller, and nothing else ran: a schedule point there would
            # have run the other task inside this barrier.
            assert len(rounds) == 1 and store._inline_commits == before + 1 and ran == []
            await trio.testing.wait_all_tasks_blocked()
            assert ran == [before + 1]
        await actor.aclose()


async def test_a_sqlite_barrier_waits_behind_submits_queued_before_it(tmp_path: Path) -> None:
    log = closed_log("one", 2)
    store = SqliteStore(tmp_path / "s.db")
    lease = store.claim("one")
    try:
        await store.create(log.meta)
        await store.append("one", log.events[:1])  # the connection is open: inline is possible
        actor = CodecActor(store)
        await actor.submit("one", log.events[1:4])  # queued: the actor has not started yet
        persisted = trio.Event()
        async with trio.open_nursery() as nursery:

            async def barrier() -> None:
                await actor.persist("one", log.events[4:])
                persisted.set()

            nursery.start_soon(barrier)
            await trio.testing.wait_all_tasks_blocked()
            assert not persisted.is_set()  # it did not overtake the queued submit
            await nursery.start(actor.run)
            await persisted.wait()
            await actor.aclose()
        assert (await store.load("one", lease=lease))[1] == log.events
    finally:
        lease.release()
        await store.close()


async def test_a_lone_sqlite_barrier_reports_its_own_sessions_failure_only(
    tmp_path: Path,
) -> None:
    logs = {name: closed_log(name, 1) for name in ("a", "b")}
    store = SqliteStore(tmp_path / "s.db")
    leases = [store.claim(name) for name in logs]
    for log in logs.values():
        await store.create(log.meta)
    await store.append("a", ())  # opens the connection
    async with trio.open_nursery() as nursery:
        actor = CodecActor(store)
        await nursery.start(actor.run)
        before = store._inline_commits
        with pytest.raises(SessionWriteError) as refused:
            await actor.persist("a", logs["a"].events[1:])  # does not continue the empty tail
        assert refused.value.session_id == "a"
        assert isinstance(refused.value.__cause__, SessionValidationError)
        await actor.persist("b", logs["b"].events)  # the other session is unaffected
        await actor.persist("a", logs["a"].events)  # reported once: "a" writes again
        assert store._inline_commits > before  # these barriers committed in their callers
        assert (await store.load("a", lease=leases[0]))[1] == logs["a"].events
        assert (await store.load("b", lease=leases[1]))[1] == logs["b"].events
        for lease in leases:
            lease.release()
        await store.close()
        with pytest.raises(StoreError):
            await actor.persist("b", closed_log("b", 2).events[13:])  # the store failed
        with pytest.raises(StoreError):
            await actor.submit("b", ())  # ... and the actor fails closed from then on
        nursery.cancel_scope.cancel()


async def test_concurrent_sqlite_writers_still_share_group_commits(tmp_path: Path) -> None:
    logs = {f"s{index}": closed_log(f"s{index}", 2) for index in range(10)}
    async with persisting(tmp_path, logs) as (_store, _leases, actor, commits):

        async def loop(name: str) -> None:
            events = logs[name].events
            for start in range(0, len(events), 5):
                await actor.persist(name, events[start : start + 5])

        async with trio.open_nursery() as loops:
            for name in logs:
                loops.start_soon(loop, name)
    barriers = sum(-(-len(log) // 5) for log in logs.values())
    # After the first barrier (committed alone), every round holds all ten loops.
    assert len(commits) <= barriers // len(logs) + 2
    assert max(commits) == len(logs)
    for name, log in logs.items():
        assert stored(tmp_path / "s.db", name) == [
            (name, event.seq, event.type, event.time, encode_event(event), crc)
            for event, (*_, crc) in zip(log.events, stored(tmp_path / "s.db", name), strict=True)
        ]
