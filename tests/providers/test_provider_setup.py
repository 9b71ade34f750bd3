"""Provider set-up never blocks the trio thread: an HTTP adapter builds its client (an SSL
context loading certificates, 100 ms or more) in a worker thread, at `Runtime.open` or on
the first request. Measured with a trio instrument timing every task step."""

from __future__ import annotations

import gc
import time

import trio
from provider_kit import Waits
from sse_server import SseServer
from test_providers_openai import HELLO, collect, make_request

from actorloop.runtime import AgentOptions, Runtime
from actorloop.runtime.providers.openai import OpenAIChatProvider
from actorloop.runtime.providers.retry import RetryPolicy

KEY = "sk-test-setup-key-0004"
LONGEST_ALLOWED = 0.02
"""A task step of the trio thread may take this long at most while a provider is set up
(with the cyclic GC paused, so a collection does not count); building an httpx client on
the trio thread took 30-140 ms on this project's machines (the first one in a process
loads the certificates)."""


class LongestStep(trio.abc.Instrument):
    """The longest single task step (the trio thread running one task, uninterrupted)."""

    def __init__(self) -> None:
        self.longest = 0.0
        self.started: float | None = None  # the step that added the instrument is not timed

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.started = time.perf_counter()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if self.started is not None:
            self.longest = max(self.longest, time.perf_counter() - self.started)


def provider_for(server: SseServer, waits: Waits) -> OpenAIChatProvider:
    return OpenAIChatProvider(server.url + "/v1", KEY, retry=RetryPolicy(sleep=waits))


async def test_a_first_request_builds_the_client_off_the_trio_thread(
    server: SseServer, waits: Waits
) -> None:
    provider = provider_for(server, waits)
    server.push(HELLO)
    steps = LongestStep()
    gc.disable()
    trio.lowlevel.add_instrument(steps)
    try:
        chunks = await collect(provider, make_request())
    finally:
        trio.lowlevel.remove_instrument(steps)
        gc.enable()
        await provider.aclose()
    assert chunks and steps.longest < LONGEST_ALLOWED, f"a step took {steps.longest:.3f}s"


async def test_runtime_open_builds_every_client_before_the_first_turn(
    server: SseServer, waits: Waits
) -> None:
    provider = provider_for(server, waits)
    steps = LongestStep()
    server.push(HELLO)
    gc.disable()
    trio.lowlevel.add_instrument(steps)
    try:
        async with Runtime.open(provider=provider) as rt:
            assert provider._http is not None  # made while opening, before any request
            agent = await rt.spawn(AgentOptions(model="gpt-test"))
            assert (await agent.send("hi")).text == "Hello"
    finally:
        trio.lowlevel.remove_instrument(steps)
        gc.enable()
    assert steps.longest < LONGEST_ALLOWED, f"a step took {steps.longest:.3f}s"
