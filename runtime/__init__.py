"""actorloop's kernel and domain model; this module is the public API."""

from actorloop.runtime.agent import Agent
from actorloop.runtime.chunks import ErrorInfo, TokenUsage
from actorloop.runtime.errors import (
    ActorloopError,
    AgentClosed,
    InvariantViolation,
    ProviderError,
    SessionBusy,
    SessionCorruptError,
    SessionExists,
    SessionForkError,
    SessionFormatError,
    SessionFormatUnsupported,
    SessionNotFound,
    SessionValidationError,
    StoreError,
)
from actorloop.runtime.events import Append, Replace, SessionEvent
from actorloop.runtime.header import EpochHeader, LlmCallConfig, ToolSchema
from actorloop.runtime.messages import Message, Reasoning, Source, Text, ToolCall, ToolResult
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

# Last: the runtime module wires the actors, which import the modules above.
from actorloop.runtime.runtime import Runtime, RuntimeClosed
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
from actorloop.runtime.session import Session, SessionMeta

__all__ = [
    "HANG",
    "ActorloopError",
    "Agent",
    "AgentClosed",
    "AgentOptions",
    "Allow",
    "Append",
    "Block",
    "CompactionConfig",
    "ContextItem",
    "Continuation",
    "Deny",
    "EchoProvider",
    "EpochHeader",
    "ErrorInfo",
    "InvariantViolation",
    "LlmCallConfig",
    "Message",
    "PreStep",
    "PromptSubmit",
    "ProviderError",
    "Reasoning",
    "Replace",
    "Request",
    "RequestFailure",
    "Runtime",
    "RuntimeClosed",
    "ScriptedProvider",
    "Session",
    "SessionBusy",
    "SessionCorruptError",
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
    "Text",
    "TokenUsage",
    "Tool",
    "ToolCall",
    "ToolCallInfo",
    "ToolContext",
    "ToolOutcome",
    "ToolResult",
    "ToolSchema",
    "TurnResult",
    "max_tokens_reply",
    "reply",
    "tool_call",
    "tool_calls",
]
