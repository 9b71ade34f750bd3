"""Decision 0007: user-written schemas reach the model in the order written, and every request
is rebuilt from the stored log byte for byte — through a real SQLite file, a resume, and an
old log whose schemas were stored sorted."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import orjson
import pytest
from provider_kit import FIXTURES, fixture_stream, rebuilt_requests
from sse_server import SseServer

from actorloop.codecs.converter import decode_event, encode_event
from actorloop.runtime import AgentOptions, Runtime, Tool, ToolContext
from actorloop.runtime.log.header_algebra import apply_delta, diff, headers_equal
from actorloop.runtime.log.verify import verify_log
from actorloop.runtime.model.events import RequestHeaderEvent, SessionEvent
from actorloop.runtime.model.header import (
    EpochHeader,
    HeaderDelta,
    LlmCallConfig,
    ResponseFormat,
    ToolSchema,
)
from actorloop.runtime.providers.anthropic import AnthropicProvider
from actorloop.runtime.providers.http import HttpSseProvider
from actorloop.runtime.providers.openai import OpenAIChatProvider
from actorloop.runtime.providers.responses import OpenAIResponsesProvider
from actorloop.runtime.providers.retry import RetryPolicy
from actorloop.runtime.stores.loading import load_session
from actorloop.runtime.stores.urls import open_store

KEY = "sk-test-order-key-0006"
WRITTEN = {
    "type": "object",
    "properties": {"reasoning": {"type": "string"}, "answer": {"type": "string"}},
    "required": ["reasoning", "answer"],
}
FLIPPED = {
    "type": "object",
    "properties": {"answer": {"type": "string"}, "reasoning": {"type": "string"}},
    "required": ["answer", "reasoning"],
}


async def execute(args: dict[str, Any], ctx: ToolContext) -> str:
    return "ok"


def submit(parameters: dict[str, Any]) -> Tool:
    return Tool("submit", "Submit an answer", parameters, execute)


Adapter = tuple[Callable[[SseServer], HttpSseProvider], str, Callable[[Any], Any], Any]
ADAPTERS: dict[str, Adapter] = {
    "chat": (
        lambda server: OpenAIChatProvider(server.url + "/v1", KEY, retry=RetryPolicy()),
        "openai_chat_gateway_cache_write.sse",
        lambda body: body["tools"][0]["function"]["parameters"],
        lambda body: body["response_format"]["json_schema"]["schema"],
    ),
    "anthropic": (
        lambda server: AnthropicProvider(server.url, KEY, retry=RetryPolicy()),
        "anthropic_redacted_thinking.sse",
        lambda body: body["tools"][0]["input_schema"],
        lambda body: body["output_config"]["format"]["schema"],
    ),
    "responses": (
        lambda server: OpenAIResponsesProvider(server.url + "/v1", KEY, retry=RetryPolicy()),
        "responses_text_cached.sse",
        lambda body: body["tools"][0]["parameters"],
        lambda body: body["text"]["format"]["schema"],
    ),
}


def properties(schema: Any) -> list[str]:
    return list(schema["properties"])


async def stored_events(url: str, session_id: str) -> tuple[SessionEvent, ...]:
    store = open_store(url)
    try:
        return (await load_session(store, session_id)).events
    finally:
        await store.close()


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
async def test_schemas_keep_their_order_and_requests_rebuild_byte_for_byte_from_sqlite(
    server: SseServer, tmp_path: Path, adapter: str
) -> None:
    make, fixture, tool_schema, answer_schema = ADAPTERS[adapter]
    url = f"sqlite:{tmp_path / 'sessions.db'}"
    server.push(*[fixture_stream(fixture)] * 3)
    options = AgentOptions(
        model="model-under-test",
        system="You are terse.",
        tools=(submit(WRITTEN),),
        response_format=ResponseFormat.json_schema(WRITTEN, name="verdict"),
        extra_body={"zeta": {"second": 2, "first": 1}},
    )

    async def flip_on_turn_two(agent: Any, config: LlmCallConfig, next: Any) -> Any:
        config = await next()
        if agent.session.open_turn == 2:
            config = attrs.evolve(
                config, response_format=ResponseFormat.json_schema(FLIPPED, name="verdict")
            )
        return config

    provider = make(server)
    async with Runtime.open(store=url, provider=provider, dev_invariants=True) as rt:
        rt.on("agent/request", flip_on_turn_two)
        agent = await rt.spawn(options)
        session_id = agent.id
        assert (await agent.send("one")).reason == "completed"
        assert (await agent.send("two")).reason == "completed"
    # A second instance (new process in spirit) resumes with the tool written the other way.
    resumed = attrs.evolve(options, tools=(submit(FLIPPED),))
    async with Runtime.open(store=url, provider=make(server), dev_invariants=True) as rt:
        again = await rt.resume(session_id, resumed)
        assert (await again.send("three")).reason == "completed"

    wire = [seen.body for seen in server.requests]
    bodies = [orjson.loads(body) for body in wire]
    assert [properties(tool_schema(body)) for body in bodies] == [
        ["reasoning", "answer"],
        ["reasoning", "answer"],
        ["answer", "reasoning"],
    ]
    assert [properties(answer_schema(body)) for body in bodies] == [
        ["reasoning", "answer"],
        ["answer", "reasoning"],
        ["reasoning", "answer"],
    ]
    assert all(list(body["zeta"]) == ["second", "first"] for body in bodies)

    events = await stored_events(url, session_id)
    headers = [event for event in events if event.type.startswith("request/header")]
    # The reordered response schema is a change the header records (a config delta), and
    # the resumed instance's tool order is in its resume snapshot.
    assert [event.type for event in headers] == [
        "request/header",
        "request/header-delta",
        "request/header",
    ]
    delta = headers[1].data
    assert isinstance(delta, HeaderDelta) and delta.config is not None and delta.tools is None
    assert isinstance(headers[2].data, RequestHeaderEvent) and headers[2].data.reason == "resume"

    rebuilt = rebuilt_requests(session_id, events)
    assert [provider.body_bytes(request) for request in rebuilt] == wire


async def test_a_log_written_with_sorted_schemas_still_loads_verifies_and_resumes(
    server: SseServer, tmp_path: Path
) -> None:
    """tests/fixtures/providers/pre-0007 was written by the code before decision 0007 (its
    schema keys are sorted: answer before reasoning)."""
    shutil.copytree(FIXTURES / "pre-0007", tmp_path / "pre-0007")
    url = f"jsonl:{tmp_path}"
    events = await stored_events(url, "pre-0007")
    [header] = [event.data for event in events if isinstance(event.data, RequestHeaderEvent)]
    assert header.header.tools is not None
    assert properties(header.header.tools[0].parameters) == ["answer", "reasoning"]
    store = open_store(url)
    try:
        meta, _ = await store.load("pre-0007")
    finally:
        await store.close()
    report = verify_log(meta, events)
    assert report.requests_checked == 2 and report.requests_without_digest == 0

    server.push(fixture_stream("openai_chat_gateway_cache_write.sse"))
    provider = OpenAIChatProvider(server.url + "/v1", KEY, retry=RetryPolicy())
    options = AgentOptions(model="gpt-test", system="You are terse.", tools=(submit(WRITTEN),))
    async with Runtime.open(store=url, provider=provider, dev_invariants=True) as rt:
        agent = await rt.resume("pre-0007", options)
        assert (await agent.send("again")).reason == "completed"
    [seen] = server.requests
    assert properties(orjson.loads(seen.body)["tools"][0]["function"]["parameters"]) == [
        "reasoning",
        "answer",
    ]
    events = await stored_events(url, "pre-0007")
    assert provider.body_bytes(rebuilt_requests("pre-0007", events)[-1]) == seen.body
    assert verify_log(meta, events).requests_checked == 3


def test_a_property_reorder_is_a_header_change_a_delta_expresses() -> None:
    old = EpochHeader(LlmCallConfig("m"), None, (ToolSchema("submit", "", WRITTEN),))
    new = EpochHeader(LlmCallConfig("m"), None, (ToolSchema("submit", "", FLIPPED),))
    assert not headers_equal(old, new)
    delta = diff(old, new)
    assert delta is not None and delta.tools is not None
    assert [tool.name for tool in delta.tools.changed] == ["submit"]
    applied = apply_delta(old, delta)
    assert headers_equal(applied, new)
    # The delta survives the codec with its order.
    event = SessionEvent("request/header-delta", 3, 0, delta)
    decoded = decode_event(encode_event(event)).data
    assert isinstance(decoded, HeaderDelta) and decoded.tools is not None
    assert properties(decoded.tools.changed[0].parameters) == ["answer", "reasoning"]


def test_event_bytes_are_canonical_outside_the_user_written_json() -> None:
    config = LlmCallConfig(
        "m",
        response_format=ResponseFormat.json_schema(FLIPPED),
        extra_body={"b": {"y": 1, "x": 2}, "a": 1},
        metadata={"z": "1", "a": "2"},
    )
    tool = ToolSchema("submit", "d", FLIPPED)
    event = SessionEvent(
        "request/header", 0, 0, RequestHeaderEvent(EpochHeader(config, "s", (tool,)), "initial")
    )
    raw = encode_event(event)
    assert raw.startswith(b'{"data":{"header":{"config":{"extra_body":{"b":{"y":1,"x":2},"a":1}')
    assert b'"metadata":{"a":"2","z":"1"}' in raw  # not order-significant: sorted
    assert b'"parameters":{"type":"object","properties":{"answer"' in raw
    assert encode_event(decode_event(raw)) == raw


def test_a_config_equal_to_its_defaults_encodes_as_before() -> None:
    event = SessionEvent(
        "request/header",
        0,
        0,
        RequestHeaderEvent(EpochHeader(LlmCallConfig("m", temperature=0.5)), "initial"),
    )
    assert encode_event(event) == (
        b'{"data":{"header":{"config":{"model":"m","temperature":0.5}},"reason":"initial"},'
        b'"seq":0,"time":0,"type":"request/header"}'
    )
