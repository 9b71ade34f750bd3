"""runtime/log/rebuild.py: the request an assistant/message answered, rebuilt from the log alone,
is byte for byte the request the loop sent (as the provider received it) — across tool
steps, steering, a session prefix, a resume with a new prefix, and a fork."""

from __future__ import annotations

import pytest
from attrs import evolve
from helpers import open_runtime

from actorloop.codecs.converter import canonical_bytes
from actorloop.runtime import AgentOptions, Message, Tool
from actorloop.runtime.errors import ErrorCode, RequestRebuildError, VerificationFailed
from actorloop.runtime.log.rebuild import check_digest, rebuild_request
from actorloop.runtime.log.request import Request
from actorloop.runtime.model.events import AssistantMessage, SessionEvent
from actorloop.runtime.providers.scripted import reply, tool_call
from actorloop.runtime.testing import ScriptedProvider


async def _echo(args: dict[str, object], ctx: object) -> str:
    return f"echoed {args}"


ECHO = Tool("echo", "Echo the arguments.", {"type": "object"}, _echo)


def answers(events: tuple[SessionEvent, ...]) -> list[int]:
    return [e.seq for e in events if isinstance(e.data, AssistantMessage)]


def same(rebuilt: Request, sent: Request) -> bool:
    return canonical_bytes(rebuilt) == canonical_bytes(sent)


def prefix(text: str) -> object:
    opener = Message.user(text)

    async def contribute(agent: object, value: tuple[Message, ...], next: object) -> object:
        return (opener, *await next())  # type: ignore[operator]

    return contribute


async def test_every_answer_rebuilds_the_request_the_provider_received() -> None:
    provider = ScriptedProvider(
        [
            tool_call("c1", "echo", {"x": 1}, text="let me check"),
            reply("done one"),
            tool_call("c2", "echo", {"x": 2}),
            reply("done two"),
        ]
    )
    async with open_runtime(provider) as rt:
        rt.on("agent/session-prefix", prefix("opener A"))
        agent = await rt.spawn(AgentOptions(model="m", system="sys", tools=(ECHO,)))
        await agent.send("first")
        agent.inject("some context", source="ci")
        await agent.send("second")
        events = agent.session.events
    seqs = answers(events)
    assert len(seqs) == len(provider.requests) == 4
    for seq, sent in zip(seqs, provider.requests, strict=True):
        rebuilt = check_digest(rebuild_request(agent.id, events, seq))
        assert rebuilt.verified
        assert same(rebuilt.request, sent)
        assert rebuilt.prefix == (Message.user("opener A"),)
        assert rebuilt.system == "sys" and [t.name for t in rebuilt.tools] == ["echo"]
        assert events[rebuilt.step_start_seq].type == "step/start"
        assert events[rebuilt.snapshot_seq].type == "request/header"
        assert rebuilt.snapshot_seq <= rebuilt.header_seq < seq
    # The second step of turn 1 sees the tool result; turn 2 sees the injected context.
    second = rebuild_request(agent.id, events, seqs[1])
    assert second.turn == 1 and second.step == 2
    assert second.history[-1].content[0].tool_call_id == "c1"  # type: ignore[union-attr]
    assert "some context" in [m.text for m in rebuild_request(agent.id, events, seqs[2]).history]


async def test_steering_and_a_reconfigured_step_are_in_the_rebuilt_request() -> None:
    provider = ScriptedProvider([tool_call("c1", "echo", {}), reply("steered answer")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(AgentOptions(model="m", tools=(ECHO,)))

        async def steer_on_tool(_agent: object, value: object, next: object) -> object:
            agent.steer("actually, be terse")
            return await next()  # type: ignore[operator]

        agent.on("tools/pre-execute", steer_on_tool)

        async def hotter(_agent: object, config: object, next: object) -> object:
            return evolve(await next(), temperature=0.5)  # type: ignore[operator, type-var]

        agent.on("agent/request", hotter)
        await agent.send("go")
        events = agent.session.events
    seqs = answers(events)
    rebuilt = [rebuild_request(agent.id, events, seq) for seq in seqs]
    for one, sent in zip(rebuilt, provider.requests, strict=True):
        assert same(one.request, sent) and one.verified
        assert one.config.temperature == 0.5
    assert "actually, be terse" in [m.text for m in rebuilt[1].history]


async def test_a_resume_with_another_prefix_and_a_fork_rebuild_their_own_requests(
    tmp_path: object,
) -> None:
    store = f"sqlite:{tmp_path}/s.db"
    first = ScriptedProvider([reply("one")])
    async with open_runtime(first, store=store) as rt:
        rt.on("agent/session-prefix", prefix("opener A"))
        agent = await rt.spawn(AgentOptions(model="m", system="s"), session_id="src")
        await agent.send("hello")
    second = ScriptedProvider([reply("two"), reply("forked")])
    async with open_runtime(second, store=store) as rt:
        rt.on("agent/session-prefix", prefix("opener B"))
        again = await rt.resume("src", AgentOptions(model="m", system="s2"))
        await again.send("again")
        child = await rt.fork("src", child_id="kid")
        await child.send("in the fork")
        parent_events, child_events = again.session.events, child.session.events
    old, new = (rebuild_request("src", parent_events, seq) for seq in answers(parent_events))
    assert old.prefix == (Message.user("opener A"),) and old.system == "s"
    assert new.prefix == (Message.user("opener B"),) and new.system == "s2"
    assert parent_events[new.snapshot_seq].data.reason == "resume"  # type: ignore[union-attr]
    assert same(new.request, second.requests[0]) and new.verified
    forked = rebuild_request("kid", child_events, answers(child_events)[-1])
    assert same(forked.request, second.requests[1]) and forked.verified
    assert forked.request.session_id == "kid"


async def test_a_tampered_log_fails_the_digest_check() -> None:
    provider = ScriptedProvider([reply("fine")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(AgentOptions(model="m", system="original"))
        await agent.send("the question")
        events = list(agent.session.events)
    user = next(i for i, e in enumerate(events) if e.type == "user/message")
    data = events[user].data
    events[user] = evolve(events[user], data=evolve(data, content=(Message.user("forged").content)))
    rebuilt = rebuild_request(agent.id, tuple(events), answers(tuple(events))[0])
    assert not rebuilt.verified
    with pytest.raises(VerificationFailed) as failure:
        check_digest(rebuilt)
    assert rebuilt.digest in str(failure.value) and rebuilt.recorded_digest in str(failure.value)


async def test_only_an_assistant_message_has_a_request() -> None:
    provider = ScriptedProvider([reply("x")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(AgentOptions(model="m"))
        await agent.send("a")
        events = agent.session.events
    with pytest.raises(RequestRebuildError) as missing:
        rebuild_request(agent.id, events, len(events))
    assert missing.value.code == ErrorCode.EVENT_NOT_FOUND
    with pytest.raises(RequestRebuildError) as other:
        rebuild_request(agent.id, events, 0)
    assert other.value.code == ErrorCode.NOT_A_MODEL_ANSWER
    assert "turn/start" in str(other.value)
