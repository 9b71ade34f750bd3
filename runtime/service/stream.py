"""A session's events as one ordered stream for SSE: what is stored, then each new event as
it is appended, across loop instances (a session disposed and resumed later goes on in the
same stream), from any seq, with no gap and no duplicate (docs/spec/runtime.md §15.5)."""

from __future__ import annotations

import logging
from contextlib import aclosing

import trio

from ..errors import ActorloopError
from ..model.events import SessionEvent
from ..stores.loading import load_session
from .service import SessionService

log = logging.getLogger("actorloop.service")


async def produce_events(
    service: SessionService,
    session_id: str,
    after: int,
    follow: bool,
    out: trio.MemorySendChannel[SessionEvent],
) -> None:
    """Send the events of `session_id` with seq > `after` into `out`, in seq order, then
    close it: at once when not `follow`, else when the drain begins (the stream ends
    cleanly) — a disconnected client cancels it instead.

    A live agent's events come from its log in memory (`agent.events`), a stored
    session's from the store without repair (`load_session(..., repair=False)`: no lease,
    nothing written). Following a session that is not live waits for a loop instance to
    start on it (a send resumes it) and goes on from there — or, when another instance may
    run it (routing), for its durable log to grow, and goes on from the store.
    """
    cursor = after + 1
    async with out:
        with service.drain.stream_scope():
            try:
                while True:
                    generation = service.generation(session_id)
                    agent = service.runtime.get(session_id)
                    if agent is not None:
                        if not follow:
                            for event in agent.session.events_since(cursor):
                                await out.send(event)
                            return
                        async with aclosing(agent.events(after=cursor - 1)) as events:
                            async for event in events:
                                await out.send(event)
                                cursor = event.seq + 1
                    stored = await load_session(service.runtime.store, session_id, repair=False)
                    for event in stored.events_since(cursor) if cursor < len(stored) else ():
                        await out.send(event)
                        cursor = event.seq + 1
                    if not follow:
                        return
                    await service.wait_for_agent(session_id, generation, durable=cursor)
            except ActorloopError as exc:
                # The response has started: the status can no longer say it. The stream
                # ends; a client resumes with Last-Event-ID once the cause is gone.
                log.warning("event stream of session %s ended: %s", session_id, exc)
