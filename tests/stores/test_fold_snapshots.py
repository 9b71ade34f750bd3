"""Fold snapshots on SQLite (issue 38, persistence.md §2.7): a load from the latest valid
snapshot plus the rows after it gives the very session a full replay gives (the same
folds, events, usage and the same next request, byte for byte, also after a fork at an
older boundary); a snapshot that does not check out is ignored and reported; the events
before a snapshot are read on first access, and damage there is still found by
`check_integrity` and by a full `load`."""

from __future__ import annotations

import logging
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import attrs
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import build_log, programs

from actorloop.codecs.converter import canonical_bytes
from actorloop.runtime import AgentOptions, Tool
from actorloop.runtime.errors import InvalidSessionId, SessionCorruptError
from actorloop.runtime.host.runtime import Runtime
from actorloop.runtime.log.event_log import LazyPrefix
from actorloop.runtime.log.session import Session
from actorloop.runtime.log.snapshots import SNAPSHOT_EVERY, take_snapshot
from actorloop.runtime.log.tokens import TokenMeter
from actorloop.runtime.model.events import APPEND, SessionEvent
from actorloop.runtime.model.meta import SessionMeta
from actorloop.runtime.stores.loading import load_stored
from actorloop.runtime.stores.sqlite import SqliteStore
from actorloop.runtime.testing import ScriptedProvider, reply, tool_call


async def _lookup(args: dict[str, object], ctx: object) -> str:
    return "found " + str(args.get("q", ""))


LOOKUP = Tool("lookup", "Look a thing up.", {"type": "object"}, _lookup)
OPTIONS = AgentOptions(model="m", system="be brief", tools=(LOOKUP,))
TURNS = SNAPSHOT_EVERY // 9 + 4  # a tool turn is 16 events here: past one snapshot, a tail


def _script(provider: ScriptedProvider, turns: int) -> None:
    for turn in range(turns):
        if turn % 2:
            provider.push(tool_call(f"c{turn}", "lookup", {"q": f"t{turn}"}))
        provider.push(reply(f"answer {turn}"))


async def _build(path: Path, turns: int = TURNS) -> None:
    provider = ScriptedProvider()
    _script(provider, turns)
    store = SqliteStore(path)
    async with Runtime.open(store=store, provider=provider) as rt:
        agent = await rt.spawn(OPTIONS, session_id="s")
        for turn in range(turns):
            await agent.send(f"question {turn}")
    assert store.snapshot_counters.written >= 1


def _copy(source: Path, target: Path) -> None:
    for suffix in ("", "-wal"):
        if Path(f"{source}{suffix}").exists():
            shutil.copyfile(f"{source}{suffix}", f"{target}{suffix}")


async def _next_request(
    path: Path, session_id: str, *, snapshots: bool
) -> tuple[bytes, tuple[SessionEvent, ...], bool]:
    """Resume `session_id` from `path` and send one message: the request it made, the
    session's events after it, and whether its restored prefix was still unread then."""
    provider = ScriptedProvider()
    provider.push(reply("resumed"))
    store = SqliteStore(path, snapshots=snapshots)
    async with Runtime.open(store=store, provider=provider) as rt:
        agent = await rt.resume(session_id, OPTIONS)
        assert store.snapshot_counters.restored == (1 if snapshots else 0)
        await agent.send("one more")
        base = agent.session._log._base
        unread = isinstance(base, LazyPrefix) and not base.loaded
        events = agent.session.events  # the whole prefix read now, every row checked
    (request,) = provider.requests
    return canonical_bytes(request), events, unread


async def test_a_resume_from_a_snapshot_sends_the_same_request(tmp_path: Path) -> None:
    await _build(tmp_path / "a.db")
    _copy(tmp_path / "a.db", tmp_path / "b.db")
    with_snapshot, folded, unread = await _next_request(tmp_path / "a.db", "s", snapshots=True)
    without, replayed, _ = await _next_request(tmp_path / "b.db", "s", snapshots=False)
    assert with_snapshot == without
    assert unread  # only the surface's events were read to build that request
    assert _timeless(folded) == _timeless(replayed)


def _timeless(events: tuple[SessionEvent, ...]) -> list[SessionEvent]:
    """The events with their clock stamps left out (the two resumes ran at other times)."""
    return [attrs.evolve(event, time=0) for event in events]


async def test_a_fork_at_an_older_boundary_sends_the_same_request(tmp_path: Path) -> None:
    await _build(tmp_path / "a.db")
    _copy(tmp_path / "a.db", tmp_path / "b.db")
    requests = []
    for name, snapshots in (("a.db", True), ("b.db", False)):
        provider = ScriptedProvider()
        provider.push(reply("forked"), reply("stored fork"), reply("child resumed"))
        store = SqliteStore(tmp_path / name, snapshots=snapshots)
        async with Runtime.open(store=store, provider=provider) as rt:
            agent = await rt.resume("s", OPTIONS)
            ends = [e.seq for e in agent.session.events if e.type == "turn/end"]
            child = await rt.fork("s", boundary=ends[len(ends) // 2], child_id="live-child")
            await child.send("from the middle")  # its seed is past a snapshot: it takes one
            await child.dispose()
            await agent.dispose()
            stored = await rt.fork("s", boundary=ends[3], child_id="stored-child")
            await stored.send("from early on")
            # The live child's own snapshot: its seed (in the parent) read by seq through
            # the lineage when the request needs it.
            resumed = await rt.resume("live-child", OPTIONS)
            await resumed.send("and again")
        assert store.snapshot_counters.restored == (2 if snapshots else 0)
        requests.append(tuple(canonical_bytes(r) for r in provider.requests))
    assert requests[0] == requests[1]


async def test_a_damaged_or_foreign_snapshot_is_ignored_and_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    await _build(tmp_path / "a.db")
    _copy(tmp_path / "a.db", tmp_path / "b.db")
    expected, _, _ = await _next_request(tmp_path / "b.db", "s", snapshots=False)
    damage = (
        "UPDATE snapshots SET body = body || x'00'",  # a changed body: its checksum fails
        "UPDATE snapshots SET version = version + 1",  # a format this build does not know
        "UPDATE snapshots SET row_crc = row_crc + 1",  # keyed to another row
    )
    for index, statement in enumerate(damage):
        path = tmp_path / f"d{index}.db"
        _copy(tmp_path / "a.db", path)
        db = sqlite3.connect(path)
        with db:
            assert db.execute(statement).rowcount == 1
        db.close()
        store = SqliteStore(path)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="actorloop.store"):
            try:
                session = await load_stored(store, "s")
            finally:
                await store.close()
        assert store.snapshot_counters.ignored == 1
        assert store.snapshot_counters.restored == 0
        assert "fold snapshot ignored" in caplog.text
        assert isinstance(session._log._base, type(None))
        request, _, _ = await _next_request(path, "s", snapshots=False)
        assert request == expected


async def test_damage_before_the_snapshot_is_found_on_access_and_by_the_checks(
    tmp_path: Path,
) -> None:
    await _build(tmp_path / "a.db")
    db = sqlite3.connect(tmp_path / "a.db")
    with db:
        db.execute("UPDATE events SET crc = crc + 1 WHERE session_id = 's' AND seq = 3")
    db.close()
    store = SqliteStore(tmp_path / "a.db")
    try:
        session = await load_stored(store, "s")
        assert store.snapshot_counters.restored == 1
        with pytest.raises(SessionCorruptError, match="seq 3"):
            session.events  # noqa: B018 - the lazy read is what is tested
        problems = await store.check_integrity()
        assert any("seq 3" in problem for problem in problems)
        with pytest.raises(SessionCorruptError, match="seq 3"):
            await store.load("s")
    finally:
        await store.close()


async def test_a_reader_walking_the_restored_prefix_reads_it_in_windows(tmp_path: Path) -> None:
    await _build(tmp_path / "a.db")
    store = SqliteStore(tmp_path / "a.db")
    plain = SqliteStore(tmp_path / "a.db", snapshots=False)
    try:
        session = await load_stored(store, "s")
        walked = [session.event(seq) for seq in range(len(session))]
        prefix = session._log._base
        assert isinstance(prefix, LazyPrefix) and not prefix.loaded
        assert walked == list((await load_stored(plain, "s")).events)
    finally:
        await store.close()
        await plain.close()


async def test_a_snapshot_of_another_log_is_not_saved(tmp_path: Path) -> None:
    """A snapshot is saved only beside the very row it was taken at (its `key_crc`): one
    taken over a log whose event at that seq differs (a writer that lost the session, a
    bug) writes nothing."""
    events = build_log([("turn", "message", "hi"), ("end", "completed")] * 3)
    store = SqliteStore(tmp_path / "k.db")
    try:
        await store.create(SessionMeta("r"))
        await store.append("r", events)
        last = events[-1]
        other = Session.from_events("r", (*events[:-1], attrs.evolve(last, time=last.time + 1)))
        snapshot = take_snapshot(other, TokenMeter(other))
        assert snapshot is not None
        await store.save_snapshot("r", snapshot)
        assert store.snapshot_counters.written == 0
        await load_stored(store, "r")
        assert store.snapshot_counters.restored == 0
        mine = Session.from_events("r", events)
        await store.save_snapshot("r", take_snapshot(mine, TokenMeter(mine)))  # type: ignore[arg-type]
        assert store.snapshot_counters.written == 1
    finally:
        await store.close()


async def test_a_folded_load_checks_the_session_id(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "i.db")
    try:
        with pytest.raises(InvalidSessionId):
            await load_stored(store, "../elsewhere")
    finally:
        await store.close()


def test_every_fold_of_a_session_is_in_the_snapshot() -> None:
    """A fold added to `FoldState` must be snapshotted too (runtime/log/snapshots.py says
    how), or a session restored from a snapshot would lack it: this names the ones known."""
    from actorloop.runtime.log.event_log import FoldState

    assert set(FoldState.__slots__) == {"header", "structure", "surface", "usage"}, (
        "a new fold: add it to FoldSnapshot, take_snapshot and restore, and bump "
        "SNAPSHOT_VERSION (runtime/log/snapshots.py)"
    )


# ------------------------------------------------------------------ random logs


async def _store_log(
    path: Path, events: tuple[SessionEvent, ...], cut: int | None, *, snapshots: bool
) -> SqliteStore:
    store = SqliteStore(path, snapshots=snapshots)
    await store.create(SessionMeta("r"))
    await store.append("r", events)
    if cut is not None:
        prefix = Session.from_events("r", events[: cut + 1])
        snapshot = take_snapshot(prefix, TokenMeter(prefix))
        assert snapshot is not None
        await store.save_snapshot("r", snapshot)
    return store


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(programs(max_turns=5, open_last=None), st.data())
def test_a_load_from_a_snapshot_equals_a_full_replay(
    tmp_path_factory: pytest.TempPathFactory, program: list[object], data: st.DataObject
) -> None:
    """Random loop-shaped logs (compaction replaces, prunes, an open last turn that the
    load repairs), a snapshot at a random turn boundary: the same session either way."""
    events = build_log(program)
    ends = [event.seq for event in events if event.type == "turn/end"]
    if not ends:
        return
    cut = data.draw(st.sampled_from(ends))
    folder = tmp_path_factory.mktemp("r")

    async def check() -> None:
        folding = await _store_log(folder / "a.db", events, cut, snapshots=True)
        plain = await _store_log(folder / "b.db", events, None, snapshots=False)
        try:
            folded = await load_stored(folding, "r")
            replayed = await load_stored(plain, "r")
            assert folding.snapshot_counters.restored == 1
            assert folded.derive_messages() == replayed.derive_messages()
            assert folded.history_chain() == replayed.history_chain()
            assert folded.header() == replayed.header()
            assert folded.usage() == replayed.usage()
            assert folded.folds.structure == replayed.folds.structure
            assert folded.surface == replayed.surface
            assert folded.replace_generation == replayed.replace_generation
            assert TokenMeter(folded).state() == TokenMeter(replayed).state()
            assert folded.events == replayed.events
            again = await load_stored(folding, "r")  # the repair, if any, was written
            assert again.events == replayed.events
        finally:
            await folding.close()
            await plain.close()

    trio.run(check)


# ------------------------------------------------------------------ real crashes

CHILD = Path(__file__).resolve().parents[1] / "kits" / "snapshot_crash_child.py"


def _run_until(path: Path, mode: str, marker: str) -> str:
    """Start the crash child, read its lines until `marker`, then kill -9 it there."""
    child = subprocess.Popen(
        [sys.executable, str(CHILD), str(path), mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        for line in child.stdout:
            if line.startswith(marker):
                child.send_signal(signal.SIGKILL)
                child.wait(30)
                return line.strip()
        raise AssertionError(f"the child ended (status {child.wait(30)}) before {marker}")
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(30)


@pytest.mark.parametrize(
    ("mode", "marker", "restored"),
    [("before-first", "SAVING", 0), ("before-second", "SAVING", 1), ("in-tool", "IN-TOOL", 1)],
)
async def test_a_kill_between_the_rows_and_the_snapshot_leaves_a_loadable_session(
    tmp_path: Path, mode: str, marker: str, restored: int
) -> None:
    """kill -9 after a barrier's rows committed and before their snapshot was written (no
    snapshot yet, or an older one), or in a tool call after a snapshot (the open turn is
    repaired from the rows after it): the load gives what a full replay gives."""
    path = tmp_path / "c.db"
    _run_until(path, mode, marker)
    _copy(path, tmp_path / "full.db")
    store = SqliteStore(path)
    plain = SqliteStore(tmp_path / "full.db", snapshots=False)
    try:
        folded = await load_stored(store, "s")
        replayed = await load_stored(plain, "s")
        assert store.snapshot_counters.restored == restored
        assert store.snapshot_counters.ignored == 0
        assert folded.open_turn is None and replayed.open_turn is None
        assert folded.derive_messages() == replayed.derive_messages()
        assert folded.usage() == replayed.usage()
        assert TokenMeter(folded).state() == TokenMeter(replayed).state()
        assert folded.events == replayed.events
        if mode == "in-tool":
            assert folded.events[-1].type == "turn/end"
            assert folded.events[-1].data.reason.kind == "interrupted"  # type: ignore[union-attr]
    finally:
        await store.close()
        await plain.close()


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(programs(max_turns=4), st.data())
def test_a_fork_childs_snapshot_equals_a_full_replay(
    tmp_path_factory: pytest.TempPathFactory, program: list[object], data: st.DataObject
) -> None:
    """A child forked at a random boundary of a random log, its own turns after the seed,
    a snapshot among them: its load (the seed read through the parent, by seq) is the one a
    full replay gives."""
    events = build_log(program)
    ends = [event.seq for event in events if event.type == "turn/end"]
    if not ends:
        return
    boundary = data.draw(st.sampled_from(ends))
    own_turns = data.draw(st.integers(min_value=1, max_value=3))
    folder = tmp_path_factory.mktemp("f")

    async def store_family(path: Path, snapshots: bool) -> SqliteStore:
        store = SqliteStore(path, snapshots=snapshots)
        await store.create(SessionMeta("p"))
        await store.append("p", events)
        await store.fork("p", boundary, "c")
        child = await load_stored(store, "c")  # the seed; its own turns are appended below
        first = len(child)
        for index in range(own_turns + 1):
            turn = child.last_turn + 1
            child.append(
                "turn/start",
                {"turn": turn, "trigger": {"kind": "message", "source": {"kind": "user"}}},
            )
            child.append(
                "user/message",
                {"content": [{"type": "text", "text": f"own {index}"}], "source": {"kind": "user"}},
                surface_op=APPEND,
            )
            child.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
            if index == own_turns - 1 and snapshots:
                await store.append("c", child.events_since(first))
                first = len(child)
                snapshot = take_snapshot(child, TokenMeter(child))
                assert snapshot is not None
                await store.save_snapshot("c", snapshot)
        await store.append("c", child.events_since(first))
        return store

    async def check() -> None:
        folding = await store_family(folder / "a.db", True)
        plain = await store_family(folder / "b.db", False)
        try:
            folded = await load_stored(folding, "c")
            replayed = await load_stored(plain, "c")
            assert folding.snapshot_counters.restored == 1
            assert folded.derive_messages() == replayed.derive_messages()
            assert folded.history_chain() == replayed.history_chain()
            assert folded.usage() == replayed.usage()
            assert TokenMeter(folded).state() == TokenMeter(replayed).state()
            assert _timeless(folded.events) == _timeless(replayed.events)
        finally:
            await folding.close()
            await plain.close()

    trio.run(check)
