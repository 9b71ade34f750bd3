"""API keys never leak: not in chunks, exception text (incl. chained causes), logs or reprs."""

from __future__ import annotations

import logging
import pickle
import socket
import traceback
from collections.abc import Callable

import pytest
from sse_server import Reply, SseServer, anthropic_stream, json_reply, openai_stream

from actorloop.runtime.errors import ProviderError
from actorloop.runtime.log.request import Request
from actorloop.runtime.model.header import LlmCallConfig
from actorloop.runtime.model.messages import Message
from actorloop.runtime.providers.anthropic import AnthropicProvider
from actorloop.runtime.providers.http import ApiKey, HttpSseProvider
from actorloop.runtime.providers.openai import OpenAIChatProvider
from actorloop.runtime.providers.retry import RetryPolicy

KEY = "sk-live-SECRET-9f8e7d6c5b4a3210"
REQUEST = Request("s", LlmCallConfig("m"), "sys", (), (Message.user("hi"),))


async def no_wait(seconds: float) -> None:
    """Backoff sleeps are skipped: these tests are about what gets printed."""


def make_openai(base: str, key: str | None = KEY) -> HttpSseProvider:
    return OpenAIChatProvider(base + "/v1", key, retry=RetryPolicy(max_retries=2, sleep=no_wait))


def make_anthropic(base: str, key: str | None = KEY) -> HttpSseProvider:
    return AnthropicProvider(base, key, retry=RetryPolicy(max_retries=2, sleep=no_wait))


FACTORIES = {"openai": make_openai, "anthropic": make_anthropic}
OK = {
    "openai": openai_stream(
        {"choices": [{"index": 0, "delta": {"content": "fine"}, "finish_reason": "stop"}]}
    ),
    "anthropic": anthropic_stream(
        {"type": "message_start", "message": {"usage": {"input_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ok"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {}},
        {"type": "message_stop"},
    ),
}
ECHO = {"error": {"type": "authentication_error", "message": f"Incorrect API key: {KEY}"}}
STREAM_ECHO = {
    "openai": openai_stream({"error": {"message": f"key {KEY} revoked"}}, done=False),
    "anthropic": anthropic_stream(
        {"type": "error", "error": {"type": "api_error", "message": f"key {KEY} revoked"}}
    ),
}


@pytest.fixture(params=sorted(FACTORIES))
def flavour(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def exception_text(exc: BaseException) -> str:
    return str(exc) + repr(exc) + "".join(traceback.format_exception(exc))


def assert_clean_logs(caplog: pytest.LogCaptureFixture) -> None:
    assert caplog.records, "expected the run to log something at DEBUG"
    for record in caplog.records:
        assert KEY not in record.getMessage()
        assert KEY not in repr(record.args)
    assert KEY not in caplog.text


async def run(provider: HttpSseProvider) -> str:
    return repr([chunk async for chunk in provider.stream(REQUEST)])


async def test_success_and_stream_error_events_are_clean(
    server: SseServer, flavour: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server.push(OK[flavour], STREAM_ECHO[flavour])
    provider = FACTORIES[flavour](server.url)
    assert KEY not in await run(provider)
    echoed = await run(provider)
    assert "revoked" in echoed and KEY not in echoed
    assert KEY not in repr(provider) and KEY not in str(provider)
    sent = server.requests[0].headers
    assert KEY in (sent.get("authorization", "") + sent.get("x-api-key", ""))
    assert_clean_logs(caplog)


@pytest.mark.parametrize(
    ("replies", "code"),
    [
        ([json_reply(401, ECHO)], "AUTHENTICATION"),
        ([json_reply(500, ECHO)] * 3, "PROVIDER_ERROR"),
        ([json_reply(429, ECHO, [("retry-after", "0")])] * 3, "RATE_LIMITED"),
        ([Reply(pieces=(b"data: {}\n\n", b"data: {}\n\n"), drop_after=1)], "STREAM_INTERRUPTED"),
    ],
    ids=["401-echoing-key", "500-exhausted", "429-exhausted", "dropped-mid-stream"],
)
async def test_failures_are_clean(
    server: SseServer,
    flavour: str,
    caplog: pytest.LogCaptureFixture,
    replies: list[Reply],
    code: str,
) -> None:
    caplog.set_level(logging.DEBUG)
    server.push(*replies)
    provider = FACTORIES[flavour](server.url)
    with pytest.raises(ProviderError) as caught:
        await run(provider)
    assert caught.value.code == code
    assert KEY not in exception_text(caught.value)
    assert_clean_logs(caplog)


async def test_connection_refused_is_clean(flavour: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    provider = FACTORIES[flavour](f"http://127.0.0.1:{port}")
    with pytest.raises(ProviderError) as caught:
        await run(provider)
    assert caught.value.code == "CONNECTION_ERROR"
    assert KEY not in exception_text(caught.value)
    assert_clean_logs(caplog)


@pytest.mark.parametrize(
    ("env", "factory"),
    [("OPENAI_API_KEY", make_openai), ("ANTHROPIC_API_KEY", make_anthropic)],
)
async def test_key_from_environment_is_used_but_not_shown(
    server: SseServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    env: str,
    factory: Callable[[str, str | None], HttpSseProvider],
) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv(env, KEY)
    provider = factory(server.url, None)
    server.push(json_reply(401, ECHO))
    with pytest.raises(ProviderError) as caught:
        await run(provider)
    sent = server.requests[0].headers
    assert KEY in (sent.get("authorization", "") + sent.get("x-api-key", ""))
    assert KEY not in exception_text(caught.value)
    assert KEY not in repr(provider) and KEY not in repr(vars(provider))
    assert_clean_logs(caplog)


async def test_missing_key_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ProviderError) as caught:
        await run(make_openai("http://127.0.0.1:9", None))
    assert caught.value.code == "AUTHENTICATION"
    assert "OPENAI_API_KEY" in str(caught.value)


def test_api_key_wrapper_hides_its_value() -> None:
    key = ApiKey(KEY, "a test")
    assert KEY not in repr(key) and KEY not in str(key) and KEY not in f"{key}"
    assert key.redact(f"header was {KEY}") == "header was ***"
    with pytest.raises(TypeError):
        pickle.dumps(key)


@pytest.mark.parametrize("bad", [KEY + "\n", KEY + "\r", "sk-with space"])
def test_a_key_with_whitespace_is_refused_without_echoing_it(bad: str) -> None:
    from actorloop.runtime.errors import ProviderError
    from actorloop.runtime.providers.anthropic import AnthropicProvider
    from actorloop.runtime.providers.openai import OpenAIChatProvider

    for factory in (OpenAIChatProvider, AnthropicProvider):
        with pytest.raises(ProviderError) as caught:
            factory(api_key=bad)
        assert caught.value.code == "AUTHENTICATION"
        assert bad.strip() not in str(caught.value)
        assert "whitespace or control characters" in str(caught.value)
