"""JSONL framing for the file store (pure, no I/O): checksummed lines and the torn-tail scan.

A log file is a sequence of lines `<crc32 of JSON, 8 lowercase hex> <canonical JSON>\\n`.
Line 1 is the session meta record; line `seq + 2` is event `seq`. A line whose checksum,
JSON, envelope or seq does not check out is damaged. Damage after the last intact
`turn/end` is a torn tail (the bytes from the first damaged line on are cut off); damage at
or before it is corruption (SessionCorruptError naming file and line).
"""

from __future__ import annotations

import mmap
import zlib
from typing import TypeAlias

import orjson
from attrs import frozen

from actorloop.codecs.converter import decode_event, encode_event
from actorloop.codecs.rows import decode_meta, encode_meta
from actorloop.runtime.errors import (
    SessionCorruptError,
    SessionFormatError,
    SessionFormatUnsupported,
)
from actorloop.runtime.events import SessionEvent, TurnEnd
from actorloop.runtime.meta import SessionMeta

LogBuffer: TypeAlias = bytes | mmap.mmap
"""A whole log file's bytes, or an mmap of it (read by slicing and find/rfind only)."""

_CRC_WIDTH = 8
_HEX_DIGITS = b"0123456789abcdef"
META_LINE = 1
"""1-based line number of the meta record; event `seq` is on line `seq + FIRST_EVENT_LINE`."""
FIRST_EVENT_LINE = 2


def frame(payload: bytes) -> bytes:
    """One framed line (with its newline) for a JSON payload."""
    if b"\n" in payload:
        raise ValueError("a framed payload must not contain a raw newline")
    return b"%08x %s\n" % (zlib.crc32(payload), payload)


def unframe(line: bytes) -> bytes | None:
    """The payload of one line (without its newline), or None if the frame or checksum is bad."""
    if len(line) <= _CRC_WIDTH + 1 or line[_CRC_WIDTH] != 0x20:
        return None
    head, payload = line[:_CRC_WIDTH], line[_CRC_WIDTH + 1 :]
    # Exactly 8 lowercase hex digits: int() alone would also accept " ", "+" or "_".
    if head.strip(_HEX_DIGITS) or zlib.crc32(payload) != int(head, 16):
        return None
    return payload


def event_line(event: SessionEvent) -> bytes:
    return frame(encode_event(event))


def meta_line(meta: SessionMeta) -> bytes:
    return frame(encode_meta(meta))


def event_line_number(seq: int) -> int:
    return seq + FIRST_EVENT_LINE


@frozen
class TornTail:
    """What a load cut off: from 1-based `line` on, `dropped_lines` lines / `dropped_bytes`."""

    line: int
    problem: str
    dropped_lines: int
    dropped_bytes: int


@frozen
class LogScan:
    meta: SessionMeta
    events: tuple[SessionEvent, ...]
    intact_bytes: int
    """Length of the intact prefix: the file is cut back to this if `torn` is set."""
    torn: TornTail | None


def _split(data: bytes) -> tuple[list[bytes], bool]:
    """Lines without newlines, and whether the last one is complete."""
    lines = data.split(b"\n")
    complete = lines[-1] == b""
    if complete:
        lines.pop()
    return lines, complete


def _read_event(line: bytes, where: str, expected_seq: int) -> SessionEvent | str:
    """The event on `line`, or why it is damaged."""
    payload = unframe(line)
    if payload is None:
        return "checksum mismatch or malformed frame"
    try:
        event = decode_event(payload, where)
    except SessionFormatError as exc:
        return f"undecodable event ({exc.problem})"
    if event.seq != expected_seq:
        return f"event seq {event.seq} where seq {expected_seq} belongs (duplicated or misplaced)"
    return event


def _is_turn_end_line(line: bytes, where: str) -> bool:
    payload = unframe(line)
    if payload is None:
        return False
    try:
        return isinstance(decode_event(payload, where).data, TurnEnd)
    except SessionFormatError:
        return False


def read_meta(data: LogBuffer, name: str) -> SessionMeta:
    """The meta record on line 1 (written atomically, so any damage there is corruption)."""
    end = data.find(b"\n")
    where = f"{name}:{META_LINE}"
    payload = unframe(data[:end]) if end >= 0 else None
    if payload is None:
        raise SessionCorruptError(where, "session meta line is damaged (checksum or framing)")
    try:
        return decode_meta(payload, where)
    except SessionFormatUnsupported:
        raise
    except SessionFormatError as exc:
        raise SessionCorruptError(where, exc.problem) from exc


def scan_log(data: bytes, name: str, *, first_seq: int = 0, limit: int | None = None) -> LogScan:
    """Parse a whole log file, classifying damage as torn tail or corruption.

    `first_seq` is the seq of the first event line (a fork child's own events start at
    its seed length). With `limit`, only that many events are wanted: they must all be
    intact (a fork parent's shared seed), and anything after them is not examined.
    """
    meta = read_meta(data, name)
    lines, complete = _split(data)
    events: list[SessionEvent] = []
    offset = len(lines[0]) + 1
    for index in range(1, len(lines)):
        if limit is not None and len(events) == limit:
            break
        line_no = index + 1
        where = f"{name}:{line_no}"
        is_last = index == len(lines) - 1
        seq = first_seq + len(events)
        result: SessionEvent | str
        if is_last and not complete:
            result = "incomplete line (no newline)"
        else:
            result = _read_event(lines[index], where, seq)
        if isinstance(result, str):
            if limit is not None:
                raise SessionCorruptError(where, f"{result} inside a shared fork seed")
            later_end = next(
                (
                    later + 1
                    for later in range(index + 1, len(lines))
                    if _is_turn_end_line(lines[later], f"{name}:{later + 1}")
                ),
                None,
            )
            if later_end is not None:
                raise SessionCorruptError(
                    where, f"{result}; an intact turn/end follows on line {later_end}"
                )
            torn = TornTail(line_no, result, len(lines) - index, len(data) - offset)
            return LogScan(meta, tuple(events), offset, torn)
        events.append(result)
        offset += len(lines[index]) + 1
    if limit is not None and len(events) < limit:
        raise SessionCorruptError(
            f"{name}:{event_line_number(first_seq + len(events))}",
            f"shared fork seed ends after {len(events)} of {limit} events",
        )
    return LogScan(meta, tuple(events), offset, None)


def _probe_seq(data: LogBuffer, start: int, end: int) -> int | None:
    payload = unframe(data[start:end])
    if payload is None:
        return None
    try:
        seq = orjson.loads(payload).get("seq")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return seq if isinstance(seq, int) else None


def find_event_line(
    data: LogBuffer, name: str, seq: int, first_seq: int = 0
) -> SessionEvent | None:
    """The intact event `seq` of a log, or None if there is no such intact line.

    Event lines are in seq order, so this bisects byte offsets and reads O(log n) lines;
    `data` may be an mmap of the file, so only those pages are touched.
    """
    low, high = data.find(b"\n") + 1, len(data)
    if low == 0:
        return None
    while low < high:
        middle = (low + high) // 2
        start = data.rfind(b"\n", 0, middle) + 1
        end = data.find(b"\n", start)
        if end < 0:  # an incomplete last line holds no intact event
            high = start
            continue
        found = _probe_seq(data, start, end)
        if found is None:
            return None  # damage: let a full load name it
        if found < seq:
            low = end + 1
        elif found > seq:
            high = start
        else:
            where = f"{name}:{event_line_number(seq - first_seq)}"
            result = _read_event(data[start:end], where, seq)
            return None if isinstance(result, str) else result
    return None
