"""Loads run with the cyclic GC paused: the pause nests and overlaps across threads, restores
the collector only when the last load ends (and only if it was on), and covers the store's
load and the fold of a resume and of `load_session`."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actorloop.runtime import AgentOptions
from actorloop.runtime.host.runtime import Runtime
from actorloop.runtime.stores.loading import gc_paused, load_session
from actorloop.runtime.stores.memory import MemoryStore
from actorloop.runtime.stores.sqlite import SqliteStore
from actorloop.runtime.testing import EchoProvider

OPTIONS = AgentOptions(model="m", system="s")


@pytest.fixture
def gc_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    try:
        yield
    finally:
        if not was:
            gc.disable()


def test_pauses_nest_and_restore(gc_on: None) -> None:
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off(gc_on: None) -> None:
    gc.disable()
    with gc_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_an_error_inside_still_restores(gc_on: None) -> None:
    with pytest.raises(ValueError), gc_paused():
        raise ValueError("load failed")
    assert gc.isenabled()


def test_overlapping_loads_in_threads_restore_after_the_last(gc_on: None) -> None:
    inside = threading.Event()
    release = threading.Event()
    seen: list[bool] = []

    def other_load() -> None:
        with gc_paused():
            inside.set()
            release.wait(5)
        seen.append(gc.isenabled())

    thread = threading.Thread(target=other_load)
    with gc_paused():
        thread.start()
        assert inside.wait(5)
    # This load ended first: the other one is still loading, so the collector stays off.
    assert not gc.isenabled()
    release.set()
    thread.join(5)
    assert seen == [True]
    assert gc.isenabled()


class _ObservedSqlite(SqliteStore):
    """The real SQLite store; it notes whether the collector ran during its loads."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.gc_during_load: list[bool] = []

    async def load(self, session_id: str, **kwargs: Any) -> Any:
        loaded = await super().load(session_id, **kwargs)
        self.gc_during_load.append(gc.isenabled())
        return loaded

    async def load_folded(self, session_id: str, **kwargs: Any) -> Any:
        # A resume's load (from a fold snapshot when there is one, persistence.md §2.7).
        loaded = await super().load_folded(session_id, **kwargs)
        self.gc_during_load.append(gc.isenabled())
        return loaded


async def test_resume_and_load_session_run_with_the_collector_paused(
    gc_on: None, tmp_path: Path
) -> None:
    store = _ObservedSqlite(tmp_path / "gc.db")
    async with Runtime.open(store=store, provider=EchoProvider()) as rt:
        agent = await rt.spawn(OPTIONS, session_id="g")
        await agent.send("hello")
        await agent.dispose()
        resumed = await rt.resume("g", OPTIONS)
        assert (await resumed.send("again")).reason == "completed"
        assert store.gc_during_load == [False]
        assert gc.isenabled()
    reader = _ObservedSqlite(tmp_path / "gc.db")
    try:
        session = await load_session(reader, "g")
    finally:
        await reader.close()
    assert len(session.derive_messages()) == 4
    assert reader.gc_during_load == [False]
    assert gc.isenabled()


def _generation_of(objects: list[object]) -> set[int | str]:
    """Where the collector keeps `objects`: generation numbers, or "untracked/frozen"."""
    found: set[int | str] = set()
    for generation in range(3):
        ids = {id(item) for item in gc.get_objects(generation)}
        if any(id(item) in ids for item in objects):
            found.add(generation)
    if any(not gc.is_tracked(item) for item in objects):
        found.add("untracked")
    return found or {"frozen"}


async def _stored_session(path: Path) -> None:
    async with Runtime.open(store=f"sqlite:{path}", provider=EchoProvider()) as rt:
        agent = await rt.spawn(OPTIONS, session_id="g")
        for text in ("one", "two", "three"):
            await agent.send(text)


async def test_what_a_load_allocated_goes_to_the_oldest_generation_unscanned(
    gc_on: None, tmp_path: Path
) -> None:
    await _stored_session(tmp_path / "gc.db")
    store = SqliteStore(tmp_path / "gc.db")
    try:
        session = await load_session(store, "g")
    finally:
        await store.close()
    events = list(session.events)
    assert gc.get_freeze_count() == 0
    # Not the youngest generation (where the next young collection would scan them all):
    # the oldest, handed over without a collection.
    assert _generation_of(events) == {2}
    assert gc.isenabled()


async def test_a_load_leaves_what_someone_froze_frozen(gc_on: None, tmp_path: Path) -> None:
    await _stored_session(tmp_path / "gc.db")
    kept = [object()]  # a tracked container, frozen by "the application" below
    gc.freeze()
    try:
        store = SqliteStore(tmp_path / "gc.db")
        try:
            session = await load_session(store, "g")
        finally:
            await store.close()
        # (The freeze count itself may drop: frozen objects still die.)
        assert _generation_of([kept]) == {"frozen"}
        assert 2 not in _generation_of(list(session.events))
    finally:
        gc.unfreeze()


class _SeenSqlite(SqliteStore):
    """The real SQLite store; it notes whether the collector is on while it reads rows."""

    seen: list[bool]

    def _load_all(self, db: Any, session_id: str) -> Any:
        self.seen.append(gc.isenabled())
        return super()._load_all(db, session_id)


class _SeenMemory(MemoryStore):
    """The real memory store; it notes whether the collector is on while it reads events."""

    seen: list[bool]

    def _chain(self, record: Any, length: int | None = None) -> Any:
        self.seen.append(gc.isenabled())
        return super()._chain(record, length)


async def test_a_plain_store_load_pauses_the_collector_itself(gc_on: None, tmp_path: Path) -> None:
    """Issue 38: `store.load` from any caller (not only `rt.resume`) runs paused."""
    await _stored_session(tmp_path / "gc.db")
    store = _SeenSqlite(tmp_path / "gc.db")
    store.seen = []
    try:
        await store.load("g")
        await store.load("g", repair=False)
    finally:
        await store.close()
    assert store.seen == [False, False]
    assert gc.isenabled()
    memory = _SeenMemory()
    memory.seen = []
    async with Runtime.open(store=memory, provider=EchoProvider()) as rt:
        agent = await rt.spawn(OPTIONS, session_id="m")
        await agent.send("hello")
        await agent.dispose()
        await memory.load("m")
        await memory.load("m", repair=False)
    assert memory.seen == [False, False]
    assert gc.isenabled()
