"""The SQLite group-commit path's shortcuts: rows built in one loop are the canonical
encoding and checksum, a batch of leased sessions with remembered tails refuses exactly what
the checked path refuses and stores the same bytes, and the busy timeout inline commits turn
off is back for every piece of thread work."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from session_logs import closed_log, tool_turn

from actorloop.codecs.converter import encode_event
from actorloop.codecs.rows import event_crc, event_rows
from actorloop.runtime.errors import (
    GroupCommitError,
    InvalidSessionId,
    SessionBusy,
    SessionValidationError,
)
from actorloop.runtime.session import Session
from actorloop.runtime.stores import SqliteStore


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
