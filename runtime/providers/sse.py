"""Server-sent events: an incremental parser of `text/event-stream` bytes into events.

Fields other than `event`, `data` and `id` (e.g. `retry`) are ignored: adapters never
reconnect, they retry whole requests before the first byte.
"""

from __future__ import annotations

import re

from attrs import frozen

# Lines end with CRLF, LF or CR (WHATWG event-stream grammar). Splitting bytes before
# decoding is safe: UTF-8 continuation bytes never equal CR or LF.
_EOL = re.compile(rb"\r\n|\r|\n")
_BOM = b"\xef\xbb\xbf"


@frozen
class SseEvent:
    """One dispatched event; `event` defaults to "message" as the spec says."""

    event: str
    data: str
    id: str | None = None


class SseDecoder:
    """Feed raw bytes in any split; get complete events back (incomplete tail is kept)."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._started = False
        self._event = ""
        self._data: list[str] = []
        self._last_id: str | None = None

    def feed(self, data: bytes) -> list[SseEvent]:
        self._buffer += data
        if not self._started:
            if len(self._buffer) < len(_BOM) and _BOM.startswith(bytes(self._buffer)):
                return []
            if self._buffer.startswith(_BOM):
                del self._buffer[: len(_BOM)]
            self._started = True
        events: list[SseEvent] = []
        consumed = 0
        for match in _EOL.finditer(self._buffer):
            # A CR at the very end may be the first half of a CRLF split across reads.
            if match.group() == b"\r" and match.end() == len(self._buffer):
                break
            self._line(bytes(self._buffer[consumed : match.start()]), events)
            consumed = match.end()
        del self._buffer[:consumed]
        return events

    def _line(self, raw: bytes, events: list[SseEvent]) -> None:
        line = raw.decode("utf-8", "replace")
        if not line:
            if self._data:
                events.append(
                    SseEvent(self._event or "message", "\n".join(self._data), self._last_id)
                )
            self._event = ""
            self._data = []
            return
        if line.startswith(":"):
            return
        field, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._event = value
        elif field == "id" and "\x00" not in value:
            self._last_id = value
