"""One MCP server's connection in one runtime: a long-lived task enters the SDK's transport
and `ClientSession` and serves the calls sent to it over a memory channel, so the SDK's
contexts are entered and left in that one task (never across tasks)."""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from types import TracebackType
from typing import Any, cast

import anyio
import httpx2
import orjson
import trio
from attrs import field, frozen
from mcp import ClientSession, types
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._stream_protocols import ReadStream
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

from ..errors import McpConnectionFailed, McpToolError
from ..model.messages import Text
from .specs import McpHttp, McpServer

log = logging.getLogger("actorloop.runtime.mcp")

_LIST_CHANGED = "notifications/tools/list_changed"
EFFECT_KEY_META = "actorloop/effect-key"
"""The `_meta` key of a `tools/call` that carries the call's effect key (docs/mcp.md)."""

# The SDK's own defaults for MCP over HTTP: a server may hold a response stream open.
_HTTP_TIMEOUT = httpx2.Timeout(30.0, read=300.0)


@frozen
class ListedTool:
    """One tool as the server listed it: its name, description and input schema (a plain
    dict in the server's key order)."""

    name: str
    description: str
    parameters: dict[str, Any] = field(eq=False)
    listing: bytes = field(repr=False)
    """The three fields serialized in order: listings compare by it, key order included."""


@frozen
class CallResult:
    """A tool call's answer: its content as text blocks, and whether it is an error."""

    content: tuple[Text, ...]
    is_error: bool


class _Call:
    """One request to the connection task and the slot its answer comes back in."""

    def __init__(self, run: Callable[[ClientSession], Awaitable[Any]]) -> None:
        self.run = run
        self.done = trio.Event()
        self.scope = trio.CancelScope()
        self.answered = False
        self.value: Any = None
        self.error: BaseException | None = None


class _Link:
    """One opened connection: one server process, or one HTTP session."""

    def __init__(self) -> None:
        self.calls, self.inbox = trio.open_memory_channel[_Call](math.inf)
        self.ready = trio.Event()
        self.failure: BaseException | None = None
        self.closed = False
        self.stop = trio.CancelScope()
        self.relisting = 0
        """Tool lists asked for by a list change and not fetched yet."""
        self.relisted = trio.Event()

    def close(self) -> None:
        """Take no more calls; the connection task leaves the SDK's contexts."""
        self.closed = True
        self.stop.cancel()


class McpConnection:
    """The connection to one named server: opened on first use by a task in the runtime's
    nursery, re-opened on the next use after the server went away, closed with the runtime.

    `calls` and `tools` may be awaited from any task; a caller that is cancelled returns at
    once and the SDK sends `notifications/cancelled` for its request.
    """

    def __init__(self, name: str, server: McpServer, nursery: trio.Nursery) -> None:
        self.name = name
        self.server = server
        self._nursery = nursery
        self._link: _Link | None = None
        self.opened = 0
        """How many connections were opened (server starts, for stdio)."""
        self.listing_version = 0
        """Bumped each time the server's tool list changes (a list change, a re-open that
        lists other tools)."""
        self._listing: tuple[ListedTool, ...] = ()

    @property
    def listing(self) -> tuple[ListedTool, ...]:
        """The tools last listed (empty before the first open)."""
        return self._listing

    async def tools(self) -> tuple[ListedTool, ...]:
        """The server's tools (opening the connection if it is not open)."""
        await self._live()
        return self._listing

    async def call(
        self, tool: str, arguments: dict[str, Any], effect_key: str | None = None
    ) -> CallResult:
        """Call the server's tool `tool`; its content mapped to text blocks (docs/mcp.md).
        An `effect_key` travels in the request's `_meta` as `EFFECT_KEY_META`, for a
        server to deduplicate a re-run call (docs/effects.md)."""
        # The meta is an open map: a key of our own rides beside the reserved ones.
        meta = (
            None if not effect_key else cast(types.RequestParamsMeta, {EFFECT_KEY_META: effect_key})
        )
        result = await self._request(lambda session: session.call_tool(tool, arguments, meta=meta))
        return CallResult(result_content(result), bool(result.is_error))

    async def _live(self) -> _Link:
        link = self._link
        if link is None or link.closed:
            link = _Link()
            self._link = link
            self.opened += 1
            self._nursery.start_soon(self._run, link)
        await link.ready.wait()
        if link.failure is not None:
            raise McpConnectionFailed(
                f"MCP server {self.name!r} could not be connected: "
                f"{type(link.failure).__name__}: {link.failure}"
            ) from link.failure
        return link

    async def _request(self, run: Callable[[ClientSession], Awaitable[Any]]) -> Any:
        link = await self._live()
        call = _Call(run)
        try:
            link.calls.send_nowait(call)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            raise McpConnectionFailed(f"MCP server {self.name!r}: connection closed") from None
        try:
            await call.done.wait()
        finally:
            # A cancelled caller leaves now; the SDK sends the server the cancellation.
            call.scope.cancel()
        if call.error is not None:
            raise call.error
        return call.value

    async def _run(self, link: _Link) -> None:
        """The connection task: enter the transport and the session, list the tools, then
        serve calls until the link is closed or the runtime ends."""
        try:
            async with (
                _transport(self.server) as (read, write),
                ClientSession(self._watch(link, read), write) as session,
            ):
                with link.stop:
                    await session.initialize()
                    self._listed(await _list_tools(session))
                    link.ready.set()
                    async with trio.open_nursery() as workers:
                        async for call in link.inbox:
                            workers.start_soon(self._work, session, call, link)
        except BaseException as exc:
            cancelled, rest = _split_cancelled(exc)
            if rest is not None:
                if not isinstance(rest, Exception):
                    raise
                # The SDK's groups stop here: the callers see one typed error.
                link.failure = link.failure or rest
                log.warning("MCP server %r connection ended: %r", self.name, rest)
            if cancelled is not None:
                raise cancelled from None
        finally:
            link.closed = True
            link.relisted.set()
            link.inbox.close()
            _fail_queued(link, self.name)
            if not link.ready.is_set():
                link.failure = link.failure or McpConnectionFailed("the connection closed")
                link.ready.set()

    async def _work(self, session: ClientSession, call: _Call, link: _Link) -> None:
        try:
            with call.scope:
                call.value = await call.run(session)
                call.answered = True
        except MCPError as exc:
            if exc.code == types.CONNECTION_CLOSED:
                link.close()
                call.error = _closed_before_answer(self.name)
            else:
                call.error = McpToolError(f"MCP server {self.name!r}: {exc.error.message}")
        except Exception as exc:
            call.error = exc
        finally:
            if not call.answered and call.error is None:
                call.error = _closed_before_answer(self.name)
            call.done.set()

    def _listed(self, tools: tuple[ListedTool, ...]) -> None:
        if [tool.listing for tool in tools] != [tool.listing for tool in self._listing]:
            self._listing = tools
            self.listing_version += 1

    def _watch(self, link: _Link, read: ReadStream[SessionMessage | Exception]) -> _Watched:
        def on_list_changed() -> None:
            if not link.closed:
                # Marked here, in receive order, before the answer the server sent after
                # the notification reaches its caller; listed by a call of its own (this
                # runs in the SDK's read loop, which a request awaited here would wait on).
                link.relisting += 1
                link.calls.send_nowait(_Call(partial(self._relist, link)))

        return _Watched(read, on_list_changed, link.close)

    async def settled(self) -> None:
        """Wait until the tool lists that a list change asked for are fetched."""
        link = self._link
        while link is not None and link.relisting and not link.closed:
            await link.relisted.wait()

    async def _relist(self, link: _Link, session: ClientSession) -> None:
        try:
            self._listed(await _list_tools(session))
        except Exception:
            log.exception("MCP server %r: listing the tools after a list change failed", self.name)
        finally:
            link.relisting -= 1
            if not link.relisting:
                link.relisted.set()
                link.relisted = trio.Event()


class _Watched:
    """The transport's read stream, watched in receive order: a tool list change is
    marked before what follows it is read, and the stream's end (the server went away)
    closes the link at once, so the next use re-opens instead of failing."""

    def __init__(
        self,
        inner: ReadStream[SessionMessage | Exception],
        on_list_changed: Callable[[], None],
        on_end: Callable[[], None],
    ) -> None:
        self._inner = inner
        self._on_list_changed = on_list_changed
        self._on_end = on_end

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    def _seen(self, item: SessionMessage | Exception) -> SessionMessage | Exception:
        if isinstance(item, SessionMessage):
            message = item.message
            if isinstance(message, types.JSONRPCNotification) and message.method == _LIST_CHANGED:
                self._on_list_changed()
        return item

    async def receive(self) -> SessionMessage | Exception:
        try:
            return self._seen(await self._inner.receive())
        except (trio.EndOfChannel, trio.ClosedResourceError, anyio.EndOfStream):
            self._on_end()
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _Watched:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return self._seen(await self._inner.__anext__())
        except StopAsyncIteration:
            self._on_end()
            raise

    async def __aenter__(self) -> _Watched:
        await self._inner.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        return await self._inner.__aexit__(exc_type, exc_val, exc_tb)


def _closed_before_answer(name: str) -> McpConnectionFailed:
    return McpConnectionFailed(f"MCP server {name!r} closed the connection before it answered")


def _fail_queued(link: _Link, name: str) -> None:
    while True:
        try:
            call = link.inbox.receive_nowait()
        except (trio.WouldBlock, trio.ClosedResourceError, trio.EndOfChannel):
            return
        call.error = McpConnectionFailed(f"MCP server {name!r}: the connection closed")
        call.done.set()


def _split_cancelled(exc: BaseException) -> tuple[BaseException | None, BaseException | None]:
    if isinstance(exc, trio.Cancelled):
        return exc, None
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(trio.Cancelled)
    return None, exc


@asynccontextmanager
async def _transport(server: McpServer) -> AsyncIterator[tuple[Any, Any]]:
    if isinstance(server, McpHttp):
        async with (
            httpx2.AsyncClient(headers=dict(server.headers), timeout=_HTTP_TIMEOUT) as client,
            streamable_http_client(server.url, http_client=client) as streams,
        ):
            yield streams
        return
    program, *args = server.argv
    parameters = StdioServerParameters(
        command=program,
        args=args,
        env=None if server.env is None else dict(server.env),
        cwd=server.cwd,
    )
    async with stdio_client(parameters, errlog=sys.stderr) as streams:
        yield streams


async def _list_tools(session: ClientSession) -> tuple[ListedTool, ...]:
    listed: list[ListedTool] = []
    cursor: str | None = None
    while True:
        params = None if cursor is None else types.PaginatedRequestParams(cursor=cursor)
        page = await session.list_tools(params=params)
        for tool in page.tools:
            description = tool.description or tool.title or ""
            schema = dict(tool.input_schema)
            listing = orjson.dumps([tool.name, description, schema])
            listed.append(ListedTool(tool.name, description, schema, listing))
        cursor = page.next_cursor
        if not cursor:
            return tuple(listed)


def result_content(result: types.CallToolResult) -> tuple[Text, ...]:
    """A tool result's content as text blocks: text as is, embedded text resources by their
    text, other kinds as a one-line placeholder; structured content as JSON text when the
    result has no other content (docs/mcp.md, "Results")."""
    blocks = [Text(_text_of(item)) for item in result.content]
    if not blocks and result.structured_content is not None:
        blocks.append(Text(orjson.dumps(result.structured_content).decode()))
    return tuple(blocks)


def _text_of(item: Any) -> str:
    if isinstance(item, types.TextContent):
        return item.text
    if isinstance(item, (types.ImageContent, types.AudioContent)):
        return f"[{item.type} {item.mime_type}, {len(item.data)} base64 characters, not shown]"
    if isinstance(item, types.ResourceLink):
        return f"[resource link {item.uri}: {item.name}]"
    if isinstance(item, types.EmbeddedResource):
        resource = item.resource
        if isinstance(resource, types.TextResourceContents):
            return resource.text
        return f"[resource {resource.uri} ({resource.mime_type or 'binary'}), not shown]"
    return f"[{getattr(item, 'type', type(item).__name__)} content, not shown]"
