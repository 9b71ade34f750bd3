"""The service's edge: one ASGI middleware in front of the routes that does, in order, what
six did — HTTP/2 policy, `nosniff`, loopback Host names, cross-site refusals, the drain
gate, the bearer token, the body limit (decision 0021)."""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from ..errors import ErrorCode
from .auth import BearerAuth
from .body_limit import BodyLimit
from .drain import Drain
from .errors import error_response
from .guards import HostCheck, cross_site_refusal, nosniff
from .http2 import Http2Policy


def drain_refusal(drain: Drain, path: str) -> Response | None:
    """Once the drain began, a new request gets 503 SERVER_DRAINING (health checks get
    their own 503); requests already running go on."""
    if not drain.draining or path == "/healthz":
        return None
    return error_response(
        503,
        ErrorCode.SERVER_DRAINING,
        "the server is shutting down; it takes no new requests",
        headers={"Connection": "close"},
    )


class Edge:
    """ASGI middleware over `app` (the routes). Every HTTP request passes, in this order:
    the HTTP/2 policy (`http2`: refused with 505 unless on; the refusal carries no
    `nosniff`), then with `nosniff` on every answer: the Host check (`hosts`, only
    without a token), cross-site refusals, the drain gate, the bearer token (`auth`, only
    with one) and the body limit. The first that refuses answers; otherwise `app` runs
    with the body under its limit. One frame in every resume of a request's task where
    six middlewares were six, and the headers parsed once."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        drain: Drain,
        body: BodyLimit,
        http2: Http2Policy,
        hosts: HostCheck | None = None,
        auth: BearerAuth | None = None,
    ) -> None:
        self.app = app
        self.drain = drain
        self.body = body
        self.http2 = http2
        self.hosts = hosts
        self.auth = auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope.get("http_version") == "2":
            admitted = await self.http2.admit(scope, receive, send)
            if admitted is None:
                return
            receive, send = admitted
        send = nosniff(send)
        refusal = self.refusal(scope, Headers(scope=scope))
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, self.body.limited(receive), send)

    def refusal(self, scope: Scope, headers: Headers) -> Response | None:
        """The answer of the first check that refuses the request, or None."""
        path: str = scope["path"]
        refusal = self.hosts.refusal(headers) if self.hosts is not None else None
        if refusal is None:
            refusal = cross_site_refusal(scope, headers)
        if refusal is None:
            refusal = drain_refusal(self.drain, path)
        if refusal is None and self.auth is not None:
            refusal = self.auth.refusal(path, headers)
        if refusal is None:
            refusal = self.body.refusal(headers)
        return refusal
