"""SQLite integrity: checksummed rows and the acknowledged head catch missing, reordered,
altered and mistyped rows (never a shorter log without an error), version-1 databases are
migrated, and the database file has one writer of a session and one path at a time,
whatever path (symlink or hard link) reaches it."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import orjson
import pytest
from helpers import kill_child, open_runtime, start_ready_child
from session_logs import closed_log, tool_turn

from actorloop.codecs.converter import encode_event
from actorloop.codecs.rows import encode_meta, meta_crc
from actorloop.runtime import AgentOptions
from actorloop.runtime.errors import SessionBusy, SessionCorruptError, StoreError
from actorloop.runtime.log.session import Session, SessionMeta
from actorloop.runtime.model.meta import DamagedSession
from actorloop.runtime.stores import SqliteStore
from actorloop.runtime.stores.leases import LEASE_FILES
from actorloop.runtime.stores.sqlite import SCHEMA_VERSION
from actorloop.runtime.testing import EchoProvider

V1_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    meta BLOB NOT NULL,
    parent TEXT,
    seed_length INTEGER,
    version INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    time INTEGER NOT NULL,
    body BLOB NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
"""
"""The DDL of schema version 1, as the previous build created it."""


@contextmanager
def raw(path: Path) -> Iterator[sqlite3.Connection]:
    with closing(sqlite3.connect(path, isolation_level=None)) as db:
        yield db


def wal_beside(path: Path) -> bool:
    return Path(f"{path}-wal").exists() or Path(f"{path}-shm").exists()


@pytest.fixture
async def stored(tmp_path: Path) -> AsyncIterator[tuple[Path, Session]]:
    """A database holding session "s" (3 closed turns) and a neighbour "n"."""
    path = tmp_path / "s.db"
    store = SqliteStore(path)
    session = closed_log("s", 3)
    for log in (session, closed_log("n", 1)):
        await store.create(log.meta)
        await store.append(log.id, log.events)
    await store.close()
    yield path, session


async def load(path: Path, session_id: str = "s", *, repair: bool = True) -> object:
    store = SqliteStore(path)
    try:
        return await store.load(session_id, repair=repair)
    finally:
        await store.close()


async def assert_corrupt_at(path: Path, seq: int | None, match: str) -> None:
    for repair in (True, False):
        with pytest.raises(SessionCorruptError, match=match) as info:
            await load(path, repair=repair)
        if seq is not None:
            assert info.value.location.endswith(f"session 's' seq {seq}"), info.value.location
    # The neighbour is untouched and loads.
    assert len((await load(path, "n"))[1]) == 13  # type: ignore[index]
    problems = await integrity(path)
    assert any("'s'" in problem for problem in problems), problems


async def integrity(path: Path) -> tuple[str, ...]:
    store = SqliteStore(path)
    try:
        return await store.check_integrity()
    finally:
        await store.close()


# damage is always an error -----------------------------------------------------------------


async def test_a_clean_database_passes_the_integrity_check(stored: tuple[Path, Session]) -> None:
    path, session = stored
    assert await integrity(path) == ()
    assert (await load(path))[1] == session.events  # type: ignore[index]


async def test_a_missing_row_in_the_middle_is_corruption(stored: tuple[Path, Session]) -> None:
    path, _ = stored
    with raw(path) as db:
        db.execute("DELETE FROM events WHERE session_id = 's' AND seq = 17")
    await assert_corrupt_at(path, 17, "missing or moved")


@pytest.mark.parametrize("rows", [1, 30, 39])
async def test_missing_rows_at_the_end_are_corruption(
    stored: tuple[Path, Session], rows: int
) -> None:
    """The case a damaged index produced: load used to return the first rows only, and
    repair closed the "open" turn as interrupted."""
    path, _ = stored
    with raw(path) as db:
        db.execute("DELETE FROM events WHERE session_id = 's' AND seq >= ?", (39 - rows,))
    await assert_corrupt_at(path, 39 - rows, f"holds {39 - rows} events, its acknowledged head")


async def test_a_row_past_the_head_is_corruption(stored: tuple[Path, Session]) -> None:
    path, _ = stored
    with raw(path) as db:
        db.execute("UPDATE sessions SET head = 38 WHERE id = 's'")
    await assert_corrupt_at(path, 38, "past the acknowledged head")


async def test_swapped_rows_are_corruption(stored: tuple[Path, Session]) -> None:
    path, _ = stored
    with raw(path) as db:
        rows = db.execute(
            "SELECT seq, body, crc FROM events WHERE session_id = 's' AND seq IN (20, 21)"
        ).fetchall()
        for (seq, _, _), (_, body, crc) in zip(rows, reversed(rows), strict=True):
            db.execute(
                "UPDATE events SET body = ?, crc = ? WHERE session_id = 's' AND seq = ?",
                (body, crc, seq),
            )
    await assert_corrupt_at(path, 20, "checksum mismatch")


async def test_an_edited_answer_is_corruption_even_when_chunk_and_message_agree(
    stored: tuple[Path, Session],
) -> None:
    """Rewriting the last answer in both its chunk and its message used to pass load and
    verify; each row's checksum now catches it."""
    path, session = stored
    with raw(path) as db:
        for seq in (len(session) - 4, len(session) - 3):  # the last chunk and its message
            body = db.execute(
                "SELECT body FROM events WHERE session_id = 's' AND seq = ?", (seq,)
            ).fetchone()[0]
            edited = bytes(body).replace(b"answer to", b"ANSWER TO")
            assert edited != body
            db.execute(
                "UPDATE events SET body = ? WHERE session_id = 's' AND seq = ?", (edited, seq)
            )
    await assert_corrupt_at(path, len(session) - 4, "checksum mismatch")


async def test_a_row_moved_to_another_session_is_corruption(
    stored: tuple[Path, Session],
) -> None:
    """Out of one session (a gap there) and into another (past its head, and its key no
    longer the one its checksum covers)."""
    path, _ = stored
    with raw(path) as db:
        db.execute(
            "UPDATE events SET session_id = 's', seq = 39 WHERE session_id = 'n' AND seq = 12"
        )
    with pytest.raises(SessionCorruptError, match="seq 12: missing"):
        await load(path, "n")
    with pytest.raises(SessionCorruptError, match="seq 39: row seq 39 lies past"):
        await load(path, "s")
    with raw(path) as db:
        db.execute("UPDATE sessions SET head = 40 WHERE id = 's'")
    with pytest.raises(SessionCorruptError, match="seq 39: row checksum mismatch"):
        await load(path, "s")


@pytest.mark.parametrize("column", ["body", "meta"])
async def test_text_typed_rows_are_a_typed_error(stored: tuple[Path, Session], column: str) -> None:
    path, _ = stored
    with raw(path) as db:
        if column == "body":
            db.execute("UPDATE events SET body = CAST(body AS TEXT) WHERE seq = 3")
        else:
            db.execute("UPDATE sessions SET meta = CAST(meta AS TEXT) WHERE id = 's'")
    with pytest.raises(SessionCorruptError, match="stored as TEXT"):
        await load(path)
    if column == "meta":
        store = SqliteStore(path)
        listing = await store.list()
        await store.close()
        assert [type(entry) for entry in listing] == [DamagedSession, SessionMeta]
        assert listing[0].id == "s" and "TEXT" in listing[0].problem  # type: ignore[union-attr]


async def test_an_edited_label_is_corruption(stored: tuple[Path, Session]) -> None:
    path, _ = stored
    with raw(path) as db:
        meta = orjson.loads(db.execute("SELECT meta FROM sessions WHERE id = 's'").fetchone()[0])
        meta["labels"] = {"owner": "mallory"}
        db.execute("UPDATE sessions SET meta = ? WHERE id = 's'", (orjson.dumps(meta),))
    await assert_corrupt_at(path, None, "checksum mismatch")


async def test_appending_to_a_session_whose_head_disagrees_is_refused(
    stored: tuple[Path, Session],
) -> None:
    path, session = stored
    with raw(path) as db:
        db.execute("UPDATE sessions SET head = 30 WHERE id = 's'")
    store = SqliteStore(path)
    more = Session.from_events("s", session.events, session.meta)
    tool_turn(more, "more")
    try:
        with pytest.raises(SessionCorruptError, match="disagrees with the stored rows"):
            await store.append("s", more.events_since(len(session)))
    finally:
        await store.close()


# version 1 ---------------------------------------------------------------------------------


def build_v1(path: Path, sessions: list[Session], fork: SessionMeta | None = None) -> None:
    with raw(path) as db:
        db.executescript(V1_SCHEMA)
        metas = [session.meta for session in sessions] + ([fork] if fork else [])
        for meta in metas:
            db.execute(
                "INSERT INTO sessions VALUES (?, ?, ?, ?, ?)",
                (meta.id, encode_meta(meta), meta.parent_session, meta.seed_length, 1),
            )
        for session in sessions:
            db.executemany(
                "INSERT INTO events VALUES (?, ?, ?, ?, ?)",
                [(session.id, e.seq, e.type, e.time, encode_event(e)) for e in session.events],
            )
        db.execute("PRAGMA user_version = 1")


async def test_a_version_1_database_is_migrated_in_place(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    parent = closed_log("parent", 2)
    child = SessionMeta("child", parent_session="parent", seed_length=13)
    build_v1(path, [parent, closed_log("empty", 0)], child)
    store = SqliteStore(path)
    try:
        assert (await store.load("parent"))[1] == parent.events
        assert (await store.load("child"))[1] == parent.events[:13]
        assert (await store.load("empty"))[1] == ()
        assert await store.check_integrity() == ()
        more = Session.from_events("parent", parent.events, parent.meta)
        tool_turn(more, "after the migration")
        await store.append("parent", more.events_since(len(parent)))
        assert (await store.load("parent"))[1] == more.events
    finally:
        await store.close()
    with raw(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3
        heads = dict(db.execute("SELECT id, head FROM sessions").fetchall())
        assert heads == {"parent": 39, "empty": 0, "child": 13}
        assert db.execute("SELECT COUNT(*) FROM events WHERE crc IS NULL").fetchone()[0] == 0
        raw_meta = db.execute("SELECT meta, crc FROM sessions WHERE id = 'child'").fetchone()
        assert raw_meta[1] == meta_crc("child", raw_meta[0])
        # Migrated rows are checked like new ones.
        db.execute(
            "UPDATE events SET body = CAST(body || x'20' AS BLOB) "
            "WHERE session_id = 'parent' AND seq = 2"
        )
    with pytest.raises(SessionCorruptError, match="seq 2: row checksum mismatch"):
        await load(path, "parent")


async def test_an_unknown_schema_with_tables_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "foreign.db"
    with raw(path) as db:
        db.execute("CREATE TABLE sessions (id TEXT)")
    from actorloop.runtime.errors import SessionFormatUnsupported

    store = SqliteStore(path)
    try:
        with pytest.raises(SessionFormatUnsupported, match="schema version 0 with tables"):
            await store.exists("x")
    finally:
        await store.close()


# one file, one path, one writer ----------------------------------------------------------

HOLDER = r"""
import sys
import trio
from actorloop.runtime.log.session import SessionMeta
from actorloop.runtime.stores import SqliteStore


async def main(path: str, session_id: str) -> None:
    store = SqliteStore(path)
    lease = store.claim(session_id)
    if not await store.exists(session_id):
        await store.create(SessionMeta(session_id))
    print("READY", flush=True)
    await trio.to_thread.run_sync(sys.stdin.readline)
    lease.release()
    await store.close()
    print("DONE", flush=True)


trio.run(main, sys.argv[1], sys.argv[2])
"""


class Holder:
    """A process holding a session's lease (and the database open) through `path`."""

    def __init__(self, path: Path, session_id: str) -> None:
        self.proc = start_ready_child(HOLDER, str(path), session_id)

    def finish(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(b"\n")
        self.proc.stdin.close()
        assert self.proc.stdout.readline() == b"DONE\n"
        assert self.proc.wait(30) == 0

    def kill(self) -> None:
        kill_child(self.proc)


async def test_a_hard_link_is_refused_while_another_process_holds_the_database(
    tmp_path: Path,
) -> None:
    real = tmp_path / "real" / "db.sqlite"
    real.parent.mkdir()
    store = SqliteStore(real)
    await store.create(SessionMeta("s1"))
    await store.close()
    alias = tmp_path / "elsewhere" / "alias.sqlite"
    alias.parent.mkdir()
    os.link(real, alias)
    holder = Holder(real, "s1")
    try:
        second = SqliteStore(alias)
        with pytest.raises(StoreError, match="through another path"):
            second.claim("s1")
        with pytest.raises(StoreError, match="through another path"):
            second.claim("other-session")  # not only the held session: the whole file
        with pytest.raises(StoreError, match="through another path"):
            await second.list()
        await second.close()
        # The same path is a second store of the same database: only the lease counts.
        same = SqliteStore(real)
        with pytest.raises(SessionBusy):
            same.claim("s1")
        with same.claim("s2"):
            pass
        await same.close()
    finally:
        holder.kill()
    # kill -9 released everything with the holder; the hard link works now.
    after = SqliteStore(alias)
    with after.claim("s1"):
        assert [meta.id for meta in await after.list()] == ["s1"]
    await after.close()


async def test_a_second_runtime_through_a_hard_link_is_refused_and_nothing_breaks(
    tmp_path: Path,
) -> None:
    real, alias = tmp_path / "a.db", tmp_path / "b.db"
    options = AgentOptions(model="m")
    async with open_runtime(EchoProvider(), store=f"sqlite:{real}") as rt:
        agent = await rt.spawn(options, session_id="s1")
        await agent.send("hello")
        os.link(real, alias)
        with pytest.raises(StoreError, match="through another path"):
            async with open_runtime(EchoProvider(), store=f"sqlite:{alias}") as other:
                await other.spawn(options, session_id="s2")
        with pytest.raises(StoreError, match="through another path"):
            async with open_runtime(EchoProvider(), store=f"sqlite:{alias}") as other:
                await other.resume("s1", options)
        assert (await agent.send("still mine")).reason == "completed"
        events = agent.session.events
    assert not wal_beside(alias)
    with raw(real) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert (await load(real, "s1"))[1] == events  # type: ignore[index]


async def test_leases_share_a_fixed_few_descriptors(tmp_path: Path) -> None:
    # Not one per lease: one per lease lock file (persistence.md §5), whatever the count.
    store = SqliteStore(tmp_path / "many.db")
    await store.create(SessionMeta("first"))
    before = len(os.listdir("/proc/self/fd"))
    leases = [store.claim(f"s{index}") for index in range(300)]
    assert len(os.listdir("/proc/self/fd")) <= before + LEASE_FILES
    other = SqliteStore(tmp_path / "many.db")
    try:
        for index in (0, 150, 299):
            with pytest.raises(SessionBusy):
                other.claim(f"s{index}")
        for lease in leases:
            lease.release()
        with other.claim("s150"):
            pass
    finally:
        await other.close()
        await store.close()


async def test_a_version_1_database_with_a_text_row_migrates_and_reports_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "v1-text.db"
    build_v1(path, [closed_log("a", 1), closed_log("b", 1)])
    with raw(path) as db:
        db.execute("UPDATE events SET body = CAST(body AS TEXT) WHERE session_id = 'a' AND seq = 4")
    store = SqliteStore(path)
    try:
        with pytest.raises(SessionCorruptError, match="seq 4: event body is stored as TEXT"):
            await store.load("a")
        assert len((await store.load("b"))[1]) == 13
        problems = await store.check_integrity()
        assert len(problems) == 1 and "'a' seq 4" in problems[0]
    finally:
        await store.close()
