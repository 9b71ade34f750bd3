"""The ASGI app: `create_app(service)` maps HTTP onto a `SessionService` — routes, bodies and
query parameters, JSON and Server-Sent Events out, errors as `{"error": {"code", "message"}}`
— with the bearer-token guard, the body limit and the drain gate in front."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any

import orjson
import trio
from sse_starlette import EventSourceResponse
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ...codecs.converter import encode_event, unstructure
from ..errors import ErrorCode, sole_error
from ..log.rebuild import RebuiltRequest
from ..model.events import SessionEvent
from ..model.messages import Content, Text
from .auth import BearerAuth
from .bodies import (
    Cancel,
    CreateSession,
    Fork,
    Inject,
    Resume,
    SendMessage,
    Steer,
    parse_body,
)
from .errors import InvalidRequestBody, error_response, response_for
from .guards import CrossSiteGuard, HostCheck, NoSniff
from .http2 import Http2Policy
from .inspector.routes import inspector_routes
from .openapi import openapi_document
from .schemas import (
    Digests,
    RequestDetail,
    to_json,
)
from .service import SessionService
from .stream import produce_events

DEFAULT_MAX_BODY_BYTES = 1024 * 1024
DEFAULT_BODY_TIMEOUT_S = 30.0
DEFAULT_MAX_MESSAGE_CHARS = 256 * 1024
MAX_SEQ = 9_007_199_254_740_991

Handler = Callable[[Request], Awaitable[Response]]

log = logging.getLogger("actorloop.http")


class _NoAnswer(Response):
    """What a request whose client went away gets: nothing is sent (the connection is
    closing; writing to it would race its close)."""

    def __init__(self) -> None:
        super().__init__(status_code=499)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        return None


NO_ANSWER = _NoAnswer()


def json_response(value: object, status: int = 200) -> Response:
    """A response shape (`schemas`) as JSON."""
    return Response(to_json(value), status, media_type="application/json")


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


def _endpoint(handler: Handler, query: frozenset[str] = frozenset()) -> Handler:
    """Typed errors become their error response; anything else a logged 500. A query
    parameter the route does not take is refused (422), not ignored."""

    async def run(request: Request) -> Response:
        try:
            unknown = sorted(set(request.query_params) - query)
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


def _int_param(name: str, raw: str | None, default: int, low: int) -> int:
    if raw is None:
        return default
    try:
        value = int(raw, 10)
    except ValueError:
        raise InvalidRequestBody(f"{name} must be an integer, got {raw[:40]!r}") from None
    if not low <= value <= MAX_SEQ:
        raise InvalidRequestBody(f"{name} must be in {low}..{MAX_SEQ}, got {value}")
    return value


def _bool_param(raw: str | None, name: str, default: bool) -> bool:
    if raw is None:
        return default
    if raw not in ("true", "false"):
        raise InvalidRequestBody(f"{name} must be true or false, got {raw[:40]!r}")
    return raw == "true"


async def _until_disconnected(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def _unless_disconnected(request: Request, work: Callable[[], Awaitable[Any]]) -> Any:
    """Run `work` as the request's caller: a client that disconnects cancels it (and, for a
    send, its turn only: caller cancellation). None when the client went away."""
    result: Any = None
    async with trio.open_nursery() as nursery:

        async def watch() -> None:
            await _until_disconnected(request.receive)
            nursery.cancel_scope.cancel()

        nursery.start_soon(watch)
        result = await work()
        nursery.cancel_scope.cancel()
    return result


def check_message(content: Content, limit: int) -> None:
    """Refuse a message above `limit` characters (413 MESSAGE_TOO_LARGE) before it reaches
    the log, where it would be part of every later request of the session."""
    size = sum(len(block.text) for block in content if isinstance(block, Text))
    if size > limit:
        raise InvalidRequestBody(
            f"the message has {size} characters; this server takes at most {limit} per "
            "message (serve --max-message-chars)",
            ErrorCode.MESSAGE_TOO_LARGE,
        )


def request_detail(rebuilt: RebuiltRequest) -> RequestDetail:
    """The response shape of a rebuilt request (parts in the log's codec JSON)."""
    return RequestDetail(
        session_id=rebuilt.session_id,
        seq=rebuilt.seq,
        turn=rebuilt.turn,
        step=rebuilt.step,
        step_start_seq=rebuilt.step_start_seq,
        snapshot_seq=rebuilt.snapshot_seq,
        header_seq=rebuilt.header_seq,
        system=rebuilt.system,
        prefix=[unstructure(message) for message in rebuilt.prefix],
        history=[unstructure(message) for message in rebuilt.history],
        tools=[unstructure(tool) for tool in rebuilt.tools],
        config=unstructure(rebuilt.config),
        digest=Digests(rebuilt.recorded_digest, rebuilt.digest),
        verified=rebuilt.verified,
    )


def sse_frame(event: SessionEvent) -> bytes:
    """One Server-Sent Event: `id: <seq>`, `event: <type>`, `data: <codec JSON>`."""
    return b"id: %d\nevent: %s\ndata: %s\n\n" % (
        event.seq,
        event.type.encode(),
        encode_event(event),
    )


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

        async def limited() -> Message:
            nonlocal seen, ended
            if ended:  # past the body only the disconnect is left: no deadline
                return await receive()
            with trio.move_on_at(deadline):
                message = await receive()
                if message["type"] == "http.request":
                    seen += len(message.get("body", b""))
                    if seen > self.limit:
                        raise InvalidRequestBody(self._message(), ErrorCode.BODY_TOO_LARGE)
                    ended = not message.get("more_body", False)
                return message
            raise InvalidRequestBody(
                f"the request body did not arrive within {self.seconds:g} s",
                ErrorCode.BODY_READ_TIMEOUT,
            )

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
    openapi = orjson.dumps(openapi_document(auth=token is not None))

    async def health(_request: Request) -> Response:
        """Liveness; 503 while draining."""
        state = service.health()
        return json_response(state, 503 if state.status == "draining" else 200)

    async def openapi_json(_request: Request) -> Response:
        """The OpenAPI document."""
        return Response(openapi, media_type="application/json")

    async def profiles(_request: Request) -> Response:
        """The agent profiles."""
        return json_response(service.profile_list())

    async def create_session(request: Request) -> Response:
        """Spawn an agent on a new session."""
        body = parse_body(await request.body(), CreateSession)
        return json_response(await service.create(body), 201)

    async def list_sessions(request: Request) -> Response:
        """A page of stored sessions."""
        limit = _int_param("limit", request.query_params.get("limit"), 100, 1)
        cursor = request.query_params.get("cursor")
        if cursor is not None and not 1 <= len(cursor) <= 128:
            raise InvalidRequestBody(f"cursor must be 1..128 characters, got {len(cursor)}")
        return json_response(await service.list(limit, cursor))

    async def get_session(request: Request) -> Response:
        """One session."""
        return json_response(await service.detail(request.path_params["id"]))

    async def dispose_session(request: Request) -> Response:
        """Dispose the live agent."""
        return json_response(await service.dispose(request.path_params["id"]))

    async def send_message(request: Request) -> Response:
        """One turn."""
        session_id = request.path_params["id"]
        body = parse_body(await request.body(), SendMessage)
        check_message(body.content, max_message_chars)
        if not body.wait:
            return json_response(await service.send(session_id, body), 202)
        outcome = await _unless_disconnected(request, partial(service.send, session_id, body))
        if outcome is None:
            return NO_ANSWER
        return json_response(outcome, 200)

    async def steer(request: Request) -> Response:
        """Steer the running turn."""
        body = parse_body(await request.body(), Steer)
        check_message(body.content, max_message_chars)
        return json_response(await service.steer(request.path_params["id"], body.content), 202)

    async def inject(request: Request) -> Response:
        """Inject context."""
        body = parse_body(await request.body(), Inject)
        check_message(body.content, max_message_chars)
        return json_response(await service.inject(request.path_params["id"], body), 202)

    async def cancel(request: Request) -> Response:
        """Cancel the running turn."""
        body = parse_body(await request.body(), Cancel)
        return json_response(await service.cancel(request.path_params["id"], body))

    async def fork(request: Request) -> Response:
        """Fork the session."""
        body = parse_body(await request.body(), Fork)
        return json_response(await service.fork(request.path_params["id"], body), 201)

    async def resume(request: Request) -> Response:
        """Resume the session."""
        body = parse_body(await request.body(), Resume)
        return json_response(await service.resume(request.path_params["id"], body))

    async def events(request: Request) -> Response:
        """The session's events as Server-Sent Events."""
        session_id = request.path_params["id"]
        after = _int_param("after", request.query_params.get("after"), -1, -1)
        last_event_id = request.headers.get("last-event-id")
        if last_event_id is not None:
            after = _int_param("Last-Event-ID", last_event_id.strip(), -1, 0)
        follow = _bool_param(request.query_params.get("follow"), "follow", True)
        await service.require(session_id)
        out, source = trio.open_memory_channel[SessionEvent](0)

        async def frames() -> Any:
            async with source:
                async for event in source:
                    yield sse_frame(event)

        return EventSourceResponse(
            frames(),
            data_sender_callable=partial(produce_events, service, session_id, after, follow, out),
            ping=ping_seconds,
            sep="\n",
        )

    async def rebuilt_request(request: Request) -> Response:
        """The exact request behind one model answer."""
        seq = _int_param("seq", request.path_params["seq"], 0, 0)
        rebuilt = await service.rebuilt_request(request.path_params["id"], seq)
        return json_response(request_detail(rebuilt))

    async def verify(request: Request) -> Response:
        """Verify the session's log."""
        return json_response(await service.verify(request.path_params["id"]))

    own: list[BaseRoute] = [
        Route("/healthz", _endpoint(health), methods=["GET"]),
        Route("/openapi.json", _endpoint(openapi_json), methods=["GET"]),
        Route("/v1/profiles", _endpoint(profiles), methods=["GET"]),
        Route("/v1/sessions", _endpoint(create_session), methods=["POST"]),
        Route(
            "/v1/sessions",
            _endpoint(list_sessions, frozenset({"limit", "cursor"})),
            methods=["GET"],
        ),
        Route("/v1/sessions/{id}", _endpoint(get_session), methods=["GET"]),
        Route("/v1/sessions/{id}", _endpoint(dispose_session), methods=["DELETE"]),
        Route("/v1/sessions/{id}/messages", _endpoint(send_message), methods=["POST"]),
        Route("/v1/sessions/{id}/steer", _endpoint(steer), methods=["POST"]),
        Route("/v1/sessions/{id}/inject", _endpoint(inject), methods=["POST"]),
        Route("/v1/sessions/{id}/cancel", _endpoint(cancel), methods=["POST"]),
        Route("/v1/sessions/{id}/fork", _endpoint(fork), methods=["POST"]),
        Route("/v1/sessions/{id}/resume", _endpoint(resume), methods=["POST"]),
        Route(
            "/v1/sessions/{id}/events",
            _endpoint(events, frozenset({"after", "follow"})),
            methods=["GET"],
        ),
        Route("/v1/sessions/{id}/requests/{seq}", _endpoint(rebuilt_request), methods=["GET"]),
        Route("/v1/sessions/{id}/verify", _endpoint(verify), methods=["GET"]),
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
