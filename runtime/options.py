"""Agent configuration: `AgentOptions`, `CompactionConfig`, and tools with their call context."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeAlias

import trio
from attrs import field, frozen

from actorloop.codecs.jsonvalue import EMPTY_OBJECT, FrozenDict, freeze_object
from actorloop.runtime.header import LlmCallConfig, ToolSchema
from actorloop.runtime.messages import Content

if TYPE_CHECKING:
    from actorloop.runtime.agent import Agent

ToolOutput: TypeAlias = str | Content


@frozen
class ToolContext:
    """What a running tool can see: its agent, its call id, and the turn's cancel scope."""

    agent: Agent
    call_id: str
    cancel_scope: trio.CancelScope
    """The turn's scope: cancelling it cancels the whole turn, not only this call."""
    turn: int
    step: int


ToolExecute: TypeAlias = Callable[[dict[str, Any], ToolContext], Awaitable[ToolOutput]]


@frozen
class Tool:
    """A tool the model may call: `execute(args, ctx)` returns text or content blocks."""

    name: str
    description: str
    parameters: FrozenDict = field(converter=freeze_object)
    """The JSON Schema of the arguments object, as the model sees it."""
    execute: ToolExecute = field(eq=False)
    """`async def execute(args: dict, ctx: ToolContext) -> str | tuple[Text, ...]`."""

    @property
    def schema(self) -> ToolSchema:
        """What the request header records of this tool (name, description, parameters)."""
        return ToolSchema(self.name, self.description, self.parameters)


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


def _at_least_one(_instance: object, attribute: Any, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"{attribute.name} must be an int >= 1 (inboxes are bounded), got {value!r}"
        )


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

    def call_config(self) -> LlmCallConfig:
        """The model-call configuration this instance's first request starts from."""
        return LlmCallConfig(
            model=self.model,
            provider=self.provider,
            temperature=self.temperature,
            max_tokens=self.max_tokens,
            stop=self.stop,
        )

    def tool_map(self) -> Mapping[str, Tool]:
        """The tools by name."""
        return {tool.name: tool for tool in self.tools}
