"""JSONL framing for the file store (pure, no I/O): checksummed lines, the acknowledged-head
record, and the scan that tells a torn tail from damage.

A log file is a sequence of lines `<crc32 of JSON, 8 lowercase hex> <canonical JSON>\\n`.
Line 1 is the session meta record; line `seq + 2` is event `seq`. Beside it the store keeps
a head record (`head_record`): how many bytes and events of the log were acknowledged
(fsynced before a barrier returned).

Only an incomplete final write is a torn tail: a last line without its newline that is a
strict prefix of a valid line (the frame cut anywhere, or whole but for the newline), lying
past the acknowledged head. It is cut off. Anything else is corruption
(SessionCorruptError naming file and line): a complete line whose checksum, JSON, envelope
or seq does not check out, a final fragment that no write could have left, or a file
shorter than its acknowledged head.
"""

from __future__ import annotations

import mmap
import zlib
from typing import TypeAlias

import orjson
from attrs import frozen

from ..runtime.errors import (
    SessionCorruptError,
    SessionFormatError,
    SessionFormatUnsupported,
)
from ..runtime.model.events import SessionEvent
from ..runtime.model.meta import SessionMeta
from .converter import decode_event, encode_event
from .rows import decode_meta, encode_meta

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
class AckHead:
    """The acknowledged part of a log: its first `size` bytes, holding `events` events (the
    next seq, a fork's seed included)."""

    size: int
    events: int


HEAD_RECORD_SIZE = 43
"""A head record is one framed line of fixed width, so it is always rewritten whole."""


def head_record(head: AckHead) -> bytes:
    record = frame(b"%016x %016x" % (head.size, head.events))
    assert len(record) == HEAD_RECORD_SIZE
    return record


def read_head(raw: bytes, name: str) -> AckHead | None:
    """The head record in `raw` (a head file's bytes); None if there is none yet (empty:
    never written, or its creation was cut short). Damage is corruption."""
    if not raw:
        return None
    payload = unframe(raw[:-1]) if len(raw) == HEAD_RECORD_SIZE and raw[-1:] == b"\n" else None
    fields = payload.split(b" ") if payload is not None else []
    if len(fields) != 2 or any(len(part) != 16 or part.strip(_HEX_DIGITS) for part in fields):
        raise SessionCorruptError(name, "acknowledged-head record is damaged")
    return AckHead(int(fields[0], 16), int(fields[1], 16))


@frozen
class TornTail:
    """What a load cut off: from 1-based `line` on, `dropped_bytes` of an incomplete write."""

    line: int
    problem: str
    dropped_bytes: int


@frozen
class LogScan:
    meta: SessionMeta
    events: tuple[SessionEvent, ...]
    intact_bytes: int
    """Length of the intact prefix: the file is cut back to this if `torn` is set."""
    torn: TornTail | None


def _is_json_prefix(payload: bytes) -> bool:
    """Whether `payload` is a proper prefix of some JSON text (what a cut write leaves)."""
    if not payload:
        return True
    try:
        payload.decode("utf-8")
    except UnicodeDecodeError as exc:
        # A multi-byte character cut at the very end is what a torn write leaves.
        if exc.reason != "unexpected end of data" or exc.end != len(payload):
            return False
        payload = payload[: exc.start]
    try:
        orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        return exc.msg == "unexpected end of data" and exc.pos >= len(payload)
    return False  # complete JSON whose checksum did not match: damage, not a cut


def is_torn_write(fragment: bytes) -> bool:
    """Whether a final fragment (no newline) is a strict prefix of a valid framed line."""
    if b"\n" in fragment:
        return False
    head = fragment[:_CRC_WIDTH]
    if head.strip(_HEX_DIGITS):
        return False
    if len(fragment) <= _CRC_WIDTH:
        return True
    if fragment[_CRC_WIDTH] != 0x20:
        return False
    payload = fragment[_CRC_WIDTH + 1 :]
    if payload and unframe(fragment) is not None:
        return True  # a whole line but for its newline
    return _is_json_prefix(payload)


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


def scan_log(
    data: bytes,
    name: str,
    *,
    first_seq: int = 0,
    limit: int | None = None,
    acked: AckHead | None = None,
) -> LogScan:
    """Parse a whole log file, telling a torn tail from corruption.

    `first_seq` is the seq of the first event line (a fork child's own events start at
    its seed length); `acked` the head record, if any. With `limit`, only that many events
    are wanted: they must all be intact (a fork parent's shared seed), and anything after
    them is not examined.
    """
    meta = read_meta(data, name)
    lines, complete = _split(data)
    if acked is not None and acked.size > len(data):
        raise SessionCorruptError(
            name,
            f"the file is {len(data)} bytes, shorter than its acknowledged head "
            f"({acked.size} bytes, {acked.events} events): acknowledged events are missing",
        )
    events: list[SessionEvent] = []
    offset = len(lines[0]) + 1

    def check_head(where: str) -> None:
        """At the acknowledged head's offset, the log must hold the events it records."""
        if acked is None or offset != acked.size:
            return
        if first_seq + len(events) != acked.events:
            raise SessionCorruptError(
                where,
                f"the acknowledged head records {acked.events} events in {acked.size} bytes, "
                f"the log holds {first_seq + len(events)} there",
            )

    if acked is not None and acked.size < offset:
        raise SessionCorruptError(name, "the acknowledged head ends inside the meta line")
    check_head(f"{name}:{META_LINE}")
    for index in range(1, len(lines)):
        if limit is not None and len(events) == limit:
            break
        line_no = index + 1
        where = f"{name}:{line_no}"
        if index == len(lines) - 1 and not complete:
            fragment = lines[index]
            if limit is not None:
                raise SessionCorruptError(where, "incomplete line inside a shared fork seed")
            if acked is not None and offset < acked.size:
                raise SessionCorruptError(
                    where, f"incomplete last line inside the acknowledged head ({acked.size} bytes)"
                )
            if not is_torn_write(fragment):
                raise SessionCorruptError(
                    where, "last line has no newline and is not the beginning of a valid line"
                )
            torn = TornTail(line_no, "incomplete final write", len(fragment))
            return LogScan(meta, tuple(events), offset, torn)
        result = _read_event(lines[index], where, first_seq + len(events))
        if isinstance(result, str):
            raise SessionCorruptError(where, result)
        events.append(result)
        start = offset
        offset += len(lines[index]) + 1
        if acked is not None and start < acked.size < offset:
            raise SessionCorruptError(where, "the acknowledged head ends inside this line")
        check_head(where)
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
