"""Event codec throughput: actorloop's cattrs+orjson converter next to pydantic v2 and msgspec
models mirroring the same event shapes, on one realistic event log.

Run from the repository root (pydantic and msgspec come from the `bench` extra):

    python -m benchmarks.bench_codec_peers [--quick]

Writes benchmarks/results/codec_peers.json and codec_peers.md (`codec_peers-quick.*` with
--quick).

The log is what actorloop's loop writes for a tool-calling conversation (ScriptedProvider,
memory: store): turn/start, user/message, step/start, assistant/chunk (block start, text and
tool-call deltas, block end, usage, finish), assistant/message with usage and request digest,
tool/call, tool/result, step/end, turn/end; the one request/header snapshot is left out.
Every codec decodes the same canonical bytes (actorloop's) and encodes the objects its own
decoder built; before timing, each peer's output is checked to be the same JSON document as
actorloop's for every event. One event per call, as a log writer and loader use them.
"""

import argparse
import gc
import importlib.util
import json
import os
import platform
import random
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any, Literal

import orjson
import trio

from actorloop.codecs.converter import decode_event, encode_event
from actorloop.runtime.model.chunks import (
    BlockEnd,
    BlockStart,
    Finish,
    StreamChunk,
    TextDelta,
    TokenUsage,
    ToolCallDelta,
    UsageReport,
)

RESULTS = Path(__file__).resolve().parent / "results"
TURNS = 400
QUICK_TURNS = 60
REPS = 7
QUICK_REPS = 3
PEER_PACKAGES = {"pydantic": "pydantic", "msgspec": "msgspec"}
_WORDS = (
    "the", "file", "reads", "config", "session", "returns", "value", "test", "passes", "tool",
    "error", "line", "module", "function", "loop", "cache", "prefix", "history", "event", "log",
)  # fmt: skip


def _prose(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randrange(low, high))) + "."


def _text_chunks(index: int, text: str, parts: int) -> list[StreamChunk]:
    size = max(1, len(text) // parts)
    pieces = [text[i : i + size] for i in range(0, len(text), size)]
    return [BlockStart(index, "text"), *(TextDelta(index, p) for p in pieces), BlockEnd(index)]


def _script(turns: int) -> list[list[StreamChunk]]:
    """Per turn: a step with text + one tool call, then a streamed final answer."""
    rng = random.Random(7)
    script: list[list[StreamChunk]] = []
    for turn in range(1, turns + 1):
        arguments = json.dumps({"path": f"src/module_{turn}.py", "limit": rng.randrange(10, 400)})
        usage = TokenUsage(input=rng.randrange(50, 900), output=rng.randrange(10, 300))
        usage = TokenUsage(usage.input, usage.output, cache_read=1000 + 40 * turn)
        script.append(
            [
                *_text_chunks(0, _prose(rng, 5, 20), 2),
                BlockStart(1, "tool_call", call_id=f"call-{turn}", name="read_file"),
                ToolCallDelta(1, arguments[: len(arguments) // 2]),
                ToolCallDelta(1, arguments[len(arguments) // 2 :]),
                BlockEnd(1),
                UsageReport(usage),
                Finish("tool-calls"),
            ]
        )
        script.append(
            [
                *_text_chunks(0, _prose(rng, 20, 120), rng.randrange(3, 9)),
                UsageReport(usage),
                Finish("stop"),
            ]
        )
    return script


def build_log(turns: int) -> list[Any]:
    """The events actorloop's loop logs for `turns` tool-calling turns (header left out)."""
    from actorloop.runtime import AgentOptions, Runtime, Tool
    from actorloop.runtime.testing import ScriptedProvider

    rng = random.Random(11)

    async def read_file(args: dict[str, Any], ctx: Any) -> str:
        return "\n".join(_prose(rng, 4, 14) for _ in range(rng.randrange(2, 12)))

    tool = Tool("read_file", "Read a file", {"type": "object"}, read_file)

    async def main() -> list[Any]:
        provider = ScriptedProvider(_script(turns))
        async with Runtime.open(store="memory:", provider=provider) as rt:
            agent = await rt.spawn(AgentOptions(model="model-x", tools=(tool,)))
            for turn in range(1, turns + 1):
                await agent.send(f"Turn {turn}: " + _prose(rng, 8, 60))
            return [e for e in agent.session.events if e.type != "request/header"]

    return trio.run(main)


@dataclass(frozen=True)
class Codec:
    name: str
    describe: str
    decode: Callable[[bytes], Any]
    encode: Callable[[Any], bytes]


def pydantic_codec() -> Codec:
    from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

    class Model(BaseModel):
        # Mirrors the converter's rules: frozen values, no extra keys, no type coercion.
        model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    class Source(Model):
        kind: Literal["user", "plugin"]
        plugin: str | None = None

    class Trigger(Model):
        kind: Literal["message", "injection", "compaction"]
        source: Source

    class TurnStart(Model):
        turn: int
        trigger: Trigger

    class TurnEndReason(Model):
        kind: Literal[
            "completed", "max-tokens", "rejected", "error", "aborted", "disposed", "interrupted"
        ]
        reason: str | None = None
        step: int | None = None
        message: str | None = None
        code: str | None = None

    class TurnEnd(Model):
        turn: int
        reason: TurnEndReason

    class Step(Model):
        turn: int
        step: int

    class Text(Model):
        type: Literal["text"]
        text: str

    class Reasoning(Model):
        type: Literal["reasoning"]
        text: str
        signature: str | None = None

    class ToolCall(Model):
        type: Literal["tool_call"]
        id: str
        name: str
        arguments: str

    class PlainText(Model):
        text: str

    class ToolResult(Model):
        type: Literal["tool_result"]
        tool_call_id: str
        content: tuple[PlainText, ...]
        is_error: bool = False

    Block = Annotated[Text | Reasoning | ToolCall | ToolResult, Field(discriminator="type")]

    class UserMessage(Model):
        content: tuple[Block, ...]
        source: Source

    class Usage(Model):
        input: int = 0
        output: int = 0
        cache_read: int = 0
        cache_write: int = 0
        reasoning: int = 0

    class ErrorInfo(Model):
        message: str
        code: str | None = None

    class ChunkBlockStart(Model):
        type: Literal["block_start"]
        index: int
        kind: Literal["text", "reasoning", "tool_call"]
        call_id: str | None = None
        name: str | None = None

    class ChunkTextDelta(Model):
        type: Literal["text_delta"]
        index: int
        text: str

    class ChunkReasoningDelta(Model):
        type: Literal["reasoning_delta"]
        index: int
        text: str
        signature: str | None = None

    class ChunkToolCallDelta(Model):
        type: Literal["tool_call_delta"]
        index: int
        arguments: str

    class ChunkBlockEnd(Model):
        type: Literal["block_end"]
        index: int

    class ChunkUsage(Model):
        type: Literal["usage"]
        usage: Usage

    class ChunkFinish(Model):
        type: Literal["finish"]
        kind: Literal["stop", "tool-calls", "max-tokens", "error"]
        error: ErrorInfo | None = None

    Chunk = Annotated[
        ChunkBlockStart
        | ChunkTextDelta
        | ChunkReasoningDelta
        | ChunkToolCallDelta
        | ChunkBlockEnd
        | ChunkUsage
        | ChunkFinish,
        Field(discriminator="type"),
    ]

    class AssistantChunk(Model):
        turn: int
        step: int
        chunk: Chunk

    class AssistantMessage(Model):
        turn: int
        step: int
        content: tuple[Block, ...]
        provider: str
        model: str
        usage: Usage | None = None
        request_digest: str | None = None

    class ToolCallData(Model):
        turn: int
        step: int
        call_id: str
        name: str
        arguments: str

    class ToolError(Model):
        name: str
        code: str

    class ToolResultData(Model):
        turn: int
        step: int
        call_id: str
        content: tuple[PlainText, ...]
        is_error: bool = False
        error: ToolError | None = None

    class Append(Model):
        op: Literal["append"]

    class Replace(Model):
        op: Literal["replace"]
        start: int
        end: int

    class Envelope(Model):
        seq: int
        time: int
        source_event_seqs: tuple[int, ...] | None = None
        surface_op: Annotated[Append | Replace, Field(discriminator="op")] | None = None

    class TurnStartEvent(Envelope):
        type: Literal["turn/start"]
        data: TurnStart

    class TurnEndEvent(Envelope):
        type: Literal["turn/end"]
        data: TurnEnd

    class StepStartEvent(Envelope):
        type: Literal["step/start"]
        data: Step

    class StepEndEvent(Envelope):
        type: Literal["step/end"]
        data: Step

    class UserMessageEvent(Envelope):
        type: Literal["user/message"]
        data: UserMessage

    class AssistantChunkEvent(Envelope):
        type: Literal["assistant/chunk"]
        data: AssistantChunk

    class AssistantMessageEvent(Envelope):
        type: Literal["assistant/message"]
        data: AssistantMessage

    class ToolCallEvent(Envelope):
        type: Literal["tool/call"]
        data: ToolCallData

    class ToolResultEvent(Envelope):
        type: Literal["tool/result"]
        data: ToolResultData

    Event = Annotated[
        TurnStartEvent
        | TurnEndEvent
        | StepStartEvent
        | StepEndEvent
        | UserMessageEvent
        | AssistantChunkEvent
        | AssistantMessageEvent
        | ToolCallEvent
        | ToolResultEvent,
        Field(discriminator="type"),
    ]
    adapter: TypeAdapter[Any] = TypeAdapter(Event)

    def encode(event: Any) -> bytes:
        # The model's own serializer: the adapter's union serializer would first look for
        # the matching member on every call and is slower.
        return event.model_dump_json(exclude_defaults=True).encode()

    return Codec(
        "pydantic v2",
        "TypeAdapter over a discriminated union of frozen strict BaseModels (extra=forbid); "
        "decode = adapter.validate_json, encode = model_dump_json(exclude_defaults=True)",
        adapter.validate_json,
        encode,
    )


def msgspec_codec() -> Codec:
    import msgspec

    class S(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
        """Frozen, strict, defaults omitted: the converter's rules (config is inherited)."""

    class Source(S):
        kind: Literal["user", "plugin"]
        plugin: str | None = None

    class Trigger(S):
        kind: Literal["message", "injection", "compaction"]
        source: Source

    class TurnStart(S):
        turn: int
        trigger: Trigger

    class TurnEndReason(S):
        kind: Literal[
            "completed", "max-tokens", "rejected", "error", "aborted", "disposed", "interrupted"
        ]
        reason: str | None = None
        step: int | None = None
        message: str | None = None
        code: str | None = None

    class TurnEnd(S):
        turn: int
        reason: TurnEndReason

    class Step(S):
        turn: int
        step: int

    class Text(S, tag="text", tag_field="type"):
        text: str

    class Reasoning(S, tag="reasoning", tag_field="type"):
        text: str
        signature: str | None = None

    class ToolCall(S, tag="tool_call", tag_field="type"):
        id: str
        name: str
        arguments: str

    class PlainText(S):
        text: str

    class ToolResult(S, tag="tool_result", tag_field="type"):
        tool_call_id: str
        content: tuple[PlainText, ...]
        is_error: bool = False

    Block = Text | Reasoning | ToolCall | ToolResult

    class UserMessage(S):
        content: tuple[Block, ...]
        source: Source

    class Usage(S):
        input: int = 0
        output: int = 0
        cache_read: int = 0
        cache_write: int = 0
        reasoning: int = 0

    class ErrorInfo(S):
        message: str
        code: str | None = None

    class ChunkBlockStart(S, tag="block_start", tag_field="type"):
        index: int
        kind: Literal["text", "reasoning", "tool_call"]
        call_id: str | None = None
        name: str | None = None

    class ChunkTextDelta(S, tag="text_delta", tag_field="type"):
        index: int
        text: str

    class ChunkReasoningDelta(S, tag="reasoning_delta", tag_field="type"):
        index: int
        text: str
        signature: str | None = None

    class ChunkToolCallDelta(S, tag="tool_call_delta", tag_field="type"):
        index: int
        arguments: str

    class ChunkBlockEnd(S, tag="block_end", tag_field="type"):
        index: int

    class ChunkUsage(S, tag="usage", tag_field="type"):
        usage: Usage

    class ChunkFinish(S, tag="finish", tag_field="type"):
        kind: Literal["stop", "tool-calls", "max-tokens", "error"]
        error: ErrorInfo | None = None

    Chunk = (
        ChunkBlockStart
        | ChunkTextDelta
        | ChunkReasoningDelta
        | ChunkToolCallDelta
        | ChunkBlockEnd
        | ChunkUsage
        | ChunkFinish
    )

    class AssistantChunk(S):
        turn: int
        step: int
        chunk: Chunk

    class AssistantMessage(S):
        turn: int
        step: int
        content: tuple[Block, ...]
        provider: str
        model: str
        usage: Usage | None = None
        request_digest: str | None = None

    class ToolCallData(S):
        turn: int
        step: int
        call_id: str
        name: str
        arguments: str

    class ToolError(S):
        name: str
        code: str

    class ToolResultData(S):
        turn: int
        step: int
        call_id: str
        content: tuple[PlainText, ...]
        is_error: bool = False
        error: ToolError | None = None

    class Append(S, tag="append", tag_field="op"):
        pass

    class Replace(S, tag="replace", tag_field="op"):
        start: int
        end: int

    class Envelope(S, kw_only=True, tag_field="type"):
        seq: int
        time: int
        source_event_seqs: tuple[int, ...] | None = None
        surface_op: Append | Replace | None = None

    class TurnStartEvent(Envelope, tag="turn/start"):
        data: TurnStart

    class TurnEndEvent(Envelope, tag="turn/end"):
        data: TurnEnd

    class StepStartEvent(Envelope, tag="step/start"):
        data: Step

    class StepEndEvent(Envelope, tag="step/end"):
        data: Step

    class UserMessageEvent(Envelope, tag="user/message"):
        data: UserMessage

    class AssistantChunkEvent(Envelope, tag="assistant/chunk"):
        data: AssistantChunk

    class AssistantMessageEvent(Envelope, tag="assistant/message"):
        data: AssistantMessage

    class ToolCallEvent(Envelope, tag="tool/call"):
        data: ToolCallData

    class ToolResultEvent(Envelope, tag="tool/result"):
        data: ToolResultData

    Event = (
        TurnStartEvent
        | TurnEndEvent
        | StepStartEvent
        | StepEndEvent
        | UserMessageEvent
        | AssistantChunkEvent
        | AssistantMessageEvent
        | ToolCallEvent
        | ToolResultEvent
    )
    decoder = msgspec.json.Decoder(Event)
    encoder = msgspec.json.Encoder()
    return Codec(
        "msgspec",
        "tagged union of frozen Structs (forbid_unknown_fields, omit_defaults); "
        "msgspec.json.Decoder(Event).decode / Encoder().encode",
        decoder.decode,
        encoder.encode,
    )


def actorloop_codec() -> Codec:
    return Codec(
        "actorloop",
        "one cattrs converter + orjson: decode_event (strict structuring, typed errors, "
        "ints within ±2^53, JSON-value checks) / encode_event (defaults omitted, canonical "
        "sorted-key JSON)",
        decode_event,
        encode_event,
    )


def missing_peers() -> list[str]:
    """The peer codecs that are not installed (the `bench` extra provides them)."""
    return [
        name for name, module in PEER_PACKAGES.items() if importlib.util.find_spec(module) is None
    ]


def _codecs() -> list[Codec]:
    missing = set(missing_peers())
    codecs = [actorloop_codec()]
    if "pydantic" not in missing:
        codecs.append(pydantic_codec())
    if "msgspec" not in missing:
        codecs.append(msgspec_codec())
    return codecs


def _check(codec: Codec, raw: Sequence[bytes]) -> list[Any]:
    """Decode actorloop's bytes, re-encode, and require the same JSON document back."""
    objects = [codec.decode(item) for item in raw]
    for item, obj in zip(raw, objects, strict=True):
        again = codec.encode(obj)
        if orjson.loads(again) != orjson.loads(item):
            raise AssertionError(f"{codec.name} changed the event:\n{item!r}\n{again!r}")
    return objects


def _best(action: Callable[[], object], reps: int, *, collect: bool = False) -> float:
    """Best wall time of `reps` calls; the cyclic GC is paused unless `collect` (as timeit
    does), so that the codec is timed rather than collections over the objects kept."""
    times = []
    for _ in range(reps):
        gc.collect()
        if not collect:
            gc.disable()
        try:
            started = time.perf_counter()
            action()
            times.append(time.perf_counter() - started)
        finally:
            gc.enable()
    return min(times)


def _passes(
    codec: Codec, raw: list[bytes], objects: list[Any]
) -> tuple[Callable[[], object], Callable[[], object]]:
    """One decode pass over `raw` and one encode pass over `objects`, as timed callables."""
    decode, encode = codec.decode, codec.encode
    return (lambda: [decode(item) for item in raw]), (lambda: [encode(obj) for obj in objects])


def _measure(codec: Codec, raw: list[bytes], types: list[str], reps: int) -> dict[str, Any]:
    objects = _check(codec, raw)
    encoded = [codec.encode(obj) for obj in objects]
    decode_pass, encode_pass = _passes(codec, raw, objects)
    decode_s = _best(decode_pass, reps)
    load_s = _best(decode_pass, reps, collect=True)
    encode_s = _best(encode_pass, reps)
    per_type: dict[str, dict[str, float]] = {}
    groups: dict[str, list[int]] = defaultdict(list)
    for index, kind in enumerate(types):
        groups[kind].append(index)
    for kind, indexes in groups.items():
        decode_pass, encode_pass = _passes(
            codec, [raw[i] for i in indexes], [objects[i] for i in indexes]
        )
        kind_decode = _best(decode_pass, reps)
        kind_encode = _best(encode_pass, reps)
        per_type[kind] = {
            "decode_us": round(kind_decode / len(indexes) * 1e6, 3),
            "encode_us": round(kind_encode / len(indexes) * 1e6, 3),
        }
    events = len(raw)
    return {
        "describe": codec.describe,
        "decode_events_per_s": round(events / decode_s),
        "decode_mb_per_s": round(sum(map(len, raw)) / decode_s / 1e6, 2),
        "decode_gc_on_events_per_s": round(events / load_s),
        "encode_events_per_s": round(events / encode_s),
        "encode_mb_per_s": round(sum(map(len, encoded)) / encode_s / 1e6, 2),
        "encoded_bytes_per_event": round(sum(map(len, encoded)) / events, 1),
        "per_type_us": per_type,
    }


def environment() -> dict[str, Any]:
    versions: dict[str, str | None] = {}
    for distribution in ("attrs", "cattrs", "orjson", "pydantic", "pydantic-core", "msgspec"):
        try:
            versions[distribution] = metadata.version(distribution)
        except metadata.PackageNotFoundError:
            versions[distribution] = None
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "versions": versions,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def run(turns: int, reps: int) -> dict[str, Any]:
    events = build_log(turns)
    raw = [encode_event(event) for event in events]
    types = [event.type for event in events]
    results = {codec.name: _measure(codec, raw, types, reps) for codec in _codecs()}
    base = results["actorloop"]
    for row in results.values():
        row["decode_x_actorloop"] = round(
            row["decode_events_per_s"] / base["decode_events_per_s"], 2
        )
        row["decode_gc_on_x_actorloop"] = round(
            row["decode_gc_on_events_per_s"] / base["decode_gc_on_events_per_s"], 2
        )
        row["encode_x_actorloop"] = round(
            row["encode_events_per_s"] / base["encode_events_per_s"], 2
        )
    return {
        "environment": environment(),
        "log": {
            "turns": turns,
            "events": len(events),
            "mean_event_bytes": round(sum(map(len, raw)) / len(raw), 1),
            "mix": dict(Counter(types).most_common()),
            "reps": reps,
        },
        "missing_peers": missing_peers(),
        "results": results,
    }


def to_markdown(report: dict[str, Any], command: str) -> str:
    env = report["environment"]
    log = report["log"]
    versions = ", ".join(f"{k} {v}" for k, v in env["versions"].items() if v)
    mix = ", ".join(f"{kind} {count:,}" for kind, count in log["mix"].items())
    lines = [
        "# Event codec throughput: actorloop and peers",
        "",
        f"`{command}` — Python {env['python']} on {env['platform']}, {env['cpus']} CPUs, "
        f"{env['time']}. Versions: {versions}.",
        "",
        f"{log['events']:,} events ({log['turns']} turns as actorloop's loop logs them, "
        f"{log['mean_event_bytes']} bytes/event): {mix}. One event per call; best of "
        f"{log['reps']} passes over the whole log. Every codec decodes the same canonical "
        "bytes and re-encodes to the same JSON document (checked per event before timing). "
        "The cyclic GC is paused while timing (as `timeit` does) except in *decode, GC on*: "
        "the whole log decoded and kept in memory with the GC running, which adds the "
        "collections a log load pays over the objects it keeps (more for object models that "
        "allocate more tracked objects per event). *× actorloop* = throughput relative to "
        "actorloop's converter in the same run (> 1: faster than actorloop).",
        "",
    ]
    if report["missing_peers"]:
        lines += [
            f"Not measured (not installed): {', '.join(report['missing_peers'])}. "
            'Install them with `pip install -e ".[bench]"`.',
            "",
        ]
    lines += [
        "| codec | decode events/s | decode MB/s | × actorloop | decode, GC on, events/s | "
        "× actorloop | encode events/s | encode MB/s | × actorloop | bytes/event out |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in report["results"].items():
        lines.append(
            f"| {name} | {row['decode_events_per_s']:,} | {row['decode_mb_per_s']} | "
            f"{row['decode_x_actorloop']:.2f} | {row['decode_gc_on_events_per_s']:,} | "
            f"{row['decode_gc_on_x_actorloop']:.2f} | {row['encode_events_per_s']:,} | "
            f"{row['encode_mb_per_s']} | {row['encode_x_actorloop']:.2f} | "
            f"{row['encoded_bytes_per_event']} |"
        )
    names = list(report["results"])
    lines += [
        "",
        "## µs per event by type (decode / encode)",
        "",
        "| event type | " + " | ".join(names) + " |",
        "|---|" + "---:|" * len(names),
    ]
    for kind in log["mix"]:
        cells = []
        for name in names:
            cost = report["results"][name]["per_type_us"][kind]
            cells.append(f"{cost['decode_us']:.2f} / {cost['encode_us']:.2f}")
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    lines += ["", "## Codecs", ""]
    for name, row in report["results"].items():
        lines.append(f"* **{name}** — {row['describe']}.")
    lines += [
        "",
        "The mirrors cover the 9 event types of this log; actorloop's converter handles all "
        "18 (and unknown ignorable ones), checks integers against ±(2^53−1) and JSON values, "
        "and writes canonical sorted-key JSON; pydantic and msgspec write fields in "
        "declaration order.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a shorter log, fewer passes")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    missing = missing_peers()
    if missing:
        print(
            f"bench_codec_peers: not installed, skipped: {', '.join(missing)} "
            '(pip install -e ".[bench]")'
        )
    report = run(QUICK_TURNS if args.quick else TURNS, QUICK_REPS if args.quick else REPS)
    suffix = "-quick" if args.quick else ""
    command = "python -m benchmarks.bench_codec_peers" + (" --quick" if args.quick else "")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"codec_peers{suffix}.json").write_text(json.dumps(report, indent=2) + "\n")
    markdown = to_markdown(report, command)
    (args.out / f"codec_peers{suffix}.md").write_text(markdown)
    print(markdown)
    return report


if __name__ == "__main__":
    main()
