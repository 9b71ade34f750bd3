"""Single writer: a session owned by a live agent cannot get a second writer — not from the
same runtime, not from a second runtime in this process, not from another process."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from helpers import open_runtime, wait_until

from actorloop.runtime import AgentOptions, SessionForkError
from actorloop.runtime.errors import SessionBusy
from actorloop.runtime.model.events import TurnEnd
from actorloop.runtime.testing import HANG, EchoProvider, ScriptedProvider, reply

OPTIONS = AgentOptions(model="m")

SECOND_WRITER = r"""
import sys
import trio
from actorloop.runtime import AgentOptions, Runtime
from actorloop.runtime.errors import SessionBusy
from actorloop.runtime.testing import EchoProvider
from actorloop.runtime.model.events import SessionEvent, TurnEnd
from actorloop.runtime.stores import open_store


async def append_directly(url: str, session_id: str) -> None:
    # Bypass the runtime: a (well-formed) event appended straight to the store.
    store = open_store(url)
    try:
        _meta, events = await store.load(session_id)
        last = events[-1]
        bogus = SessionEvent("turn/end", len(events), last.time, TurnEnd(99, last.data.reason))
        try:
            await store.append(session_id, [bogus])
            print("APPENDED")
        except SessionBusy as exc:
            print("STORE-BUSY", exc)
    finally:
        await store.close()


async def main(url: str, session_id: str, mode: str) -> int:
    if mode == "probe":
        await append_directly(url, session_id)
    async with Runtime.open(store=url, provider=EchoProvider()) as rt:
        try:
            agent = await rt.resume(session_id, AgentOptions(model="m"))
        except SessionBusy as exc:
            print("BUSY", exc)
            return 3
        result = await agent.send("from the other process")
        print("RESUMED", result.turn, result.reason)
        return 0


sys.exit(trio.run(main, *sys.argv[1:4]))
"""


def store_url(kind: str, tmp_path: Path) -> str:
    return f"sqlite:{tmp_path / 'sw.db'}" if kind == "sqlite" else f"jsonl:{tmp_path / 'logs'}"


@pytest.fixture(params=("sqlite", "jsonl"))
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return store_url(request.param, tmp_path)


async def second_writer(url: str, session_id: str, mode: str) -> tuple[int, str]:
    done = await trio.run_process(
        [sys.executable, "-c", SECOND_WRITER, url, session_id, mode],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    out = done.stdout.decode()
    assert done.returncode in (0, 3), done.stderr.decode()[-2000:]
    return done.returncode, out


async def test_resuming_a_live_session_in_process_is_refused(url: str) -> None:
    async with open_runtime(EchoProvider(), store=url) as rt:
        agent = await rt.spawn(OPTIONS, session_id="solo")
        await agent.send("hi")
        with pytest.raises(SessionBusy, match="solo"):
            await rt.resume("solo", OPTIONS)
        with pytest.raises(SessionBusy, match="solo"):
            await rt.spawn(OPTIONS, session_id="solo")
        # The refusals changed nothing: the owner keeps working.
        assert rt.get("solo") is agent and agent.status == "idle"
        assert (await agent.send("still mine")).turn == 2
        await agent.dispose()
        again = await rt.resume("solo", OPTIONS)
        assert (await again.send("again")).turn == 3


async def test_a_second_runtime_in_process_is_refused(url: str) -> None:
    async with open_runtime(EchoProvider(), store=url) as rt:
        agent = await rt.spawn(OPTIONS, session_id="shared")
        await agent.send("hi")
        async with open_runtime(EchoProvider(), store=url) as other:
            with pytest.raises(SessionBusy, match="shared"):
                await other.resume("shared", OPTIONS)
            with pytest.raises(SessionBusy, match="shared"):
                await other.spawn(OPTIONS, session_id="shared")
            # Reading (and forking) a closed prefix is not writing: allowed.
            child = await other.fork("shared", None, "reader-child", OPTIONS)
            assert child.session.meta.parent_session == "shared"
        assert (await agent.send("still mine")).turn == 2


async def test_a_live_open_turn_elsewhere_blocks_repair_not_forks_of_closed_turns(
    url: str,
) -> None:
    provider = ScriptedProvider([reply("one"), HANG, reply("child")])
    async with open_runtime(provider, store=url) as rt:
        agent = await rt.spawn(OPTIONS, session_id="live")
        await agent.send("one")
        turn_one_end = len(agent.session) - 1
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.send, "two")
            await wait_until(lambda: agent.session.open_step is not None and provider.calls == 2)
            async with open_runtime(EchoProvider(echo=True), store=url) as other:
                with pytest.raises(SessionBusy, match="owned by a live writer"):
                    await other.resume("live", OPTIONS)
                # Loading the whole log would repair (write) its open turn: refused while
                # the turn is live in the other runtime.
                with pytest.raises(SessionBusy, match="live turn is open"):
                    await other.fork("live", None, "x", OPTIONS)
                # A fork of a closed turn reads only that prefix and writes nothing there.
                child = await other.fork("live", turn_one_end, "reader-child", OPTIONS)
                assert child.session.events == agent.session.events[: turn_one_end + 1]
                assert (await child.send("branch")).reason == "completed"
            agent.cancel()
        ends = [e.data.reason.kind for e in agent.session.events if isinstance(e.data, TurnEnd)]
        assert ends == ["completed", "aborted"]
        stored = await rt.store.load("live")
        assert stored[1] == agent.session.events


async def test_another_process_is_refused_while_the_session_is_live(url: str) -> None:
    async with open_runtime(EchoProvider(), store=url) as rt:
        agent = await rt.spawn(OPTIONS, session_id="proc")
        await agent.send("hi")
        code, out = await second_writer(url, "proc", "probe")
        assert code == 3, out
        assert "STORE-BUSY" in out and "APPENDED" not in out
        assert "BUSY session 'proc'" in out
        # The owner is undisturbed and its log has no foreign event.
        assert (await agent.send("mine")).turn == 2
        await agent.dispose()
        # Released: now the other process may take the session over.
        code, out = await second_writer(url, "proc", "take")
        assert code == 0, out
        assert "RESUMED 3 completed" in out
        again = await rt.resume("proc", OPTIONS)
        texts: list[Any] = [m.text for m in again.session.derive_messages()]
        assert texts[-2:] == ["from the other process", "ok"]
        assert again.session.last_turn == 3


async def test_fork_into_a_session_another_writer_holds_is_refused(url: str) -> None:
    async with open_runtime(EchoProvider(), store=url) as rt:
        agent = await rt.spawn(OPTIONS, session_id="src")
        await agent.send("hi")
        async with open_runtime(EchoProvider(), store=url) as other:
            taken = await other.spawn(OPTIONS, session_id="taken")
            with pytest.raises(SessionForkError) as info:
                await rt.fork("src", None, "taken")
            assert info.value.code == "SESSION_ALREADY_EXISTS"
            assert taken.status == "idle"
