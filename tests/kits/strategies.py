"""Hypothesis strategies (and a small log builder) for the data core.

Reusable by any test module (`from strategies import ...`; tests/kits is on sys.path):

* JSON values: `json_values()`, `json_objects()`; bad values: `non_json_values()`.
* Content and messages: `texts()`, `blocks()`, `contents()`, `sources()`, `messages()`.
* Stream chunks and usage: `stream_chunks()`, `token_usages()`.
* Headers: `llm_configs()`, `tool_schemas()`, `tool_sets()`, `epoch_headers()`,
  `header_deltas()` (any delta, for the codec), `header_transitions()` ((old, new) pairs that
  exercise every branch of `diff`).
* Events: `event_data()` (any event type's data, for the codec), `session_events()`
  (any envelope, not necessarily valid in a log).
* Strategy factories are cached (building a strategy is costly inside composites).
* Valid logs: `programs()` draws a loop-shaped program (turns, steps, tool calls, headers,
  compaction replaces, prunes) and `build_log(program, noise=...)` turns it into a valid
  event tuple; `valid_logs()` does both. `LogBuilder` writes valid events by hand in
  example-based tests.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from functools import cache
from typing import Any

import orjson
from hypothesis import strategies as st

from actorloop.codecs.jsonvalue import MAX_SAFE_INT, FrozenDict, freeze_json
from actorloop.runtime.model.chunks import (
    BlockEnd,
    BlockStart,
    ErrorInfo,
    Finish,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    TokenUsage,
    ToolCallDelta,
    UsageReport,
)
from actorloop.runtime.model.events import (
    APPEND,
    AssistantChunk,
    AssistantMessage,
    CompactionEnd,
    CompactionPrune,
    CompactionStart,
    CompactionSummary,
    ContextMessage,
    EventData,
    PromptBlocked,
    Replace,
    RequestHeaderEvent,
    SessionEvent,
    SteeringMessage,
    StepEnd,
    StepStart,
    SurfaceOp,
    ToolCallEvent,
    ToolError,
    ToolResultEvent,
    Trigger,
    TurnEnd,
    TurnEndReason,
    TurnStart,
    UserMessage,
)
from actorloop.runtime.model.header import (
    EpochHeader,
    HeaderDelta,
    LlmCallConfig,
    SystemPatch,
    ToolSchema,
    ToolsDelta,
)
from actorloop.runtime.model.messages import (
    USER,
    Block,
    Content,
    Message,
    Reasoning,
    Source,
    Text,
    ToolCall,
    ToolResult,
)

BASE_TIME = 1_700_000_000_000

# --------------------------------------------------------------------------- JSON values

safe_ints = st.integers(min_value=-MAX_SAFE_INT, max_value=MAX_SAFE_INT)
json_floats = st.floats(allow_nan=False, allow_infinity=False).filter(
    lambda x: not (x == 0.0 and str(x).startswith("-"))
)
json_scalars = st.none() | st.booleans() | safe_ints | json_floats | st.text(max_size=12)


@cache
def json_values(max_leaves: int = 12) -> st.SearchStrategy[Any]:
    """Plain (mutable) JSON values: what a caller might pass in."""
    return st.recursive(
        json_scalars,
        lambda children: (
            st.lists(children, max_size=4)
            | st.dictionaries(st.text(max_size=6), children, max_size=4)
        ),
        max_leaves=max_leaves,
    )


@cache
def json_objects(max_leaves: int = 10) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(st.text(max_size=6), json_values(max_leaves), max_size=4)


@cache
def frozen_objects(max_leaves: int = 8) -> st.SearchStrategy[FrozenDict]:
    return json_objects(max_leaves).map(freeze_json)


@cache
def non_json_values() -> st.SearchStrategy[Any]:
    """Values docs/spec/session-log.md §9.2 rejects (cycles are built by hand in tests)."""
    return st.sampled_from(
        [
            float("nan"),
            float("inf"),
            float("-inf"),
            -0.0,
            {1: "non-str key"},
            {"a", "set"},
            frozenset({1}),
            b"bytes",
            bytearray(b"x"),
            object(),
            2**53,
            -(2**53),
            10**30,
            complex(1, 2),
        ]
    )


# ----------------------------------------------------------------------- content blocks

texts = st.text(alphabet=string.ascii_letters + string.digits + " \n.é", max_size=16)
ids = st.text(alphabet=string.ascii_lowercase + string.digits, min_size=1, max_size=8)
names = st.text(alphabet=string.ascii_lowercase + "_", min_size=1, max_size=8)


@cache
def _arguments() -> st.SearchStrategy[str]:
    return json_objects(4).map(lambda v: orjson.dumps(v).decode())


@cache
def sources() -> st.SearchStrategy[Source]:
    return st.just(USER) | names.map(Source.of_plugin)


@cache
def blocks() -> st.SearchStrategy[Block]:
    return st.one_of(
        texts.map(Text),
        st.builds(Reasoning, texts, st.none() | texts),
        st.builds(ToolCall, ids, names, _arguments()),
        st.builds(
            ToolResult,
            ids,
            st.lists(texts.map(Text), max_size=2).map(tuple),
            st.booleans(),
        ),
    )


@cache
def contents(max_size: int = 3) -> st.SearchStrategy[Content]:
    return st.lists(blocks(), max_size=max_size).map(tuple)


@cache
def text_contents() -> st.SearchStrategy[tuple[Text, ...]]:
    return st.lists(texts.map(Text), max_size=2).map(tuple)


@cache
def messages() -> st.SearchStrategy[Message]:
    return st.builds(Message, st.sampled_from(["system", "user", "assistant"]), contents())


# ------------------------------------------------------------------- chunks and usage

small_ints = st.integers(min_value=0, max_value=10_000)


@cache
def token_usages() -> st.SearchStrategy[TokenUsage]:
    return st.builds(TokenUsage, small_ints, small_ints, small_ints, small_ints, small_ints)


@cache
def error_infos() -> st.SearchStrategy[ErrorInfo]:
    return st.builds(ErrorInfo, texts, st.none() | names)


@cache
def stream_chunks() -> st.SearchStrategy[StreamChunk]:
    index = st.integers(min_value=0, max_value=5)
    return st.one_of(
        st.builds(
            BlockStart,
            index,
            st.sampled_from(["text", "reasoning", "tool_call"]),
            st.none() | ids,
            st.none() | names,
        ),
        st.builds(TextDelta, index, texts),
        st.builds(ReasoningDelta, index, texts, st.none() | texts),
        st.builds(ToolCallDelta, index, texts),
        st.builds(BlockEnd, index),
        st.builds(UsageReport, token_usages()),
        st.builds(
            Finish,
            st.sampled_from(["stop", "tool-calls", "max-tokens", "error"]),
            st.none() | error_infos(),
        ),
    )


# ----------------------------------------------------------------------------- headers


@cache
def llm_configs() -> st.SearchStrategy[LlmCallConfig]:
    return st.builds(
        LlmCallConfig,
        st.sampled_from(["m", "big", "small"]),
        st.none() | st.sampled_from(["p", "q"]),
        st.none() | st.sampled_from([0.0, 0.5, 1.0, 0.25]),
        st.none() | st.integers(min_value=1, max_value=4096),
        st.none() | st.lists(st.sampled_from(["\n", "END", "##"]), max_size=2).map(tuple),
    )


def tool_schemas(name: st.SearchStrategy[str] | None = None) -> st.SearchStrategy[ToolSchema]:
    return st.builds(
        ToolSchema,
        name if name is not None else st.sampled_from(list("abcdefg")),
        st.sampled_from(["", "runs x", "reads y"]),
        st.sampled_from([{}, {"type": "object"}, {"type": "object", "required": ["x"]}]),
    )


@cache
def tool_sets(max_size: int = 5) -> st.SearchStrategy[tuple[ToolSchema, ...]]:
    """Tuples of tools with unique names (any order)."""
    return st.lists(tool_schemas(), max_size=max_size, unique_by=lambda t: t.name).map(tuple)


system_lines = st.sampled_from(["You are helpful.", "", "Be brief.", "x", "Rules:", "- one"])


@cache
def systems() -> st.SearchStrategy[str | None]:
    return st.none() | st.lists(system_lines, max_size=6).map("\n".join)


@cache
def prefixes() -> st.SearchStrategy[tuple[Message, ...] | None]:
    return st.none() | st.lists(
        st.sampled_from([Message.user("opener"), Message.user("skills"), Message.system("s")]),
        max_size=3,
    ).map(tuple)


@cache
def epoch_headers() -> st.SearchStrategy[EpochHeader]:
    """Headers, canonical or not (empty system/tools/prefix included on purpose)."""
    return st.builds(EpochHeader, llm_configs(), systems(), st.none() | tool_sets(), prefixes())


@cache
def header_deltas() -> st.SearchStrategy[HeaderDelta]:
    """Any delta shape (for codec round trips; not necessarily applicable)."""
    nat = st.integers(min_value=0, max_value=6)
    patch = st.builds(SystemPatch, nat, nat, st.lists(system_lines, max_size=3).map(tuple))
    tools_delta = st.builds(
        ToolsDelta,
        tool_sets(3),
        st.lists(names, max_size=3).map(tuple),
        tool_sets(3),
    )
    prefix = st.none() | st.lists(messages(), max_size=2).map(tuple)
    return st.builds(
        HeaderDelta, st.none() | patch, st.none() | tools_delta, st.none() | llm_configs(), prefix
    )


@st.composite
def header_transitions(draw: st.DrawFn) -> tuple[EpochHeader, EpochHeader]:
    """(old, new) pairs biased towards small edits: line edits of the system prompt, tool
    additions/removals/changes/reorders, config swaps, prefix changes (incl. to absent)."""
    old = draw(epoch_headers())
    kind = draw(st.sampled_from(["random", "edit"]))
    if kind == "random":
        return old, draw(epoch_headers())
    lines = (old.system or "").split("\n")
    if draw(st.booleans()):
        at = draw(st.integers(min_value=0, max_value=len(lines)))
        lines = [*lines[:at], *draw(st.lists(system_lines, max_size=2)), *lines[at + 1 :]]
    system = "\n".join(lines)
    tools = list(old.tools or ())
    for _ in range(draw(st.integers(min_value=0, max_value=3))):
        action = draw(st.sampled_from(["add", "remove", "change", "reorder", "insert"]))
        taken = {tool.name for tool in tools}
        if action in ("add", "insert"):
            fresh = [n for n in "abcdefghij" if n not in taken]
            if fresh:
                tool = draw(tool_schemas(st.sampled_from(fresh)))
                at = len(tools) if action == "add" else draw(st.integers(0, len(tools)))
                tools.insert(at, tool)
        elif tools and action == "remove":
            tools.pop(draw(st.integers(0, len(tools) - 1)))
        elif tools and action == "change":
            at = draw(st.integers(0, len(tools) - 1))
            tools[at] = draw(tool_schemas(st.just(tools[at].name)))
        elif len(tools) > 1 and action == "reorder":
            tools = draw(st.permutations(tools))
    config = draw(llm_configs()) if draw(st.booleans()) else old.config
    prefix = draw(prefixes()) if draw(st.booleans()) else old.message_prefix
    return old, EpochHeader(config, system, tuple(tools), prefix)


# ------------------------------------------------------------------ events (any shape)

turns = st.integers(min_value=1, max_value=50)
seqs = st.integers(min_value=0, max_value=MAX_SAFE_INT)
times = st.integers(min_value=0, max_value=MAX_SAFE_INT)


@cache
def turn_end_reasons() -> st.SearchStrategy[TurnEndReason]:
    return st.one_of(
        st.sampled_from(["completed", "max-tokens", "aborted", "disposed", "interrupted"]).map(
            TurnEndReason
        ),
        texts.map(lambda r: TurnEndReason("rejected", reason=r)),
        st.builds(
            lambda step, msg, code: TurnEndReason("error", step=step, message=msg, code=code),
            turns,
            texts,
            st.none() | names,
        ),
    )


@cache
def event_data() -> st.SearchStrategy[tuple[str, EventData]]:
    """(type, data) for every known event type."""
    seq_tuple = st.lists(seqs, max_size=3).map(tuple)
    trigger = st.builds(Trigger, st.sampled_from(["message", "injection", "compaction"]), sources())
    return st.one_of(
        st.tuples(st.just("turn/start"), st.builds(TurnStart, turns, trigger)),
        st.tuples(st.just("turn/end"), st.builds(TurnEnd, turns, turn_end_reasons())),
        st.tuples(st.just("step/start"), st.builds(StepStart, turns, turns)),
        st.tuples(st.just("step/end"), st.builds(StepEnd, turns, turns)),
        st.tuples(st.just("user/message"), st.builds(UserMessage, contents(), sources())),
        st.tuples(
            st.just("prompt/blocked"), st.builds(PromptBlocked, contents(), sources(), texts)
        ),
        st.tuples(
            st.just("context/message"),
            st.builds(ContextMessage, contents(), sources(), st.none() | frozen_objects()),
        ),
        st.tuples(
            st.just("steering/message"), st.builds(SteeringMessage, turns, contents(), sources())
        ),
        st.tuples(
            st.just("assistant/chunk"), st.builds(AssistantChunk, turns, turns, stream_chunks())
        ),
        st.tuples(
            st.just("assistant/message"),
            st.builds(
                AssistantMessage,
                turns,
                turns,
                contents(),
                names,
                names,
                st.none() | token_usages(),
                st.none() | st.text(alphabet="0123456789abcdef", min_size=64, max_size=64),
            ),
        ),
        st.tuples(
            st.just("tool/call"),
            st.builds(ToolCallEvent, turns, turns, ids, names, _arguments()),
        ),
        st.tuples(
            st.just("tool/result"),
            st.builds(
                ToolResultEvent,
                turns,
                turns,
                ids,
                text_contents(),
                st.booleans(),
                st.none() | st.builds(ToolError, names, names),
            ),
        ),
        st.tuples(
            st.just("request/header"),
            st.builds(
                RequestHeaderEvent,
                epoch_headers(),
                st.sampled_from(["initial", "resume", "fallback"]),
            ),
        ),
        st.tuples(st.just("request/header-delta"), header_deltas()),
        st.tuples(st.just("compaction/start"), st.builds(CompactionStart, ids, turns)),
        st.tuples(
            st.just("compaction/summary"),
            st.builds(
                CompactionSummary,
                ids,
                texts,
                seq_tuple,
                small_ints,
                names,
                names,
                small_ints,
                st.none() | token_usages(),
            ),
        ),
        st.tuples(
            st.just("compaction/end"),
            st.builds(CompactionEnd, ids, turns, st.none() | error_infos()),
        ),
        st.tuples(st.just("compaction/prune"), st.builds(CompactionPrune, seq_tuple, small_ints)),
    )


@cache
def surface_ops() -> st.SearchStrategy[SurfaceOp]:
    return st.just(APPEND) | st.builds(Replace, seqs, seqs)


@st.composite
def session_events(draw: st.DrawFn) -> SessionEvent:
    """A well-typed envelope of any event type (not necessarily valid in a log)."""
    event_type, data = draw(event_data())
    return SessionEvent(
        event_type,
        draw(seqs),
        draw(times),
        data,
        draw(st.none() | st.lists(seqs, max_size=3, unique=True).map(tuple)),
        draw(st.none() | surface_ops()),
    )


# ------------------------------------------------------------------------ valid logs

SURFACE_NODE_TYPES = ("user/message", "context/message", "steering/message")


class LogBuilder:
    """Writes a valid log event by event (seq == index, surface ops resolved by position).

    Keeps just enough state (open turn/step, current surface nodes) to make the next event
    valid; it does not validate - `Session` does.
    """

    def __init__(self, time: int = BASE_TIME) -> None:
        self.events: list[SessionEvent] = []
        self.time = time
        self.turn = 0
        self.step = 0
        self.turn_open = False
        self.step_open = False
        self.nodes: list[int] = []
        self.tool_results: list[int] = []  # current tool/result nodes (prunable)
        self.has_header = False
        self.counter = 0

    def add(
        self,
        event_type: str,
        data: EventData,
        op: SurfaceOp | None = None,
        provenance: Sequence[int] | None = None,
    ) -> SessionEvent:
        event = SessionEvent(
            event_type,
            len(self.events),
            self.time + len(self.events),
            data,
            None if provenance is None else tuple(provenance),
            op,
        )
        self.events.append(event)
        if isinstance(op, Replace):
            start, end = self.nodes.index(op.start), self.nodes.index(op.end)
            gone = set(self.nodes[start : end + 1])
            self.nodes[start : end + 1] = [event.seq]
            self.tool_results = [seq for seq in self.tool_results if seq not in gone]
        elif op is not None:
            self.nodes.append(event.seq)
        if event_type == "tool/result":
            self.tool_results.append(event.seq)
        return event

    def fresh_id(self, stem: str = "call") -> str:
        self.counter += 1
        return f"{stem}{self.counter}"

    # brackets
    def turn_start(self, kind: Any = "message") -> SessionEvent:
        self.turn += 1
        self.step = 0
        self.turn_open = True
        return self.add("turn/start", TurnStart(self.turn, Trigger(kind, USER)))

    def turn_end(self, kind: Any = "completed") -> SessionEvent:
        self.turn_open = False
        return self.add("turn/end", TurnEnd(self.turn, TurnEndReason(kind)))

    def step_start(self) -> SessionEvent:
        self.step += 1
        self.step_open = True
        return self.add("step/start", StepStart(self.turn, self.step))

    def step_end(self) -> SessionEvent:
        self.step_open = False
        return self.add("step/end", StepEnd(self.turn, self.step))

    # surface
    def user(self, text: str) -> SessionEvent:
        return self.add("user/message", UserMessage((Text(text),), USER), APPEND)

    def context(self, text: str, meta: Any = None) -> SessionEvent:
        return self.add(
            "context/message",
            ContextMessage((Text(text),), Source.of_plugin("plug"), meta),
            APPEND,
        )

    def steering(self, text: str) -> SessionEvent:
        return self.add("steering/message", SteeringMessage(self.turn, (Text(text),), USER), APPEND)

    def chunk(self, text: str) -> SessionEvent:
        return self.add("assistant/chunk", AssistantChunk(self.turn, self.step, TextDelta(0, text)))

    def assistant(
        self,
        text: str,
        calls: Sequence[tuple[str, str]] = (),
        provenance: Sequence[int] = (),
    ) -> SessionEvent:
        content: list[Block] = [Text(text)] if text else []
        content += [ToolCall(call_id, name, "{}") for call_id, name in calls]
        return self.add(
            "assistant/message",
            AssistantMessage(self.turn, self.step, tuple(content), "prov", "model"),
            APPEND,
            provenance,
        )

    def tool_call(self, call_id: str, name: str = "echo") -> SessionEvent:
        return self.add("tool/call", ToolCallEvent(self.turn, self.step, call_id, name, "{}"))

    def tool_result(
        self, call_id: str, text: str, call_seq: int | None = None, *, is_error: bool = False
    ) -> SessionEvent:
        data = ToolResultEvent(self.turn, self.step, call_id, (Text(text),), is_error)
        provenance = None if call_seq is None else (call_seq,)
        return self.add("tool/result", data, APPEND, provenance)

    def header(self, header: EpochHeader, reason: Any = "initial") -> SessionEvent:
        self.has_header = True
        return self.add("request/header", RequestHeaderEvent(header, reason))

    def header_delta(self, delta: HeaderDelta) -> SessionEvent:
        return self.add("request/header-delta", delta)

    def replace(self, start_pos: int, end_pos: int, text: str) -> SessionEvent:
        """A compaction-style summary replacing surface positions start_pos..end_pos."""
        shadowed = self.nodes[start_pos : end_pos + 1]
        return self.add(
            "user/message",
            UserMessage((Text(text),), USER),
            Replace(shadowed[0], shadowed[-1]),
            shadowed,
        )

    def prune(self, result_seq: int, text: str) -> SessionEvent:
        old = self.events[result_seq].data
        assert isinstance(old, ToolResultEvent)
        new = ToolResultEvent(
            old.turn, old.step, old.call_id, (Text(text),), old.is_error, old.error
        )
        return self.add("tool/result", new, Replace(result_seq, result_seq), (result_seq,))


HEADER = EpochHeader(LlmCallConfig("m"), "You are helpful.", (ToolSchema("echo"),))


def _noise(builder: LogBuilder, choice: int) -> None:
    """A non-surface event that is valid at any point inside an open turn."""
    if choice == 0:
        builder.add("prompt/blocked", PromptBlocked((Text("no"),), USER, "policy"))
    elif choice == 1:
        builder.header(HEADER, "resume")
    elif choice == 2:
        cid = f"noise{len(builder.events)}"
        builder.add("compaction/start", CompactionStart(cid, builder.turn))
        builder.add("compaction/end", CompactionEnd(cid, builder.turn, ErrorInfo("x")))
    elif builder.step_open:
        builder.chunk("noise")
    else:
        builder.add("compaction/prune", CompactionPrune((), 0))


def build_log(program: Sequence[Any], noise: Sequence[int] = ()) -> tuple[SessionEvent, ...]:
    """Run a `programs()` program; `noise[i] >= 0` inserts a non-surface event before the
    i-th instruction (and `-1` inserts nothing), so two builds of the same program differ
    only by non-surface events."""
    b = LogBuilder()
    for index, instr in enumerate(program):
        if index < len(noise) and noise[index] >= 0 and b.turn_open:
            _noise(b, noise[index])
        op = instr[0]
        if op == "turn":
            b.turn_start(instr[1])
            b.user(instr[2])
        elif op == "context":
            b.context(instr[1], instr[2])
        elif op == "steer":
            b.steering(instr[1])
        elif op == "step":
            _, n_chunks, text, calls, header = instr
            b.step_start()
            if header == "snapshot" or (header == "delta" and not b.has_header):
                b.header(HEADER, "initial")
            elif header == "delta":
                b.header_delta(HeaderDelta(config=LlmCallConfig(f"m{b.step}")))
            chunk_seqs = [b.chunk(text[:i]).seq for i in range(n_chunks)]
            call_ids = [(b.fresh_id(), name) for name, _ in calls]
            b.assistant(text, call_ids, chunk_seqs)
            for (call_id, name), (_, outcome) in zip(call_ids, calls, strict=True):
                call = b.tool_call(call_id, name)
                if outcome != "no-result":
                    b.tool_result(call_id, f"out {call_id}", call.seq, is_error=outcome == "err")
            b.step_end()
        elif op == "replace":
            if b.nodes:
                start = instr[1] % len(b.nodes)
                end = start + instr[2] % (len(b.nodes) - start)
                b.replace(start, end, instr[3])
        elif op == "prune":
            if b.tool_results:
                b.prune(b.tool_results[instr[1] % len(b.tool_results)], instr[2])
        elif op == "open-step":
            # A crash mid-step: chunks, maybe the assistant message, then calls in one of
            # three states (never logged / logged, running / logged with a result).
            _, n_chunks, with_message, calls = instr
            b.step_start()
            chunk_seqs = [b.chunk("part").seq for _ in range(n_chunks)]
            if with_message:
                call_ids = [(b.fresh_id(), name) for name, _ in calls]
                b.assistant("using tools", call_ids, chunk_seqs)
                for (call_id, name), (_, state) in zip(call_ids, calls, strict=True):
                    if state in ("running", "done"):
                        call = b.tool_call(call_id, name)
                        if state == "done":
                            b.tool_result(call_id, "done", call.seq)
        elif op == "end":
            b.turn_end(instr[1])
    return tuple(b.events)


@st.composite
def programs(draw: st.DrawFn, max_turns: int = 4, open_last: bool | None = False) -> list[Any]:
    """A loop-shaped program: turns of (user message, context/steering, steps with chunks,
    assistant text, tool calls with results, header snapshot/delta), plus compaction-style
    replaces and prunes. `open_last=None` lets hypothesis decide whether the last turn is
    left open (for repair tests); True always leaves it open (mid-step or between steps)."""
    program: list[Any] = []
    n_turns = draw(st.integers(min_value=0 if open_last is False else 1, max_value=max_turns))
    leave_open = draw(st.booleans()) if open_last is None else open_last
    call = st.tuples(st.sampled_from(["echo", "grep"]), st.sampled_from(["ok", "err"]))
    for turn_index in range(n_turns):
        program.append(("turn", draw(st.sampled_from(["message", "injection"])), draw(texts)))
        for _ in range(draw(st.integers(min_value=0, max_value=3))):
            kind = draw(st.sampled_from(["step", "step", "context", "steer", "replace", "prune"]))
            if kind == "step":
                program.append(
                    (
                        "step",
                        draw(st.integers(min_value=0, max_value=2)),
                        draw(texts),
                        draw(st.lists(call, max_size=2)),
                        draw(st.sampled_from(["none", "snapshot", "delta"])),
                    )
                )
            elif kind == "context":
                program.append(("context", draw(texts), draw(st.none() | json_objects(4))))
            elif kind == "steer":
                program.append(("steer", draw(texts)))
            elif kind == "replace":
                program.append(("replace", draw(small_ints), draw(small_ints), draw(texts)))
            else:
                program.append(("prune", draw(small_ints), draw(texts)))
        last = turn_index == n_turns - 1
        if last and leave_open and draw(st.booleans()):
            states = st.sampled_from(["not-started", "running", "done"])
            tool_names = st.sampled_from(["echo", "grep"])
            program.append(
                (
                    "open-step",
                    draw(st.integers(min_value=0, max_value=2)),
                    draw(st.booleans()),
                    draw(st.lists(st.tuples(tool_names, states), max_size=3)),
                )
            )
        if not (last and leave_open):
            program.append(("end", draw(st.sampled_from(["completed", "aborted", "max-tokens"]))))
    return program


def valid_logs(max_turns: int = 4) -> st.SearchStrategy[tuple[SessionEvent, ...]]:
    return programs(max_turns=max_turns).map(build_log)


def noise_for(program: Sequence[Any]) -> st.SearchStrategy[list[int]]:
    return st.lists(
        st.integers(min_value=-1, max_value=3), min_size=len(program), max_size=len(program)
    )
