"""The inspector's routes: server-rendered pages (sessions, one session's timeline, its fork
tree, its cache health, one rebuilt request), the fragment the live view refreshes, and the
packaged assets — mounted at `/` by `create_app` (docs/inspector.md).

Every page is complete HTML that works without JavaScript; `inspector.js` only adds the live
updates (the session's SSE stream from `/v1`). Responses carry a Content-Security-Policy
that allows nothing but this server's own scripts, styles and connections."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Any

import trio
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute, Route

from ...cli.render import now_ms
from ...errors import ErrorCode
from ...stores.ids import check_session_id
from ..errors import HttpError, InvalidRequestBody, http_error
from ..service import SessionService
from . import views
from .templating import (
    Asset,
    compiled_templates,
    packaged_assets,
)

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
MAX_SEQ = 9_007_199_254_740_991

Page = Callable[[Request], Awaitable[Response]]


def inspector_routes(service: SessionService) -> list[BaseRoute]:
    """The inspector's routes over `service` (templates compiled and assets read now)."""
    templates = compiled_templates()
    assets = packaged_assets()
    versions = {name: asset.etag.strip('"') for name, asset in assets.items()}

    async def html(
        name: str, status: int = 200, section: str | None = None, **context: Any
    ) -> Response:
        # Rendering a long session is CPU work: off the trio thread, so live agents go on
        # (the context is frozen data and immutable event tuples; templates are thread-safe).
        render = partial(
            templates[name].render, now=now_ms(), assets=versions, section=section, **context
        )
        return HTMLResponse(await trio.to_thread.run_sync(render), status, headers=SECURITY_HEADERS)

    def page(handler: Callable[[Request], Awaitable[Response]]) -> Page:
        async def run(request: Request) -> Response:
            try:
                if request.query_params:
                    given = sorted(request.query_params)[:5]
                    raise InvalidRequestBody(f"this page takes no query parameters, got {given}")
                session_id = request.path_params.get("id")
                if session_id is not None:
                    check_session_id(session_id)
                return await handler(request)
            except Exception as exc:
                error = http_error(exc)
                return await html("error.html", error.status, error=error)

        run.__name__ = handler.__name__
        return run

    async def index(_request: Request) -> Response:
        """The sessions list."""
        return await html("index.html", section="sessions", rows=await views.session_rows(service))

    async def session(request: Request) -> Response:
        """One session's summary and timeline."""
        return await html(
            "session.html", page=await views.session_page(service, request.path_params["id"])
        )

    async def live(request: Request) -> Response:
        """The part of the session page the live view replaces as events arrive."""
        return await html(
            "live.html", page=await views.session_page(service, request.path_params["id"])
        )

    async def tree(request: Request) -> Response:
        """The session's fork tree."""
        return await html(
            "tree.html", view=await views.tree_page(service, request.path_params["id"])
        )

    async def cache(request: Request) -> Response:
        """The session's prompt-cache health."""
        return await html(
            "cache.html", view=await views.cache_page(service, request.path_params["id"])
        )

    async def rebuilt(request: Request) -> Response:
        """The exact request behind one model answer."""
        seq = _seq(request.path_params["seq"])
        view = await views.request_page(service, request.path_params["id"], seq)
        return await html("request.html", view=view)

    async def asset(request: Request) -> Response:
        """A packaged CSS or JS file."""
        found = assets.get(request.path_params["name"])
        if found is None:
            return await html("error.html", 404, error=_not_found(request.path_params["name"]))
        return _asset_response(found, request.headers)

    return [
        Route("/", page(index), methods=["GET"]),
        Route("/sessions/{id}", page(session), methods=["GET"]),
        Route("/sessions/{id}/live", page(live), methods=["GET"]),
        Route("/sessions/{id}/tree", page(tree), methods=["GET"]),
        Route("/sessions/{id}/cache", page(cache), methods=["GET"]),
        Route("/sessions/{id}/requests/{seq}", page(rebuilt), methods=["GET"]),
        Route("/assets/{name}", asset, methods=["GET"]),
    ]


def _seq(raw: str) -> int:
    try:
        value = int(raw, 10)
    except ValueError:
        raise InvalidRequestBody(f"seq must be an integer, got {raw[:40]!r}") from None
    if not 0 <= value <= MAX_SEQ:
        raise InvalidRequestBody(f"seq must be in 0..{MAX_SEQ}, got {value}")
    return value


def _not_found(name: str) -> HttpError:
    return HttpError(404, ErrorCode.NOT_FOUND, f"no asset named {name[:80]!r}")


def _asset_response(asset: Asset, headers: Mapping[str, str]) -> Response:
    common = {
        "ETag": asset.etag,
        "Cache-Control": "no-cache",
        "X-Content-Type-Options": "nosniff",
    }
    if headers.get("if-none-match") == asset.etag:
        return Response(status_code=304, headers=common)
    return Response(asset.body, media_type=asset.media_type, headers=common)
