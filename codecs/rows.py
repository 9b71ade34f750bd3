"""Row mapping for the durable stores: session meta records and SQL rows (pure, no I/O).

A meta record is canonical JSON of every `SessionMeta` field; its `version` is read first so
a newer or unknown format is refused before anything else is interpreted. SQL rows carry a
CRC-32 over their stored bytes (the key included, so a row moved to another session or seq
is caught too), and a session row the acknowledged head of its log.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator
from typing import Any

import orjson

from ..runtime.errors import SessionFormatError, SessionFormatUnsupported
from ..runtime.model.events import SessionEvent
from ..runtime.model.meta import FORMAT_VERSION, SessionMeta
from .converter import FAST_DECODERS, decode_event, encode_event
from .jsonvalue import JsonValueError, canonical_json, freeze_object

EventRow = tuple[str, int, str, int, bytes, int]
"""`events(session_id, seq, type, time, body, crc)`; `body` is the canonical event JSON and
`crc` the CRC-32 of session id, seq and body (`event_crc`)."""

READ_COLUMNS = "seq, type, time, body, crc"
"""The columns a load reads, in the order of a `ReadRow`: the session id is the one the
query selects by, so it is not read back per row (the checksum still covers it)."""

ReadRow = tuple[int, str, int, bytes, int]
"""An `events` row as a load reads it: `READ_COLUMNS`."""

SessionRow = tuple[str, bytes, str | None, int | None, int, int, int]
"""`sessions(id, meta, parent, seed_length, version, head, crc)`; `meta` is the canonical
meta JSON, `head` the number of events the log holds (its next seq, a fork's seed included),
`crc` the CRC-32 of id and meta (`meta_crc`)."""

_META_KEYS = frozenset({"version", "id", "created_at", "parent_session", "seed_length", "labels"})


def meta_to_dict(meta: SessionMeta) -> dict[str, Any]:
    return {
        "version": meta.version,
        "id": meta.id,
        "created_at": meta.created_at,
        "parent_session": meta.parent_session,
        "seed_length": meta.seed_length,
        "labels": meta.labels,
    }


def encode_meta(meta: SessionMeta) -> bytes:
    return canonical_json(meta_to_dict(meta))


def check_version(version: object, where: str) -> None:
    if isinstance(version, bool) or not isinstance(version, int):
        raise SessionFormatError(where, f"format version must be an int, got {version!r:.40}")
    if version != FORMAT_VERSION:
        raise SessionFormatUnsupported(
            f"{where}: format version {version} is not supported "
            f"(this build reads version {FORMAT_VERSION}); refusing to load it"
        )


def _int_or_none(body: dict[str, Any], key: str, where: str) -> int | None:
    value = body[key]
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SessionFormatError(where, f"{key} must be an int >= 0 or null, got {value!r:.40}")
    return value


def meta_from_dict(body: object, where: str) -> SessionMeta:
    """Strictly rebuild a SessionMeta; refuses unsupported versions before anything else."""
    if not isinstance(body, dict):
        raise SessionFormatError(where, f"session meta must be an object, got {type(body)}")
    check_version(body.get("version"), where)
    keys = body.keys()
    if keys != _META_KEYS:
        missing, extra = sorted(_META_KEYS - keys), sorted(keys - _META_KEYS)
        raise SessionFormatError(where, f"session meta keys: missing {missing}, extra {extra}")
    session_id, created_at = body["id"], body["created_at"]
    if not isinstance(session_id, str):
        raise SessionFormatError(where, "session meta id must be a string")
    if isinstance(created_at, bool) or not isinstance(created_at, int) or created_at < 0:
        raise SessionFormatError(where, "session meta created_at must be an int >= 0")
    parent = body["parent_session"]
    if parent is not None and not isinstance(parent, str):
        raise SessionFormatError(where, "session meta parent_session must be a string or null")
    seed_length = _int_or_none(body, "seed_length", where)
    if (parent is None) != (seed_length is None):
        raise SessionFormatError(where, "parent_session and seed_length go together")
    try:
        labels = freeze_object(body["labels"], "$.labels")
    except JsonValueError as exc:
        raise SessionFormatError(where, str(exc)) from exc
    return SessionMeta(
        session_id,
        created_at=created_at,
        parent_session=parent,
        seed_length=seed_length,
        version=FORMAT_VERSION,
        labels=labels,
    )


def decode_meta(raw: bytes, where: str) -> SessionMeta:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise SessionFormatError(where, f"session meta is not valid JSON: {exc}") from exc
    return meta_from_dict(body, where)


def meta_crc(session_id: str, raw: bytes) -> int:
    return zlib.crc32(raw, zlib.crc32(session_id.encode() + b"\x00"))


def _key_crc(session_id: str) -> int:
    return zlib.crc32(session_id.encode() + b"\x00")


def event_crc(session_id: str, seq: int, body: bytes, key_crc: int | None = None) -> int:
    """CRC-32 of `session_id NUL seq NUL body` (`key_crc` is `_key_crc(session_id)`, when
    the caller has it for a whole batch)."""
    start = _key_crc(session_id) if key_crc is None else key_crc
    return zlib.crc32(body, zlib.crc32(b"%d\x00" % seq, start))


def session_row(meta: SessionMeta) -> SessionRow:
    """The row of a new session: its head is its seed (nothing of its own stored yet)."""
    raw = encode_meta(meta)
    return (
        meta.id,
        raw,
        meta.parent_session,
        meta.seed_length,
        meta.version,
        meta.seed_length or 0,
        meta_crc(meta.id, raw),
    )


def _blob(value: object, column: str, where: str) -> bytes:
    if isinstance(value, bytes):
        return value
    stored = "TEXT" if isinstance(value, str) else type(value).__name__
    raise SessionFormatError(where, f"{column} is stored as {stored}, not as a BLOB")


def _checksum(value: object, expected: int, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SessionFormatError(where, f"row checksum is missing or not an int ({value!r:.40})")
    if value != expected:
        raise SessionFormatError(
            where, f"row checksum mismatch (stored {value:#010x}, computed {expected:#010x})"
        )


def head_of(row: tuple[Any, ...], where: str) -> int:
    """The acknowledged head (event count) a `sessions` row records."""
    head = row[5]
    if isinstance(head, bool) or not isinstance(head, int) or head < 0:
        raise SessionFormatError(where, f"acknowledged head must be an int >= 0, got {head!r:.40}")
    return head


def meta_from_row(row: tuple[Any, ...], where: str) -> SessionMeta:
    """Rebuild the meta of a `sessions` row, checking its checksum and that the columns agree
    with the record."""
    session_id, raw, parent, seed_length, version, _head, crc = row
    if not isinstance(session_id, str):
        raise SessionFormatError(where, f"session id is stored as {type(session_id).__name__}")
    raw = _blob(raw, "session meta", where)
    _checksum(crc, meta_crc(session_id, raw), where)
    check_version(version, where)
    meta = decode_meta(raw, where)
    if (meta.id, meta.parent_session, meta.seed_length) != (session_id, parent, seed_length):
        raise SessionFormatError(where, "sessions columns disagree with the stored meta record")
    return meta


def event_rows(session_id: str, events: Iterable[SessionEvent]) -> list[EventRow]:
    """The rows of one session's events, each with its checksum (`event_crc`, computed
    inline: this loop runs once per event of every group commit)."""
    key_crc = _key_crc(session_id)
    crc32 = zlib.crc32
    encode = encode_event
    rows: list[EventRow] = []
    append = rows.append
    for event in events:
        seq = event.seq
        body = encode(event)
        append(
            (
                session_id,
                seq,
                event.type,
                event.time,
                body,
                crc32(body, crc32(b"%d\x00" % seq, key_crc)),
            )
        )
    return rows


def event_from_row(session_id: str, row: tuple[Any, ...], where: str) -> SessionEvent:
    """Decode a `ReadRow` of `session_id`'s body after checking its checksum, and check it
    agrees with the seq/type/time columns."""
    seq, event_type, time, body, crc = row
    body = _blob(body, "event body", where)
    if isinstance(seq, bool) or not isinstance(seq, int):
        raise SessionFormatError(where, f"row seq {seq!r:.40} is damaged")
    _checksum(crc, event_crc(session_id, seq, body), where)
    event = decode_event(body, where)
    if (event.seq, event.type, event.time) != (seq, event_type, time):
        raise SessionFormatError(
            where,
            f"row columns (seq {seq}, {event_type}, time {time}) disagree with its body "
            f"(seq {event.seq}, {event.type}, time {event.time})",
        )
    return event


def take_checked_rows(
    rows: Iterator[tuple[Any, ...]],
    session_id: str,
    events: list[SessionEvent],
    stop: int,
) -> tuple[Any, ...] | None:
    """Append to `events` the decoded events of the `ReadRow`s of `session_id` that continue it
    (each row's seq the next one, up to `stop` events) and that pass every check of
    `event_from_row` on its plainest path: exact types, checksum, well-formed JSON the
    generated decoders take, columns agreeing with the body.

    Returns the first row not taken, for the caller's checked path (which reports what is
    wrong with it, or takes it if nothing is), or None when the rows ran out. This loop
    only skips the per-row work of the checked path (the place string, the layers of calls),
    never a check: a row it takes is one `event_from_row` gives the same event for.
    """
    start = _key_crc(session_id)
    loads = orjson.loads
    crc32 = zlib.crc32
    decoders = FAST_DECODERS
    append = events.append
    expected = len(events)
    for row in rows:
        try:
            seq, event_type, time, body, crc = row
            if (
                expected == stop
                or type(seq) is not int
                or seq != expected
                or type(body) is not bytes
                or type(crc) is not int
                or crc != crc32(body, crc32(b"%d\x00" % seq, start))
            ):
                return row
            parsed = loads(body)
            event = decoders[parsed["type"]](parsed)
        except Exception:  # anything unusual: the checked path decides
            return row
        if event.seq != seq or event.type != event_type or event.time != time:
            return row
        append(event)
        expected += 1
    return None
