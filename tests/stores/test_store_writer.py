"""The store write path: the writer thread, remembered tails and inline SQLite commits write
exactly what the checked path writes, and refuse exactly what it refuses."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest
import trio
import trio.testing
from session_logs import closed_log, tool_turn

from actorloop.runtime.errors import SessionCorruptError, StoreError
from actorloop.runtime.log.session import Session
from actorloop.runtime.model.events import SessionEvent
from actorloop.runtime.stores import JsonlStore, SqliteStore
from actorloop.runtime.stores.sqlite import CHECKPOINT_PAGES


@contextmanager
def raw(path: Path) -> Iterator[sqlite3.Connection]:
    with closing(sqlite3.connect(path, isolation_level=None)) as db:
        yield db


def steps(session: Session, size: int = 5) -> list[tuple[SessionEvent, ...]]:
    events = session.events
    return [events[start : start + size] for start in range(0, len(events), size)]


def stored_rows(path: Path) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    with raw(path) as db:
        events = db.execute("SELECT * FROM events ORDER BY session_id, seq").fetchall()
        sessions = db.execute("SELECT * FROM sessions ORDER BY id").fetchall()
    return events, sessions


async def test_remembered_tails_inline_commits_and_the_checked_path_store_identical_bytes(
    tmp_path: Path,
) -> None:
    log = closed_log("s", 6)
    # Leased, NORMAL: remembered tails, inline commits. Leased, FULL: remembered tails on
    # the writer thread. Unleased: every commit reads heads and tails back (checked path).
    layouts = {"inline": ("NORMAL", True), "thread": ("FULL", True), "checked": ("NORMAL", False)}
    for name, (synchronous, leased) in layouts.items():
        store = SqliteStore(tmp_path / f"{name}.db", synchronous=synchronous)
        lease = store.claim("s") if leased else None
        await store.create(log.meta)
        for step in steps(log):
            await store.append_batch((("s", step),))
        remembered = store._tails.get("s")
        inline_commits = store._inline_commits
        if lease is not None:
            lease.release()
        await store.close()
        if leased:
            assert remembered is not None and remembered[1] == len(log)
        else:
            assert remembered is None
        # The first commit opens the database on the writer thread; in NORMAL mode the
        # rest ran inline, in FULL mode (an fsync per commit) all on the thread.
        assert (inline_commits > 0) == (synchronous == "NORMAL")
    reference = stored_rows(tmp_path / "checked.db")
    assert len(reference[0]) == len(log)
    for name in ("inline", "thread"):
        assert stored_rows(tmp_path / f"{name}.db") == reference, name


async def test_a_head_moved_behind_a_remembered_tail_is_refused_as_without_the_memory(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    log = closed_log("s", 2)
    store = SqliteStore(path)
    lease = store.claim("s")
    try:
        await store.create(log.meta)
        await store.append("s", log.events)
        assert store._tails["s"][1] == len(log)
        with raw(path) as db:
            db.execute("UPDATE sessions SET head = 30 WHERE id = 's'")
        more = Session.from_events("s", log.events, log.meta)
        tool_turn(more, "more")
        with pytest.raises(SessionCorruptError, match="disagrees with the stored rows"):
            await store.append("s", more.events_since(len(log)))
        assert "s" not in store._tails
        events, _ = stored_rows(path)
        assert len(events) == len(log)  # nothing of the refused step was written
    finally:
        lease.release()
        await store.close()


async def test_a_row_planted_past_a_remembered_tail_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    log = closed_log("s", 2)
    store = SqliteStore(path)
    lease = store.claim("s")
    try:
        await store.create(log.meta)
        await store.append("s", log.events)
        with raw(path) as db:
            db.execute(
                "INSERT INTO events SELECT session_id, ?, type, time, body, crc FROM events "
                "WHERE session_id = 's' AND seq = 0",
                (len(log),),
            )
        more = Session.from_events("s", log.events, log.meta)
        tool_turn(more, "more")
        with pytest.raises(SessionCorruptError, match="disagrees with the stored rows"):
            await store.append("s", more.events_since(len(log)))
    finally:
        lease.release()
        await store.close()


async def test_a_cancelled_append_on_the_writer_thread_commits_before_it_is_cancelled(
    tmp_path: Path,
) -> None:
    log = closed_log("s", 2)
    store = SqliteStore(tmp_path / "s.db", synchronous="FULL")  # FULL: never inline
    lease = store.claim("s")
    try:
        await store.create(log.meta)
        with trio.CancelScope() as scope:
            scope.cancel()
            await store.append_batch((("s", log.events),))
            committed = len((await store.load("s", lease=lease))[1])
            await trio.lowlevel.checkpoint()  # the cancellation is delivered here
        assert scope.cancelled_caught
        assert committed == len(log)
        _, events = await store.load("s", lease=lease)
        assert events == log.events
    finally:
        lease.release()
        await store.close()


async def test_a_busy_database_sends_the_inline_commit_to_the_writer_thread(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    log = closed_log("s", 2)
    first, second = log.events[:13], log.events[13:]
    store = SqliteStore(path)
    lease = store.claim("s")
    try:
        await store.create(log.meta)
        await store.append("s", first)
        inline_before = store._inline_commits
        with raw(path) as other:
            other.execute("BEGIN IMMEDIATE")  # another writer holds the write lock
            async with trio.open_nursery() as nursery:
                nursery.start_soon(store.append, "s", second)
                # The append gave the inline attempt up at once (no busy wait here) and now
                # waits on the writer thread, which waits for the lock: trio runs on.
                await trio.testing.wait_all_tasks_blocked()
                assert len(stored_rows(path)[0]) == len(first)
                other.execute("COMMIT")
        assert store._inline_commits == inline_before
        _, events = await store.load("s", lease=lease)
        assert events == log.events
    finally:
        lease.release()
        await store.close()


@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
async def test_close_ends_the_writer_thread_and_later_calls_are_refused(
    tmp_path: Path, kind: str
) -> None:
    log = closed_log("s", 1)
    store = SqliteStore(tmp_path / "s.db") if kind == "sqlite" else JsonlStore(tmp_path / "j")
    await store.create(log.meta)
    await store.append("s", log.events)
    name = store._writer._name
    assert any(thread.name == name for thread in threading.enumerate())
    await store.close()
    assert not any(thread.name == name for thread in threading.enumerate())
    with pytest.raises(StoreError, match="closed"):
        await store.load("s")
    await store.close()  # idempotent


FLUSH_EVERY = 16
"""Commits between the flushes of the WAL test: each flush waits for the posted checkpoints."""


async def test_inline_commits_leave_checkpoints_to_the_writer_thread_and_the_wal_stays_bounded(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    log = Session.create("s")
    for turn in range(800):
        tool_turn(log, f"{turn} " + "x" * 3000)
    store = SqliteStore(path)
    lease = store.claim("s")
    try:
        await store.create(log.meta)
        batches = steps(log)
        for index, step in enumerate(batches, 1):
            await store.append_batch((("s", step),))
            if index % FLUSH_EVERY == 0:
                # The writer thread runs its jobs in order: once this flush is answered,
                # every checkpoint posted so far has run. Waiting on it (not on time)
                # bounds how long a posted checkpoint may wait, however loaded the machine.
                await store.flush("s")
        await store.flush("s")
        assert store._inline_commits >= len(batches) // 2
        # Each commit writes at least the events and the sessions leaf page: without the
        # posted checkpoints the WAL would hold two frames per commit or more. With them,
        # it restarts from its first frame after each one. What the design guarantees is
        # CHECKPOINT_PAGES frames (its page estimate is on the high side) plus what the
        # commits made while the posted checkpoint waited for the thread wrote: at most
        # FLUSH_EVERY commits here, well within a second CHECKPOINT_PAGES. (The file never
        # shrinks, so its size is the most the WAL ever held.)
        bound = 2 * CHECKPOINT_PAGES
        assert 2 * len(batches) > bound
        wal = await trio.Path(f"{path}-wal").stat()
        assert wal.st_size < bound * (24 + 4096)
        _, events = await store.load("s", lease=lease)
        assert events == log.events
    finally:
        lease.release()
        await store.close()
