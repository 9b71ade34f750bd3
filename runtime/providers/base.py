"""The provider seam: what a model adapter must offer the loop."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol, runtime_checkable

from attrs import frozen

from actorloop.runtime.chunks import StreamChunk
from actorloop.runtime.request import Request


@frozen
class ModelInfo:
    context_window: int | None = None


@runtime_checkable
class Provider(Protocol):
    """Streams typed chunks for one frozen request.

    Failures either raise `ProviderError` (with a stable `code`) or end the stream with
    `Finish(kind="error", error=ErrorInfo(...))`. Transient transport errors are retried
    inside the adapter before the first streamed byte, never after.
    """

    name: str

    def stream(self, request: Request) -> AsyncIterator[StreamChunk]: ...

    def model_info(self, model: str) -> ModelInfo | None: ...
