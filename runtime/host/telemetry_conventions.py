"""The GenAI semantic conventions as actorloop's spans use them: attribute names (the
`gen_ai.*` registry and actorloop's own), error types and finish reasons, message parts, and
how a span gets its usage and its end. Imports opentelemetry-api when it is installed."""

from __future__ import annotations

import importlib.metadata
import os
from typing import TYPE_CHECKING, Any

import orjson

from ..errors import ErrorCode
from ..model.chunks import TokenUsage
from ..model.events import TurnEndReason
from ..model.messages import Content, Message, Reasoning, Text, ToolCall, ToolResult

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace as otel_trace
except ImportError:  # the `otel` extra is not installed: tracing stays off
    otel_context = None  # type: ignore[assignment]
    otel_trace = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from opentelemetry.trace import Span

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
    "pause": "pause_turn",
    "error": "error",
}


def turn_outcome(reason: TurnEndReason) -> tuple[str | None, str | None]:
    """(error.type, description) of a turn that ended for `reason` (None: not an error)."""
    if reason.kind in CANCELLED_TURNS:
        return CANCELLED, reason.reason or f"the turn was {reason.kind}"
    if reason.kind == "error":
        return reason.code or OTHER_ERROR, reason.message
    return None, None


def end_span(span: Span, error_type: str | None, description: str | None) -> None:
    """End `span`, as an error of `error_type` (with `description`) when one is given."""
    if error_type is not None:
        span.set_attribute(ERROR_TYPE, error_type)
        span.set_status(otel_trace.Status(otel_trace.StatusCode.ERROR, description))
    span.end()


def set_usage(span: Span, usage: TokenUsage) -> None:
    """Record `usage` on `span` as the gen_ai.usage.* attributes."""
    # gen_ai.usage.input_tokens counts every input token, cached ones included.
    span.set_attribute(USAGE_INPUT, usage.prompt_total)
    span.set_attribute(USAGE_OUTPUT, usage.output)
    span.set_attribute(USAGE_CACHE_READ, usage.cache_read)
    span.set_attribute(USAGE_CACHE_CREATION, usage.cache_write)
    if usage.reasoning:
        span.set_attribute(USAGE_REASONING, usage.reasoning)


def message_parts(content: Content) -> list[dict[str, Any]]:
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


def message_record(message: Message) -> dict[str, Any]:
    """`message` in the GenAI input/output message schema."""
    return {"role": message.role, "parts": message_parts(message.content)}


def to_json(value: Any) -> str:
    """`value` as JSON text (span attributes take strings)."""
    return orjson.dumps(value).decode()


def capture_from_env() -> bool:
    """Whether the environment asks for message content to be recorded."""
    return os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def package_version() -> str | None:
    """actorloop's installed version (the tracer's), None when it is not installed."""
    try:
        return importlib.metadata.version("actorloop")
    except importlib.metadata.PackageNotFoundError:
        return None
