"""Provider set-up never blocks the trio thread: an HTTP adapter builds its client (an SSL
context loading certificates, 100 ms or more) in a worker thread, at `Runtime.open` or on
the first request. Checked by recording which thread built the client, not by timing (a
loaded machine stretches every step)."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest
from provider_kit import Waits
from sse_server import SseServer
from test_providers_openai import HELLO, collect, make_request

from actorloop.runtime import AgentOptions, Runtime
from actorloop.runtime.providers.openai import OpenAIChatProvider
from actorloop.runtime.providers.retry import RetryPolicy

KEY = "sk-test-setup-key-0004"


class BuiltOn:
    """The threads every httpx client of the test was built on: httpx.AsyncClient is
    replaced by a subclass that notes `threading.get_ident()` and builds the real one."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.threads: list[int] = []
        threads = self.threads

        class Recording(httpx.AsyncClient):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                threads.append(threading.get_ident())
                super().__init__(*args, **kwargs)

        self.client_class = Recording
        monkeypatch.setattr(httpx, "AsyncClient", Recording)


def provider_for(server: SseServer, waits: Waits) -> OpenAIChatProvider:
    return OpenAIChatProvider(server.url + "/v1", KEY, retry=RetryPolicy(sleep=waits))


async def test_a_first_request_builds_the_client_off_the_trio_thread(
    server: SseServer, waits: Waits, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = BuiltOn(monkeypatch)
    provider = provider_for(server, waits)
    server.push(HELLO)
    try:
        chunks = await collect(provider, make_request())
        # the client the request went through is the one recorded (so the record counts)
        assert isinstance(provider._http, built.client_class)
    finally:
        await provider.aclose()
    assert chunks
    [thread] = built.threads  # one client, built once
    assert thread != threading.get_ident()  # a worker thread, not the trio thread


async def test_runtime_open_builds_every_client_before_the_first_turn(
    server: SseServer, waits: Waits, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = BuiltOn(monkeypatch)
    provider = provider_for(server, waits)
    server.push(HELLO)
    async with Runtime.open(provider=provider) as rt:
        assert isinstance(provider._http, built.client_class)  # made while opening
        [thread] = built.threads
        assert thread != threading.get_ident()
        agent = await rt.spawn(AgentOptions(model="gpt-test"))
        assert (await agent.send("hi")).text == "Hello"
    assert built.threads == [thread]  # the turn reused it: no client built on the trio thread
