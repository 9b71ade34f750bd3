"""Row mapping for the durable stores: session meta records and SQL event rows (pure, no I/O).

A meta record is canonical JSON of every `SessionMeta` field; its `version` is read first so
a newer or unknown format is refused before anything else is interpreted.
"""

from __future__ import annotations

from typing import Any

import orjson

from actorloop.codecs.converter import decode_event, encode_event
from actorloop.codecs.jsonvalue import JsonValueError, canonical_json, freeze_object
from actorloop.runtime.errors import SessionFormatError, SessionFormatUnsupported
from actorloop.runtime.events import SessionEvent
from actorloop.runtime.meta import FORMAT_VERSION, SessionMeta

EventRow = tuple[str, int, str, int, bytes]
"""`events(session_id, seq, type, time, body)`; `body` is the canonical event JSON."""

SessionRow = tuple[str, bytes, str | None, int | None, int]
"""`sessions(id, meta, parent, seed_length, version)`; `meta` is the canonical meta JSON."""

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


def session_row(meta: SessionMeta) -> SessionRow:
    return (meta.id, encode_meta(meta), meta.parent_session, meta.seed_length, meta.version)


def meta_from_row(row: tuple[Any, ...], where: str) -> SessionMeta:
    """Rebuild the meta of a `sessions` row, checking the columns agree with the record."""
    session_id, raw, parent, seed_length, version = row
    check_version(version, where)
    meta = decode_meta(bytes(raw), where)
    if (meta.id, meta.parent_session, meta.seed_length) != (session_id, parent, seed_length):
        raise SessionFormatError(where, "sessions columns disagree with the stored meta record")
    return meta


def event_row(session_id: str, event: SessionEvent) -> EventRow:
    return (session_id, event.seq, event.type, event.time, encode_event(event))


def event_from_row(row: tuple[Any, ...], where: str) -> SessionEvent:
    """Decode an `events` row's body, checking it agrees with the seq/type/time columns."""
    _session_id, seq, event_type, time, body = row
    event = decode_event(bytes(body), where)
    if (event.seq, event.type, event.time) != (seq, event_type, time):
        raise SessionFormatError(
            where,
            f"row columns (seq {seq}, {event_type}, time {time}) disagree with its body "
            f"(seq {event.seq}, {event.type}, time {event.time})",
        )
    return event
