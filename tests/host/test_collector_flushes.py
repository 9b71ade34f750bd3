"""`CollectorPolicy.freeze_after_flush`: what a store write made durable is frozen (young
collections no longer walk it), after a barrier written inline and after a queued group
commit alike; unfrozen when a loop ends and when the runtime closes; the default policy
freezes nothing."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import pytest
import trio
from session_logs import closed_log

from actorloop.actors.codec import CodecActor
from actorloop.runtime import AgentOptions, CollectorPolicy, Runtime, Tool
from actorloop.runtime.errors import SessionWriteError
from actorloop.runtime.log.session import SessionMeta
from actorloop.runtime.stores import MemoryStore
from actorloop.runtime.testing import EchoProvider, ScriptedProvider, reply, tool_call

OPTIONS = AgentOptions(model="m")
FLUSHES = CollectorPolicy(freeze_after_flush=True)


@pytest.fixture(autouse=True)
def _restore_collector():
    saved = gc.get_threshold()
    gc.unfreeze()
    yield
    gc.set_threshold(*saved)
    gc.unfreeze()


def test_many_agents_freezes_after_starts_only() -> None:
    policy = CollectorPolicy.many_agents()
    assert policy.freeze_after_start and not policy.freeze_after_flush


class _Node:
    """A reference cycle of its own (`me`), as application state or a traceback makes."""

    def __init__(self) -> None:
        self.me = self


@pytest.mark.parametrize(
    ("policy", "collected"),
    [(CollectorPolicy.many_agents(), True), (FLUSHES, False)],
    ids=["many_agents", "freeze_after_flush"],
)
def test_a_cycle_that_dies_after_a_write_is_collected_unless_flushes_freeze(
    policy: CollectorPolicy, collected: bool
) -> None:
    """A tool's cycle is alive at its step's writes and dead by the next turn: with
    `many_agents()` a collection frees it while the agent lives; `freeze_after_flush` keeps
    it until the loop ends (the documented trade-off, why many_agents() leaves it out)."""
    refs: list[weakref.ref[_Node]] = []
    alive: list[int] = []

    async def keep(args: dict[str, object], ctx: object) -> str:
        node = _Node()
        refs.append(weakref.ref(node))
        held.append(node)  # alive across the step's barriers, dropped next turn
        return "kept"

    held: list[_Node] = []
    tool = Tool("keep", "Keep a node.", {"type": "object", "properties": {}}, keep)

    async def main() -> None:
        provider = ScriptedProvider([])
        async with Runtime.open(store="memory:", provider=provider, collector=policy) as rt:
            agent = await rt.spawn(AgentOptions(model="m", tools=(tool,)))
            for turn in range(3):
                provider.push(tool_call(f"c{turn}", "keep", {}), reply("done"))
                assert (await agent.send("keep one")).reason == "completed"
                held.clear()  # the application lets go of the turn's node
            gc.collect()
            alive.append(sum(ref() is not None for ref in refs))

    trio.run(main)
    assert len(refs) == 3
    assert alive == [0 if collected else 3]


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
