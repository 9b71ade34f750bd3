"""CodecActor: group commit across sessions, barrier semantics, fail-closed, backpressure,
and a loop's request leaving with no schedule point after a barrier committed in the loop."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing
from session_logs import closed_log

from actorloop.actors.codec import CodecActor
from actorloop.runtime import AgentOptions, Request, Runtime
from actorloop.runtime.control.handle import Agent
from actorloop.runtime.errors import SessionWriteError, StoreError
from actorloop.runtime.log.session import SessionMeta
from actorloop.runtime.model.events import SessionEvent
from actorloop.runtime.stores import MemoryStore, open_store
from actorloop.runtime.stores.base import Batch
from actorloop.runtime.testing import ScriptedProvider, reply


class GatedStore(MemoryStore):
    """Records every group commit; commits wait for `gate` while it is closed."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[tuple[str, int]]] = []
        self.gate = trio.Event()
        self.gate.set()
        self.in_commit = trio.Event()
        self.fail_with: Exception | None = None

    async def append_batch(self, batch: Batch) -> None:
        self.batches.append([(session_id, len(events)) for session_id, events in batch])
        self.in_commit.set()
        await self.gate.wait()
        if self.fail_with is not None:
            raise self.fail_with
        await super().append_batch(batch)


def events_of(session_id: str, turns: int = 1) -> tuple[SessionEvent, ...]:
    return closed_log(session_id, turns).events


async def created(store: MemoryStore, *ids: str) -> None:
    for session_id in ids:
        await store.create(SessionMeta(session_id))


async def test_group_commit_covers_every_pending_session_in_one_batch() -> None:
    store = GatedStore()
    ids = [f"s{index}" for index in range(50)]
    await created(store, "first", *ids)
    async with trio.open_nursery() as nursery:
        actor = CodecActor(store)
        await nursery.start(actor.run)
        store.gate = trio.Event()
        await actor.submit("first", events_of("first"))
        await store.in_commit.wait()  # round 1 is in flight and held at the gate
        for session_id in ids:
            await actor.submit(session_id, events_of(session_id))
        store.gate.set()
        await actor.flush()
        await actor.aclose()
    assert store.batches[0] == [("first", 13)]
    assert store.batches[1] == [(session_id, 13) for session_id in ids]
    assert len(store.batches) == 2
    for session_id in ids:
        assert (await store.load(session_id))[1] == events_of(session_id)


async def test_submits_of_one_session_are_merged_in_order() -> None:
    store = GatedStore()
    await created(store, "one")
    events = events_of("one", 2)
    async with trio.open_nursery() as nursery:
        actor = CodecActor(store)
        await nursery.start(actor.run)
        store.gate = trio.Event()
        await actor.submit("one", events[:1])
        await store.in_commit.wait()
        for start in range(1, len(events), 5):
            await actor.submit("one", events[start : start + 5])
        store.gate.set()
        await actor.persist("one", ())
        await actor.aclose()
    assert store.batches == [[("one", 1)], [("one", len(events) - 1)]]
    assert (await store.load("one"))[1] == events


async def test_a_barrier_returns_only_once_prior_events_are_durable() -> None:
    store = GatedStore()
    await created(store, "a", "b")
    async with trio.open_nursery() as nursery:
        actor = CodecActor(store)
        await nursery.start(actor.run)
        store.gate = trio.Event()
        await actor.submit("a", events_of("a"))
        await actor.submit("b", events_of("b"))
        done = trio.Event()

        async def barrier() -> None:
            await actor.flush("a")
            done.set()

        nursery.start_soon(barrier)
        await trio.testing.wait_all_tasks_blocked()
        assert not done.is_set()
        assert (await store.load("b"))[1] == ()  # nothing is durable yet
        store.gate.set()
        await done.wait()
        # Everything submitted before the barrier is durable, not only session "a".
        assert (await store.load("a"))[1] == events_of("a")
        assert (await store.load("b"))[1] == events_of("b")
        await actor.aclose()


async def test_a_failing_store_fails_this_and_every_later_barrier() -> None:
    store = GatedStore()
    await created(store, "a", "b")
    async with trio.open_nursery() as nursery:
        actor = CodecActor(store)
        await nursery.start(actor.run)
        store.fail_with = OSError(28, "No space left on device")
        await actor.submit("a", events_of("a"))
        with pytest.raises(StoreError, match="No space left") as info:
            await actor.flush()
        assert isinstance(info.value.__cause__, OSError)
        # Fail closed: nothing later is accepted, and the store recovering changes nothing.
        store.fail_with = None
        with pytest.raises(StoreError):
            await actor.submit("b", events_of("b"))
        with pytest.raises(StoreError):
            await actor.flush("b")
        with pytest.raises(StoreError):
            await actor.persist("b", events_of("b"))
        with pytest.raises(StoreError):
            await actor.aclose()
    assert (await store.load("b"))[1] == ()


async def test_barriers_queued_behind_a_failed_commit_fail_too() -> None:
    store = GatedStore()
    await created(store, "a")
    async with trio.open_nursery() as nursery:
        actor = CodecActor(store)
        await nursery.start(actor.run)
        store.gate = trio.Event()
        store.fail_with = RuntimeError("disk gone")
        outcomes: list[str] = []

        async def barrier() -> None:
            try:
                await actor.flush()
                outcomes.append("ok")
            except StoreError:
                outcomes.append("failed")

        await actor.submit("a", events_of("a"))
        for _ in range(3):
            nursery.start_soon(barrier)
        await trio.testing.wait_all_tasks_blocked()
        store.gate.set()
        with pytest.raises(StoreError, match="disk gone"):
            await actor.aclose()
    assert outcomes == ["failed"] * 3


async def test_submit_waits_when_the_channel_is_full() -> None:
    store = GatedStore()
    await created(store, "a")
    events = events_of("a", 2)
    async with trio.open_nursery() as nursery:
        actor = CodecActor(store, capacity=2)
        await nursery.start(actor.run)
        store.gate = trio.Event()
        await actor.submit("a", events[:1])
        await store.in_commit.wait()  # the actor is busy with round 1
        await actor.submit("a", events[1:2])
        await actor.submit("a", events[2:3])  # the channel (2) is now full
        sent = trio.Event()

        async def third() -> None:
            await actor.submit("a", events[3:])
            sent.set()

        nursery.start_soon(third)
        await trio.testing.wait_all_tasks_blocked()
        assert not sent.is_set()
        store.gate.set()
        await sent.wait()
        await actor.aclose()
    assert (await store.load("a"))[1] == events


async def test_a_cancelled_persist_queues_nothing_and_a_full_mailbox_holds_it_back() -> None:
    store = GatedStore()
    await created(store, "a", "b")
    events = events_of("a", 2)
    async with trio.open_nursery() as nursery:
        actor = CodecActor(store, capacity=1)
        await nursery.start(actor.run)
        with trio.CancelScope() as scope:
            scope.cancel()
            await actor.persist("a", events[:1])
        assert scope.cancelled_caught
        await trio.testing.wait_all_tasks_blocked()
        assert not actor._mailbox and not store.batches  # nothing queued, nothing written
        store.gate = trio.Event()
        await actor.submit("b", events_of("b")[:1])
        await store.in_commit.wait()  # the actor is busy with that round
        await actor.submit("a", events[:1])  # the mailbox (1) is now full
        persisted = trio.Event()

        async def persist_rest() -> None:
            await actor.persist("a", events[1:])
            persisted.set()

        nursery.start_soon(persist_rest)
        await trio.testing.wait_all_tasks_blocked()
        assert len(actor._mailbox) == 1  # held back, not queued past the capacity
        store.gate.set()
        await persisted.wait()
        await actor.aclose()
    assert (await store.load("a"))[1] == events
    assert [len(batch) for batch in store.batches] == [1, 1, 1]


async def test_aclose_writes_everything_queued(tmp_path: Path) -> None:
    store = open_store(f"sqlite:{tmp_path / 'c.db'}")
    ids = [f"s{index}" for index in range(20)]
    for session_id in ids:
        await store.create(SessionMeta(session_id))
    async with trio.open_nursery() as nursery:
        actor = CodecActor(store)
        await nursery.start(actor.run)
        for session_id in ids:
            await actor.submit(session_id, events_of(session_id))
        await actor.aclose()
        with pytest.raises(StoreError, match="closed"):
            await actor.submit("s0", ())
    for session_id in ids:
        assert (await store.load(session_id))[1] == events_of(session_id)
    await store.close()


async def test_concurrent_loops_persist_through_one_actor(tmp_path: Path) -> None:
    store = open_store(f"jsonl:{tmp_path}")
    ids = [f"loop{index}" for index in range(12)]
    for session_id in ids:
        await store.create(SessionMeta(session_id))
    async with trio.open_nursery() as nursery:
        actor = CodecActor(store)
        await nursery.start(actor.run)

        async def loop(session_id: str) -> None:
            events = events_of(session_id, 3)
            for start in range(0, len(events), 4):
                await actor.persist(session_id, events[start : start + 4])

        async with trio.open_nursery() as loops:
            for session_id in ids:
                loops.start_soon(loop, session_id)
        await actor.aclose()
    reader = open_store(f"jsonl:{tmp_path}")
    for session_id in ids:
        assert (await reader.load(session_id))[1] == events_of(session_id, 3)
    await store.close()
    await reader.close()


async def test_a_stopped_actor_fails_waiting_barriers_instead_of_hanging() -> None:
    store = GatedStore()
    await created(store, "a")
    outcome: list[BaseException] = []
    async with trio.open_nursery() as nursery:
        actor = CodecActor(store)
        actor_scope = trio.CancelScope()

        async def run_actor(task_status: trio.TaskStatus[None]) -> None:
            with actor_scope:
                await actor.run(task_status=task_status)

        await nursery.start(run_actor)
        store.gate = trio.Event()
        await actor.submit("a", events_of("a"))
        await store.in_commit.wait()

        async def barrier() -> None:
            try:
                await actor.flush()
            except StoreError as exc:
                outcome.append(exc)

        nursery.start_soon(barrier)
        await trio.testing.wait_all_tasks_blocked()
        actor_scope.cancel()
    assert len(outcome) == 1
    with pytest.raises(StoreError):
        await actor.submit("a", ())


# the plain memory store: barriers with nothing queued ahead are written by their caller --


async def test_a_barrier_on_the_memory_store_waits_behind_submits_queued_before_it() -> None:
    store = MemoryStore()
    await created(store, "one")
    events = events_of("one", 2)
    actor = CodecActor(store)
    await actor.submit("one", events[:3])  # queued: the actor has not started yet
    persisted = trio.Event()
    async with trio.open_nursery() as nursery:

        async def barrier() -> None:
            await actor.persist("one", events[3:])
            persisted.set()

        nursery.start_soon(barrier)
        await trio.testing.wait_all_tasks_blocked()
        assert not persisted.is_set()  # it did not overtake the queued submit
        await nursery.start(actor.run)
        await persisted.wait()
        await actor.aclose()
    assert (await store.load("one"))[1] == events


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_a_steps_request_leaves_before_tasks_made_ready_in_the_step_run(
    store: str, tmp_path: Path
) -> None:
    turns = 20  # a schedule point runs the loop or the ready task first at random (trio)
    ran: list[int] = []
    ran_at_requests: list[int] = []

    def answer(request: Request) -> tuple[object, ...]:  # called as the request arrives
        ran_at_requests.append(len(ran))
        return reply("done")

    provider = ScriptedProvider([reply("warm"), *[answer] * turns])
    url = "memory:" if store == "memory" else f"sqlite:{tmp_path / 's.db'}"
    async with Runtime.open(store=url, provider=provider) as rt, trio.open_nursery() as nursery:
        agent = await rt.spawn(AgentOptions(model="m"))
        # On sqlite the first barrier goes through the actor's round; then the session
        # writes alone, and its barriers commit in the loop.
        assert (await agent.send("warm up")).reason == "completed"

        async def other_task(number: int) -> None:
            ran.append(number)

        def at_event(_: Agent, event: SessionEvent) -> None:
            if event.type == "step/start":  # ready to run from this point of the step
                nursery.start_soon(other_task, len(ran_at_requests))

        agent.on("session/event", at_event)
        for _ in range(turns):
            assert (await agent.send("go")).reason == "completed"
    # Each barrier before a request committed in the loop and did not yield: every request
    # left before the task its step made ready ran, which then ran when the provider yielded.
    assert ran_at_requests == list(range(turns))
    assert ran == list(range(turns))


async def test_a_memory_store_barrier_reports_its_own_sessions_failure_only() -> None:
    store = MemoryStore()
    await created(store, "a", "b")
    async with trio.open_nursery() as nursery:
        actor = CodecActor(store)
        await nursery.start(actor.run)
        with pytest.raises(SessionWriteError) as refused:
            await actor.persist("a", events_of("a")[1:])  # does not continue the empty tail
        assert refused.value.session_id == "a"
        await actor.persist("b", events_of("b"))  # the other session is unaffected
        await actor.persist("a", events_of("a"))  # reported once: "a" writes again
        assert (await store.load("a"))[1] == events_of("a")
        assert (await store.load("b"))[1] == events_of("b")
        await store.close()
        with pytest.raises(StoreError):
            await actor.persist("b", events_of("b", 2)[13:])  # the store itself failed
        with pytest.raises(StoreError):
            await actor.submit("b", ())  # ... and the actor fails closed from then on
        nursery.cancel_scope.cancel()
