"""One turn as a protocol's Server-Sent Event stream: the ASGI response both UI stream
protocols share (docs/serve.md, "UI stream protocols"). It runs the send as the request's
caller (a client that goes away cancels that turn only, also while it waits in line), follows
the turn's events through the session's ordered stream (`stream.produce_events`) and writes
what the protocol's translator makes of each, from any resume position, to the turn's end."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

import trio
from attrs import frozen
from starlette.types import Receive, Scope, Send

from ..errors import ActorloopError, AgentBusy, sole_error
from ..model.events import SessionEvent, TurnEnd, TurnStart
from ..model.messages import Content
from .bodies import SendMessage
from .errors import InvalidRequestBody, response_for
from .service import SessionService
from .stream import produce_events

log = logging.getLogger("actorloop.service")


class Translator(Protocol):
    """A protocol's translation of one turn's events (a fold: it may keep state between
    events, so a resumed stream feeds it the turn from its start and drops what was sent)."""

    def frames(self, event: SessionEvent) -> tuple[bytes, ...]:
        """The SSE payloads (`data: ...` lines and what else the frame holds, no `id:`)
        that `event` becomes, in order; none for an event the protocol does not show."""
        ...

    def closing(self) -> tuple[bytes, ...]:
        """What follows the turn's last frame (e.g. `data: [DONE]`); sent without an id."""
        ...


@frozen(order=True)
class Position:
    """Where a resumed stream goes on: after frame `part` of the event at `seq` (None: after
    all of that event's frames). An SSE id is `<seq>` on an event's last frame and
    `<seq>.<part>` on the ones before it."""

    seq: int
    part: int | None = None

    @classmethod
    def parse(cls, raw: str) -> Position:
        """The position a Last-Event-ID names; 422 for anything else."""
        head, dot, tail = raw.strip().partition(".")
        try:
            seq = int(head, 10)
            part = int(tail, 10) if dot else None
        except ValueError:
            raise InvalidRequestBody(
                f"Last-Event-ID must be <seq> or <seq>.<part>, got {raw[:40]!r}"
            ) from None
        if seq < 0 or (part is not None and part < 0):
            raise InvalidRequestBody(f"Last-Event-ID must not be negative, got {raw[:40]!r}")
        return cls(seq, part)

    def sent(self, seq: int, part: int) -> bool:
        """Whether frame `part` of event `seq` was sent before this position."""
        if seq != self.seq:
            return seq < self.seq
        return self.part is None or part <= self.part


def event_frames(event: SessionEvent, payloads: Sequence[bytes]) -> tuple[tuple[int, bytes], ...]:
    """The frames of one event with their SSE ids: `(part, frame)` pairs."""
    last = len(payloads) - 1
    return tuple(
        (
            part,
            (b"id: %d\n" % event.seq if part == last else b"id: %d.%d\n" % (event.seq, part))
            + payload,
        )
        for part, payload in enumerate(payloads)
    )


def turn_start_before(events: Sequence[SessionEvent], seq: int) -> int | None:
    """The seq of the `turn/start` of the turn holding event `seq` (the latest one at or
    before it), or None."""
    for index in range(min(seq, len(events) - 1), -1, -1):
        if events[index].type == "turn/start":
            return index
    return None


class TurnStreamResponse:
    """The ASGI response: with `content`, send it as one turn (queued behind a running one)
    and stream that turn; without, stream the turn starting at `start_seq` from `resume` on
    (a reconnect). A send refused before its turn starts (a discarded send, a store error)
    gets its JSON error status, not a stream. The client going away cancels the send (its
    turn, or its place in line) unless `detach`: then the turn runs on in the service."""

    def __init__(
        self,
        service: SessionService,
        session_id: str,
        translator: Translator,
        *,
        headers: Sequence[tuple[bytes, bytes]],
        ping_seconds: float,
        content: Content | None = None,
        start_seq: int | None = None,
        resume: Position | None = None,
        detach: bool = False,
    ) -> None:
        self.service = service
        self.session_id = session_id
        self.translator = translator
        self.headers = headers
        self.ping_seconds = ping_seconds
        self.content = content
        self.start_seq = start_seq
        self.resume = resume
        self.detach = detach

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        with self.service.drain.stream_response():
            async with trio.open_nursery() as nursery:
                watching = trio.CancelScope()

                async def watch() -> None:
                    with watching:
                        while (await receive())["type"] != "http.disconnect":
                            pass
                        # The client went away (or pressed stop): its turn is cancelled.
                        nursery.cancel_scope.cancel()

                nursery.start_soon(watch)
                start = self.start_seq
                sent = trio.Event()
                if self.content is None:
                    sent.set()
                else:
                    try:
                        # A detached turn runs on when the client goes away (resume it).
                        owner = self.service.nursery if self.detach else nursery
                        start = await owner.start(self._send_turn, self.content, sent)
                    except Exception as exc:
                        leaf = sole_error(exc)
                        if not isinstance(leaf, ActorloopError):
                            raise
                        watching.cancel()
                        await response_for(leaf)(scope, receive, send)
                        return
                assert start is not None
                await self._stream(start, send)
                if not self.detach:
                    await sent.wait()  # the turn has ended: its send returns at once
                watching.cancel()

    async def _send_turn(
        self, content: Content, sent: trio.Event, *, task_status: trio.TaskStatus[int]
    ) -> None:
        try:
            await self._send(content, task_status)
        finally:
            sent.set()

    async def _send(self, content: Content, task_status: trio.TaskStatus[int]) -> None:
        started = False

        def first_seq(seq: int) -> None:
            nonlocal started
            started = True
            task_status.started(seq)

        try:
            await self.service.send(
                self.session_id,
                SendMessage(content, wait=True, if_busy="queue"),
                started=first_seq,
            )
        except Exception as exc:
            if not started:
                raise
            # The stream already says how the turn ended (its log does); a detached turn
            # has nobody else to tell.
            log.warning("turn of session %s (UI stream) failed: %r", self.session_id, exc)
            return
        if not started:
            raise AgentBusy(
                f"the send to session {self.session_id!r} was discarded before its turn "
                "started (a cancel, a dispose or the drain emptied the line)"
            )

    async def _stream(self, start: int, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": list(self.headers)})
        out, frames = trio.open_memory_channel[bytes](0)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._frames, start, out)
            nursery.start_soon(self._ping, out.clone())
            async with frames:
                async for frame in frames:
                    await send({"type": "http.response.body", "body": frame, "more_body": True})
                    if frame == _END:
                        break
            nursery.cancel_scope.cancel()
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _ping(self, out: trio.MemorySendChannel[bytes]) -> None:
        async with out:
            while True:
                await trio.sleep(self.ping_seconds)
                await out.send(b": ping\n\n")

    async def _frames(self, start: int, out: trio.MemorySendChannel[bytes]) -> None:
        async with out:
            events, source = trio.open_memory_channel[SessionEvent](0)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(
                    produce_events, self.service, self.session_id, start - 1, True, events
                )
                turn: int | None = None
                async with source:
                    async for event in source:
                        data = event.data
                        if turn is None:
                            if not isinstance(data, TurnStart) or (
                                self.content is not None and data.trigger.kind != "message"
                            ):
                                continue
                            turn = data.turn
                        payloads = self.translator.frames(event)
                        for part, frame in event_frames(event, payloads):
                            if self.resume is None or not self.resume.sent(event.seq, part):
                                await out.send(frame)
                        if isinstance(data, TurnEnd) and data.turn == turn:
                            break
                nursery.cancel_scope.cancel()
            for frame in self.translator.closing():
                await out.send(frame)
            await out.send(_END)


_END = b""
"""The marker after the last frame (an empty body chunk is never a frame)."""
