"""The model-call side of tracing: the `chat {model}` span of one call (`ModelCall`),
ended once, and the provider wrapper that opens one around each stream (`TracedProvider`)."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import AbstractAsyncContextManager, aclosing, nullcontext
from typing import TYPE_CHECKING, Protocol, cast

import trio

from ..errors import ErrorCode, ProviderError, StreamProtocolError
from ..log.request import Request
from ..model.chunks import ChunkAssembler, Finish, StreamChunk, TokenUsage, UsageReport
from ..providers.base import ModelInfo, Provider
from .telemetry_conventions import (
    CANCELLED,
    FINISH_REASON,
    FINISH_REASONS,
    OTHER_ERROR,
    OUTPUT_MESSAGES,
    TIME_TO_FIRST_CHUNK,
    end_span,
    message_parts,
    set_usage,
    to_json,
)

if TYPE_CHECKING:
    from opentelemetry.trace import Span


class CallsOfTurn(Protocol):
    """What a model call knows of its open turn: the calls still open in it."""

    calls: set[ModelCall]


class CallTracer(Protocol):
    """What the provider wrapper asks of the tracing (`telemetry.Tracing`)."""

    def records_calls_of(self, session_id: str) -> bool:
        """False while that session's open turn is untraced."""
        ...

    def start_call(self, provider: str, request: Request) -> ModelCall:
        """Open the span of one model call."""
        ...


class ModelCall:
    """One traced model call. It is ended exactly once, by the provider wrapper when the
    stream ends, or by the turn's end when the loop stopped reading it (a cancel)."""

    __slots__ = ("_ended", "_turn", "assembler", "finish", "span", "usage")

    def __init__(self, span: Span, turn: CallsOfTurn | None, capture: bool) -> None:
        self.span = span
        self._ended = False
        self._turn = turn
        self.usage: TokenUsage | None = None
        self.finish: Finish | None = None
        self.assembler: ChunkAssembler | None = ChunkAssembler() if capture else None
        if turn is not None:
            turn.calls.add(self)

    def observe(self, chunk: StreamChunk) -> None:
        """Note what `chunk` tells about the call: its usage, its finish, its content."""
        if isinstance(chunk, UsageReport):
            self.usage = chunk.usage
        elif isinstance(chunk, Finish):
            self.finish = chunk
        if self.assembler is not None:
            try:
                self.assembler.feed(chunk)
            except StreamProtocolError:
                self.assembler = None  # the loop reports the broken stream; stop assembling

    def complete(self) -> None:
        """The stream ended: its finish (or its lack) says how the call ended."""
        finish = self.finish
        if finish is None:
            self.end(ErrorCode.STREAM_INCOMPLETE, "provider stream ended without a finish chunk")
            return
        self.span.set_attribute(FINISH_REASONS, (FINISH_REASON[finish.kind],))
        if self.assembler is not None and self.span.is_recording():
            content = self.assembler.content(drop_tool_calls=finish.kind == "max-tokens")
            output = {"role": "assistant", "parts": message_parts(content)}
            self.span.set_attribute(OUTPUT_MESSAGES, to_json([output]))
        if finish.kind == "error":
            error = finish.error
            self.end(
                (error.code if error else None) or OTHER_ERROR,
                error.message if error else "provider reported an error",
            )
        else:
            self.end()

    def end(self, error_type: str | None = None, description: str | None = None) -> None:
        """End the span (an error when `error_type` is given); later calls do nothing."""
        if self._ended:
            return
        self._ended = True
        if self._turn is not None:
            self._turn.calls.discard(self)
            self._turn = None
        if self.usage is not None:
            set_usage(self.span, self.usage)
        end_span(self.span, error_type, description)


class TracedProvider:
    """A provider whose every stream is one `chat {model}` span: time to first chunk,
    usage, finish reason, and how the call ended (error or cancellation)."""

    def __init__(self, inner: Provider, tracing: CallTracer) -> None:
        self.inner = inner
        self.name = inner.name
        self._tracing = tracing

    def model_info(self, model: str) -> ModelInfo | None:
        return self.inner.model_info(model)

    def stream(self, request: Request) -> AsyncIterator[StreamChunk]:
        if not self._tracing.records_calls_of(request.session_id):
            return self.inner.stream(request)
        call = self._tracing.start_call(self.name, request)
        if not call.span.is_recording():
            # Nothing of this call is recorded (no SDK configured, or sampled out), and a
            # chat span has no children: the stream needs no wrapper around every chunk.
            call.end()
            return self.inner.stream(request)
        return self._traced(call, request)

    async def _traced(self, call: ModelCall, request: Request) -> AsyncIterator[StreamChunk]:
        started = time.perf_counter()
        first = True
        try:
            async with _closing(self.inner.stream(request)) as chunks:
                async for chunk in chunks:
                    if first:
                        first = False
                        call.span.set_attribute(TIME_TO_FIRST_CHUNK, time.perf_counter() - started)
                    call.observe(chunk)
                    yield chunk
        except GeneratorExit:
            # The loop stopped reading (its turn was cancelled, or it failed): the turn's
            # end closes the span, knowing which.
            raise
        except trio.Cancelled:
            call.end(CANCELLED, "the model call was cancelled")
            raise
        except ProviderError as exc:
            call.end(exc.code or type(exc).__name__, str(exc))
            raise
        except BaseException as exc:
            call.end(type(exc).__qualname__, str(exc))
            raise
        call.complete()


def _closing(
    stream: AsyncIterator[StreamChunk],
) -> AbstractAsyncContextManager[AsyncIterator[StreamChunk]]:
    """Close the inner stream when the wrapper is done with it (an async generator, as
    every adapter's is), not whenever it is garbage-collected."""
    if hasattr(stream, "aclose"):
        return aclosing(cast(AsyncGenerator[StreamChunk, None], stream))
    return nullcontext(stream)
