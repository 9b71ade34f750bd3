"""The ASGI app: `create_app(service)` maps HTTP onto a `SessionService` — routes, bodies and
query parameters, JSON and Server-Sent Events out, errors as `{"error": {"code", "message"}}`
— with the bearer-token guard, the body limit and the drain gate in front."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Route
from starlette.types import ASGIApp, Scope

from ..errors import ErrorCode, sole_error
from .auth import BearerAuth
from .body_limit import BodyLimit
from .edge import Edge
from .endpoints import ENDPOINTS
from .errors import InvalidRequestBody, error_response, response_for
from .guards import HostCheck
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
    own = [
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
    starlette = Starlette(
        routes=[*own, *routes], exception_handlers={HTTPException: _http_exception}
    )
    inner: ASGIApp = starlette
    if gate is not None:
        inner = gate(inner)
    return Edge(
        inner,
        drain=service.drain,
        body=BodyLimit(max_body_bytes, body_timeout_seconds),
        http2=Http2Policy(enabled=http2, drain_timeout=body_timeout_seconds),
        hosts=HostCheck(allowed_hosts) if token is None else None,
        auth=BearerAuth(token) if token is not None else None,
    )
