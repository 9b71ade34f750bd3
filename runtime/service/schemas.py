"""The service's response shapes: frozen attrs classes and the JSON Schema of each (as
/openapi.json documents them), the schema pieces request bodies share (`bodies`), and the
cattrs converter between the shapes and JSON."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypeAlias

import cattrs
import orjson
from attrs import frozen

from ..errors import ErrorCode
from ..model.messages import Content, Text

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


def nullable(schema: JsonObject) -> JsonObject:
    """`schema` or null."""
    return {"anyOf": [schema, {"type": "null"}]}


def object_schema(
    properties: Mapping[str, JsonObject], required: tuple[str, ...] = ()
) -> JsonObject:
    """A closed object schema (no other property) with `properties`, `required` ones."""
    return {
        "type": "object",
        "properties": dict(properties),
        "required": list(required),
        "additionalProperties": False,
    }


ANY_JSON: JsonObject = {"description": "JSON as the session log's codec encodes it."}
STATUS_SCHEMA: JsonObject = {"enum": list(STATUS_VALUES)}


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


SESSION_STATE_SCHEMA = object_schema(
    {"id": {"type": "string"}, "status": STATUS_SCHEMA}, ("id", "status")
)


@frozen
class CancelOutcome:
    """`cancelled` is whether there was work to cancel (a running turn or queued items)."""

    id: str
    status: SessionStatus
    cancelled: bool


CANCEL_OUTCOME_SCHEMA = object_schema(
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


RESUME_OUTCOME_SCHEMA = object_schema(
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


FORK_OUTCOME_SCHEMA = object_schema(
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
    "awaiting_approval",
    "budget_exhausted",
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


TURN_OUTCOME_SCHEMA = object_schema(
    {
        "id": {"type": "string"},
        "turn": nullable({"type": "integer", "minimum": 1}),
        "reason": {"enum": list(TURN_REASONS)},
        "text": {"type": "string"},
        "message": nullable({"type": "string"}),
        "code": nullable({"type": "string"}),
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


SESSION_SUMMARY_SCHEMA = object_schema(
    {
        "id": {"type": "string"},
        "status": STATUS_SCHEMA,
        "live": {"type": "boolean"},
        "created_at": nullable({"type": "integer"}),
        "parent_session": nullable({"type": "string"}),
        "seed_length": nullable({"type": "integer"}),
        "labels": {"type": "object"},
        "problem": nullable({"type": "string"}),
    },
    ("id", "status", "live", "created_at", "parent_session", "seed_length", "labels", "problem"),
)


@frozen
class SessionPage:
    """A page of sessions in id order; pass `next_cursor` as `cursor` for the next page."""

    sessions: tuple[SessionSummary, ...]
    next_cursor: str | None


SESSION_PAGE_SCHEMA = object_schema(
    {
        "sessions": {"type": "array", "items": SESSION_SUMMARY_SCHEMA},
        "next_cursor": nullable({"type": "string"}),
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


USAGE_REPORT_SCHEMA = object_schema(
    {
        "model": USAGE_SCHEMA,
        "compaction": USAGE_SCHEMA,
        "total": USAGE_SCHEMA,
        "model_calls": {"type": "integer", "minimum": 0},
        "compaction_calls": {"type": "integer", "minimum": 0},
        "cached_fraction": nullable({"type": "number", "minimum": 0, "maximum": 1}),
    },
    ("model", "compaction", "total", "model_calls", "compaction_calls", "cached_fraction"),
)


@frozen
class SpendReport:
    """What model calls cost (docs/budgets.md): tokens (billed input plus output), calls,
    and dollars by genai-prices (null when a price is unknown or the extra is missing)."""

    tokens: int
    model_calls: int
    usd: float | None


SPEND_SCHEMA = object_schema(
    {
        "tokens": {"type": "integer", "minimum": 0},
        "model_calls": {"type": "integer", "minimum": 0},
        "usd": nullable({"type": "number", "minimum": 0}),
    },
    ("tokens", "model_calls", "usd"),
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
    spend: SpendReport
    """The session's own model and summarizer calls."""
    subtree_spend: SpendReport
    """The session's and every stored subagent session's below it."""


SESSION_DETAIL_SCHEMA = object_schema(
    {
        "id": {"type": "string"},
        "status": STATUS_SCHEMA,
        "live": {"type": "boolean"},
        "profile": nullable({"type": "string"}),
        "created_at": {"type": "integer"},
        "lineage": object_schema(
            {
                "parent_session": nullable({"type": "string"}),
                "seed_length": nullable({"type": "integer"}),
            },
            ("parent_session", "seed_length"),
        ),
        "labels": {"type": "object"},
        "events": {"type": "integer", "minimum": 0},
        "turns": {"type": "integer", "minimum": 0},
        "open_turn": nullable({"type": "integer"}),
        "header": nullable({"type": "object"}),
        "usage": USAGE_REPORT_SCHEMA,
        "spend": SPEND_SCHEMA,
        "subtree_spend": SPEND_SCHEMA,
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
        "spend",
        "subtree_spend",
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


REQUEST_DETAIL_SCHEMA = object_schema(
    {
        "session_id": {"type": "string"},
        "seq": {"type": "integer", "minimum": 0},
        "turn": {"type": "integer", "minimum": 1},
        "step": {"type": "integer", "minimum": 1},
        "step_start_seq": {"type": "integer", "minimum": 0},
        "snapshot_seq": {"type": "integer", "minimum": 0},
        "header_seq": {"type": "integer", "minimum": 0},
        "system": nullable({"type": "string"}),
        "prefix": {"type": "array", "items": {"type": "object"}},
        "history": {"type": "array", "items": {"type": "object"}},
        "tools": {"type": "array", "items": {"type": "object"}},
        "config": {"type": "object"},
        "digest": object_schema(
            {"recorded": nullable({"type": "string"}), "rebuilt": {"type": "string"}},
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


VERIFY_OUTCOME_SCHEMA = object_schema(
    {
        "session_id": {"type": "string"},
        "ok": {"type": "boolean"},
        "events": {"type": "integer", "minimum": 0},
        "turns": {"type": "integer", "minimum": 0},
        "requests_checked": {"type": "integer", "minimum": 0},
        "requests_without_digest": {"type": "integer", "minimum": 0},
        "failed_seq": nullable({"type": "integer"}),
        "problem": nullable({"type": "string"}),
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


PROFILE_LIST_SCHEMA = object_schema(
    {
        "profiles": {
            "type": "array",
            "items": object_schema(
                {
                    "name": {"type": "string"},
                    "description": {"type": "string"},
                    "model": {"type": "string"},
                    "provider": nullable({"type": "string"}),
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


HEALTH_SCHEMA = object_schema(
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


ERROR_SCHEMA = object_schema(
    {
        "error": object_schema(
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


plain = _plain_converter()
"""The converter between the shapes and plain JSON values."""


def to_json(value: object) -> bytes:
    """A response value as JSON bytes (every field present; null for none)."""
    return orjson.dumps(plain.unstructure(value))
