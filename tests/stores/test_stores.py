"""The four stores behind one contract: round trips, tail checks, leases, hostile ids,
version refusal, fork and crash repair on load (scenario S3). PostgreSQL runs against a
real server (tests/kits/pg_server.py), a fresh database per test."""

from __future__ import annotations

import errno
import os
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
import trio
import trio.lowlevel
from session_logs import (
    FIXED_TIME,
    begin_turn,
    closed_log,
    end_step,
    model_step,
    tool_call,
    tool_turn,
)
from store_kinds import KINDS, url_for

from actorloop.codecs.converter import encode_event
from actorloop.codecs.jsonl import frame
from actorloop.runtime.errors import (
    GroupCommitError,
    InvalidSessionId,
    SessionBusy,
    SessionExists,
    SessionForkError,
    SessionFormatUnsupported,
    SessionNotFound,
    SessionValidationError,
    StoreError,
    StoreUrlError,
)
from actorloop.runtime.log.session import Session, SessionMeta
from actorloop.runtime.model.events import ToolResultEvent, TurnEnd
from actorloop.runtime.model.messages import ToolCall
from actorloop.runtime.model.meta import DamagedSession
from actorloop.runtime.stores import JsonlStore, Lease, MemoryStore, SqliteStore, Store, open_store
from actorloop.runtime.stores import jsonl as jsonl_store
from actorloop.runtime.stores.ids import MAX_SESSION_ID_LENGTH, check_session_id
from actorloop.runtime.stores.leases import lease_place
from actorloop.runtime.stores.postgres import PostgresStore


@pytest.fixture(params=KINDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return url_for(request.param, tmp_path, request)


@pytest.fixture(params=("sqlite", "jsonl", "postgres"))
def durable_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return url_for(request.param, tmp_path, request)


async def released(store: Store) -> None:
    """Released leases are free for other instances: PostgreSQL writes a release in the
    background (`Lease.release()` is synchronous), so wait for it there."""
    if isinstance(store, PostgresStore):
        await store.write_releases()


async def in_force(store: Store, session_id: str) -> Lease:
    """A writer lease in force: `claim`ed, and for PostgreSQL (whose claim reaches the
    database with the lease's first use) taken in the database too."""
    lease = store.claim(session_id)
    if isinstance(store, PostgresStore):
        try:
            await store.acquire(lease)
        except BaseException:
            lease.release()
            raise
    return lease


@pytest.fixture
async def store(url: str) -> AsyncIterator[Store]:
    opened = open_store(url)
    yield opened
    await opened.close()


def open_turn_with_tool_request(session_id: str) -> Session:
    """Scenario S3's log: the last turn's assistant asked for a tool, no tool/call logged."""
    session = closed_log(session_id, 1)
    turn = begin_turn(session, "run it")
    model_step(session, turn, 1, "calling", (ToolCall("t1", "danger", "{}"),))
    return session


async def stored(store: Store, session: Session) -> None:
    await store.create(session.meta)
    await store.append(session.id, session.events)
    await store.flush(session.id)


# round trips ------------------------------------------------------------------------------


async def test_round_trip_keeps_events_and_derivation_identical(store: Store) -> None:
    session = closed_log("alpha", 3)
    await store.create(session.meta)
    half = len(session) // 2
    await store.append("alpha", session.events[:half])
    await store.append("alpha", session.events[half:])
    await store.flush("alpha")
    meta, events = await store.load("alpha")
    assert meta == session.meta
    assert events == session.events
    assert [encode_event(e) for e in events] == [encode_event(e) for e in session.events]
    reloaded = Session.from_events("alpha", events, meta)
    assert reloaded.derive_messages() == session.derive_messages()
    assert await store.exists("alpha")
    assert not await store.exists("beta")
    assert [m.id for m in await store.list()] == ["alpha"]


async def test_every_store_returns_the_same_log(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    session = closed_log("same", 2)
    loaded = []
    for kind in KINDS:
        store = open_store(url_for(kind, tmp_path, request))
        await stored(store, session)
        loaded.append(await store.load("same"))
        await store.close()
    assert len(loaded) == len(KINDS)
    assert all(entry == (session.meta, session.events) for entry in loaded)


async def test_durable_stores_survive_reopening(durable_url: str) -> None:
    session = closed_log("durable", 2)
    first = open_store(durable_url)
    await stored(first, session)
    await first.close()
    second = open_store(durable_url)
    try:
        meta, events = await second.load("durable")
        assert (meta, events) == (session.meta, session.events)
        assert [m.id for m in await second.list()] == ["durable"]
    finally:
        await second.close()


async def test_append_batch_writes_many_sessions_at_once(store: Store) -> None:
    sessions = [closed_log(f"s{index}", 1 + index % 2) for index in range(5)]
    for session in sessions:
        await store.create(session.meta)
    await store.append_batch([(s.id, s.events) for s in sessions])
    for session in sessions:
        assert (await store.load(session.id))[1] == session.events
    assert sorted(m.id for m in await store.list()) == [s.id for s in sessions]


async def test_create_refuses_an_existing_session(store: Store) -> None:
    await store.create(SessionMeta("dup"))
    with pytest.raises(SessionExists):
        await store.create(SessionMeta("dup"))


async def test_unknown_sessions_are_not_found(store: Store) -> None:
    with pytest.raises(SessionNotFound):
        await store.load("ghost")
    with pytest.raises(SessionNotFound):
        await store.append("ghost", closed_log("ghost", 1).events)


# tail checks and writers ------------------------------------------------------------------


async def test_seq_gaps_and_overlaps_are_refused_and_change_nothing(store: Store) -> None:
    session = closed_log("gaps", 2)
    await store.create(session.meta)
    await store.append("gaps", session.events[:5])
    with pytest.raises(SessionValidationError, match="expected seq 5"):
        await store.append("gaps", session.events[6:])  # skips seq 5
    with pytest.raises(SessionValidationError, match="expected seq 5"):
        await store.append("gaps", session.events[3:])  # overlaps 3..4
    # A group commit isolates sessions: the refused one writes nothing, the good one is
    # committed, and the error names the refused session with its own error.
    other = closed_log("other", 1)
    await store.create(other.meta)
    with pytest.raises(GroupCommitError) as info:
        await store.append_batch([("other", other.events), ("gaps", session.events[7:])])
    assert [session_id for session_id, _ in info.value.failures] == ["gaps"]
    assert isinstance(info.value.failures[0][1], SessionValidationError)
    assert (await store.load("other"))[1] == other.events
    await store.append("gaps", session.events[5:])
    assert (await store.load("gaps"))[1] == session.events


async def test_a_second_writer_is_refused(store: Store) -> None:
    await store.create(SessionMeta("owned"))
    lease = store.claim("owned")
    with pytest.raises(SessionBusy, match="owned by a live writer"):
        store.claim("owned")
    lease.release()
    assert not lease.held
    lease.release()  # idempotent
    with store.claim("owned") as again:
        assert again.held
    assert not again.held


async def test_leases_exclude_other_store_instances(durable_url: str) -> None:
    first, second = open_store(durable_url), open_store(durable_url)
    try:
        session = closed_log("shared", 1)
        await first.create(session.meta)
        lease = await in_force(first, "shared")
        with pytest.raises(SessionBusy, match="owned by a live writer"):
            await in_force(second, "shared")
        await first.append("shared", session.events)
        # The other instance cannot slip events in, with or without the lease.
        rival = closed_log("shared", 2)
        with pytest.raises((SessionBusy, SessionValidationError)):
            await second.append("shared", rival.events[len(session) :])
        with pytest.raises((SessionBusy, SessionValidationError)):
            await second.append("shared", rival.events)
        lease.release()
        with second.claim("shared"):
            pass
        assert (await second.load("shared"))[1] == session.events
    finally:
        await first.close()
        await second.close()


async def test_concurrent_writers_never_interleave(durable_url: str) -> None:
    """Two store instances race to append different continuations of the same log, with no
    lease: the stored log is always one writer's continuation (whole batches, never mixed
    with the other's), and a writer that was never refused landed all of it. Both may be
    refused: a writer's append takes the session's lease for its duration, and the other's
    append meeting it is refused (SessionBusy) rather than waiting."""
    base = closed_log("race", 1)
    setup = open_store(durable_url)
    await stored(setup, base)
    await setup.close()
    writers = [open_store(durable_url) for _ in range(2)]
    outcomes: dict[str, Session | None] = {}
    attempted: list[Session] = []

    async def write(store: Store, text: str) -> None:
        session = Session.from_events("race", base.events, base.meta)
        for index in range(4):
            tool_turn(session, f"{text} {index}")
        attempted.append(session)
        try:
            for start in range(len(base), len(session), 3):
                await store.append("race", session.events[start : start + 3])
                await trio.lowlevel.checkpoint()
            outcomes[text] = session
        except (SessionBusy, SessionValidationError):
            outcomes[text] = None

    async with trio.open_nursery() as nursery:
        nursery.start_soon(write, writers[0], "left")
        nursery.start_soon(write, writers[1], "right")
    winners = [session for session in outcomes.values() if session is not None]
    assert len(outcomes) == 2 and len(winners) <= 1
    reader = open_store(durable_url)
    _, events = await reader.load("race", repair=False)
    assert events[: len(base)] == base.events
    owners = [session for session in attempted if session.events[: len(events)] == events]
    assert owners, "the stored log is neither writer's continuation: their batches mixed"
    if winners:
        assert events == winners[0].events
    for store in (*writers, reader):
        await store.close()


# hostile ids ------------------------------------------------------------------------------

HOSTILE_IDS = [
    "../x",
    "a/b",
    "..",
    ".",
    "a\\b",
    "a..b",
    ".hidden",
    "x" * 200,
    "x" * (MAX_SESSION_ID_LENGTH + 1),
    "nul\x00byte",
    "line\nbreak",
    "tab\t",
    "",
    "é",
    "/abs",
]


def names_under(path: Path) -> set[str]:
    return {entry.name for entry in path.rglob("*")}


@pytest.mark.parametrize("bad", HOSTILE_IDS)
async def test_hostile_ids_are_refused_everywhere(store: Store, bad: str, tmp_path: Path) -> None:
    before = names_under(tmp_path)
    siblings = {entry.name for entry in tmp_path.parent.iterdir()}
    with pytest.raises(InvalidSessionId):
        await store.create(SessionMeta(bad))
    with pytest.raises(InvalidSessionId):
        await store.load(bad)
    with pytest.raises(InvalidSessionId):
        await store.exists(bad)
    with pytest.raises(InvalidSessionId):
        await store.append(bad, ())
    with pytest.raises(InvalidSessionId):
        store.claim(bad)
    await stored(store, closed_log("parent", 1))
    with pytest.raises(InvalidSessionId):
        await store.fork("parent", 12, bad)
    with pytest.raises(InvalidSessionId):
        await store.fork(bad, 12, "child")
    # Only the legitimate parent session left traces, all inside the store's own directory.
    assert names_under(tmp_path) - before <= {
        "store.db",
        "store.db-wal",
        "store.db-shm",
        "sessions",
        "parent",
        "log.jsonl",
        "head",
        "lock",
        "store.db.locks",
        "parent.lock",
        "store.db.leases",  # the SQLite lease lock files (persistence.md §5)
        f"{lease_place('parent')[0]:02x}",
    }
    assert {entry.name for entry in tmp_path.parent.iterdir()} == siblings


def test_good_ids_are_accepted() -> None:
    for good in ("a", "0f3a9c", "agent-1.fork_2", "x" * MAX_SESSION_ID_LENGTH):
        assert check_session_id(good) == good
    with pytest.raises(InvalidSessionId, match="must be a str"):
        check_session_id(7)


# versions ---------------------------------------------------------------------------------


async def test_creating_an_unsupported_version_is_refused(store: Store) -> None:
    with pytest.raises(SessionFormatUnsupported, match="version 2"):
        await store.create(SessionMeta("future", version=2))


async def test_sqlite_refuses_a_newer_session_version(tmp_path: Path) -> None:
    path = tmp_path / "v.db"
    store = SqliteStore(path)
    await stored(store, closed_log("old", 1))
    await store.close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE sessions SET version = 2 WHERE id = 'old'")
    store = SqliteStore(path)
    with pytest.raises(SessionFormatUnsupported, match="version 2"):
        await store.load("old")
    await store.close()


async def test_sqlite_refuses_a_newer_schema(tmp_path: Path) -> None:
    path = tmp_path / "schema.db"
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version = 99")
    store = SqliteStore(path)
    with pytest.raises(SessionFormatUnsupported, match="schema version 99"):
        await store.exists("anything")


async def test_jsonl_refuses_a_newer_meta_version(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    await stored(store, closed_log("old", 1))
    log = tmp_path / "old" / "log.jsonl"
    lines = log.read_bytes().split(b"\n")
    meta = orjson.loads(lines[0].split(b" ", 1)[1])
    meta["version"] = 7
    lines[0] = frame(orjson.dumps(meta)).rstrip(b"\n")
    log.write_bytes(b"\n".join(lines))
    fresh = JsonlStore(tmp_path)
    with pytest.raises(SessionFormatUnsupported, match="version 7"):
        await fresh.load("old")
    # The listing reports it in place of its meta rather than failing for every session.
    [listed] = await fresh.list()
    assert isinstance(listed, DamagedSession) and listed.id == "old"
    assert "version 7" in listed.problem


# fork -------------------------------------------------------------------------------------


async def test_fork_reads_the_parents_seed_and_copies_nothing(store: Store) -> None:
    parent = closed_log("parent", 3)
    await stored(store, parent)
    child_meta = await store.fork("parent", 25, "child")  # turn 2's turn/end
    assert (child_meta.parent_session, child_meta.seed_length) == ("parent", 26)
    meta, events = await store.load("child")
    assert meta == child_meta
    assert events == parent.events[:26]
    # The child continues on its own; the parent is untouched.
    child = Session.from_events("child", events, meta)
    tool_turn(child, "child only")
    await store.append("child", child.events_since(26))
    assert (await store.load("child"))[1] == child.events
    assert (await store.load("parent"))[1] == parent.events
    # A fork of a fork reads through both parents.
    await store.fork("child", 25, "grandchild")
    await store.fork("child", 38, "grandchild2")
    assert (await store.load("grandchild"))[1] == parent.events[:26]
    assert (await store.load("grandchild2"))[1] == child.events


async def test_fork_errors_are_typed(store: Store) -> None:
    await stored(store, closed_log("parent", 2))
    await store.create(SessionMeta("taken"))
    cases = [
        (("parent", 3, "c1"), "OPEN_TURN"),  # a step/start: the seed would end mid-turn
        (("parent", 26, "c1"), "INVALID_BOUNDARY"),  # past the stored tail
        (("parent", -1, "c1"), "INVALID_BOUNDARY"),
        (("parent", True, "c1"), "INVALID_BOUNDARY"),
        (("ghost", 12, "c1"), "SESSION_NOT_FOUND"),
        (("parent", 12, "taken"), "SESSION_ALREADY_EXISTS"),
        (("parent", 12, "parent"), "SESSION_ALREADY_EXISTS"),
        # The child id is checked before the boundary.
        (("parent", 3, "taken"), "SESSION_ALREADY_EXISTS"),
        (("parent", -1, "taken"), "SESSION_ALREADY_EXISTS"),
    ]
    for args, code in cases:
        with pytest.raises(SessionForkError) as info:
            await store.fork(*args)
        assert info.value.code == code, args
    assert not await store.exists("c1")


async def test_sqlite_fork_stores_only_a_pointer(tmp_path: Path) -> None:
    path = tmp_path / "fork.db"
    store = SqliteStore(path)
    await stored(store, closed_log("parent", 4))
    await store.fork("parent", 38, "child")
    await store.close()
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT session_id, COUNT(*) FROM events GROUP BY session_id").fetchall()
        child = db.execute("SELECT parent, seed_length FROM sessions WHERE id='child'").fetchone()
    assert rows == [("parent", 52)]
    assert child == ("parent", 39)


async def test_jsonl_fork_stores_only_a_pointer(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    await stored(store, closed_log("parent", 4))
    await store.fork("parent", 38, "child")
    assert len((tmp_path / "child" / "log.jsonl").read_bytes().splitlines()) == 1


# failed writes ----------------------------------------------------------------------------


def half_write_then_enospc(fd: int, data: bytes) -> None:
    os.write(fd, data[: len(data) // 2])
    raise OSError(errno.ENOSPC, "No space left on device")


async def test_jsonl_cuts_a_failed_write_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = JsonlStore(tmp_path)
    session = closed_log("w", 2)
    await store.create(session.meta)
    await store.append("w", session.events[:13])
    log = tmp_path / "w" / "log.jsonl"
    before = log.read_bytes()
    with monkeypatch.context() as patch:
        patch.setattr(jsonl_store, "write_all", half_write_then_enospc)
        with pytest.raises(StoreError, match="cut back"):
            await store.append("w", session.events[13:])
    assert log.read_bytes() == before
    await store.append("w", session.events[13:])
    assert (await JsonlStore(tmp_path).load("w"))[1] == session.events


async def test_jsonl_refuses_appends_after_an_undoable_failed_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = JsonlStore(tmp_path)
    session = closed_log("w", 2)
    await store.create(session.meta)
    await store.append("w", session.events[:13])

    def no_truncate(fd: int, length: int) -> None:
        raise OSError(errno.EIO, "I/O error")

    with monkeypatch.context() as patch:
        patch.setattr(jsonl_store, "write_all", half_write_then_enospc)
        patch.setattr(os, "ftruncate", no_truncate)
        with pytest.raises(StoreError, match="cutting it back failed"):
            await store.append("w", session.events[13:])
    with pytest.raises(StoreError, match="unusable"):
        await store.append("w", session.events[13:])
    # A repairing load cuts the half-written line (a torn tail), keeps the complete lines
    # before it, closes the reopened turn, and the session takes appends again.
    meta, events = await store.load("w")
    kept = next(i for i, e in enumerate(events) if e != session.events[i])
    assert kept > 13
    assert events[-1].type == "turn/end"
    assert events[-1].data.reason.kind == "interrupted"  # type: ignore[union-attr]
    resumed = Session.from_events("w", events, meta)
    tool_turn(resumed, "after the repair")
    await store.append("w", resumed.events_since(len(events)))
    assert (await JsonlStore(tmp_path).load("w"))[1] == resumed.events


# crash repair on load ---------------------------------------------------------------------


async def test_s3_open_turn_is_repaired_with_consecutive_closers(url: str) -> None:
    session = open_turn_with_tool_request("s3")
    store = open_store(url)
    await stored(store, session)
    meta, events = await store.load("s3")
    n = len(session)
    assert events[:n] == session.events
    tail = events[n:]
    assert [e.type for e in tail] == ["tool/result", "step/end", "turn/end"]
    assert [e.seq for e in tail] == [n, n + 1, n + 2]
    result = tail[0].data
    assert isinstance(result, ToolResultEvent)
    assert result.is_error and result.call_id == "t1"
    assert result.error is not None and result.error.code == "TOOL_NOT_STARTED"
    end = tail[2].data
    assert isinstance(end, TurnEnd) and end.reason.kind == "interrupted"
    Session.from_events("s3", events, meta)
    # The repair is persisted: loading again (in a fresh store if durable) adds nothing.
    again = store if url == "memory:" else open_store(url)
    assert (await again.load("s3"))[1] == events
    if again is not store:
        await again.close()
    await store.close()


async def test_a_logged_call_without_result_is_outcome_unknown(store: Store) -> None:
    session = closed_log("running", 1)
    turn = begin_turn(session, "go")
    call = ToolCall("t9", "deploy", "{}")
    model_step(session, turn, 1, "deploying", (call,))
    call_event = tool_call(session, turn, 1, call)
    await stored(store, session)
    _, events = await store.load("running")
    result = events[len(session)]
    assert isinstance(result.data, ToolResultEvent)
    assert result.data.error is not None and result.data.error.code == "TOOL_OUTCOME_UNKNOWN"
    assert result.source_event_seqs == (call_event.seq,)
    assert [e.type for e in events[len(session) :]] == ["tool/result", "step/end", "turn/end"]


async def test_an_open_turn_without_a_step_gets_only_a_turn_end(store: Store) -> None:
    session = closed_log("nostep", 1)
    turn = begin_turn(session, "hello")
    model_step(session, turn, 1, "hi")
    end_step(session, turn, 1)
    await stored(store, session)
    _, events = await store.load("nostep")
    assert [e.type for e in events[len(session) :]] == ["turn/end"]


async def test_repair_is_refused_while_a_live_writer_holds_the_lease(store: Store) -> None:
    session = open_turn_with_tool_request("live")
    await stored(store, session)
    lease = store.claim("live")
    with pytest.raises(SessionBusy, match="live turn is open"):
        await store.load("live")
    # The holder itself repairs by presenting its lease.
    _, events = await store.load("live", lease=lease)
    assert events[-1].type == "turn/end"
    # A closed log can be read while someone holds the lease.
    assert (await store.load("live"))[1] == events
    lease.release()
    with pytest.raises(ValueError, match="not a live lease"):
        await store.load("live", lease=lease)


async def test_repair_is_refused_across_processes_holding_the_lease(durable_url: str) -> None:
    writer, reader = open_store(durable_url), open_store(durable_url)
    session = open_turn_with_tool_request("live")
    await stored(writer, session)
    with await in_force(writer, "live"), pytest.raises(SessionBusy, match="live turn is open"):
        await reader.load("live")
    await released(writer)
    assert (await reader.load("live"))[1][-1].type == "turn/end"
    await writer.close()
    await reader.close()


async def test_a_closed_store_refuses_work(store: Store) -> None:
    await store.create(SessionMeta("x"))
    await store.close()
    with pytest.raises(StoreError, match="closed"):
        await store.load("x")


# URLs and options -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    ["postgres:db", "", "memory", "memory:x", "sqlite:", "sqlite:a.db?mode=ro", "jsonl:", "x:y"],
)
def test_unknown_store_urls_say_what_is_accepted(bad: str) -> None:
    with pytest.raises(StoreUrlError) as info:
        open_store(bad)
    message = str(info.value)
    assert "\n" not in message
    assert "memory:" in message or "synchronous" in message


def test_store_urls_choose_the_store(tmp_path: Path) -> None:
    assert isinstance(open_store("memory:"), MemoryStore)
    assert isinstance(open_store(f"jsonl:{tmp_path}"), JsonlStore)
    normal = open_store(f"sqlite:{tmp_path / 'a.db'}")
    full = open_store(f"sqlite:{tmp_path / 'b.db'}?synchronous=FULL")
    kwarg = open_store(f"sqlite:{tmp_path / 'c.db'}", synchronous="FULL")
    assert isinstance(normal, SqliteStore) and normal.synchronous == "NORMAL"
    assert isinstance(full, SqliteStore) and full.synchronous == "FULL"
    assert isinstance(kwarg, SqliteStore) and kwarg.synchronous == "FULL"
    with pytest.raises(StoreUrlError, match="NORMAL or FULL"):
        open_store(f"sqlite:{tmp_path / 'd.db'}?synchronous=OFF")


async def test_sqlite_uses_wal_and_the_chosen_synchronous_mode(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "w.db", synchronous="FULL")
    await store.create(SessionMeta("w"))
    db = store._db
    assert db is not None
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    await store.close()


async def test_events_keep_their_time_and_provenance(store: Store) -> None:
    session = closed_log("t", 1)
    await stored(store, session)
    _, events = await store.load("t")
    assert all(e.time == FIXED_TIME for e in events)
    assert [e.source_event_seqs for e in events] == [e.source_event_seqs for e in session.events]
