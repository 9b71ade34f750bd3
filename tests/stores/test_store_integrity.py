"""Store integrity edges: a stored fork lineage can neither escape the store nor loop, a
JSONL flush never acknowledges what is not on disk (after a load, after a failed fsync), a
damaged session is listed as damaged without hiding the others, and the offline integrity
check reports damage and changes nothing."""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

import pytest
from session_logs import begin_turn, end_step, end_turn, model_step

import actorloop.runtime.stores.jsonl as jsonl_module
from actorloop.codecs.jsonl import meta_line
from actorloop.codecs.rows import session_row
from actorloop.runtime import Runtime
from actorloop.runtime.errors import SessionCorruptError, StoreError
from actorloop.runtime.log.session import Session, SessionMeta
from actorloop.runtime.model.meta import DamagedSession
from actorloop.runtime.stores import JsonlStore, MemoryStore, SqliteStore
from actorloop.runtime.testing import EchoProvider


def one_turn(session_id: str) -> Session:
    session = Session(SessionMeta(session_id))
    turn = begin_turn(session, "hello")
    model_step(session, turn, 1, "hi")
    end_step(session, turn, 1)
    end_turn(session, turn)
    return session


async def test_jsonl_parent_outside_the_store_is_corruption(tmp_path: Path) -> None:
    outside = JsonlStore(tmp_path / "outside")
    victim = one_turn("victim")
    await outside.create(victim.meta)
    await outside.append("victim", victim.events)
    await outside.close()
    evil = tmp_path / "store" / "evil"
    evil.mkdir(parents=True)
    meta = SessionMeta("evil", parent_session="../outside/victim", seed_length=len(victim))
    (evil / "log.jsonl").write_bytes(meta_line(meta))
    store = JsonlStore(tmp_path / "store")
    try:
        with pytest.raises(SessionCorruptError, match="fork parent id is invalid"):
            await store.load("evil")
    finally:
        await store.close()


@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
async def test_a_looping_fork_lineage_is_corruption(tmp_path: Path, kind: str) -> None:
    looping = SessionMeta("a", parent_session="a", seed_length=2)
    store: SqliteStore | JsonlStore
    if kind == "sqlite":
        store = SqliteStore(tmp_path / "loop.db")
        await store.create(SessionMeta("schema"))
        with sqlite3.connect(tmp_path / "loop.db") as db:
            db.execute("INSERT INTO sessions VALUES (?, ?, ?, ?, ?, ?, ?)", session_row(looping))
    else:
        store = JsonlStore(tmp_path / "logs")
        (tmp_path / "logs" / "a").mkdir(parents=True)
        (tmp_path / "logs" / "a" / "log.jsonl").write_bytes(meta_line(looping))
    try:
        with pytest.raises(SessionCorruptError, match="loops back"):
            await store.load("a")
        with pytest.raises(SessionCorruptError, match="loops back"):
            await store.fork("a", 0, "b")
    finally:
        await store.close()


async def test_jsonl_load_keeps_unsynced_appends_owed_to_the_next_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(jsonl_module.os, "fsync", counting_fsync)
    store = JsonlStore(tmp_path / "logs")
    session = one_turn("s1")
    await store.create(session.meta)
    lease = store.claim("s1")
    try:
        await store.append("s1", session.events)
        await store.load("s1", lease=lease)
        synced.clear()
        await store.flush("s1")
        assert synced, "flush acknowledged appends without an fsync"
    finally:
        lease.release()
        await store.close()


async def test_jsonl_flush_after_a_failed_fsync_keeps_failing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_fsync = os.fsync
    failures = [0]

    def failing_once(fd: int) -> None:
        if failures[0]:
            failures[0] -= 1
            raise OSError(errno.EIO, "simulated writeback failure")
        real_fsync(fd)

    monkeypatch.setattr(jsonl_module.os, "fsync", failing_once)
    store = JsonlStore(tmp_path / "logs")
    session = one_turn("s1")
    await store.create(session.meta)
    await store.append("s1", session.events)
    failures[0] = 1
    with pytest.raises(StoreError, match="fsync"):
        await store.flush("s1")
    # Linux may report a writeback error once and then let fsync succeed: still not durable.
    with pytest.raises(StoreError, match="cannot be made durable"):
        await store.flush("s1")
    with pytest.raises(StoreError, match="cannot be made durable"):
        await store.close()


async def test_a_symlinked_sqlite_path_shares_the_writer_lease(tmp_path: Path) -> None:
    from actorloop.runtime.errors import SessionBusy

    real = SqliteStore(tmp_path / "real.db")
    await real.create(SessionMeta("s1"))
    (tmp_path / "alias.db").symlink_to(tmp_path / "real.db")
    alias = SqliteStore(tmp_path / "alias.db")
    lease = real.claim("s1")
    try:
        with pytest.raises(SessionBusy):
            alias.claim("s1")
        assert [meta.id for meta in await alias.list()] == ["s1"]  # one database, one path
    finally:
        lease.release()
        await real.close()
        await alias.close()


# listing around a damaged session, and the offline integrity check ------------------------


async def damaged_jsonl(root: Path) -> JsonlStore:
    """A JSONL store of sessions s0..s2 whose s1 meta line is damaged."""
    store = JsonlStore(root)
    for index in range(3):
        session = one_turn(f"s{index}")
        await store.create(session.meta)
        await store.append(session.id, session.events)
    await store.close()
    log = root / "s1" / "log.jsonl"
    data = bytearray(log.read_bytes())
    data[15] ^= 0x04
    log.write_bytes(bytes(data))
    return JsonlStore(root)


async def test_a_damaged_meta_is_listed_as_damaged_and_the_rest_still_list(
    tmp_path: Path,
) -> None:
    store = await damaged_jsonl(tmp_path / "logs")
    try:
        listing = await store.list()
        assert [entry.id for entry in listing] == ["s0", "s2", "s1"]
        damaged = listing[-1]
        assert isinstance(damaged, DamagedSession)
        assert "log.jsonl:1" in damaged.problem and "damaged" in damaged.problem
        assert all(isinstance(entry, SessionMeta) for entry in listing[:2])
        assert len((await store.load("s0"))[1]) == len(one_turn("s0"))
        with pytest.raises(SessionCorruptError):
            await store.load("s1")
    finally:
        await store.close()


async def test_the_runtime_lists_damaged_sessions_too(tmp_path: Path) -> None:
    await (await damaged_jsonl(tmp_path / "logs")).close()
    async with Runtime.open(store=f"jsonl:{tmp_path / 'logs'}", provider=EchoProvider()) as rt:
        listing = await rt.list_sessions()
    assert [(entry.id, type(entry).__name__) for entry in listing] == [
        ("s0", "SessionMeta"),
        ("s2", "SessionMeta"),
        ("s1", "DamagedSession"),
    ]


async def test_jsonl_integrity_check_reports_damage_and_torn_tails(tmp_path: Path) -> None:
    store = await damaged_jsonl(tmp_path / "logs")
    with (tmp_path / "logs" / "s2" / "log.jsonl").open("ab") as log:
        log.write(b"0123abcd {")  # an incomplete final write: reported, not an error
    try:
        problems = await store.check_integrity()
    finally:
        await store.close()
    assert len(problems) == 2
    assert "s1" in problems[0] and "damaged" in problems[0]
    assert "s2" in problems[1] and "torn tail" in problems[1]
    # The check changed nothing.
    assert (tmp_path / "logs" / "s2" / "log.jsonl").read_bytes().endswith(b"0123abcd {")


async def test_a_clean_store_passes_the_integrity_check(tmp_path: Path) -> None:
    for store in (JsonlStore(tmp_path / "logs"), SqliteStore(tmp_path / "db"), MemoryStore()):
        session = one_turn("s")
        await store.create(session.meta)
        await store.append("s", session.events)
        await store.flush("s")
        assert await store.check_integrity() == ()
        await store.close()
