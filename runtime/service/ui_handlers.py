"""The handlers of the UI stream routes: `POST /v1/sessions/{id}/chat` and its resume
`GET /v1/sessions/{id}/chat/stream` (the AI SDK's UI message stream), `POST /v1/ag-ui`
(AG-UI). Each maps its body onto one turn and answers with `TurnStreamResponse`."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import suppress
from typing import Any

import orjson
import trio
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from ..errors import ErrorCode, SessionExists
from ..model.events import SessionEvent
from ..model.messages import Content
from ..stores.ids import check_session_id
from . import ui_message_stream as ui
from .bodies import CreateSession, check_message
from .errors import error_response
from .service import SessionService
from .turn_stream import Position, Translator, TurnStreamResponse, turn_start_before

CATCH_UP_S = 5.0
"""How long a reconnect waits for the event its `Last-Event-ID` names to be durable here."""


class _Stream(Response):
    """A `TurnStreamResponse` where Starlette wants a `Response`."""

    def __init__(self, stream: TurnStreamResponse) -> None:
        super().__init__(status_code=200)
        self.stream = stream

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.stream(scope, receive, send)


class UiStreams:
    """The UI stream handlers over one service (`handlers.Handlers` delegates to them)."""

    def __init__(
        self, service: SessionService, *, ping_seconds: float, max_message_chars: int
    ) -> None:
        self.service = service
        self.ping_seconds = ping_seconds
        self.max_message_chars = max_message_chars

    def _stream(
        self,
        session_id: str,
        translator: Translator,
        headers: tuple[tuple[bytes, bytes], ...],
        **turn: Any,
    ) -> Response:
        """One turn's stream through `translator` (`turn`: the content to send, or where a
        reconnect starts; see `TurnStreamResponse`)."""
        return _Stream(
            TurnStreamResponse(
                self.service,
                session_id,
                translator,
                headers=headers,
                ping_seconds=self.ping_seconds,
                **turn,
            )
        )

    def _check(self, content: Content) -> None:
        check_message(content, self.max_message_chars)

    async def chat(self, request: Request) -> Response:
        """One turn as a UI message stream (the body `useChat` sends)."""
        session_id = request.path_params["id"]
        chat = ui.chat_request(await request.body())
        self._check(chat.content)
        await self.service.require(session_id)
        return self._stream(
            session_id,
            ui.UiMessageTranslator(session_id),
            ui.HEADERS,
            content=chat.content,
            detach=chat.detach,
        )

    async def chat_messages(self, request: Request) -> Response:
        """The session's conversation as UI messages (`useChat`'s initial `messages`)."""
        session_id = request.path_params["id"]
        session = await self.service.session(session_id)
        body = {"id": session_id, "messages": ui.ui_messages(session_id, session.derive_messages())}
        return Response(orjson.dumps(body), media_type="application/json")

    async def chat_stream(self, request: Request) -> Response:
        """The turn a UI message stream was cut off in: from `Last-Event-ID` on, or the
        open turn from its start (the AI SDK's resume replays it); 204 when none runs."""
        session_id = request.path_params["id"]
        await self.service.require(session_id)
        session = await self.service.session(session_id)
        events: Sequence[SessionEvent] = session.events
        raw = request.headers.get("last-event-id")
        resume = None if raw is None else Position.parse(raw)
        if resume is not None and resume.seq >= len(events):
            events = await self._caught_up(session_id, resume.seq, events)
        if resume is None:
            start = None if session.open_turn is None else turn_start_before(events, len(events))
        else:
            start = turn_start_before(events, resume.seq)
        if start is None:
            return Response(status_code=204)
        return self._stream(
            session_id,
            ui.UiMessageTranslator(session_id),
            ui.HEADERS,
            start_seq=start,
            resume=resume,
        )

    async def _caught_up(
        self, session_id: str, seq: int, events: Sequence[SessionEvent]
    ) -> Sequence[SessionEvent]:
        """The session's events once they hold `seq`: a client may have seen it streamed by
        the owning instance before it was durable where it now reconnects. Waits at most
        `CATCH_UP_S` (an id no stream gave is not waited for longer)."""
        with trio.move_on_after(CATCH_UP_S):
            while seq >= len(events):
                generation = self.service.generation(session_id)
                await self.service.wait_for_agent(session_id, generation, durable=len(events))
                events = (await self.service.session(session_id)).events
        return events

    async def ag_ui(self, request: Request) -> Response:
        """One AG-UI run: `RunAgentInput` in, AG-UI events out; the thread is the session
        (created on its first run, with `forwardedProps.profile` or the default profile)."""
        try:
            from . import agui
        except ImportError:
            return error_response(
                404,
                ErrorCode.NOT_FOUND,
                "this server has no AG-UI route: it needs the ag-ui-protocol package "
                "(pip install 'actorloop[agui]')",
            )
        run = agui.run_input(await request.body())
        session_id = run.thread_id
        check_session_id(session_id)
        content = agui.input_content(run)
        self._check(content)
        if self.service.runtime.get(session_id) is None and not (
            await self.service.runtime.store.exists(session_id)
        ):
            props = run.forwarded_props
            profile = props.get("profile") if isinstance(props, dict) else None
            with suppress(SessionExists):  # a concurrent first run created it
                await self.service.create(
                    CreateSession(
                        profile=profile if isinstance(profile, str) else None,
                        session_id=session_id,
                    )
                )
        return self._stream(
            session_id, agui.AguiTranslator(session_id), agui.HEADERS, content=content
        )
