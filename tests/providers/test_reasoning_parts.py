"""A reasoning summary of several parts keeps its parts (issue 39 item 11): in the chunk
(`ReasoningDelta.part`), in `Reasoning.parts` and in the log — while a one-part summary, and
every log written before, encodes exactly as it did."""

from __future__ import annotations

import orjson
import pytest
from provider_kit import Waits
from sse_server import Reply, SseServer, sse_event

from actorloop.codecs.converter import _fast_event, decode_event, encode_event
from actorloop.runtime.errors import ProviderError, StreamProtocolError
from actorloop.runtime.log.request import Request
from actorloop.runtime.model.chunks import (
    BlockEnd,
    BlockStart,
    ChunkAssembler,
    ReasoningDelta,
    StreamChunk,
    check_chunk,
)
from actorloop.runtime.model.events import AssistantChunk, AssistantMessage, SessionEvent
from actorloop.runtime.model.header import LlmCallConfig
from actorloop.runtime.model.messages import Message, Reasoning
from actorloop.runtime.providers.responses import OpenAIResponsesProvider
from actorloop.runtime.providers.retry import RetryPolicy

# Written before `parts` existed: a joined two-part summary and its chunk.
OLD_MESSAGE = (
    b'{"data":{"content":[{"encrypted_content":"enc","item_id":"rs_1","text":"a\\n\\nb",'
    b'"type":"reasoning"},{"text":"hi","type":"text"}],"model":"gpt-5",'
    b'"provider":"openai-responses","request_digest":"' + b"d" * 64 + b'","step":1,"turn":1,'
    b'"usage":{"input":3,"output":2}},"seq":7,"time":1733040000007,"type":"assistant/message"}'
)
OLD_CHUNK = (
    b'{"data":{"chunk":{"index":0,"text":"\\n\\nb","type":"reasoning_delta"},"step":1,"turn":1},'
    b'"seq":5,"time":1733040000005,"type":"assistant/chunk"}'
)


@pytest.mark.parametrize("raw", [OLD_MESSAGE, OLD_CHUNK])
def test_an_old_log_decodes_and_re_encodes_byte_identically(raw: bytes) -> None:
    event = decode_event(raw)
    assert encode_event(event) == raw
    if isinstance(event.data, AssistantMessage):
        reasoning = event.data.content[0]
        assert isinstance(reasoning, Reasoning) and reasoning.parts is None
    else:
        assert isinstance(event.data, AssistantChunk)
        assert isinstance(event.data.chunk, ReasoningDelta) and event.data.chunk.part is None


def test_parts_round_trip_through_the_log() -> None:
    reasoning = Reasoning("a\n\nb", item_id="rs_1", parts=("a", "b"))
    message = AssistantMessage(1, 1, (reasoning,), "p", "m", None, None)
    chunk = AssistantChunk(1, 1, ReasoningDelta(0, "b", part=1))
    for data, type_ in ((message, "assistant/message"), (chunk, "assistant/chunk")):
        event = SessionEvent(type_, 1, 1, data)
        raw = encode_event(event)
        assert decode_event(raw) == event
        assert _fast_event(orjson.loads(raw)) == event  # the generated decoder takes it too
        assert (b'"parts":["a","b"]' if data is message else b'"part":1') in raw


def assembled(*deltas: ReasoningDelta) -> Reasoning:
    assembler = ChunkAssembler()
    for chunk in (BlockStart(0, "reasoning"), *deltas, BlockEnd(0)):
        assembler.feed(check_chunk(chunk))
    [block] = assembler.content()
    assert isinstance(block, Reasoning)
    return block


def test_the_assembler_keeps_the_parts_and_joins_them_in_text() -> None:
    block = assembled(
        ReasoningDelta(0, "fi"),
        ReasoningDelta(0, "rst", part=0),
        ReasoningDelta(0, "sec", part=1),
        ReasoningDelta(0, "ond"),
        ReasoningDelta(0, "", item_id="rs_1"),
    )
    assert block == Reasoning("first\n\nsecond", item_id="rs_1", parts=("first", "second"))
    assert assembled(ReasoningDelta(0, "one")).parts is None


def test_a_part_out_of_order_or_negative_is_refused() -> None:
    with pytest.raises(StreamProtocolError, match="summary part 2 after part 0"):
        assembled(ReasoningDelta(0, "a"), ReasoningDelta(0, "c", part=2))
    with pytest.raises(StreamProtocolError, match="summary part 0 after part 1"):
        assembled(ReasoningDelta(0, "b", part=1), ReasoningDelta(0, "a", part=0))
    with pytest.raises(StreamProtocolError, match=r"ReasoningDelta\.part must be an int >= 0"):
        check_chunk(ReasoningDelta(0, "a", part=-1))


def provider(server: SseServer, waits: Waits) -> OpenAIResponsesProvider:
    return OpenAIResponsesProvider(server.url + "/v1", "sk-parts", retry=RetryPolicy(sleep=waits))


def request() -> Request:
    return Request("s", LlmCallConfig("o4-mini"), None, (), (Message.user("hi"),))


async def collect(server: SseServer, waits: Waits) -> list[StreamChunk]:
    return [chunk async for chunk in provider(server, waits).stream(request())]


def events(*payloads: dict[str, object]) -> Reply:
    return Reply(pieces=tuple(sse_event(payload, str(payload["type"])) for payload in payloads))


REASONING_ITEM = {"type": "reasoning", "id": "rs_2", "encrypted_content": "enc"}
COMPLETED = {"type": "response.completed", "response": {"status": "completed"}}


def summary_delta(part: int, text: str) -> dict[str, object]:
    return {
        "type": "response.reasoning_summary_text.delta",
        "output_index": 0,
        "summary_index": part,
        "delta": text,
    }


async def test_summary_parts_from_the_terminal_item_when_no_delta_came(
    server: SseServer, waits: Waits
) -> None:
    summary = [{"type": "summary_text", "text": "one"}, {"type": "summary_text", "text": "two"}]
    server.push(
        events(
            {"type": "response.output_item.added", "output_index": 0, "item": REASONING_ITEM},
            {
                "type": "response.output_item.done",
                "output_index": 0,
                "item": {**REASONING_ITEM, "summary": summary},
            },
            COMPLETED,
        )
    )
    chunks = await collect(server, waits)
    assert chunks[1:3] == [ReasoningDelta(0, "one"), ReasoningDelta(0, "two", part=1)]
    assembler = ChunkAssembler()
    for chunk in chunks:
        assembler.feed(chunk)
    [block] = assembler.content()
    assert block == Reasoning(
        "one\n\ntwo", encrypted_content="enc", item_id="rs_2", parts=("one", "two")
    )


async def test_a_summary_part_out_of_order_is_a_protocol_error(
    server: SseServer, waits: Waits
) -> None:
    server.push(
        events(
            {"type": "response.output_item.added", "output_index": 0, "item": REASONING_ITEM},
            {
                "type": "response.reasoning_summary_part.added",
                "output_index": 0,
                "summary_index": 0,
            },
            summary_delta(0, "a"),
            summary_delta(2, "c"),
            COMPLETED,
        )
    )
    with pytest.raises(ProviderError, match="reasoning summary part 2 after part 0") as caught:
        await collect(server, waits)
    assert caught.value.code == "PROTOCOL_ERROR"
