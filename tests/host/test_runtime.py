"""The Runtime facade: resume (S1), fork (S2) with typed errors, prefix drift across
instances, supervision of crashing loops, and shutdown (docs/spec/fork-resume.md,
docs/spec/runtime.md §6, §10)."""

from __future__ import annotations

import logging
import os
import resource
import sqlite3
import sys
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
import trio
from helpers import FailingBarrier, open_runtime, types_of, wait_until

from actorloop.runtime import (
    AgentOptions,
    Message,
    Runtime,
    SessionEvent,
    SessionForkError,
    SessionNotFound,
    StoreError,
)
from actorloop.runtime.errors import AgentClosed
from actorloop.runtime.host.runtime import RuntimeClosed
from actorloop.runtime.log.invariants import check_request
from actorloop.runtime.log.session import Session
from actorloop.runtime.log.verify import verify_log
from actorloop.runtime.model.events import RequestHeaderEvent, TurnEnd, TurnStart
from actorloop.runtime.stores import open_store
from actorloop.runtime.stores.loading import load_session
from actorloop.runtime.testing import HANG, EchoProvider, ScriptedProvider, reply

OPTIONS = AgentOptions(model="m", system="You are terse.")
STORES = ("sqlite", "jsonl")


def store_url(kind: str, tmp_path: Path) -> str:
    return f"sqlite:{tmp_path / 'rt.db'}" if kind == "sqlite" else f"jsonl:{tmp_path / 'logs'}"


def own_rows(url: str, session_id: str) -> int:
    """How many events the store keeps *for this session itself* (not its fork seed)."""
    kind, _, rest = url.partition(":")
    if kind == "sqlite":
        with closing(sqlite3.connect(rest.partition("?")[0])) as db:
            row = db.execute("SELECT COUNT(*) FROM events WHERE session_id = ?", (session_id,))
            return int(row.fetchone()[0])
    lines = (Path(rest) / session_id / "log.jsonl").read_bytes().splitlines()
    return len(lines) - 1  # line 1 is the meta record


async def load_from(url: str, session_id: str) -> Session:
    store = open_store(url)
    try:
        return await load_session(store, session_id)
    finally:
        await store.close()


def turn_end_seqs(events: Sequence[SessionEvent]) -> dict[int, int]:
    return {e.data.turn: e.seq for e in events if isinstance(e.data, TurnEnd)}


def headers_in(events: Sequence[SessionEvent]) -> list[str]:
    return [e.data.reason for e in events if isinstance(e.data, RequestHeaderEvent)]


def turn_reasons(events: Sequence[SessionEvent]) -> list[str]:
    return [e.data.reason.kind for e in events if isinstance(e.data, TurnEnd)]


def every_turn_closed(events: Sequence[SessionEvent]) -> bool:
    starts = [e.data.turn for e in events if isinstance(e.data, TurnStart)]
    ends = [e.data.turn for e in events if isinstance(e.data, TurnEnd)]
    return starts == ends


async def hang_then_cancel(agent: Any, text: str) -> None:
    """Run one turn whose model call hangs, cancel it once the partial chunk is logged."""
    async with trio.open_nursery() as nursery:
        results: list[Any] = []

        async def run() -> None:
            results.append(await agent.send(text))

        before = len(agent.session)
        nursery.start_soon(run)
        await wait_until(
            lambda: any(e.type == "assistant/chunk" for e in agent.session.events[before:])
        )
        agent.cancel("test")
    assert results[0].reason == "aborted"


@pytest.fixture(params=STORES)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return store_url(request.param, tmp_path)


# ---------------------------------------------------------------- S1: resume


async def test_S1_resume_after_restart(url: str) -> None:
    starts: list[tuple[str, str]] = []
    first = ScriptedProvider([reply("one")])
    async with open_runtime(first, store=url) as rt:
        rt.on("agent/session-start", lambda agent, kind: starts.append((agent.id, kind)))
        agent = await rt.spawn(OPTIONS, session_id="s1")
        assert (await agent.send("first")).turn == 1
        before = agent.session.events
        derived = agent.session.derive_messages()
    assert headers_in(before) == ["initial"]

    second = ScriptedProvider([reply("two")])
    async with open_runtime(second, store=url) as rt:
        rt.on("agent/session-start", lambda agent, kind: starts.append((agent.id, kind)))
        again = await rt.resume("s1", OPTIONS)
        assert again.id == "s1" and rt.get("s1") is again
        assert again.session.events == before
        assert again.session.derive_messages() == derived
        assert again.session.last_turn == 1
        result = await again.send("second")
        assert (result.turn, result.reason) == (2, "completed")
        events = again.session.events
        assert [e.seq for e in events] == list(range(len(events)))
        new = events[len(before) :]
        assert [e.data.turn for e in new if isinstance(e.data, TurnStart)] == [2]
        assert headers_in(new) == ["resume"]
        header_seq = next(e.seq for e in new if e.type == "request/header")
        first_chunk = next(e.seq for e in new if e.type == "assistant/chunk")
        assert header_seq < first_chunk
        assert second.requests[0].messages == (
            Message.user("first"),
            Message.assistant("one"),
            Message.user("second"),
        )
        assert rt.invariant_checks == 1
        final = events
    assert starts == [("s1", "startup"), ("s1", "resume")]
    stored = await load_from(url, "s1")
    assert stored.events == final
    verify_log(stored.meta, stored.events)


async def test_resume_of_a_missing_session_is_a_plain_error(url: str) -> None:
    async with open_runtime(EchoProvider(), store=url) as rt:
        with pytest.raises(SessionNotFound):
            await rt.resume("ghost", OPTIONS)
        # The failed resume left no lease behind: the id is free for a spawn.
        agent = await rt.spawn(OPTIONS, session_id="ghost")
        assert (await agent.send("hi")).reason == "completed"


async def test_resume_continues_turns_over_several_restarts(url: str) -> None:
    for expected_turn in (1, 2, 3):
        async with open_runtime(EchoProvider(echo=True), store=url) as rt:
            if expected_turn == 1:
                agent = await rt.spawn(OPTIONS, session_id="many")
            else:
                agent = await rt.resume("many", OPTIONS)
            result = await agent.send(f"message {expected_turn}")
            assert result.turn == expected_turn
            assert headers_in(agent.session.events) == ["initial"] + ["resume"] * (
                expected_turn - 1
            )
    stored = await load_from(url, "many")
    assert [m.text for m in stored.derive_messages()] == [
        text for n in (1, 2, 3) for text in (f"message {n}", f"message {n}")
    ]


# ---------------------------------------------------------------- S2: fork


async def test_S2_fork_at_turn_one_while_later_turns_follow(url: str) -> None:
    starts: list[tuple[str, str]] = []
    provider = ScriptedProvider([HANG, reply("two"), HANG, reply("child answer")])
    async with open_runtime(provider, store=url) as rt:
        rt.on("agent/session-start", lambda agent, kind: starts.append((agent.id, kind)))
        parent = await rt.spawn(OPTIONS, session_id="parent")
        await hang_then_cancel(parent, "first")
        assert (await parent.send("second")).reason == "completed"
        async with trio.open_nursery() as nursery:
            nursery.start_soon(parent.send, "third")
            await wait_until(lambda: parent.session.open_turn == 3 and len(provider.requests) == 3)
            boundary = turn_end_seqs(parent.session.events)[1]

            child = await rt.fork("parent", boundary, "child")

            assert child.id == "child" and rt.get("child") is child
            assert child.session.events == parent.session.events[: boundary + 1]
            assert child.session.meta.seed_length == boundary + 1
            assert child.session.meta.parent_session == "parent"
            assert child.session.derive_messages() == (Message.user("first"),)
            # O(1): the child's store record holds no copy of the parent's events.
            assert own_rows(url, "child") == 0
            result = await child.send("question")
            assert (result.turn, result.reason) == (2, "completed")
            assert own_rows(url, "child") == len(child.session) - (boundary + 1)
            assert parent.session.open_turn == 3  # the parent's turn 3 is still in flight
            parent.cancel()
        own = child.session.events[boundary + 1 :]
        # The seed holds turn 1's header, so the child's first request writes `resume`.
        assert headers_in(own) == ["resume"]
        assert provider.requests[3].session_id == "child"
        assert provider.requests[3].messages == (Message.user("first"), Message.user("question"))
        assert turn_reasons(parent.session.events) == ["aborted", "completed", "aborted"]
        child_events = child.session.events
        parent_events = parent.session.events
        assert rt.invariant_checks == 4
    assert ("child", "fork") in starts
    stored_child = await load_from(url, "child")
    assert stored_child.events == child_events
    assert stored_child.meta.parent_session == "parent"
    assert stored_child.meta.seed_length == boundary + 1
    stored_parent = await load_from(url, "parent")
    assert stored_parent.events == parent_events
    for session in (stored_child, stored_parent):
        verify_log(session.meta, session.events)


async def test_S2_child_of_a_seed_without_header_writes_initial(url: str) -> None:
    composed = 0

    async def prefix(agent: Any, value: Any, next: Any) -> Any:
        nonlocal composed
        composed += 1
        if composed == 1:
            agent.cancel()  # turn 1 ends before any request: no header in the log yet
        return await next()

    provider = ScriptedProvider([reply("two"), reply("child answer")])
    async with open_runtime(provider, store=url) as rt:
        rt.on("agent/session-prefix", prefix)
        parent = await rt.spawn(OPTIONS, session_id="p")
        assert (await parent.send("first")).reason == "aborted"
        assert (await parent.send("second")).reason == "completed"
        boundary = turn_end_seqs(parent.session.events)[1]
        child = await rt.fork("p", boundary, "c")
        assert child.session.header() is None
        assert child.session.derive_messages() == (Message.user("first"),)
        await child.send("q")
        assert headers_in(child.session.events[boundary + 1 :]) == ["initial"]
        assert headers_in(parent.session.events) == ["initial"]


async def test_fork_of_a_completed_turn_carries_history_and_header(url: str) -> None:
    provider = ScriptedProvider([reply("hello back"), reply("child"), reply("parent again")])
    async with open_runtime(provider, store=url) as rt:
        parent = await rt.spawn(OPTIONS, session_id="p")
        await parent.send("hello")
        child = await rt.fork("p")  # default boundary: the last event, a turn/end
        assert child.session.meta.seed_length == len(parent.session)
        assert child.id != "p"
        await child.send("from child")
        await parent.send("from parent")
        assert provider.requests[1].messages == (
            Message.user("hello"),
            Message.assistant("hello back"),
            Message.user("from child"),
        )
        # Neither sees the other's later turns.
        assert Message.user("from parent") not in child.session.derive_messages()
        assert Message.user("from child") not in parent.session.derive_messages()
        assert own_rows(url, child.id) == len(child.session) - child.session.meta.seed_length


async def test_fork_of_a_stored_session_that_is_not_live(url: str) -> None:
    async with open_runtime(EchoProvider(echo=True), store=url) as rt:
        source = await rt.spawn(OPTIONS, session_id="src")
        await source.send("one")
        await source.send("two")
        boundary = turn_end_seqs(source.session.events)[1]
        await source.dispose()
        assert rt.get("src") is None
        child = await rt.fork("src", boundary, "kid", OPTIONS)
        assert child.session.derive_messages() == (Message.user("one"), Message.assistant("one"))
        await child.send("three")
        assert own_rows(url, "kid") == len(child.session) - (boundary + 1)
    # A grandchild: forked from the child past the child's own seed.
    async with open_runtime(EchoProvider(echo=True), store=url) as rt:
        kid = await rt.resume("kid", OPTIONS)
        grand = await rt.fork("kid", None, "grand")
        assert grand.session.events == kid.session.events
        assert own_rows(url, "grand") == 0
        await grand.send("four")
        texts = [m.text for m in grand.session.derive_messages()]
        assert texts == ["one", "one", "three", "three", "four", "four"]
    stored = await load_from(url, "grand")
    assert [m.text for m in stored.derive_messages()] == texts
    verify_log(stored.meta, stored.events)


async def test_fork_errors_are_plain_typed_errors(url: str) -> None:
    provider = ScriptedProvider([reply("one"), reply("two"), HANG])
    async with open_runtime(provider, store=url) as rt:
        parent = await rt.spawn(OPTIONS, session_id="p")
        await parent.send("first")
        other = await rt.spawn(OPTIONS, session_id="other")
        sessions_before = {meta.id for meta in await rt.list_sessions()}

        async def refused(code: str, *args: Any, **kwargs: Any) -> SessionForkError:
            with pytest.raises(SessionForkError) as info:
                await rt.fork(*args, **kwargs)
            assert type(info.value) is SessionForkError
            assert info.value.code == code
            return info.value

        await refused("OPEN_TURN", "p", 0, "x")  # a turn/start
        await refused("OPEN_TURN", "p", 1, "x")  # a user/message
        await refused("INVALID_BOUNDARY", "p", 10_000, "x")
        await refused("INVALID_BOUNDARY", "p", -1, "x")
        await refused("INVALID_BOUNDARY", "p", True, "x")
        await refused("SESSION_NOT_FOUND", "nobody", None, "x")
        await refused("SESSION_NOT_FOUND", "nobody", None, "x", OPTIONS)
        await refused("SESSION_ALREADY_EXISTS", "p", None, "p")
        await refused("SESSION_ALREADY_EXISTS", "p", None, "other")  # live agent's id
        await other.dispose()
        await refused("SESSION_ALREADY_EXISTS", "p", None, "other")  # stored session's id
        # The same rules for a source no agent owns (read from the store).
        await refused("INVALID_BOUNDARY", "other", None, "x", OPTIONS)  # no events at all
        await parent.send("to fork from storage")
        stored_end = len(parent.session) - 1
        await parent.dispose()
        for inside in (0, 1):
            await refused("OPEN_TURN", "p", inside, "x", OPTIONS)
        for bad in (stored_end + 1, 10_000, -1, True):
            await refused("INVALID_BOUNDARY", "p", bad, "x", OPTIONS)
        await refused("SESSION_ALREADY_EXISTS", "p", 1, "other", OPTIONS)
        await refused("SESSION_ALREADY_EXISTS", "p", stored_end, "p", OPTIONS)
        await refused("SESSION_ALREADY_EXISTS", "p", stored_end, "other", OPTIONS)
        parent = await rt.resume("p", OPTIONS)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(parent.send, "third")
            await wait_until(lambda: parent.session.open_turn == 3 and len(provider.requests) == 3)
            await refused("OPEN_TURN", "p", None, "x")
            # The child id comes first, even for a source whose tail is open.
            await refused("SESSION_ALREADY_EXISTS", "p", None, "other")
            await refused("SESSION_ALREADY_EXISTS", "p", 1, "other")
            await refused("SESSION_ALREADY_EXISTS", "p", None, "p")
            parent.cancel()
        # Nothing was created, nothing is left claimed: the id is still free.
        assert {meta.id for meta in await rt.list_sessions()} == sessions_before
        assert rt.get("x") is None
        fresh = await rt.fork("p", None, "x")
        assert fresh.session.meta.parent_session == "p"


# ---------------------------------------------------------------- prefix drift on resume


async def test_resume_recomposes_the_prefix_and_old_requests_still_rebuild(url: str) -> None:
    def contributor(version: str) -> Any:
        async def prefix(agent: Any, value: Any, next: Any) -> Any:
            return (Message.user(f"skills {version}"), *await next())

        return prefix

    old = ScriptedProvider([reply("a"), reply("b")])
    async with open_runtime(old, store=url) as rt:
        rt.on("agent/session-prefix", contributor("v1"))
        agent = await rt.spawn(OPTIONS, session_id="drift")
        await agent.send("one")
        await agent.send("two")
        old_len = len(agent.session)
    new = ScriptedProvider([reply("c"), reply("d")])
    async with open_runtime(new, store=url) as rt:
        rt.on("agent/session-prefix", contributor("v2"))
        agent = await rt.resume("drift", OPTIONS)
        await agent.send("three")
        await agent.send("four")
        events = agent.session.events
        assert rt.invariant_checks == 2
    v1, v2 = (Message.user("skills v1"),), (Message.user("skills v2"),)
    snapshots = [e for e in events if isinstance(e.data, RequestHeaderEvent)]
    assert [(s.data.reason, s.data.header.message_prefix) for s in snapshots] == [
        ("initial", v1),
        ("resume", v2),
    ]
    assert snapshots[1].seq >= old_len
    assert all(r.messages[: r.prefix_length] == v1 for r in old.requests)
    assert all(r.messages[: r.prefix_length] == v2 for r in new.requests)
    assert all(v1[0] not in r.messages for r in new.requests)
    assert Message.user("skills v2") not in agent.session.derive_messages()
    # Every request, old and new, is what the log rebuilds at its step.
    chunk_seqs = [e.seq for e in events if e.type == "assistant/chunk"]
    first_chunks = [seq for seq in chunk_seqs if events[seq - 1].type != "assistant/chunk"]
    assert len(first_chunks) == 4
    for seq, request in zip(first_chunks, [*old.requests, *new.requests], strict=True):
        check_request(events[:seq], request)
    report = verify_log(agent.session.meta, events)
    assert report.requests_checked == 4


# ---------------------------------------------------------------- supervision


async def test_a_crashing_listener_does_not_disturb_a_hundred_siblings() -> None:
    errors: list[BaseException] = []

    def bad_notify(agent: Any, event: Any) -> None:
        raise RuntimeError("observer bug")

    async def bad_pre_step(agent: Any, value: Any) -> None:
        raise RuntimeError("pre-step bug")

    async with open_runtime(EchoProvider(latency=0.001)) as rt:
        crasher = await rt.spawn(OPTIONS, session_id="crasher")
        crasher.on("session/event", bad_notify)
        crasher.on("agent/pre-step", bad_pre_step)
        crasher.on("agent/error", lambda agent, exc: errors.append(exc))
        others = [await rt.spawn(OPTIONS, session_id=f"a{n}") for n in range(100)]
        results: dict[str, list[Any]] = {}

        async def drive(agent: Any) -> None:
            results[agent.id] = [await agent.send("x"), await agent.send("y")]

        async with trio.open_nursery() as nursery:
            for agent in [crasher, *others]:
                nursery.start_soon(drive, agent)
        crashed = results.pop("crasher")
        assert [r.reason for r in crashed] == ["error", "error"]
        assert [type(e) for e in errors] == [RuntimeError, RuntimeError]
        assert crasher.status == "idle"  # a failed turn is not a failed agent
        assert len(results) == 100
        for agent in others:
            assert [r.reason for r in results[agent.id]] == ["completed", "completed"]
            assert agent.status == "idle"
            assert every_turn_closed(agent.session.events)
        assert every_turn_closed(crasher.session.events)
        assert rt.invariant_checks == 200


async def test_a_loop_crash_marks_only_that_agent_failed_and_it_resumes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"sqlite:{tmp_path / 'crash.db'}"
    errors: list[tuple[str, BaseException]] = []
    statuses: list[str] = []
    async with open_runtime(EchoProvider(latency=0.001), store=url) as rt:
        rt.on("agent/error", lambda agent, exc: errors.append((agent.id, exc)))
        victim = await rt.spawn(OPTIONS, session_id="victim")
        victim.on("agent/status", lambda agent, status: statuses.append(status))
        siblings = [await rt.spawn(OPTIONS, session_id=f"sib{n}") for n in range(5)]
        await victim.send("before")
        # The victim's own persistence fails on its next turn/end barrier (e.g. its disk
        # quota): the barrier raises out of the loop's shielded turn close, a real crash
        # path of LoopActor.run; everything before the barrier at dispatch is durable.
        barriers = FailingBarrier(rt._loops["victim"], 2, StoreError("victim's store write failed"))
        results: dict[str, Any] = {}

        async def drive(agent: Any, text: str) -> None:
            results[agent.id] = await agent.send(text)

        with caplog.at_level(logging.CRITICAL, logger="actorloop"):
            async with trio.open_nursery() as nursery:
                for agent in [victim, *siblings]:
                    nursery.start_soon(drive, agent, "during")
        assert results["victim"].reason == "error"
        assert barriers.barriers == 2
        assert victim.status == "failed" and statuses[-1] == "failed"
        assert [agent_id for agent_id, _ in errors] == ["victim"]
        assert isinstance(errors[0][1], StoreError)
        assert rt.get("victim") is None
        with pytest.raises(AgentClosed):
            await victim.send("after")
        for sibling in siblings:
            assert results[sibling.id].reason == "completed"
            assert (await sibling.send("more")).reason == "completed"
        # The session is resumable: load repairs the turn the crash left open.
        again = await rt.resume("victim", OPTIONS)
        assert turn_reasons(again.session.events) == ["completed", "interrupted"]
        result = await again.send("after the crash")
        assert (result.turn, result.reason) == (3, "completed")
        assert headers_in(again.session.events) == ["initial", "resume"]
        final = again.session.events
    stored = await load_from(url, "victim")
    assert stored.events == final
    verify_log(stored.meta, stored.events)


# ---------------------------------------------------------------- shutdown


async def test_leaving_open_disposes_flushes_and_closes(url: str) -> None:
    provider = EchoProvider(echo=True)
    hang = ScriptedProvider([HANG])
    hang.name = "hang"
    hang_options = AgentOptions(model="m", provider="hang")
    results: list[Any] = []
    snapshots: dict[str, tuple[SessionEvent, ...]] = {}

    async def send(agent: Any, text: str) -> None:
        results.append(await agent.send(text))

    async with trio.open_nursery() as nursery:
        async with open_runtime(provider, store=url, providers={"hang": hang}) as rt:
            agents = [await rt.spawn(OPTIONS, session_id=f"keep{n}") for n in range(4)]
            for agent in agents:
                for text in ("a", "b", "c"):
                    assert (await agent.send(text)).reason == "completed"
            busy = await rt.spawn(hang_options, session_id="busy")
            nursery.start_soon(send, busy, "hangs")
            await wait_until(lambda: busy.session.open_step is not None and hang.calls == 1)
            nursery.start_soon(send, busy, "queued behind")
            await wait_until(lambda: len(results) == 0 and busy._loop._outstanding == 2)
            all_agents = [*agents, busy]
            store = rt.store
        # Leaving the block disposed every agent and closed the store.
        assert rt.agents == ()
        assert all(agent.status == "disposed" for agent in all_agents)
        with pytest.raises(StoreError):
            await store.list()
        for agent in all_agents:
            snapshots[agent.id] = agent.session.events
    assert sorted(r.reason for r in results) == ["discarded", "disposed"]
    assert turn_reasons(snapshots["busy"]) == ["disposed"]
    for session_id, events in snapshots.items():
        stored = await load_from(url, session_id)
        assert stored.events == events  # nothing acknowledged is lost, nothing needed repair
        assert every_turn_closed(stored.events)
    assert types_of(snapshots["busy"])[-1] == "turn/end"


async def test_no_agent_starts_once_shutdown_began(url: str) -> None:
    outcome: list[Any] = []
    async with trio.open_nursery() as outer, open_runtime(EchoProvider(), store=url) as rt:
        first = await rt.spawn(OPTIONS, session_id="first")
        await first.send("hi")
        shutting_down = trio.Event()
        first.on("agent/status", lambda _a, s: s == "disposed" and shutting_down.set())

        async def late() -> None:
            await shutting_down.wait()
            try:
                agent = await rt.spawn(OPTIONS, session_id="late")
                outcome.append(await agent.send("too late"))
            except Exception as exc:
                outcome.append(exc)

        outer.start_soon(late)
    assert len(outcome) == 1 and isinstance(outcome[0], RuntimeClosed), outcome
    assert first.status == "disposed"
    for attempt in (
        rt.spawn(OPTIONS),
        rt.resume("first", OPTIONS),
        rt.fork("first", None, "kid", OPTIONS),
    ):
        with pytest.raises(RuntimeClosed):
            await attempt
    store = open_store(url)
    try:
        assert [meta.id for meta in await store.list()] == ["first"]
    finally:
        await store.close()


# ---------------------------------------------------------------- file descriptors

FD_EXHAUSTION = r"""
import os, resource, sys, trio
from actorloop.runtime import AgentOptions, Runtime, StoreError
from actorloop.runtime.testing import EchoProvider

async def main(url: str) -> None:
    async with Runtime.open(store=url, provider=EchoProvider()) as rt:
        agents = []
        try:
            for n in range(200):
                agents.append(await rt.spawn(AgentOptions(model="m"), session_id=f"a{n}"))
        except StoreError as exc:
            print("REFUSED", len(agents), exc)
        result = await agents[0].send("still works")
        print("FIRST", result.reason)

limit = len(os.listdir("/proc/self/fd")) + 40
resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
trio.run(main, sys.argv[1])
"""


def open_fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_sqlite_leases_need_no_descriptor_each(tmp_path: Path) -> None:
    # SQLite writer leases are byte-range locks in at most 16 lease lock files (one
    # descriptor each), so many live agents fit under a low soft limit without raising it.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    low = open_fd_count() + 30
    resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))
    try:
        async with open_runtime(EchoProvider(), store=f"sqlite:{tmp_path / 'fds.db'}") as rt:
            agents = [await rt.spawn(OPTIONS, session_id=f"fd{n}") for n in range(60)]
            for agent in agents[::20]:
                assert (await agent.send("hi")).reason == "completed"
            assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == low  # never needed raising
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def test_running_out_of_fds_is_a_clear_error(tmp_path: Path) -> None:
    # A JSONL lease holds a lock file per session: past the hard limit a spawn fails with a
    # typed error naming the cause, and the agents already live are unaffected.
    done = await trio.run_process(
        [sys.executable, "-c", FD_EXHAUSTION, f"jsonl:{tmp_path / 'fds'}"],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert "REFUSED" in out and "Too many open files" in out
    refused_after = int(out.split("REFUSED ")[1].split()[0])
    assert 10 < refused_after < 200
    assert "FIRST completed" in out  # the agents already live are unaffected


async def test_outer_cancellation_closes_turns_durably(tmp_path: Path) -> None:
    """Cancelling the scope around Runtime.open still writes every turn/end to the store."""
    url = f"sqlite:{tmp_path / 'outer.db'}"
    provider = ScriptedProvider([HANG])
    session_id = "outer-cancel"
    with trio.move_on_after(5) as deadline:
        async with Runtime.open(store=url, provider=provider, dev_invariants=True) as rt:
            agent = await rt.spawn(AgentOptions(model="m"), session_id=session_id)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(agent.send, "hang")
                await wait_until(lambda: bool(provider.requests))
                deadline.cancel()
                await trio.sleep_forever()
    assert deadline.cancelled_caught
    store = open_store(url)
    try:
        _meta, events = await store.load(session_id)
    finally:
        await store.close()
    end = events[-1]
    assert end.type == "turn/end" and end.data.reason.kind == "disposed"
    assert [e.type for e in events].count("turn/end") == 1
