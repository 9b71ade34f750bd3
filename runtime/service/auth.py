"""Who may call the service: the bearer token on every `/v1` route (compared in constant
time) and the rule that only a loopback address may be bound without one
(docs/spec/runtime.md §15.8)."""

from __future__ import annotations

import hmac
import ipaddress

from starlette.datastructures import Headers
from starlette.responses import Response

from ..errors import ErrorCode
from .errors import ServeConfigError, error_response

TOKEN_ENV = "ACTORLOOP_API_TOKEN"
PROTECTED_PREFIX = "/v1"


def is_loopback(host: str) -> bool:
    """Whether `host` names this machine only (`localhost`, 127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None) -> None:
    """Refuse to serve on a non-loopback address without an API token."""
    if not token and not is_loopback(host):
        raise ServeConfigError(
            f"refusing to bind {host!r} without an API token: set ACTORLOOP_API_TOKEN "
            "(clients then send Authorization: Bearer <token>) or bind a loopback address"
        )


def token_matches(authorization: str | None, token: str) -> bool:
    """Whether an `Authorization` header carries `Bearer <token>` (constant time in the
    token's content; the scheme is case-insensitive, as RFC 7235 says)."""
    if authorization is None:
        return False
    scheme, _, presented = authorization.partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(presented.strip().encode(), token.encode())


class BearerAuth:
    """A `/v1` request without the token gets 401 UNAUTHORIZED (`edge.Edge` asks
    `refusal`)."""

    def __init__(self, token: str) -> None:
        if not token:
            raise ServeConfigError("the API token must not be empty")
        self._token = token

    def refusal(self, path: str, headers: Headers) -> Response | None:
        """The 401 for a request to `path` with these headers, or None when it may go on."""
        if not _protected(path) or token_matches(headers.get("authorization"), self._token):
            return None
        return error_response(
            401,
            ErrorCode.UNAUTHORIZED,
            "this server needs Authorization: Bearer <token> on /v1 routes",
            headers={"WWW-Authenticate": 'Bearer realm="actorloop"'},
        )


def _protected(path: str) -> bool:
    return path == PROTECTED_PREFIX or path.startswith(PROTECTED_PREFIX + "/")
