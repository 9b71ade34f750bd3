"""The service's errors and how every error meets HTTP: the `ServiceError` subclasses a
request can be refused with, the status and stable code of every typed error, and the one
error body shape `{"error": {"code", "message"}}` (docs/spec/runtime.md §15.2). Importing
it needs no `serve` extra (Starlette loads when a response is made).

    ServiceError (actorloop.runtime.errors)   the HTTP service refused a request
    ├── InvalidRequestBody     [ValueError] a body that is not JSON, too big, off-schema,
    │                          too slow, or a message over the limit; a bad query parameter
    ├── UnknownProfile         [LookupError] no agent profile by that name
    ├── IdempotencyKeyReused   a key sent again with a different request
    ├── ServiceDraining        the server is shutting down; it starts nothing
    ├── OwnerLost              the instance owning the session died before answering
    └── ServeConfigError       [ValueError] `serve` cannot start as configured
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

import orjson
from attrs import frozen

from ..errors import (
    ActorloopError,
    AgentBusy,
    AgentClosed,
    ApprovalAlreadyDecided,
    ApprovalNotFound,
    ApprovalsPending,
    ContentError,
    ErrorCode,
    InboxFull,
    InvalidSessionId,
    JsonValueError,
    ProviderNotConfigured,
    RequestRebuildError,
    RuntimeClosed,
    ServiceError,
    SessionBusy,
    SessionCorruptError,
    SessionExists,
    SessionFenced,
    SessionForkError,
    SessionFormatError,
    SessionFormatUnsupported,
    SessionNotFound,
    StoreError,
    ToolOrderError,
    VerificationFailed,
)

if TYPE_CHECKING:
    from starlette.responses import Response

log = logging.getLogger("actorloop.service")

_DIRECTORIES = re.compile(r"(?<![\w/:.~-])/(?:[^\s/'\"()]+/)+(?=[^\s/'\"()])")
"""The directories of an absolute filesystem path (not a URL's path: `//` or a scheme's
`:` comes before that one)."""


def hide_directories(text: str) -> str:
    """`text` with every absolute filesystem path cut to its last name (`sqlite
    /home/me/x.db` → `sqlite …/x.db`): what a client is shown of a store's location. A
    store URL that is no path (PostgreSQL's) and a relative path stay as configured; the
    server log keeps the whole path for the operator."""
    return _DIRECTORIES.sub("…/", text)


class InvalidRequestBody(ServiceError, ValueError):
    """A request body that is not JSON (INVALID_JSON), larger than the limit
    (BODY_TOO_LARGE), slower than the body timeout (BODY_READ_TIMEOUT), off its schema
    (VALIDATION_FAILED) or carrying a message over the limit (MESSAGE_TOO_LARGE), or a bad
    query parameter."""


class UnknownProfile(ServiceError, LookupError):
    """No agent profile of that name is registered."""

    code = ErrorCode.UNKNOWN_PROFILE


class IdempotencyKeyReused(ServiceError):
    """An idempotency key came back with a different request than the one it was first
    used for; the first request's turn stands, nothing new is started."""

    code = ErrorCode.IDEMPOTENCY_KEY_REUSED


class ServiceDraining(ServiceError):
    """The server is draining for shutdown: it takes no new requests."""

    code = ErrorCode.SERVER_DRAINING


class OwnerLost(ServiceError):
    """A request handed to the instance owning its session was taken by that instance, which
    then died before answering; the session is taken over once its lease expires. Whether
    the request took effect is not known: read the session's events, then retry."""

    code = ErrorCode.OWNER_LOST


class ServeConfigError(ServiceError, ValueError):
    """`serve` cannot start as configured: an `--app` that does not load, a profiles file
    off its schema, a non-loopback bind without an API token."""


@frozen
class HttpError:
    """What one error becomes on the wire."""

    status: int
    code: ErrorCode
    message: str


STATUS_OF_CODE: dict[ErrorCode, int] = {
    ErrorCode.INVALID_JSON: 400,
    ErrorCode.INVALID_SESSION_ID: 400,
    ErrorCode.UNAUTHORIZED: 401,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.SESSION_NOT_FOUND: 404,
    ErrorCode.EVENT_NOT_FOUND: 404,
    ErrorCode.METHOD_NOT_ALLOWED: 405,
    ErrorCode.SESSION_BUSY: 409,
    ErrorCode.APPROVAL_ALREADY_DECIDED: 409,
    ErrorCode.APPROVALS_PENDING: 409,
    ErrorCode.APPROVAL_NOT_FOUND: 404,
    ErrorCode.SESSION_ALREADY_EXISTS: 409,
    ErrorCode.OPEN_TURN: 409,
    ErrorCode.AGENT_CLOSED: 409,
    ErrorCode.SESSION_DAMAGED: 409,
    ErrorCode.REQUEST_DIGEST_MISMATCH: 409,
    ErrorCode.BODY_TOO_LARGE: 413,
    ErrorCode.VALIDATION_FAILED: 422,
    ErrorCode.INVALID_CONTENT: 422,
    ErrorCode.INVALID_BOUNDARY: 422,
    ErrorCode.UNKNOWN_PROFILE: 422,
    ErrorCode.IDEMPOTENCY_KEY_REUSED: 422,
    ErrorCode.PROVIDER_NOT_CONFIGURED: 422,
    ErrorCode.NOT_A_MODEL_ANSWER: 422,
    ErrorCode.INBOX_FULL: 429,
    ErrorCode.INTERNAL_ERROR: 500,
    ErrorCode.SERVER_DRAINING: 503,
    ErrorCode.STORE_UNAVAILABLE: 503,
    ErrorCode.SESSION_FENCED: 409,
    ErrorCode.OWNER_LOST: 503,
    ErrorCode.UNSUPPORTED_MEDIA_TYPE: 415,
    ErrorCode.FORBIDDEN_ORIGIN: 403,
    ErrorCode.MISDIRECTED_REQUEST: 421,
    ErrorCode.HTTP_VERSION_NOT_SUPPORTED: 505,
    ErrorCode.BODY_READ_TIMEOUT: 408,
    ErrorCode.MESSAGE_TOO_LARGE: 413,
}
"""Every code an error body can carry, with its status."""

_BY_CLASS: tuple[tuple[type[BaseException], ErrorCode], ...] = (
    (AgentBusy, ErrorCode.SESSION_BUSY),
    (ApprovalAlreadyDecided, ErrorCode.APPROVAL_ALREADY_DECIDED),
    (ApprovalNotFound, ErrorCode.APPROVAL_NOT_FOUND),
    (ApprovalsPending, ErrorCode.APPROVALS_PENDING),
    (SessionNotFound, ErrorCode.SESSION_NOT_FOUND),
    (SessionExists, ErrorCode.SESSION_ALREADY_EXISTS),
    (SessionBusy, ErrorCode.SESSION_BUSY),
    (InvalidSessionId, ErrorCode.INVALID_SESSION_ID),
    (SessionCorruptError, ErrorCode.SESSION_DAMAGED),
    (SessionFormatError, ErrorCode.SESSION_DAMAGED),
    (SessionFormatUnsupported, ErrorCode.SESSION_DAMAGED),
    (ContentError, ErrorCode.INVALID_CONTENT),
    (JsonValueError, ErrorCode.INVALID_CONTENT),
    (ToolOrderError, ErrorCode.VALIDATION_FAILED),
    (InboxFull, ErrorCode.INBOX_FULL),
    (AgentClosed, ErrorCode.AGENT_CLOSED),
    (RuntimeClosed, ErrorCode.SERVER_DRAINING),
    (ProviderNotConfigured, ErrorCode.PROVIDER_NOT_CONFIGURED),
    (VerificationFailed, ErrorCode.REQUEST_DIGEST_MISMATCH),
    (SessionFenced, ErrorCode.SESSION_FENCED),
    (StoreError, ErrorCode.STORE_UNAVAILABLE),
)


def http_error(error: BaseException) -> HttpError:
    """The status, code and message for `error`.

    Typed errors keep their message (they name the session, seq or field and never carry a
    secret), with a store's directories hidden (`hide_directories`); anything else is a
    bug: logged here with its traceback, answered 500 with a message that reveals nothing
    of it.
    """
    code: ErrorCode | None = None
    if isinstance(error, (ServiceError, SessionForkError, RequestRebuildError)):
        code = ErrorCode(error.code)
    else:
        code = next((c for cls, c in _BY_CLASS if isinstance(error, cls)), None)
    if code is None or not isinstance(error, ActorloopError):
        log.error("request failed: %s", type(error).__name__, exc_info=error)
        return HttpError(500, ErrorCode.INTERNAL_ERROR, "internal error; see the server log")
    message = str(error)
    if code is ErrorCode.STORE_UNAVAILABLE:
        log.error("store error: %s", message)
    return HttpError(STATUS_OF_CODE[code], code, hide_directories(message))


def error_response(
    status: int, code: ErrorCode, message: str, headers: Mapping[str, str] | None = None
) -> Response:
    """The one error body: `{"error": {"code": ..., "message": ...}}`."""
    from starlette.responses import Response  # the serve extra, needed from here on

    body = orjson.dumps({"error": {"code": str(code), "message": message}})
    return Response(body, status, headers=dict(headers or {}), media_type="application/json")


def response_for(error: BaseException) -> Response:
    """The error response for `error` (see `http_error`)."""
    mapped = http_error(error)
    return error_response(mapped.status, mapped.code, mapped.message)
