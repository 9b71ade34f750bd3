"""The API's own routes found in a table in front of Starlette: a request one of them
answers goes straight to its endpoint; anything else (another edge's routes, the
inspector, a 404, a 405, a slash redirect) goes through Starlette as before (decision
0021)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.convertors import Convertor
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route, get_route_path
from starlette.types import Message, Receive, Scope, Send

_Entry = tuple[re.Pattern[str], dict[str, Convertor[Any]], Route]


class ApiDispatch:
    """ASGI app over `app`, whose first routes are `routes` (the API's): a request that one
    of them takes — path and method, the first in their order, which is the route
    Starlette's router would pick — runs its endpoint here, with the scope Starlette would
    give it; any other request goes to `app`. Starlette's layers (its error and exception
    middlewares, the router's walk over every route by regex, the endpoint's two wrappers)
    were ten frames in every resume of a request's task. An exception that escapes the
    answer gets what Starlette's error middleware gives: a plain 500 if nothing was sent
    yet, then raised on."""

    def __init__(self, app: Starlette, routes: Sequence[Route]) -> None:
        self.app = app
        by_method: dict[str, list[_Entry]] = {}
        for route in routes:
            for method in sorted(route.methods or ()):
                by_method.setdefault(method, []).append(
                    (route.path_regex, route.param_convertors, route)
                )
        self._by_method = {method: tuple(entries) for method, entries in by_method.items()}

    def match(self, scope: Scope) -> tuple[Route, dict[str, Any]] | None:
        """The API route that takes this request and its path parameters, or None."""
        path = get_route_path(scope)
        for regex, convertors, route in self._by_method.get(scope["method"], ()):
            found = regex.match(path)
            if found is not None:
                params = {
                    key: convertors[key].convert(value) for key, value in found.groupdict().items()
                }
                return route, params
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = self.match(scope) if scope["type"] == "http" else None
        if found is None:
            await self.app(scope, receive, send)
            return
        route, params = found
        scope["app"] = self.app
        scope.setdefault("router", self.app.router)
        scope["route"] = route
        scope["endpoint"] = route.endpoint
        scope["path_params"] = {**scope.get("path_params", {}), **params}
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            response = await route.endpoint(Request(scope, receive, sending))
            await response(scope, receive, sending)
        except Exception:
            if not started:
                await PlainTextResponse("Internal Server Error", status_code=500)(
                    scope, receive, send
                )
            raise
