"""The service's request bodies: frozen attrs classes, the JSON Schema each body is
validated against (the same schemas document them in /openapi.json), and `parse_body`,
which turns raw bytes into one of them or a typed refusal."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, Literal, TypeAlias, TypeVar, cast

import orjson
from attrs import field, frozen
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from ...codecs.jsonvalue import MAX_SAFE_INT
from ..errors import ErrorCode
from ..model.messages import Content, Text
from .approval_shapes import DECIDE_SCHEMA, Decide
from .errors import InvalidRequestBody
from .schemas import (
    CONTENT_SCHEMA,
    SESSION_ID_SCHEMA,
    JsonObject,
    object_schema,
    plain,
)

T = TypeVar("T")


# ---------------------------------------------------------------------- requests


@frozen
class OptionOverrides:
    """What a client may change of a profile's `AgentOptions` for one session (tools and
    listeners come from the profile only: a client cannot ship code)."""

    model: str | None = None
    system: str | None = None
    provider: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    stop: tuple[str, ...] | None = None
    context_window: int | None = None

    def changes(self) -> dict[str, Any]:
        """The fields the client set (None means "keep the profile's")."""
        return {name: value for name, value in plain.unstructure(self).items() if value is not None}


OPTIONS_SCHEMA = object_schema(
    {
        "model": {"type": "string", "minLength": 1},
        "system": {"type": "string"},
        "provider": {"type": "string", "minLength": 1},
        "temperature": {"type": "number", "minimum": 0, "maximum": 2},
        "max_tokens": {"type": "integer", "minimum": 1, "maximum": 10_000_000},
        "stop": {"type": "array", "items": {"type": "string", "minLength": 1}, "maxItems": 16},
        "context_window": {"type": "integer", "minimum": 1, "maximum": 100_000_000},
    }
)


@frozen
class CreateSession:
    """`POST /v1/sessions`."""

    profile: str | None = None
    session_id: str | None = None
    options: OptionOverrides = OptionOverrides()


CREATE_SESSION_SCHEMA = object_schema(
    {
        "profile": {"type": "string", "minLength": 1},
        "session_id": SESSION_ID_SCHEMA,
        "options": OPTIONS_SCHEMA,
    }
)

IfBusy: TypeAlias = Literal["reject", "queue"]


@frozen
class SendMessage:
    """`POST /v1/sessions/{id}/messages`: one turn with `content` as its user message."""

    content: Content
    wait: bool = True
    idempotency_key: str | None = None
    if_busy: IfBusy = "reject"
    reject_pending: bool = False


SEND_MESSAGE_SCHEMA = object_schema(
    {
        "content": CONTENT_SCHEMA,
        "wait": {"type": "boolean", "description": "Answer when the turn ends (200)."},
        "idempotency_key": {"type": "string", "minLength": 1, "maxLength": 200},
        "if_busy": {
            "enum": ["reject", "queue"],
            "description": "A session with a turn running or queued: 409 SESSION_BUSY "
            "(reject, the default) or wait behind it (queue).",
        },
        "reject_pending": {
            "type": "boolean",
            "description": "Calls waiting for a decision: reject them first (else 409 "
            "APPROVALS_PENDING).",
        },
    },
    ("content",),
)


@frozen
class Steer:
    """`POST /v1/sessions/{id}/steer`."""

    content: Content


STEER_SCHEMA = object_schema({"content": CONTENT_SCHEMA}, ("content",))


@frozen
class Inject:
    """`POST /v1/sessions/{id}/inject`: durable context, from the plugin named `source`."""

    content: Content
    source: str = "api"
    meta: dict[str, Any] | None = None


INJECT_SCHEMA = object_schema(
    {
        "content": CONTENT_SCHEMA,
        "source": {"type": "string", "minLength": 1, "maxLength": 200},
        "meta": {"type": "object"},
    },
    ("content",),
)


@frozen
class Cancel:
    """`POST /v1/sessions/{id}/cancel`."""

    reason: str | None = None
    keep_inbox: bool = False


CANCEL_SCHEMA = object_schema(
    {"reason": {"type": "string", "maxLength": 2000}, "keep_inbox": {"type": "boolean"}}
)


@frozen
class Fork:
    """`POST /v1/sessions/{id}/fork`."""

    boundary: int | None = None
    child_id: str | None = None
    profile: str | None = None


FORK_SCHEMA = object_schema(
    {
        "boundary": {"type": "integer", "minimum": 0, "maximum": 9_007_199_254_740_991},
        "child_id": SESSION_ID_SCHEMA,
        "profile": {"type": "string", "minLength": 1},
    }
)


@frozen
class Resume:
    """`POST /v1/sessions/{id}/resume`."""

    profile: str | None = None


RESUME_SCHEMA = object_schema({"profile": {"type": "string", "minLength": 1}})


def _plain_send(value: Any) -> SendMessage | None:
    """The send of the common body, `{"content": "<text>"}` with perhaps `"wait": <bool>`,
    built without the schema run it would pass (an integer beyond ±(2^53 - 1) can only be
    in the text, where it is no integer); None for any other body, which takes the full
    path (and gets its error from there)."""
    if type(value) is not dict or not 1 <= len(value) <= 2:
        return None
    content = value.get("content")
    wait = value.get("wait", True)
    if type(content) is not str or type(wait) is not bool:
        return None
    if len(value) == 2 and "wait" not in value:
        return None
    return SendMessage((Text(content),), wait)


@frozen
class BodySchema:
    """A request class with the JSON Schema its body is validated against, and perhaps a
    shortcut: a function building the request from a body of its common shape (the one it
    would pass the schema with), None for any other body, which takes the schema run."""

    cls: type
    schema: JsonObject
    shortcut: Callable[[Any], Any] | None = None
    validator: Draft202012Validator = field(init=False, eq=False)

    def __attrs_post_init__(self) -> None:
        Draft202012Validator.check_schema(self.schema)
        object.__setattr__(self, "validator", Draft202012Validator(self.schema))


BODIES: dict[type, BodySchema] = {
    body.cls: body
    for body in (
        BodySchema(CreateSession, CREATE_SESSION_SCHEMA),
        BodySchema(SendMessage, SEND_MESSAGE_SCHEMA, _plain_send),
        BodySchema(Steer, STEER_SCHEMA),
        BodySchema(Inject, INJECT_SCHEMA),
        BodySchema(Cancel, CANCEL_SCHEMA),
        BodySchema(Fork, FORK_SCHEMA),
        BodySchema(Resume, RESUME_SCHEMA),
        BodySchema(Decide, DECIDE_SCHEMA),
    )
}


_LONG_NUMBER = re.compile(rb"[0-9]{16}")
"""A run of digits as long as the shortest integer beyond ±(2^53 - 1) (orjson reads an
integer it cannot hold as a float, so such a body is read again to see its integers)."""


def _refuse_integer(literal: str) -> int:
    value = int(literal)
    if not -MAX_SAFE_INT <= value <= MAX_SAFE_INT:
        raise InvalidRequestBody(
            f"the integer {literal[:40]} is beyond ±(2^53 - 1), which JSON values may not be",
            ErrorCode.INVALID_CONTENT,
        )
    return value


def _check_integers(raw: bytes) -> None:
    """Refuse an integer literal the JSON value rules refuse, as the text has it (before
    any conversion to float)."""
    json.loads(raw, parse_int=_refuse_integer)


def parse_body(raw: bytes, cls: type[T]) -> T:
    """The request `cls` from a JSON body: INVALID_JSON if it does not parse, else
    VALIDATION_FAILED naming the first place it breaks the schema. An empty body is `{}`;
    one of whitespace only is not JSON (INVALID_JSON)."""
    try:
        value = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError as exc:
        raise InvalidRequestBody(f"the body is not JSON: {exc}", ErrorCode.INVALID_JSON) from exc
    body = BODIES[cls]
    if body.shortcut is not None:
        built = body.shortcut(value)
        if built is not None:
            return cast(T, built)
    if _LONG_NUMBER.search(raw):
        _check_integers(raw)
    error = best_match(body.validator.iter_errors(value))
    if error is not None:
        message = error.message if len(error.message) <= 300 else error.message[:300] + "…"
        raise InvalidRequestBody(f"{error.json_path}: {message}", ErrorCode.VALIDATION_FAILED)
    structured: T = plain.structure(value, cls)
    return structured


def check_message(content: Content, limit: int) -> None:
    """Refuse a message above `limit` characters (413 MESSAGE_TOO_LARGE) before it reaches
    the log, where it would be part of every later request of the session."""
    size = sum(len(block.text) for block in content if isinstance(block, Text))
    if size > limit:
        raise InvalidRequestBody(
            f"the message has {size} characters; this server takes at most {limit} per "
            "message (serve --max-message-chars)",
            ErrorCode.MESSAGE_TOO_LARGE,
        )
