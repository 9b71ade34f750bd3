"""Session log benchmark: per-event cost of append + derive_messages() at 100, 10,000 and
100,000 events, Replace (prune) cost, and codec throughput.

Run from the repository root:

    python -m benchmarks.bench_session [--quick]

Writes benchmarks/results/session.json and benchmarks/results/session.md.

Workload: loop-shaped turns of 17 events (turn/start, user/message, a tool step with
chunks, assistant/message, tool/call, tool/result, a reply step, turn/end; a header
snapshot in the first step): 4 surface nodes per turn. Event data is built before the
clock starts; what is timed is `Session.append(...)` (validation, detaching copy, structure,
surface, header fold) and `derive_messages()`.

Three derivation patterns are measured:

* `append`: appends only.
* `append+derive@step`: `derive_messages()` once per step, just before `step/start`
  (the boundary snapshot the loop takes).
* `append+derive@event`: `derive_messages()` after every append (worst case).

Per-event cost is reported as the mean over the whole run and as the marginal cost (best
of several windows of events at the end of each run: the cost of one more event at that
length). Flat cost means a ratio of ~1 between sizes.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from importlib import metadata
from itertools import pairwise
from pathlib import Path
from typing import Any

from actorloop.codecs.converter import decode_event, encode_event
from actorloop.runtime.log.session import Session
from actorloop.runtime.model.chunks import TextDelta, TokenUsage
from actorloop.runtime.model.events import (
    APPEND,
    AssistantChunk,
    AssistantMessage,
    EventData,
    Replace,
    RequestHeaderEvent,
    SessionEvent,
    StepEnd,
    StepStart,
    SurfaceOp,
    ToolCallEvent,
    ToolResultEvent,
    Trigger,
    TurnEnd,
    TurnEndReason,
    TurnStart,
    UserMessage,
)
from actorloop.runtime.model.header import EpochHeader, LlmCallConfig, ToolSchema
from actorloop.runtime.model.messages import USER, Text, ToolCall

RESULTS = Path(__file__).resolve().parent / "results"
SIZES = (100, 10_000, 100_000)
WINDOW = 17 * 12  # events per window: 12 whole turns
WINDOWS = 10
HEADER = EpochHeader(
    LlmCallConfig("model-x", temperature=0.2, max_tokens=4096),
    "You are a careful assistant.\nAnswer briefly.",
    (ToolSchema("read_file", "Read a file", {"type": "object", "required": ["path"]}),),
)

Op = tuple[str, EventData, SurfaceOp | None, tuple[int, ...] | None]


def workload(n: int) -> list[Op]:
    """At least `n` events of loop-shaped turns (cut at a turn boundary)."""
    ops: list[Op] = []

    def add(
        event_type: str,
        data: EventData,
        op: SurfaceOp | None = None,
        seqs: tuple[int, ...] | None = None,
    ) -> int:
        ops.append((event_type, data, op, seqs))
        return len(ops) - 1

    turn = 0
    while len(ops) < n:
        turn += 1
        call_id = f"call-{turn}"
        add("turn/start", TurnStart(turn, Trigger("message", USER)))
        add("user/message", UserMessage((Text(f"Please read file {turn}.txt"),), USER), APPEND)
        add("step/start", StepStart(turn, 1))
        if turn == 1:
            add("request/header", RequestHeaderEvent(HEADER, "initial"))
        chunks = tuple(
            add("assistant/chunk", AssistantChunk(turn, 1, TextDelta(0, part)))
            for part in ("Let me ", "read it.")
        )
        content = (Text("Let me read it."), ToolCall(call_id, "read_file", '{"path":"f.txt"}'))
        usage = TokenUsage(input=1200, output=40, cache_read=9000)
        add(
            "assistant/message",
            AssistantMessage(turn, 1, content, "prov", "model-x", usage),
            APPEND,
            chunks,
        )
        call = add("tool/call", ToolCallEvent(turn, 1, call_id, "read_file", '{"path":"f.txt"}'))
        add(
            "tool/result",
            ToolResultEvent(turn, 1, call_id, (Text("line one\nline two\n" * 8),)),
            APPEND,
            (call,),
        )
        add("step/end", StepEnd(turn, 1))
        add("step/start", StepStart(turn, 2))
        chunks = tuple(
            add("assistant/chunk", AssistantChunk(turn, 2, TextDelta(0, part)))
            for part in ("The file ", "says hello.")
        )
        add(
            "assistant/message",
            AssistantMessage(turn, 2, (Text("The file says hello."),), "prov", "model-x", usage),
            APPEND,
            chunks,
        )
        add("step/end", StepEnd(turn, 2))
        add("turn/end", TurnEnd(turn, TurnEndReason("completed")))
    return ops


def run_appends(ops: list[Op], mode: str) -> tuple[float, float, Session]:
    """(mean s/event over the run, marginal s/event, session).

    The marginal cost is the best of WINDOWS windows of WINDOW events (whole turns) at the
    end of the run, i.e. the cost of one more event at that log length; runs shorter than
    the windows report their mean.
    """
    session = Session.create("bench")
    append = session.append
    derive = session.derive_messages
    tail = WINDOW * WINDOWS
    marks = set(range(len(ops) - tail, len(ops), WINDOW)) if len(ops) >= 2 * tail else set()
    stamps: list[float] = []
    gc.collect()
    started = time.perf_counter()
    for index, (event_type, data, op, seqs) in enumerate(ops):
        if index in marks:
            stamps.append(time.perf_counter())
        if mode == "append+derive@step" and event_type == "step/start":
            derive()
        append(event_type, data, surface_op=op, source_event_seqs=seqs, time=1)
        if mode == "append+derive@event":
            derive()
    ended = time.perf_counter()
    mean = (ended - started) / len(ops)
    if not stamps:
        return mean, mean, session
    stamps.append(ended)
    windows = [later - earlier for earlier, later in pairwise(stamps)]
    return mean, min(windows) / WINDOW, session


def repeat(n: int) -> int:
    return 200 if n <= 100 else 7 if n <= 10_000 else 4


def bench_appends(sizes: tuple[int, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    warm = workload(2_000)
    for mode in ("append", "append+derive@step", "append+derive@event"):
        run_appends(warm, mode)  # warm up
        rows: dict[str, Any] = {}
        for n in sizes:
            ops = workload(n)
            means, marginals = [], []
            for _ in range(repeat(n)):
                mean, marginal, session = run_appends(ops, mode)
                means.append(mean)
                marginals.append(marginal)
            rows[str(n)] = {
                "events": len(ops),
                "messages": len(session.derive_messages()),
                # best of the repeats: robust against other processes sharing the CPUs
                "mean_us_per_event": round(min(means) * 1e6, 3),
                "marginal_us_per_event": round(min(marginals) * 1e6, 3),
            }
            del session
        small = rows[str(sizes[0])]
        for n in sizes[1:]:
            row = rows[str(n)]
            row["mean_ratio_vs_smallest"] = round(
                row["mean_us_per_event"] / small["mean_us_per_event"], 3
            )
            row["marginal_ratio_vs_smallest"] = round(
                row["marginal_us_per_event"] / small["marginal_us_per_event"], 3
            )
        out[mode] = rows
    return out


def bench_derive_materialization(n: int) -> dict[str, Any]:
    """Cost of one derive_messages() right after one new message, at size n: the part
    that is a tuple copy (the result is a fresh tuple of every message)."""
    ops = workload(n)
    _, _, session = run_appends(ops, "append")
    session.derive_messages()
    turn = session.last_turn + 1
    session.append("turn/start", TurnStart(turn, Trigger("message", USER)), time=1)
    samples = []
    for i in range(200):
        session.append(
            "user/message", UserMessage((Text(f"m{i}"),), USER), surface_op=APPEND, time=1
        )
        started = time.perf_counter()
        session.derive_messages()
        samples.append(time.perf_counter() - started)
    messages = len(session.derive_messages())
    per_call = statistics.median(samples)
    return {
        "events": len(session),
        "messages": messages,
        "derive_after_one_new_message_us": round(per_call * 1e6, 2),
        "ns_per_message_copied": round(per_call / messages * 1e9, 3),
    }


def bench_prune(n: int) -> dict[str, Any]:
    """Replace costs at size n: single tool/result rewrites (prune) and one span replace."""
    ops = workload(n)
    _, _, session = run_appends(ops, "append")
    session.derive_messages()
    results = [e for e in session.events if e.type == "tool/result"]
    turn = session.last_turn + 1
    session.append("turn/start", TurnStart(turn, Trigger("message", USER)), time=1)

    def prune(event: SessionEvent) -> None:
        data = event.data
        assert isinstance(data, ToolResultEvent)
        pruned = ToolResultEvent(data.turn, data.step, data.call_id, (Text("[pruned]"),))
        session.append(
            "tool/result",
            pruned,
            surface_op=Replace(event.seq, event.seq),
            source_event_seqs=(event.seq,),
            time=1,
        )

    def timed(action: Callable[[], None], count: int, group: int = 20) -> float:
        """Best mean over groups of `group` actions (robust against CPU contention)."""
        best = float("inf")
        for _ in range(count // group):
            started = time.perf_counter()
            for _ in range(group):
                action()
            best = min(best, (time.perf_counter() - started) / group)
        return best

    early = iter(results[:100])
    late = iter(results[-200:-100])
    late_derive = iter(results[-100:])
    out = {
        "events": len(session),
        "prune_early_us": round(timed(lambda: prune(next(early)), 100) * 1e6, 2),
        "prune_late_us": round(timed(lambda: prune(next(late)), 100) * 1e6, 2),
        "prune_late_plus_derive_us": round(
            timed(lambda: (prune(next(late_derive)), session.derive_messages())[0], 100) * 1e6,
            2,
        ),
    }
    nodes = session.surface
    span = nodes[: len(nodes) // 5]
    started = time.perf_counter()
    session.append(
        "user/message",
        UserMessage((Text("summary"),), USER),
        surface_op=Replace(span[0], span[-1]),
        source_event_seqs=span,
        time=1,
    )
    session.derive_messages()
    out["compaction_replace_nodes"] = len(span)
    out["compaction_replace_plus_derive_ms"] = round((time.perf_counter() - started) * 1e3, 3)
    return out


def bench_codec(n: int) -> dict[str, Any]:
    _, _, session = run_appends(workload(n), "append")
    events = session.events

    def best(action: Callable[[], Any], runs: int = 5) -> tuple[float, Any]:
        timings, result = [], None
        for _ in range(runs):
            started = time.perf_counter()
            result = action()
            timings.append(time.perf_counter() - started)
        return min(timings), result

    encode_s, encoded = best(lambda: [encode_event(event) for event in events])
    decode_s, decoded = best(lambda: [decode_event(raw) for raw in encoded])
    load_s, loaded = best(lambda: Session.from_events("loaded", decoded))
    assert decoded == list(events)
    assert loaded.derive_messages() == session.derive_messages()
    total_bytes = sum(len(raw) for raw in encoded)
    return {
        "events": len(events),
        "mean_event_bytes": round(total_bytes / len(events), 1),
        "encode_events_per_s": round(len(events) / encode_s),
        "encode_mb_per_s": round(total_bytes / encode_s / 1e6, 2),
        "decode_events_per_s": round(len(events) / decode_s),
        "decode_mb_per_s": round(total_bytes / decode_s / 1e6, 2),
        "from_events_events_per_s": round(len(events) / load_s),
    }


def environment() -> dict[str, Any]:
    versions = {}
    for name in ("attrs", "cattrs", "orjson"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:  # pragma: no cover
            versions[name] = "?"
    return {
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **versions,
    }


def to_markdown(report: dict[str, Any]) -> str:
    env = report["environment"]
    lines = [
        "# Session benchmark",
        "",
        f"`python -m benchmarks.bench_session` — Python {env['python']} on {env['platform']}"
        f" (attrs {env['attrs']}, cattrs {env['cattrs']}, orjson {env['orjson']}), "
        f"{env['when']}.",
        "",
        "## Per-event cost of append + derive_messages()",
        "",
        "Loop-shaped turns of 17 events (4 messages per turn). *mean* = whole run / events;",
        f"*marginal* = best of {WINDOWS} windows of {WINDOW} events (12 turns) at the end of"
        " the run: the cost of one more event at that log length.",
        "Best of several runs. Ratios are against the 100-event run; flat cost means ~1.",
        "",
        "| pattern | events | messages | mean µs/event | ratio | marginal µs/event | ratio |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for mode, rows in report["append"].items():
        for row in rows.values():
            lines.append(
                f"| {mode} | {row['events']:,} | {row['messages']:,} | "
                f"{row['mean_us_per_event']:.2f} | {row.get('mean_ratio_vs_smallest', 1.0):.2f} | "
                f"{row['marginal_us_per_event']:.2f} | "
                f"{row.get('marginal_ratio_vs_smallest', 1.0):.2f} |"
            )
    mat = report["derive_materialization"]
    prune = report["replace"]
    codec = report["codec"]
    lines += [
        "",
        "## Where a non-flat cost comes from",
        "",
        "`append` (validation, detaching copy, structure, surface, header fold, projection of"
        " the new node) is flat. The derive patterns grow only because `derive_messages()`"
        " returns a fresh `tuple` of every message (the public contract) once new messages"
        f" exist: at {mat['events']:,} events ({mat['messages']:,} messages) one call after a"
        f" new message costs {mat['derive_after_one_new_message_us']} µs, i.e."
        f" {mat['ns_per_message_copied']} ns per message (pointer copy + refcounts; no"
        " re-projection). A call with no new message returns the cached tuple (O(1)). The loop"
        " pays one such copy per step, next to building `prefix + history` for the request"
        " and serialising it for the provider, which are O(messages) too.",
        "",
        "## Replace (prune / compaction)",
        "",
        f"At {prune['events']:,} events: prune (single tool/result rewrite) of an early result"
        f" {prune['prune_early_us']} µs, of a late result {prune['prune_late_us']} µs,"
        f" late prune + derive {prune['prune_late_plus_derive_us']} µs; a compaction replace of"
        f" {prune['compaction_replace_nodes']:,} nodes + derive"
        f" {prune['compaction_replace_plus_derive_ms']} ms.",
        "",
        "## Codec (one cattrs converter + orjson)",
        "",
        f"{codec['events']:,} events, {codec['mean_event_bytes']} bytes/event on average:",
        "",
        "| operation | events/s | MB/s |",
        "|---|---:|---:|",
        f"| encode_event | {codec['encode_events_per_s']:,} | {codec['encode_mb_per_s']} |",
        f"| decode_event | {codec['decode_events_per_s']:,} | {codec['decode_mb_per_s']} |",
        f"| Session.from_events (validate + fold) | {codec['from_events_events_per_s']:,} | |",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="sizes 100 and 10,000 only")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    sizes = SIZES[:2] if args.quick else SIZES
    largest = sizes[-1]
    report = {
        "environment": environment(),
        "sizes": list(sizes),
        "append": bench_appends(sizes),
        "derive_materialization": bench_derive_materialization(largest),
        "replace": bench_prune(largest),
        "codec": bench_codec(min(largest, 10_000)),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "session.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "session.md").write_text(to_markdown(report))
    print(to_markdown(report))
    return report


if __name__ == "__main__":
    main()
