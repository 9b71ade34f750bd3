"""Shared plumbing of the HTTP adapters: the per-run httpx client, request-building helpers,
and a streaming POST opened with retries up to its first byte, then read as server-sent events."""

from __future__ import annotations

import logging
import os
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, ClassVar, NoReturn

import httpx
import orjson
import trio
from attrs import frozen

from ...codecs.converter import ordered_fragment
from ...codecs.jsonvalue import canonical_json
from ..errors import ErrorCode, ProviderError, TransientProviderError
from ..log.request import Request
from ..model.header import LlmCallConfig, ToolSchema
from .base import ModelInfo
from .settings import ApiKey, HttpSettings
from .sse import SseDecoder, SseEvent

log = logging.getLogger("actorloop.providers")

_CLOSE_GRACE = 2.0
_DETAIL_LIMIT = 500


@frozen
class OpenedStream:
    """A 2xx streaming response whose first body bytes have already been read."""

    response: httpx.Response
    chunks: AsyncIterator[bytes]
    first: bytes


def tool_parameters(tool: ToolSchema) -> orjson.Fragment:
    """The JSON schema of a tool in the order it was written (decision 0007); every wire
    format wants an object schema, never `{}`."""
    return ordered_fragment(tool.parameters or {"type": "object", "properties": {}})


def verbatim(value: object) -> object:
    """A user-written JSON value for the wire: objects and arrays keep the order written."""
    return ordered_fragment(value) if isinstance(value, (dict, tuple, list)) else value


def merge_extra_body(body: dict[str, Any], config: LlmCallConfig) -> dict[str, Any]:
    """`extra_body` fields join the body last, so (as in the official SDKs) they win over a
    field the adapter set; they are recorded in the header like every other option."""
    for key, value in config.extra_body.items():
        body[key] = verbatim(value)
    return body


def with_extra_headers(headers: dict[str, str], config: LlmCallConfig) -> dict[str, str]:
    """The adapter's headers with `extra_headers` on top (names compared case-blind)."""
    merged = {name.lower(): value for name, value in headers.items()}
    for name, value in config.extra_headers.items():
        merged[name.lower()] = value
    return merged


def is_openai_endpoint(base_url: str) -> bool:
    """Whether `base_url` is OpenAI's own API (not a compatible server or gateway)."""
    return httpx.URL(base_url).host == "api.openai.com"


def invalid_request(provider: str, problem: str) -> ProviderError:
    """A request this adapter refuses to send (raised before any byte goes out)."""
    return ProviderError(f"{provider}: {problem}", ErrorCode.INVALID_REQUEST)


def forced_tool(provider: str, config: LlmCallConfig, tools: tuple[ToolSchema, ...]) -> None:
    """A `tool_choice` forcing a tool must name one the request offers."""
    choice = config.tool_choice
    if choice is not None and choice.mode == "tool":
        if choice.name not in {tool.name for tool in tools}:
            offered = ", ".join(tool.name for tool in tools) or "none"
            raise invalid_request(
                provider,
                f"tool_choice forces tool {choice.name!r}, which the request does "
                f"not offer (tools: {offered})",
            )
    elif choice is not None and choice.mode == "required" and not tools:
        raise invalid_request(provider, "tool_choice 'required' but the request has no tools")


def error_fields(payload: object, fallback: str = "") -> tuple[str, str | None, str | None]:
    """(message, error type, error code) of a parsed `{"error": {...}}` provider payload."""
    error = payload.get("error") if isinstance(payload, dict) else None
    if not isinstance(error, dict):
        return fallback[:_DETAIL_LIMIT], None, None
    message = error.get("message")
    kind = error.get("type")
    code = error.get("code")
    return (
        str(message)[:_DETAIL_LIMIT] if message is not None else fallback[:_DETAIL_LIMIT],
        kind if isinstance(kind, str) else None,
        code if isinstance(code, str) else None,
    )


def error_detail(body: bytes) -> tuple[str, str | None, str | None]:
    """`error_fields` of a raw error body; a body that is not JSON is its own message."""
    text = body.decode("utf-8", "replace").strip()
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        return text[:_DETAIL_LIMIT], None, None
    return error_fields(payload, text)


async def _close_quietly(response: httpx.Response, chunks: AsyncIterator[bytes] | None) -> None:
    # Shielded so a cancelled call still releases its connection, but bounded in time.
    with trio.CancelScope(shield=True), trio.move_on_after(_CLOSE_GRACE):
        aclose = getattr(chunks, "aclose", None)
        try:
            if aclose is not None:
                await aclose()
            await response.aclose()
        except httpx.HTTPError:
            log.debug("ignored an error while closing a model response")


class HttpSseProvider(ABC):
    """Base of the SSE adapters. Subclasses build bodies and map events to chunks."""

    name: str
    default_base_url: ClassVar[str]
    default_name: ClassVar[str]
    default_key_env: ClassVar[str]

    def __init__(self, settings: HttpSettings) -> None:
        self.settings = settings
        self.name = settings.name or self.default_name
        self.base_url = (settings.base_url or self.default_base_url).rstrip("/")
        self.key_env = settings.key_env or self.default_key_env
        self._key = settings.api_key
        self.retry = settings.retry_policy
        self._http: httpx.AsyncClient | None = None
        self._http_run: trio.lowlevel.TrioToken | None = None
        self._opening: tuple[trio.lowlevel.TrioToken, trio.Lock] | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, base_url={self.base_url!r})"

    def model_info(self, model: str) -> ModelInfo | None:
        window = self.settings.context_windows.get(model)
        return ModelInfo(window) if window is not None else None

    def _api_key(self) -> ApiKey:
        if self._key is None:
            # Resolved per call so a key exported after construction is still picked up.
            value = os.environ.get(self.key_env)
            if not value:
                raise ProviderError(
                    f"{self.name}: no API key: pass api_key= or set {self.key_env}",
                    ErrorCode.AUTHENTICATION,
                )
            self._key = ApiKey(value, self.key_env)
        return self._key

    def redact(self, text: str) -> str:
        return self._key.redact(text) if self._key is not None else text

    async def open(self) -> None:
        """Create this run's HTTP client, off the event loop: building one loads an SSL
        context and its certificates, which blocks for 100 ms or more. `Runtime.open` calls
        this for every provider; a first request does it otherwise. Idempotent."""
        await self._client()

    async def _client(self) -> httpx.AsyncClient:
        # A pooled connection belongs to one trio run; a provider reused by a later run
        # (tests, scripts) gets a fresh client instead of a dead pool.
        token = trio.lowlevel.current_trio_token()
        if self._http is not None and self._http_run is token:
            return self._http
        if self._opening is None or self._opening[0] is not token:
            self._opening = (token, trio.Lock())
        async with self._opening[1]:
            if self._http is None or self._http_run is not token:
                timeout, transport = self.settings.timeout, self.settings.transport
                self._http = await trio.to_thread.run_sync(
                    lambda: httpx.AsyncClient(timeout=timeout, transport=transport)
                )
                self._http_run = token
        return self._http

    async def aclose(self) -> None:
        """Close pooled connections of the current run (a no-op when none are open)."""
        if self._http is not None and self._http_run is trio.lowlevel.current_trio_token():
            await self._http.aclose()
        self._http = None
        self._http_run = None

    @abstractmethod
    def build_body(self, request: Request) -> dict[str, Any]:
        """The wire body of `request` (JSON-ready; its canonical bytes are what is sent)."""

    def body_bytes(self, request: Request) -> bytes:
        """Canonical bytes: identical requests (and identical prefixes) give identical bytes."""
        return canonical_json(self.build_body(request))

    @abstractmethod
    def _status_error(self, status: int, body: bytes, headers: httpx.Headers) -> ProviderError:
        """The typed error for a non-2xx answer (each wire format words errors its own way)."""

    def _fail(self, message: str, code: str, exc: BaseException | None = None) -> NoReturn:
        raise ProviderError(self.redact(message), code) from exc

    async def _open(self, url: str, headers: dict[str, str], body: bytes) -> OpenedStream:
        client = await self._client()
        request = client.build_request("POST", url, headers=headers, content=body)
        try:
            response = await client.send(request, stream=True)
        except httpx.TimeoutException as exc:
            message = self.redact(
                f"{self.name}: timed out before a response ({type(exc).__name__})"
            )
            raise TransientProviderError(message, ErrorCode.TIMEOUT) from exc
        except httpx.TransportError as exc:
            message = self.redact(f"{self.name}: connection failed before a response: {exc}")
            raise TransientProviderError(message, ErrorCode.CONNECTION_ERROR) from exc
        chunks: AsyncIterator[bytes] | None = None
        try:
            if not 200 <= response.status_code < 300:
                try:
                    detail = await response.aread()
                except httpx.HTTPError:
                    detail = b""
                raise self._status_error(response.status_code, detail, response.headers)
            if response.headers.get("content-type", "").startswith("application/json"):
                # Some compatible servers ignore `stream: true` or answer errors with 200.
                message, _kind, _code = error_detail(await response.aread())
                raise ProviderError(
                    self.redact(f"{self.name}: expected an event stream, got JSON: {message}"),
                    ErrorCode.PROTOCOL_ERROR,
                )
            chunks = response.aiter_bytes()
            try:
                first = await anext(chunks)
            except StopAsyncIteration:
                message = f"{self.name}: the response ended before its first byte"
                raise TransientProviderError(message, ErrorCode.CONNECTION_ERROR) from None
            except httpx.TimeoutException as exc:
                message = self.redact(f"{self.name}: timed out before the first byte")
                raise TransientProviderError(message, ErrorCode.TIMEOUT) from exc
            except httpx.TransportError as exc:
                message = self.redact(f"{self.name}: disconnected before the first byte: {exc}")
                raise TransientProviderError(message, ErrorCode.CONNECTION_ERROR) from exc
        except BaseException:
            await _close_quietly(response, chunks)
            raise
        return OpenedStream(response, chunks, first)

    async def _post_events(
        self, url: str, headers: dict[str, str], body: bytes
    ) -> AsyncGenerator[SseEvent, None]:
        """Events of one streamed POST; transport retries end at the first byte."""
        log.debug("%s: POST %s (%d bytes)", self.name, url, len(body))
        opened = await self.retry.call(self._open, url, headers, body)
        decoder = SseDecoder()
        try:
            for event in decoder.feed(opened.first):
                yield event
            async for data in opened.chunks:
                for event in decoder.feed(data):
                    yield event
        except httpx.HTTPError as exc:
            self._fail(
                f"{self.name}: stream interrupted after the first byte "
                f"({type(exc).__name__}: {exc})",
                ErrorCode.STREAM_INTERRUPTED,
                exc,
            )
        finally:
            await _close_quietly(opened.response, opened.chunks)

    def _decode(self, event: SseEvent) -> dict[str, Any]:
        try:
            payload = orjson.loads(event.data)
        except orjson.JSONDecodeError as exc:
            self._fail(
                f"{self.name}: undecodable stream event {event.event!r}",
                ErrorCode.PROTOCOL_ERROR,
                exc,
            )
        if not isinstance(payload, dict):
            self._fail(
                f"{self.name}: stream event {event.event!r} is not an object",
                ErrorCode.PROTOCOL_ERROR,
            )
        return payload
