"""Store integrity edges: a stored fork lineage can neither escape the store nor loop, and a
JSONL flush never acknowledges what is not on disk (after a load, after a failed fsync)."""

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
from actorloop.runtime.errors import SessionCorruptError, StoreError
from actorloop.runtime.session import Session, SessionMeta
from actorloop.runtime.stores import JsonlStore, SqliteStore


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
    finally:
        lease.release()
        await real.close()
        await alias.close()
