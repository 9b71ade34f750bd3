"""The inspector's routes: server-rendered pages (sessions, one session's timeline, its fork
tree, its cache health, one rebuilt request), the fragment the live view refreshes, and the
packaged assets — mounted at `/` by `create_app` (docs/inspector.md).

Every page is complete HTML that works without JavaScript; `inspector.js` only adds the live
updates (the session's SSE stream from `/v1`). Responses carry a Content-Security-Policy
that allows nothing but this server's own scripts, styles, connections and forms (the
sessions list's search form submits to `/`)."""

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
from .listing import parse_query
from .templating import (
    Asset,
    compiled_templates,
    packaged_assets,
)

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
MAX_SEQ = 9_007_199_254_740_991

Page = Callable[[Request], Awaitable[Response]]


class _Pages:
    """The inspector's page handlers over one service, with the compiled templates and
    the asset versions the pages link to."""

    def __init__(self, service: SessionService) -> None:
        self.service = service
        self.templates = compiled_templates()
        self.assets = packaged_assets()
        self.versions = {name: asset.etag.strip('"') for name, asset in self.assets.items()}

    async def html(
        self, name: str, status: int = 200, section: str | None = None, **context: Any
    ) -> Response:
        """The template `name` rendered with `context`, with the security headers."""
        # Rendering a long session is CPU work: off the trio thread, so live agents go on
        # (the context is frozen data and immutable event tuples; templates are thread-safe).
        render = partial(
            self.templates[name].render,
            now=now_ms(),
            assets=self.versions,
            section=section,
            **context,
        )
        return HTMLResponse(await trio.to_thread.run_sync(render), status, headers=SECURITY_HEADERS)

    def page(self, handler: Page, *, takes_query: bool = False) -> Page:
        """`handler` with its session id checked, any query parameter refused unless it
        `takes_query`, and every error answered as an error page."""

        async def run(request: Request) -> Response:
            try:
                if request.query_params and not takes_query:
                    given = sorted(request.query_params)[:5]
                    raise InvalidRequestBody(f"this page takes no query parameters, got {given}")
                session_id = request.path_params.get("id")
                if session_id is not None:
                    check_session_id(session_id)
                return await handler(request)
            except Exception as exc:
                error = http_error(exc)
                return await self.html("error.html", error.status, error=error)

        run.__name__ = handler.__name__
        return run

    async def index(self, request: Request) -> Response:
        """The sessions list: one page of it, searched, filtered and sorted."""
        query = parse_query(request.query_params)
        listing = await views.session_listing(self.service, query)
        return await self.html("index.html", section="sessions", listing=listing)

    async def session(self, request: Request) -> Response:
        """One session's summary and timeline."""
        page = await views.session_page(self.service, request.path_params["id"])
        return await self.html("session.html", page=page)

    async def live(self, request: Request) -> Response:
        """The part of the session page the live view replaces as events arrive."""
        page = await views.session_page(self.service, request.path_params["id"])
        return await self.html("live.html", page=page)

    async def tree(self, request: Request) -> Response:
        """The session's fork tree."""
        view = await views.tree_page(self.service, request.path_params["id"])
        return await self.html("tree.html", view=view)

    async def cache(self, request: Request) -> Response:
        """The session's prompt-cache health."""
        view = await views.cache_page(self.service, request.path_params["id"])
        return await self.html("cache.html", view=view)

    async def rebuilt(self, request: Request) -> Response:
        """The exact request behind one model answer."""
        seq = _seq(request.path_params["seq"])
        view = await views.request_page(self.service, request.path_params["id"], seq)
        return await self.html("request.html", view=view)

    async def asset(self, request: Request) -> Response:
        """A packaged CSS or JS file."""
        found = self.assets.get(request.path_params["name"])
        if found is None:
            error = _not_found(request.path_params["name"])
            return await self.html("error.html", 404, error=error)
        return _asset_response(found, request.headers)


def inspector_routes(service: SessionService) -> list[BaseRoute]:
    """The inspector's routes over `service` (templates compiled and assets read now)."""
    pages = _Pages(service)
    get = ["GET"]
    return [
        Route("/", pages.page(pages.index, takes_query=True), methods=get),
        Route("/sessions/{id}", pages.page(pages.session), methods=get),
        Route("/sessions/{id}/live", pages.page(pages.live), methods=get),
        Route("/sessions/{id}/tree", pages.page(pages.tree), methods=get),
        Route("/sessions/{id}/cache", pages.page(pages.cache), methods=get),
        Route("/sessions/{id}/requests/{seq}", pages.page(pages.rebuilt), methods=get),
        Route("/assets/{name}", pages.asset, methods=get),
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
