"""Compaction benchmark: what compaction costs in provider cache, with a session prefix.

A 200-turn session with a 3,000-token session prefix runs through the real runtime (LoopActor,
CompactionActor, token meter, memory store) against the SimProvider's Anthropic and OpenAI
cache models. The context window is small enough that the gate compacts several times.
Every fourth turn reads a file through a tool. Turns are 30 s apart on a mock trio clock
(inside the 5-minute cache TTL).

Reported: total input tokens (billed = uncached + cache read + cache write), the cached
fraction, the number of compactions, and for each compaction the cache read of the last
model request before it, of the summarizer request, and of the first model request after
it; "cache lost" is the drop from before to after. The summarizer request extends the
previous request's cached prefix (system, tools, prefix, then the region), and the request
after a compaction still reads system + tools + prefix from cache: only history is lost.

Run: `python -m benchmarks.bench_compaction`.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import trio
import trio.testing

from actorloop.runtime import (
    AgentOptions,
    CompactionConfig,
    Message,
    TokenUsage,
    Tool,
)
from actorloop.runtime.host.runtime import Runtime
from actorloop.runtime.log.request import Request
from actorloop.runtime.log.session import Session
from actorloop.runtime.log.tokens import estimate_messages, estimate_system, estimate_tools
from actorloop.runtime.model.events import (
    AssistantMessage,
    CompactionEnd,
    CompactionSummary,
    TurnStart,
)
from actorloop.runtime.providers.sim import SimMode, SimProvider
from benchmarks.filler import filler

TURNS = 200
PREFIX_TOKENS = 3_000
CONTEXT_WINDOW = 16_000
OUTPUT_TOKENS = 60
SUMMARY_TOKENS = 400
TOOL_EVERY = 4
TOOL_RESULT_CHARS = 1_600
TURN_GAP_SECONDS = 30.0
MODES: tuple[SimMode, ...] = ("anthropic", "openai")
RESULTS = Path(__file__).parent / "results"

SYSTEM = (
    "You are a coding agent working in a repository. Read files before editing them, keep "
    "changes small, run the tests after each change, and explain what you did briefly."
)


def _prefix() -> tuple[Message, ...]:
    """Three contributors (skill catalogue, AGENTS.md summary, workspace baseline) that
    together cost PREFIX_TOKENS by the estimator of docs/spec/compaction.md §2."""
    rng = random.Random(3000)
    each = PREFIX_TOKENS // 3 - 8  # 4 per block + 4 per message
    titles = ("Skill catalogue", "AGENTS.md summary", "Workspace baseline")
    messages = []
    for title in titles:
        head = f"{title}:\n"
        messages.append(Message.user(head + filler(rng, each * 4 - len(head))))
    return tuple(messages)


PREFIX = _prefix()


async def _read_file(args: dict[str, Any], ctx: Any) -> str:
    rng = random.Random(f"file:{ctx.turn}")
    return f"# {args.get('path', 'file')} (turn {ctx.turn})\n" + filler(rng, TOOL_RESULT_CHARS)


READ_FILE = Tool(
    "read_file",
    "Read a file of the workspace",
    {"type": "object", "properties": {"path": {"type": "string"}}},
    _read_file,
)


def _user_text(turn: int) -> str:
    rng = random.Random(turn)
    text = f"Turn {turn}: " + filler(rng, rng.randrange(160, 480))
    if turn % TOOL_EVERY == 0:
        text += " call:read_file"
    return text


def _output(request: Request) -> str:
    """Answers of OUTPUT_TOKENS tokens; the summarizer gets a SUMMARY_TOKENS summary."""
    rng = random.Random(len(request.messages))
    if request.one_shot:
        head = f"Summary of {len(request.history) - 1} messages: "
        return head + filler(rng, SUMMARY_TOKENS * 4 - len(head))
    return filler(rng, OUTPUT_TOKENS * 4)


def _row(usage: TokenUsage | None) -> dict[str, int] | None:
    if usage is None:
        return None
    return {
        "input": usage.input,
        "cache_read": usage.cache_read,
        "cache_write": usage.cache_write,
        "billed": usage.input + usage.cache_read + usage.cache_write,
    }


def _analyse(session: Session) -> dict[str, Any]:
    loop_usages: list[TokenUsage] = []
    summary_usages: list[TokenUsage] = []
    compactions: list[dict[str, Any]] = []
    failed = 0
    pending: dict[str, Any] | None = None
    last: TokenUsage | None = None
    turn = 0
    for event in session.events:
        data = event.data
        if isinstance(data, TurnStart):
            turn = data.turn
        if isinstance(data, AssistantMessage) and data.usage is not None:
            loop_usages.append(data.usage)
            if pending is not None:
                pending["after"] = _row(data.usage)
                before = pending["before"]["cache_read"] if pending["before"] else 0
                pending["cache_lost"] = before - data.usage.cache_read
                compactions.append(pending)
                pending = None
            last = data.usage
        elif isinstance(data, CompactionSummary):
            if data.usage is not None:
                summary_usages.append(data.usage)
            pending = {
                "turn": turn,
                "shadowed_nodes": len(data.shadowed_seqs),
                "shadowed_tokens": data.shadowed_token_count,
                "before": _row(last),
                "summarizer": _row(data.usage),
            }
        elif isinstance(data, CompactionEnd) and data.error is not None:
            failed += 1
    everything = sum(loop_usages + summary_usages, TokenUsage(0, 0))
    loop_total = sum(loop_usages, TokenUsage(0, 0))
    summary_total = sum(summary_usages, TokenUsage(0, 0))

    def totals(usage: TokenUsage, requests: int) -> dict[str, Any]:
        billed = usage.input + usage.cache_read + usage.cache_write
        return {
            "requests": requests,
            "billed_input_tokens": billed,
            "uncached_input_tokens": usage.input,
            "cache_read_tokens": usage.cache_read,
            "cache_write_tokens": usage.cache_write,
            "output_tokens": usage.output,
            "cached_fraction": round(usage.cache_read / billed, 4) if billed else 0.0,
        }

    lost = [c["cache_lost"] for c in compactions]
    return {
        "all_requests": totals(everything, len(loop_usages) + len(summary_usages)),
        "model_requests": totals(loop_total, len(loop_usages)),
        "summarizer_requests": totals(summary_total, len(summary_usages)),
        "largest_model_request_tokens": max(u.prompt_total for u in loop_usages),
        "compactions": len(compactions),
        "failed_compactions": failed,
        "mean_cache_lost_per_compaction": round(sum(lost) / len(lost)) if lost else 0,
        "per_compaction": compactions,
    }


async def _run(mode: SimMode) -> dict[str, Any]:
    sim = SimProvider(mode, output=_output, seed=1, context_window=CONTEXT_WINDOW)
    options = AgentOptions(
        model="sim-model",
        system=SYSTEM,
        tools=(READ_FILE,),
        context_window=CONTEXT_WINDOW,
        compaction=CompactionConfig(),
    )

    async def prefix(agent: Any, value: Any, next: Any) -> Any:
        return (*PREFIX, *await next())

    peak = 0

    async def pre_step(agent: Any, value: Any) -> None:
        nonlocal peak
        peak = max(peak, estimate_messages(agent.session.derive_messages()))

    started = time.perf_counter()
    async with Runtime.open(store="memory:", provider=sim) as rt:
        rt.on("agent/session-prefix", prefix)
        agent = await rt.spawn(options)
        agent.on("agent/pre-step", pre_step)
        reasons: dict[str, int] = {}
        for turn in range(1, TURNS + 1):
            result = await agent.send(_user_text(turn))
            reasons[result.reason] = reasons.get(result.reason, 0) + 1
            await trio.sleep(TURN_GAP_SECONDS)
        session = agent.session
    elapsed = time.perf_counter() - started
    fixed = (
        estimate_system(SYSTEM) + estimate_tools((READ_FILE.schema,)) + estimate_messages(PREFIX)
    )
    report = _analyse(session)
    report.update(
        {
            "mode": mode,
            "turn_reasons": reasons,
            "overflow_errors": sim.calls - len(sim.usages),
            "fixed_part_tokens_estimate": fixed,
            "peak_surface_tokens_estimate": peak,
            "final_surface_tokens_estimate": estimate_messages(session.derive_messages()),
            "events": len(session),
            "wall_seconds": round(elapsed, 2),
        }
    )
    return report


async def _main() -> dict[str, Any]:
    results = [await _run(mode) for mode in MODES]
    return {
        "workload": {
            "turns": TURNS,
            "prefix_tokens": estimate_messages(PREFIX),
            "prefix_messages": len(PREFIX),
            "context_window": CONTEXT_WINDOW,
            "threshold_ratio": CompactionConfig().threshold_ratio,
            "retain_ratio": CompactionConfig().retain_ratio,
            "answer_tokens": OUTPUT_TOKENS,
            "summary_tokens": SUMMARY_TOKENS,
            "tool_every_turns": TOOL_EVERY,
            "tool_result_chars": TOOL_RESULT_CHARS,
            "turn_gap_seconds": TURN_GAP_SECONDS,
            "token_counts": "SimProvider: ceil(bytes/4) of the canonical JSON the adapter sends",
        },
        "results": results,
    }


def _markdown(report: dict[str, Any]) -> str:
    work = report["workload"]
    lines = [
        "# Compaction benchmark",
        "",
        f"{work['turns']}-turn session through the runtime (LoopActor + CompactionActor, "
        f"memory store), {work['prefix_tokens']:,}-token session prefix in "
        f"{work['prefix_messages']} messages, context window {work['context_window']:,} "
        f"(threshold {work['threshold_ratio']}, retain {work['retain_ratio']}), answers of "
        f"{work['answer_tokens']} tokens, summaries of {work['summary_tokens']} tokens, a "
        f"{work['tool_result_chars']:,}-character tool result every {work['tool_every_turns']} "
        f"turns, {work['turn_gap_seconds']:.0f} s between turns on a mock clock. Token counts "
        "and cache rules are the SimProvider's.",
        "",
        "Billed input = uncached input + cache read + cache write; cached fraction = cache "
        "read / billed input. Cache lost = cache read of the last model request before a "
        "compaction minus that of the first model request after it.",
        "",
        "| mode | requests (model + summarizer) | billed input | cache read | cache write | "
        "uncached | cached fraction | compactions | mean cache lost / compaction | "
        "summarizer cached fraction |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in report["results"]:
        total = row["all_requests"]
        lines.append(
            f"| {row['mode']} | {row['model_requests']['requests']} + "
            f"{row['summarizer_requests']['requests']} | {total['billed_input_tokens']:,} | "
            f"{total['cache_read_tokens']:,} | {total['cache_write_tokens']:,} | "
            f"{total['uncached_input_tokens']:,} | {total['cached_fraction']:.1%} | "
            f"{row['compactions']} | {row['mean_cache_lost_per_compaction']:,} | "
            f"{row['summarizer_requests']['cached_fraction']:.1%} |"
        )
    for row in report["results"]:
        lines += [
            "",
            f"## {row['mode']}: per compaction",
            "",
            f"Fixed part (system + tools + prefix, estimator): "
            f"{row['fixed_part_tokens_estimate']:,} tokens. Overflow errors: "
            f"{row['overflow_errors']}; failed compactions: {row['failed_compactions']}; "
            f"largest model request: {row['largest_model_request_tokens']:,} tokens; "
            f"turns: {row['turn_reasons']}; wall time {row['wall_seconds']} s.",
            "",
            "| # | turn | shadowed nodes | shadowed tokens | cache read before | "
            "summarizer read / billed | cache read after | cache lost |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for index, item in enumerate(row["per_compaction"], 1):
            before = item["before"]["cache_read"] if item["before"] else 0
            summ = item["summarizer"] or {"cache_read": 0, "billed": 0}
            lines.append(
                f"| {index} | {item['turn']} | {item['shadowed_nodes']} | "
                f"{item['shadowed_tokens']:,} | {before:,} | "
                f"{summ['cache_read']:,} / {summ['billed']:,} | "
                f"{item['after']['cache_read']:,} | {item['cache_lost']:,} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    report = trio.run(_main, clock=trio.testing.MockClock(autojump_threshold=0))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "compaction.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / "compaction.md").write_text(_markdown(report))
    print(_markdown(report))


if __name__ == "__main__":
    main()
