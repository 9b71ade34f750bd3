"""Reconstructability (docs/spec/session-log.md §6–§8): every request the loop sent is a pure
function of the log. A multi-turn session with tools, steering, injections, a system prompt
that changes (system-prompt/assemble), a config that changes (agent/request), a resumed
instance and a fork is replayed request by request from a brand-new Session; the recorded
request digests verify offline, and tampering with one stored message is caught at the
right seq."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import attrs
import orjson
import pytest
from helpers import open_runtime

from actorloop.codecs.converter import canonical_bytes
from actorloop.codecs.rows import event_crc
from actorloop.runtime import (
    Agent,
    AgentOptions,
    ContextItem,
    LlmCallConfig,
    Message,
    Request,
    Session,
    SessionEvent,
    Text,
    Tool,
)
from actorloop.runtime.errors import SessionCorruptError
from actorloop.runtime.log.header_algebra import fold
from actorloop.runtime.log.request import digest_of
from actorloop.runtime.log.verify import VerificationFailed, verify_log
from actorloop.runtime.stores.loading import load_session
from actorloop.runtime.stores.urls import open_store
from actorloop.runtime.testing import ScriptedProvider, reply, tool_call, tool_calls


async def _echo(args: dict[str, Any], ctx: Any) -> str:
    if args.get("steer"):
        ctx.agent.steer(f"steer from {ctx.call_id}")
    return f"echo {args.get('x', '')}"


async def _lookup(args: dict[str, Any], ctx: Any) -> str:
    ctx.agent.inject(f"side note from {ctx.call_id}", source="lookup")
    return "looked up"


TOOLS = (
    Tool("echo", "Echo x", {"type": "object", "properties": {"x": {"type": "string"}}}, _echo),
    Tool("lookup", "Look something up", {"type": "object"}, _lookup),
)
OPTIONS = AgentOptions(model="m", system="You are the base.", tools=TOOLS)


class Plugins:
    """Listeners whose output changes over the session, keyed on how often they ran."""

    def __init__(self) -> None:
        self.instances = 0
        self.assembles = 0
        self.configs = 0
        self.pre_steps = 0

    async def prefix(self, agent: Agent, value: Any, next: Any) -> Any:
        self.instances += 1
        opener = Message.user(f"workspace baseline v{self.instances}")
        return (opener, *await next())

    async def assemble(self, agent: Agent, value: Any, next: Any) -> Any:
        self.assembles += 1
        sections: tuple[str, ...] = ()
        if self.assembles >= 3:
            sections = ("Rule A: be brief.",)
        if self.assembles >= 6:
            sections = ("Rule A: be brief.", "Rule B: cite tools.")
        if self.assembles >= 9:
            sections = ("Rule B: cite tools.",)
        return (*await next(), *sections)

    async def request(self, agent: Agent, value: LlmCallConfig, next: Any) -> Any:
        self.configs += 1
        config = await next()
        if self.configs == 2:
            agent.inject("[late context]", source="late")  # joins the next request
        if self.configs >= 4:
            config = attrs.evolve(config, temperature=0.5)
        if self.configs >= 7:
            config = attrs.evolve(config, model="m2", max_tokens=256, stop=("END",))
        return config

    async def pre_step(self, agent: Agent, value: Any) -> None:
        self.pre_steps += 1
        if self.pre_steps in (2, 5):
            agent.inject(f"pre-step note {self.pre_steps}", source="pre", meta={"n": 1})

    async def post_execute(self, agent: Agent, value: Any, next: Any) -> Any:
        out = await next()
        if value.name == "echo":
            return attrs.evolve(out, additional_context=(ContextItem(f"after {value.call_id}"),))
        return out

    def install(self, agent: Agent) -> None:
        agent.on("system-prompt/assemble", self.assemble)
        agent.on("agent/request", self.request)
        agent.on("agent/pre-step", self.pre_step)
        agent.on("tools/post-execute", self.post_execute)


def own_step_starts(session: Session) -> list[int]:
    """Seqs of the step/starts this session's own loop instances opened (not the seed's)."""
    first = session.meta.seed_length or 0
    return [e.seq for e in session.events if e.type == "step/start" and e.seq >= first]


def header_window(events: tuple[SessionEvent, ...], start: int) -> tuple[int, list[int]]:
    """(index of the step's first chunk, seqs of header events between step/start and it)."""
    headers: list[int] = []
    index = start + 1
    while events[index].type != "assistant/chunk":
        if events[index].type in ("request/header", "request/header-delta"):
            headers.append(index)
        assert events[index].type not in ("step/start", "step/end", "turn/end")
        index += 1
    return index, headers


def check_requests(session: Session, requests: list[Request]) -> None:
    """Every request of `session` is rebuilt from the log alone (docs/spec/session-log.md §8.2)."""
    events = session.events
    starts = own_step_starts(session)
    assert len(starts) == len(requests) > 0
    answers: dict[tuple[int, int], Any] = {}
    for event in events[session.meta.seed_length or 0 :]:
        data: Any = event.data
        if event.type == "assistant/message":
            answers[(data.turn, data.step)] = data
    for request, start in zip(requests, starts, strict=True):
        assert request.session_id == session.id
        # A brand-new session seeded with the log up to this step/start derives the history.
        fresh = Session.from_events("fresh", events[:start])
        rebuilt = fresh.derive_messages()
        assert canonical_bytes(request.history) == canonical_bytes(rebuilt), start
        assert request.history == rebuilt
        # The header fold as of the step's header event is the request's header part.
        first_chunk, headers = header_window(events, start)
        assert len(headers) <= 1
        header = fold(events[: headers[0] + 1] if headers else events[:first_chunk])
        assert header is not None
        assert header == fold(events[:first_chunk])
        assert request.config == header.config
        assert request.system == header.system
        assert request.tools == (header.tools or ())
        assert request.prefix == (header.message_prefix or ())
        assert request.messages == request.prefix + rebuilt
        # The digest on the answer is the digest of exactly this request.
        step: Any = events[start].data
        answer = answers[(step.turn, step.step)]
        assert answer.request_digest == digest_of(header, request.prefix, request.history)


async def run_session(store: str = "memory:") -> dict[str, Any]:
    plugins = Plugins()
    provider = ScriptedProvider(
        [
            # turn 1: a tool step (its post-execute adds context), then an answer
            tool_call("c1", "echo", {"x": "one"}),
            reply("turn one done"),
            # turn 2: two calls in one step (one steers, one injects), then an answer
            tool_calls(("c2", "echo", {"x": "two", "steer": True}), ("c3", "lookup", {})),
            reply("turn two done"),
            # turn 3: a plain answer
            reply("turn three done"),
            # turn 4: a tool step across a config change, then an answer
            tool_call("c4", "echo", {"x": "four"}, text="let me check"),
            reply("turn four done"),
            # resumed instance, turn 6: tool step + answer
            tool_call("c5", "lookup", {}),
            reply("resumed done"),
            # forked child, turn 7
            reply("child done"),
        ]
    )
    async with open_runtime(provider, store=store) as rt:
        rt.on("agent/session-prefix", plugins.prefix)
        agent = await rt.spawn(OPTIONS)
        plugins.install(agent)
        for text in ("first", "second", "third", "fourth"):
            assert (await agent.send(text)).reason == "completed"
        agent.inject("idle fact", source="watcher")  # a one-shot turn (turn 5)
        await agent.wait_idle()
        session_id = agent.id
        await agent.dispose()

        resumed = await rt.resume(session_id, OPTIONS)
        plugins.install(resumed)
        assert (await resumed.send("after resume")).reason == "completed"

        child = await rt.fork(session_id)
        plugins.install(child)
        assert (await child.send("in the child")).reason == "completed"

        assert rt.invariant_checks == len(provider.requests)
        return {
            "provider": provider,
            "parent": resumed.session,
            "child": child.session,
            "plugins": plugins,
        }


async def test_every_request_is_rebuilt_from_a_fresh_replay() -> None:
    run = await run_session()
    provider: ScriptedProvider = run["provider"]
    parent: Session = run["parent"]
    child: Session = run["child"]
    parent_requests = [r for r in provider.requests if r.session_id == parent.id]
    child_requests = [r for r in provider.requests if r.session_id == child.id]
    assert len(parent_requests) == 9 and len(child_requests) == 1
    check_requests(parent, parent_requests)
    check_requests(child, child_requests)

    # The session really exercised what the rebuild must follow.
    assert len({r.system for r in parent_requests}) >= 3
    assert len({canonical_bytes(r.config) for r in parent_requests}) >= 3
    assert {r.model for r in parent_requests} == {"m", "m2"}
    assert len({r.prefix for r in provider.requests}) == 3  # one per loop instance
    header_events = [
        (e.type, getattr(e.data, "reason", None))
        for e in parent.events
        if e.type.startswith("request/header")
    ]
    assert header_events[0] == ("request/header", "initial")
    assert ("request/header", "resume") in header_events
    assert ("request/header-delta", None) in header_events
    deltas = [e.data for e in parent.events if e.type == "request/header-delta"]
    assert any(d.system is not None for d in deltas)  # type: ignore[union-attr]
    assert any(d.config is not None for d in deltas)  # type: ignore[union-attr]
    assert all(d.message_prefix is None for d in deltas)  # type: ignore[union-attr]
    kinds = {e.type for e in parent.events}
    assert {"steering/message", "context/message", "tool/call", "tool/result"} <= kinds
    # Appends made at agent/request join the next request, never their own.
    late = Message.user("[late context]")
    assert late not in parent_requests[1].messages and late in parent_requests[2].messages
    # The prefix is request-only: never derived, never in a user/message.
    for request in provider.requests:
        assert request.prefix and not set(request.prefix) & set(request.history)


async def test_recorded_digests_verify_offline() -> None:
    run = await run_session()
    for session in (run["parent"], run["child"]):
        report = verify_log(session.meta, session.events)
        answers = [e for e in session.events if e.type == "assistant/message"]
        assert report.requests_checked == len(answers) and report.requests_without_digest == 0
        assert report.turns == session.last_turn


def _tampered(event: SessionEvent, text: str) -> SessionEvent:
    data: Any = event.data
    return attrs.evolve(event, data=attrs.evolve(data, content=(Text(text),)))


def _first_answer_after(events: tuple[SessionEvent, ...], seq: int, *, step_start: bool) -> int:
    """The first assistant/message whose request includes what is at `seq`: for history
    that is the first step opened after it; for a header event, the first answer after it."""
    for event in events[seq + 1 :]:
        if step_start and event.type == "step/start":
            step_start = False
        elif not step_start and event.type == "assistant/message":
            return event.seq
    raise AssertionError(f"nothing after seq {seq} covers it")


@pytest.mark.parametrize(
    "kind", ["user/message", "tool/result", "context/message", "steering/message", "assistant"]
)
async def test_tampering_a_message_fails_verification_at_the_covering_answer(kind: str) -> None:
    run = await run_session()
    session: Session = run["parent"]
    events = session.events
    wanted = "assistant/message" if kind == "assistant" else kind
    target = next(
        e
        for e in events
        if e.type == wanted and (kind != "assistant" or e.data.content)  # type: ignore[union-attr]
    )
    forged = list(events)
    forged[target.seq] = _tampered(target, "forged")
    if kind == "assistant":
        # An answer is pinned by its own chunks before any later digest is reached.
        expected, problem = target.seq, "diverges from its chunks"
    else:
        expected = _first_answer_after(events, target.seq, step_start=True)
        problem = "request digest mismatch"
    with pytest.raises(VerificationFailed, match=problem) as caught:
        verify_log(session.meta, forged)
    assert caught.value.seq == expected
    assert str(caught.value).startswith(f"event {expected}:")
    verify_log(session.meta, events)  # the untouched log still verifies


async def test_tampering_a_header_or_a_digest_fails_verification() -> None:
    run = await run_session()
    session: Session = run["parent"]
    events = session.events
    header_event = next(e for e in events if e.type == "request/header")
    data: Any = header_event.data
    forged = list(events)
    forged[header_event.seq] = attrs.evolve(
        header_event, data=attrs.evolve(data, header=attrs.evolve(data.header, system="evil"))
    )
    with pytest.raises(VerificationFailed) as caught:
        verify_log(session.meta, forged)
    assert caught.value.seq == _first_answer_after(events, header_event.seq, step_start=False)

    answer = [e for e in events if e.type == "assistant/message"][-1]
    answer_data: Any = answer.data
    digest = answer_data.request_digest
    forged = list(events)
    flipped = ("0" if digest[0] != "0" else "1") + digest[1:]
    forged[answer.seq] = attrs.evolve(
        answer, data=attrs.evolve(answer_data, request_digest=flipped)
    )
    with pytest.raises(VerificationFailed) as caught:
        verify_log(session.meta, forged)
    assert caught.value.seq == answer.seq


async def test_tampering_a_stored_row_fails_verification(tmp_path: Path) -> None:
    database = tmp_path / "sessions.db"
    run = await run_session(f"sqlite:{database}")
    session: Session = run["parent"]
    target = [e for e in session.events if e.type == "user/message"][1]
    expected = _first_answer_after(session.events, target.seq, step_start=True)

    store = open_store(f"sqlite:{database}")
    try:
        stored = await load_session(store, session.id)
    finally:
        await store.close()
    assert [(e.seq, e.type) for e in stored.events] == [(e.seq, e.type) for e in session.events]
    verify_log(stored.meta, stored.events)

    with sqlite3.connect(database) as connection:
        (body,) = connection.execute(
            "SELECT body FROM events WHERE session_id = ? AND seq = ?", (session.id, target.seq)
        ).fetchone()
        record = orjson.loads(body)
        assert record["data"]["content"] == [{"type": "text", "text": "second"}]
        record["data"]["content"] = [{"type": "text", "text": "second (edited)"}]
        edited = orjson.dumps(record, option=orjson.OPT_SORT_KEYS)
        connection.execute(
            "UPDATE events SET body = ? WHERE session_id = ? AND seq = ?",
            (edited, session.id, target.seq),
        )
    connection.close()

    # The row's checksum no longer matches: the load itself refuses it.
    store = open_store(f"sqlite:{database}")
    try:
        with pytest.raises(SessionCorruptError, match=f"seq {target.seq}: row checksum"):
            await load_session(store, session.id)
    finally:
        await store.close()
    # A forger who rewrites the checksum too is caught by the request digests.
    with closing(sqlite3.connect(database)) as connection, connection:
        connection.execute(
            "UPDATE events SET crc = ? WHERE session_id = ? AND seq = ?",
            (event_crc(session.id, target.seq, edited), session.id, target.seq),
        )
    store = open_store(f"sqlite:{database}")
    try:
        tampered = await load_session(store, session.id)
    finally:
        await store.close()
    with pytest.raises(VerificationFailed, match="request digest mismatch") as caught:
        verify_log(tampered.meta, tampered.events)
    assert caught.value.seq == expected
