"""Retry waits have a floor (`RetryPolicy.min_delay`): a `retry-after` date already past or a
jittered draw near zero never turns into back-to-back retries. Over the real local server,
with the backoff sleep injected so the waits are recorded, not slept."""

from __future__ import annotations

import email.utils
import time

import pytest
from provider_kit import Waits
from sse_server import SseServer, json_reply, openai_stream

from actorloop.runtime.errors import ProviderError
from actorloop.runtime.log.request import Request
from actorloop.runtime.model.header import LlmCallConfig
from actorloop.runtime.model.messages import Message
from actorloop.runtime.providers.openai import OpenAIChatProvider
from actorloop.runtime.providers.retry import RetryPolicy

KEY = "sk-test-backoff-key-0009"
REQUEST = Request("s", LlmCallConfig("m"), None, (), (Message.user("hi"),))
HELLO = openai_stream(
    {"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}]}
)


async def drain(provider: OpenAIChatProvider) -> None:
    async for _chunk in provider.stream(REQUEST):
        pass


async def test_a_retry_after_date_in_the_past_waits_the_floor(
    server: SseServer, waits: Waits
) -> None:
    past = email.utils.formatdate(time.time() - 3600, usegmt=True)
    busy = json_reply(429, {"error": {"message": "slow down"}}, [("retry-after", past)])
    server.push(busy, busy, busy, busy)
    provider = OpenAIChatProvider(server.url + "/v1", KEY, retry=RetryPolicy(sleep=waits))
    with pytest.raises(ProviderError) as caught:
        await drain(provider)
    assert caught.value.code == "RATE_LIMITED"
    assert len(server.requests) == 4
    assert waits.calls == [0.1, 0.1, 0.1]


async def test_every_jittered_backoff_is_at_least_the_floor(
    server: SseServer, waits: Waits
) -> None:
    # A base this small draws waits far below the floor: every one of them is raised to it.
    policy = RetryPolicy(max_retries=5, base_delay=1e-6, min_delay=0.25, sleep=waits)
    server.push(*[json_reply(503, {"error": {"message": "down"}})] * 5, HELLO)
    await drain(OpenAIChatProvider(server.url + "/v1", KEY, retry=policy))
    assert len(server.requests) == 6
    assert waits.calls == [0.25] * 5
