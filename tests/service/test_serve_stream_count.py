"""`/healthz` `open_streams` counts an event stream from its response's start, through a
backlog a slow client is still reading, to its end: a real SQLite session far larger than
the socket buffers, streamed to a client that reads one event and waits."""

from __future__ import annotations

from pathlib import Path

import httpx
import trio
from serve_kit import HeldModel, SseReader, app_config_for, running_server

from actorloop.runtime import AgentOptions, Runtime
from actorloop.runtime.testing import ScriptedProvider, reply

TURNS = 24
MESSAGE_CHARS = 1024 * 1024
"""24 MiB of backlog: more than loopback's send and receive buffers hold together, so the
server is still writing it while the client has read only its first event."""


def _big_session(tmp_path: Path) -> str:
    url = f"sqlite:{tmp_path / 'backlog.db'}"

    async def write() -> None:
        provider = ScriptedProvider([reply("ok") for _ in range(TURNS)])
        async with Runtime.open(store=url, provider=provider) as runtime:
            agent = await runtime.spawn(AgentOptions(model="m"), session_id="big")
            for turn in range(TURNS):
                await agent.send(f"{turn} " + "x" * MESSAGE_CHARS)

    trio.run(write)
    return url


async def _open_streams(client: httpx.AsyncClient) -> int:
    health = await client.get("/healthz")
    assert health.status_code == 200, health.text
    return int(health.json()["open_streams"])


def test_a_stream_is_counted_while_its_backlog_is_still_being_sent(tmp_path: Path) -> None:
    url = _big_session(tmp_path)

    async def main() -> None:
        config = app_config_for(HeldModel(), store=url)
        async with (
            running_server(config, store=url) as server,
            server.client() as reader,
            server.client() as prober,
        ):
            assert await _open_streams(prober) == 0
            for follow in ("false", "true"):
                path = f"/v1/sessions/big/events?follow={follow}"
                async with reader.stream("GET", path) as response:
                    assert response.status_code == 200
                    events = SseReader(response)
                    first = await events.next()
                    assert first is not None and first.id == "0"
                    # The client has read one event of 24 MiB: the rest is still to send.
                    assert await _open_streams(prober) == 1
                    middle = await events.read(TURNS)
                    assert middle[-1].data["seq"] == TURNS
                    assert await _open_streams(prober) == 1
                    if follow == "false":
                        rest = await events.read()
                        assert rest[-1].data["type"] == "turn/end"
                        assert await events.next() is None  # the stream ended
                await server.service.drain.until_streams_at_most(0)
                assert await _open_streams(prober) == 0

    trio.run(main)
