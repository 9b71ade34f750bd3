"""The API's route table in front of Starlette (runtime/service/dispatch.py) answers as
Starlette's router would: the route it picks, the scope the endpoint sees, what it leaves to
Starlette (a 405, a slash redirect, other routes), and a failure that escapes the answer."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from actorloop.runtime.service.dispatch import ApiDispatch


async def seen(request: Request) -> Response:
    return JSONResponse(
        {
            "endpoint": request.scope["endpoint"].__name__,
            "params": request.path_params,
            "app": isinstance(request.app, Starlette)
            and request.scope["router"] is request.app.router,
        }
    )


async def first(request: Request) -> Response:
    return JSONResponse({"route": "first", "params": request.path_params})


async def fails(request: Request) -> Response:
    class Broken(Response):
        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            raise RuntimeError("the answer broke before it began")

    return Broken()


async def other(request: Request) -> Response:
    return JSONResponse({"route": "other"})


def app_with_table() -> tuple[ApiDispatch, Starlette]:
    own = [
        Route("/v1/things/{id}", seen, methods=["GET"]),
        Route("/v1/things/{id}", first, methods=["POST"]),
        Route("/v1/things/{name}/x", first, methods=["POST"]),
        Route("/v1/broken", fails, methods=["GET"]),
    ]
    starlette = Starlette(routes=[*own, Route("/other", other)])
    return ApiDispatch(starlette, own), starlette


async def get(app: Any, method: str, path: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        return await client.request(method, path, follow_redirects=False)


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "HEAD"])
@pytest.mark.parametrize(
    "path", ["/v1/things/a", "/v1/things/a/", "/v1/things/a/x", "/other", "/nothing"]
)
async def test_the_table_answers_what_starlette_answers(method: str, path: str) -> None:
    table, starlette = app_with_table()
    mine, theirs = await get(table, method, path), await get(starlette, method, path)
    assert (mine.status_code, mine.content) == (theirs.status_code, theirs.content)
    assert mine.headers.get("allow") == theirs.headers.get("allow")
    assert mine.headers.get("location") == theirs.headers.get("location")


async def test_an_endpoint_the_table_runs_sees_starlettes_scope() -> None:
    table, _ = app_with_table()
    answer = await get(table, "GET", "/v1/things/t-1")
    assert answer.json() == {"endpoint": "seen", "params": {"id": "t-1"}, "app": True}


async def test_a_failure_before_the_answer_gets_starlettes_plain_500() -> None:
    table, starlette = app_with_table()
    mine, theirs = await get(table, "GET", "/v1/broken"), await get(starlette, "GET", "/v1/broken")
    assert (mine.status_code, mine.text) == (theirs.status_code, theirs.text)
    assert mine.status_code == 500
