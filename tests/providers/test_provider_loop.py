"""Full agent loops (dev invariants on) against the real adapters over a local SSE server,
and against the SimProvider's cache model."""

from __future__ import annotations

from typing import Any

import pytest
from provider_kit import fixture_stream
from sse_server import Reply, SseServer, anthropic_stream, openai_stream, sse_event

from actorloop.codecs.jsonvalue import canonical_json
from actorloop.runtime import (
    AgentOptions,
    Message,
    Reasoning,
    Runtime,
    TokenUsage,
    Tool,
    ToolCall,
    ToolContext,
)
from actorloop.runtime.providers.anthropic import AnthropicProvider
from actorloop.runtime.providers.openai import OpenAIChatProvider
from actorloop.runtime.providers.responses import OpenAIResponsesProvider
from actorloop.runtime.providers.retry import RetryPolicy
from actorloop.runtime.providers.sim import SimProvider

KEY = "sk-test-loop-key-0003"
OPENER = Message.user("skill catalogue: A, B, C")
LOOKUP_SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}}


async def no_wait(seconds: float) -> None:
    """Backoff is irrelevant here: no request in these scripts fails."""


async def session_prefix(agent: Any, value: Any, next: Any) -> Any:
    return (OPENER, *await next())


def lookup_tool(calls: list[dict[str, Any]]) -> Tool:
    async def execute(args: dict[str, Any], ctx: ToolContext) -> str:
        calls.append(args)
        return f"found {args['q']}"

    return Tool("lookup", "Find a word", LOOKUP_SCHEMA, execute)


def usages(agent: Any) -> list[TokenUsage]:
    return [event.data.usage for event in agent.session.events if event.type == "assistant/message"]


async def test_openai_loop_with_a_tool_call(server: SseServer) -> None:
    def chunk(**delta: Any) -> dict[str, Any]:
        return {"choices": [{"index": 0, "delta": delta}]}

    server.push(
        openai_stream(
            chunk(
                tool_calls=[
                    {"index": 0, "id": "call_1", "function": {"name": "lookup", "arguments": ""}}
                ]
            ),
            chunk(tool_calls=[{"index": 0, "function": {"arguments": '{"q": '}}]),
            chunk(tool_calls=[{"index": 0, "function": {"arguments": '"y"}'}}]),
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
            {"choices": [], "usage": {"prompt_tokens": 40, "completion_tokens": 9}},
        ),
        openai_stream(
            chunk(content="It is y."),
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            {
                "choices": [],
                "usage": {
                    "prompt_tokens": 60,
                    "completion_tokens": 4,
                    "prompt_tokens_details": {"cached_tokens": 32},
                },
            },
        ),
    )
    provider = OpenAIChatProvider(server.url + "/v1", KEY, retry=RetryPolicy(sleep=no_wait))
    calls: list[dict[str, Any]] = []
    options = AgentOptions(model="gpt-test", system="You are terse.", tools=(lookup_tool(calls),))
    async with Runtime.open(store="memory:", provider=provider, dev_invariants=True) as rt:
        rt.on("agent/session-prefix", session_prefix)
        agent = await rt.spawn(options)
        result = await agent.send("hi")
        assert result.reason == "completed"
        assert calls == [{"q": "y"}]
        assert agent.session.derive_messages()[-1] == Message.assistant("It is y.")
        assert usages(agent) == [
            TokenUsage(input=40, output=9),
            TokenUsage(input=28, output=4, cache_read=32),
        ]
    first, second = (seen.json() for seen in server.requests)
    assert second["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "skill catalogue: A, B, C"},
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"q": "y"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "found y"},
    ]
    assert second["messages"][:3] == first["messages"]
    body1, body2 = (seen.body for seen in server.requests)
    tail = canonical_json({"content": "hi", "role": "user"})
    end = body1.index(tail) + len(tail)
    assert body2[:end] == body1[:end]


async def test_anthropic_loop_with_a_tool_call(server: SseServer) -> None:
    def start(usage: dict[str, int]) -> dict[str, Any]:
        return {"type": "message_start", "message": {"usage": usage}}

    server.push(
        anthropic_stream(
            start({"input_tokens": 20, "cache_creation_input_tokens": 1100}),
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "tool_use", "id": "toolu_1", "name": "lookup"},
            },
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": '{"q": "z"}'},
            },
            {"type": "content_block_stop", "index": 0},
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use"},
                "usage": {"output_tokens": 8},
            },
            {"type": "message_stop"},
        ),
        anthropic_stream(
            start(
                {
                    "input_tokens": 3,
                    "cache_read_input_tokens": 1100,
                    "cache_creation_input_tokens": 30,
                }
            ),
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "z it is"},
            },
            {"type": "content_block_stop", "index": 0},
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": 3},
            },
            {"type": "message_stop"},
        ),
    )
    provider = AnthropicProvider(server.url, KEY, retry=RetryPolicy(sleep=no_wait))
    calls: list[dict[str, Any]] = []
    options = AgentOptions(
        model="claude-test", system="You are terse.", tools=(lookup_tool(calls),)
    )
    async with Runtime.open(store="memory:", provider=provider, dev_invariants=True) as rt:
        rt.on("agent/session-prefix", session_prefix)
        agent = await rt.spawn(options)
        result = await agent.send("hi")
        assert result.reason == "completed"
        assert calls == [{"q": "z"}]
        assert usages(agent) == [
            TokenUsage(input=20, output=8, cache_write=1100),
            TokenUsage(input=3, output=3, cache_read=1100, cache_write=30),
        ]
    second = server.requests[1].json()
    ephemeral = {"type": "ephemeral"}
    assert second["tools"][-1]["cache_control"] == ephemeral
    assert second["system"][-1]["cache_control"] == ephemeral
    assert second["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "skill catalogue: A, B, C", "cache_control": ephemeral}
            ],
        },
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": "z"}}
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [{"type": "text", "text": "found z"}],
                    "cache_control": ephemeral,
                }
            ],
        },
    ]


async def test_responses_loop_replays_encrypted_reasoning_from_the_log(server: SseServer) -> None:
    def event(payload: dict[str, Any]) -> bytes:
        return sse_event(payload, payload["type"])

    reasoning = {"type": "reasoning", "id": "rs_1", "summary": []}
    call = {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": ""}
    server.push(
        Reply(
            pieces=(
                event({"type": "response.output_item.added", "output_index": 0, "item": reasoning}),
                event(
                    {
                        "type": "response.output_item.done",
                        "output_index": 0,
                        "item": {**reasoning, "encrypted_content": "enc-1"},
                    }
                ),
                event({"type": "response.output_item.added", "output_index": 1, "item": call}),
                event(
                    {
                        "type": "response.function_call_arguments.delta",
                        "output_index": 1,
                        "delta": '{"q": "w"}',
                    }
                ),
                event({"type": "response.output_item.done", "output_index": 1, "item": call}),
                event(
                    {
                        "type": "response.completed",
                        "response": {
                            "usage": {
                                "input_tokens": 50,
                                "input_tokens_details": {"cached_tokens": 0},
                                "output_tokens": 12,
                                "output_tokens_details": {"reasoning_tokens": 8},
                            }
                        },
                    }
                ),
            )
        ),
        fixture_stream("responses_text_cached.sse"),
    )
    provider = OpenAIResponsesProvider(server.url + "/v1", KEY, retry=RetryPolicy(sleep=no_wait))
    calls: list[dict[str, Any]] = []
    options = AgentOptions(model="gpt-test", system="You are terse.", tools=(lookup_tool(calls),))
    async with Runtime.open(store="memory:", provider=provider, dev_invariants=True) as rt:
        rt.on("agent/session-prefix", session_prefix)
        agent = await rt.spawn(options)
        result = await agent.send("hi")
        assert result.reason == "completed"
        assert calls == [{"q": "w"}]
        messages = agent.session.derive_messages()
        assert messages[1] == Message(
            "assistant",
            (
                Reasoning("", encrypted_content="enc-1", item_id="rs_1"),
                ToolCall("call_1", "lookup", '{"q": "w"}'),
            ),
        )
        assert messages[-1] == Message.assistant("It is sunny in Paris.")
        assert usages(agent) == [
            TokenUsage(input=50, output=12, reasoning=8),
            TokenUsage(input=252, output=7, cache_read=2048),
        ]
    first, second = (seen.json() for seen in server.requests)
    assert first["store"] is False and second["input"][:2] == first["input"]
    assert second["input"][2:] == [
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "enc-1"},
        {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": '{"q": "w"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "found w"},
    ]


@pytest.mark.parametrize("mode", ["anthropic", "openai"])
async def test_sim_loop_reads_the_cache_on_every_request_after_the_first(mode: Any) -> None:
    catalogue = "".join(f"- skill {i}: does thing {i}\n" for i in range(300))

    async def long_prefix(agent: Any, value: Any, next: Any) -> Any:
        return (Message.user(catalogue), *await next())

    sim = SimProvider(mode, output="noted")
    async with Runtime.open(store="memory:", provider=sim, dev_invariants=True) as rt:
        rt.on("agent/session-prefix", long_prefix)
        agent = await rt.spawn(AgentOptions(model="sim-model", system="You are terse."))
        for text in ("one", "two", "three", "four"):
            assert (await agent.send(text)).reason == "completed"
        recorded = usages(agent)
    assert recorded == sim.usages
    assert recorded[0].cache_read == 0
    assert all(usage.cache_read >= 1024 for usage in recorded[1:])
    assert all(usage.cache_write == 0 for usage in recorded) == (mode == "openai")
