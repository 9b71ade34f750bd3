"""OpenAI Responses adapter: `POST {base_url}/responses`, streamed, stateless.

The log is the state: every request sends the full input with `store: false` and, for a
reasoning model, asks for `reasoning.encrypted_content`, so reasoning items come back
encrypted, are recorded on their `Reasoning` blocks (`item_id`, `encrypted_content`) and
are replayed from the log in later requests. Usage buckets are disjoint: `input =
input_tokens − cached_tokens − cache_write_tokens`, `output = output_tokens`, `reasoning =
reasoning_tokens`.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping
from contextlib import aclosing
from typing import Any, ClassVar, Unpack

import httpx
import trio

from ...codecs.converter import ordered_fragment
from ..errors import ErrorCode, ProviderError
from ..log.request import Request
from ..model.chunks import (
    SUMMARY_JOINER,
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
from ..model.header import LlmCallConfig, ResponseFormat, ToolChoice
from ..model.messages import Message, Reasoning, Text, ToolCall, ToolResult
from .chat_body import prompt_cache_key
from .http import (
    HttpSseProvider,
    forced_tool,
    invalid_request,
    is_openai_endpoint,
    merge_extra_body,
    tool_parameters,
)
from .openai import (
    OPENAI_BASE_URL,
    count,
    is_context_overflow,
    openai_headers,
    openai_status_error,
    refused,
)
from .settings import HttpOptions, HttpSettings, http_settings

ENCRYPTED_REASONING = "reasoning.encrypted_content"
_REASONING_MODELS = re.compile(r"(o\d|gpt-[5-9]|codex)")
_FAILURE_CODES = {
    "context_length_exceeded": ErrorCode.CONTEXT_WINDOW_EXCEEDED,
    "rate_limit_exceeded": ErrorCode.RATE_LIMITED,
    "insufficient_quota": ErrorCode.INSUFFICIENT_QUOTA,
    "server_error": ErrorCode.PROVIDER_ERROR,
    "invalid_prompt": ErrorCode.INVALID_REQUEST,
}


def _user_items(message: Message) -> list[dict[str, Any]]:
    # Tool outputs first: each must follow the call it answers; text of the same message
    # follows as a message item of its own (as the Chat Completions adapter does).
    items: list[dict[str, Any]] = [
        {
            "type": "function_call_output",
            "call_id": block.tool_call_id,
            "output": "\n".join(part.text for part in block.content),
        }
        for block in message.content
        if isinstance(block, ToolResult)
    ]
    texts = [block.text for block in message.content if isinstance(block, Text)]
    if texts or not items:
        items.append(
            {
                "type": "message",
                "role": message.role,
                "content": [{"type": "input_text", "text": text} for text in texts or [""]],
            }
        )
    return items


def _reasoning_item(block: Reasoning, store: bool) -> dict[str, Any] | None:
    # Only a Responses reasoning item can be replayed, and without `store` only with its
    # encrypted content (the server keeps nothing to look the id up in).
    if block.item_id is None or (block.encrypted_content is None and not store):
        return None
    item: dict[str, Any] = {
        "type": "reasoning",
        "id": block.item_id,
        "summary": [
            {"type": "summary_text", "text": text}
            for text in (block.parts or ((block.text,) if block.text else ()))
        ],
    }
    if block.encrypted_content is not None:
        item["encrypted_content"] = block.encrypted_content
    return item


def _assistant_items(message: Message, store: bool) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    texts: list[str] = []

    def flush_text() -> None:
        if texts:
            items.append({"type": "message", "role": "assistant", "content": "".join(texts)})
            texts.clear()

    for block in message.content:
        if isinstance(block, Text):
            texts.append(block.text)
            continue
        flush_text()
        if isinstance(block, Reasoning):
            reasoning = _reasoning_item(block, store)
            if reasoning is not None:
                items.append(reasoning)
        elif isinstance(block, ToolCall):
            items.append(
                {
                    "type": "function_call",
                    "call_id": block.id,
                    "name": block.name,
                    "arguments": block.arguments or "{}",
                }
            )
    flush_text()
    return items


def responses_input(request: Request, *, store: bool = False) -> list[dict[str, Any]]:
    """The `input` items: the session prefix, then the history, in request order."""
    items: list[dict[str, Any]] = []
    for message in request.messages:
        if message.role == "assistant":
            items.extend(_assistant_items(message, store))
        else:
            items.extend(_user_items(message))
    return items


def responses_tool_choice(choice: ToolChoice) -> object:
    """`tool_choice` in the Responses shape."""
    if choice.mode == "tool":
        return {"type": "function", "name": choice.name}
    return choice.mode


def responses_text_format(fmt: ResponseFormat) -> dict[str, Any]:
    """`text.format` for structured output (the schema keeps its key order)."""
    if fmt.type == "json_object":
        return {"type": "json_object"}
    wire: dict[str, Any] = {
        "type": "json_schema",
        "name": fmt.name,
        "schema": ordered_fragment(fmt.schema),
    }
    if fmt.strict is not None:
        wire["strict"] = fmt.strict
    if fmt.description is not None:
        wire["description"] = fmt.description
    return wire


def _options(body: dict[str, Any], config: LlmCallConfig, has_tools: bool) -> None:
    if has_tools and config.tool_choice is not None:
        body["tool_choice"] = responses_tool_choice(config.tool_choice)
    if has_tools and config.parallel_tool_calls is not None:
        body["parallel_tool_calls"] = config.parallel_tool_calls
    if config.temperature is not None:
        body["temperature"] = config.temperature
    if config.max_tokens is not None:
        body["max_output_tokens"] = config.max_tokens
    if config.response_format is not None:
        body["text"] = {"format": responses_text_format(config.response_format)}
    if config.reasoning_effort is not None:
        body["reasoning"] = {"effort": config.reasoning_effort}
    if config.user is not None:
        body["safety_identifier"] = config.user
    if config.metadata:
        body["metadata"] = dict(config.metadata)


def is_reasoning_model(config: LlmCallConfig) -> bool:
    """Whether the config asks a reasoning model (one that can return encrypted reasoning):
    `reasoning_effort` is set, or the model is of the o-series, codex or GPT-5 and later
    families, but not a `-chat` variant; a gateway's `vendor/` prefix is ignored."""
    if config.reasoning_effort is not None:
        return True
    model = config.model.rpartition("/")[2].lower()
    return bool(_REASONING_MODELS.match(model)) and "-chat" not in model


def _refusals(provider: str, config: LlmCallConfig) -> None:
    if config.stop:
        raise invalid_request(provider, "the Responses API has no stop sequences (stop=...)")
    if config.thinking_budget is not None:
        raise invalid_request(
            provider, "thinking_budget is Anthropic's; the Responses API takes reasoning_effort"
        )
    for option in ("cache_ttl", "cache_breakpoints"):
        if getattr(config, option) is not None:
            raise invalid_request(
                provider, f"{option} is an Anthropic option; the Responses API caches by itself"
            )


def responses_body(
    request: Request,
    *,
    store: bool = False,
    encrypted_reasoning: bool | None = None,
    send_prompt_cache_key: bool = True,
    provider: str = "openai-responses",
) -> dict[str, Any]:
    """The Responses body: `instructions` (the system slot), the full `input`, tools in
    request order, then the request options of the config (docs/providers.md).

    Without `store`, encrypted reasoning is asked for when `encrypted_reasoning` is True, or
    when it is None (automatic) and `is_reasoning_model(config)`: other models refuse it."""
    config = request.config
    forced_tool(provider, config, request.tools)
    _refusals(provider, config)
    body: dict[str, Any] = {
        "model": config.model,
        "input": responses_input(request, store=store),
        "stream": True,
        "store": store,
    }
    wants_reasoning = (
        encrypted_reasoning if encrypted_reasoning is not None else is_reasoning_model(config)
    )
    if not store and wants_reasoning:
        body["include"] = [ENCRYPTED_REASONING]
    if request.system:
        body["instructions"] = request.system
    if request.tools:
        tools: list[dict[str, Any]] = []
        for tool in request.tools:
            wire: dict[str, Any] = {
                "type": "function",
                "name": tool.name,
                "parameters": tool_parameters(tool),
                # Sent always: left out, the Responses API would pick strict mode itself.
                "strict": bool(config.strict_tools),
            }
            if tool.description:
                wire["description"] = tool.description
            tools.append(wire)
        body["tools"] = tools
    _options(body, config, bool(request.tools))
    if send_prompt_cache_key:
        body["prompt_cache_key"] = prompt_cache_key(request.session_id)
    return merge_extra_body(body, config)


def usage_from_responses(usage: Mapping[str, Any]) -> TokenUsage:
    """Disjoint buckets from a Responses `usage` object (input_tokens includes cache reads
    and writes)."""
    raw_input = usage.get("input_tokens_details")
    input_details: Mapping[str, Any] = raw_input if isinstance(raw_input, dict) else {}
    raw_output = usage.get("output_tokens_details")
    output_details: Mapping[str, Any] = raw_output if isinstance(raw_output, dict) else {}
    total = count(usage, "input_tokens") or 0
    cached = count(input_details, "cached_tokens") or 0
    written = count(input_details, "cache_write_tokens") or 0
    return TokenUsage(
        input=max(0, total - cached - written),
        output=count(usage, "output_tokens") or 0,
        cache_read=cached,
        cache_write=written,
        reasoning=count(output_details, "reasoning_tokens") or 0,
    )


def _failure_code(code: object, message: str) -> str:
    if isinstance(code, str) and code in _FAILURE_CODES:
        return _FAILURE_CODES[code]
    if is_context_overflow(message, code if isinstance(code, str) else None):
        return ErrorCode.CONTEXT_WINDOW_EXCEEDED
    return ErrorCode.PROVIDER_ERROR


class _ResponsesStreamMapper:
    """Turns Responses stream events into our chunk grammar.

    A block is opened per output text part (text or refusal), per function call and per
    reasoning item, in the order they appear; a reasoning item's summary parts are kept apart
    (`ReasoningDelta.part`, so `Reasoning.parts`), its raw text parts are joined by a blank
    line; each block closes when its output item is done.
    """

    def __init__(self, provider: str) -> None:
        self._provider = provider
        self._next_index = 0
        self._blocks: dict[tuple[int, int], int] = {}
        self._kinds: dict[int, BlockKind] = {}
        self._with_text: set[int] = set()
        self._parts: dict[int, int] = {}
        self._tools: list[int] = []
        self._refusal: list[str] = []
        self._saw_items = False
        self._late: list[StreamChunk] = []
        self.usage: TokenUsage | None = None
        self.finish: Finish | None = None

    def _protocol(self, problem: str) -> ProviderError:
        return ProviderError(f"{self._provider}: {problem}", ErrorCode.PROTOCOL_ERROR)

    def _open(
        self,
        key: tuple[int, int],
        kind: BlockKind,
        call_id: str | None = None,
        name: str | None = None,
    ) -> list[StreamChunk]:
        if key in self._blocks:
            raise self._protocol(f"output {key[0]} part {key[1]} started twice")
        index = self._next_index
        self._next_index += 1
        self._blocks[key] = index
        self._kinds[index] = kind
        if kind == "tool_call":
            self._tools.append(index)
        return [BlockStart(index, kind, call_id=call_id, name=name)]

    def _block(self, key: tuple[int, int], kind: BlockKind) -> int:
        index = self._blocks.get(key)
        if index is None or self._kinds[index] != kind:
            raise self._protocol(f"a {kind} delta for output {key[0]} that has no {kind} item")
        return index

    def feed(self, kind: str, payload: Mapping[str, Any]) -> list[StreamChunk]:
        output = payload.get("output_index", 0)
        if not isinstance(output, int) or isinstance(output, bool):
            raise self._protocol(f"{kind} without an output_index")
        if kind == "response.output_item.added":
            self._saw_items = True
            return self._added(output, payload.get("item") or {})
        if kind in ("response.output_text.delta", "response.refusal.delta"):
            return self._text(kind, (output, 1 + int(payload.get("content_index", 0))), payload)
        if kind == "response.function_call_arguments.delta":
            index = self._block((output, 0), "tool_call")
            delta = payload.get("delta")
            if isinstance(delta, str) and delta:
                self._with_text.add(index)
                return [ToolCallDelta(index, delta)]
            return []
        if kind == "response.reasoning_summary_text.delta":
            return self._summary(output, payload.get("summary_index", 0), payload.get("delta"))
        if kind == "response.reasoning_text.delta":
            return self._reasoning(
                output, int(payload.get("content_index", 0)), payload.get("delta")
            )
        if kind == "response.output_item.done":
            self._saw_items = True
            return self._done(output, payload.get("item") or {})
        return []

    def _added(self, output: int, item: Mapping[str, Any]) -> list[StreamChunk]:
        item_type = item.get("type")
        if item_type == "function_call":
            call_id, name = item.get("call_id"), item.get("name")
            if not call_id or not name:
                raise self._protocol(f"function_call item {output} lacks a call_id or a name")
            return self._open((output, 0), "tool_call", call_id, name)
        if item_type == "reasoning":
            return self._open((output, 0), "reasoning")
        # Messages open a block per content part as their deltas arrive; server-side tool
        # items (web search, ...) have no representation here.
        return []

    def _text(
        self, kind: str, key: tuple[int, int], payload: Mapping[str, Any]
    ) -> list[StreamChunk]:
        out: list[StreamChunk] = []
        if key not in self._blocks:
            out += self._open(key, "text")
        index = self._block(key, "text")
        delta = payload.get("delta")
        if isinstance(delta, str) and delta:
            if kind == "response.refusal.delta":
                self._refusal.append(delta)
            self._with_text.add(index)
            out.append(TextDelta(index, delta))
        return out

    def _reasoning(self, output: int, part: int, delta: object) -> list[StreamChunk]:
        index = self._block((output, 0), "reasoning")
        if not isinstance(delta, str) or not delta:
            return []
        previous = self._parts.get(index)
        self._parts[index] = part
        text = delta if previous in (None, part) else SUMMARY_JOINER + delta
        self._with_text.add(index)
        return [ReasoningDelta(index, text)]

    def _summary(self, output: int, part: object, delta: object) -> list[StreamChunk]:
        """A summary part's text, kept apart from the other parts (`Reasoning.parts`)."""
        index = self._block((output, 0), "reasoning")
        if not isinstance(delta, str) or not delta:
            return []
        current = self._parts.get(index, 0)
        if type(part) is not int or part not in (current, current + 1):
            raise self._protocol(f"reasoning summary part {part!r} after part {current}")
        self._parts[index] = part
        self._with_text.add(index)
        return [ReasoningDelta(index, delta, part=part or None)]

    def _done(self, output: int, item: Mapping[str, Any]) -> list[StreamChunk]:
        item_type = item.get("type")
        out: list[StreamChunk] = []
        if item_type == "function_call":
            index = self._block((output, 0), "tool_call")
            if index not in self._with_text:
                # No deltas (some servers send the arguments only here); a call without
                # arguments still has to parse as a JSON object.
                out.append(ToolCallDelta(index, item.get("arguments") or "{}"))
            out.append(BlockEnd(index))
        elif item_type == "reasoning":
            index = self._block((output, 0), "reasoning")
            if index not in self._with_text:
                summary = [
                    part.get("text") or ""
                    for part in item.get("summary") or ()
                    if isinstance(part, dict)
                ]
                if any(summary):
                    out += [
                        ReasoningDelta(index, text, part=part or None)
                        for part, text in enumerate(summary)
                    ]
            encrypted = item.get("encrypted_content")
            out.append(
                ReasoningDelta(
                    index,
                    "",
                    encrypted_content=encrypted if isinstance(encrypted, str) else None,
                    item_id=item.get("id") or None,
                )
            )
            out.append(BlockEnd(index))
        elif item_type == "message":
            out += self._message_done(output, item)
        return out

    def _message_done(self, output: int, item: Mapping[str, Any]) -> list[StreamChunk]:
        out: list[StreamChunk] = []
        for position, part in enumerate(item.get("content") or ()):
            if not isinstance(part, dict):
                continue
            key = (output, 1 + position)
            text = part.get("text") if part.get("type") == "output_text" else part.get("refusal")
            if key not in self._blocks and isinstance(text, str) and text:
                # A server that sent the part only whole, without deltas.
                kind = "response.refusal.delta" if part.get("type") == "refusal" else ""
                out += self._text(kind, key, {"delta": text})
            if key in self._blocks:
                out.append(BlockEnd(self._blocks[key]))
        return out

    def _items_of(self, response: Mapping[str, Any]) -> list[StreamChunk]:
        # Some servers send the output only inside the terminal response, with no item
        # events: read each item as if it had been added and done in one go.
        out: list[StreamChunk] = []
        for output, item in enumerate(response.get("output") or ()):
            if isinstance(item, dict):
                out += self._added(output, item)
                out += self._done(output, item)
        return out

    def end(self, kind: str, response: Mapping[str, Any]) -> None:
        """Take the terminal event (`response.completed`, `.incomplete` or `.failed`)."""
        if not self._saw_items and not self._blocks and kind != "response.failed":
            self._late = self._items_of(response)
        usage = response.get("usage")
        if isinstance(usage, dict):
            self.usage = usage_from_responses(usage)
        if kind == "response.failed":
            raw = response.get("error")
            error: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
            message = f"{self._provider}: {error.get('message') or 'the response failed'}"
            code = _failure_code(error.get("code"), message)
            self.finish = Finish("error", ErrorInfo(message, code))
        elif kind == "response.incomplete":
            details = response.get("incomplete_details")
            reason = details.get("reason") if isinstance(details, dict) else None
            if reason == "max_output_tokens":
                self.finish = Finish("max-tokens")
            elif reason == "content_filter":
                message = f"{self._provider}: the provider's content filter stopped the answer"
                self.finish = Finish("error", ErrorInfo(message, ErrorCode.CONTENT_FILTERED))
            else:
                message = f"{self._provider}: the response is incomplete (reason {reason!r})"
                self.finish = Finish("error", ErrorInfo(message, ErrorCode.PROVIDER_ERROR))
        elif self._refusal:
            self.finish = refused(self._provider, "".join(self._refusal))
        else:
            self.finish = Finish("tool-calls" if self._tools else "stop")

    def final(self) -> list[StreamChunk]:
        assert self.finish is not None
        out: list[StreamChunk] = list(self._late)
        if self.usage is not None:
            out.append(UsageReport(self.usage))
        out.append(self.finish)
        return out


_TERMINAL = ("response.completed", "response.incomplete", "response.failed")


class OpenAIResponsesProvider(HttpSseProvider):
    """Streams `POST {base_url}/responses`; `base_url` ends in `/v1` as in the openai SDK.

    `store=False` (the default) keeps nothing on OpenAI's side: the full input is sent every
    time and reasoning is replayed from its encrypted content. `encrypted_reasoning` asks for
    that content: None (the default) for reasoning models only (`is_reasoning_model`), True
    or False always or never. `prompt_cache_key` behaves as in `OpenAIChatProvider`
    (default: sent to OpenAI's own endpoint only).
    """

    default_base_url: ClassVar[str] = OPENAI_BASE_URL
    default_name: ClassVar[str] = "openai-responses"
    default_key_env: ClassVar[str] = "OPENAI_API_KEY"

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        settings: HttpSettings | None = None,
        prompt_cache_key: bool | None = None,
        store: bool = False,
        encrypted_reasoning: bool | None = None,
        **options: Unpack[HttpOptions],
    ) -> None:
        super().__init__(http_settings(settings, base_url, api_key, options))
        self.store = store
        self.encrypted_reasoning = encrypted_reasoning
        self.send_prompt_cache_key = (
            prompt_cache_key if prompt_cache_key is not None else is_openai_endpoint(self.base_url)
        )

    @property
    def url(self) -> str:
        """The Responses endpoint: `{base_url}/responses`."""
        return f"{self.base_url}/responses"

    def build_body(self, request: Request) -> dict[str, Any]:
        """The Responses API body of `request` (the full input; `store=false` by default)."""
        return responses_body(
            request,
            store=self.store,
            encrypted_reasoning=self.encrypted_reasoning,
            send_prompt_cache_key=self.send_prompt_cache_key,
            provider=self.name,
        )

    def _status_error(self, status: int, body: bytes, headers: httpx.Headers) -> ProviderError:
        return openai_status_error(self, status, body, headers)

    async def stream(self, request: Request) -> AsyncIterator[StreamChunk]:
        """Stream `request` to the Responses API and map its events to chunks."""
        body = self.body_bytes(request)
        headers = openai_headers(self, request)
        mapper = _ResponsesStreamMapper(self.name)
        async with aclosing(self._post_events(self.url, headers, body)) as events:
            async for event in events:
                payload = self._decode(event)
                kind = payload.get("type") or event.event
                if kind == "error":
                    message = self.redact(f"{self.name}: {payload.get('message') or 'error'}")
                    code = _failure_code(payload.get("code"), message)
                    yield Finish("error", ErrorInfo(message, code))
                    return
                if kind in _TERMINAL:
                    response = payload.get("response")
                    mapper.end(kind, response if isinstance(response, dict) else {})
                    break
                for chunk in mapper.feed(kind, payload):
                    await trio.lowlevel.checkpoint()
                    yield chunk
        if mapper.finish is None:
            self._fail(
                f"{self.name}: the stream ended before the response completed",
                ErrorCode.STREAM_INTERRUPTED,
            )
        for chunk in mapper.final():
            if isinstance(chunk, Finish) and chunk.error is not None:
                chunk = Finish(
                    chunk.kind, ErrorInfo(self.redact(chunk.error.message), chunk.error.code)
                )
            await trio.lowlevel.checkpoint()
            yield chunk
