"""The PostgreSQL store beyond the shared contract (tests/test_stores.py runs that): its URL,
fenced ownership (a writer whose lease was taken over lands nothing, in a group commit too,
and never retries), leases released on close, O(1) forks, damage found in the rows, a
statement refused for one session isolated, typed errors while the server is down with
recovery, no loss, once it is back (and a later write naming the failed commit), fences
reported to listeners, a stale lease checked before it is trusted, and the sweep of dead
nodes' rows. Against a real server (tests/kits/pg_server.py)."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
import pytest
import trio
from pg_server import PgServer
from session_logs import closed_log, tool_turn

from actorloop.runtime import AgentOptions, Runtime
from actorloop.runtime.errors import (
    GroupCommitError,
    SessionBusy,
    SessionCorruptError,
    SessionFenced,
    SessionWriteError,
    StoreError,
    StoreUnavailable,
    StoreUrlError,
)
from actorloop.runtime.log.session import Session
from actorloop.runtime.log.verify import verify_log
from actorloop.runtime.model.meta import DamagedSession
from actorloop.runtime.stores import open_store
from actorloop.runtime.stores.postgres import PostgresStore
from actorloop.runtime.stores.postgres.config import parse_url
from actorloop.runtime.testing import EchoProvider


@pytest.fixture
async def store(pg_url: str) -> AsyncIterator[PostgresStore]:
    opened = PostgresStore(pg_url)
    yield opened
    await opened.close()


def sql(url: str, statement: str, *params: object) -> list[tuple[object, ...]]:
    """Run one statement on the test database directly (to look at or damage rows)."""
    with psycopg.connect(parse_url(url).conninfo, autocommit=True) as conn:
        cursor = conn.execute(statement, params)  # type: ignore[arg-type]
        return cursor.fetchall() if cursor.description else []


async def stored(store: PostgresStore, session: Session) -> None:
    await store.create(session.meta)
    await store.append(session.id, session.events)


# the URL ---------------------------------------------------------------------------------


def test_the_url_keeps_libpq_options_and_takes_its_own() -> None:
    settings = parse_url(
        "postgresql://app:secret@db.internal:5433/agents?sslmode=require&lease_s=2.5"
        "&node=web-1&pool_max=4&poll_s=0.2"
    )
    assert settings.conninfo == "postgresql://app:secret@db.internal:5433/agents?sslmode=require"
    assert (settings.lease_s, settings.node, settings.pool_max, settings.poll_s) == (
        2.5,
        "web-1",
        4,
        0.2,
    )
    assert "secret" not in settings.display and "app@db.internal" in settings.display
    assert isinstance(open_store("postgres://localhost/x"), PostgresStore)
    generated = {parse_url("postgresql://h/db").node for _ in range(3)}
    assert len(generated) == 3  # unique per store instance by default


@pytest.mark.parametrize(
    "bad",
    [
        "postgresql://h/db?lease_s=0",
        "postgresql://h/db?lease_s=abc",
        "postgresql://h/db?lease_s=nan",
        "postgresql://h/db?pool_max=0",
        "postgresql://h/db?node=a/b",
        "postgresql://h/db?lease_s=1&lease_s=2",
        "postgresql://h/db#frag",
    ],
)
def test_bad_url_options_are_refused_by_name(bad: str) -> None:
    with pytest.raises(StoreUrlError, match="store URL"):
        open_store(bad)


# fenced ownership --------------------------------------------------------------------------


async def test_a_writer_whose_lease_was_taken_over_is_fenced_alone(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Two store instances under one stable node name (a restarted process reclaiming its
    sessions while its predecessor still runs): the newer claim bumps the owner epoch, and
    the old writer's next group commit writes every session but the taken one."""
    old = PostgresStore(f"{pg_url}?node=web-1")
    new = PostgresStore(f"{pg_url}?node=web-1")
    try:
        logs = {sid: closed_log(sid, 2) for sid in ("kept", "taken")}
        leases = {sid: old.claim(sid) for sid in logs}
        for sid, session in logs.items():
            await old.create(session.meta)
            await old.append(sid, session.events[:13])
        epoch = (await old.owner("taken")).epoch  # type: ignore[union-attr]
        takeover = new.claim("taken")
        assert await new.acquire(takeover) == epoch + 1
        with (
            caplog.at_level(logging.ERROR, logger="actorloop.stores.postgres"),
            pytest.raises(GroupCommitError) as info,
        ):
            await old.append_batch([(sid, s.events[13:]) for sid, s in logs.items()])
        assert [r.message.count("fenced") for r in caplog.records] == [1]  # reported once
        [(failed, error)] = info.value.failures
        assert failed == "taken" and isinstance(error, SessionFenced)
        assert (error.epoch, error.current) == (epoch, epoch + 1)
        assert (await old.load("kept", repair=False))[1] == logs["kept"].events
        # Fenced for good: the old writer never lands another event of it.
        with pytest.raises(SessionFenced):
            await old.append("taken", logs["taken"].events[13:])
        rows = sql(pg_url, "SELECT seq, epoch FROM actorloop.events WHERE session_id = 'taken'")
        assert [seq for seq, _ in rows] == list(range(13))
        # The new owner continues the stored tail.
        meta, events = await new.load("taken", lease=takeover)
        continued = Session.from_events("taken", events, meta)
        tool_turn(continued, "the new owner's turn")
        await new.append("taken", continued.events_since(len(events)))
        leases["taken"].release()
        await old.write_releases()
        owner = await new.owner("taken")
        assert owner is not None and (owner.node, owner.epoch) == ("web-1", epoch + 1)
        assert sql(
            pg_url,
            "SELECT count(*) FROM actorloop.events WHERE session_id = 'taken' AND seq >= 13 "
            "AND epoch <> %s",
            epoch + 1,
        ) == [(0,)]
    finally:
        await old.close()
        await new.close()


async def test_a_lease_renewal_finds_a_takeover(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    old, new = PostgresStore(f"{pg_url}?node=web-1"), PostgresStore(f"{pg_url}?node=web-1")
    fenced: list[str] = []
    old.on_fenced(fenced.append)
    try:
        await stored(old, closed_log("s", 1))
        lease = old.claim("s")
        await old.acquire(lease)
        assert await old.owns("s") is True
        await new.acquire(new.claim("s"))
        with caplog.at_level(logging.ERROR, logger="actorloop.stores.postgres"):
            await old.write_releases()  # one keeper round: renews, finds the lease lost
        assert ["fenced" in record.message for record in caplog.records] == [True]
        assert fenced == ["s"]  # told once, so the session's agent can stop
        assert await old.owns("s") is False
        with pytest.raises(SessionFenced, match="was taken over"):
            await old.append("s", closed_log("s", 2).events[13:])
        assert caplog.records[-1].message.count("fenced") == 1  # not reported twice
    finally:
        await old.close()
        await new.close()


async def test_a_lease_not_renewed_for_a_while_is_checked_before_it_is_trusted(
    pg_url: str,
) -> None:
    """The process freezes (a SIGSTOP, a stop-the-world pause: here the trio thread
    blocks) past half its lease while another node takes the session over: the first
    `owns` after it asks the database instead of trusting the stale renewal."""
    store = PostgresStore(f"{pg_url}?lease_s=0.2&node=paused")
    fenced: list[str] = []
    store.on_fenced(fenced.append)
    try:
        await stored(store, closed_log("s", 1))
        await store.acquire(store.claim("s"))
        sql(
            pg_url,
            "UPDATE actorloop.sessions SET owner_epoch = owner_epoch + 1, owner_node = 'other' "
            "WHERE id = 's'",
        )
        time.sleep(0.2)  # noqa: ASYNC251 (the freeze itself: nothing here runs meanwhile)
        assert await store.owns("s") is False
        assert fenced == ["s"]
    finally:
        await store.close()


async def test_another_node_cannot_claim_a_live_lease_and_close_releases_it(
    pg_url: str,
) -> None:
    first, second = PostgresStore(pg_url), PostgresStore(pg_url)
    try:
        await stored(first, closed_log("s", 1))
        held = first.claim("s")
        epoch = await first.acquire(held)
        rival = second.claim("s")
        with pytest.raises(SessionBusy, match=f"node {first.node!r}"):
            await second.acquire(rival)
        with pytest.raises(SessionBusy, match="owned by a live writer"):
            await second.append("s", closed_log("s", 2).events[13:])
        await first.close()  # gives every lease back: claimable at once, no expiry wait
        assert await second.acquire(rival) == epoch + 1
    finally:
        await first.close()
        await second.close()


async def test_runtimes_on_two_nodes_hand_a_session_over(pg_url: str) -> None:
    options = AgentOptions(model="m")
    async with Runtime.open(store=pg_url, provider=EchoProvider()) as first:
        agent = await first.spawn(options, session_id="handed")
        assert (await agent.send("one")).reason == "completed"
        async with Runtime.open(store=pg_url, provider=EchoProvider()) as second:
            with pytest.raises(SessionBusy):
                await second.resume("handed", options)
            await agent.dispose()
            assert isinstance(first.store, PostgresStore)
            await first.store.write_releases()
            again = await second.resume("handed", options)
            assert (await again.send("two")).reason == "completed"
            meta, events = await second.store.load("handed", repair=False)
    verify_log(meta, events)
    assert [e.data.turn for e in events if e.type == "turn/end"] == [1, 2]  # type: ignore[union-attr]


async def test_a_fenced_agent_stops_and_writes_nothing(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    options = AgentOptions(model="m")
    url = f"{pg_url}?node=web-1"
    with caplog.at_level(logging.CRITICAL, logger="actorloop"):
        async with Runtime.open(store=url, provider=EchoProvider()) as old:
            agent = await old.spawn(options, session_id="f")
            assert (await agent.send("one")).reason == "completed"
            async with Runtime.open(store=url, provider=EchoProvider()) as new:
                taken = await new.resume("f", options)
                assert (await taken.send("the new owner")).reason == "completed"
                result = await agent.send("the old owner")
                assert result.reason == "error" and "SessionFenced" in (result.message or "")
                await agent.wait_idle()
                assert agent.status == "failed"
                assert (await taken.send("still the new owner")).reason == "completed"
                meta, events = await new.store.load("f", repair=False)
    verify_log(meta, events)
    texts = [e.data.content[0].text for e in events if e.type == "user/message"]  # type: ignore[union-attr]
    assert texts == ["one", "the new owner", "still the new owner"]


# forks and damage --------------------------------------------------------------------------


async def test_the_sweep_removes_rows_of_dead_nodes_nobody_reads(
    store: PostgresStore, pg_url: str
) -> None:
    await store.exists("s")  # the schema
    sql(
        pg_url,
        "INSERT INTO actorloop.nodes (id, expires) VALUES ('gone', now() - interval '1 hour'), "
        "('alive', now() + interval '1 hour'), ('pausing', now() - interval '1 second')",
    )
    rows = {
        "sender gone": ("gone", "alive", "pending", "1 hour"),
        "owner died handling it": ("alive", "gone", "taken", "1 hour"),
        "sender will withdraw it": ("alive", "gone", "pending", "1 hour"),
        "being handled": ("alive", "alive", "taken", "1 hour"),
        "sender gone, but just now": ("gone", "alive", "pending", "0 seconds"),
    }
    ids = {}
    for name, (origin, target, state, age) in rows.items():
        [(ids[name],)] = sql(
            pg_url,
            "INSERT INTO actorloop.inbox (session_id, target_node, origin_node, request, body, "
            "state, created) VALUES ('s', %s, %s, '', '', %s, now() - %s::interval) RETURNING id",
            target,
            origin,
            state,
            age,
        )
    swept = await store.sweep()
    assert (swept.inbox_rows, swept.nodes) == (2, 1)
    left = {row[0] for row in sql(pg_url, "SELECT id FROM actorloop.inbox")}
    assert left == {ids[name] for name in list(rows)[2:]}
    nodes = {row[0] for row in sql(pg_url, "SELECT id FROM actorloop.nodes")}
    assert "gone" not in nodes and {"alive", "pausing"} <= nodes


async def test_a_fork_stores_only_a_pointer(store: PostgresStore, pg_url: str) -> None:
    await stored(store, closed_log("parent", 4))
    await store.fork("parent", 38, "child")
    counts = sql(pg_url, "SELECT session_id, count(*) FROM actorloop.events GROUP BY 1 ORDER BY 1")
    assert counts == [("parent", 52)]
    assert sql(
        pg_url, "SELECT parent, seed_length, head FROM actorloop.sessions WHERE id = 'child'"
    ) == [("parent", 39, 39)]


async def test_damage_in_the_rows_is_named_and_listed(store: PostgresStore, pg_url: str) -> None:
    for index in range(3):
        await stored(store, closed_log(f"s{index}", 1))
    assert await store.check_integrity() == ()
    sql(
        pg_url,
        "UPDATE actorloop.events SET body = overlay(body placing 'X' from 20 for 1) "
        "WHERE session_id = 's0' AND seq = 4",
    )
    sql(pg_url, "DELETE FROM actorloop.events WHERE session_id = 's1' AND seq IN (7, 12)")
    sql(
        pg_url,
        "UPDATE actorloop.sessions SET meta = overlay(meta placing 'X' from 3 for 1) "
        "WHERE id = 's2'",
    )
    with pytest.raises(SessionCorruptError, match="seq 4: row checksum mismatch"):
        await store.load("s0")
    with pytest.raises(SessionCorruptError, match="seq 7"):
        await store.load("s1", repair=False)
    listing = await store.list()
    assert [type(entry).__name__ for entry in listing] == [
        "SessionMeta",
        "SessionMeta",
        "DamagedSession",
    ]
    assert isinstance(listing[2], DamagedSession) and "checksum" in listing[2].problem
    problems = await store.check_integrity()
    assert len(problems) == 3
    assert "'s0' seq 4" in problems[0] and "'s1' seq 7" in problems[1] and "s2" in problems[2]
    # Nothing is appended onto a damaged log.
    with pytest.raises(SessionCorruptError, match="disagrees with the stored rows"):
        await store.append("s1", closed_log("s1", 2).events[13:])


async def test_a_row_planted_past_the_head_fails_its_session_alone(
    store: PostgresStore, pg_url: str
) -> None:
    """The group commit checks each head against the stored rows after its COPY (no
    read of its own): a row past the new head, or a gap below the rows it adds, rolls
    the commit back and the careful redo refuses that session alone."""
    logs = {sid: closed_log(sid, 2) for sid in ("p", "q", "r")}
    for sid, session in logs.items():
        await store.create(session.meta)
        await store.append(sid, session.events[:13])
    sql(
        pg_url,
        "INSERT INTO actorloop.events (session_id, seq, type, time, body, crc, epoch) "
        "SELECT session_id, 40, type, time, body, crc, epoch FROM actorloop.events "
        "WHERE session_id = 'q' AND seq = 0",
    )
    sql(pg_url, "DELETE FROM actorloop.events WHERE session_id = 'r' AND seq = 12")
    with pytest.raises(GroupCommitError) as info:
        await store.append_batch([(sid, s.events[13:]) for sid, s in logs.items()])
    failures = dict(info.value.failures)
    assert sorted(failures) == ["q", "r"]
    assert all(isinstance(error, SessionCorruptError) for error in failures.values())
    assert "disagrees with the stored rows" in str(failures["q"])
    assert (await store.load("p"))[1] == logs["p"].events
    assert sql(pg_url, "SELECT id, head FROM actorloop.sessions WHERE id <> 'p' ORDER BY id") == [
        ("q", 13),
        ("r", 13),
    ]


async def test_events_that_do_not_encode_fail_their_session_alone(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows are encoded in the commit's worker thread as the COPY streams: a session whose
    events do not encode writes nothing and fails alone; the others land."""
    from actorloop.codecs import rows as codec_rows
    from actorloop.runtime.stores.postgres import commit

    logs = {sid: closed_log(sid, 1) for sid in ("e1", "e2", "e3")}
    for session in logs.values():
        await store.create(session.meta)

    def event_rows(session_id: str, events: Any) -> Any:
        if session_id == "e2":
            raise ValueError("cannot encode")
        return codec_rows.event_rows(session_id, events)

    monkeypatch.setattr(commit, "event_rows", event_rows)
    with pytest.raises(GroupCommitError) as info:
        await store.append_batch([(sid, s.events) for sid, s in logs.items()])
    [(failed, error)] = info.value.failures
    assert failed == "e2" and isinstance(error, ValueError)
    assert (await store.load("e1"))[1] == logs["e1"].events
    assert (await store.load("e3"))[1] == logs["e3"].events
    assert (await store.load("e2", repair=False))[1] == ()


async def test_a_looping_lineage_is_corruption(store: PostgresStore, pg_url: str) -> None:
    from actorloop.codecs.rows import session_row
    from actorloop.runtime.log.session import SessionMeta

    await store.create(SessionMeta("schema"))
    row = session_row(SessionMeta("a", parent_session="a", seed_length=2))
    sql(
        pg_url,
        "INSERT INTO actorloop.sessions (id, meta, parent, seed_length, version, head, crc) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s)",
        *row,
    )
    with pytest.raises(SessionCorruptError, match="loops back"):
        await store.load("a")
    with pytest.raises(SessionCorruptError, match="loops back"):
        await store.fork("a", 0, "b")


async def test_a_row_the_server_refuses_fails_only_its_session(
    store: PostgresStore, pg_url: str
) -> None:
    logs = {sid: closed_log(sid, 1) for sid in ("a", "b", "c")}
    for session in logs.values():
        await store.create(session.meta)
    sql(
        pg_url,
        "ALTER TABLE actorloop.events "
        "ADD CONSTRAINT small_bodies CHECK (octet_length(body) < 4000)",
    )
    long = Session.create("b")
    from session_logs import begin_turn

    begin_turn(long, "x" * 5000)
    with pytest.raises(GroupCommitError) as info:
        await store.append_batch(
            [("a", logs["a"].events), ("b", long.events), ("c", logs["c"].events)]
        )
    [(failed, error)] = info.value.failures
    assert failed == "b" and isinstance(error, StoreError)
    assert isinstance(error.__cause__, psycopg.errors.CheckViolation)
    assert (await store.load("a"))[1] == logs["a"].events
    assert (await store.load("c"))[1] == logs["c"].events
    assert (await store.load("b", repair=False))[1] == ()


# the server going away ---------------------------------------------------------------------


@pytest.fixture
def own_server() -> Iterator[PgServer]:
    """A server of this test's own, to stop and start without touching the others'."""
    bindir = PgServer.find()
    assert bindir is not None  # the session fixture already required it
    server = PgServer(bindir)
    try:
        server.init()
        server.start()
        yield server
    finally:
        server.cleanup()


async def load_once_reconnected(store: PostgresStore, sid: str) -> Any:
    """`store.load(sid)` once the pool has a connection again: psycopg_pool backs off
    between connection attempts after an outage (1 s, 2 s, 4 s, ...), so the first reads
    after the server is back may still time out, typed."""
    with trio.fail_after(60):
        while True:
            try:
                return await store.load(sid, repair=False)
            except StoreUnavailable:
                await trio.sleep(0.25)


async def test_while_the_server_is_down_errors_are_typed_and_nothing_is_lost(
    own_server: PgServer, caplog: pytest.LogCaptureFixture
) -> None:
    url = own_server.url("postgres")
    store = PostgresStore(url)
    try:
        logs = {sid: closed_log(sid, 2) for sid in ("a", "b")}
        for sid, session in logs.items():
            await store.create(session.meta)
            await store.append(sid, session.events[:13])
        own_server.stop("immediate")  # a crash: recovered from the WAL on the next start
        with caplog.at_level(logging.CRITICAL, logger="actorloop"):
            with pytest.raises(StoreUnavailable, match="unavailable"):
                await store.load("a")
            with pytest.raises(GroupCommitError) as info:
                await store.append_batch([(sid, s.events[13:]) for sid, s in logs.items()])
        assert {sid for sid, _ in info.value.failures} == {"a", "b"}
        assert all(isinstance(error, StoreUnavailable) for _, error in info.value.failures)
        own_server.start()
        # The same store instance recovers: nothing acknowledged was lost, the refused
        # appends were not half-written, and they go through now.
        for sid, session in logs.items():
            assert (await load_once_reconnected(store, sid))[1] == session.events[:13]
        await store.append_batch([(sid, s.events[13:]) for sid, s in logs.items()])
        for sid, session in logs.items():
            assert (await store.load(sid))[1] == session.events
    finally:
        await store.close()


async def test_after_a_commit_failed_the_next_write_names_that_failure(
    own_server: PgServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A writer whose commit failed unconfirmed goes on with its later events (as a loop's
    closing `turn/end` does): refused for the missing events, naming the outage, not
    "another writer"; the events that failed go through once written again."""
    store = PostgresStore(own_server.url("postgres"))
    session = closed_log("held", 3)
    lease = store.claim("held")
    try:
        await store.create(session.meta)
        await store.append("held", session.events[:13])
        own_server.stop("immediate")
        with (
            caplog.at_level(logging.CRITICAL, logger="actorloop"),
            pytest.raises(StoreUnavailable),
        ):
            await store.append("held", session.events[13:20])
        own_server.start()
        await load_once_reconnected(store, "held")
        with pytest.raises(SessionWriteError) as info:
            await store.append("held", session.events[20:])
        message = str(info.value)
        assert "seq 13" in message and "StoreUnavailable" in message, message
        assert "another writer" not in message
        assert isinstance(info.value.__cause__, StoreUnavailable)
        await store.append("held", session.events[13:])
        assert (await store.load("held", repair=False))[1] == session.events
    finally:
        lease.release()
        await store.close()


async def test_a_transaction_left_idle_is_ended_by_the_server(pg_url: str) -> None:
    # A process stopped mid-transaction must not hold its row locks until it runs again:
    # every connection asks the server to end a transaction idle past 2 × lease_s (≥ 10 s).
    store = PostgresStore(f"{pg_url}?lease_s=7")
    try:

        def setting(conn: psycopg.Connection) -> object:
            return conn.execute("SHOW idle_in_transaction_session_timeout").fetchone()

        assert await store.execute(setting) == ("14s",)
    finally:
        await store.close()
