"""`CollectorPolicy.freeze_after_flush`: what a store write made durable is frozen (young
collections no longer walk it), after a barrier written inline and after a queued group
commit alike; unfrozen when a loop ends and when the runtime closes; the default policy
freezes nothing."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
import trio
from session_logs import closed_log

from actorloop.actors.codec import CodecActor
from actorloop.runtime import AgentOptions, CollectorPolicy, Runtime
from actorloop.runtime.errors import SessionWriteError
from actorloop.runtime.log.session import SessionMeta
from actorloop.runtime.stores import MemoryStore
from actorloop.runtime.testing import EchoProvider

OPTIONS = AgentOptions(model="m")
FLUSHES = CollectorPolicy(freeze_after_flush=True)


@pytest.fixture(autouse=True)
def _restore_collector():
    saved = gc.get_threshold()
    gc.unfreeze()
    yield
    gc.set_threshold(*saved)
    gc.unfreeze()


def test_many_agents_freezes_after_flushes() -> None:
    policy = CollectorPolicy.many_agents()
    assert policy.freeze_after_flush and policy.freeze_after_start


@pytest.mark.parametrize("store", ["memory:", "sqlite"])
def test_each_flush_freezes_what_it_made_durable(tmp_path: Path, store: str) -> None:
    url = store if store == "memory:" else f"sqlite:{tmp_path / 'db.sqlite'}"
    counts: list[int] = []
    frozen: list[bool] = []

    async def main() -> None:
        async with Runtime.open(store=url, provider=EchoProvider(), collector=FLUSHES) as rt:
            agent = await rt.spawn(OPTIONS)
            assert gc.get_freeze_count() == 0  # spawned, nothing flushed yet
            for text in ("one", "two"):
                assert (await agent.send(text)).reason == "completed"
                counts.append(gc.get_freeze_count())
            # The turn's durable events are in the permanent generation: no collection
            # of any generation walks them.
            collectable = {id(value) for value in gc.get_objects()}
            frozen.append(not any(id(event) in collectable for event in agent.session.events))
        counts.append(gc.get_freeze_count())

    trio.run(main)
    first, second, closed = counts
    assert 0 < first < second  # every turn's barriers froze what it built
    assert frozen == [True]
    assert closed == 0  # the close hands everything back to the collector


async def test_the_codec_calls_back_after_each_durable_write_on_both_paths() -> None:
    store = MemoryStore()
    await store.create(SessionMeta("one"))
    events = closed_log("one", 2).events
    writes: list[int] = []
    actor = CodecActor(store, after_write=lambda: writes.append(len(writes)))
    async with trio.open_nursery() as nursery:
        await nursery.start(actor.run)
        assert actor.persist_now("one", events[:5])  # written inline by its caller
        assert writes == [0]
        await actor.submit("one", events[5:])  # queued: the actor's round writes it
        await actor.flush("one")
        assert writes == [0, 1]
        with pytest.raises(SessionWriteError):
            await actor.persist("one", events[:1])  # refused (a gap): nothing was written
        assert writes == [0, 1]
        await actor.aclose()


def test_an_ended_loop_unfreezes() -> None:
    async def main() -> None:
        async with Runtime.open(provider=EchoProvider(), collector=FLUSHES) as rt:
            agent = await rt.spawn(OPTIONS)
            assert (await agent.send("hi")).reason == "completed"
            assert gc.get_freeze_count() > 0
            await agent.dispose()
            assert gc.get_freeze_count() == 0

    trio.run(main)


def test_the_default_policy_freezes_nothing_on_flushes() -> None:
    async def main() -> None:
        async with Runtime.open(provider=EchoProvider()) as rt:
            agent = await rt.spawn(OPTIONS)
            assert (await agent.send("hi")).reason == "completed"
            assert gc.get_freeze_count() == 0

    trio.run(main)
