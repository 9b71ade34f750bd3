"""The ASGI app: `create_app(service)` maps HTTP onto a `SessionService` — routes, bodies and
query parameters, JSON and Server-Sent Events out, errors as `{"error": {"code", "message"}}`
— with the bearer-token guard, the body limit and the drain gate in front."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import orjson
import trio
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import ErrorCode, sole_error
from .auth import BearerAuth
from .endpoints import ENDPOINTS
from .errors import InvalidRequestBody, error_response, response_for
from .guards import CrossSiteGuard, HostCheck, NoSniff
from .handlers import NO_ANSWER, Handler, Handlers
from .http2 import Http2Policy
from .inspector.routes import inspector_routes
from .openapi import openapi_document
from .service import SessionService

log = logging.getLogger("actorloop.http")

DEFAULT_MAX_BODY_BYTES = 1024 * 1024
DEFAULT_BODY_TIMEOUT_S = 30.0
DEFAULT_MAX_MESSAGE_CHARS = 256 * 1024
MAX_SEQ = 9_007_199_254_740_991

_HTTP_CODES = {
    404: ErrorCode.NOT_FOUND,
    405: ErrorCode.METHOD_NOT_ALLOWED,
    413: ErrorCode.BODY_TOO_LARGE,
}


async def _http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = _HTTP_CODES.get(exc.status_code, ErrorCode.VALIDATION_FAILED)
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["Allow"] = ", ".join(allowed_methods(request.app.routes, request.scope))
    return error_response(exc.status_code, code, str(exc.detail), headers)


def allowed_methods(routes: Sequence[BaseRoute], scope: Scope) -> list[str]:
    """Every method some route of `routes` takes at the request's path (Starlette's own
    405 names only the first route's)."""
    methods: set[str] = set()
    for route in routes:
        match, _ = route.matches({**scope, "method": "\0"})
        if match is Match.PARTIAL and isinstance(route, Route) and route.methods:
            methods |= route.methods
    return sorted(methods)


def scope_query(request: Request) -> bytes:
    """The request's raw query string (b"" for none)."""
    query: bytes = request.scope.get("query_string", b"")
    return query


def _endpoint(handler: Handler, query: frozenset[str] = frozenset()) -> Handler:
    """Typed errors become their error response; anything else a logged 500. A query
    parameter the route does not take is refused (422), not ignored."""

    async def run(request: Request) -> Response:
        try:
            # Most requests carry no query string: not parsing one saves Starlette's parse.
            unknown = sorted(set(request.query_params) - query) if scope_query(request) else ()
            if unknown:
                raise InvalidRequestBody(
                    f"unknown query parameters {unknown[:5]!r:.200}; this route takes "
                    f"{sorted(query) or 'none'}"
                )
            return await handler(request)
        except HTTPException as exc:
            return await _http_exception(request, exc)
        except ClientDisconnect:
            # The client's event, not the server's: nobody reads an answer.
            log.info(
                "%s %s: the client went away before sending its body",
                request.method,
                request.url.path,
            )
            return NO_ANSWER
        except Exception as exc:
            return response_for(sole_error(exc))

    run.__name__ = handler.__name__
    run.__doc__ = handler.__doc__
    return run


def _ready_message(receive: Receive) -> Callable[[], Message | None]:
    """What takes a message `receive` already holds without waiting (None when there is
    none): Hypercorn's `receive` is a trio memory channel's, into which a body that came
    with its request is put before the app runs, so reading it needs no cancel scope for
    the body timeout and no scheduling point (each a resume of the whole ASGI await chain).
    Any other `receive` always waits."""
    channel = getattr(receive, "__self__", None)
    if not isinstance(channel, trio.MemoryReceiveChannel):
        return lambda: None

    def ready() -> Message | None:
        try:
            message: Message = channel.receive_nowait()
        except trio.WouldBlock:
            return None
        return message

    return ready


class _BodyLimit:
    """Bodies above `limit` bytes get 413 BODY_TOO_LARGE: at once when Content-Length says
    so, else as soon as the received bytes pass it (the handler's read raises); a body that
    has not arrived whole `seconds` after the request began gets 408 BODY_READ_TIMEOUT."""

    def __init__(self, app: ASGIApp, limit: int, seconds: float) -> None:
        self.app = app
        self.limit = limit
        self.seconds = seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._too_large()(scope, receive, send)
            return
        seen = 0
        ended = False
        deadline = trio.current_time() + self.seconds
        ready = _ready_message(receive)

        async def limited() -> Message:
            nonlocal seen, ended
            if ended:  # past the body only the disconnect is left: no deadline
                return await receive()
            message = ready()
            if message is None:
                with trio.move_on_at(deadline):
                    message = await receive()
                if message is None:
                    raise InvalidRequestBody(
                        f"the request body did not arrive within {self.seconds:g} s",
                        ErrorCode.BODY_READ_TIMEOUT,
                    )
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise InvalidRequestBody(self._message(), ErrorCode.BODY_TOO_LARGE)
                ended = not message.get("more_body", False)
            return message

        await self.app(scope, limited, send)

    def _message(self) -> str:
        return f"the request body is larger than {self.limit} bytes"

    def _too_large(self) -> Response:
        return error_response(413, ErrorCode.BODY_TOO_LARGE, self._message())


class _DrainGate:
    """Once the drain began, a new request gets 503 SERVER_DRAINING (health checks get
    their own 503); requests already running go on."""

    def __init__(self, app: ASGIApp, service: SessionService) -> None:
        self.app = app
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.service.drain.draining and scope["path"] != "/healthz":
            response = error_response(
                503,
                ErrorCode.SERVER_DRAINING,
                "the server is shutting down; it takes no new requests",
                headers={"Connection": "close"},
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def create_app(
    service: SessionService,
    *,
    token: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ping_seconds: float = 15,
    routes: Sequence[BaseRoute] = (),
    gate: Callable[[ASGIApp], ASGIApp] | None = None,
    http2: bool = False,
    body_timeout_seconds: float = DEFAULT_BODY_TIMEOUT_S,
    allowed_hosts: tuple[str, ...] = (),
    max_message_chars: int = DEFAULT_MAX_MESSAGE_CHARS,
) -> ASGIApp:
    """The ASGI app over `service`: `/healthz`, `/openapi.json` and the `/v1` routes
    (bearer-token protected when `token` is set; bodies above `max_body_bytes` get 413),
    then `routes` (what another edge adds), then — without a token — the session inspector
    at `/`. `gate` wraps the routes inside the token and body checks (routing between
    instances)."""
    handlers = Handlers(
        service,
        openapi=orjson.dumps(openapi_document(auth=token is not None)),
        max_message_chars=max_message_chars,
        ping_seconds=ping_seconds,
    )
    own: list[BaseRoute] = [
        Route(
            endpoint.path,
            _endpoint(getattr(handlers, endpoint.handler), frozenset(endpoint.query)),
            methods=[endpoint.method],
        )
        for endpoint in ENDPOINTS
    ]
    if token is None:
        # The inspector's pages show session content and a browser cannot present the bearer
        # token: served only without one, i.e. on a loopback address (docs/inspector.md).
        routes = [*routes, *inspector_routes(service)]
    inner: ASGIApp = Starlette(
        routes=[*own, *routes], exception_handlers={HTTPException: _http_exception}
    )
    if gate is not None:
        inner = gate(inner)
    app: ASGIApp = _BodyLimit(inner, max_body_bytes, body_timeout_seconds)
    if token is not None:
        app = BearerAuth(app, token)
    app = CrossSiteGuard(_DrainGate(app, service))
    if token is None:
        app = HostCheck(app, allowed_hosts)
    return Http2Policy(NoSniff(app), enabled=http2, drain_timeout=body_timeout_seconds)
