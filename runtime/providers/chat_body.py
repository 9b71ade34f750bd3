"""The Chat Completions request body (OpenAI, DeepSeek and compatible servers): messages,
tools and the request options each server's dialect takes; the rest is refused before
sending (docs/providers.md)."""

from __future__ import annotations

import hashlib
from typing import Any

from attrs import frozen

from ...codecs.converter import ordered_fragment
from ..log.request import Request
from ..model.header import LlmCallConfig, ResponseFormat, ToolChoice, ToolSchema
from ..model.messages import Message, Reasoning, Text, ToolCall, ToolResult
from .http import forced_tool, invalid_request, merge_extra_body, tool_parameters


def prompt_cache_key(session_id: str) -> str:
    """A routing key per session that does not disclose the session id."""
    return "actorloop-" + hashlib.sha256(session_id.encode("utf-8")).hexdigest()[:32]


def _text_content(texts: list[str]) -> str | list[dict[str, str]]:
    if len(texts) == 1:
        return texts[0]
    if not texts:
        return ""
    return [{"type": "text", "text": text} for text in texts]


def _wire_messages(message: Message, reasoning_passback: bool) -> list[dict[str, Any]]:
    if message.role == "assistant":
        texts = [block.text for block in message.content if isinstance(block, Text)]
        calls = [block for block in message.content if isinstance(block, ToolCall)]
        wire: dict[str, Any] = {"role": "assistant"}
        wire["content"] = "".join(texts) if texts or not calls else None
        if calls:
            wire["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments or "{}"},
                }
                for call in calls
            ]
        # Opaque reasoning of other providers (redacted, encrypted) has no text to pass back.
        thoughts = [
            block.text for block in message.content if isinstance(block, Reasoning) and block.text
        ]
        if reasoning_passback and thoughts:
            wire["reasoning_content"] = "".join(thoughts)
        return [wire]
    # Tool results must directly follow the assistant tool calls, so they go first;
    # any text of the same message follows as its own message.
    results = [block for block in message.content if isinstance(block, ToolResult)]
    texts = [block.text for block in message.content if isinstance(block, Text)]
    wires: list[dict[str, Any]] = [
        {
            "role": "tool",
            "tool_call_id": result.tool_call_id,
            "content": "\n".join(part.text for part in result.content),
        }
        for result in results
    ]
    if texts or not results:
        wires.append({"role": message.role, "content": _text_content(texts)})
    return wires


def _function(tool: ToolSchema, strict: bool | None) -> dict[str, Any]:
    function: dict[str, Any] = {"name": tool.name, "parameters": tool_parameters(tool)}
    if tool.description:
        function["description"] = tool.description
    if strict is not None:
        function["strict"] = strict
    return function


def chat_tool_choice(choice: ToolChoice) -> object:
    """`tool_choice` in the Chat Completions shape."""
    if choice.mode == "tool":
        return {"type": "function", "function": {"name": choice.name}}
    return choice.mode


def chat_response_format(fmt: ResponseFormat) -> dict[str, Any]:
    """`response_format` in the Chat Completions shape (the schema keeps its key order)."""
    if fmt.type == "json_object":
        return {"type": "json_object"}
    schema: dict[str, Any] = {"name": fmt.name, "schema": ordered_fragment(fmt.schema)}
    if fmt.strict is not None:
        schema["strict"] = fmt.strict
    if fmt.description is not None:
        schema["description"] = fmt.description
    return {"type": "json_schema", "json_schema": schema}


def _tool_options(body: dict[str, Any], config: LlmCallConfig, has_tools: bool) -> None:
    # OpenAI rejects tool_choice / parallel_tool_calls on a request without tools; with no
    # tool to choose from, neither option constrains anything.
    if not has_tools:
        return
    if config.tool_choice is not None:
        body["tool_choice"] = chat_tool_choice(config.tool_choice)
    if config.parallel_tool_calls is not None:
        body["parallel_tool_calls"] = config.parallel_tool_calls


@frozen
class ChatDialect:
    """What one Chat Completions server takes beyond the common fields (docs/providers.md)."""

    max_tokens_field: str = "max_completion_tokens"
    reasoning_passback: bool = False
    """Whether reasoning goes back as `reasoning_content` (DeepSeek's thinking mode)."""
    json_schema: bool = True
    reasoning_effort: bool = True
    metadata: bool = True
    strict_tools: bool = True
    safety_identifier: bool = True
    store: bool = True


OPENAI_CHAT = ChatDialect()
DEEPSEEK_CHAT = ChatDialect(
    "max_tokens",
    reasoning_passback=True,
    json_schema=False,
    reasoning_effort=False,
    metadata=False,
    strict_tools=False,
    safety_identifier=False,
    store=False,
)
"""DeepSeek's Chat API: `response_format` only `text`/`json_object`, no `reasoning_effort`
(its thinking switch is `extra_body`), no `metadata`, `strict`, `user` or `store`."""

_ANTHROPIC_ONLY = ("thinking_budget", "cache_ttl", "cache_breakpoints")


def _refusals(provider: str, config: LlmCallConfig, dialect: ChatDialect, store: bool) -> None:
    """Options this server cannot take are refused before sending, never dropped."""
    for option in _ANTHROPIC_ONLY:
        if getattr(config, option) is not None:
            thinking = option == "thinking_budget" and dialect.reasoning_effort
            hint = " (use reasoning_effort)" if thinking else ""
            raise invalid_request(
                provider, f"{option} is an Anthropic option; Chat Completions has none{hint}"
            )
    unsupported = [
        option
        for option, given, taken in (
            ("response_format json_schema", _is_json_schema(config), dialect.json_schema),
            ("reasoning_effort", config.reasoning_effort is not None, dialect.reasoning_effort),
            ("metadata", bool(config.metadata), dialect.metadata),
            ("strict_tools", config.strict_tools is not None, dialect.strict_tools),
            ("user", config.user is not None, dialect.safety_identifier),
        )
        if given and not taken
    ]
    if unsupported:
        raise invalid_request(provider, f"this API does not take {', '.join(unsupported)}")
    if config.metadata and not (store or config.extra_body.get("store") is True):
        # OpenAI answers 400 "The 'metadata' parameter is only allowed when 'store' is enabled".
        raise invalid_request(
            provider,
            "metadata is kept only for stored completions: construct the provider with "
            "store=True (or pass extra_body={'store': True}), or leave metadata out",
        )


def _is_json_schema(config: LlmCallConfig) -> bool:
    return config.response_format is not None and config.response_format.type == "json_schema"


def openai_body(
    request: Request,
    *,
    dialect: ChatDialect = OPENAI_CHAT,
    store: bool = False,
    send_prompt_cache_key: bool = True,
    provider: str = "openai",
) -> dict[str, Any]:
    """The Chat Completions body: system message, prefix, history, tools in request order,
    then the request options of the config (docs/providers.md)."""
    config = request.config
    forced_tool(provider, config, request.tools)
    _refusals(provider, config, dialect, store)
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    for message in request.messages:
        messages.extend(_wire_messages(message, dialect.reasoning_passback))
    body: dict[str, Any] = {
        "model": config.model,
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if request.tools:
        body["tools"] = [
            {"type": "function", "function": _function(tool, config.strict_tools)}
            for tool in request.tools
        ]
    _tool_options(body, config, bool(request.tools))
    if config.temperature is not None:
        body["temperature"] = config.temperature
    if config.max_tokens is not None:
        body[dialect.max_tokens_field] = config.max_tokens
    if config.stop:
        body["stop"] = list(config.stop)
    if config.response_format is not None:
        body["response_format"] = chat_response_format(config.response_format)
    if config.reasoning_effort is not None:
        body["reasoning_effort"] = config.reasoning_effort
    if config.user is not None:
        # `user` is deprecated in the openai SDK in favour of `safety_identifier`.
        body["safety_identifier"] = config.user
    if store:
        body["store"] = True
    if config.metadata:
        body["metadata"] = dict(config.metadata)
    if send_prompt_cache_key:
        body["prompt_cache_key"] = prompt_cache_key(request.session_id)
    return merge_extra_body(body, config)
