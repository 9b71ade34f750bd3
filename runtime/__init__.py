"""actorloop's public API: `from actorloop.runtime import Runtime, AgentOptions, ...`.

The errors are imported here (they depend on nothing); every other name is re-exported
lazily, on first access, so importing a low layer of the package (the data model, the
codecs) never loads the loop, the providers or httpx. The layering is described in
docs/ARCHITECTURE.md and checked by tests/test_layers.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from actorloop.runtime.errors import (
    ActorloopError,
    ActorStopped,
    AgentClosed,
    AgentError,
    CompactionFailed,
    ContentError,
    ErrorCode,
    HeaderFoldError,
    HookError,
    InboxFull,
    InvalidSessionId,
    InvalidToolSchema,
    InvariantViolation,
    JsonValueError,
    ProviderError,
    ProviderNotConfigured,
    ProviderSpecError,
    RuntimeClosed,
    ScriptExhausted,
    SessionBusy,
    SessionCorruptError,
    SessionError,
    SessionExists,
    SessionForkError,
    SessionFormatError,
    SessionFormatUnsupported,
    SessionNotFound,
    SessionValidationError,
    StoreError,
    StoreUrlError,
    StreamProtocolError,
    SubagentError,
    ToolOrderError,
    TransientProviderError,
    TurnFailed,
    UnknownHookError,
    VerificationFailed,
    WorkloadError,
)
from actorloop.runtime.lazy import lazy_exports

if TYPE_CHECKING:
    from actorloop.runtime.agent import Agent
    from actorloop.runtime.chunks import ErrorInfo, TokenUsage
    from actorloop.runtime.events import Append, Replace, SessionEvent
    from actorloop.runtime.header import EpochHeader, LlmCallConfig, ToolSchema
    from actorloop.runtime.messages import Message, Reasoning, Source, Text, ToolCall, ToolResult
    from actorloop.runtime.meta import SessionMeta
    from actorloop.runtime.options import AgentOptions, CompactionConfig, Tool, ToolContext
    from actorloop.runtime.providers.scripted import (
        HANG,
        EchoProvider,
        ScriptedProvider,
        max_tokens_reply,
        reply,
        tool_call,
        tool_calls,
    )
    from actorloop.runtime.request import Request
    from actorloop.runtime.runtime import Runtime
    from actorloop.runtime.seams import (
        Allow,
        Block,
        ContextItem,
        Continuation,
        Deny,
        PreStep,
        PromptSubmit,
        RequestFailure,
        ToolCallInfo,
        ToolOutcome,
        TurnResult,
    )
    from actorloop.runtime.session import Session
    from actorloop.runtime.usage import UsageTotals

_LAZY = {
    "actorloop.runtime.agent": ("Agent",),
    "actorloop.runtime.chunks": ("ErrorInfo", "TokenUsage"),
    "actorloop.runtime.events": ("Append", "Replace", "SessionEvent"),
    "actorloop.runtime.header": ("EpochHeader", "LlmCallConfig", "ToolSchema"),
    "actorloop.runtime.meta": ("SessionMeta",),
    "actorloop.runtime.messages": (
        "Message",
        "Reasoning",
        "Source",
        "Text",
        "ToolCall",
        "ToolResult",
    ),
    "actorloop.runtime.options": ("AgentOptions", "CompactionConfig", "Tool", "ToolContext"),
    "actorloop.runtime.providers.scripted": (
        "HANG",
        "EchoProvider",
        "ScriptedProvider",
        "max_tokens_reply",
        "reply",
        "tool_call",
        "tool_calls",
    ),
    "actorloop.runtime.request": ("Request",),
    "actorloop.runtime.runtime": ("Runtime",),
    "actorloop.runtime.seams": (
        "Allow",
        "Block",
        "ContextItem",
        "Continuation",
        "Deny",
        "PreStep",
        "PromptSubmit",
        "RequestFailure",
        "ToolCallInfo",
        "ToolOutcome",
        "TurnResult",
    ),
    "actorloop.runtime.session": ("Session",),
    "actorloop.runtime.usage": ("UsageTotals",),
}

__getattr__, __dir__ = lazy_exports(
    globals(), {name: module for module, names in _LAZY.items() for name in names}
)

__all__ = [
    "HANG",
    "ActorStopped",
    "ActorloopError",
    "Agent",
    "AgentClosed",
    "AgentError",
    "AgentOptions",
    "Allow",
    "Append",
    "Block",
    "CompactionConfig",
    "CompactionFailed",
    "ContentError",
    "ContextItem",
    "Continuation",
    "Deny",
    "EchoProvider",
    "EpochHeader",
    "ErrorCode",
    "ErrorInfo",
    "HeaderFoldError",
    "HookError",
    "InboxFull",
    "InvalidSessionId",
    "InvalidToolSchema",
    "InvariantViolation",
    "JsonValueError",
    "LlmCallConfig",
    "Message",
    "PreStep",
    "PromptSubmit",
    "ProviderError",
    "ProviderNotConfigured",
    "ProviderSpecError",
    "Reasoning",
    "Replace",
    "Request",
    "RequestFailure",
    "Runtime",
    "RuntimeClosed",
    "ScriptExhausted",
    "ScriptedProvider",
    "Session",
    "SessionBusy",
    "SessionCorruptError",
    "SessionError",
    "SessionEvent",
    "SessionExists",
    "SessionForkError",
    "SessionFormatError",
    "SessionFormatUnsupported",
    "SessionMeta",
    "SessionNotFound",
    "SessionValidationError",
    "Source",
    "StoreError",
    "StoreUrlError",
    "StreamProtocolError",
    "SubagentError",
    "Text",
    "TokenUsage",
    "Tool",
    "ToolCall",
    "ToolCallInfo",
    "ToolContext",
    "ToolOrderError",
    "ToolOutcome",
    "ToolResult",
    "ToolSchema",
    "TransientProviderError",
    "TurnFailed",
    "TurnResult",
    "UnknownHookError",
    "UsageTotals",
    "VerificationFailed",
    "WorkloadError",
    "max_tokens_reply",
    "reply",
    "tool_call",
    "tool_calls",
]
