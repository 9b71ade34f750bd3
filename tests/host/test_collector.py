"""`CollectorPolicy`: a runtime sets the collector thresholds while open and restores them,
freezes after a load when asked, and refuses malformed settings with a typed error."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import pytest
import trio

from actorloop.runtime import AgentOptions, CollectorPolicy, Runtime
from actorloop.runtime.control.collector import MANY_AGENTS_THRESHOLDS
from actorloop.runtime.errors import CollectorPolicyError
from actorloop.runtime.stores import MemoryStore
from actorloop.runtime.testing import EchoProvider

OPTIONS = AgentOptions(model="m")


@pytest.fixture(autouse=True)
def _restore_collector():
    saved = gc.get_threshold()
    yield
    gc.set_threshold(*saved)
    gc.unfreeze()


def test_thresholds_hold_while_the_runtime_is_open_and_are_restored() -> None:
    gc.set_threshold(700, 10, 10)
    seen: list[tuple[int, int, int]] = []

    async def main() -> None:
        policy = CollectorPolicy(thresholds=(12_345, 6, 7))
        async with Runtime.open(provider=EchoProvider(), collector=policy) as rt:
            seen.append(gc.get_threshold())
            agent = await rt.spawn(OPTIONS)
            assert (await agent.send("hi")).reason == "completed"
            seen.append(gc.get_threshold())

    trio.run(main)
    assert seen == [(12_345, 6, 7)] * 2
    assert gc.get_threshold() == (700, 10, 10)


class _StoreThatFailsToClose(MemoryStore):
    async def close(self) -> None:
        await super().close()
        raise OSError("the disk went away")


def test_a_store_that_fails_to_close_still_gets_the_collector_restored() -> None:
    gc.set_threshold(700, 10, 10)
    frozen_while_open: list[int] = []

    async def main() -> None:
        policy = CollectorPolicy.many_agents()
        async with Runtime.open(
            store=_StoreThatFailsToClose(), provider=EchoProvider(), collector=policy
        ) as rt:
            agent = await rt.spawn(OPTIONS)
            assert (await agent.send("hi")).reason == "completed"
            frozen_while_open.append(gc.get_freeze_count())

    with pytest.raises(OSError, match="the disk went away"):
        trio.run(main)
    assert frozen_while_open[0] > 0
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == 0


def test_the_default_policy_leaves_the_collector_alone() -> None:
    gc.set_threshold(900, 11, 12)

    async def main() -> None:
        async with Runtime.open(provider=EchoProvider()) as rt:
            assert gc.get_threshold() == (900, 11, 12)
            await rt.spawn(OPTIONS)
            assert gc.get_freeze_count() == 0

    trio.run(main)
    assert gc.get_threshold() == (900, 11, 12)


def test_many_agents_freezes_after_each_start_and_unfreezes_on_close(tmp_path: Path) -> None:
    url = f"sqlite:{tmp_path / 'db.sqlite'}"
    frozen: list[int] = []

    async def main() -> None:
        async with Runtime.open(store=url, provider=EchoProvider()) as rt:
            agent = await rt.spawn(OPTIONS, session_id="s1")
            assert (await agent.send("hi")).reason == "completed"
            frozen.append(gc.get_freeze_count())  # the default policy freezes nothing
        policy = CollectorPolicy.many_agents()
        async with Runtime.open(store=url, provider=EchoProvider(), collector=policy) as rt:
            assert gc.get_threshold() == MANY_AGENTS_THRESHOLDS
            await rt.spawn(OPTIONS, session_id="s2")
            frozen.append(gc.get_freeze_count())
            resumed = await rt.resume("s1")
            frozen.append(gc.get_freeze_count())
            # Frozen: in the permanent generation, which `get_objects` does not list.
            assert not any(obj is resumed.session for obj in gc.get_objects())
            assert (await resumed.send("again")).reason == "completed"
        frozen.append(gc.get_freeze_count())

    trio.run(main)
    assert frozen[0] == 0
    assert frozen[1] > 0  # the count can drop between freezes: frozen objects still die
    assert frozen[2] > 0
    assert frozen[3] == 0


def test_an_ended_agent_is_handed_back_to_the_collector() -> None:
    """Frozen objects are never collected: when a loop ends the policy unfreezes, so the
    ended agent's reference cycles (the loop and its handle) are reclaimed while the
    runtime stays open."""
    outcome: list[bool] = []

    async def main() -> None:
        policy = CollectorPolicy.many_agents()
        async with Runtime.open(provider=EchoProvider(), collector=policy) as rt:
            keep = await rt.spawn(OPTIONS)
            agent = await rt.spawn(OPTIONS)
            assert (await agent.send("hi")).reason == "completed"
            session = weakref.ref(agent.session)
            await agent.dispose()
            del agent
            gc.collect()
            outcome.append(session() is None)
            assert gc.get_freeze_count() == 0
            assert (await keep.send("still here")).reason == "completed"

    trio.run(main)
    assert outcome == [True]


@pytest.mark.parametrize(
    "thresholds",
    [(1, 2), (1, 2, 3, 4), (700, -1, 10), (700.0, 10, 10), [700, 10, 10], (True, 1, 1)],
)
def test_malformed_thresholds_are_refused(thresholds: object) -> None:
    with pytest.raises(CollectorPolicyError, match="three ints"):
        CollectorPolicy(thresholds=thresholds)  # type: ignore[arg-type]


def test_a_runtime_refuses_a_collector_that_is_not_a_policy() -> None:
    before = gc.get_threshold()

    async def main() -> None:
        async with Runtime.open(provider=EchoProvider(), collector=(1, 2, 3)):  # type: ignore[arg-type]
            pass

    with pytest.raises(CollectorPolicyError, match="CollectorPolicy"):
        trio.run(main)
    assert gc.get_threshold() == before
