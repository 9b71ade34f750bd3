"""Agent configuration: `AgentOptions`, `CompactionConfig`, and tools with their call context."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeAlias

import attrs
import jsonschema
from attrs import field, frozen
from jsonschema import Draft202012Validator

from ...codecs.jsonvalue import EMPTY_OBJECT, FrozenDict, freeze_object, thaw_json
from ..errors import InvalidToolSchema, McpConfigError
from ..lazy import lazy_exports
from ..model.budget import Budget
from ..model.header import (
    CacheBreakpoint,
    CacheTtl,
    EpochHeader,
    LlmCallConfig,
    ResponseFormat,
    ToolChoice,
    ToolSchema,
    as_cache_breakpoints,
)
from ..model.messages import Content
from .simple_schemas import SimpleCheck, compile_simple

ToolOutput: TypeAlias = str | Content

# The second argument is the call's `ToolContext` (control/handle.py, beside the `Agent` it
# carries): the options stand below the handle, so they name it only here, as `Any`.
ToolExecute: TypeAlias = Callable[[dict[str, Any], Any], Awaitable[ToolOutput]]
# `async def reconcile(call: ToolCallInfo, ctx: ToolContext) -> ToolOutcome | None`
# (docs/effects.md); typed loosely for the same reason as `ToolExecute`.
ToolReconciler: TypeAlias = Callable[[Any, Any], Awaitable[Any]]
ApprovalRule: TypeAlias = Callable[[dict[str, Any], Any], bool]
"""`needs_approval` as a predicate: `(arguments, ctx) -> bool`."""


@frozen
class Tool:
    """A tool the model may call: `execute(args, ctx)` returns text or content blocks.

    Arguments are validated against `parameters` (a JSON Schema, checked and compiled once,
    here) before `execute` runs; invalid ones give the model an `INVALID_ARGUMENTS` result
    naming the failing path. An `exclusive` tool runs alone: a barrier between the groups
    of a step's calls that run in parallel (`AgentOptions.max_parallel_tool_calls`).
    """

    name: str
    description: str
    parameters: FrozenDict = field(converter=freeze_object)
    """The JSON Schema of the arguments object, as the model sees it."""
    execute: ToolExecute = field(eq=False)
    """`async def execute(args: dict, ctx: ToolContext) -> str | tuple[Text, ...]`."""
    exclusive: bool = field(default=False, kw_only=True)
    idempotent: bool = field(default=False, kw_only=True)
    """Safe to run again with the same `ctx.effect_key`: a call of it left in doubt by a
    crash is re-run once when its session is next loaded (docs/effects.md)."""
    reconcile: ToolReconciler | None = field(default=None, kw_only=True, eq=False)
    """`async (call: ToolCallInfo, ctx: ToolContext) -> ToolOutcome | None`: the real
    outcome of a call left in doubt by a crash (None: it never ran), asked when its
    session is next loaded; the log records the answer as the call's result."""
    needs_approval: bool | ApprovalRule = field(default=False, kw_only=True, eq=False)
    """Whether a call waits for a human decision (docs/approvals.md): True, or a predicate
    `(arguments, ctx) -> bool` over the call's validated arguments and its ToolContext."""
    validator: ArgumentsValidator = field(init=False, eq=False, repr=False)
    schema: ToolSchema = field(init=False, eq=False, repr=False)
    """What the request header records of this tool (name, description, parameters); one
    value per tool, so headers built step after step share it and compare without encoding."""

    def __attrs_post_init__(self) -> None:
        object.__setattr__(
            self, "validator", ArgumentsValidator.compile(self.name, self.parameters)
        )
        object.__setattr__(self, "schema", ToolSchema(self.name, self.description, self.parameters))


@frozen
class CompactionConfig:
    """When and how an agent compacts its history (docs/spec/compaction.md)."""

    auto: bool = True
    """Run the gate at every `agent/pre-step`; manual `agent.compact()` works either way."""
    threshold_ratio: float = 0.8
    """Compact when the estimated request exceeds this share of the context window."""
    retain_ratio: float = 0.16
    """Share of the window kept verbatim at the tail (unless `retain_tokens` is set)."""
    retain_tokens: int | None = None
    summary_max_tokens: int = 8192
    compaction_retries: int = 1
    """Extra attempts when one compaction leaves the request over the threshold."""
    max_overflow_retries: int = 1
    """Compactions per turn after a CONTEXT_WINDOW_EXCEEDED answer before giving up."""
    summary_model: str | None = None
    """Model for the summarizer call (default: the agent's)."""
    prune: bool = False
    """Shrink oversized tool results before summarizing (deterministic, no model call)."""


def _stop(value: str | Iterable[str] | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return (value,)
    return tuple(value)


def _names(value: Iterable[str] | None) -> tuple[str, ...] | None:
    return None if value is None else tuple(value)


def _tools(value: Iterable[Tool]) -> tuple[Tool, ...]:
    return tuple(value)


def _server_names(value: Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        raise McpConfigError(f"mcp must be a sequence of server names, not the str {value!r}")
    names = tuple(value)
    for name in names:
        if not isinstance(name, str) or not name:
            raise McpConfigError(f"mcp server names must be non-empty str, got {name!r}")
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise McpConfigError(f"mcp names the servers {repeated} more than once")
    return names


def _at_least_one(_instance: object, attribute: Any, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{attribute.name} must be an int >= 1, got {value!r}")


def _none_or_at_least_one(instance: object, attribute: Any, value: object) -> None:
    if value is not None:
        _at_least_one(instance, attribute, value)


DEFAULT_MAX_STEPS = 50
"""Steps one turn may take before it ends `max_steps` (`AgentOptions.max_steps`)."""


@frozen
class ArgumentsValidator:
    """A tool's argument schema, compiled once: `problem(args)` names the first failing
    path and rule, or returns None when the arguments are valid."""

    validator: Any
    simple: SimpleCheck | None = None
    """The schema's fast check when it is simple (`simple_schemas.py`): arguments it passes
    are valid; anything else, and every other schema, goes to the full validator."""

    @classmethod
    def compile(cls, tool: str, parameters: FrozenDict) -> ArgumentsValidator:
        # jsonschema reads JSON arrays as lists: give it a plain copy of the frozen schema.
        schema = thaw_json(parameters) if parameters else {"type": "object"}
        kind = jsonschema.validators.validator_for(schema, default=Draft202012Validator)
        try:
            kind.check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise InvalidToolSchema(
                f"tool {tool!r}: parameters is not a valid JSON Schema: {exc.message}"
            ) from exc
        return cls(kind(schema), compile_simple(schema))

    def problem(self, args: Mapping[str, Any]) -> str | None:
        if self.simple is not None and self.simple(args):
            return None
        error = jsonschema.exceptions.best_match(self.validator.iter_errors(args))
        if error is None:
            return None
        return f"{error.json_path}: {error.message}"


@frozen
class AgentOptions:
    """How one agent runs: the model and provider, system prompt, tools, sampling settings,
    context window and compaction. Frozen; a loop instance keeps the value it started
    with (`agent.options`)."""

    model: str
    provider: str | None = None
    system: str | None = None
    tools: tuple[Tool, ...] = field(default=(), converter=_tools)
    temperature: float | None = None
    max_tokens: int | None = None
    stop: tuple[str, ...] | None = field(default=None, converter=_stop)
    tool_order: tuple[str, ...] | None = field(default=None, converter=_names)
    context_window: int | None = None
    compaction: CompactionConfig = CompactionConfig()
    labels: FrozenDict = field(default=EMPTY_OBJECT, converter=freeze_object)
    inbox_capacity: int = field(default=64, validator=_at_least_one)
    """How many items (turns, injections) may wait in the inbox; `send` waits beyond it."""
    max_parallel_tool_calls: int = field(default=10, validator=_at_least_one)
    """How many of a step's (non-exclusive) tool calls may run at once."""
    max_steps: int | None = field(default=DEFAULT_MAX_STEPS, validator=_none_or_at_least_one)
    """Steps one turn may take: after the last, a turn that would go on ends `max_steps`
    instead (its tool results recorded, steering kept for the next turn). None: no cap."""
    reset_tool_choice: bool = True
    """A `tool_choice` of the options that forces a tool (`required`, or one named tool)
    holds for a turn's steps until one of them called tools; the turn's later steps ask
    with no `tool_choice` (the provider's default, `auto`), so an obedient model can end the
    turn. The change is an ordinary header delta. False: forced on every step."""
    # Request options, passed to LlmCallConfig unchanged (docs/providers.md).
    tool_choice: ToolChoice | str | None = None
    parallel_tool_calls: bool | None = None
    strict_tools: bool | None = None
    response_format: ResponseFormat | None = None
    reasoning_effort: str | None = None
    thinking_budget: int | None = None
    cache_ttl: CacheTtl | None = None
    cache_breakpoints: tuple[CacheBreakpoint, ...] | None = field(
        default=None, converter=as_cache_breakpoints
    )
    user: str | None = None
    metadata: FrozenDict = field(default=EMPTY_OBJECT, converter=freeze_object)
    extra_body: FrozenDict = field(default=EMPTY_OBJECT, converter=freeze_object)
    extra_headers: FrozenDict = field(default=EMPTY_OBJECT, converter=freeze_object)
    budget: Budget | None = None
    """The most this agent and its subagents may spend (docs/budgets.md); None: no limit
    of its own (a subagent still draws from its root's)."""
    mcp: tuple[str, ...] = field(default=(), converter=_server_names)
    """The runtime's MCP servers (`Runtime.open(mcp=...)`) whose tools this agent gets,
    after its own tools, in this order (docs/mcp.md)."""

    def __attrs_post_init__(self) -> None:
        # A malformed request option fails here, not at the first step.
        self.call_config()

    def call_config(self) -> LlmCallConfig:
        """The model-call configuration this instance's first request starts from."""
        return LlmCallConfig(
            model=self.model,
            provider=self.provider,
            temperature=self.temperature,
            max_tokens=self.max_tokens,
            stop=self.stop,
            tool_choice=self.tool_choice,
            parallel_tool_calls=self.parallel_tool_calls,
            strict_tools=self.strict_tools,
            response_format=self.response_format,
            reasoning_effort=self.reasoning_effort,
            thinking_budget=self.thinking_budget,
            cache_ttl=self.cache_ttl,
            cache_breakpoints=self.cache_breakpoints,
            user=self.user,
            metadata=self.metadata,
            extra_body=self.extra_body,
            extra_headers=self.extra_headers,
        )

    @classmethod
    def restored(cls, header: EpochHeader, **overrides: Any) -> AgentOptions:
        """Options rebuilt from a stored request header: the model, provider and every
        call setting from its config, and its (fully rendered) system prompt. Tools are
        code and are not stored: pass them in `overrides` (or `reconfigure` later)."""
        names = attrs.fields_dict(cls)
        config = {
            name: value
            for name, value in attrs.asdict(header.config, recurse=False).items()
            if name in names
        }
        return cls(**{**config, "system": header.system, **overrides})

    def tool_map(self) -> Mapping[str, Tool]:
        """The tools by name."""
        return {tool.name: tool for tool in self.tools}


# `ToolContext` lived here before the handle took it in; its old spelling still resolves.
__getattr__, __dir__ = lazy_exports(globals(), {"ToolContext": "actorloop.runtime.control.handle"})
