"""SimProvider: deterministic answers, tool calls on request, and the prompt-cache model."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from actorloop.runtime.errors import ProviderError
from actorloop.runtime.log.request import Request
from actorloop.runtime.model.chunks import (
    BlockEnd,
    BlockStart,
    ChunkAssembler,
    Finish,
    StreamChunk,
    TextDelta,
    TokenUsage,
    ToolCallDelta,
    UsageReport,
)
from actorloop.runtime.model.header import LlmCallConfig, ToolSchema
from actorloop.runtime.model.messages import Message, Text, ToolCall, ToolResult
from actorloop.runtime.providers.sim import SimMode, SimProvider

TOOLS = (ToolSchema("lookup", "Find a word", {"type": "object"}),)
SYSTEM = "You are a careful agent."
# About 1,750 tokens: well above the 1,024-token minimum on its own.
CATALOGUE = "".join(f"- skill {i}: does thing {i}\n" for i in range(250))
PREFIX = (Message.user("skill catalogue:\n" + CATALOGUE), Message.assistant("Catalogue noted."))


def make_request(
    *history: Message,
    prefix: tuple[Message, ...] = PREFIX,
    system: str = SYSTEM,
    session: str = "s1",
    **config: Any,
) -> Request:
    return Request(
        session,
        LlmCallConfig("sim-model", **config),
        system,
        TOOLS,
        prefix + history,
        prefix_length=len(prefix),
    )


async def run(sim: SimProvider, request: Request) -> list[StreamChunk]:
    return [chunk async for chunk in sim.stream(request)]


async def usage_of(sim: SimProvider, request: Request) -> TokenUsage:
    [report] = [chunk for chunk in await run(sim, request) if isinstance(chunk, UsageReport)]
    return report.usage


def conversation(turns: int) -> list[tuple[Message, ...]]:
    """History of each step of a conversation where the history only grows."""
    steps = []
    history: tuple[Message, ...] = ()
    for turn in range(turns):
        history = (*history, Message.user(f"question {turn}"))
        steps.append(history)
        history = (*history, Message.assistant(f"answer {turn}"))
    return steps


def billed(usage: TokenUsage) -> int:
    return usage.input + usage.cache_read + usage.cache_write


async def test_anthropic_multi_turn_reads_the_cache_after_the_first_request() -> None:
    sim = SimProvider("anthropic", output="ok")
    usages = []
    for history in conversation(6):
        request = make_request(*history)
        usage = await usage_of(sim, request)
        assert billed(usage) == sim.prompt_tokens(request)
        usages.append(usage)
    first, *rest = usages
    # Everything up to the history-tail breakpoint is written; nothing is read yet.
    assert first.cache_read == 0 and first.cache_write == billed(first) and first.input == 0
    for previous, usage in zip(usages, rest, strict=False):
        # Each step reads exactly what the previous step cached (its tail) and writes the rest.
        assert usage.cache_read == previous.cache_read + previous.cache_write
        assert usage.cache_write == billed(usage) - usage.cache_read
        assert usage.input == 0


async def test_openai_reads_whole_128_token_blocks_and_never_writes() -> None:
    sim = SimProvider("openai", output="ok")
    steps = conversation(4)
    usages = [await usage_of(sim, make_request(*history)) for history in steps]
    assert usages[0] == TokenUsage(input=billed(usages[0]), output=1)
    for history, usage in zip(steps, usages[1:], strict=False):
        previous = make_request(*history)
        previous_bytes = sum(len(segment.data) for segment in sim.segments(previous))
        assert usage.cache_read == previous_bytes // 4 // 128 * 128
        assert usage.cache_read >= 1024 and usage.cache_read % 128 == 0
        assert usage.cache_write == 0
        assert usage.input == billed(usage) - usage.cache_read


@pytest.mark.parametrize("mode", ["anthropic", "openai"])
async def test_one_changed_byte_in_prefix_or_system_misses(mode: SimMode) -> None:
    sim = SimProvider(mode, output="ok")
    history = (Message.user("question"),)
    await usage_of(sim, make_request(*history))
    warm = await usage_of(sim, make_request(*history))
    assert warm.cache_read == billed(warm) - warm.input > 0

    text = PREFIX[0].text
    changed = (Message.user(text[:500] + "X" + text[501:]), PREFIX[1])
    assert len(changed[0].text) == len(text)
    # Tools and system alone are below the minimum cacheable length: nothing survives.
    assert (await usage_of(sim, make_request(*history, prefix=changed))).cache_read == 0
    assert (await usage_of(sim, make_request(*history, system=SYSTEM + "!"))).cache_read == 0
    again = await usage_of(sim, make_request(*history))
    assert again.cache_read == warm.cache_read


async def test_cache_is_shared_across_sessions_at_the_prefix_breakpoint() -> None:
    sim = SimProvider("anthropic", output="ok")
    await usage_of(sim, make_request(Message.user("from a"), session="a"))
    other = await usage_of(sim, make_request(Message.user("from b"), session="b"))
    assert other.cache_read == sim.prompt_tokens(make_request())
    assert other.cache_write == billed(other) - other.cache_read


async def test_anthropic_lookback_is_twenty_blocks() -> None:
    sim = SimProvider("anthropic", output="ok")
    start = (Message.user("q0"),)
    await usage_of(sim, make_request(*start))
    burst = tuple(Message.user(f"m{i}") for i in range(25))
    # The old tail is 25 blocks behind the new tail: only the prefix breakpoint is found.
    far = await usage_of(sim, make_request(*start, *burst))
    assert far.cache_read == sim.prompt_tokens(make_request())
    near = await usage_of(sim, make_request(*start, *burst, Message.user("next")))
    assert near.cache_read == sim.prompt_tokens(make_request(*start, *burst))


@pytest.mark.parametrize("mode", ["anthropic", "openai"])
async def test_ttl_expires_on_the_trio_clock(mode: SimMode, autojump_clock: Any) -> None:
    sim = SimProvider(mode, output="ok", cache_ttl=300.0)
    request = make_request(Message.user("q"))
    assert (await usage_of(sim, request)).cache_read == 0
    await trio.sleep(299)
    assert (await usage_of(sim, request)).cache_read > 0
    await trio.sleep(299)  # the read above refreshed the entry
    assert (await usage_of(sim, request)).cache_read > 0
    await trio.sleep(301)
    assert (await usage_of(sim, request)).cache_read == 0


@pytest.mark.parametrize("mode", ["anthropic", "openai"])
async def test_short_prompts_are_never_cached(mode: SimMode) -> None:
    sim = SimProvider(mode, output="ok")
    request = make_request(Message.user("q"), prefix=())
    for _ in range(2):
        usage = await usage_of(sim, request)
        assert usage.cache_read == usage.cache_write == 0
        assert usage.input == sim.prompt_tokens(request) < 1024


async def test_new_entries_are_readable_once_the_answer_starts(autojump_clock: Any) -> None:
    sim = SimProvider("anthropic", output="ok", latency=2.0)
    request = make_request(Message.user("q"))
    usages: list[TokenUsage] = []

    async def call() -> None:
        usages.append(await usage_of(sim, request))

    started = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(call)
        nursery.start_soon(call)
    assert trio.current_time() - started == pytest.approx(2.0)
    # Both arrived before either answer began, so both missed and both wrote.
    assert [usage.cache_read for usage in usages] == [0, 0]
    assert (await usage_of(sim, request)).cache_read > 0


async def test_tool_call_on_marker_then_text_after_the_result() -> None:
    sim = SimProvider("anthropic", output="done")
    chunks = await run(sim, make_request(Message.user("please call:lookup now")))
    start = chunks[0]
    assert isinstance(start, BlockStart) and start.call_id is not None
    assert start.call_id.startswith("toolu_sim_") and start.name == "lookup"
    assert chunks[1:3] == [ToolCallDelta(0, "{"), ToolCallDelta(0, "}")]
    assert chunks[3] == BlockEnd(0) and chunks[-1] == Finish("tool-calls")
    history = (
        Message.user("please call:lookup now"),
        Message("assistant", (ToolCall(start.call_id, "lookup", "{}"),)),
        Message("user", (ToolResult(start.call_id, (Text("found"),)),)),
    )
    after = await run(sim, make_request(*history))
    assert after[:3] == [BlockStart(0, "text"), TextDelta(0, "done"), BlockEnd(0)]
    assert after[-1] == Finish("stop")
    # A marker naming a tool that is not offered is just text.
    unknown = await run(sim, make_request(Message.user("call:missing")))
    assert unknown[-1] == Finish("stop")


async def test_tool_policy_and_openai_ids() -> None:
    sim = SimProvider("openai", tool_policy=lambda request: [("lookup", {"q": "z"})])
    chunks = await run(sim, make_request(Message.user("anything")))
    assembler = ChunkAssembler()
    for chunk in chunks:
        assembler.feed(chunk)
    [call] = assembler.content()
    assert isinstance(call, ToolCall) and call.id.startswith("call_sim_")
    assert (call.name, call.arguments) == ("lookup", '{"q":"z"}')


async def test_answers_are_deterministic_per_seed() -> None:
    request = make_request(Message.user("hello"))
    first = await run(SimProvider(seed=7), request)
    again = await run(SimProvider(seed=7), request)
    other = await run(SimProvider(seed=8), request)
    assert first == again
    assert first != other
    text = "".join(chunk.text for chunk in first if isinstance(chunk, TextDelta))
    assert 20 <= len(text) // 4 <= 30


async def test_max_tokens_and_stop_sequences() -> None:
    sim = SimProvider(output="alpha beta STOP gamma " * 10)
    capped = await run(sim, make_request(Message.user("q"), max_tokens=3))
    text = "".join(chunk.text for chunk in capped if isinstance(chunk, TextDelta))
    assert text == "alpha beta S" and capped[-1] == Finish("max-tokens")
    stopped = await run(sim, make_request(Message.user("q"), stop=("STOP",)))
    text = "".join(chunk.text for chunk in stopped if isinstance(chunk, TextDelta))
    assert text == "alpha beta " and stopped[-1] == Finish("stop")


async def test_context_window_exceeded() -> None:
    sim = SimProvider(context_window=1000)
    with pytest.raises(ProviderError) as caught:
        await run(sim, make_request(Message.user("q")))
    assert caught.value.code == "CONTEXT_WINDOW_EXCEEDED"
    assert sim.model_info("sim-model") is not None


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="mode"):
        SimProvider("gemini")  # type: ignore[arg-type]


async def test_reading_a_longer_prefix_keeps_the_prefix_entry_alive(autojump_clock: Any) -> None:
    sim = SimProvider("anthropic", output="ok")
    steps = conversation(4)
    for history in steps:
        await usage_of(sim, make_request(*history))
        await trio.sleep(200)
    # 800 s after the prefix breakpoint was written, a rewritten history (as after a
    # compaction) still reads it: every tail read refreshed it.
    rewritten = await usage_of(sim, make_request(Message.user("summary"), Message.user("q")))
    assert rewritten.cache_read == sim.prompt_tokens(make_request())


@pytest.mark.parametrize(
    ("mode", "option"),
    [("anthropic", {"temperature": 0.2}), ("openai", {"cache_ttl": "1h"})],
)
async def test_the_simulator_refuses_what_its_real_adapter_refuses(
    mode: SimMode, option: dict[str, Any]
) -> None:
    request = Request("s", LlmCallConfig("m", **option), None, (), (Message.user("hi"),))
    with pytest.raises(ProviderError) as caught:
        await run(SimProvider(mode), request)
    assert caught.value.code == "INVALID_REQUEST"
