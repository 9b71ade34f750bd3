"""Anthropic Messages adapter: request body with cache breakpoints, and stream mapping.

Breakpoints (`cache_control: ephemeral`, at most 4): the last tool, the system block, the
last block of the session prefix, and the last block of the history (`cache_breakpoints`
picks a subset, `cache_ttl` sets their lifetime). Usage buckets: `input_tokens` → input,
`cache_read_input_tokens` → cache_read, `cache_creation_input_tokens` → cache_write.
Thinking blocks come back with their signatures and `redacted_thinking` blocks with their
data, and both are replayed unchanged, as the API requires.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import aclosing
from typing import Any, ClassVar, Unpack

import httpx
import orjson
import trio

from ...codecs.converter import ordered_fragment
from ...codecs.jsonvalue import canonical_json
from ..errors import CallConfigError, ErrorCode, ProviderError
from ..log.request import Request
from ..model.chunks import (
    BlockEnd,
    BlockKind,
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
from ..model.header import (
    CACHE_BREAKPOINTS,
    MIN_THINKING_BUDGET,
    CacheBreakpoint,
    LlmCallConfig,
)
from ..model.messages import Block, Message, Reasoning, Text, ToolCall
from .http import (
    HttpSseProvider,
    error_detail,
    error_fields,
    forced_tool,
    invalid_request,
    merge_extra_body,
    tool_parameters,
    with_extra_headers,
)
from .retry import parse_retry_after, status_error
from .settings import HttpOptions, HttpSettings, http_settings

ANTHROPIC_BASE_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"
"""The default `anthropic-version` header (the API's current version; `api_version=` or an
`anthropic-version` entry in `extra_headers` overrides it)."""
# The Messages API requires max_tokens; used when the call config leaves it unset.
DEFAULT_MAX_TOKENS = 8192
MAX_BREAKPOINTS = 4

_CONTEXT_MARKERS = ("prompt is too long", "exceed context limit", "context window")
_UNCACHEABLE = ("thinking", "redacted_thinking")
_ERROR_CODES = {
    "overloaded_error": ErrorCode.OVERLOADED,
    "rate_limit_error": ErrorCode.RATE_LIMITED,
    "authentication_error": ErrorCode.AUTHENTICATION,
    "permission_error": ErrorCode.AUTHENTICATION,
    "invalid_request_error": ErrorCode.INVALID_REQUEST,
}


def _tool_input(arguments: str) -> Any:
    # tool_use.input must be an object; a call whose arguments never parsed is replayed as {}.
    try:
        value = orjson.loads(arguments) if arguments else {}
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _wire_block(block: Block) -> dict[str, Any] | None:
    if isinstance(block, Text):
        # The API rejects empty text blocks.
        return {"type": "text", "text": block.text} if block.text else None
    if isinstance(block, Reasoning):
        if block.redacted is not None:
            return {"type": "redacted_thinking", "data": block.redacted}
        # Unsigned reasoning (from another provider) cannot be replayed as a thinking block.
        if block.signature is None:
            return None
        return {"type": "thinking", "thinking": block.text, "signature": block.signature}
    if isinstance(block, ToolCall):
        return {
            "type": "tool_use",
            "id": block.id,
            "name": block.name,
            "input": _tool_input(block.arguments),
        }
    wire: dict[str, Any] = {"type": "tool_result", "tool_use_id": block.tool_call_id}
    parts = [{"type": "text", "text": part.text} for part in block.content if part.text]
    if parts:
        wire["content"] = parts
    if block.is_error:
        wire["is_error"] = True
    return wire


def _wire_message(message: Message) -> dict[str, Any] | None:
    blocks = [wire for wire in map(_wire_block, message.content) if wire is not None]
    if not blocks:
        return None
    if message.role != "assistant":
        # tool_result blocks must open a user turn; the sort is stable for the rest.
        blocks.sort(key=lambda wire: wire["type"] != "tool_result")
    # No system role inside `messages`: system-role prefix messages are user content.
    return {"role": "assistant" if message.role == "assistant" else "user", "content": blocks}


def _wire_messages(messages: Iterable[Message]) -> list[dict[str, Any]]:
    return [wire for wire in map(_wire_message, messages) if wire is not None]


class _Breakpoints:
    """Places the `cache_control` markers the config asks for, with its TTL."""

    def __init__(self, config: LlmCallConfig) -> None:
        self.places: tuple[CacheBreakpoint, ...] = (
            config.cache_breakpoints if config.cache_breakpoints is not None else CACHE_BREAKPOINTS
        )
        self.marker: dict[str, str] = {"type": "ephemeral"}
        if config.cache_ttl is not None:
            self.marker["ttl"] = config.cache_ttl

    def mark(self, place: CacheBreakpoint, blocks: list[dict[str, Any]]) -> None:
        if place not in self.places:
            return
        for block in reversed(blocks):
            if block.get("type") not in _UNCACHEABLE:
                block["cache_control"] = dict(self.marker)
                return


def _thinking(provider: str, config: LlmCallConfig, budget: int | None, max_tokens: int) -> Any:
    """The `thinking` field, after the checks the API would fail the request on (D5)."""
    if budget is None:
        return None
    if budget >= max_tokens:
        raise invalid_request(
            provider, f"thinking_budget {budget} must be below max_tokens {max_tokens}"
        )
    choice = config.tool_choice
    if choice is not None and choice.mode in ("required", "tool"):
        raise invalid_request(
            provider, f"tool_choice {choice.mode!r} cannot be combined with thinking"
        )
    return {"type": "enabled", "budget_tokens": budget}


def _tool_choice(config: LlmCallConfig) -> dict[str, Any] | None:
    choice = config.tool_choice
    wire: dict[str, Any] | None = None
    if choice is not None:
        wire = {"type": {"required": "any"}.get(choice.mode, choice.mode)}
        if choice.mode == "tool":
            wire["name"] = choice.name
    if config.parallel_tool_calls is False and (wire is None or wire["type"] != "none"):
        wire = wire or {"type": "auto"}
        wire["disable_parallel_tool_use"] = True
    return wire


def _metadata(provider: str, config: LlmCallConfig) -> dict[str, str] | None:
    metadata = dict(config.metadata)
    unknown = sorted(metadata.keys() - {"user_id"})
    if unknown:
        raise invalid_request(
            provider, f"the Messages API takes only user_id in metadata, not {unknown}"
        )
    if config.user is not None:
        metadata["user_id"] = config.user
    return metadata or None


def _output_config(provider: str, config: LlmCallConfig) -> dict[str, Any] | None:
    output: dict[str, Any] = {}
    fmt = config.response_format
    if fmt is not None:
        if fmt.type != "json_schema":
            raise invalid_request(provider, "the Messages API has no json_object output mode")
        output["format"] = {"type": "json_schema", "schema": ordered_fragment(fmt.schema)}
    if config.reasoning_effort is not None:
        output["effort"] = config.reasoning_effort
    return output or None


def anthropic_body(
    request: Request,
    *,
    default_max_tokens: int = DEFAULT_MAX_TOKENS,
    thinking_budget: int | None = None,
    provider: str = "anthropic",
) -> dict[str, Any]:
    """The Messages body with its cache breakpoints (see the module docstring) and the
    request options of the config; `thinking_budget` applies when the config sets none."""
    config = request.config
    forced_tool(provider, config, request.tools)
    if config.temperature is not None:
        # The anthropic SDK's `messages.create` (2.15) takes no temperature any more.
        raise invalid_request(
            provider, "the Messages API takes no temperature; leave temperature unset"
        )
    prefix = _wire_messages(request.prefix)
    history = _wire_messages(request.history)
    max_tokens = config.max_tokens if config.max_tokens is not None else default_max_tokens
    budget = config.thinking_budget if config.thinking_budget is not None else thinking_budget
    thinking = _thinking(provider, config, budget, max_tokens)
    breakpoints = _Breakpoints(config)
    body: dict[str, Any] = {
        "model": config.model,
        "max_tokens": max_tokens,
        "messages": prefix + history,
        "stream": True,
    }
    if request.tools:
        tools: list[dict[str, Any]] = []
        for tool in request.tools:
            wire: dict[str, Any] = {"name": tool.name, "input_schema": tool_parameters(tool)}
            if tool.description:
                wire["description"] = tool.description
            if config.strict_tools is not None:
                wire["strict"] = config.strict_tools
            tools.append(wire)
        breakpoints.mark("tools", tools)
        body["tools"] = tools
        choice = _tool_choice(config)
        if choice is not None:
            body["tool_choice"] = choice
    if request.system:
        system = [{"type": "text", "text": request.system}]
        breakpoints.mark("system", system)
        body["system"] = system
    if prefix:
        breakpoints.mark("prefix", prefix[-1]["content"])
    if history:
        breakpoints.mark("history", history[-1]["content"])
    if config.stop:
        body["stop_sequences"] = list(config.stop)
    if thinking is not None:
        body["thinking"] = thinking
    output = _output_config(provider, config)
    if output is not None:
        body["output_config"] = output
    metadata = _metadata(provider, config)
    if metadata is not None:
        body["metadata"] = metadata
    return merge_extra_body(body, config)


def is_context_overflow(message: str) -> bool:
    lowered = message.lower()
    return any(marker in lowered for marker in _CONTEXT_MARKERS)


def _error_code(message: str, kind: str | None) -> str:
    if is_context_overflow(message):
        return ErrorCode.CONTEXT_WINDOW_EXCEEDED
    return _ERROR_CODES.get(kind or "", ErrorCode.PROVIDER_ERROR)


class _MessagesStreamMapper:
    """Turns Messages stream events into our chunk grammar (block index = Anthropic's index)."""

    def __init__(self, provider: str) -> None:
        self._provider = provider
        self._kinds: dict[int, BlockKind] = {}
        self._with_args: set[int] = set()
        self._usage: dict[str, int] = {}
        self.stop_reason: str | None = None
        self.stopped = False

    def _take_usage(self, usage: object) -> None:
        if not isinstance(usage, dict):
            return
        for key, value in usage.items():
            # message_delta counts are cumulative, so later values replace earlier ones.
            if isinstance(value, int) and not isinstance(value, bool):
                self._usage[key] = value

    def feed(self, kind: str, payload: Mapping[str, Any]) -> list[StreamChunk]:
        if kind == "message_start":
            self._take_usage((payload.get("message") or {}).get("usage"))
        elif kind == "content_block_start":
            return self._start(int(payload.get("index", 0)), payload.get("content_block") or {})
        elif kind == "content_block_delta":
            return self._delta(int(payload.get("index", 0)), payload.get("delta") or {})
        elif kind == "content_block_stop":
            return self._stop(int(payload.get("index", 0)))
        elif kind == "message_delta":
            self.stop_reason = (payload.get("delta") or {}).get("stop_reason") or self.stop_reason
            self._take_usage(payload.get("usage"))
        elif kind == "message_stop":
            self.stopped = True
        return []

    def _start(self, index: int, block: Mapping[str, Any]) -> list[StreamChunk]:
        wire_type = block.get("type")
        if wire_type == "text":
            self._kinds[index] = "text"
            text = block.get("text") or ""
            return [BlockStart(index, "text"), *([TextDelta(index, text)] if text else [])]
        if wire_type == "thinking":
            self._kinds[index] = "reasoning"
            out: list[StreamChunk] = [BlockStart(index, "reasoning")]
            if block.get("thinking") or block.get("signature"):
                out.append(
                    ReasoningDelta(index, block.get("thinking") or "", block.get("signature"))
                )
            return out
        if wire_type == "tool_use":
            call_id, name = block.get("id"), block.get("name")
            if not call_id or not name:
                raise ProviderError(
                    f"{self._provider}: tool_use block {index} lacks an id or a name",
                    ErrorCode.PROTOCOL_ERROR,
                )
            self._kinds[index] = "tool_call"
            out = [BlockStart(index, "tool_call", call_id=call_id, name=name)]
            if block.get("input"):
                self._with_args.add(index)
                out.append(ToolCallDelta(index, canonical_json(block["input"]).decode()))
            return out
        if wire_type == "redacted_thinking":
            data = block.get("data")
            if not isinstance(data, str) or not data:
                raise ProviderError(
                    f"{self._provider}: redacted_thinking block {index} has no data",
                    ErrorCode.PROTOCOL_ERROR,
                )
            # Opaque: no deltas follow; the data is replayed unchanged in the next request.
            self._kinds[index] = "reasoning"
            return [BlockStart(index, "reasoning"), ReasoningDelta(index, "", redacted=data)]
        # Server-side tool blocks have no representation here.
        return []

    def _delta(self, index: int, delta: Mapping[str, Any]) -> list[StreamChunk]:
        if index not in self._kinds:
            return []
        wire_type = delta.get("type")
        if wire_type == "text_delta" and delta.get("text"):
            return [TextDelta(index, delta["text"])]
        if wire_type == "input_json_delta" and delta.get("partial_json"):
            self._with_args.add(index)
            return [ToolCallDelta(index, delta["partial_json"])]
        if wire_type == "thinking_delta" and delta.get("thinking"):
            return [ReasoningDelta(index, delta["thinking"])]
        if wire_type == "signature_delta" and delta.get("signature"):
            return [ReasoningDelta(index, "", delta["signature"])]
        return []

    def _stop(self, index: int) -> list[StreamChunk]:
        kind = self._kinds.get(index)
        if kind is None:
            return []
        if kind == "tool_call" and index not in self._with_args:
            return [ToolCallDelta(index, "{}"), BlockEnd(index)]
        return [BlockEnd(index)]

    def final(self) -> list[StreamChunk]:
        usage = TokenUsage(
            input=self._usage.get("input_tokens", 0),
            output=self._usage.get("output_tokens", 0),
            cache_read=self._usage.get("cache_read_input_tokens", 0),
            cache_write=self._usage.get("cache_creation_input_tokens", 0),
        )
        reason = self.stop_reason
        finish: Finish
        if reason == "tool_use":
            finish = Finish("tool-calls")
        elif reason in ("max_tokens", "model_context_window_exceeded"):
            finish = Finish("max-tokens")
        elif reason == "refusal":
            message = f"{self._provider}: the model refused to answer"
            finish = Finish("error", ErrorInfo(message, ErrorCode.CONTENT_FILTERED))
        elif reason == "pause_turn":
            # Unfinished: the loop continues it by sending the paused content back as-is.
            finish = Finish("pause")
        else:
            finish = Finish("stop")
        return [UsageReport(usage), finish]


class AnthropicProvider(HttpSseProvider):
    """Streams `POST {base_url}/v1/messages`; `base_url` has no `/v1`, as in the anthropic SDK.

    `thinking_budget` (the config's wins; this one is the provider-wide default) enables
    extended thinking; thinking blocks in the history are sent back verbatim with their
    signatures, redacted ones with their data. `api_version` is the `anthropic-version`.
    """

    default_base_url: ClassVar[str] = ANTHROPIC_BASE_URL
    default_name: ClassVar[str] = "anthropic"
    default_key_env: ClassVar[str] = "ANTHROPIC_API_KEY"

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        settings: HttpSettings | None = None,
        default_max_tokens: int = DEFAULT_MAX_TOKENS,
        thinking_budget: int | None = None,
        api_version: str = ANTHROPIC_VERSION,
        **options: Unpack[HttpOptions],
    ) -> None:
        super().__init__(http_settings(settings, base_url, api_key, options))
        if thinking_budget is not None and thinking_budget < MIN_THINKING_BUDGET:
            raise CallConfigError(
                f"thinking_budget {thinking_budget} is below the minimum of 1024 tokens"
            )
        self.default_max_tokens = default_max_tokens
        self.thinking_budget = thinking_budget
        self.api_version = api_version

    @property
    def url(self) -> str:
        """The Messages endpoint: `{base_url}/v1/messages`."""
        return f"{self.base_url}/v1/messages"

    def build_body(self, request: Request) -> dict[str, Any]:
        """The Messages API body of `request`, with its cache breakpoints."""
        return anthropic_body(
            request,
            default_max_tokens=self.default_max_tokens,
            thinking_budget=self.thinking_budget,
            provider=self.name,
        )

    def _status_error(self, status: int, body: bytes, headers: httpx.Headers) -> ProviderError:
        message, _kind, _code = error_detail(body)
        message = self.redact(message)
        mapped = (
            ErrorCode.CONTEXT_WINDOW_EXCEEDED
            if status == 400 and is_context_overflow(message)
            else None
        )
        return status_error(
            self.name, status, message, code=mapped, retry_after=parse_retry_after(headers)
        )

    async def stream(self, request: Request) -> AsyncIterator[StreamChunk]:
        """Stream `request` to the Messages API and map its events to chunks."""
        body = self.body_bytes(request)
        headers = with_extra_headers(
            {
                "x-api-key": self._api_key().reveal(),
                "anthropic-version": self.api_version,
                "content-type": "application/json",
                "accept": "text/event-stream",
            },
            request.config,
        )
        mapper = _MessagesStreamMapper(self.name)
        async with aclosing(self._post_events(self.url, headers, body)) as events:
            async for event in events:
                payload = self._decode(event)
                kind = payload.get("type") or event.event
                if kind == "error":
                    message, wire_kind, _code = error_fields(payload, "stream error")
                    message = self.redact(f"{self.name}: {message}")
                    yield Finish("error", ErrorInfo(message, _error_code(message, wire_kind)))
                    return
                for chunk in mapper.feed(kind, payload):
                    yield chunk
                if mapper.stopped:
                    break
        if mapper.stop_reason is None:
            self._fail(
                f"{self.name}: the stream ended before a stop reason", ErrorCode.STREAM_INTERRUPTED
            )
        for chunk in mapper.final():
            await trio.lowlevel.checkpoint()
            yield chunk
