"""OpenTelemetry spans of real turns (the SDK's in-memory exporter against a real Runtime):
`invoke_agent` per turn, `chat` per model call, `execute_tool` per tool call, subagents as
children, cancellation and errors as span status, resume and fork as links, and message
content only when opted in."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import orjson
import pytest
import trio
from helpers import open_runtime
from opentelemetry import trace as otel_trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from actorloop.runtime.control.handle import Agent, ToolContext
from actorloop.runtime.control.options import AgentOptions, CompactionConfig, Tool
from actorloop.runtime.errors import ErrorCode, ProviderError, TelemetryError
from actorloop.runtime.host.subagents import subagent_tool
from actorloop.runtime.host.telemetry import CAPTURE_CONTENT_ENV, Telemetry, TracedProvider
from actorloop.runtime.log.request import Request
from actorloop.runtime.model.chunks import (
    BlockEnd,
    BlockStart,
    ErrorInfo,
    Finish,
    StreamChunk,
    TextDelta,
    TokenUsage,
    UsageReport,
)
from actorloop.runtime.model.events import AssistantMessage, SessionEvent
from actorloop.runtime.model.messages import Message
from actorloop.runtime.providers.scripted import HANG, ScriptedProvider, reply, tool_call
from actorloop.runtime.providers.sim import SimProvider

U1 = TokenUsage(input=10, output=4, cache_read=200, cache_write=30)
U2 = TokenUsage(input=5, output=9, cache_read=230, reasoning=3)


class Traces:
    """An SDK tracer provider whose finished spans stay in memory."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def telemetry(self, capture_content: bool | None = None) -> Telemetry:
        return Telemetry(self.provider, capture_content)

    @property
    def spans(self) -> tuple[ReadableSpan, ...]:
        return self.exporter.get_finished_spans()

    def named(self, prefix: str) -> list[ReadableSpan]:
        return [span for span in self.spans if span.name.startswith(prefix)]

    def one(self, name: str) -> ReadableSpan:
        [span] = [span for span in self.spans if span.name == name]
        return span

    def children(self, parent: ReadableSpan) -> list[ReadableSpan]:
        return [s for s in self.spans if s.parent is not None and s.parent.span_id == sid(parent)]


@pytest.fixture
def traces() -> Iterator[Traces]:
    recorded = Traces()
    yield recorded
    recorded.provider.shutdown()


def sid(span: ReadableSpan) -> int:
    context = span.get_span_context()
    assert context is not None
    return context.span_id


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def with_usage(chunks: Sequence[StreamChunk], usage: TokenUsage) -> tuple[StreamChunk, ...]:
    return tuple(UsageReport(usage) if isinstance(c, UsageReport) else c for c in chunks)


async def _lookup(args: dict[str, Any], ctx: ToolContext) -> str:
    return f"found {args.get('q')}"


LOOKUP = Tool("lookup", "Look a thing up in the wiki.", {"type": "object"}, _lookup)


def agent_options(**kwargs: Any) -> AgentOptions:
    return AgentOptions(model="m", tools=(LOOKUP,), labels={"name": "researcher"}, **kwargs)


async def test_a_turn_is_an_invoke_agent_span_over_its_model_and_tool_calls(
    traces: Traces,
) -> None:
    provider = ScriptedProvider(
        [with_usage(tool_call("c1", "lookup", {"q": "otel"}), U1), reply("done", U2)]
    )
    async with open_runtime(provider, telemetry=traces.telemetry()) as rt:
        agent = await rt.spawn(agent_options(max_tokens=256, temperature=0.5))
        assert (await agent.send("find otel")).reason == "completed"
        session_id = agent.id

    turn = traces.one("invoke_agent researcher")
    assert turn.parent is None and turn.kind == SpanKind.INTERNAL
    assert turn.status.status_code == StatusCode.UNSET
    expected_turn = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "researcher",
        "gen_ai.conversation.id": session_id,
        "gen_ai.provider.name": "scripted",
        "gen_ai.request.model": "m",
        "gen_ai.usage.input_tokens": (U1 + U2).prompt_total,
        "gen_ai.usage.output_tokens": 13,
        "gen_ai.usage.cache_read.input_tokens": 430,
        "gen_ai.usage.cache_creation.input_tokens": 30,
        "gen_ai.usage.reasoning.output_tokens": 3,
        "actorloop.turn": 1,
        "actorloop.turn.trigger": "message",
        "actorloop.turn.end_reason": "completed",
        "actorloop.turn.steps": 2,
        "actorloop.turn.model_calls": 2,
        "actorloop.session.origin": "startup",
    }
    assert expected_turn.items() <= attrs(turn).items()

    first, second = sorted(traces.named("chat "), key=lambda span: span.start_time or 0)
    tool = traces.one("execute_tool lookup")
    assert {sid(s) for s in traces.children(turn)} == {sid(first), sid(second), sid(tool)}
    assert len({s.context.trace_id for s in traces.spans if s.context}) == 1
    for call, usage, finish in ((first, U1, "tool_call"), (second, U2, "stop")):
        assert call.name == "chat m" and call.kind == SpanKind.CLIENT
        got = attrs(call)
        assert got["gen_ai.operation.name"] == "chat"
        assert got["gen_ai.conversation.id"] == session_id
        assert got["gen_ai.request.max_tokens"] == 256
        assert got["gen_ai.request.temperature"] == 0.5
        assert got["gen_ai.request.stream"] is True
        assert got["gen_ai.usage.input_tokens"] == usage.prompt_total
        assert got["gen_ai.usage.output_tokens"] == usage.output
        assert got["gen_ai.usage.cache_read.input_tokens"] == usage.cache_read
        assert got["gen_ai.usage.cache_creation.input_tokens"] == usage.cache_write
        assert got["gen_ai.response.finish_reasons"] == (finish,)
        assert got["gen_ai.response.time_to_first_chunk"] >= 0
        assert (call.end_time or 0) - (call.start_time or 0) >= 0
    # the tool ran between the two model calls
    assert (first.end_time or 0) <= (tool.start_time or 0)
    assert (tool.end_time or 0) <= (second.start_time or 0)
    expected_tool = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "lookup",
        "gen_ai.tool.call.id": "c1",
        "gen_ai.tool.type": "function",
        "gen_ai.tool.description": "Look a thing up in the wiki.",
    }
    assert expected_tool.items() <= attrs(tool).items()
    assert tool.status.status_code == StatusCode.UNSET
    # content is off by default
    recorded = set().union(*(attrs(span) for span in traces.spans))
    for key in (
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.system_instructions",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
    ):
        assert key not in recorded


async def test_message_content_is_recorded_when_opted_in(traces: Traces) -> None:
    provider = ScriptedProvider([tool_call("c1", "lookup", {"q": "otel"}), reply("done")])
    async with open_runtime(provider, telemetry=traces.telemetry(capture_content=True)) as rt:
        rt.on("agent/session-prefix", _prefix)
        agent = await rt.spawn(agent_options(system="Be brief."))
        await agent.send("find otel")

    first, second = sorted(traces.named("chat "), key=lambda span: span.start_time or 0)
    assert orjson.loads(attrs(first)["gen_ai.system_instructions"]) == [
        {"type": "text", "content": "Be brief."}
    ]
    assert orjson.loads(attrs(first)["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "Skills: search."}]},
        {"role": "user", "parts": [{"type": "text", "content": "find otel"}]},
    ]
    assert orjson.loads(attrs(first)["gen_ai.output.messages"]) == [
        {
            "role": "assistant",
            "parts": [
                {"type": "tool_call", "id": "c1", "name": "lookup", "arguments": {"q": "otel"}}
            ],
        }
    ]
    assert orjson.loads(attrs(first)["gen_ai.tool.definitions"]) == [
        {"type": "function", "name": "lookup"}
    ]
    second_input = orjson.loads(attrs(second)["gen_ai.input.messages"])
    assert second_input[-1] == {
        "role": "user",
        "parts": [{"type": "tool_call_response", "id": "c1", "response": "found otel"}],
    }
    tool = attrs(traces.one("execute_tool lookup"))
    assert tool["gen_ai.tool.call.arguments"] == '{"q": "otel"}'
    assert tool["gen_ai.tool.call.result"] == "found otel"


async def _prefix(agent: Any, value: Any, next: Any) -> Any:
    return (Message.user("Skills: search."), *await next())


async def test_content_capture_follows_the_environment_by_default(
    traces: Traces, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CAPTURE_CONTENT_ENV, "true")
    async with open_runtime(ScriptedProvider([reply("a")]), telemetry=traces.telemetry()) as rt:
        await (await rt.spawn(agent_options())).send("hello")
    assert "gen_ai.input.messages" in attrs(traces.one("chat m"))
    traces.exporter.clear()
    monkeypatch.setenv(CAPTURE_CONTENT_ENV, "false")
    async with open_runtime(ScriptedProvider([reply("a")]), telemetry=traces.telemetry()) as rt:
        await (await rt.spawn(agent_options())).send("hello")
    assert "gen_ai.input.messages" not in attrs(traces.one("chat m"))


async def cancel_while_streaming(agent: Agent, reason: str) -> None:
    """Send a message and cancel its turn once the model's first chunk is logged."""
    streaming = trio.Event()

    def on_event(_agent: Any, event: SessionEvent) -> None:
        if event.type == "assistant/chunk":
            streaming.set()

    agent.on("session/event", on_event)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(agent.send, "wait")
        await streaming.wait()
        agent.cancel(reason)


async def test_a_cancel_while_the_model_streams_ends_turn_and_call_cancelled(
    traces: Traces,
) -> None:
    async with open_runtime(ScriptedProvider([HANG]), telemetry=traces.telemetry()) as rt:
        await cancel_while_streaming(await rt.spawn(agent_options()), "user pressed stop")
    turn, call = traces.one("invoke_agent researcher"), traces.one("chat m")
    assert turn.status.status_code == StatusCode.ERROR
    assert turn.status.description == "user pressed stop"
    assert attrs(turn)["error.type"] == "cancelled"
    assert attrs(turn)["actorloop.turn.end_reason"] == "aborted"
    assert call.status.status_code == StatusCode.ERROR
    assert attrs(call)["error.type"] == "cancelled"
    assert (call.end_time or 0) <= (turn.end_time or 0)


class _LateSdk(otel_trace.TracerProvider):
    """What the API's proxy does for an application that configures its SDK late: no-op
    spans until `configure()`, the SDK's from then on."""

    def __init__(self, sdk: TracerProvider) -> None:
        self.sdk = sdk
        self.configured = False

    def get_tracer(self, *args: Any, **kwargs: Any) -> otel_trace.Tracer:
        late = self

        def current() -> otel_trace.Tracer:
            return late.sdk.get_tracer(*args, **kwargs) if late.configured else NO_OP

        class Tracer(otel_trace.Tracer):
            def start_span(self, *span_args: Any, **span_kwargs: Any) -> otel_trace.Span:
                return current().start_span(*span_args, **span_kwargs)

            def start_as_current_span(self, *span_args: Any, **span_kwargs: Any) -> Any:
                return current().start_as_current_span(*span_args, **span_kwargs)

        return Tracer()


NO_OP = otel_trace.NoOpTracer()


async def test_a_turn_begun_with_no_sdk_records_nothing_and_the_next_turn_is_traced(
    traces: Traces,
) -> None:
    late = _LateSdk(traces.provider)
    turns = (tool_call("c1", "lookup", {"q": "a"}), reply("one"))
    provider = ScriptedProvider([*turns, tool_call("c2", "lookup"), reply("two")])
    async with open_runtime(provider, telemetry=Telemetry(late)) as rt:
        agent = await rt.spawn(agent_options())
        assert (await agent.send("first")).reason == "completed"
        assert traces.spans == ()
        late.configured = True
        assert (await agent.send("second")).reason == "completed"
    turn = traces.one("invoke_agent researcher")
    assert attrs(turn)["actorloop.turn"] == 2
    assert {span.name for span in traces.children(turn)} == {"chat m", "execute_tool lookup"}
    assert len(traces.named("chat")) == 2 and len(traces.spans) == 4


class _ClosingStream:
    """A provider whose one stream hangs after a chunk and records that it was closed."""

    name = "closing"

    def __init__(self) -> None:
        self.closed = trio.Event()

    def model_info(self, model: str) -> None:
        return None

    async def stream(self, request: Request) -> Any:
        try:
            yield BlockStart(0, "text")
            await trio.sleep_forever()
        finally:
            self.closed.set()


async def test_sampled_out_calls_are_read_unwrapped_and_still_closed_in_their_step() -> None:
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    exporter = InMemorySpanExporter()
    sampled_out = TracerProvider(sampler=ALWAYS_OFF)
    sampled_out.add_span_processor(SimpleSpanProcessor(exporter))
    answer = ScriptedProvider([reply("fine", U1)])
    async with open_runtime(answer, telemetry=Telemetry(sampled_out)) as rt:
        agent = await rt.spawn(agent_options())
        result = await agent.send("hello")
        assert result.reason == "completed" and result.usage == U1
    hanging = _ClosingStream()
    async with open_runtime(hanging, telemetry=Telemetry(sampled_out)) as rt:
        agent = await rt.spawn(agent_options())
        await cancel_while_streaming(agent, "stop")
        # the provider's cleanup ran inside the step, before the turn's end was logged
        assert hanging.closed.is_set()
        assert agent.session.events[-1].type == "turn/end"
    assert exporter.get_finished_spans() == ()
    sampled_out.shutdown()


async def test_a_cancel_between_chunks_still_ends_the_abandoned_call(traces: Traces) -> None:
    # cancelled from an observer of the first chunk: the loop stops reading the stream
    # in its own frame, so the provider wrapper never sees the cancel; the turn's end does
    async with open_runtime(ScriptedProvider([reply("a b c")]), telemetry=traces.telemetry()) as rt:
        agent = await rt.spawn(agent_options())

        def on_event(agent: Any, event: SessionEvent) -> None:
            if event.type == "assistant/chunk":
                agent.cancel("stop now")

        agent.on("session/event", on_event)
        assert (await agent.send("go")).reason == "aborted"
        chat = traces.one("chat m")  # ended at the turn's end, not later
        assert chat.status.status_code == StatusCode.ERROR
        assert attrs(chat)["error.type"] == "cancelled"
    assert attrs(traces.one("invoke_agent researcher"))["error.type"] == "cancelled"


async def test_a_cancelled_tool_call_is_a_cancelled_execute_tool_span(traces: Traces) -> None:
    running = trio.Event()

    async def stall_forever(args: dict[str, Any], ctx: ToolContext) -> str:
        running.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    stall = Tool("stall", "Never returns.", {"type": "object"}, stall_forever)
    provider = ScriptedProvider([tool_call("c9", "stall")])
    async with open_runtime(provider, telemetry=traces.telemetry()) as rt:
        agent = await rt.spawn(AgentOptions(model="m", tools=(stall,)))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.send, "stall")
            await running.wait()
            agent.cancel()
    tool = traces.one("execute_tool stall")
    assert tool.status.status_code == StatusCode.ERROR
    assert attrs(tool)["error.type"] == "cancelled"
    assert attrs(tool)["actorloop.error.code"] == ErrorCode.TOOL_CANCELLED
    turn = traces.one("invoke_agent")  # no name label: the span name has none either
    assert sid(turn) == (tool.parent.span_id if tool.parent else None)
    assert attrs(turn)["error.type"] == "cancelled"


async def test_provider_errors_are_the_error_type_of_call_and_turn(traces: Traces) -> None:
    def rate_limited(request: Request) -> list[StreamChunk]:
        raise ProviderError("slow down", ErrorCode.RATE_LIMITED)

    reported = [
        BlockStart(0, "text"),
        TextDelta(0, "par"),
        BlockEnd(0),
        Finish("error", ErrorInfo("overloaded", ErrorCode.OVERLOADED)),
    ]
    async with open_runtime(
        ScriptedProvider([rate_limited, reported]), telemetry=traces.telemetry()
    ) as rt:
        agent = await rt.spawn(agent_options())
        assert (await agent.send("one")).reason == "error"
        assert (await agent.send("two")).reason == "error"
    first, second = sorted(traces.named("chat "), key=lambda span: span.start_time or 0)
    assert attrs(first)["error.type"] == "RATE_LIMITED"
    assert first.status.status_code == StatusCode.ERROR
    assert first.status.description == "slow down"
    assert attrs(second)["error.type"] == "OVERLOADED"
    assert attrs(second)["gen_ai.response.finish_reasons"] == ("error",)
    turns = sorted(traces.named("invoke_agent"), key=lambda s: attrs(s)["actorloop.turn"])
    assert [attrs(t)["error.type"] for t in turns] == ["RATE_LIMITED", "OVERLOADED"]
    assert all(t.status.status_code == StatusCode.ERROR for t in turns)


def _route(parent: str, child: str) -> Any:
    """A script entry answering parent and child calls apart (their order may race)."""

    def entry(request: Request) -> Sequence[StreamChunk]:
        return reply(child) if "." in request.session_id else reply(parent)

    return entry


@pytest.mark.parametrize("background", [False, True])
async def test_a_subagent_turn_is_a_child_of_its_execute_tool_span(
    traces: Traces, background: bool
) -> None:
    provider = ScriptedProvider(
        [
            tool_call("c1", "delegate", {"task": "draft it"}),
            _route("ok", "drafted"),
            _route("ok", "drafted"),
        ]
    )
    async with open_runtime(provider, telemetry=traces.telemetry()) as rt:
        child_options = AgentOptions(model="m", labels={"name": "writer"})
        parent = await rt.spawn(
            AgentOptions(
                model="m",
                labels={"name": "lead"},
                tools=(subagent_tool(rt, options=child_options, background=background),),
            )
        )
        answered = trio.Event()

        def on_event(_agent: Any, event: SessionEvent) -> None:
            if event.type == "context/message" and event.data.source.plugin == "subagent":
                answered.set()

        parent.on("session/event", on_event)
        await parent.send("delegate this")
        if background:
            await answered.wait()  # injected after the child's turn ended
    [lead_turn] = [s for s in traces.named("invoke_agent lead") if attrs(s)["actorloop.turn"] == 1]
    tool = traces.one("execute_tool delegate")
    child_turn = traces.one("invoke_agent writer")
    assert tool.parent is not None and tool.parent.span_id == sid(lead_turn)
    assert child_turn.parent is not None and child_turn.parent.span_id == sid(tool)
    assert child_turn.context and lead_turn.context
    assert child_turn.context.trace_id == lead_turn.context.trace_id
    assert attrs(child_turn)["actorloop.parent_agent"] == parent.id
    assert attrs(child_turn)["gen_ai.conversation.id"] == f"{parent.id}.c1"
    [child_call] = traces.children(child_turn)
    assert child_call.name == "chat m"
    if not background:
        # an awaited child's turn lies inside the tool call that waited for it
        assert (tool.start_time or 0) <= (child_turn.start_time or 0)
        assert (child_turn.end_time or 0) <= (tool.end_time or 0)


async def test_fork_and_resume_link_to_the_turns_they_continue(traces: Traces) -> None:
    provider = ScriptedProvider([reply("one"), reply("two"), reply("fork"), reply("back")])
    async with open_runtime(provider, telemetry=traces.telemetry()) as rt:
        agent = await rt.spawn(agent_options())
        await agent.send("first")
        first_end = agent.session.events[-1].seq
        await agent.send("second")
        child = await rt.fork(agent.id, boundary=first_end, child_id="the-fork")
        await child.send("fork from turn one")
        session_id = agent.id
        await agent.dispose()
        again = await rt.resume(session_id, agent_options())
        await again.send("resumed")

    by_conversation: dict[str, list[ReadableSpan]] = {}
    for span in traces.named("invoke_agent"):
        by_conversation.setdefault(attrs(span)["gen_ai.conversation.id"], []).append(span)
    turn1, turn2, resumed = sorted(by_conversation[session_id], key=lambda s: s.start_time or 0)
    [forked] = by_conversation["the-fork"]

    [link] = forked.links
    assert link.context.span_id == sid(turn1)  # the turn that ended at the fork point
    assert dict(link.attributes or {}) == {"actorloop.link.kind": "fork"}
    assert attrs(forked)["actorloop.session.origin"] == "fork"
    assert attrs(forked)["actorloop.session.parent"] == session_id
    assert attrs(forked)["actorloop.session.seed_length"] == first_end + 1
    assert forked.parent is None  # its own trace, linked

    [link] = resumed.links
    assert link.context.span_id == sid(turn2)
    assert dict(link.attributes or {}) == {"actorloop.link.kind": "resume"}
    assert attrs(resumed)["actorloop.session.origin"] == "resume"
    assert not turn2.links and "actorloop.session.origin" not in attrs(turn2)


async def test_a_resume_in_a_new_process_has_no_link_but_says_where_it_came_from(
    traces: Traces, tmp_path: Any
) -> None:
    url = f"sqlite:{tmp_path / 'links.db'}"
    async with open_runtime(ScriptedProvider([reply("one")]), store=url, telemetry=False) as rt:
        agent = await rt.spawn(agent_options())
        await agent.send("first")
        session_id = agent.id
    async with open_runtime(
        ScriptedProvider([reply("two")]), store=url, telemetry=traces.telemetry()
    ) as rt:
        await (await rt.resume(session_id, agent_options())).send("again")
    turn = traces.one("invoke_agent researcher")
    assert not turn.links
    assert attrs(turn)["actorloop.session.origin"] == "resume"
    assert attrs(turn)["gen_ai.conversation.id"] == session_id
    assert attrs(turn)["actorloop.turn"] == 2


async def test_the_summarizer_call_is_a_chat_span_of_its_compaction_turn(traces: Traces) -> None:
    summary = TokenUsage(input=500, output=20, cache_read=100)
    provider = ScriptedProvider([reply("one"), reply("two"), reply("summary", summary)])
    options = agent_options(compaction=CompactionConfig(auto=False, retain_tokens=1))
    async with open_runtime(provider, telemetry=traces.telemetry()) as rt:
        agent = await rt.spawn(options)
        await agent.send("first")
        await agent.send("second")
        assert (await agent.compact()).reason == "completed"
    compaction = next(
        s
        for s in traces.named("invoke_agent")
        if attrs(s)["actorloop.turn.trigger"] == "compaction"
    )
    [call] = traces.children(compaction)
    assert attrs(call)["actorloop.request.one_shot"] is True
    assert attrs(call)["gen_ai.usage.input_tokens"] == summary.prompt_total
    assert attrs(compaction)["actorloop.turn.compaction_calls"] == 1
    assert attrs(compaction)["gen_ai.usage.input_tokens"] == summary.prompt_total


async def test_chat_spans_report_the_usage_the_log_records(traces: Traces) -> None:
    """With the simulated provider's prompt cache: what each span says is what the
    session's assistant/message events recorded."""
    sim = SimProvider("anthropic", min_cache_tokens=64)
    async with open_runtime(sim, telemetry=traces.telemetry()) as rt:
        rt.on("agent/session-prefix", _long_prefix)
        agent = await rt.spawn(agent_options())
        for text in ("one", "two", "three"):
            await agent.send(text)
        logged = [
            e.data.usage for e in agent.session.events if isinstance(e.data, AssistantMessage)
        ]
    calls = sorted(traces.named("chat "), key=lambda span: span.start_time or 0)
    assert len(calls) == len(logged) == 3
    for call, usage in zip(calls, logged, strict=True):
        assert usage is not None
        assert attrs(call)["gen_ai.usage.cache_read.input_tokens"] == usage.cache_read
        assert attrs(call)["gen_ai.usage.input_tokens"] == usage.prompt_total
    assert logged[-1] is not None and logged[-1].cache_read > 0  # the cache did warm up


async def _long_prefix(agent: Any, value: Any, next: Any) -> Any:
    return (Message.user("Skills:\n" + "- a skill with a long description\n" * 40), *await next())


async def test_off_and_bad_settings(traces: Traces) -> None:
    provider = ScriptedProvider([reply("a")])
    async with open_runtime(provider, telemetry=False) as rt:
        assert not isinstance(rt.provider_for(AgentOptions(model="m")).inner, TracedProvider)
        await (await rt.spawn(agent_options())).send("hi")
    async with open_runtime(ScriptedProvider([]), telemetry=True) as rt:
        assert isinstance(rt.provider_for(AgentOptions(model="m")).inner, TracedProvider)
    with pytest.raises(TelemetryError, match="got str"):
        async with open_runtime(ScriptedProvider([]), telemetry="yes"):  # type: ignore[arg-type]
            pass
    assert traces.spans == ()


def test_without_opentelemetry_installed_nothing_is_traced_and_true_is_refused() -> None:
    """A process where `import opentelemetry` fails, as without the `otel` extra."""
    script = """
import sys
sys.modules["opentelemetry"] = None  # what an absent package looks like to `import`
import trio
from actorloop.runtime import AgentOptions, Runtime
from actorloop.runtime.testing import ScriptedProvider, reply
from actorloop.runtime.errors import TelemetryError
from actorloop.runtime.host.telemetry import available

async def main():
    assert not available()
    async with Runtime.open(provider=ScriptedProvider([reply("hi")])) as rt:
        agent = await rt.spawn(AgentOptions(model="m"))
        print((await agent.send("hello")).reason)
        print(type(rt.providers["scripted"]).__name__)
    try:
        async with Runtime.open(provider=ScriptedProvider([]), telemetry=True):
            pass
    except TelemetryError as exc:
        print("refused:", exc)

trio.run(main)
"""
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:2] == ["completed", "ScriptedProvider"]
    assert lines[2].startswith("refused: telemetry was asked for but opentelemetry-api")


GLOBAL_PROVIDER_RUN = """
import sys
import orjson
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)  # what an application's OpenTelemetry setup does

from actorloop.runtime.console import main

main(["run", "tiny", "--store", sys.argv[1], "--json"], standalone_mode=False)
spans = [
    {
        "name": span.name,
        "id": span.context.span_id,
        "trace": format(span.context.trace_id, "032x"),
        "parent": span.parent.span_id if span.parent else None,
        "links": [[link.context.span_id, dict(link.attributes)] for link in span.links],
        "attributes": dict(span.attributes),
    }
    for span in exporter.get_finished_spans()
]
with open(sys.argv[2], "wb") as out:
    out.write(orjson.dumps(spans))
"""


def test_actorloop_run_traces_through_the_global_tracer_provider(tmp_path: Any) -> None:
    """The CLI sets nothing up: the application's global provider decides, and the run's
    subagent, fork, cancellation and resume all show in the spans."""
    dump = tmp_path / "spans.json"
    result = subprocess.run(
        [sys.executable, "-c", GLOBAL_PROVIDER_RUN, f"sqlite:{tmp_path / 'run.db'}", str(dump)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    report = orjson.loads(result.stdout)
    spans = orjson.loads(dump.read_bytes())
    by_id = {span["id"]: span for span in spans}
    turns = [s for s in spans if s["attributes"]["gen_ai.operation.name"] == "invoke_agent"]
    calls = [s for s in spans if s["attributes"]["gen_ai.operation.name"] == "chat"]
    assert len(turns) == report["turns"] and len(calls) == report["requests"]
    assert all(by_id[c["parent"]]["name"].startswith("invoke_agent") for c in calls)

    [coordinator] = [s for s in turns if s["name"] == "invoke_agent coordinator"]
    [delegate] = [s for s in spans if s["name"] == "execute_tool delegate"]
    [child] = [s for s in turns if "actorloop.parent_agent" in s["attributes"]]
    assert coordinator["parent"] is None and delegate["parent"] == coordinator["id"]
    assert child["name"] == "invoke_agent worker" and child["parent"] == delegate["id"]
    assert child["trace"] == coordinator["trace"]

    [fork] = [s for s in turns if s["attributes"]["gen_ai.conversation.id"].endswith("-fork")]
    [[target, kind]] = fork["links"]
    assert kind == {"actorloop.link.kind": "fork"}
    assert (
        by_id[target]["attributes"]["gen_ai.conversation.id"]
        == fork["attributes"]["actorloop.session.parent"]
    )
    [resumed] = [s for s in turns if s["attributes"].get("actorloop.session.origin") == "resume"]
    [[target, kind]] = resumed["links"]
    assert kind == {"actorloop.link.kind": "resume"}
    assert (
        by_id[target]["attributes"]["gen_ai.conversation.id"]
        == resumed["attributes"]["gen_ai.conversation.id"]
    )
    [cancelled] = [s for s in turns if s["attributes"].get("error.type") == "cancelled"]
    assert cancelled["attributes"]["actorloop.turn.end_reason"] == "aborted"
