"""Compaction gate benchmark: the per-step cost of pricing the fixed part of a request.

Every step, the compaction gate asks the token meter for the request's estimated size; the
meter needs the hash and the price of the fixed part (system, tools, session prefix) to
know whether its usage anchor still holds. The old path hashed and priced them every step;
the meter now keeps both for the very same tools and prefix objects (what a loop passes
step after step). Both are timed in the same process, rounds interleaved, with the
compaction benchmark's 3,000-token prefix and its tool, on a session that has one answer
with usage (so the anchor is set and the key is compared).

Run: `python -m benchmarks.bench_gate [--quick]`; writes results/gate.json and gate.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import trio

from actorloop.runtime import AgentOptions, Session, TokenUsage
from actorloop.runtime.host.runtime import Runtime
from actorloop.runtime.log.tokens import TokenMeter, fixed_part_key, fixed_part_tokens
from actorloop.runtime.model.header import ToolSchema
from actorloop.runtime.model.messages import Message
from actorloop.runtime.testing import ScriptedProvider, reply
from benchmarks.bench_compaction import PREFIX, READ_FILE, SYSTEM

RESULTS = Path(__file__).resolve().parent / "results"


async def _answered_session() -> Session:
    """A session whose one answer carried usage, so the meter's anchor is set."""
    provider = ScriptedProvider()
    provider.push(reply("hi", TokenUsage(input=5000, output=20)))

    async def prefix(agent: Any, value: tuple[Message, ...], next: Any) -> Any:
        return PREFIX + await next()

    async with Runtime.open(store="memory:", provider=provider) as runtime:
        runtime.on("agent/session-prefix", prefix)
        agent = await runtime.spawn(AgentOptions("m", system=SYSTEM, tools=(READ_FILE,)))
        (await agent.send("hello")).raise_for_error()
        return agent.session


def _fixed_part(session: Session) -> tuple[str | None, tuple[ToolSchema, ...], tuple[Message, ...]]:
    header = session.header()
    assert header is not None and header.tools and header.message_prefix
    return header.system, header.tools, header.message_prefix


def _time(work: Any, repeats: int) -> float:
    began = time.process_time()
    for _ in range(repeats):
        work()
    return (time.process_time() - began) / repeats * 1e6


def run(rounds: int, repeats: int) -> dict[str, Any]:
    session = trio.run(_answered_session)
    system, tools, prefix = _fixed_part(session)
    meter = TokenMeter(session)
    meter.total(system, tools, prefix)

    def old_path() -> None:  # the expression each step evaluated before
        fixed_part_key(system, tools, prefix)
        fixed_part_tokens(system, tools, prefix)

    def now() -> None:
        meter.total(system, tools, prefix)

    old: list[float] = []
    new: list[float] = []
    for _ in range(rounds):
        old.append(_time(old_path, repeats))
        new.append(_time(now, repeats))
    before, after = statistics.median(old), statistics.median(new)
    return {
        "benchmark": "gate",
        "command": "python -m benchmarks.bench_gate",
        "python": platform.python_version(),
        "platform": platform.platform(),
        "when": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S%z"),
        "rounds": rounds,
        "repeats": repeats,
        "prefix_messages": len(prefix),
        "fixed_part_tokens": fixed_part_tokens(system, tools, prefix),
        "anchored": meter.total(system, tools, prefix)
        != fixed_part_tokens(system, tools, prefix) + meter.surface_tokens(),
        "old_path_us_per_step": round(before, 2),
        "meter_total_us_per_step": round(after, 2),
        "ratio_now_to_old": round(after / before, 3),
    }


def markdown(report: dict[str, Any]) -> str:
    return "\n".join(
        [
            "# Compaction gate: pricing the fixed part per step",
            "",
            f"`{report['command']}` — Python {report['python']} on {report['platform']} "
            f"(a 2-core machine shared with other jobs: read the ratio), {report['when']}.",
            "",
            f"Fixed part: system prompt, 1 tool, a session prefix of "
            f"{report['prefix_messages']} messages ({report['fixed_part_tokens']:,} tokens by "
            "the estimator). CPU time per call, median over "
            f"{report['rounds']} interleaved rounds of {report['repeats']:,} calls.",
            "",
            "| path | µs per step |",
            "|---|---:|",
            f"| before: hash + price the fixed part every step | "
            f"{report['old_path_us_per_step']} |",
            f"| now: `TokenMeter.total` (anchor set, same objects) | "
            f"{report['meter_total_us_per_step']} |",
            f"| now ÷ before | **{report['ratio_now_to_old']}** |",
            "",
            f"The meter's total was anchored on the reported usage: {report['anchored']}.",
            "",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    report = run(rounds=5 if args.quick else 15, repeats=200 if args.quick else 1000)
    stem = "gate-quick" if args.quick else "gate"
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / f"{stem}.md").write_text(markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
