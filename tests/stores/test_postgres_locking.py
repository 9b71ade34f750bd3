"""Session-row locks under concurrency, against a real server (tests/kits/pg_server.py):

* the group commit and the lease keeper (renewals and releases in one round) lock session
  rows in one order, the database's `ORDER BY id`: held up at one row, each holds exactly
  the rows before it, so two of them can never wait on each other;
* a transaction PostgreSQL rolls back as a deadlock victim (a real one: two connections
  locking two rows in opposite order) is retried, not reported as the database being
  unavailable;
* many sessions created in shuffled id order (so the heap order is not the id order) commit
  through a `CodecActor` under a short lease, with lease-keeper rounds running all the
  time, and no commit fails.

Bounded for CI (300 sessions, 3 s of commits); `ACTORLOOP_FULL=1` runs 500 sessions for
ten minutes (the acceptance run of issue 34).
"""

from __future__ import annotations

import logging
import os
import random
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import psycopg
import pytest
import trio
from session_logs import turn_script

from actorloop.actors.codec import CodecActor
from actorloop.runtime.log.session import Session
from actorloop.runtime.stores.leases import Lease
from actorloop.runtime.stores.postgres import PostgresStore
from actorloop.runtime.stores.postgres.config import parse_url

FULL = os.environ.get("ACTORLOOP_FULL") == "1"
SESSIONS = 500 if FULL else 300
COMMIT_SECONDS = 600.0 if FULL else 3.0
LOCK_WAIT_DEADLINE_S = 30.0


def connect(pg_url: str) -> psycopg.Connection:
    return psycopg.connect(parse_url(pg_url).conninfo, autocommit=True)


def shuffled_ids(prefix: str, count: int, seed: int) -> list[str]:
    ids = [f"{prefix}-{index:04d}" for index in range(count)]
    random.Random(seed).shuffle(ids)
    return ids


async def owned_sessions(store: PostgresStore, ids: list[str]) -> dict[str, Lease]:
    """Create each session, in the order given, owned by `store` (its lease held)."""
    leases: dict[str, Lease] = {}
    for session_id in ids:
        leases[session_id] = store.claim(session_id)
        await store.create(Session.create(session_id).meta)
    return leases


async def until_waiting_on_a_lock(pg_url: str, application_name: str) -> None:
    """Until a backend of `application_name` waits on a lock. The server decides when
    that happens and tells no client: polled, with a deadline."""

    def waiting() -> bool:
        with connect(pg_url) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
                "AND wait_event_type = 'Lock'",
                (application_name,),
            ).fetchone()
        return row is not None and row[0] > 0

    with trio.fail_after(LOCK_WAIT_DEADLINE_S):
        while not await trio.to_thread.run_sync(waiting):  # noqa: ASYNC110
            await trio.sleep(0.01)


class HeldRow:
    """A session row locked by a connection of the test's own until `release()`."""

    def __init__(self, pg_url: str, session_id: str) -> None:
        self.conn = connect(pg_url)
        self.conn.execute("BEGIN")
        self.conn.execute(
            "SELECT 1 FROM actorloop.sessions WHERE id = %s FOR UPDATE", (session_id,)
        )

    def release(self) -> None:
        self.conn.execute("ROLLBACK")
        self.conn.close()


def locked_by_others(pg_url: str, ids: list[str]) -> set[str]:
    """Which of the rows some other transaction holds locked now (the probe's own locks
    end with its transaction, at once)."""
    with connect(pg_url) as conn, conn.transaction():
        free = {
            row[0]
            for row in conn.execute(
                "SELECT id FROM actorloop.sessions WHERE id = ANY(%s) FOR UPDATE SKIP LOCKED",
                (ids,),
            )
        }
    return set(ids) - free


def in_database_order(pg_url: str, ids: list[str]) -> list[str]:
    with connect(pg_url) as conn:
        return [
            row[0]
            for row in conn.execute(
                "SELECT id FROM actorloop.sessions WHERE id = ANY(%s) ORDER BY id", (ids,)
            )
        ]


async def locks_taken_while_held_up(
    pg_url: str, store: PostgresStore, ids: list[str], start: Callable[[trio.Nursery], None]
) -> tuple[set[str], set[str]]:
    """Lock the middle row (in the database's id order), `start` the store's statement,
    wait until it is held up there: (the rows it holds then, the rows before the middle)."""
    ordered = in_database_order(pg_url, ids)
    middle = ordered[len(ordered) // 2]
    held = HeldRow(pg_url, middle)
    try:
        async with trio.open_nursery() as nursery:
            start(nursery)
            await until_waiting_on_a_lock(pg_url, f"actorloop {store.node}")
            locked = await trio.to_thread.run_sync(locked_by_others, pg_url, ids)
            held.release()
    finally:
        if not held.conn.closed:
            held.release()
    return locked - {middle}, set(ordered[: len(ordered) // 2])


@pytest.fixture
async def store(pg_url: str) -> AsyncIterator[PostgresStore]:
    # A long lease: the keeper renews on its own only every 10 s, so the rounds under test
    # are the ones the test starts.
    opened = PostgresStore(f"{pg_url}?lease_s=30&node=locker")
    yield opened
    await opened.close()


async def test_a_keeper_round_locks_its_renewals_and_releases_in_id_order(
    pg_url: str, store: PostgresStore
) -> None:
    ids = shuffled_ids("k", 40, seed=1)
    leases = await owned_sessions(store, ids)
    released = ids[::3]

    def start(nursery: trio.Nursery) -> None:
        # Releasing wakes the keeper: its round writes these releases and renews the rest.
        for session_id in released:
            leases[session_id].release()

    locked, before = await locks_taken_while_held_up(pg_url, store, ids, start)
    assert locked == before
    await store.write_releases()
    owners = dict(
        connect(pg_url).execute("SELECT id, owner_node FROM actorloop.sessions").fetchall()
    )
    assert {sid for sid, node in owners.items() if node is None} == set(released)


async def test_a_group_commit_locks_its_sessions_in_id_order(
    pg_url: str, store: PostgresStore
) -> None:
    ids = shuffled_ids("c", 40, seed=2)
    sessions = {sid: Session.create(sid) for sid in ids}
    await owned_sessions(store, ids)
    for session in sessions.values():
        for _ in turn_script(session, random.Random(session.id), "hello"):
            pass

    def start(nursery: trio.Nursery) -> None:
        nursery.start_soon(
            store.append_batch, [(sid, tuple(s.events)) for sid, s in sessions.items()]
        )

    locked, before = await locks_taken_while_held_up(pg_url, store, ids, start)
    assert locked == before
    for sid, session in sessions.items():
        assert (await store.owner(sid)).head == len(session.events)  # type: ignore[union-attr]


async def test_a_deadlock_victim_is_retried(
    pg_url: str, store: PostgresStore, caplog: pytest.LogCaptureFixture
) -> None:
    """Two connections lock rows `a` and `b` in opposite order: PostgreSQL aborts the
    store's transaction as the victim (its deadlock check runs first), and the store runs
    it again, which then succeeds once the other transaction committed."""
    await owned_sessions(store, ["a", "b"])
    store_locked_a = threading.Event()
    other_waits = threading.Event()
    attempts: list[int] = []

    def work(conn: psycopg.Connection) -> int:
        with conn.transaction():
            attempts.append(len(attempts) + 1)
            conn.execute("SET LOCAL deadlock_timeout = '20ms'")
            conn.execute("UPDATE actorloop.sessions SET head = head WHERE id = 'a'")
            if len(attempts) == 1:
                store_locked_a.set()
                other_waits.wait()
            conn.execute("UPDATE actorloop.sessions SET head = head WHERE id = 'b'")
        return len(attempts)

    other = connect(pg_url)
    other.execute("SET application_name = 'other'")
    other.execute("SET deadlock_timeout = '10min'")  # never the victim
    other.execute("BEGIN")
    other.execute("UPDATE actorloop.sessions SET head = head WHERE id = 'b'")

    def other_side() -> None:
        store_locked_a.wait()
        other.execute("UPDATE actorloop.sessions SET head = head WHERE id = 'a'")
        other.execute("COMMIT")

    result: dict[str, Any] = {}

    async def by_the_store() -> None:
        result["attempts"] = await store.execute(work)

    try:
        with caplog.at_level(logging.WARNING, logger="actorloop.stores.postgres"):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(by_the_store)
                nursery.start_soon(trio.to_thread.run_sync, other_side)
                await until_waiting_on_a_lock(pg_url, "other")
                other_waits.set()
    finally:
        other_waits.set()
        other.close()
    assert result["attempts"] == 2
    assert any("deadlock detected" in record.getMessage() for record in caplog.records)


async def test_shuffled_sessions_commit_under_a_short_lease_with_no_failure(
    pg_url: str,
) -> None:
    store = PostgresStore(f"{pg_url}?lease_s=0.2&node=shuffled&pool_max=6")
    ids = shuffled_ids("s", SESSIONS, seed=34)
    sessions = {sid: Session.create(sid) for sid in ids}
    leases = await owned_sessions(store, ids)
    failures: list[tuple[str, BaseException]] = []
    counts = {"commits": 0, "keeper_rounds": 0, "releases": 0}
    stop = trio.Event()

    async def session_loop(session_id: str, actor: CodecActor) -> None:
        session = sessions[session_id]
        rng = random.Random(session_id)
        written = 0
        turns = 0
        while turns == 0 or not stop.is_set():  # every session commits a turn at least
            for _ in turn_script(session, rng, f"turn {turns}"):
                try:
                    await actor.persist(session_id, session.events[written:])
                except Exception as exc:
                    failures.append((session_id, exc))
                    return
                written = len(session.events)
                counts["commits"] += 1
            turns += 1
            if rng.random() < 0.2:
                # Give the lease back and take it again: the keeper writes the release,
                # the next commit claims the session anew (a new owner epoch).
                leases[session_id].release()
                leases[session_id] = store.claim(session_id)
                counts["releases"] += 1

    async def keeper_rounds() -> None:
        # Keeper rounds back to back, on top of the keeper's own every lease_s / 3.
        while counts["keeper_rounds"] == 0 or not stop.is_set():
            try:
                await store.write_releases()
            except Exception as exc:
                failures.append(("keeper", exc))
                return
            counts["keeper_rounds"] += 1

    try:
        async with trio.open_nursery() as nursery:
            actor = CodecActor(store, capacity=2 * SESSIONS)
            await nursery.start(actor.run)
            async with trio.open_nursery() as loops:
                for session_id in ids:
                    loops.start_soon(session_loop, session_id, actor)
                loops.start_soon(keeper_rounds)
                await trio.sleep(COMMIT_SECONDS)  # the length of the run, not a wait
                stop.set()
            await actor.aclose()
        assert failures == []
        print(f"shuffled sessions: {counts} in {COMMIT_SECONDS:g} s")
        for session_id in ids:
            owner = await store.owner(session_id)
            assert owner is not None and owner.head == len(sessions[session_id].events)
    finally:
        for lease in leases.values():
            lease.release()
        await store.close()
