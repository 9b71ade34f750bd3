"""The OpenAPI 3.1 document of the service (`GET /openapi.json`), built from the JSON
Schemas in `bodies` (that also validate the request bodies) and `schemas`, so the document
cannot drift from what the server accepts; every status an operation can answer is
listed."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from attrs import frozen

from . import schemas as s
from .approval_shapes import APPROVAL_LIST_SCHEMA
from .bodies import BODIES
from .endpoints import ENDPOINTS

JsonObject = dict[str, Any]

ERROR_RESPONSES = {
    400: "A body that is not JSON (INVALID_JSON) or a session id that is refused "
    "(INVALID_SESSION_ID).",
    401: "Missing or wrong bearer token (UNAUTHORIZED).",
    403: "A state-changing request from another site: an `Origin` that is not this server's "
    "or a cross-site `Sec-Fetch-Site` (FORBIDDEN_ORIGIN).",
    404: "No such session (SESSION_NOT_FOUND), event (EVENT_NOT_FOUND), waiting call "
    "(APPROVAL_NOT_FOUND) or route (NOT_FOUND).",
    405: "The route does not take this method (METHOD_NOT_ALLOWED).",
    409: "The session is busy (SESSION_BUSY), exists already (SESSION_ALREADY_EXISTS), has "
    "an open turn (OPEN_TURN), is closed (AGENT_CLOSED), cannot be read (SESSION_DAMAGED), "
    "does not rebuild its request (REQUEST_DIGEST_MISMATCH), has calls waiting for a "
    "decision (APPROVALS_PENDING) or the call was decided (APPROVAL_ALREADY_DECIDED).",
    408: "The body did not arrive within the server's body timeout (BODY_READ_TIMEOUT).",
    413: "The body is larger than the server's limit (BODY_TOO_LARGE), or the message in "
    "it longer than the per-message limit (MESSAGE_TOO_LARGE).",
    415: "The body is not sent as `Content-Type: application/json` (UNSUPPORTED_MEDIA_TYPE).",
    421: "A server without a token answers only loopback host names and those it was given "
    "with --allowed-host (MISDIRECTED_REQUEST).",
    422: "The body or a parameter breaks its schema (VALIDATION_FAILED, INVALID_CONTENT, "
    "INVALID_BOUNDARY, UNKNOWN_PROFILE, IDEMPOTENCY_KEY_REUSED, PROVIDER_NOT_CONFIGURED, "
    "NOT_A_MODEL_ANSWER).",
    429: "The agent's inbox is full (INBOX_FULL); retry later.",
    503: "The server is draining for shutdown (SERVER_DRAINING) or its store failed "
    "(STORE_UNAVAILABLE).",
}

SESSION_EVENT_SCHEMA: JsonObject = {
    "description": "One session event as the log's codec encodes it (docs/events.md).",
    "type": "object",
    "properties": {
        "type": {"type": "string"},
        "seq": {"type": "integer", "minimum": 0},
        "time": {"type": "integer", "minimum": 0},
        "data": {"type": "object"},
        "source_event_seqs": {"type": "array", "items": {"type": "integer"}},
        "surface_op": {"type": "object"},
        "ignorable": {"const": True},
    },
    "required": ["type", "seq", "time", "data"],
}
SSE_EVENT_SCHEMA: JsonObject = {
    "description": "Each Server-Sent Event: `id` is the event's seq, `event` its type, `data` "
    "the event as JSON.",
    "type": "object",
    "properties": {
        "id": {"type": "string", "pattern": "^[0-9]+$"},
        "event": {"type": "string"},
        "data": {
            "type": "string",
            "contentMediaType": "application/json",
            "contentSchema": SESSION_EVENT_SCHEMA,
        },
    },
    "required": ["id", "event", "data"],
}

ID_PARAMETER: JsonObject = {
    "name": "id",
    "in": "path",
    "required": True,
    "schema": s.SESSION_ID_SCHEMA,
}


def _json(schema: JsonObject, description: str) -> JsonObject:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _operation(
    operation_id: str,
    summary: str,
    responses: dict[int, JsonObject],
    errors: tuple[int, ...],
    *,
    body: JsonObject | None = None,
    parameters: tuple[JsonObject, ...] = (),
    auth: bool,
) -> JsonObject:
    codes = set(errors)
    if auth:
        codes.add(401)
    else:
        codes.add(421)
    if body is not None:
        codes |= {400, 403, 408, 413, 415, 422}
    if any(parameter["in"] == "path" for parameter in parameters):
        codes |= {400, 404}
    codes |= {405, 503}
    operation: JsonObject = {
        "operationId": operation_id,
        "summary": summary,
        "responses": {
            **{
                str(status): {"$ref": f"#/components/responses/Error{status}"}
                for status in sorted(codes)
            },
            **{str(status): value for status, value in responses.items()},
        },
    }
    if parameters:
        operation["parameters"] = list(parameters)
    if body is not None:
        operation["requestBody"] = {
            # An empty body reads as {}: required exactly when the schema requires a field.
            "required": bool(body.get("required")),
            "content": {"application/json": {"schema": body}},
        }
    if auth:
        operation["security"] = [{"bearer": []}]
    return operation


@frozen
class Doc:
    """What the document says of one operation beyond the route table: its summary, its
    answers, the error statuses of its own, and the header parameters it reads."""

    summary: str
    responses: dict[int, JsonObject]
    errors: tuple[int, ...]
    headers: tuple[JsonObject, ...] = ()


def _path_parameters(path: str) -> tuple[str, ...]:
    """The names of a route's path parameters (`/v1/sessions/{id}` -> `("id",)`)."""
    return tuple(part[1:-1] for part in path.split("/") if part.startswith("{"))


STATE = _json(s.SESSION_STATE_SCHEMA, "The session and its status.")
ACCEPTED = _json(s.SESSION_STATE_SCHEMA, "Accepted; the work runs on (follow the events).")
AFTER: JsonObject = {
    "name": "after",
    "in": "query",
    "required": False,
    "schema": {"type": "integer", "minimum": -1, "maximum": 9_007_199_254_740_991},
    "description": "Stream events with a seq above this one (default: from the start).",
}
FOLLOW: JsonObject = {
    "name": "follow",
    "in": "query",
    "required": False,
    "schema": {"enum": ["true", "false"]},
    "description": "Keep the stream open for new events (default true).",
}
LAST_EVENT_ID: JsonObject = {
    "name": "Last-Event-ID",
    "in": "header",
    "required": False,
    "schema": {"type": "string", "pattern": "^[0-9]{1,16}$"},
    "description": "The seq of the last event received; wins over `after`.",
}
IDEMPOTENCY_KEY: JsonObject = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "schema": {"type": "string", "minLength": 1, "maxLength": 200},
    "description": "Retry-safe: the first outcome of this key (kept by the store) answers "
    "every retry, marked `Idempotent-Replayed: true` (docs/serve.md §5).",
}
LIMIT: JsonObject = {
    "name": "limit",
    "in": "query",
    "required": False,
    "schema": {"type": "integer", "minimum": 1, "maximum": 1000},
}
CURSOR: JsonObject = {
    "name": "cursor",
    "in": "query",
    "required": False,
    "schema": {"type": "string", "minLength": 1, "maxLength": 128},
    "description": "`next_cursor` of the previous page.",
}
CALL_ID: JsonObject = {
    "name": "call_id",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "minLength": 1},
}
SEQ: JsonObject = {
    "name": "seq",
    "in": "path",
    "required": True,
    "schema": {"type": "integer", "minimum": 0, "maximum": 9_007_199_254_740_991},
}
DOCS: dict[str, Doc] = {
    "health": Doc(
        "Liveness; 503 while draining.",
        {
            200: _json(s.HEALTH_SCHEMA, "Serving."),
            503: _json(s.HEALTH_SCHEMA, "Draining for shutdown."),
        },
        (),
        (),
    ),
    "listProfiles": Doc(
        "The agent profiles sessions can be created with.",
        {200: _json(s.PROFILE_LIST_SCHEMA, "The profiles.")},
        (),
        (),
    ),
    "createSession": Doc(
        "Spawn an agent on a new session.",
        {201: _json(s.SESSION_STATE_SCHEMA, "Created.")},
        (409,),
        (IDEMPOTENCY_KEY,),
    ),
    "listSessions": Doc(
        "Stored sessions, in id order, a page at a time.",
        {200: _json(s.SESSION_PAGE_SCHEMA, "A page.")},
        (422,),
        (),
    ),
    "getSession": Doc(
        "Status, lineage, turns, request header and usage.",
        {200: _json(s.SESSION_DETAIL_SCHEMA, "The session.")},
        (409,),
        (),
    ),
    "disposeSession": Doc(
        "Dispose the live agent (its running turn ends `disposed`); the log stays.",
        {200: STATE},
        (403, 409),
        (IDEMPOTENCY_KEY,),
    ),
    "sendMessage": Doc(
        "Run one turn; 200 with its outcome when `wait` (the default), else 202.",
        {
            200: _json(s.TURN_OUTCOME_SCHEMA, "The turn ended."),
            202: ACCEPTED,
        },
        (409, 429),
        (IDEMPOTENCY_KEY,),
    ),
    "steer": Doc(
        "Redirect the running turn (on an idle session: start a turn).",
        {202: ACCEPTED},
        (409, 429),
        (IDEMPOTENCY_KEY,),
    ),
    "inject": Doc(
        "Add durable context (a context/message) without making the model answer.",
        {202: ACCEPTED},
        (409, 429),
        (IDEMPOTENCY_KEY,),
    ),
    "cancel": Doc(
        "Cancel the running turn (it ends `aborted`) and, without keep_inbox, every queued send.",
        {200: _json(s.CANCEL_OUTCOME_SCHEMA, "Cancelled (or nothing to cancel).")},
        (409,),
        (IDEMPOTENCY_KEY,),
    ),
    "fork": Doc(
        "A child session seeded with this one up to a turn/end.",
        {201: _json(s.FORK_OUTCOME_SCHEMA, "The child.")},
        (409,),
        (IDEMPOTENCY_KEY,),
    ),
    "resume": Doc(
        "Start a loop instance on the stored session (no-op when live).",
        {200: _json(s.RESUME_OUTCOME_SCHEMA, "Live.")},
        (409,),
        (IDEMPOTENCY_KEY,),
    ),
    "listApprovals": Doc(
        "The calls waiting for a decision (a turn that ended `awaiting_approval`).",
        {200: _json(APPROVAL_LIST_SCHEMA, "The waiting calls, in the order asked.")},
        (409,),
        (),
    ),
    "decideApproval": Doc(
        "Approve (optionally with edited arguments) or reject one waiting call: the one "
        "decision is logged, the call runs (or gets the rejection as its result) and the "
        "turn goes on; 200 with the continuation's outcome.",
        {200: _json(s.TURN_OUTCOME_SCHEMA, "The continuation ended.")},
        (404, 409),
        (IDEMPOTENCY_KEY,),
    ),
    "streamEvents": Doc(
        "The session's events as Server-Sent Events: `id: <seq>`, "
        "`event: <type>`, `data: <the event as the log's codec encodes it>`.",
        {
            200: {
                "description": "An event stream.",
                "content": {"text/event-stream": {"schema": SSE_EVENT_SCHEMA}},
            }
        },
        (409, 422),
        (LAST_EVENT_ID,),
    ),
    "chat": Doc(
        "One turn as an AI SDK UI message stream (v1): the body `useChat`'s default "
        "transport sends (`{id, messages, trigger}`; the last message is the new user "
        "message), Server-Sent Events of UI message parts out, `data: [DONE]` last. "
        "Closing the request cancels the turn (docs/serve.md).",
        {200: {"description": "A UI message stream.", "content": {"text/event-stream": {}}}},
        (409, 415, 422),
        (),
    ),
    "getChatMessages": Doc(
        "The session's conversation as AI SDK UI messages (`useChat`'s initial messages): "
        "`{id, messages}`, one assistant message per run of steps, tool results on their "
        "calls' parts.",
        {200: {"description": "The UI messages.", "content": {"application/json": {}}}},
        (409,),
        (),
    ),
    "resumeChatStream": Doc(
        "The UI message stream of the turn a client was cut off in: after Last-Event-ID "
        "(`<seq>` or `<seq>.<part>`), or the open turn from its start; 204 when none runs.",
        {
            200: {"description": "A UI message stream.", "content": {"text/event-stream": {}}},
            204: {"description": "No turn runs."},
        },
        (409, 422),
        (
            {
                "name": "Last-Event-ID",
                "in": "header",
                "required": False,
                "schema": {"type": "string", "pattern": "^[0-9]{1,16}(\\.[0-9]{1,6})?$"},
                "description": "The id of the last frame received.",
            },
        ),
    ),
    "runAgUi": Doc(
        "One AG-UI run: a RunAgentInput in (thread id = session id, created on its first "
        "run), AG-UI events out as Server-Sent Events (run id = turn number).",
        {200: {"description": "AG-UI events.", "content": {"text/event-stream": {}}}},
        (409, 415, 422),
        (),
    ),
    "getRequest": Doc(
        "The exact request the assistant/message at `seq` answered, rebuilt from "
        "the log, its digest checked against the recorded one.",
        {200: _json(s.REQUEST_DETAIL_SCHEMA, "The request.")},
        (409, 422),
        (),
    ),
    "verifySession": Doc(
        "Check every log rule and rebuild every recorded request digest.",
        {200: _json(s.VERIFY_OUTCOME_SCHEMA, "The verdict.")},
        (409,),
        (),
    ),
}
"""Per operation id of the route table (`endpoints`), what the document says beyond it."""

PARAMETERS: dict[str, JsonObject] = {
    "id": ID_PARAMETER,
    "seq": SEQ,
    "call_id": CALL_ID,
    "after": AFTER,
    "follow": FOLLOW,
    "limit": LIMIT,
    "cursor": CURSOR,
}
"""The path and query parameters by name, as the route table names them."""


def openapi_document(*, auth: bool) -> JsonObject:
    """The document for a server with (`auth`) or without a bearer token."""
    try:
        package_version = version("actorloop")
    except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        package_version = "0"
    paths: JsonObject = {}
    for endpoint in ENDPOINTS:
        if endpoint.operation_id is None:
            continue
        doc = DOCS[endpoint.operation_id]
        names = (*_path_parameters(endpoint.path), *endpoint.query)
        paths.setdefault(endpoint.path, {})[endpoint.method.lower()] = _operation(
            endpoint.operation_id,
            doc.summary,
            doc.responses,
            # A malformed or reused Idempotency-Key is 422, on a route without a body too.
            (*doc.errors, 422) if IDEMPOTENCY_KEY in doc.headers else doc.errors,
            body=None if endpoint.body is None else BODIES[endpoint.body].schema,
            parameters=(*(PARAMETERS[name] for name in names), *doc.headers),
            auth=auth and endpoint.path.startswith("/v1"),
        )
    document: JsonObject = {
        "openapi": "3.1.0",
        "info": {
            "title": "actorloop serve",
            "version": package_version,
            "description": "Agent sessions over HTTP: spawn, send, stream, cancel, fork, "
            "resume, and the exact request behind every model answer.",
        },
        "paths": paths,
        "components": {
            "schemas": {"Error": s.ERROR_SCHEMA},
            "responses": {
                f"Error{status}": _json({"$ref": "#/components/schemas/Error"}, description)
                for status, description in ERROR_RESPONSES.items()
            },
        },
    }
    if auth:
        document["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    return document
