"""Property: for the same script, an asyncio caller (through `aio`) and a trio caller see the
same log — every event's type, seq, data and provenance (not its time) — and the same
`TurnResult`s. One driver runs both: the two APIs have the same names and shapes."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import trio
from attrs import frozen
from hypothesis import given, settings
from hypothesis import strategies as st

from actorloop.runtime import (
    AgentOptions,
    ProviderError,
    Runtime,
    SessionEvent,
    Tool,
    TurnResult,
    aio,
)
from actorloop.runtime.log.request import Request
from actorloop.runtime.log.verify import verify_log
from actorloop.runtime.providers.scripted import ScriptEntry
from actorloop.runtime.testing import ScriptedProvider, max_tokens_reply, reply, tool_call


@frozen
class Send:
    text: str
    answers: tuple[str, ...]
    """What the model does at each step: `reply`, `tool`, `error` or `max`."""
    cancel_at: int | None
    """`agent.cancel()` from a `session/event` listener at this offset into the turn."""


@frozen
class Inject:
    text: str


def _overloaded(request: Request) -> Any:
    raise ProviderError("the model is down", "OVERLOADED")


def entries(script: tuple[Send | Inject, ...]) -> list[ScriptEntry]:
    out: list[ScriptEntry] = []
    for op in script:
        if isinstance(op, Send):
            for n, answer in enumerate(op.answers):
                if answer == "reply":
                    out.append(reply(f"answer to {op.text}"))
                elif answer == "tool":
                    out.append(tool_call(f"{op.text}-{n}", "echo", {"n": n}, text="calling"))
                elif answer == "error":
                    out.append(_overloaded)
                else:
                    out.append(max_tokens_reply("cut off"))
    return out


words = st.text(alphabet="abcdefgh", min_size=1, max_size=6)
answers = st.tuples(
    st.integers(min_value=0, max_value=3).map(lambda n: ("tool",) * n),
    st.sampled_from(["reply", "reply", "error", "max"]),
).map(lambda parts: (*parts[0], parts[1]))
sends = st.builds(Send, words, answers, st.none() | st.integers(min_value=0, max_value=30))
scripts = st.lists(sends | st.builds(Inject, words), min_size=1, max_size=5).map(tuple)


async def drive(rt: Any, options: AgentOptions, script: tuple[Send | Inject, ...]) -> Any:
    """The script against `rt` — a trio `Runtime` or an `aio.Runtime`, the calls are alike."""
    agent = await rt.spawn(options, session_id="prop")
    results: list[TurnResult] = []
    for op in script:
        if isinstance(op, Inject):
            agent.inject(op.text, "notes")
            await agent.wait_idle()
            continue
        unsubscribe = None
        if op.cancel_at is not None:
            at = len(agent.session) + op.cancel_at

            def cancel_at(handle: Any, event: SessionEvent, at: int = at) -> None:
                if event.seq == at:
                    handle.cancel("scripted cancel")

            unsubscribe = agent.on("session/event", cancel_at)
        results.append(await agent.send(op.text))
        if unsubscribe is not None:
            unsubscribe()
    await agent.dispose()
    return tuple(results), agent.session


def untimed(events: tuple[SessionEvent, ...] | Any) -> list[tuple[Any, ...]]:
    return [(e.type, e.seq, e.data, e.source_event_seqs, e.surface_op, e.ignorable) for e in events]


async def trio_echo(args: dict[str, Any], ctx: Any) -> str:
    await trio.lowlevel.checkpoint()
    return json.dumps(args)


async def asyncio_echo(args: dict[str, Any], ctx: Any) -> str:
    await asyncio.sleep(0)
    return json.dumps(args)


def options_with(execute: Any) -> AgentOptions:
    return AgentOptions(model="m", tools=(Tool("echo", "echoes", {"type": "object"}, execute),))


def run_with_trio(script: tuple[Send | Inject, ...]) -> Any:
    async def main() -> Any:
        provider = ScriptedProvider(entries(script))
        async with Runtime.open(provider=provider, dev_invariants=True) as rt:
            return await drive(rt, options_with(trio_echo), script)

    return trio.run(main)


def run_with_asyncio(script: tuple[Send | Inject, ...]) -> Any:
    async def main() -> Any:
        provider = ScriptedProvider(entries(script))
        async with aio.Runtime.open(provider=provider, dev_invariants=True) as rt:
            tool = aio.asyncio_tool(options_with(asyncio_echo).tools[0])
            return await drive(rt, AgentOptions(model="m", tools=(tool,)), script)

    return asyncio.run(main())


@settings(max_examples=60, deadline=None)
@given(scripts)
def test_asyncio_and_trio_callers_see_the_same_log_and_results(
    script: tuple[Send | Inject, ...],
) -> None:
    trio_results, trio_session = run_with_trio(script)
    aio_results, aio_session = run_with_asyncio(script)
    assert aio_results == trio_results
    assert untimed(aio_session.events) == untimed(trio_session.events)
    verify_log(aio_session.meta, aio_session.events)
