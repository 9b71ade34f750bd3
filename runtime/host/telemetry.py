"""OpenTelemetry tracing of what agents do, after the GenAI semantic conventions:
`invoke_agent {name}` per turn, `chat {model}` per model call, `execute_tool {name}` per tool
call. Optional (the `otel` extra: opentelemetry-api only); docs/observability.md is the map.

Spans are built from outside the loop: a provider wrapper times each model call, and
runtime-wide `session/event`, `agent/session-start` and `agent/status` listeners open and
close the turn and tool spans as the loop appends its events. Parents are explicit (a turn
runs in its agent's actor task, not in the caller's context): a turn is the root of its own
trace, a subagent's turn is a child of the parent's `execute_tool` span (found through the
child's `parent_agent`/`parent_call` labels), and a resumed or forked loop instance links
its first turn to the turn it continues when that turn ran in this process.
"""

from __future__ import annotations

import importlib.metadata
import os
import time
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Hashable
from contextlib import AbstractAsyncContextManager, aclosing, nullcontext
from typing import TYPE_CHECKING, Any, Generic, TypeAlias, TypeVar, cast

import orjson
import trio
from attrs import frozen

from ..errors import (
    ActorloopError,
    ErrorCode,
    ProviderError,
    StreamProtocolError,
    TelemetryError,
)
from ..log.request import Request
from ..model.chunks import ChunkAssembler, Finish, StreamChunk, TokenUsage, UsageReport
from ..model.events import (
    AssistantMessage,
    CompactionSummary,
    SessionEvent,
    ToolCallEvent,
    ToolResultEvent,
    TurnEnd,
    TurnEndReason,
    TurnStart,
)
from ..model.messages import Content, Message, Reasoning, Text, ToolCall, ToolResult
from ..providers.base import ModelInfo, Provider

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace as otel_trace
except ImportError:  # the `otel` extra is not installed: tracing stays off
    otel_context = None  # type: ignore[assignment]
    otel_trace = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Link, Span, SpanContext, TracerProvider

    from ..control.handle import Agent
    from .runtime import Runtime

INSTRUMENTATION = "actorloop"
CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"

# GenAI semantic-convention attributes (gen_ai.* registry) and the stable `error.type`.
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
CONVERSATION = "gen_ai.conversation.id"
AGENT_NAME = "gen_ai.agent.name"
REQUEST_MODEL = "gen_ai.request.model"
REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
REQUEST_TEMPERATURE = "gen_ai.request.temperature"
REQUEST_STOP = "gen_ai.request.stop_sequences"
REQUEST_STREAM = "gen_ai.request.stream"
FINISH_REASONS = "gen_ai.response.finish_reasons"
TIME_TO_FIRST_CHUNK = "gen_ai.response.time_to_first_chunk"
USAGE_INPUT = "gen_ai.usage.input_tokens"
USAGE_OUTPUT = "gen_ai.usage.output_tokens"
USAGE_CACHE_READ = "gen_ai.usage.cache_read.input_tokens"
USAGE_CACHE_CREATION = "gen_ai.usage.cache_creation.input_tokens"
USAGE_REASONING = "gen_ai.usage.reasoning.output_tokens"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_DESCRIPTION = "gen_ai.tool.description"
TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_RESULT = "gen_ai.tool.call.result"
SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
TOOL_DEFINITIONS = "gen_ai.tool.definitions"
ERROR_TYPE = "error.type"

# actorloop's own attributes.
TURN = "actorloop.turn"
TURN_TRIGGER = "actorloop.turn.trigger"
TURN_END_REASON = "actorloop.turn.end_reason"
TURN_STEPS = "actorloop.turn.steps"
MODEL_CALLS = "actorloop.turn.model_calls"
COMPACTION_CALLS = "actorloop.turn.compaction_calls"
STEP = "actorloop.step"
ORIGIN = "actorloop.session.origin"
PARENT_SESSION = "actorloop.session.parent"
SEED_LENGTH = "actorloop.session.seed_length"
PARENT_AGENT = "actorloop.parent_agent"
ERROR_CODE = "actorloop.error.code"
ONE_SHOT = "actorloop.request.one_shot"
LINK_KIND = "actorloop.link.kind"

CANCELLED = "cancelled"
"""The `error.type` of every span whose operation was cancelled (turn, model call, tool)."""
OTHER_ERROR = "_OTHER"
CANCELLED_TURNS = frozenset({"aborted", "disposed", "interrupted"})
CANCELLED_TOOL_CODES = frozenset(
    {
        ErrorCode.TOOL_CANCELLED,
        ErrorCode.TOOL_ABORTED_BEFORE_DISPATCH,
        ErrorCode.TOOL_NOT_STARTED,
    }
)
FINISH_REASON = {
    "stop": "stop",
    "tool-calls": "tool_call",
    "max-tokens": "length",
    "error": "error",
}
REMEMBERED = 4096
"""How many ended turn and tool spans each map keeps for links and subagent parents."""

TelemetrySetting: TypeAlias = "bool | Telemetry | None"
K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def available() -> bool:
    """Whether opentelemetry-api is importable (the `otel` extra is installed)."""
    return otel_trace is not None


@frozen
class Telemetry:
    """How a runtime traces. `tracer_provider` defaults to the global one, so whatever SDK
    the application configured decides (with none configured every span is a no-op).
    Message content (system prompt, messages, tool arguments and results) is recorded only
    when `capture_content` is True, or, left None, when the environment variable
    OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT is `true`."""

    tracer_provider: TracerProvider | None = None
    capture_content: bool | None = None


def open_tracing(setting: TelemetrySetting) -> Tracing | None:
    """The tracing a runtime runs with: None (the default) traces when opentelemetry-api is
    importable, True insists on it, False turns it off, a `Telemetry` configures it."""
    if setting is False:
        return None
    if setting is None:
        return Tracing(Telemetry()) if available() else None
    if setting is not True and not isinstance(setting, Telemetry):
        raise TelemetryError(
            f"telemetry must be True, False, None or a Telemetry, got {type(setting).__name__}"
        )
    if not available():
        raise TelemetryError(
            "telemetry was asked for but opentelemetry-api is not installed; "
            "install the extra: pip install 'actorloop[otel]'"
        )
    return Tracing(Telemetry() if setting is True else setting)


class _Recent(Generic[K, V]):
    """A mapping that forgets its oldest entries past `limit` (bounded memory)."""

    def __init__(self, limit: int = REMEMBERED) -> None:
        self._items: OrderedDict[K, V] = OrderedDict()
        self._limit = limit

    def put(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self._limit:
            self._items.popitem(last=False)

    def get(self, key: K) -> V | None:
        return self._items.get(key)


class _Call:
    """One traced model call. It is ended exactly once, by the provider wrapper when the
    stream ends, or by the turn's end when the loop stopped reading it (a cancel)."""

    __slots__ = ("_ended", "_turn", "assembler", "finish", "span", "usage")

    def __init__(self, span: Span, turn: _OpenTurn | None, capture: bool) -> None:
        self.span = span
        self._ended = False
        self._turn = turn
        self.usage: TokenUsage | None = None
        self.finish: Finish | None = None
        self.assembler: ChunkAssembler | None = ChunkAssembler() if capture else None
        if turn is not None:
            turn.calls.add(self)

    def observe(self, chunk: StreamChunk) -> None:
        if isinstance(chunk, UsageReport):
            self.usage = chunk.usage
        elif isinstance(chunk, Finish):
            self.finish = chunk
        if self.assembler is not None:
            try:
                self.assembler.feed(chunk)
            except StreamProtocolError:
                self.assembler = None  # the loop reports the broken stream; stop assembling

    def complete(self) -> None:
        """The stream ended: its finish (or its lack) says how the call ended."""
        finish = self.finish
        if finish is None:
            self.end(ErrorCode.STREAM_INCOMPLETE, "provider stream ended without a finish chunk")
            return
        self.span.set_attribute(FINISH_REASONS, (FINISH_REASON[finish.kind],))
        if self.assembler is not None and self.span.is_recording():
            content = self.assembler.content(drop_tool_calls=finish.kind == "max-tokens")
            output = {"role": "assistant", "parts": _parts(content)}
            self.span.set_attribute(OUTPUT_MESSAGES, _json([output]))
        if finish.kind == "error":
            error = finish.error
            self.end(
                (error.code if error else None) or OTHER_ERROR,
                error.message if error else "provider reported an error",
            )
        else:
            self.end()

    def end(self, error_type: str | None = None, description: str | None = None) -> None:
        if self._ended:
            return
        self._ended = True
        if self._turn is not None:
            self._turn.calls.discard(self)
            self._turn = None
        if self.usage is not None:
            _set_usage(self.span, self.usage)
        _end(self.span, error_type, description)


class _OpenTurn:
    """The spans of one turn that is still open."""

    __slots__ = ("calls", "compaction_calls", "model_calls", "span", "steps", "tools", "usage")

    def __init__(self, span: Span) -> None:
        self.span = span
        self.usage = TokenUsage()
        self.model_calls = 0
        self.compaction_calls = 0
        self.steps = 0
        self.tools: dict[str, Span] = {}
        self.calls: set[_Call] = set()


class Tracing:
    """The spans of one runtime: `Runtime.open` wraps its providers (`wrap`) and subscribes
    the listeners (`attach`); everything runs on the trio thread, synchronously."""

    def __init__(self, settings: Telemetry) -> None:
        assert otel_trace is not None
        provider = settings.tracer_provider or otel_trace.get_tracer_provider()
        self.tracer = provider.get_tracer(INSTRUMENTATION, _version())
        capture = settings.capture_content
        self.capture_content = _env_capture() if capture is None else capture
        self._root: Context = otel_context.Context()
        self._turns: dict[str, _OpenTurn] = {}
        self._untraced: set[str] = set()
        """Agents whose open turn got an invalid span context: no SDK was configured when
        it began, so nothing under it can be recorded and its calls and tools start no
        spans (the next turn asks again)."""
        self._starts: dict[str, tuple[str, tuple[Link, ...]]] = {}
        self._turn_ends: _Recent[tuple[str, int], SpanContext] = _Recent()
        self._last_turn: _Recent[str, SpanContext] = _Recent()
        self._tool_spans: _Recent[tuple[str, str], SpanContext] = _Recent()
        self._provider_name: Callable[[Agent], str | None] = lambda _agent: None
        self._handlers: dict[str, Callable[[Agent, SessionEvent], None]] = {
            "turn/start": self._turn_start,
            "step/start": self._step_start,
            "assistant/message": self._assistant_message,
            "compaction/summary": self._compaction_summary,
            "tool/call": self._tool_call,
            "tool/result": self._tool_result,
            "turn/end": self._turn_end,
        }

    # ------------------------------------------------------------------ installation

    def wrap(self, provider: Provider) -> Provider:
        """`provider` with a `chat {model}` span around each of its streams."""
        return TracedProvider(provider, self)

    def attach(self, runtime: Runtime) -> None:
        """Subscribe this tracing to `runtime`'s events (runtime-wide listeners)."""

        def provider_name(agent: Agent) -> str | None:
            try:
                return runtime.provider_for(agent.options).name
            except ActorloopError:
                return None

        self._provider_name = provider_name
        runtime.on("session/event", self.on_event)
        runtime.on("agent/session-start", self.on_session_start)
        runtime.on("agent/status", self.on_status)

    # ------------------------------------------------------------------ listeners

    def on_event(self, agent: Agent, event: SessionEvent) -> None:
        handler = self._handlers.get(event.type)
        if handler is not None:
            handler(agent, event)

    def on_session_start(self, agent: Agent, origin: str) -> None:
        """Remember how this loop instance began; its first turn carries it, with a link to
        the turn it continues (resume: the session's last turn; fork: the parent's turn
        that ended at the fork point), when that turn was traced in this process."""
        meta = agent.session.meta
        target: SpanContext | None = None
        if origin == "resume":
            target = self._last_turn.get(agent.id)
        elif origin == "fork" and meta.parent_session is not None and meta.seed_length:
            target = self._turn_ends.get((meta.parent_session, meta.seed_length - 1))
        links = () if target is None else (otel_trace.Link(target, {LINK_KIND: origin}),)
        self._starts[agent.id] = (origin, links)

    def on_status(self, agent: Agent, status: str) -> None:
        if status == "failed":
            turn = self._turns.pop(agent.id, None)
            if turn is not None:
                self._close_turn(agent.id, turn, None, OTHER_ERROR, "the agent's loop failed")
        if status in ("disposed", "failed"):
            self._starts.pop(agent.id, None)
            self._untraced.discard(agent.id)

    def records_calls_of(self, session_id: str) -> bool:
        """False while that session's open turn is untraced (no SDK when it began)."""
        return session_id not in self._untraced

    # ------------------------------------------------------------------ turns

    def _turn_start(self, agent: Agent, event: SessionEvent) -> None:
        data = event.data
        assert isinstance(data, TurnStart)
        meta = agent.session.meta
        stale = self._turns.pop(agent.id, None)
        if stale is not None:
            self._close_turn(agent.id, stale, None, OTHER_ERROR, "turn span left open")
        name = meta.labels.get("name")
        attributes: dict[str, Any] = {
            OPERATION: "invoke_agent",
            CONVERSATION: agent.id,
            REQUEST_MODEL: agent.options.model,
            TURN: data.turn,
            TURN_TRIGGER: data.trigger.kind,
        }
        provider = self._provider_name(agent)
        if provider is not None:
            attributes[PROVIDER] = provider
        if isinstance(name, str) and name:
            attributes[AGENT_NAME] = name
        if meta.parent_session is not None and meta.seed_length is not None:
            attributes[PARENT_SESSION] = meta.parent_session
            attributes[SEED_LENGTH] = meta.seed_length
        context = self._root
        parent_agent, parent_call = meta.labels.get("parent_agent"), meta.labels.get("parent_call")
        if isinstance(parent_agent, str) and isinstance(parent_call, str):
            attributes[PARENT_AGENT] = parent_agent
            tool = self._tool_spans.get((parent_agent, parent_call))
            if tool is not None:
                context = otel_trace.set_span_in_context(otel_trace.NonRecordingSpan(tool))
        links: tuple[Link, ...] = ()
        start = self._starts.pop(agent.id, None)
        if start is not None:
            attributes[ORIGIN], links = start
        span = self.tracer.start_span(
            f"invoke_agent {name}" if isinstance(name, str) and name else "invoke_agent",
            context=context,
            kind=otel_trace.SpanKind.INTERNAL,
            attributes=attributes,
            links=links,
        )
        if not span.get_span_context().is_valid:
            self._untraced.add(agent.id)
            return
        self._untraced.discard(agent.id)
        self._turns[agent.id] = _OpenTurn(span)

    def _step_start(self, agent: Agent, event: SessionEvent) -> None:
        turn = self._turns.get(agent.id)
        if turn is not None:
            turn.steps += 1

    def _assistant_message(self, agent: Agent, event: SessionEvent) -> None:
        turn, data = self._turns.get(agent.id), event.data
        if turn is not None and isinstance(data, AssistantMessage):
            turn.model_calls += 1
            if data.usage is not None:
                turn.usage += data.usage

    def _compaction_summary(self, agent: Agent, event: SessionEvent) -> None:
        turn, data = self._turns.get(agent.id), event.data
        if turn is not None and isinstance(data, CompactionSummary):
            turn.compaction_calls += 1
            if data.usage is not None:
                turn.usage += data.usage

    def _turn_end(self, agent: Agent, event: SessionEvent) -> None:
        self._untraced.discard(agent.id)
        turn, data = self._turns.pop(agent.id, None), event.data
        if turn is None or not isinstance(data, TurnEnd):
            return
        error_type, description = _turn_outcome(data.reason)
        self._close_turn(agent.id, turn, event.seq, error_type, description, data.reason)

    def _close_turn(
        self,
        session_id: str,
        turn: _OpenTurn,
        end_seq: int | None,
        error_type: str | None,
        description: str | None,
        reason: TurnEndReason | None = None,
    ) -> None:
        # A tool or model call still open here was abandoned by the loop (a cancel, or a
        # crash): it ends as its turn does.
        for span in turn.tools.values():
            _end(span, error_type or OTHER_ERROR, description or "the turn ended first")
        turn.tools.clear()
        for call in tuple(turn.calls):
            call.end(error_type or OTHER_ERROR, description or "the loop stopped reading")
        span = turn.span
        _set_usage(span, turn.usage)
        span.set_attribute(TURN_STEPS, turn.steps)
        span.set_attribute(MODEL_CALLS, turn.model_calls)
        span.set_attribute(COMPACTION_CALLS, turn.compaction_calls)
        if reason is not None:
            span.set_attribute(TURN_END_REASON, reason.kind)
            if reason.code:
                span.set_attribute(ERROR_CODE, reason.code)
        _end(span, error_type, description)
        context = span.get_span_context()
        self._last_turn.put(session_id, context)
        if end_seq is not None:
            self._turn_ends.put((session_id, end_seq), context)

    # ------------------------------------------------------------------ tools

    def _tool_call(self, agent: Agent, event: SessionEvent) -> None:
        turn, data = self._turns.get(agent.id), event.data
        if turn is None or not isinstance(data, ToolCallEvent):
            return
        attributes: dict[str, Any] = {
            OPERATION: "execute_tool",
            TOOL_NAME: data.name,
            TOOL_CALL_ID: data.call_id,
            TOOL_TYPE: "function",
            CONVERSATION: agent.id,
            STEP: data.step,
        }
        # The step's assembled tools (tools/assemble may have added this one).
        tool = next((t for t in agent.current_tools if t.name == data.name), None)
        if tool is not None and tool.description:
            attributes[TOOL_DESCRIPTION] = tool.description
        if self.capture_content:
            attributes[TOOL_ARGUMENTS] = data.arguments
        span = self.tracer.start_span(
            f"execute_tool {data.name}",
            context=otel_trace.set_span_in_context(turn.span),
            kind=otel_trace.SpanKind.INTERNAL,
            attributes=attributes,
        )
        stale = turn.tools.pop(data.call_id, None)
        if stale is not None:
            _end(stale, OTHER_ERROR, "a second tool/call with the same call id")
        turn.tools[data.call_id] = span
        self._tool_spans.put((agent.id, data.call_id), span.get_span_context())

    def _tool_result(self, agent: Agent, event: SessionEvent) -> None:
        turn, data = self._turns.get(agent.id), event.data
        if turn is None or not isinstance(data, ToolResultEvent):
            return
        span = turn.tools.pop(data.call_id, None)
        if span is None:
            return
        text = "".join(block.text for block in data.content)
        if not data.is_error:
            if self.capture_content:
                span.set_attribute(TOOL_RESULT, text)
            span.end()
            return
        code = data.error.code if data.error is not None else None
        if code:
            span.set_attribute(ERROR_CODE, code)
        _end(span, CANCELLED if code in CANCELLED_TOOL_CODES else code or OTHER_ERROR, text)

    # ------------------------------------------------------------------ model calls

    def start_call(self, provider: str, request: Request) -> _Call:
        """Open the `chat {model}` span of one model call, under its session's open turn."""
        turn = self._turns.get(request.session_id)
        config = request.config
        attributes: dict[str, Any] = {
            OPERATION: "chat",
            PROVIDER: provider,
            REQUEST_MODEL: request.model,
            CONVERSATION: request.session_id,
            REQUEST_STREAM: True,
        }
        if config.max_tokens is not None:
            attributes[REQUEST_MAX_TOKENS] = config.max_tokens
        if config.temperature is not None:
            attributes[REQUEST_TEMPERATURE] = config.temperature
        if config.stop:
            attributes[REQUEST_STOP] = config.stop
        if request.one_shot:
            attributes[ONE_SHOT] = True
        span = self.tracer.start_span(
            f"chat {request.model}",
            context=otel_trace.set_span_in_context(turn.span) if turn is not None else self._root,
            kind=otel_trace.SpanKind.CLIENT,
            attributes=attributes,
        )
        if self.capture_content and span.is_recording():
            if request.system:
                span.set_attribute(
                    SYSTEM_INSTRUCTIONS, _json([{"type": "text", "content": request.system}])
                )
            span.set_attribute(INPUT_MESSAGES, _json([_message(m) for m in request.messages]))
            if request.tools:
                span.set_attribute(
                    TOOL_DEFINITIONS,
                    _json([{"type": "function", "name": tool.name} for tool in request.tools]),
                )
        return _Call(span, turn, self.capture_content)


class TracedProvider:
    """A provider whose every stream is one `chat {model}` span: time to first chunk,
    usage, finish reason, and how the call ended (error or cancellation)."""

    def __init__(self, inner: Provider, tracing: Tracing) -> None:
        self.inner = inner
        self.name = inner.name
        self._tracing = tracing

    def model_info(self, model: str) -> ModelInfo | None:
        return self.inner.model_info(model)

    def stream(self, request: Request) -> AsyncIterator[StreamChunk]:
        if not self._tracing.records_calls_of(request.session_id):
            return self.inner.stream(request)
        call = self._tracing.start_call(self.name, request)
        if not call.span.is_recording():
            # Nothing of this call is recorded (no SDK configured, or sampled out), and a
            # chat span has no children: the stream needs no wrapper around every chunk.
            call.end()
            return self.inner.stream(request)
        return self._traced(call, request)

    async def _traced(self, call: _Call, request: Request) -> AsyncIterator[StreamChunk]:
        started = time.perf_counter()
        first = True
        try:
            async with _closing(self.inner.stream(request)) as chunks:
                async for chunk in chunks:
                    if first:
                        first = False
                        call.span.set_attribute(TIME_TO_FIRST_CHUNK, time.perf_counter() - started)
                    call.observe(chunk)
                    yield chunk
        except GeneratorExit:
            # The loop stopped reading (its turn was cancelled, or it failed): the turn's
            # end closes the span, knowing which.
            raise
        except trio.Cancelled:
            call.end(CANCELLED, "the model call was cancelled")
            raise
        except ProviderError as exc:
            call.end(exc.code or type(exc).__name__, str(exc))
            raise
        except BaseException as exc:
            call.end(type(exc).__qualname__, str(exc))
            raise
        call.complete()


# ---------------------------------------------------------------------- helpers


def _closing(
    stream: AsyncIterator[StreamChunk],
) -> AbstractAsyncContextManager[AsyncIterator[StreamChunk]]:
    """Close the inner stream when the wrapper is done with it (an async generator, as
    every adapter's is), not whenever it is garbage-collected."""
    if hasattr(stream, "aclose"):
        return aclosing(cast(AsyncGenerator[StreamChunk, None], stream))
    return nullcontext(stream)


def _turn_outcome(reason: TurnEndReason) -> tuple[str | None, str | None]:
    """(error.type, description) of a turn that ended for `reason` (None: not an error)."""
    if reason.kind in CANCELLED_TURNS:
        return CANCELLED, reason.reason or f"the turn was {reason.kind}"
    if reason.kind == "error":
        return reason.code or OTHER_ERROR, reason.message
    return None, None


def _end(span: Span, error_type: str | None, description: str | None) -> None:
    if error_type is not None:
        span.set_attribute(ERROR_TYPE, error_type)
        span.set_status(otel_trace.Status(otel_trace.StatusCode.ERROR, description))
    span.end()


def _set_usage(span: Span, usage: TokenUsage) -> None:
    # gen_ai.usage.input_tokens counts every input token, cached ones included.
    span.set_attribute(USAGE_INPUT, usage.prompt_total)
    span.set_attribute(USAGE_OUTPUT, usage.output)
    span.set_attribute(USAGE_CACHE_READ, usage.cache_read)
    span.set_attribute(USAGE_CACHE_CREATION, usage.cache_write)
    if usage.reasoning:
        span.set_attribute(USAGE_REASONING, usage.reasoning)


def _parts(content: Content) -> list[dict[str, Any]]:
    """Message parts in the GenAI input/output message schema."""
    parts: list[dict[str, Any]] = []
    for block in content:
        if isinstance(block, Text):
            parts.append({"type": "text", "content": block.text})
        elif isinstance(block, Reasoning):
            parts.append({"type": "reasoning", "content": block.text})
        elif isinstance(block, ToolCall):
            try:
                arguments: Any = orjson.loads(block.arguments or "{}")
            except orjson.JSONDecodeError:
                arguments = block.arguments
            parts.append(
                {"type": "tool_call", "id": block.id, "name": block.name, "arguments": arguments}
            )
        elif isinstance(block, ToolResult):
            parts.append(
                {
                    "type": "tool_call_response",
                    "id": block.tool_call_id,
                    "response": "".join(text.text for text in block.content),
                }
            )
    return parts


def _message(message: Message) -> dict[str, Any]:
    return {"role": message.role, "parts": _parts(message.content)}


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()


def _env_capture() -> bool:
    return os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def _version() -> str | None:
    try:
        return importlib.metadata.version("actorloop")
    except importlib.metadata.PackageNotFoundError:
        return None
