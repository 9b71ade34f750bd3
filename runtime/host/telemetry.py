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

The model-call spans and the provider wrapper are `telemetry_calls`'; the attribute names
and span helpers of the conventions are `telemetry_conventions`'.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeAlias, TypeVar

from attrs import frozen

from ..errors import ActorloopError, TelemetryError
from ..log.request import Request
from ..model.chunks import TokenUsage
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
from ..providers.base import Provider
from .telemetry_calls import ModelCall, TracedProvider
from .telemetry_conventions import (
    AGENT_NAME,
    CANCELLED,
    CANCELLED_TOOL_CODES,
    COMPACTION_CALLS,
    CONVERSATION,
    ERROR_CODE,
    INPUT_MESSAGES,
    INSTRUMENTATION,
    LINK_KIND,
    MODEL_CALLS,
    ONE_SHOT,
    OPERATION,
    ORIGIN,
    OTHER_ERROR,
    PARENT_AGENT,
    PARENT_SESSION,
    PROVIDER,
    REQUEST_MAX_TOKENS,
    REQUEST_MODEL,
    REQUEST_STOP,
    REQUEST_STREAM,
    REQUEST_TEMPERATURE,
    SEED_LENGTH,
    STEP,
    SYSTEM_INSTRUCTIONS,
    TOOL_ARGUMENTS,
    TOOL_CALL_ID,
    TOOL_DEFINITIONS,
    TOOL_DESCRIPTION,
    TOOL_NAME,
    TOOL_RESULT,
    TOOL_TYPE,
    TURN,
    TURN_END_REASON,
    TURN_STEPS,
    TURN_TRIGGER,
    capture_from_env,
    end_span,
    message_record,
    otel_context,
    otel_trace,
    package_version,
    set_usage,
    to_json,
    turn_outcome,
)
from .telemetry_conventions import CAPTURE_CONTENT_ENV as CAPTURE_CONTENT_ENV  # re-exported

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Link, Span, SpanContext, TracerProvider

    from ..control.handle import Agent
    from ..control.hooks import Listener, Unsubscribe
    from ..control.options import AgentOptions

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


class OpenTurn:
    """The spans of one turn that is still open."""

    __slots__ = ("calls", "compaction_calls", "model_calls", "span", "steps", "tools", "usage")

    def __init__(self, span: Span) -> None:
        self.span = span
        self.usage = TokenUsage()
        self.model_calls = 0
        self.compaction_calls = 0
        self.steps = 0
        self.tools: dict[str, Span] = {}
        self.calls: set[ModelCall] = set()


class TracedRuntime(Protocol):
    """What tracing needs of the runtime it is attached to (`host.runtime.Runtime`)."""

    def provider_for(self, options: AgentOptions) -> Provider:
        """The provider an agent's options name."""
        ...

    def on(self, name: str, listener: Listener) -> Unsubscribe:
        """Subscribe a runtime-wide listener."""
        ...


class Tracing:
    """The spans of one runtime: `Runtime.open` wraps its providers (`wrap`) and subscribes
    the listeners (`attach`); everything runs on the trio thread, synchronously."""

    def __init__(self, settings: Telemetry) -> None:
        assert otel_trace is not None
        provider = settings.tracer_provider or otel_trace.get_tracer_provider()
        self.tracer = provider.get_tracer(INSTRUMENTATION, package_version())
        capture = settings.capture_content
        self.capture_content = capture_from_env() if capture is None else capture
        self._root: Context = otel_context.Context()
        self._turns: dict[str, OpenTurn] = {}
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

    def attach(self, runtime: TracedRuntime) -> None:
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
        self._turns[agent.id] = OpenTurn(span)

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
        error_type, description = turn_outcome(data.reason)
        self._close_turn(agent.id, turn, event.seq, error_type, description, data.reason)

    def _close_turn(
        self,
        session_id: str,
        turn: OpenTurn,
        end_seq: int | None,
        error_type: str | None,
        description: str | None,
        reason: TurnEndReason | None = None,
    ) -> None:
        # A tool or model call still open here was abandoned by the loop (a cancel, or a
        # crash): it ends as its turn does.
        for span in turn.tools.values():
            end_span(span, error_type or OTHER_ERROR, description or "the turn ended first")
        turn.tools.clear()
        for call in tuple(turn.calls):
            call.end(error_type or OTHER_ERROR, description or "the loop stopped reading")
        span = turn.span
        set_usage(span, turn.usage)
        span.set_attribute(TURN_STEPS, turn.steps)
        span.set_attribute(MODEL_CALLS, turn.model_calls)
        span.set_attribute(COMPACTION_CALLS, turn.compaction_calls)
        if reason is not None:
            span.set_attribute(TURN_END_REASON, reason.kind)
            if reason.code:
                span.set_attribute(ERROR_CODE, reason.code)
        end_span(span, error_type, description)
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
            end_span(stale, OTHER_ERROR, "a second tool/call with the same call id")
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
        end_span(span, CANCELLED if code in CANCELLED_TOOL_CODES else code or OTHER_ERROR, text)

    # ------------------------------------------------------------------ model calls

    def start_call(self, provider: str, request: Request) -> ModelCall:
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
                    SYSTEM_INSTRUCTIONS, to_json([{"type": "text", "content": request.system}])
                )
            messages = [message_record(message) for message in request.messages]
            span.set_attribute(INPUT_MESSAGES, to_json(messages))
            if request.tools:
                span.set_attribute(
                    TOOL_DEFINITIONS,
                    to_json([{"type": "function", "name": tool.name} for tool in request.tools]),
                )
        return ModelCall(span, turn, self.capture_content)
