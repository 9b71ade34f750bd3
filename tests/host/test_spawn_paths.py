"""The spawn path's shortcuts keep the behaviour of the longer way they replace: a mailbox's
receive is still a checkpoint, a spawn's schedule point still ignores cancellation, what is
sent before the loop's first step is queued and counted as if it had started, and a
SQLite `create` that skips the read-back check of a plain meta writes exactly what that
check would have let through (and refuses the rest with the check's own errors)."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from actorloop.actors.kernel import Mailbox, Supervisor
from actorloop.codecs.jsonvalue import EMPTY_OBJECT, FrozenDict
from actorloop.codecs.rows import meta_from_row, session_row
from actorloop.runtime import AgentOptions
from actorloop.runtime.errors import SessionExists, SessionFormatError, SessionFormatUnsupported
from actorloop.runtime.host.runtime import Runtime
from actorloop.runtime.model.meta import FORMAT_VERSION, SessionMeta
from actorloop.runtime.stores.sqlite import SqliteStore, plain_meta
from actorloop.runtime.testing import EchoProvider

OPTIONS = AgentOptions(model="echo-model")
REFUSALS = (SessionFormatError, SessionFormatUnsupported)

# ---------------------------------------------------------------- mailbox checkpoints


async def test_receive_of_a_queued_message_is_a_cancel_point_that_leaves_it_queued() -> None:
    mailbox: Mailbox[str] = Mailbox(4)
    mailbox.send_nowait("first")
    with trio.CancelScope() as scope:
        scope.cancel()
        await mailbox.receive()
    assert scope.cancelled_caught
    assert mailbox.receive_nowait() == "first"


async def test_receive_on_an_empty_mailbox_is_a_cancel_point() -> None:
    mailbox: Mailbox[str] = Mailbox(4)
    with trio.move_on_after(0.01) as scope:
        await mailbox.receive()
    assert scope.cancelled_caught
    mailbox.send_nowait("later")
    assert await mailbox.receive() == "later"


async def test_iteration_checkpoints_with_a_message_queued_and_ends_once_closed() -> None:
    mailbox: Mailbox[int] = Mailbox(4)
    mailbox.send_nowait(1)
    with trio.CancelScope() as scope:
        scope.cancel()
        async for _ in mailbox:
            pytest.fail("a cancelled iteration took a message")
    assert scope.cancelled_caught
    mailbox.send_nowait(2)
    mailbox.close()
    assert [value async for value in mailbox] == [1, 2]


async def test_a_parked_receiver_wakes_for_a_message_and_for_close() -> None:
    mailbox: Mailbox[str] = Mailbox(1)
    got: list[str] = []

    async def take_all() -> None:
        async for value in mailbox:
            got.append(value)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(take_all)
        await trio.testing.wait_all_tasks_blocked()
        mailbox.send_nowait("a")
        await trio.testing.wait_all_tasks_blocked()
        assert got == ["a"]
        mailbox.close()
    assert got == ["a"]


async def test_parked_receivers_are_served_in_order_and_a_cancelled_one_leaves_the_line() -> None:
    mailbox: Mailbox[int] = Mailbox(8)
    got: list[tuple[str, int]] = []
    scopes: dict[str, trio.CancelScope] = {}

    async def receiver(name: str) -> None:
        with trio.CancelScope() as scope:
            scopes[name] = scope
            got.append((name, await mailbox.receive()))

    async with trio.open_nursery() as nursery:
        for name in ("a", "b", "c"):
            nursery.start_soon(receiver, name)
            await trio.testing.wait_all_tasks_blocked()  # parked in this order
        scopes["b"].cancel()
        await trio.testing.wait_all_tasks_blocked()
        # One at a time: a send wakes the first receiver in line, but two woken receivers
        # take the queued messages in whatever order the scheduler runs them.
        mailbox.send_nowait(1)
        await trio.testing.wait_all_tasks_blocked()
        mailbox.send_nowait(2)
    assert got == [("a", 1), ("c", 2)]
    assert len(mailbox) == 0


async def test_close_wakes_every_parked_receiver() -> None:
    mailbox: Mailbox[int] = Mailbox(8)
    ended: list[str] = []

    async def receiver(name: str) -> None:
        with pytest.raises(trio.EndOfChannel):
            await mailbox.receive()
        ended.append(name)

    async with trio.open_nursery() as nursery:
        for name in ("a", "b"):
            nursery.start_soon(receiver, name)
        await trio.testing.wait_all_tasks_blocked()
        mailbox.close()
    assert sorted(ended) == ["a", "b"]


async def test_a_sender_waiting_on_a_full_mailbox_wakes_on_withdraw_and_on_close() -> None:
    mailbox: Mailbox[str] = Mailbox(1)
    mailbox.send_nowait("queued")
    outcomes: list[str] = []

    async def send(value: str) -> None:
        try:
            await mailbox.send(value)
            outcomes.append(f"sent {value}")
        except trio.ClosedResourceError:
            outcomes.append(f"closed {value}")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(send, "second")
        await trio.testing.wait_all_tasks_blocked()
        assert outcomes == []
        assert mailbox.withdraw("queued")
        await trio.testing.wait_all_tasks_blocked()
        assert outcomes == ["sent second"]
        nursery.start_soon(send, "third")
        await trio.testing.wait_all_tasks_blocked()
        mailbox.close()
    assert outcomes == ["sent second", "closed third"]


async def test_actor_ref_stop_drains_and_waits_for_the_end() -> None:
    handled: list[int] = []

    async def body(mailbox: Mailbox[int]) -> None:
        async for value in mailbox:
            handled.append(value)

    async with Supervisor.open() as supervisor:
        ref = supervisor.spawn("drained", body)
        await ref.tell(1)
        await ref.tell(2)
        await ref.stop()
        assert not ref.alive
    assert handled == [1, 2]


# ---------------------------------------------------------------- the start wait


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_a_cancel_from_a_session_start_listener_still_returns_the_live_agent(
    store: str, tmp_path: Path
) -> None:
    url = "memory:" if store == "memory" else f"sqlite:{tmp_path / 'spawn.db'}"
    async with Runtime.open(store=url, provider=EchoProvider()) as rt:
        spawned: list[Any] = []
        with trio.CancelScope() as scope:
            # Runs inside spawn, before its shielded schedule point.
            rt.on("agent/session-start", lambda _agent, _kind: scope.cancel())
            spawned.append(await rt.spawn(OPTIONS, session_id="kept"))
            await trio.lowlevel.checkpoint()  # the caller's next checkpoint gets the cancel
            pytest.fail("the cancel was not delivered after spawn returned")
        assert scope.cancelled_caught
        (agent,) = spawned
        assert rt.get("kept") is agent and agent.status == "idle"
        assert (await agent.send("still here?")).reason == "completed"


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_messages_before_the_loops_first_step_are_queued_counted_and_droppable(
    store: str, tmp_path: Path
) -> None:
    """Spawn returns with the loop's task maybe not yet run (the order within a scheduler
    batch is random): whichever it is, what the caller sends at once is counted in the inbox
    events, a cancel drops it unrun, and the next message runs as usual. Twenty spawns see
    both orders."""
    url = "memory:" if store == "memory" else f"sqlite:{tmp_path / 'early.db'}"
    seen: list[tuple[str, str, int]] = []
    async with Runtime.open(store=url, provider=EchoProvider()) as rt:
        rt.on("agent/inbox", lambda agent, event: seen.append((agent.id, event.kind, event.queued)))
        for index in range(20):
            agent = await rt.spawn(OPTIONS, session_id=f"early-{index}")
            agent.steer("first")  # no checkpoint since spawn returned
            agent.steer("second")
            agent.cancel("at once")
            await agent.wait_idle()
            mine = [(kind, queued) for owner, kind, queued in seen if owner == agent.id]
            assert mine == [("enqueue", 1), ("enqueue", 2), ("discard", 1), ("discard", 0)]
            assert agent.session.events == ()
            assert (await agent.send("now")).reason == "completed"


async def test_a_spawn_cancelled_before_the_store_writes_leaves_nothing(tmp_path: Path) -> None:
    async with Runtime.open(store="memory:", provider=EchoProvider()) as rt:
        with trio.CancelScope() as scope:
            scope.cancel()
            await rt.spawn(OPTIONS, session_id="never")
        assert scope.cancelled_caught
        assert rt.get("never") is None and not await rt.store.exists("never")
        agent = await rt.spawn(OPTIONS, session_id="never")  # the lease was given back
        assert agent.status == "idle"


# ---------------------------------------------------------------- plain metas


def test_a_runtime_built_meta_is_plain() -> None:
    assert plain_meta(SessionMeta("agent-1"))
    assert plain_meta(SessionMeta("child", parent_session="agent-1", seed_length=7))
    assert not plain_meta(SessionMeta("agent-1", labels={"team": "a"}))  # left to the check


_odd_ints = st.one_of(st.integers(-3, 3), st.booleans(), st.floats(-1, 3), st.just("1"))
_metas = st.builds(
    SessionMeta,
    id=st.just("agent-1"),
    created_at=st.one_of(st.integers(-2, 2**62), st.booleans(), st.just(1.5), st.just("0")),
    parent_session=st.one_of(st.none(), st.just("parent"), st.just(3)),
    seed_length=st.one_of(st.none(), _odd_ints),
    version=st.one_of(st.just(FORMAT_VERSION), _odd_ints),
    labels=st.one_of(st.just(EMPTY_OBJECT), st.just({"team": "a"})),
)


@settings(max_examples=300, deadline=None)
@given(_metas)
def test_a_plain_meta_is_one_the_read_back_check_accepts_unchanged(meta: SessionMeta) -> None:
    if not plain_meta(meta):
        return  # create asks the check itself
    assert type(meta.labels) is FrozenDict
    assert meta_from_row(session_row(meta), "here") == meta


@settings(max_examples=60, deadline=None)
@given(_metas)
def test_sqlite_create_writes_or_refuses_as_the_read_back_check_decides(
    tmp_path_factory: pytest.TempPathFactory, meta: SessionMeta
) -> None:
    try:
        expected: BaseException | SessionMeta = meta_from_row(session_row(meta), "here")
    except REFUSALS as exc:
        expected = exc
    path = tmp_path_factory.mktemp("create") / "one.db"

    async def create_and_read() -> BaseException | SessionMeta:
        store = SqliteStore(path)
        try:
            try:
                await store.create(meta)
            except REFUSALS as exc:
                assert not await store.exists(meta.id)
                return exc
            # Listed, not loaded: a fork child's meta names a parent this store lacks.
            (listed,) = await store.list()
            assert isinstance(listed, SessionMeta)
            return listed
        finally:
            await store.close()

    got = trio.run(create_and_read)
    if isinstance(expected, BaseException):
        assert type(got) is type(expected)
        assert str(got).split(": ", 1)[-1] == str(expected).split(": ", 1)[-1]
    else:
        assert got == expected


# ---------------------------------------------------------------- one-statement create


async def test_a_create_meeting_a_held_write_lock_waits_on_the_writer_thread(
    tmp_path: Path,
) -> None:
    # The create is one autocommit INSERT: inline, a held write lock refuses it at once
    # (nothing written, no busy wait on the trio thread) and the writer thread waits.
    path = tmp_path / "busy.db"
    store = SqliteStore(path)
    try:
        await store.create(SessionMeta("first"))
        inline_before = store._inline_commits
        with closing(sqlite3.connect(path, isolation_level=None)) as other:
            other.execute("BEGIN IMMEDIATE")
            async with trio.open_nursery() as nursery:
                nursery.start_soon(store.create, SessionMeta("second"))
                await trio.testing.wait_all_tasks_blocked()
                assert not _stored_elsewhere(path, "second")
                other.execute("COMMIT")
        assert store._inline_commits == inline_before
        assert [meta.id for meta in await store.list()] == ["first", "second"]
    finally:
        await store.close()


@pytest.mark.parametrize("inline", [True, False])
async def test_a_second_create_of_an_id_is_session_exists_and_changes_nothing(
    tmp_path: Path, inline: bool
) -> None:
    path = tmp_path / "twice.db"
    store = SqliteStore(path, synchronous="NORMAL" if inline else "FULL")
    try:
        await store.create(SessionMeta("once", created_at=1))
        with pytest.raises(SessionExists, match="once"):
            await store.create(SessionMeta("once", created_at=2))
        (listed,) = await store.list()
        assert listed == SessionMeta("once", created_at=1)
    finally:
        await store.close()


def _stored_elsewhere(path: Path, session_id: str) -> bool:
    with closing(sqlite3.connect(path)) as db:
        return (
            db.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone() is not None
        )
