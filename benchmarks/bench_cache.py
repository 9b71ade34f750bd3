"""Prompt-cache benchmark: where the session prefix sits decides how much input is cached.

A 50-turn session with a 4,000-token prefix runs through the SimProvider's Anthropic and
OpenAI cache models (see `actorloop.runtime.providers.sim`) under three placements:

* `session-prefix` — actorloop: request-only prefix right after the system slot
  (`Request.prefix_length`), history after it;
* `prefix-after-history` — (a) the prefix recomputed and appended after the history on
  every step (given its best breakpoint, at the history end, in Anthropic mode);
* `prefix-in-history` — (b) the prefix injected once as the first user message of durable
  history, so each compaction rewrites it inside the summary.

All three share the same history, including a compaction every 10 turns that keeps the last
4 messages behind a summary. Run: `python -m benchmarks.bench_cache`.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import trio
import trio.testing
from attrs import frozen

from actorloop.runtime.log.request import Request
from actorloop.runtime.model.chunks import TextDelta, TokenUsage, UsageReport
from actorloop.runtime.model.header import LlmCallConfig, ToolSchema
from actorloop.runtime.model.messages import Message
from actorloop.runtime.providers.sim import SimMode, SimProvider
from benchmarks.filler import filler

TURNS = 50
PREFIX_TOKENS = 4_000
COMPACT_EVERY = 10
RETAIN_MESSAGES = 4
TURN_GAP_SECONDS = 30.0
OUTPUT_TOKENS = 80
SUMMARY_TOKENS = 400
MODES: tuple[SimMode, ...] = ("anthropic", "openai")
# Input price multipliers relative to uncached input (Anthropic: 5-minute writes 1.25×,
# reads 0.1×; OpenAI: cached input 0.5× as for gpt-4o — newer models discount more).
PRICES = {
    "anthropic": {"input": 1.0, "cache_read": 0.1, "cache_write": 1.25},
    "openai": {"input": 1.0, "cache_read": 0.5, "cache_write": 1.0},
}
RESULTS = Path(__file__).parent / "results"

SYSTEM = (
    "You are a coding agent working in a repository. Read files before editing them, keep "
    "changes small, run the tests after each change, and explain what you did briefly. "
) * 4
TOOLS = (
    ToolSchema(
        "read_file",
        "Read a file of the workspace",
        {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    ),
    ToolSchema(
        "write_file",
        "Replace a file's content",
        {
            "type": "object",
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"],
        },
    ),
    ToolSchema("run_tests", "Run the test suite", {"type": "object", "properties": {}}),
)


def _prefix_text() -> str:
    """A skill catalogue of PREFIX_TOKENS tokens by the chars/4 estimate."""
    rng = random.Random(4000)
    lines = []
    size = 0
    index = 0
    while size < PREFIX_TOKENS * 4:
        line = f"- skill {index:03d}: {filler(rng, 60)}\n"
        lines.append(line)
        size += len(line)
        index += 1
    return "".join(lines)[: PREFIX_TOKENS * 4]


PREFIX = Message.user(_prefix_text())


def _user_text(turn: int) -> str:
    rng = random.Random(turn)
    return f"Turn {turn}: " + filler(rng, rng.randrange(160, 480))


def _summary(count: int, turn: int) -> str:
    rng = random.Random(10_000 + count)
    head = f"Summary {count} of the conversation up to turn {turn}: "
    return head + filler(rng, SUMMARY_TOKENS * 4 - len(head))


@frozen
class Strategy:
    name: str
    describe: str
    build: Callable[[tuple[Message, ...]], Request]
    rewrite: Callable[[tuple[Message, ...], int, int], tuple[Message, ...]]
    initial: tuple[Message, ...]


def _request(messages: Sequence[Message], prefix_length: int) -> Request:
    return Request(
        "bench-session",
        LlmCallConfig("sim-model", max_tokens=1024),
        SYSTEM,
        TOOLS,
        tuple(messages),
        prefix_length=prefix_length,
    )


def _compact(history: tuple[Message, ...], count: int, turn: int) -> tuple[Message, ...]:
    return (Message.user(_summary(count, turn)), *history[-RETAIN_MESSAGES:])


def _compact_with_prefix(
    history: tuple[Message, ...], count: int, turn: int
) -> tuple[Message, ...]:
    # The summarizer rewrites the whole head region, the injected prefix included.
    restated = _summary(count, turn) + "\n\nStanding context:\n" + PREFIX.text
    return (Message.user(restated), *history[-RETAIN_MESSAGES:])


STRATEGIES = (
    Strategy(
        "session-prefix",
        "actorloop: request-only prefix after the system slot",
        lambda history: _request((PREFIX, *history), 1),
        _compact,
        (),
    ),
    Strategy(
        "prefix-after-history",
        "(a) prefix recomputed and placed after the history each step",
        # prefix_length marks the history end so the Anthropic body gets a breakpoint there.
        lambda history: _request((*history, PREFIX), len(history)),
        _compact,
        (),
    ),
    Strategy(
        "prefix-in-history",
        "(b) prefix injected once as the first user message, rewritten by compaction",
        lambda history: _request(history, 0),
        _compact_with_prefix,
        (PREFIX,),
    ),
)


async def _run(mode: SimMode, strategy: Strategy) -> dict[str, Any]:
    sim = SimProvider(mode, output_tokens=OUTPUT_TOKENS, seed=1)
    history = strategy.initial
    usages: list[TokenUsage] = []
    compactions = 0
    for turn in range(1, TURNS + 1):
        history = (*history, Message.user(_user_text(turn)))
        text: list[str] = []
        async for chunk in sim.stream(strategy.build(history)):
            if isinstance(chunk, TextDelta):
                text.append(chunk.text)
            elif isinstance(chunk, UsageReport):
                usages.append(chunk.usage)
        history = (*history, Message.assistant("".join(text)))
        if turn % COMPACT_EVERY == 0 and turn < TURNS:
            compactions += 1
            history = strategy.rewrite(history, compactions, turn)
        await trio.sleep(TURN_GAP_SECONDS)
    total = sum(usages, TokenUsage())
    billed = total.prompt_total
    prices = PRICES[mode]
    cost = (
        total.input * prices["input"]
        + total.cache_read * prices["cache_read"]
        + total.cache_write * prices["cache_write"]
    )
    return {
        "strategy": strategy.name,
        "description": strategy.describe,
        "requests": len(usages),
        "billed_input_tokens": billed,
        "uncached_input_tokens": total.input,
        "cache_read_tokens": total.cache_read,
        "cache_write_tokens": total.cache_write,
        "cached_fraction": round(total.cache_read / billed, 4),
        "requests_with_cache_read": sum(1 for usage in usages if usage.cache_read),
        "relative_input_cost": round(cost / billed, 4),
        "per_request_cached_fraction": [
            round(usage.cache_read / usage.prompt_total, 3) for usage in usages
        ],
    }


async def _main() -> dict[str, Any]:
    results: dict[str, list[dict[str, Any]]] = {}
    for mode in MODES:
        results[mode] = [await _run(mode, strategy) for strategy in STRATEGIES]
    return {
        "workload": {
            "turns": TURNS,
            "prefix_tokens": PREFIX_TOKENS,
            "compact_every_turns": COMPACT_EVERY,
            "retained_messages": RETAIN_MESSAGES,
            "summary_tokens": SUMMARY_TOKENS,
            "output_tokens_per_answer": OUTPUT_TOKENS,
            "turn_gap_seconds": TURN_GAP_SECONDS,
            "token_estimate": "ceil(bytes/4) of the canonical JSON each adapter would send",
            "prices": PRICES,
        },
        "results": results,
    }


def _markdown(report: dict[str, Any]) -> str:
    work = report["workload"]
    lines = [
        "# Prompt-cache benchmark",
        "",
        f"{work['turns']}-turn session, {work['prefix_tokens']:,}-token session prefix, "
        f"compaction every {work['compact_every_turns']} turns (summary of "
        f"{work['summary_tokens']} tokens + last {work['retained_messages']} messages), "
        f"answers of {work['output_tokens_per_answer']} tokens, {work['turn_gap_seconds']:.0f} s "
        "between turns on a mock trio clock. Token counts are the chars/4 estimate over the "
        "canonical JSON the real adapter would send; cache rules are the SimProvider's "
        "(Anthropic breakpoints with 20-block lookback, OpenAI 1024 + k·128-token prefixes, "
        "1024-token minimum, 5-minute TTL).",
        "",
        "Cached fraction = cache_read / (input + cache_read + cache_write). Relative input "
        "cost = billed input priced with the multipliers below, divided by billed tokens "
        "(1.0 = no caching benefit).",
        "",
        "| mode | strategy | cached fraction | requests reading cache | cache read | "
        "cache write | uncached input | billed input | relative input cost |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for mode, rows in report["results"].items():
        for row in rows:
            lines.append(
                f"| {mode} | {row['strategy']} | {row['cached_fraction']:.1%} | "
                f"{row['requests_with_cache_read']}/{row['requests']} | "
                f"{row['cache_read_tokens']:,} | {row['cache_write_tokens']:,} | "
                f"{row['uncached_input_tokens']:,} | {row['billed_input_tokens']:,} | "
                f"{row['relative_input_cost']:.3f} |"
            )
    lines += ["", "Strategies:", ""]
    for row in report["results"][MODES[0]]:
        lines.append(f"* `{row['strategy']}` — {row['description']}")
    prices = work["prices"]
    lines += [
        "",
        f"Prices (× uncached input): Anthropic read {prices['anthropic']['cache_read']}, "
        f"write {prices['anthropic']['cache_write']}; OpenAI read "
        f"{prices['openai']['cache_read']} (gpt-4o; newer models discount more).",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    report = trio.run(_main, clock=trio.testing.MockClock(autojump_threshold=0))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "cache.json").write_text(json.dumps(report, indent=2) + "\n")
    markdown = _markdown(report)
    (RESULTS / "cache.md").write_text(markdown)
    print(markdown)


if __name__ == "__main__":
    main()
