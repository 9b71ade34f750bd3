"""The service's request and response shapes: frozen attrs classes, the JSON Schema of each
(the same schemas validate request bodies and document them in /openapi.json), and the
cattrs converter between them and JSON."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Literal, TypeAlias, TypeVar

import cattrs
import orjson
from attrs import field, frozen
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from ...codecs.jsonvalue import MAX_SAFE_INT
from ..errors import ErrorCode
from ..model.messages import Content, Text
from .errors import InvalidRequestBody

T = TypeVar("T")
JsonObject: TypeAlias = dict[str, Any]

SESSION_ID_SCHEMA: JsonObject = {
    "type": "string",
    "minLength": 1,
    "maxLength": 128,
    "pattern": "^[A-Za-z0-9_-][A-Za-z0-9._-]*$",
    "description": "Letters, digits, '.', '_' and '-'; not starting with '.', no '..' "
    "(an id breaking that is refused with 400 INVALID_SESSION_ID).",
}
TEXT_BLOCK_SCHEMA: JsonObject = {
    "type": "object",
    "properties": {"type": {"const": "text"}, "text": {"type": "string"}},
    "required": ["type", "text"],
    "additionalProperties": False,
}
CONTENT_SCHEMA: JsonObject = {
    "description": "A string, or an array of text blocks as the session log encodes them.",
    "oneOf": [
        {"type": "string"},
        {"type": "array", "items": TEXT_BLOCK_SCHEMA, "minItems": 1},
    ],
}
USAGE_SCHEMA: JsonObject = {
    "type": "object",
    "properties": {
        name: {"type": "integer", "minimum": 0}
        for name in ("input", "output", "cache_read", "cache_write", "reasoning")
    },
    "required": ["input", "output", "cache_read", "cache_write", "reasoning"],
    "additionalProperties": False,
}
STATUS_VALUES = ("idle", "running", "disposed", "failed", "stored", "damaged")
SessionStatus: TypeAlias = Literal["idle", "running", "disposed", "failed", "stored", "damaged"]
"""A live agent's status (`idle`, `running`, `disposed`, `failed`), `stored` for a session
with no live agent here, `damaged` for a stored record that cannot be read."""


def _nullable(schema: JsonObject) -> JsonObject:
    return {"anyOf": [schema, {"type": "null"}]}


def _object(properties: Mapping[str, JsonObject], required: tuple[str, ...] = ()) -> JsonObject:
    return {
        "type": "object",
        "properties": dict(properties),
        "required": list(required),
        "additionalProperties": False,
    }


ANY_JSON: JsonObject = {"description": "JSON as the session log's codec encodes it."}
STATUS_SCHEMA: JsonObject = {"enum": list(STATUS_VALUES)}


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
        return {
            name: value for name, value in _plain.unstructure(self).items() if value is not None
        }


OPTIONS_SCHEMA = _object(
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


CREATE_SESSION_SCHEMA = _object(
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


SEND_MESSAGE_SCHEMA = _object(
    {
        "content": CONTENT_SCHEMA,
        "wait": {"type": "boolean", "description": "Answer when the turn ends (200)."},
        "idempotency_key": {"type": "string", "minLength": 1, "maxLength": 200},
        "if_busy": {
            "enum": ["reject", "queue"],
            "description": "A session with a turn running or queued: 409 SESSION_BUSY "
            "(reject, the default) or wait behind it (queue).",
        },
    },
    ("content",),
)


@frozen
class Steer:
    """`POST /v1/sessions/{id}/steer`."""

    content: Content


STEER_SCHEMA = _object({"content": CONTENT_SCHEMA}, ("content",))


@frozen
class Inject:
    """`POST /v1/sessions/{id}/inject`: durable context, from the plugin named `source`."""

    content: Content
    source: str = "api"
    meta: dict[str, Any] | None = None


INJECT_SCHEMA = _object(
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


CANCEL_SCHEMA = _object(
    {"reason": {"type": "string", "maxLength": 2000}, "keep_inbox": {"type": "boolean"}}
)


@frozen
class Fork:
    """`POST /v1/sessions/{id}/fork`."""

    boundary: int | None = None
    child_id: str | None = None
    profile: str | None = None


FORK_SCHEMA = _object(
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


RESUME_SCHEMA = _object({"profile": {"type": "string", "minLength": 1}})


# ---------------------------------------------------------------------- responses


@frozen
class Usage:
    """Token usage in five disjoint buckets (uncached input, output, cache reads and
    writes, reasoning)."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    reasoning: int = 0


@frozen
class SessionState:
    """A session and its status, for calls that change or start work."""

    id: str
    status: SessionStatus


SESSION_STATE_SCHEMA = _object(
    {"id": {"type": "string"}, "status": STATUS_SCHEMA}, ("id", "status")
)


@frozen
class CancelOutcome:
    """`cancelled` is whether there was work to cancel (a running turn or queued items)."""

    id: str
    status: SessionStatus
    cancelled: bool


CANCEL_OUTCOME_SCHEMA = _object(
    {"id": {"type": "string"}, "status": STATUS_SCHEMA, "cancelled": {"type": "boolean"}},
    ("id", "status", "cancelled"),
)


@frozen
class ResumeOutcome:
    """`resumed` is false when the session was live already."""

    id: str
    status: SessionStatus
    profile: str
    resumed: bool


RESUME_OUTCOME_SCHEMA = _object(
    {
        "id": {"type": "string"},
        "status": STATUS_SCHEMA,
        "profile": {"type": "string"},
        "resumed": {"type": "boolean"},
    },
    ("id", "status", "profile", "resumed"),
)


@frozen
class ForkOutcome:
    """The child of a fork: its first `seed_length` events are its parent's."""

    id: str
    status: SessionStatus
    parent_session: str
    seed_length: int


FORK_OUTCOME_SCHEMA = _object(
    {
        "id": {"type": "string"},
        "status": STATUS_SCHEMA,
        "parent_session": {"type": "string"},
        "seed_length": {"type": "integer", "minimum": 1},
    },
    ("id", "status", "parent_session", "seed_length"),
)

TURN_REASONS = (
    "completed",
    "max-tokens",
    "rejected",
    "error",
    "aborted",
    "disposed",
    "interrupted",
    "discarded",
)


@frozen
class TurnOutcome:
    """How a turn ended (`TurnResult`): `turn` is null for a message discarded before its
    turn started; `message` and `code` say why a turn did not complete."""

    id: str
    turn: int | None
    reason: str
    text: str
    message: str | None
    code: str | None
    steps: int
    usage: Usage


TURN_OUTCOME_SCHEMA = _object(
    {
        "id": {"type": "string"},
        "turn": _nullable({"type": "integer", "minimum": 1}),
        "reason": {"enum": list(TURN_REASONS)},
        "text": {"type": "string"},
        "message": _nullable({"type": "string"}),
        "code": _nullable({"type": "string"}),
        "steps": {"type": "integer", "minimum": 0},
        "usage": USAGE_SCHEMA,
    },
    ("id", "turn", "reason", "text", "message", "code", "steps", "usage"),
)


@frozen
class SessionSummary:
    """One stored session in a listing; `problem` is set (and `status` is `damaged`) for a
    record that cannot be read."""

    id: str
    status: SessionStatus
    live: bool
    created_at: int | None
    parent_session: str | None
    seed_length: int | None
    labels: dict[str, Any]
    problem: str | None = None


SESSION_SUMMARY_SCHEMA = _object(
    {
        "id": {"type": "string"},
        "status": STATUS_SCHEMA,
        "live": {"type": "boolean"},
        "created_at": _nullable({"type": "integer"}),
        "parent_session": _nullable({"type": "string"}),
        "seed_length": _nullable({"type": "integer"}),
        "labels": {"type": "object"},
        "problem": _nullable({"type": "string"}),
    },
    ("id", "status", "live", "created_at", "parent_session", "seed_length", "labels", "problem"),
)


@frozen
class SessionPage:
    """A page of sessions in id order; pass `next_cursor` as `cursor` for the next page."""

    sessions: tuple[SessionSummary, ...]
    next_cursor: str | None


SESSION_PAGE_SCHEMA = _object(
    {
        "sessions": {"type": "array", "items": SESSION_SUMMARY_SCHEMA},
        "next_cursor": _nullable({"type": "string"}),
    },
    ("sessions", "next_cursor"),
)


@frozen
class UsageReport:
    """A session's usage: model calls, summarizer calls, and both together."""

    model: Usage
    compaction: Usage
    total: Usage
    model_calls: int
    compaction_calls: int
    cached_fraction: float | None


USAGE_REPORT_SCHEMA = _object(
    {
        "model": USAGE_SCHEMA,
        "compaction": USAGE_SCHEMA,
        "total": USAGE_SCHEMA,
        "model_calls": {"type": "integer", "minimum": 0},
        "compaction_calls": {"type": "integer", "minimum": 0},
        "cached_fraction": _nullable({"type": "number", "minimum": 0, "maximum": 1}),
    },
    ("model", "compaction", "total", "model_calls", "compaction_calls", "cached_fraction"),
)


@frozen
class Lineage:
    """A fork child's parent and seed length (both null for a session that is no fork)."""

    parent_session: str | None
    seed_length: int | None


@frozen
class SessionDetail:
    """`GET /v1/sessions/{id}`: status, lineage, turns, the folded request header (codec
    JSON, null before the first request) and usage."""

    id: str
    status: SessionStatus
    live: bool
    profile: str | None
    created_at: int
    lineage: Lineage
    labels: dict[str, Any]
    events: int
    turns: int
    open_turn: int | None
    header: Any
    usage: UsageReport


SESSION_DETAIL_SCHEMA = _object(
    {
        "id": {"type": "string"},
        "status": STATUS_SCHEMA,
        "live": {"type": "boolean"},
        "profile": _nullable({"type": "string"}),
        "created_at": {"type": "integer"},
        "lineage": _object(
            {
                "parent_session": _nullable({"type": "string"}),
                "seed_length": _nullable({"type": "integer"}),
            },
            ("parent_session", "seed_length"),
        ),
        "labels": {"type": "object"},
        "events": {"type": "integer", "minimum": 0},
        "turns": {"type": "integer", "minimum": 0},
        "open_turn": _nullable({"type": "integer"}),
        "header": _nullable({"type": "object"}),
        "usage": USAGE_REPORT_SCHEMA,
    },
    (
        "id",
        "status",
        "live",
        "profile",
        "created_at",
        "lineage",
        "labels",
        "events",
        "turns",
        "open_turn",
        "header",
        "usage",
    ),
)


@frozen
class Digests:
    """The digest the answer recorded (null if none) and the one the rebuilt parts hash to."""

    recorded: str | None
    rebuilt: str


@frozen
class RequestDetail:
    """`GET /v1/sessions/{id}/requests/{seq}`: the exact request, part by part (codec JSON).

    `prefix` and `history` together are the request's messages after the system slot;
    `verified` is true when the recorded digest matches the rebuilt one.
    """

    session_id: str
    seq: int
    turn: int
    step: int
    step_start_seq: int
    snapshot_seq: int
    header_seq: int
    system: str | None
    prefix: Any
    history: Any
    tools: Any
    config: Any
    digest: Digests
    verified: bool


REQUEST_DETAIL_SCHEMA = _object(
    {
        "session_id": {"type": "string"},
        "seq": {"type": "integer", "minimum": 0},
        "turn": {"type": "integer", "minimum": 1},
        "step": {"type": "integer", "minimum": 1},
        "step_start_seq": {"type": "integer", "minimum": 0},
        "snapshot_seq": {"type": "integer", "minimum": 0},
        "header_seq": {"type": "integer", "minimum": 0},
        "system": _nullable({"type": "string"}),
        "prefix": {"type": "array", "items": {"type": "object"}},
        "history": {"type": "array", "items": {"type": "object"}},
        "tools": {"type": "array", "items": {"type": "object"}},
        "config": {"type": "object"},
        "digest": _object(
            {"recorded": _nullable({"type": "string"}), "rebuilt": {"type": "string"}},
            ("recorded", "rebuilt"),
        ),
        "verified": {"type": "boolean"},
    },
    (
        "session_id",
        "seq",
        "turn",
        "step",
        "step_start_seq",
        "snapshot_seq",
        "header_seq",
        "system",
        "prefix",
        "history",
        "tools",
        "config",
        "digest",
        "verified",
    ),
)


@frozen
class VerifyOutcome:
    """`GET /v1/sessions/{id}/verify`: `ok`, with the counts, or the first bad event."""

    session_id: str
    ok: bool
    events: int
    turns: int
    requests_checked: int
    requests_without_digest: int
    failed_seq: int | None = None
    problem: str | None = None


VERIFY_OUTCOME_SCHEMA = _object(
    {
        "session_id": {"type": "string"},
        "ok": {"type": "boolean"},
        "events": {"type": "integer", "minimum": 0},
        "turns": {"type": "integer", "minimum": 0},
        "requests_checked": {"type": "integer", "minimum": 0},
        "requests_without_digest": {"type": "integer", "minimum": 0},
        "failed_seq": _nullable({"type": "integer"}),
        "problem": _nullable({"type": "string"}),
    },
    (
        "session_id",
        "ok",
        "events",
        "turns",
        "requests_checked",
        "requests_without_digest",
        "failed_seq",
        "problem",
    ),
)


@frozen
class ProfileInfo:
    """One registered agent profile."""

    name: str
    description: str
    model: str
    provider: str | None
    tools: tuple[str, ...]
    default: bool


@frozen
class ProfileList:
    """`GET /v1/profiles`."""

    profiles: tuple[ProfileInfo, ...]


PROFILE_LIST_SCHEMA = _object(
    {
        "profiles": {
            "type": "array",
            "items": _object(
                {
                    "name": {"type": "string"},
                    "description": {"type": "string"},
                    "model": {"type": "string"},
                    "provider": _nullable({"type": "string"}),
                    "tools": {"type": "array", "items": {"type": "string"}},
                    "default": {"type": "boolean"},
                },
                ("name", "description", "model", "provider", "tools", "default"),
            ),
        }
    },
    ("profiles",),
)


@frozen
class Health:
    """`GET /healthz`: `ok`, or `draining` (503) once shutdown began."""

    status: Literal["ok", "draining"]
    live_agents: int
    open_streams: int


HEALTH_SCHEMA = _object(
    {
        "status": {"enum": ["ok", "draining"]},
        "live_agents": {"type": "integer", "minimum": 0},
        "open_streams": {"type": "integer", "minimum": 0},
    },
    ("status", "live_agents", "open_streams"),
)


@frozen
class ErrorDetail:
    """A stable `code` (an `ErrorCode` member) and a message for people."""

    code: str
    message: str


@frozen
class ErrorBody:
    """Every error response: `{"error": {"code", "message"}}`."""

    error: ErrorDetail


ERROR_SCHEMA = _object(
    {
        "error": _object(
            {
                "code": {"enum": sorted(str(code) for code in ErrorCode)},
                "message": {"type": "string"},
            },
            ("code", "message"),
        )
    },
    ("error",),
)


# ---------------------------------------------------------------------- conversion


def _content(value: Any, _: type) -> Content:
    if isinstance(value, str):
        return (Text(value),)
    return tuple(Text(block["text"]) for block in value)


def _plain_converter() -> cattrs.Converter:
    converter = cattrs.Converter(forbid_extra_keys=True)
    converter.register_structure_hook_func(lambda cls: cls == Content, _content)
    return converter


_plain = _plain_converter()


@frozen
class BodySchema:
    """A request class with the JSON Schema its body is validated against."""

    cls: type
    schema: JsonObject
    validator: Draft202012Validator = field(init=False, eq=False)

    def __attrs_post_init__(self) -> None:
        Draft202012Validator.check_schema(self.schema)
        object.__setattr__(self, "validator", Draft202012Validator(self.schema))


BODIES: dict[type, BodySchema] = {
    cls: BodySchema(cls, schema)
    for cls, schema in (
        (CreateSession, CREATE_SESSION_SCHEMA),
        (SendMessage, SEND_MESSAGE_SCHEMA),
        (Steer, STEER_SCHEMA),
        (Inject, INJECT_SCHEMA),
        (Cancel, CANCEL_SCHEMA),
        (Fork, FORK_SCHEMA),
        (Resume, RESUME_SCHEMA),
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
    if _LONG_NUMBER.search(raw):
        _check_integers(raw)
    error = best_match(BODIES[cls].validator.iter_errors(value))
    if error is not None:
        message = error.message if len(error.message) <= 300 else error.message[:300] + "…"
        raise InvalidRequestBody(f"{error.json_path}: {message}", ErrorCode.VALIDATION_FAILED)
    structured: T = _plain.structure(value, cls)
    return structured


def to_json(value: object) -> bytes:
    """A response value as JSON bytes (every field present; null for none)."""
    return orjson.dumps(_plain.unstructure(value))
