"""Helpers for testing code that runs agents, as `trio.testing` is for trio: a scripted
provider that plays a list of answers and records every request, an echoing provider, and
the stream-chunk builders the scripts are written with."""

from __future__ import annotations

from .providers.scripted import (
    HANG,
    EchoProvider,
    ScriptedProvider,
    max_tokens_reply,
    reply,
    tool_call,
    tool_calls,
)

__all__ = [
    "HANG",
    "EchoProvider",
    "ScriptedProvider",
    "max_tokens_reply",
    "reply",
    "tool_call",
    "tool_calls",
]
