"""Request header data: the call config, tool schemas, the epoch header and its delta shape."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Literal, TypeAlias, get_args

from attrs import Attribute, field, frozen

from ...codecs.jsonvalue import EMPTY_OBJECT, FrozenDict, freeze_object
from ..errors import CallConfigError
from .messages import Message


def _stop_tuple(value: object) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return (value,)
    return tuple(value)  # type: ignore[arg-type]


def _optional_float(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"temperature must be a number, got {type(value).__name__}")
    return float(value)


ToolChoiceMode: TypeAlias = Literal["auto", "none", "required", "tool"]
CacheTtl: TypeAlias = Literal["5m", "1h"]
CacheBreakpoint: TypeAlias = Literal["tools", "system", "prefix", "history"]
CACHE_BREAKPOINTS: tuple[CacheBreakpoint, ...] = get_args(CacheBreakpoint)
MIN_THINKING_BUDGET = 1024
"""Anthropic's lower bound for `thinking.budget_tokens` (it must also stay below max_tokens)."""

_FORMAT_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
# Headers recorded in the log must never carry a secret: keys go in through `api_key=`.
_CREDENTIAL_HEADERS = frozenset({"authorization", "x-api-key", "api-key", "proxy-authorization"})


@frozen
class ToolChoice:
    """Which tools the model may or must call: `auto` (the model decides), `none`,
    `required` (at least one call) or `tool` (a call of the tool `name`)."""

    mode: ToolChoiceMode
    name: str | None = None

    def __attrs_post_init__(self) -> None:
        if self.mode not in get_args(ToolChoiceMode):
            raise CallConfigError(
                f"tool_choice mode {self.mode!r} is not one of auto, none, required, tool"
            )
        if (self.mode == "tool") != bool(self.name):
            raise CallConfigError("tool_choice names a tool exactly when its mode is 'tool'")

    @classmethod
    def tool(cls, name: str) -> ToolChoice:
        """Force a call of the tool `name`."""
        return cls("tool", name)


def _tool_choice(value: object) -> ToolChoice | None:
    if value is None or isinstance(value, ToolChoice):
        return value
    if isinstance(value, str) and value in ("auto", "none", "required"):
        return ToolChoice(value)  # type: ignore[arg-type]
    raise CallConfigError(
        f"tool_choice must be 'auto', 'none', 'required' or ToolChoice.tool(name), got {value!r}"
    )


@frozen
class ResponseFormat:
    """Structured output: with `type="json_schema"` the answer must match `schema` (its keys
    reach the model in the order written); `json_object` asks for any JSON object."""

    type: Literal["json_schema", "json_object"] = "json_schema"
    name: str = "response"
    schema: FrozenDict = field(default=EMPTY_OBJECT, converter=freeze_object)
    strict: bool | None = None
    description: str | None = None

    def __attrs_post_init__(self) -> None:
        if self.type not in ("json_schema", "json_object"):
            raise CallConfigError(
                f"response_format type {self.type!r} is not json_schema or json_object"
            )
        if self.type == "json_schema" and not self.schema:
            raise CallConfigError("a json_schema response_format needs a schema")
        if self.type == "json_object" and self.schema:
            raise CallConfigError("a json_object response_format takes no schema")
        if not _FORMAT_NAME.fullmatch(self.name):
            raise CallConfigError(
                f"response_format name {self.name!r} must be 1-64 letters, digits, _ or -"
            )

    @classmethod
    def json_schema(
        cls,
        schema: dict[str, Any],
        *,
        name: str = "response",
        strict: bool | None = None,
        description: str | None = None,
    ) -> ResponseFormat:
        """An answer matching the JSON schema `schema`."""
        return cls("json_schema", name, schema, strict, description)


def _optional_bool(name: str) -> Any:
    def check(_instance: object, _attribute: Attribute[Any], value: object) -> None:
        if value is not None and not isinstance(value, bool):
            raise CallConfigError(f"{name} must be a bool, got {type(value).__name__}")

    return check


def _optional_text(_instance: object, attribute: Attribute[Any], value: object) -> None:
    if value is not None and (not isinstance(value, str) or not value):
        raise CallConfigError(f"{attribute.name} must be a non-empty string, got {value!r}")


def _string_map(value: object) -> FrozenDict:
    frozen_value = freeze_object(value)  # type: ignore[arg-type]
    for key, item in frozen_value.items():
        if not isinstance(item, str):
            raise CallConfigError(f"value of {key!r} must be a string, got {type(item).__name__}")
    return frozen_value


def _extra_headers(value: object) -> FrozenDict:
    headers = _string_map(value)
    for name, item in headers.items():
        if not _HEADER_NAME.fullmatch(name):
            raise CallConfigError(f"extra_headers: {name!r} is not a valid header name")
        if name.lower() in _CREDENTIAL_HEADERS:
            raise CallConfigError(
                f"extra_headers: {name!r} would record a credential in the session log; "
                "pass keys to the provider (api_key=) instead"
            )
        if "\r" in item or "\n" in item:
            raise CallConfigError(f"extra_headers: the value of {name!r} contains a line break")
    return headers


def as_cache_breakpoints(value: object) -> tuple[CacheBreakpoint, ...] | None:
    """`cache_breakpoints` as a checked tuple (a bare string is refused, not split)."""
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise CallConfigError(f"cache_breakpoints must be a sequence of names, got {value!r}")
    names = tuple(value)
    for name in names:
        if name not in CACHE_BREAKPOINTS:
            raise CallConfigError(
                f"cache_breakpoints: {name!r} is not one of {', '.join(CACHE_BREAKPOINTS)}"
            )
    if len(set(names)) != len(names):
        raise CallConfigError(f"cache_breakpoints names a place twice: {names}")
    return names


def _cache_ttl(_instance: object, _attribute: Attribute[Any], value: object) -> None:
    if value is not None and value not in ("5m", "1h"):
        raise CallConfigError(f"cache_ttl must be '5m' or '1h', got {value!r}")


def _thinking_budget(_instance: object, _attribute: Attribute[Any], value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise CallConfigError(f"thinking_budget must be an int, got {type(value).__name__}")
    if value < MIN_THINKING_BUDGET:
        raise CallConfigError(f"thinking_budget {value} is below the minimum of 1024 tokens")


@frozen
class LlmCallConfig:
    """What a model call is configured with; `stop` is compared in order.

    Every option is recorded in the request header, so it is part of the request the log
    rebuilds; an option left at its default is absent from the encoding (old logs decode
    unchanged). docs/providers.md says which adapter sends what.
    """

    model: str
    provider: str | None = None
    temperature: float | None = field(default=None, converter=_optional_float)
    max_tokens: int | None = None
    stop: tuple[str, ...] | None = field(default=None, converter=_stop_tuple)
    tool_choice: ToolChoice | None = field(default=None, converter=_tool_choice, kw_only=True)
    parallel_tool_calls: bool | None = field(
        default=None, validator=_optional_bool("parallel_tool_calls"), kw_only=True
    )
    strict_tools: bool | None = field(
        default=None, validator=_optional_bool("strict_tools"), kw_only=True
    )
    response_format: ResponseFormat | None = field(default=None, kw_only=True)
    reasoning_effort: str | None = field(default=None, validator=_optional_text, kw_only=True)
    thinking_budget: int | None = field(default=None, validator=_thinking_budget, kw_only=True)
    cache_ttl: CacheTtl | None = field(default=None, validator=_cache_ttl, kw_only=True)
    cache_breakpoints: tuple[CacheBreakpoint, ...] | None = field(
        default=None, converter=as_cache_breakpoints, kw_only=True
    )
    user: str | None = field(default=None, validator=_optional_text, kw_only=True)
    metadata: FrozenDict = field(default=EMPTY_OBJECT, converter=_string_map, kw_only=True)
    extra_body: FrozenDict = field(default=EMPTY_OBJECT, converter=freeze_object, kw_only=True)
    extra_headers: FrozenDict = field(default=EMPTY_OBJECT, converter=_extra_headers, kw_only=True)

    def __attrs_post_init__(self) -> None:
        given = self.response_format
        if given is not None and not isinstance(given, ResponseFormat):
            raise CallConfigError(
                "response_format must be a ResponseFormat (e.g. ResponseFormat.json_schema"
                f"(schema)), got {type(given).__name__}"
            )
        if self.thinking_budget is None:
            return
        if self.max_tokens is not None and self.thinking_budget >= self.max_tokens:
            raise CallConfigError(
                f"thinking_budget {self.thinking_budget} must be below max_tokens {self.max_tokens}"
            )
        if self.temperature is not None and self.temperature != 1.0:
            raise CallConfigError(
                f"temperature {self.temperature} cannot be combined with thinking_budget "
                "(extended thinking allows only the default temperature)"
            )


@frozen
class ToolSchema:
    """A tool as the request header records it: name, description, argument schema;
    `parameters` keeps the key order it was written in, in the log and on the wire
    (docs/decisions/0007-tool-schema-key-order.md)."""

    name: str
    description: str = ""
    parameters: FrozenDict = field(default=EMPTY_OBJECT, converter=freeze_object)


@frozen
class EpochHeader:
    """The request-wide state a step's request is built from (docs/spec/session-log.md §6.2).

    Canonical form: empty `system`, `tools` or `message_prefix` is None (absent).
    """

    config: LlmCallConfig
    system: str | None = None
    tools: tuple[ToolSchema, ...] | None = None
    message_prefix: tuple[Message, ...] | None = None


@frozen
class SystemPatch:
    """Line patch on `\\n`: keep `keep_start` old head lines and `keep_end` old tail lines."""

    keep_start: int
    keep_end: int
    insert: tuple[str, ...]


@frozen
class ToolsDelta:
    added: tuple[ToolSchema, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[ToolSchema, ...] = ()


@frozen
class HeaderDelta:
    """Only changed fields are present (not None). `message_prefix=()` means "now absent"."""

    system: SystemPatch | None = None
    tools: ToolsDelta | None = None
    config: LlmCallConfig | None = None
    message_prefix: tuple[Message, ...] | None = None

    @property
    def is_empty(self) -> bool:
        return (
            self.system is None
            and self.tools is None
            and self.config is None
            and self.message_prefix is None
        )
