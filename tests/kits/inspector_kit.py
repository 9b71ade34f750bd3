"""What the inspector tests share: a store the demo workload (and the pressure workload,
whose compaction busts the cache) wrote, with a few sessions more — a cache story whose
system prompt, tools, prefix and surface change, a deeper fork family, a cancelled prompt
followed by the next one, a scripted cache story (below the minimum, a harmless drop, a
lost cache), a damaged session —
and a model whose call waits on a gate the test opens. Everything is real: the workloads'
runtime and simulator, a real SQLite file, the real loop."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import trio
from attrs import evolve, frozen

from actorloop.runtime import AgentOptions, CompactionConfig, Message, Tool
from actorloop.runtime.cli.orchestration import LOOKUP, make_sim, run_workload
from actorloop.runtime.cli.workload import find_workload
from actorloop.runtime.host.runtime import Runtime
from actorloop.runtime.log.request import Request
from actorloop.runtime.model.chunks import StreamChunk, TokenUsage
from actorloop.runtime.model.events import TurnEnd
from actorloop.runtime.providers.base import ModelInfo
from actorloop.runtime.providers.scripted import reply, tool_call
from actorloop.runtime.service.profiles import AppConfig
from actorloop.runtime.stores.urls import open_store
from actorloop.runtime.testing import ScriptedProvider

STORY = "cache-story"
DAMAGED = "damaged-example"
CANCELLED = "cancelled-prompt"
CACHE_NOTES = "cache-notes"
SKILLS = "Available skills:\n" + "\n".join(
    f"- skill-{index}: does thing number {index} carefully, with checks and a report" * 2
    for index in range(40)
)


def contributor(text: str) -> Any:
    """A session-prefix listener adding one opener message."""
    opener = Message.user(text)

    async def contribute(agent: Any, value: tuple[Message, ...], next: Any) -> Any:
        return (opener, *await next())

    return contribute


async def _grep(args: dict[str, Any], ctx: Any) -> str:
    return "grep: no matches"


GREP = Tool("grep", "Search the files.", {"type": "object"}, _grep)


@frozen
class DemoStore:
    """The populated store: its URL, the run ids of the two workloads, the fork family
    rooted at the demo's first worker, and the sessions added by hand."""

    url: str
    demo: str
    pressure: str
    family: tuple[str, ...]
    story: str = STORY
    damaged: str = DAMAGED
    cancelled: str = CANCELLED
    cache_notes: str = CACHE_NOTES

    def session(self, run: str, name: str) -> str:
        """A workload session's id (`coordinator`, `worker-0`, `worker-0-fork`, ...)."""
        return f"{run}-{name}"


async def _story(rt: Runtime) -> None:
    """A session whose cache is busted by a system change on resume, a new tool, a new
    prefix and a compaction, each after a warm turn."""
    options = AgentOptions(
        model="sim-1",
        system="You are the release assistant.\nAnswer briefly.",
        tools=(LOOKUP,),
        compaction=CompactionConfig(auto=False, retain_tokens=60),
    )
    agent = await rt.spawn(options, session_id=STORY)
    agent.on("agent/session-prefix", contributor(SKILLS))
    await agent.send("What is in the release? call:lookup release contents")
    await agent.send("And the risks?")
    await agent.dispose()
    options = evolve(options, system="You are the release assistant.\nAnswer with sources.")
    agent = await rt.resume(STORY, options)
    agent.on("agent/session-prefix", contributor(SKILLS))
    await agent.send("Resumed with a new system prompt.")
    await agent.send("Go on.")
    agent.reconfigure(tools=(LOOKUP, GREP))
    await agent.send("Now with grep.")
    await agent.send("Go on.")
    await agent.dispose()
    agent = await rt.resume(STORY, evolve(options, tools=(LOOKUP, GREP)))
    agent.on("agent/session-prefix", contributor(SKILLS + "\n- triage: sort the new issues"))
    await agent.send("Resumed with one skill more.")
    await agent.send("Go on.")
    await agent.compact()
    await agent.send("After the compaction.")
    await agent.dispose()


async def _family(rt: Runtime, worker: str) -> tuple[str, ...]:
    """Two more forks of the demo's first worker: one at its first turn's end, and a fork
    of that fork — with the workload's own fork, a family of four."""
    stored = await rt.store.load(worker, repair=False)
    first_end = next(e.seq for e in stored[1] if isinstance(e.data, TurnEnd))
    alt = await rt.fork(worker, first_end, f"{worker}-alt", AgentOptions(model="sim-1"))
    await alt.send("Take the other road from turn 1.")
    deeper = await rt.fork(alt.id, None, f"{worker}-alt-2")
    await deeper.send("And branch once more.")
    return (worker, f"{worker}-fork", alt.id, deeper.id)


async def _cancelled(rt: Runtime) -> None:
    """A prompt cancelled as its request went out, then the next prompt: the answer to the
    second sees both, two user messages in a row."""
    agent = await rt.spawn(AgentOptions(model="sim-1"), session_id=CANCELLED)
    await agent.send("First, a question that completes.")

    async def cancel_at_request(handle: Any, config: Any, next: Any) -> Any:
        handle.cancel("the user pressed stop")
        return await next()

    unsubscribe = agent.on("agent/request", cancel_at_request)
    try:
        await agent.send("A prompt the user cancelled.")
    finally:
        unsubscribe()
    await agent.send("The prompt after the cancelled one.")
    await agent.dispose()


def usage(read: int, write: int, fresh: int) -> TokenUsage:
    """A provider's usage report: cache read, cache write, uncached input."""
    return TokenUsage(input=fresh, output=5, cache_read=read, cache_write=write)


CACHE_NOTES_USAGE = (
    usage(0, 0, 300),  # below the providers' minimum: nothing can be cached
    usage(0, 1200, 100),  # the first write
    usage(1200, 0, 30),  # warm: 98%
    usage(1200, 0, 2000),  # new input grew, nothing cached lost: a harmless drop
    usage(100, 0, 1000),  # cached tokens lost with no change in the log
)
"""The usage a scripted provider reports for the cache-notes session's five requests."""


async def _cache_notes(url: str) -> None:
    provider = ScriptedProvider([reply(f"answer {i}", u) for i, u in enumerate(CACHE_NOTES_USAGE)])
    async with Runtime.open(store=url, provider=provider) as rt:
        agent = await rt.spawn(AgentOptions(model="m", system="Be brief."), session_id=CACHE_NOTES)
        for index in range(len(CACHE_NOTES_USAGE)):
            await agent.send(f"question {index}")
        await agent.dispose()


async def populate(url: str) -> DemoStore:
    """Run the demo and pressure workloads into `url`, then add the story, the family, a
    cancelled prompt and a session whose stored event is then damaged."""
    # the runtime a workload opens closes its store: one store object per workload
    demo = await run_workload(find_workload("demo"), open_store(url), make_sim(0, None))
    pressure = await run_workload(find_workload("pressure"), open_store(url), make_sim(0, 1400))
    async with Runtime.open(store=url, provider=make_sim(0, None)) as rt:
        await _story(rt)
        family = await _family(rt, f"{demo.run_id}-worker-0")
        await _cancelled(rt)
        broken = await rt.spawn(AgentOptions(model="sim-1"), session_id=DAMAGED)
        await broken.send("This session's log gets damaged on disk.")
    await _cache_notes(url)
    path = url.removeprefix("sqlite:")
    with sqlite3.connect(path) as db:
        db.execute(
            "UPDATE events SET body = ? WHERE session_id = ? AND seq = 1", (b'{"no', DAMAGED)
        )
    return DemoStore(url, demo.run_id, pressure.run_id, family)


def demo_store(directory: Path) -> DemoStore:
    """`populate` a fresh SQLite file in `directory` (from synchronous code)."""
    url = f"sqlite:{directory / 'inspector.db'}"
    return trio.run(populate, url)


class GateModel:
    """A model for live turns: `call:lookup` in a prompt asks for the lookup tool once;
    a prompt containing `hold` then waits until `release()` before it answers. `held` is
    set when a call has started waiting."""

    name = "gate"

    def __init__(self) -> None:
        self.held = trio.Event()
        self._open = trio.Event()

    def model_info(self, model: str) -> ModelInfo | None:
        return ModelInfo(200_000)

    def release(self) -> None:
        """Let every waiting call answer (and later ones not wait)."""
        self._open.set()

    async def stream(self, request: Request) -> AsyncIterator[StreamChunk]:
        last = request.history[-1]
        prompt = next((m.text for m in reversed(request.history) if m.text), "")
        if last.text and "call:lookup" in last.text:
            for chunk in tool_call(f"call-{len(request.history)}", "lookup", {"query": "gate"}):
                yield chunk
            return
        if "hold" in prompt and not self._open.is_set():
            self.held.set()
            await self._open.wait()
        for chunk in reply(f"Done: {prompt}"):
            yield chunk


def gate_config(model: GateModel, store: str) -> AppConfig:
    """One default profile over `model`, with the lookup tool and the skills prefix."""
    config = AppConfig(provider=model, model=None, store_url=store)  # type: ignore[arg-type]
    config.add_profile(
        "default",
        AgentOptions(model="gate-1", system="You watch the release.", tools=(LOOKUP,)),
        listeners={"agent/session-prefix": contributor("Available skills: search, review")},
    )
    return config
