"""runtime/log/cache_health.py: per request the cache buckets, what changed since the request
before (header fold, compaction), and why a cached fraction dropped — over logs the real
loop wrote: the simulator's provider-faithful prompt cache for the busts it models (system,
tools, prefix on resume, compaction), a scripted provider's chosen usage for the rest
(model switch, call config, new input, an unexplained loss, no usage, the tolerance)."""

from __future__ import annotations

from typing import Any

from attrs import evolve
from helpers import open_runtime

from actorloop.runtime import AgentOptions, CompactionConfig, Message, Tool
from actorloop.runtime.cli.orchestration import LOOKUP, make_sim
from actorloop.runtime.log.cache_health import DROP_TOLERANCE, RequestCache, cache_health
from actorloop.runtime.model.chunks import BlockEnd, BlockStart, Finish, TextDelta, TokenUsage
from actorloop.runtime.model.events import AssistantMessage
from actorloop.runtime.providers.scripted import reply
from actorloop.runtime.testing import ScriptedProvider

SKILLS = "Available skills:\n" + "\n".join(
    f"- skill-{index}: does thing number {index} carefully, with checks and a report" * 2
    for index in range(40)
)


def contributor(text: str) -> Any:
    opener = Message.user(text)

    async def contribute(agent: Any, value: tuple[Message, ...], next: Any) -> Any:
        return (opener, *await next())

    return contribute


async def _grep(args: dict[str, Any], ctx: Any) -> str:
    return "no matches"


GREP = Tool("grep", "Search the files.", {"type": "object"}, _grep)


def by_seq(requests: tuple[RequestCache, ...]) -> dict[int, RequestCache]:
    return {request.seq: request for request in requests}


def last(requests: tuple[RequestCache, ...]) -> RequestCache:
    return requests[-1]


async def test_the_simulated_cache_busts_are_found_with_their_reasons() -> None:
    sim = make_sim(0, None)
    base = AgentOptions(
        model="sim-1",
        system="You are careful.\nAnswer briefly.",
        tools=(LOOKUP,),
        compaction=CompactionConfig(auto=False, retain_tokens=60),
    )
    async with open_runtime(sim) as rt:

        async def phase(options: AgentOptions, prefix: str, message: str) -> RequestCache:
            """Resume with `options` and `prefix`, send `message`: the request after the
            change; a second turn then warms the cache again for the next phase."""
            agent = rt.get("story")
            if agent is not None:
                await agent.dispose()
            agent = await rt.resume("story", options)
            agent.on("agent/session-prefix", contributor(prefix))
            await agent.send(message)
            changed = last(cache_health(agent.session.events))
            await agent.send("Go on.")
            assert (last(cache_health(agent.session.events)).cached_fraction or 0) > 0.8
            return changed

        first = await rt.spawn(base, session_id="story")
        first.on("agent/session-prefix", contributor(SKILLS))
        await first.send("Tell me about the release.")
        await first.send("And the risks?")
        warm = cache_health(first.session.events)
        assert warm[0].previous_seq is None and warm[0].drop is None
        assert warm[0].changes == ()
        # the second turn reads back what the first wrote: the cache works as it should
        assert warm[-1].usage is not None and warm[-1].usage.cache_read > 0
        assert (warm[-1].cached_fraction or 0) > 0.8 and warm[-1].drop is None

        resumed = await phase(base, SKILLS, "Same settings after a resume.")
        assert resumed.changes == () and resumed.drop is None  # an unchanged resume stays warm

        system = await phase(
            evolve(base, system="You are careful.\nAnswer at length, with sources."),
            SKILLS,
            "Now with another system prompt.",
        )
        assert system.drop is not None and system.drop.cause == "changed"
        assert system.drop.before > 0.8 > system.drop.after
        [change] = system.changes
        assert change.kind == "system" and change.source == "request/header (resume)"
        assert change.detail == (
            "system prompt changed (kept 1 leading and 0 trailing lines, 1 new line) on resume"
        )

        tools = await phase(
            evolve(
                base,
                system="You are careful.\nAnswer at length, with sources.",
                tools=(LOOKUP, GREP),
            ),
            SKILLS,
            "Now with a second tool.",
        )
        assert tools.drop is not None and tools.drop.cause == "changed"
        assert [(c.kind, c.detail) for c in tools.changes] == [
            ("tools", "tools changed (+grep) on resume")
        ]

        same = evolve(
            base, system="You are careful.\nAnswer at length, with sources.", tools=(LOOKUP, GREP)
        )
        prefix = await phase(same, SKILLS + "\n- skill-new: the one added last", "New skills.")
        assert prefix.drop is not None and prefix.drop.cause == "changed"
        [change] = prefix.changes
        assert change.kind == "prefix" and change.seq < prefix.seq
        assert change.detail == "session prefix changed on resume (1 message → 1 message)"

        agent = rt.get("story")
        assert agent is not None
        await agent.send("One more before compacting.")
        assert (await agent.compact()).reason == "completed"
        await agent.send("After the compaction.")
        compacted = last(cache_health(agent.session.events))
        assert compacted.drop is not None and compacted.drop.cause == "changed"
        [change] = compacted.changes
        summary = agent.session.events[change.seq]
        assert change.kind == "compaction" and summary.type == "user/message"
        assert change.detail.startswith("compaction replaced events 1–")

        agent.reconfigure(model="sim-2")
        await agent.send("On another model.")
        switched = last(cache_health(agent.session.events))
        assert [(c.kind, c.detail, c.source) for c in switched.changes] == [
            ("model", "model sim-1 → sim-2", "request/header-delta")
        ]
        events = agent.session.events
    # every model request of the log is reported, in order, and `since` cuts the list only
    answers = [e.seq for e in events if isinstance(e.data, AssistantMessage)]
    assert [r.seq for r in cache_health(events)] == answers
    assert [r.seq for r in cache_health(events, since=answers[3])] == answers[3:]
    assert cache_health(events, since=answers[3])[0].previous_seq == answers[2]


def usage(read: int, write: int, fresh: int) -> TokenUsage:
    return TokenUsage(input=fresh, output=5, cache_read=read, cache_write=write)


UNREPORTED = (BlockStart(0, "text"), TextDelta(0, "quiet"), BlockEnd(0), Finish("stop"))


async def test_scripted_usage_shows_each_cause_and_the_model_and_config_reasons() -> None:
    provider = ScriptedProvider(
        [
            reply("one", usage(0, 1000, 100)),  # 0% cached
            reply("two", usage(1000, 50, 10)),  # 94%
            reply("three", usage(0, 1060, 10)),  # model switched: 0%
            reply("four", usage(1060, 0, 10)),  # 99%
            reply("five", usage(1060, 0, 2000)),  # more new input, nothing lost: 35%
            reply("six", usage(100, 0, 1000)),  # lost with no change: 9%
            reply("seven", usage(1100, 0, 10)),  # 99%
            reply("eight", usage(0, 1110, 10)),  # temperature changed: 0%
            UNREPORTED,  # no usage at all
            reply("ten", usage(0, 0, 100)),  # 0%, but the one before has no fraction
        ]
    )
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(AgentOptions(model="m", system="Be brief."), session_id="s")
        for text in ("a", "b"):
            await agent.send(text)
        agent.reconfigure(model="m2")
        for text in ("c", "d", "e", "f", "g"):
            await agent.send(text)
        agent.reconfigure(temperature=0.5)
        for text in ("h", "i", "j"):
            await agent.send(text)
        events = agent.session.events
    requests = cache_health(events)
    assert len(requests) == 10
    causes = [(r.drop.cause if r.drop else None) for r in requests]
    assert causes == [
        None,
        None,
        "changed",
        None,
        "new-input",
        "unexplained",
        None,
        "changed",
        None,
        None,
    ]
    model, config = requests[2], requests[7]
    assert [(c.kind, c.detail) for c in model.changes] == [("model", "model m → m2")]
    assert [(c.kind, c.detail) for c in config.changes] == [
        ("config", "call config changed (temperature)")
    ]
    assert model.drop is not None and model.drop.after == 0.0
    assert abs(model.drop.before - 1000 / 1060) < 1e-9
    assert events[model.changes[0].seq].type == "request/header-delta"
    assert requests[8].usage is None and requests[8].cached_fraction is None
    # gaps come from event times: the step's start minus the previous answer
    for request in requests[1:]:
        assert request.gap_ms is not None and request.gap_ms >= 0
    # a larger tolerance keeps only the drops bigger than it
    tolerant = cache_health(events, tolerance=0.6)
    assert [r.seq for r in tolerant if r.drop] == [requests[i].seq for i in (2, 4, 7)]
    assert DROP_TOLERANCE == 0.05


async def test_a_fork_child_compares_its_first_request_with_its_parents_last() -> None:
    provider = ScriptedProvider(
        [
            reply("p1", usage(0, 900, 10)),
            reply("p2", usage(900, 30, 10)),
            reply("c1", usage(0, 940, 10)),
        ]
    )
    async with open_runtime(provider) as rt:
        parent = await rt.spawn(AgentOptions(model="m", system="Be brief."), session_id="p")
        await parent.send("one")
        await parent.send("two")
        child = await rt.fork("p", child_id="c")
        await child.send("three")
        seed = child.session.meta.seed_length
        events = child.session.events
    assert seed is not None
    [own] = cache_health(events, since=seed)
    parent_answers = [e.seq for e in events[:seed] if isinstance(e.data, AssistantMessage)]
    assert own.previous_seq == parent_answers[-1]
    assert own.changes == ()
    # nothing in the log changed, yet the child read none of what the parent cached
    assert own.drop is not None and own.drop.cause == "unexplained"
