"""`agent.events(after=None)`: stored events first, then live ones, in seq order, ending when
the agent is closed; the log is the buffer, so a slow reader never holds the loop up."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from helpers import open_runtime

from actorloop.runtime import AgentOptions, SessionEvent
from actorloop.runtime.testing import EchoProvider


async def test_events_yields_stored_then_live_events_and_ends_at_dispose() -> None:
    async with open_runtime(EchoProvider()) as rt, trio.open_nursery() as nursery:
        agent = await rt.spawn(AgentOptions(model="m"))
        await agent.send("before the reader")
        seen: list[SessionEvent] = []
        finished = trio.Event()

        async def read() -> None:
            async for event in agent.events():
                seen.append(event)
            finished.set()

        nursery.start_soon(read)
        await trio.testing.wait_all_tasks_blocked()
        stored = len(agent.session)
        assert [e.seq for e in seen] == list(range(stored))
        await agent.send("while it reads")
        await trio.testing.wait_all_tasks_blocked()
        assert seen == list(agent.session.events) and not finished.is_set()
        await agent.dispose()
        await finished.wait()
    assert seen == list(agent.session.events)


async def test_events_after_a_seq_starts_right_after_it() -> None:
    async with open_runtime(EchoProvider()) as rt:
        agent = await rt.spawn(AgentOptions(model="m"))
        await agent.send("one")
        await agent.send("two")
        middle = len(agent.session) // 2
        await agent.dispose()
        tail = [event async for event in agent.events(after=middle)]
        everything = [event async for event in agent.events(after=-1)]
    assert tail == list(agent.session.events[middle + 1 :])
    assert everything == list(agent.session.events)
    with pytest.raises(TypeError, match="seq"):
        async for _ in agent.events(after="3"):  # type: ignore[arg-type]
            pass


async def test_a_paused_reader_never_holds_the_loop_up() -> None:
    async with open_runtime(EchoProvider()) as rt:
        agent = await rt.spawn(AgentOptions(model="m"))
        await agent.send("turn 0")
        reader = agent.events()
        first = await reader.__anext__()
        # The reader takes nothing for ten turns: the loop runs them all regardless.
        for n in range(1, 11):
            assert (await agent.send(f"turn {n}")).reason == "completed"
        await agent.dispose()
        rest = [event async for event in reader]
    assert [first, *rest] == list(agent.session.events)
    assert agent.session.last_turn == 11
