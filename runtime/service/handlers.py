"""The API's handlers: one method per route of the table in `endpoints`, each mapping one
request onto the `SessionService` (bodies and query parameters in, JSON or Server-Sent
Events out), and the small pieces they share."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import trio
from attrs import evolve
from sse_starlette import EventSourceResponse
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from ...codecs.converter import encode_event, unstructure
from ..log.rebuild import RebuiltRequest
from ..model.events import SessionEvent
from .approval_shapes import Decide
from .approvals import decide, pending_list
from .bodies import (
    Cancel,
    CreateSession,
    Fork,
    Inject,
    Resume,
    SendMessage,
    Steer,
    check_message,
    parse_body,
)
from .disconnects import unless_disconnected
from .drain import Drain
from .durable_keys import ReplayFlag, StoredResponse
from .errors import InvalidRequestBody
from .schemas import Digests, RequestDetail, to_json
from .service import SessionService
from .stream import produce_events
from .ui_handlers import UiStreams

MAX_SEQ = 9_007_199_254_740_991

Handler = Callable[[Request], Awaitable[Response]]


class _NoAnswer(Response):
    """What a request whose client went away gets: nothing is sent (the connection is
    closing; writing to it would race its close)."""

    def __init__(self) -> None:
        super().__init__(status_code=499)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        return None


NO_ANSWER = _NoAnswer()


class _CountedEvents(EventSourceResponse):
    """An event stream counted in `/healthz` `open_streams` for as long as its response
    runs (`Drain.stream_response`), backlog and last frame included."""

    def __init__(self, drain: Drain, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.drain = drain

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        with self.drain.stream_response():
            await super().__call__(scope, receive, send)


def json_response(value: object, status: int = 200) -> Response:
    """A response shape (`schemas`) as JSON."""
    return Response(to_json(value), status, media_type="application/json")


MAX_KEY_CHARS = 200
REPLAYED_HEADER = "Idempotent-Replayed"
"""Set to `true` on a response that replays a key's first outcome (docs/serve.md §5)."""


def idempotency_key(request: Request, body_key: str | None = None) -> str | None:
    """The request's idempotency key: its `Idempotency-Key` header, or the body's
    `idempotency_key` (a send); both given must agree."""
    header = request.headers.get("idempotency-key")
    if header is not None and not 1 <= len(header) <= MAX_KEY_CHARS:
        raise InvalidRequestBody(
            f"Idempotency-Key must be 1..{MAX_KEY_CHARS} characters, got {len(header)}"
        )
    if header is not None and body_key is not None and header != body_key:
        raise InvalidRequestBody("the Idempotency-Key header and idempotency_key differ")
    return header if header is not None else body_key


def replayed(response: Response, flag: ReplayFlag) -> Response:
    """`response`, marked as a replay when it is one."""
    if flag.replayed:
        response.headers[REPLAYED_HEADER] = "true"
    return response


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


class Handlers:
    """The handlers over one service, with the limits they apply: the largest message,
    the SSE keep-alive interval, and the OpenAPI document they serve."""

    def __init__(
        self,
        service: SessionService,
        *,
        openapi: bytes,
        max_message_chars: int,
        ping_seconds: float,
    ) -> None:
        self.service = service
        self.openapi = openapi
        self.max_message_chars = max_message_chars
        self.ping_seconds = ping_seconds
        self.ui = UiStreams(service, ping_seconds=ping_seconds, max_message_chars=max_message_chars)

    async def health(self, _request: Request) -> Response:
        """Liveness; 503 while draining."""
        state = self.service.health()
        return json_response(state, 503 if state.status == "draining" else 200)

    async def openapi_json(self, _request: Request) -> Response:
        """The OpenAPI document."""
        return Response(self.openapi, media_type="application/json")

    async def profiles(self, _request: Request) -> Response:
        """The agent profiles."""
        return json_response(self.service.profile_list())

    async def _keyed(
        self, request: Request, scope: str, produce: Callable[[], Awaitable[Response]]
    ) -> Response:
        """`produce()`'s response, or with an `Idempotency-Key` header the first response
        of that key (kept by the store; a replay says `Idempotent-Replayed: true`)."""
        key = idempotency_key(request)
        if key is None:
            return await produce()

        async def first() -> StoredResponse:
            response = await produce()
            return StoredResponse(response.status_code, bytes(response.body))

        flag = ReplayFlag()
        stored = await self.service.durable.respond(
            scope, request.path_params.get("id", ""), key, await request.body(), first, flag
        )
        return replayed(Response(stored.body, stored.status, media_type="application/json"), flag)

    async def create_session(self, request: Request) -> Response:
        """Spawn an agent on a new session."""

        async def produce() -> Response:
            body = parse_body(await request.body(), CreateSession)
            return json_response(await self.service.create(body), 201)

        return await self._keyed(request, "create", produce)

    async def list_sessions(self, request: Request) -> Response:
        """A page of stored sessions."""
        limit = _int_param("limit", request.query_params.get("limit"), 100, 1)
        cursor = request.query_params.get("cursor")
        if cursor is not None and not 1 <= len(cursor) <= 128:
            raise InvalidRequestBody(f"cursor must be 1..128 characters, got {len(cursor)}")
        return json_response(await self.service.list(limit, cursor))

    async def get_session(self, request: Request) -> Response:
        """One session."""
        return json_response(await self.service.detail(request.path_params["id"]))

    async def dispose_session(self, request: Request) -> Response:
        """Dispose the live agent."""

        async def produce() -> Response:
            return json_response(await self.service.dispose(request.path_params["id"]))

        return await self._keyed(request, "dispose", produce)

    async def send_message(self, request: Request) -> Response:
        """One turn; its key (header or body) kept by the store with the turn's outcome."""
        session_id = request.path_params["id"]
        body = parse_body(await request.body(), SendMessage)
        check_message(body.content, self.max_message_chars)
        key = idempotency_key(request, body.idempotency_key)
        if key is not None:
            body = evolve(body, idempotency_key=key)
        flag = ReplayFlag()
        if not body.wait:
            return replayed(
                json_response(await self.service.send(session_id, body, replay=flag), 202), flag
            )
        outcome = await unless_disconnected(
            request, partial(self.service.send, session_id, body, replay=flag)
        )
        if outcome is None:
            return NO_ANSWER
        return replayed(json_response(outcome, 200), flag)

    async def steer(self, request: Request) -> Response:
        """Steer the running turn."""

        async def produce() -> Response:
            body = parse_body(await request.body(), Steer)
            check_message(body.content, self.max_message_chars)
            state = await self.service.steer(request.path_params["id"], body.content)
            return json_response(state, 202)

        return await self._keyed(request, "steer", produce)

    async def inject(self, request: Request) -> Response:
        """Inject context."""

        async def produce() -> Response:
            body = parse_body(await request.body(), Inject)
            check_message(body.content, self.max_message_chars)
            return json_response(await self.service.inject(request.path_params["id"], body), 202)

        return await self._keyed(request, "inject", produce)

    async def cancel(self, request: Request) -> Response:
        """Cancel the running turn."""

        async def produce() -> Response:
            body = parse_body(await request.body(), Cancel)
            return json_response(await self.service.cancel(request.path_params["id"], body))

        return await self._keyed(request, "cancel", produce)

    async def fork(self, request: Request) -> Response:
        """Fork the session."""

        async def produce() -> Response:
            body = parse_body(await request.body(), Fork)
            return json_response(await self.service.fork(request.path_params["id"], body), 201)

        return await self._keyed(request, "fork", produce)

    async def resume(self, request: Request) -> Response:
        """Resume the session."""

        async def produce() -> Response:
            body = parse_body(await request.body(), Resume)
            return json_response(await self.service.resume(request.path_params["id"], body))

        return await self._keyed(request, "resume", produce)

    async def approvals(self, request: Request) -> Response:
        """The calls waiting for a decision."""
        return json_response(await pending_list(self.service, request.path_params["id"]))

    async def decide(self, request: Request) -> Response:
        """Approve or reject one waiting call; the continuation's outcome. Under an
        `Idempotency-Key` the first response of that key, kept by the store."""
        call_id = request.path_params["call_id"]

        async def produce() -> Response:
            body = parse_body(await request.body(), Decide)
            work = partial(decide, self.service, request.path_params["id"], call_id, body)
            outcome = await unless_disconnected(request, work)
            if outcome is None:
                return NO_ANSWER
            return json_response(outcome, 200)

        return await self._keyed(request, f"decide:{call_id}", produce)

    async def events(self, request: Request) -> Response:
        """The session's events as Server-Sent Events."""
        session_id = request.path_params["id"]
        after = _int_param("after", request.query_params.get("after"), -1, -1)
        last_event_id = request.headers.get("last-event-id")
        if last_event_id is not None:
            after = _int_param("Last-Event-ID", last_event_id.strip(), -1, 0)
        follow = _bool_param(request.query_params.get("follow"), "follow", True)
        await self.service.require(session_id)
        out, source = trio.open_memory_channel[SessionEvent](0)

        async def frames() -> Any:
            async with source:
                async for event in source:
                    yield sse_frame(event)

        return _CountedEvents(
            self.service.drain,
            frames(),
            data_sender_callable=partial(
                produce_events, self.service, session_id, after, follow, out
            ),
            ping=self.ping_seconds,
            sep="\n",
        )

    async def chat(self, request: Request) -> Response:
        """One turn as an AI SDK UI message stream."""
        return await self.ui.chat(request)

    async def chat_messages(self, request: Request) -> Response:
        """The conversation as UI messages."""
        return await self.ui.chat_messages(request)

    async def chat_stream(self, request: Request) -> Response:
        """Resume a UI message stream."""
        return await self.ui.chat_stream(request)

    async def ag_ui(self, request: Request) -> Response:
        """One AG-UI run."""
        return await self.ui.ag_ui(request)

    async def rebuilt_request(self, request: Request) -> Response:
        """The exact request behind one model answer."""
        seq = _int_param("seq", request.path_params["seq"], 0, 0)
        rebuilt = await self.service.rebuilt_request(request.path_params["id"], seq)
        return json_response(request_detail(rebuilt))

    async def verify(self, request: Request) -> Response:
        """Verify the session's log."""
        return json_response(await self.service.verify(request.path_params["id"]))
