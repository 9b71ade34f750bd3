"""Fork/resume-heavy random workloads on `sqlite:`: random send / tool / cancel / inject /
spawn / fork / resume / dispose / restart sequences over several sessions. After every
operation each live log validates from scratch, every request passed the dev invariant, and
every session reloads from the store with the same events and derivation.

`ACTORLOOP_RUNTIME_PROP_EXAMPLES=200` runs a bigger search (default: a CI-sized one)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import trio
from helpers import open_runtime, wait_until
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actorloop.runtime import Agent, AgentOptions, SessionEvent, SessionForkError, Tool, ToolResult
from actorloop.runtime.errors import SessionBusy
from actorloop.runtime.host.runtime import Runtime
from actorloop.runtime.log.request import Request
from actorloop.runtime.log.session import Session, SessionMeta
from actorloop.runtime.model.chunks import BlockStart, StreamChunk, TextDelta
from actorloop.runtime.model.events import TurnEnd
from actorloop.runtime.providers.base import ModelInfo
from actorloop.runtime.stores import open_store
from actorloop.runtime.testing import reply, tool_call

EXAMPLES = int(os.environ.get("ACTORLOOP_RUNTIME_PROP_EXAMPLES", "50"))
OPS = ("send", "tool", "hang", "inject", "spawn", "fork", "resume", "dispose", "restart")


async def _echo(args: dict[str, Any], ctx: Any) -> str:
    return f"echo {args.get('x', '')}"


OPTIONS = AgentOptions(model="m", system="sys", tools=(Tool("echo", "echo", {}, _echo),))


class KeyedModel:
    """Answers by the last message: `tool …` asks for the echo tool, `hang …` hangs after a
    partial chunk, a tool result gets a closing reply, anything else is echoed."""

    name = "keyed"

    def __init__(self) -> None:
        self.calls = 0

    def model_info(self, model: str) -> ModelInfo | None:
        return ModelInfo(None)

    async def stream(self, request: Request) -> AsyncIterator[StreamChunk]:
        self.calls += 1
        last = request.messages[-1]
        await trio.lowlevel.checkpoint()
        if any(isinstance(block, ToolResult) for block in last.content):
            chunks: Any = reply("after tool")
        elif last.text.startswith("hang"):
            yield BlockStart(0, "text")
            yield TextDelta(0, "partial")
            await trio.sleep_forever()
            return
        elif last.text.startswith("tool"):
            chunks = tool_call(f"call{self.calls}", "echo", {"x": last.text})
        else:
            chunks = reply(f"re: {last.text}")
        for chunk in chunks:
            yield chunk


class World:
    """The model of what must be true: live agents, and the log every session must hold."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.stack = AsyncExitStack()
        self.rt: Runtime | None = None
        self.model = KeyedModel()
        self.live: dict[str, Agent] = {}
        self.stored: dict[str, tuple[SessionEvent, ...]] = {}
        self.counter = 0

    def fresh_id(self) -> str:
        self.counter += 1
        return f"s{self.counter}"

    def text(self, kind: str) -> str:
        self.counter += 1
        return f"{kind} {self.counter}"

    @property
    def runtime(self) -> Runtime:
        assert self.rt is not None
        return self.rt

    async def open(self) -> None:
        self.model = KeyedModel()
        self.rt = await self.stack.enter_async_context(open_runtime(self.model, store=self.url))

    async def close(self) -> None:
        await self.stack.aclose()
        self.stack = AsyncExitStack()
        for session_id, agent in self.live.items():
            assert agent.status == "disposed"
            self.stored[session_id] = agent.session.events
        self.live.clear()
        self.rt = None

    def pick(self, ids: list[str], index: int) -> str | None:
        return sorted(ids)[index % len(ids)] if ids else None

    def expected(self, session_id: str) -> tuple[SessionEvent, ...]:
        agent = self.live.get(session_id)
        return agent.session.events if agent is not None else self.stored[session_id]

    # operations ---------------------------------------------------------------------

    async def apply(self, op: str, a: int, b: int) -> None:
        rt = self.runtime
        target = self.pick(list(self.live), a)
        if op == "spawn" or (target is None and op in ("send", "tool", "hang", "inject")):
            session_id = self.fresh_id()
            self.live[session_id] = await rt.spawn(OPTIONS, session_id=session_id)
            self.stored[session_id] = ()
            return
        if op in ("send", "tool", "hang", "inject"):
            assert target is not None
            await self.drive(self.live[target], op, b)
        elif op == "dispose" and target is not None:
            agent = self.live.pop(target)
            await agent.dispose()
            assert agent.status == "disposed" and rt.get(target) is None
            self.stored[target] = agent.session.events
        elif op == "resume":
            await self.resume(self.pick(list(self.stored), a))
        elif op == "fork":
            await self.fork(self.pick(list(self.stored), a), b)
        elif op == "restart":
            await self.close()
            await self.open()

    async def drive(self, agent: Agent, op: str, b: int) -> None:
        if op in ("send", "tool"):
            result = await agent.send(self.text("msg" if op == "send" else "tool"))
            assert (result.turn, result.reason) == (agent.session.last_turn, "completed")
        elif op == "hang":
            await self.hang_and_cancel(agent, keep_inbox=bool(b % 2))
        else:
            turns = agent.session.last_turn
            agent.inject(self.text("note"), source="prop")
            await agent.wait_idle()
            assert agent.session.last_turn == turns + 1

    async def hang_and_cancel(self, agent: Agent, *, keep_inbox: bool) -> None:
        results: list[Any] = []
        start = len(agent.session)

        async def run() -> None:
            results.append(await agent.send(self.text("hang")))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            await wait_until(
                lambda: any(e.type == "assistant/chunk" for e in agent.session.events[start:])
            )
            agent.cancel("prop", keep_inbox=keep_inbox)
        assert results[0].reason == "aborted"
        assert agent.status == "idle"

    async def resume(self, session_id: str | None) -> None:
        if session_id is None:
            return
        rt = self.runtime
        if session_id in self.live:
            try:
                await rt.resume(session_id, OPTIONS)
            except SessionBusy:
                return
            raise AssertionError("resuming a live session must be refused")
        agent = await rt.resume(session_id, OPTIONS)
        assert agent.session.events == self.stored[session_id]
        self.live[session_id] = agent

    async def fork(self, source_id: str | None, b: int) -> None:
        if source_id is None:
            return
        rt = self.runtime
        events = self.expected(source_id)
        ends = [e.seq for e in events if isinstance(e.data, TurnEnd)]
        boundary = None if b % 4 == 0 or not ends else ends[b % len(ends)]
        child_id = self.fresh_id()
        options = None if source_id in self.live else OPTIONS
        try:
            child = await rt.fork(source_id, boundary, child_id, options)
        except SessionForkError as exc:
            assert not ends and exc.code == "INVALID_BOUNDARY", exc
            return
        seed = boundary + 1 if boundary is not None else len(events)
        assert child.session.events == events[:seed]
        assert child.session.meta.parent_session == source_id
        assert child.session.meta.seed_length == seed
        self.live[child_id] = child
        self.stored[child_id] = events[:seed]

    # checks -------------------------------------------------------------------------

    async def check(self) -> None:
        rt = self.runtime
        assert rt.invariant_checks == self.model.calls
        for session_id, agent in self.live.items():
            assert rt.get(session_id) is agent
            assert agent.status == "idle"
            replay = Session.from_events(session_id, agent.session.events, agent.session.meta)
            assert replay.derive_messages() == agent.session.derive_messages()
            assert agent.session.open_turn is None
        for session_id in set(self.live) | set(self.stored):
            expected = self.expected(session_id)
            meta, events = await rt.store.load(session_id)
            assert events == expected, session_id
            loaded = Session.from_events(session_id, events, meta)
            assert loaded.derive_messages() == Session.from_events("x", expected).derive_messages()


async def run_workload(url: str, ops: list[tuple[str, int, int]]) -> World:
    world = World(url)
    await world.open()
    try:
        for op, a, b in ops:
            await world.apply(op, a, b)
            await world.check()
    finally:
        await world.close()
    # After the last runtime closed, a cold store still holds every session.
    await world.open()
    try:
        await world.check()
    finally:
        await world.close()
    return world


async def list_sessions(url: str) -> tuple[SessionMeta, ...]:
    store = open_store(url)
    try:
        return await store.list()
    finally:
        await store.close()


operations = st.lists(
    st.tuples(st.sampled_from(OPS), st.integers(0, 7), st.integers(0, 7)),
    min_size=1,
    max_size=24,
)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=EXAMPLES <= 50,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(ops=operations)
async def test_random_fork_resume_workloads_keep_every_log_valid(
    ops: list[tuple[str, int, int]],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        await run_workload(f"sqlite:{Path(tmp) / 'prop.db'}", ops)


async def test_a_fixed_fork_resume_chain(tmp_path: Path) -> None:
    """A hand-picked sequence through every operation (forks of forks, resume of forks,
    forks of stored sessions, restarts), so the property has a known-deep case."""
    ops = [
        ("spawn", 0, 0),
        ("send", 0, 0),
        ("tool", 0, 0),
        ("fork", 0, 1),
        ("hang", 1, 1),
        ("send", 1, 0),
        ("fork", 1, 2),
        ("restart", 0, 0),
        ("resume", 1, 0),
        ("fork", 2, 0),
        ("inject", 0, 0),
        ("dispose", 0, 0),
        ("resume", 0, 0),
        ("resume", 2, 0),
        ("hang", 2, 0),
        ("fork", 0, 3),
        ("tool", 3, 0),
        ("restart", 0, 0),
        ("resume", 3, 0),
        ("send", 0, 0),
    ]
    world = await run_workload(f"sqlite:{tmp_path / 'chain.db'}", ops)
    lineage = {meta.id: meta.parent_session for meta in await list_sessions(world.url) if meta.id}
    assert len(lineage) >= 5
    forked = [sid for sid, parent in lineage.items() if parent is not None]
    assert len(forked) >= 3
    assert any(lineage[parent] is not None for parent in lineage.values() if parent)
