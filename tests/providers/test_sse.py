"""The SSE decoder: events survive any split of the byte stream."""

from __future__ import annotations

import pytest

from actorloop.runtime.providers.sse import SseDecoder, SseEvent

STREAM = (
    b"\xef\xbb\xbf: comment line\r\n"
    b"event: message_start\r\n"
    b'data: {"a":\r\n'
    b"data:  1}\r\n"
    b"\r\n"
    b"id: 7\rdata: caf\xc3\xa9\r\r"
    b"data\n\n"
    b"event: only-event\n\n"
    b"retry: 10\ndata: last\n\n"
)
EXPECTED = [
    SseEvent("message_start", '{"a":\n 1}'),
    SseEvent("message", "café", "7"),
    SseEvent("message", "", "7"),
    SseEvent("message", "last", "7"),
]


def decode(pieces: list[bytes]) -> list[SseEvent]:
    decoder = SseDecoder()
    return [event for piece in pieces for event in decoder.feed(piece)]


def test_whole_stream() -> None:
    assert decode([STREAM]) == EXPECTED


@pytest.mark.parametrize("size", [1, 2, 3, 5, 8, 13])
def test_every_split_gives_the_same_events(size: int) -> None:
    pieces = [STREAM[i : i + size] for i in range(0, len(STREAM), size)]
    assert decode(pieces) == EXPECTED


def test_crlf_split_across_reads_is_one_line_end() -> None:
    decoder = SseDecoder()
    assert decoder.feed(b"data: x\r") == []
    assert decoder.feed(b"\n\r") == []
    assert decoder.feed(b"\n") == [SseEvent("message", "x")]


def test_unterminated_event_is_not_dispatched() -> None:
    assert decode([b"data: partial\n"]) == []
