"""Request options on `LlmCallConfig` and `AgentOptions`: validation, canonical absence, and
the round trip through the event codec (they are part of the reconstructable request)."""

from __future__ import annotations

from typing import Any

import pytest

from actorloop.codecs.converter import canonical_bytes, decode_event, encode_event
from actorloop.runtime import AgentOptions
from actorloop.runtime.errors import CallConfigError, SessionFormatError
from actorloop.runtime.model.events import RequestHeaderEvent, SessionEvent
from actorloop.runtime.model.header import EpochHeader, LlmCallConfig, ResponseFormat, ToolChoice

EVERY_OPTION: dict[str, Any] = {
    "tool_choice": ToolChoice.tool("lookup"),
    "parallel_tool_calls": False,
    "strict_tools": True,
    "response_format": ResponseFormat.json_schema(
        {"type": "object", "properties": {"b": {}, "a": {}}}, name="out", strict=True
    ),
    "reasoning_effort": "high",
    "thinking_budget": 2048,
    "cache_ttl": "1h",
    "cache_breakpoints": ("tools", "system"),
    "user": "u-1",
    "metadata": {"team": "core"},
    "extra_body": {"thinking": {"type": "enabled"}},
    "extra_headers": {"anthropic-beta": "x-2025"},
}


def header_event(config: LlmCallConfig) -> SessionEvent:
    return SessionEvent("request/header", 0, 0, RequestHeaderEvent(EpochHeader(config), "initial"))


def test_every_option_round_trips_through_the_codec() -> None:
    config = LlmCallConfig("m", max_tokens=4096, **EVERY_OPTION)
    raw = encode_event(header_event(config))
    decoded = decode_event(raw).data
    assert isinstance(decoded, RequestHeaderEvent)
    assert canonical_bytes(decoded.header.config) == canonical_bytes(config)
    assert decoded.header.config == config


def test_agent_options_map_every_option_to_the_call_config() -> None:
    options = AgentOptions(model="m", max_tokens=4096, **EVERY_OPTION)
    assert options.call_config() == LlmCallConfig("m", max_tokens=4096, **EVERY_OPTION)
    assert AgentOptions(model="m", tool_choice="auto").call_config().tool_choice == ToolChoice(
        "auto"
    )


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"tool_choice": "any"}, "tool_choice must be 'auto', 'none', 'required'"),
        ({"tool_choice": 3}, "tool_choice must be 'auto', 'none', 'required'"),
        ({"parallel_tool_calls": "yes"}, "parallel_tool_calls must be a bool"),
        ({"reasoning_effort": ""}, "reasoning_effort must be a non-empty string"),
        ({"cache_ttl": "2h"}, "cache_ttl must be '5m' or '1h'"),
        ({"cache_breakpoints": ("tools", "tools")}, "names a place twice"),
        ({"cache_breakpoints": ("everything",)}, "is not one of tools, system, prefix, history"),
        ({"cache_breakpoints": "tools"}, "must be a sequence of names"),
        ({"metadata": {"n": 1}}, "value of 'n' must be a string"),
        ({"extra_headers": {"Authorization": "Bearer sk-1"}}, "would record a credential"),
        ({"extra_headers": {"x-api-key": "sk-1"}}, "would record a credential"),
        ({"extra_headers": {"bad name": "v"}}, "not a valid header name"),
        ({"extra_headers": {"x-a": "v\r\nx-b: w"}}, "contains a line break"),
        ({"response_format": {"type": "object"}}, "response_format must be a ResponseFormat"),
        ({"thinking_budget": True}, "thinking_budget must be an int"),
    ],
)
def test_malformed_options_fail_when_the_options_are_made(
    options: dict[str, Any], problem: str
) -> None:
    with pytest.raises(CallConfigError, match=problem) as caught:
        AgentOptions(model="m", **options)
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"type": "json_schema"}, "needs a schema"),
        ({"type": "json_object", "schema": {"type": "object"}}, "takes no schema"),
        ({"type": "xml"}, "is not json_schema or json_object"),
        ({"schema": {"type": "object"}, "name": "has space"}, "must be 1-64 letters"),
    ],
)
def test_malformed_response_formats(arguments: dict[str, Any], problem: str) -> None:
    with pytest.raises(CallConfigError, match=problem):
        ResponseFormat(**arguments)


@pytest.mark.parametrize(("mode", "name"), [("tool", None), ("auto", "lookup"), ("any", None)])
def test_malformed_tool_choices(mode: Any, name: str | None) -> None:
    with pytest.raises(CallConfigError):
        ToolChoice(mode, name)


def test_a_stored_config_with_a_bad_option_is_a_format_error() -> None:
    raw = encode_event(header_event(LlmCallConfig("m"))).replace(
        b'{"model":"m"}', b'{"cache_ttl":"2h","model":"m"}'
    )
    with pytest.raises(SessionFormatError, match="2h"):
        decode_event(raw)


def test_options_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        LlmCallConfig("m", None, None, None, None, "auto")  # type: ignore[misc]
