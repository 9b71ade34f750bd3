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

from actorloop.runtime import AgentOptions, EchoProvider
from actorloop.runtime.runtime import Runtime
from actorloop.runtime.stored import gc_paused, load_session
from actorloop.runtime.stores.sqlite import SqliteStore

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
