"""OpenAI Chat Completions adapter (and DeepSeek, which speaks the same wire format).

Maps a frozen `Request` to a canonical JSON body and the SSE stream back to chunks. Usage
buckets are disjoint: `input = prompt_tokens − cached − cache writes` (DeepSeek: the
cache-miss count); cache writes are read from `prompt_tokens_details.cache_write_tokens`, or
from `cache_creation_input_tokens` as gateways report Anthropic models. `output` is the
billed completion count; `reasoning` is the part of it spent thinking. A refusal
(`delta.refusal`) ends the answer with a `REFUSED` error, its text kept in the chunks.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import aclosing
from typing import Any, ClassVar, Unpack

import httpx
import trio

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
from .chat_body import DEEPSEEK_CHAT, OPENAI_CHAT, ChatDialect, openai_body
from .http import (
    HttpSseProvider,
    error_detail,
    error_fields,
    is_openai_endpoint,
    with_extra_headers,
)
from .retry import parse_retry_after, status_error
from .settings import HttpOptions, HttpSettings, http_settings

OPENAI_BASE_URL = "https://api.openai.com/v1"
# DeepSeek documents this base for OpenAI-compatible clients ("/v1" also works there).
DEEPSEEK_BASE_URL = "https://api.deepseek.com"

_CONTEXT_MARKERS = ("maximum context length", "context_length_exceeded", "context window")


def is_context_overflow(message: str, code: str | None) -> bool:
    lowered = message.lower()
    return code == "context_length_exceeded" or any(m in lowered for m in _CONTEXT_MARKERS)


def count(fields: Mapping[str, Any], *names: str) -> int | None:
    """The first of `names` that `fields` holds as a non-negative int (bools are no counts)."""
    for name in names:
        value = fields.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


def _details(usage: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    details = usage.get(name)
    return details if isinstance(details, dict) else {}


def usage_from_openai(usage: Mapping[str, Any]) -> TokenUsage:
    """Disjoint buckets from an OpenAI, DeepSeek or gateway `usage` object.

    `prompt_tokens` includes cached reads and cache writes; writes are
    `prompt_tokens_details.cache_write_tokens` (OpenAI) or, as LiteLLM reports Anthropic
    models, `cache_creation_input_tokens` (also `prompt_tokens_details.cache_creation_tokens`).
    """
    output = count(usage, "completion_tokens") or 0
    reasoning = count(_details(usage, "completion_tokens_details"), "reasoning_tokens") or 0
    prompt = count(usage, "prompt_tokens") or 0
    details = _details(usage, "prompt_tokens_details")
    write = (
        count(details, "cache_write_tokens", "cache_creation_tokens")
        or count(usage, "cache_creation_input_tokens")
        or 0
    )
    if "prompt_cache_hit_tokens" in usage or "prompt_cache_miss_tokens" in usage:
        hit = count(usage, "prompt_cache_hit_tokens") or 0
        miss = count(usage, "prompt_cache_miss_tokens")
        uncached = miss if miss is not None else max(0, prompt - hit - write)
        return TokenUsage(
            input=uncached, output=output, cache_read=hit, cache_write=write, reasoning=reasoning
        )
    cached = count(details, "cached_tokens")
    if cached is None:
        cached = count(usage, "cache_read_input_tokens") or 0
    return TokenUsage(
        input=max(0, prompt - cached - write),
        output=output,
        cache_read=cached,
        cache_write=write,
        reasoning=reasoning,
    )


class _ChatStreamMapper:
    """Turns `chat.completion.chunk` payloads into our chunk grammar.

    Text and reasoning blocks close when another kind starts; tool-call blocks stay open
    until the finish reason, because parallel calls may interleave their argument deltas.
    """

    def __init__(self, provider: str) -> None:
        self._provider = provider
        self._next_index = 0
        # (what the block holds, its index): refusal text is a text block of its own.
        self._open: tuple[str, int] | None = None
        self._refusal: list[str] = []
        self._tools: dict[int, int] = {}
        self._tool_ids: dict[int, str] = {}
        self._latest_tool: int | None = None
        self._with_args: set[int] = set()
        self.finish_reason: str | None = None
        self.usage: TokenUsage | None = None

    def feed(self, payload: Mapping[str, Any]) -> list[StreamChunk]:
        out: list[StreamChunk] = []
        usage = payload.get("usage")
        if isinstance(usage, dict):
            self.usage = usage_from_openai(usage)
        for choice in payload.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                out += self._delta("reasoning", reasoning)
            content = delta.get("content")
            if isinstance(content, str) and content:
                out += self._delta("text", content)
            refusal = delta.get("refusal")
            if isinstance(refusal, str) and refusal:
                self._refusal.append(refusal)
                out += self._delta("refusal", refusal)
            for call in delta.get("tool_calls") or ():
                out += self._tool_delta(call)
            reason = choice.get("finish_reason")
            if reason and self.finish_reason is None:
                self.finish_reason = reason
                out += self._close_all()
        return out

    def _allocate(self) -> int:
        index = self._next_index
        self._next_index += 1
        return index

    def _close_open(self) -> list[StreamChunk]:
        if self._open is None:
            return []
        index = self._open[1]
        self._open = None
        return [BlockEnd(index)]

    def _delta(self, holds: str, text: str) -> list[StreamChunk]:
        out: list[StreamChunk] = []
        kind: BlockKind = "reasoning" if holds == "reasoning" else "text"
        if self._open is None or self._open[0] != holds:
            out += self._close_open()
            self._open = (holds, self._allocate())
            out.append(BlockStart(self._open[1], kind))
        index = self._open[1]
        out.append(TextDelta(index, text) if kind == "text" else ReasoningDelta(index, text))
        return out

    def _tool_delta(self, call: Mapping[str, Any]) -> list[StreamChunk]:
        out: list[StreamChunk] = []
        wire_index = self._wire_index(call)
        function = call.get("function") or {}
        block = self._tools.get(wire_index)
        if block is None:
            name = function.get("name")
            if not name:
                raise ProviderError(
                    f"{self._provider}: tool call {wire_index} started without a name",
                    ErrorCode.PROTOCOL_ERROR,
                )
            out += self._close_open()
            block = self._allocate()
            self._tools[wire_index] = block
            call_id = call.get("id") or f"call_{wire_index}"
            self._tool_ids[wire_index] = call_id
            out.append(BlockStart(block, "tool_call", call_id=call_id, name=name))
        self._latest_tool = wire_index
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            self._with_args.add(block)
            out.append(ToolCallDelta(block, arguments))
        return out

    def _wire_index(self, call: Mapping[str, Any]) -> int:
        index = call.get("index")
        if isinstance(index, int) and not isinstance(index, bool):
            return index
        # Some OpenAI-compatible servers omit `index`: a delta with a new id starts a new
        # call; one without an id continues the latest call (never merge two calls' args).
        call_id = call.get("id")
        if self._latest_tool is None or (call_id and call_id not in self._tool_ids.values()):
            return max(self._tools, default=-1) + 1
        return self._latest_tool

    def _close_all(self) -> list[StreamChunk]:
        out = self._close_open()
        for block in sorted(self._tools.values()):
            if block not in self._with_args:
                # A call without arguments still has to parse as a JSON object.
                out.append(ToolCallDelta(block, "{}"))
            out.append(BlockEnd(block))
        return out

    def final(self) -> list[StreamChunk]:
        out: list[StreamChunk] = []
        if self.usage is not None:
            out.append(UsageReport(self.usage))
        reason = self.finish_reason
        if self._refusal:
            out.append(refused(self._provider, "".join(self._refusal)))
        elif reason == "length":
            out.append(Finish("max-tokens"))
        elif reason == "content_filter":
            message = f"{self._provider}: the provider's content filter stopped the answer"
            out.append(Finish("error", ErrorInfo(message, ErrorCode.CONTENT_FILTERED)))
        elif reason not in COMPLETE_FINISH_REASONS:
            # e.g. DeepSeek's insufficient_system_resource: the answer was cut off, and a
            # truncated answer must not pass for a finished one.
            message = f"{self._provider}: generation ended early (finish_reason {reason!r})"
            out.append(Finish("error", ErrorInfo(message, ErrorCode.OVERLOADED)))
        elif self._tools:
            out.append(Finish("tool-calls"))
        else:
            out.append(Finish("stop"))
        return out


def refused(provider: str, text: str) -> Finish:
    """The finish of an answer the model refused to give; the refusal is the message."""
    message = f"{provider}: the model refused: {text[:500]}"
    return Finish("error", ErrorInfo(message, ErrorCode.REFUSED))


COMPLETE_FINISH_REASONS = frozenset({None, "stop", "tool_calls", "function_call"})
"""Finish reasons of an answer that ended normally (None: the stream sent none)."""


def _stream_error_code(message: str, kind: str | None, code: str | None) -> str:
    if is_context_overflow(message, code):
        return ErrorCode.CONTEXT_WINDOW_EXCEEDED
    if "rate_limit" in (kind or "") or "rate_limit" in (code or ""):
        return ErrorCode.RATE_LIMITED
    return ErrorCode.PROVIDER_ERROR


def openai_status_error(
    provider: HttpSseProvider, status: int, body: bytes, headers: httpx.Headers
) -> ProviderError:
    """The typed error of a non-2xx answer from an OpenAI-format endpoint (Chat Completions
    and Responses word their errors alike)."""
    message, _kind, code = error_detail(body)
    message = provider.redact(message)
    mapped: str | None = None
    if status in (400, 413) and is_context_overflow(message, code):
        mapped = ErrorCode.CONTEXT_WINDOW_EXCEEDED
    elif code == "insufficient_quota":
        mapped = ErrorCode.INSUFFICIENT_QUOTA
    return status_error(
        provider.name, status, message, code=mapped, retry_after=parse_retry_after(headers)
    )


def openai_headers(provider: HttpSseProvider, request: Request) -> dict[str, str]:
    """Bearer-key headers of a streamed OpenAI-format request, plus the config's extras."""
    return with_extra_headers(
        {
            "authorization": f"Bearer {provider._api_key().reveal()}",
            "content-type": "application/json",
            "accept": "text/event-stream",
        },
        request.config,
    )


class OpenAIChatProvider(HttpSseProvider):
    """Streams `POST {base_url}/chat/completions`; `base_url` ends in `/v1` as in the openai SDK.

    `prompt_cache_key` (a hash of the session id, so one session's requests share a prompt
    cache) is sent when `prompt_cache_key=True`; the default (None) sends it only to OpenAI's
    own endpoint, since compatible servers and gateways may reject the field.
    """

    default_base_url: ClassVar[str] = OPENAI_BASE_URL
    default_name: ClassVar[str] = "openai"
    default_key_env: ClassVar[str] = "OPENAI_API_KEY"
    dialect: ClassVar[ChatDialect] = OPENAI_CHAT
    sends_prompt_cache_key: ClassVar[bool] = True
    """Whether the automatic `prompt_cache_key` choice may send it at all."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        settings: HttpSettings | None = None,
        prompt_cache_key: bool | None = None,
        store: bool = False,
        **options: Unpack[HttpOptions],
    ) -> None:
        super().__init__(http_settings(settings, base_url, api_key, options))
        if store and not self.dialect.store:
            raise CallConfigError(f"{self.name}: this API keeps no completions (store=True)")
        self.store = store
        self.send_prompt_cache_key = (
            prompt_cache_key
            if prompt_cache_key is not None
            else self.sends_prompt_cache_key and is_openai_endpoint(self.base_url)
        )

    @property
    def url(self) -> str:
        """The Chat Completions endpoint: `{base_url}/chat/completions`."""
        return f"{self.base_url}/chat/completions"

    def build_body(self, request: Request) -> dict[str, Any]:
        """The Chat Completions body of `request`."""
        return openai_body(
            request,
            dialect=self.dialect,
            store=self.store,
            send_prompt_cache_key=self.send_prompt_cache_key,
            provider=self.name,
        )

    def _status_error(self, status: int, body: bytes, headers: httpx.Headers) -> ProviderError:
        return openai_status_error(self, status, body, headers)

    async def stream(self, request: Request) -> AsyncIterator[StreamChunk]:
        """Stream `request` to Chat Completions and map its chunks to ours."""
        body = self.body_bytes(request)
        headers = openai_headers(self, request)
        mapper = _ChatStreamMapper(self.name)
        async with aclosing(self._post_events(self.url, headers, body)) as events:
            async for event in events:
                if event.data.strip() == "[DONE]":
                    break
                payload = self._decode(event)
                error = payload.get("error")
                if isinstance(error, dict):
                    message, kind, code = error_fields(payload)
                    message = self.redact(f"{self.name}: {message}")
                    yield Finish(
                        "error", ErrorInfo(message, _stream_error_code(message, kind, code))
                    )
                    return
                for chunk in mapper.feed(payload):
                    # Buffered bytes need no network wait, so cancellation gets its own
                    # checkpoint per chunk.
                    await trio.lowlevel.checkpoint()
                    yield chunk
        if mapper.finish_reason is None:
            self._fail(
                f"{self.name}: the stream ended before a finish reason",
                ErrorCode.STREAM_INTERRUPTED,
            )
        for chunk in mapper.final():
            await trio.lowlevel.checkpoint()
            yield chunk


class DeepSeekProvider(OpenAIChatProvider):
    """DeepSeek's OpenAI-compatible API: `max_tokens`, `reasoning_content` sent back (its
    thinking mode requires it across tool calls), cache hit/miss usage fields, and no
    `prompt_cache_key` unless asked for (DeepSeek caches prefixes automatically). Its
    thinking switch is an `extra_body` field: `{"thinking": {"type": "enabled"}}`."""

    default_base_url: ClassVar[str] = DEEPSEEK_BASE_URL
    default_name: ClassVar[str] = "deepseek"
    default_key_env: ClassVar[str] = "DEEPSEEK_API_KEY"
    dialect: ClassVar[ChatDialect] = DEEPSEEK_CHAT
    sends_prompt_cache_key: ClassVar[bool] = False
