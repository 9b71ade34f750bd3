"""actorloop's public API: `from actorloop.runtime import Runtime, AgentOptions, ...`.

`__all__` is what a user writes: the runtime and its options, the data model, the hook
values, and the bases of the error tree. Every name is re-exported lazily, on first access,
so importing a low layer of the package (the data model, the codecs) never loads the loop,
the providers or httpx (docs/ARCHITECTURE.md; checked by tests/test_layers.py). Test helpers
live in `actorloop.runtime.testing` and leaf errors in `actorloop.runtime.errors`; reached
from here they still work, with a `DeprecationWarning`, for one release.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import (
    ActorloopError,
    AgentError,
    ErrorCode,
    ProviderError,
    SessionError,
    SessionForkError,
    SessionNotFound,
    StoreError,
    TurnFailed,
)
from .lazy import lazy_exports
from .moved import install as _install_moved_paths

_install_moved_paths()

if TYPE_CHECKING:
    from .control.collector import CollectorPolicy
    from .control.handle import Agent, ToolContext
    from .control.options import AgentOptions, CompactionConfig, Tool
    from .host.runtime import Runtime
    from .log.request import Request
    from .log.session import Session
    from .log.usage import UsageTotals
    from .model.budget import Budget, Spend
    from .model.chunks import TokenUsage
    from .model.events import Append, Replace, SessionEvent
    from .model.header import EpochHeader, LlmCallConfig, ResponseFormat, ToolChoice, ToolSchema
    from .model.hook_values import (
        Allow,
        Block,
        ContextItem,
        Continuation,
        Deny,
        InboxEvent,
        PostStep,
        PreStep,
        PromptSubmit,
        ToolCallInfo,
        ToolOutcome,
        TurnResult,
        TurnStop,
    )
    from .model.messages import Message, Reasoning, Source, Text, ToolCall, ToolResult
    from .model.meta import SessionMeta

_LAZY = {
    "actorloop.runtime.control.collector": ("CollectorPolicy",),
    "actorloop.runtime.control.handle": ("Agent", "ToolContext"),
    "actorloop.runtime.control.options": (
        "AgentOptions",
        "CompactionConfig",
        "Tool",
    ),
    "actorloop.runtime.host.runtime": ("Runtime",),
    "actorloop.runtime.log.request": ("Request",),
    "actorloop.runtime.log.session": ("Session",),
    "actorloop.runtime.log.usage": ("UsageTotals",),
    "actorloop.runtime.model.budget": ("Budget", "Spend"),
    "actorloop.runtime.model.chunks": ("TokenUsage",),
    "actorloop.runtime.model.events": ("Append", "Replace", "SessionEvent"),
    "actorloop.runtime.model.header": (
        "EpochHeader",
        "LlmCallConfig",
        "ResponseFormat",
        "ToolChoice",
        "ToolSchema",
    ),
    "actorloop.runtime.model.hook_values": (
        "Allow",
        "Block",
        "ContextItem",
        "Continuation",
        "Deny",
        "InboxEvent",
        "PostStep",
        "PreStep",
        "PromptSubmit",
        "ToolCallInfo",
        "ToolOutcome",
        "TurnResult",
        "TurnStop",
    ),
    "actorloop.runtime.model.messages": (
        "Message",
        "Reasoning",
        "Source",
        "Text",
        "ToolCall",
        "ToolResult",
    ),
    "actorloop.runtime.model.meta": ("SessionMeta",),
}

# Names this package exported before round 3, at their home now; reached through the
# package they warn. Errors not listed in `__all__` resolve through the errors module.
_MOVED = {
    "actorloop.runtime.testing": (
        "HANG",
        "EchoProvider",
        "ScriptedProvider",
        "max_tokens_reply",
        "reply",
        "tool_call",
        "tool_calls",
    ),
    "actorloop.runtime.model.chunks": ("ErrorInfo",),
    "actorloop.runtime.model.hook_values": ("RequestFailure",),
}

__getattr__, __dir__ = lazy_exports(
    globals(),
    {name: module for module, names in _LAZY.items() for name in names},
    moved={name: module for module, names in _MOVED.items() for name in names},
    moved_fallback="actorloop.runtime.errors",
)

__all__ = [
    "ActorloopError",
    "Agent",
    "AgentError",
    "AgentOptions",
    "Allow",
    "Append",
    "Block",
    "Budget",
    "CollectorPolicy",
    "CompactionConfig",
    "ContextItem",
    "Continuation",
    "Deny",
    "EpochHeader",
    "ErrorCode",
    "InboxEvent",
    "LlmCallConfig",
    "Message",
    "PostStep",
    "PreStep",
    "PromptSubmit",
    "ProviderError",
    "Reasoning",
    "Replace",
    "Request",
    "ResponseFormat",
    "Runtime",
    "Session",
    "SessionError",
    "SessionEvent",
    "SessionForkError",
    "SessionMeta",
    "SessionNotFound",
    "Source",
    "Spend",
    "StoreError",
    "Text",
    "TokenUsage",
    "Tool",
    "ToolCall",
    "ToolCallInfo",
    "ToolChoice",
    "ToolContext",
    "ToolOutcome",
    "ToolResult",
    "ToolSchema",
    "TurnFailed",
    "TurnResult",
    "TurnStop",
    "UsageTotals",
]
