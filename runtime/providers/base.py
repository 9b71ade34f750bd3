"""The provider seam: what a model adapter must offer the loop."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol, runtime_checkable

from attrs import frozen

from ..log.request import Request
from ..model.chunks import StreamChunk


@frozen
class ModelInfo:
    """What the runtime may know about a model; `context_window` feeds the compaction gate."""

    context_window: int | None = None


@runtime_checkable
class Provider(Protocol):
    """Streams typed chunks for one frozen request.

    Failures either raise `ProviderError` (with a stable `code`) or end the stream with
    `Finish(kind="error", error=ErrorInfo(...))`. Transient transport errors are retried
    inside the adapter before the first streamed byte, never after. The stream is where a
    loop's step lets other tasks run, so it passes a schedule point (any trio I/O does;
    loop.md §4.10).
    """

    name: str

    def stream(self, request: Request) -> AsyncIterator[StreamChunk]:
        """The answer to `request` as typed chunks (an async generator: callers close it
        with `opened_stream`)."""
        ...

    def model_info(self, model: str) -> ModelInfo | None:
        """What is known about `model` (its context window), or None."""
        ...


def opened_stream(provider: Provider, request: Request) -> OpenedStream:
    """`provider.stream(request)`, closed when the block ends — on completion, error or
    cancellation — so a provider's cleanup (its `finally`, its HTTP response) runs inside
    the scope that opened the stream, before the caller appends anything after it. Like
    `contextlib.aclosing`, for streams that may also be plain async iterators."""
    return OpenedStream(provider, request)


class OpenedStream:
    """The context manager `opened_stream` gives: a plain class, not a generator-based
    one, since every model step enters one (no generator to start, hook and finalize)."""

    __slots__ = ("_provider", "_request", "_stream")

    def __init__(self, provider: Provider, request: Request) -> None:
        self._provider = provider
        self._request = request
        self._stream: AsyncIterator[StreamChunk] | None = None

    async def __aenter__(self) -> AsyncIterator[StreamChunk]:
        stream = self._stream = self._provider.stream(self._request)
        return stream

    async def __aexit__(self, *exc_info: object) -> None:
        aclose = getattr(self._stream, "aclose", None)
        if aclose is not None:
            await aclose()
