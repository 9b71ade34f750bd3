"""A FastAPI service over actorloop: spawn agents, send them messages, stream their events.

    pip install "actorloop[asyncio]"
    ACTORLOOP_STORE=sqlite:agents.db ACTORLOOP_PROVIDER=sim \\
        uvicorn --app-dir examples fastapi_app:app

Endpoints:

* `POST /agents` `{"system": str | null}` → `{"id": ...}`: a new agent on a new session.
* `POST /agents/{id}/messages` `{"text": str}` → the `TurnResult` of that turn. A client
  that goes away before the answer cancels the turn: it ends `aborted` ("caller
  cancelled") and the log stays complete.
* `GET /agents/{id}/events?after=N` → `text/event-stream`, one SSE event per session
  event (`event:` its type, `id:` its seq, `data:` the codec's JSON); a reconnecting
  browser's `Last-Event-ID` resumes after the last one it saw. The stream ends when the
  agent is closed; a client that leaves ends it quietly (sse-starlette cancels the
  generator when the client disconnects).
* `POST /agents/{id}/cancel` cancels the running turn; `DELETE /agents/{id}` disposes it.

The runtime lives in the app's lifespan, so uvicorn's graceful shutdown (Ctrl-C, SIGTERM)
closes every agent and flushes the store before the process exits.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import Annotated, Any, TypeVar

from fastapi import FastAPI, Header, HTTPException, Request, Response
from pydantic import BaseModel
from sse_starlette import EventSourceResponse, ServerSentEvent

from actorloop.codecs.converter import encode_event, unstructure
from actorloop.runtime import AgentOptions, aio
from actorloop.runtime.providers.base import Provider
from actorloop.runtime.providers.registry import provider_from_spec

T = TypeVar("T")

CLIENT_CLOSED_REQUEST = 499
"""What the access log shows for a request whose client left before the answer."""


class NewAgent(BaseModel):
    """The body of `POST /agents`."""

    system: str | None = None


class NewMessage(BaseModel):
    """The body of `POST /agents/{id}/messages`."""

    text: str


class ClientGone(Exception):
    """The client disconnected before its answer was ready."""


async def _disconnected(request: Request) -> None:
    """Return once the client has gone (the ASGI server reports `http.disconnect`)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """Await `work`, cancelling it if the client disconnects first (then `ClientGone`,
    once the cancelled work has finished). ASGI servers do not cancel a handler when its
    client leaves; this turns the disconnect into the asyncio cancellation actorloop maps
    onto the turn. `work`'s own exception comes out as it is."""
    answer = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait((answer, gone), return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        answer.cancel()
        gone.cancel()
        await asyncio.wait((answer, gone))
        raise
    (answer if gone.done() else gone).cancel()
    await asyncio.wait((answer, gone))
    if answer.cancelled():
        raise ClientGone
    return answer.result()


def create_app(*, store: str, provider: Provider, model: str) -> FastAPI:
    """The app, with one `aio.Runtime` on `store` and `provider` for its lifetime."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with aio.Runtime.open(store=store, provider=provider) as runtime:
            app.state.runtime = runtime
            yield

    app = FastAPI(title="actorloop agents", lifespan=lifespan)

    def runtime_of(request: Request) -> aio.Runtime:
        runtime: aio.Runtime = request.app.state.runtime
        return runtime

    def agent_of(request: Request, agent_id: str) -> aio.Agent:
        agent = runtime_of(request).get(agent_id)
        if agent is None:
            raise HTTPException(404, f"no live agent {agent_id!r}")
        return agent

    @app.exception_handler(ClientGone)
    async def client_gone(request: Request, exc: ClientGone) -> Response:
        return Response(status_code=CLIENT_CLOSED_REQUEST)

    @app.post("/agents")
    async def spawn(request: Request, body: NewAgent) -> dict[str, str]:
        agent = await runtime_of(request).spawn(AgentOptions(model=model, system=body.system))
        return {"id": agent.id}

    @app.post("/agents/{agent_id}/messages")
    async def send(request: Request, agent_id: str, body: NewMessage) -> Any:
        agent = agent_of(request, agent_id)
        result = await unless_disconnected(request, agent.send(body.text))
        return unstructure(result)

    # sse-starlette, not FastAPI's own `response_class=EventSourceResponse`: FastAPI's
    # keep-alive task raises `anyio.BrokenResourceError` (logged as an ExceptionGroup) when
    # a client leaves while an event is on its way; sse-starlette cancels the generator.
    @app.get("/agents/{agent_id}/events", response_class=EventSourceResponse)
    async def events(
        request: Request,
        agent_id: str,
        after: int | None = None,
        last_event_id: Annotated[int | None, Header()] = None,
    ) -> EventSourceResponse:
        agent = agent_of(request, agent_id)
        start = last_event_id if last_event_id is not None else after

        async def stream() -> AsyncIterator[ServerSentEvent]:
            async for event in agent.events(after=start):
                yield ServerSentEvent(
                    encode_event(event).decode(), event=event.type, id=str(event.seq)
                )

        return EventSourceResponse(stream())

    @app.post("/agents/{agent_id}/cancel")
    async def cancel(request: Request, agent_id: str) -> dict[str, str]:
        agent = agent_of(request, agent_id)
        agent.cancel("cancelled over HTTP")
        return {"status": agent.status}

    @app.delete("/agents/{agent_id}")
    async def dispose(request: Request, agent_id: str) -> dict[str, str]:
        agent = agent_of(request, agent_id)
        await agent.dispose()
        return {"status": agent.status}

    return app


def app_from_environment() -> FastAPI:
    """The app configured by `ACTORLOOP_STORE` (default `sqlite:actorloop-app.db`) and
    `ACTORLOOP_PROVIDER` (a provider spec, default `sim`)."""
    provider, model = provider_from_spec(os.environ.get("ACTORLOOP_PROVIDER", "sim"))
    store = os.environ.get("ACTORLOOP_STORE", "sqlite:actorloop-app.db")
    return create_app(store=store, provider=provider, model=model or "sim")


app = app_from_environment()
