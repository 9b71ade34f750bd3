"""What a browser may do to the service: cross-site requests that change state are refused
(`Origin`, `Sec-Fetch-Site`, and JSON as the only body type: no form or `text/plain` post
is a "simple" request), and without a token only loopback host names are answered, so a
rebound DNS name reaches nothing (docs/serve.md, threat model)."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import Message, Scope, Send

from ..errors import ErrorCode
from .errors import error_response

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
"""Methods that change nothing; every other one is state-changing."""

SAME_ORIGIN_FETCHES = frozenset({"same-origin", "none"})
"""`Sec-Fetch-Site` values of a request the page's own origin (or the user) made; `same-site`
is refused too: another port of localhost is the same site."""


def host_name(host: str) -> str:
    """The name of a `Host` header value without its port, lower-cased (`[::1]` keeps its
    brackets); "" when it is not of the form name[:port]."""
    host = host.strip().lower()
    if host.startswith("["):
        name, bracket, rest = host.partition("]")
        if not bracket or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return ""
        return name + bracket
    name, colon, port = host.rpartition(":")
    if not colon:
        return host
    return name if port.isdigit() and ":" not in name else ""


def is_loopback_name(name: str) -> bool:
    """Whether a host name (as `host_name` gives it) names this machine by address or as
    `localhost`: a name that DNS could rebind elsewhere is not."""
    if name == "localhost":
        return True
    literal = name[1:-1] if name.startswith("[") and name.endswith("]") else name
    try:
        address = ipaddress.ip_address(literal)
    except ValueError:
        return False
    return address.is_loopback and (address.version == 4 or name.startswith("["))


class HostCheck:
    """For a server without a token: a request whose `Host` is not a loopback name
    (`127.0.0.1`, `[::1]`, `localhost`, any port) or one of `allowed` gets 421
    MISDIRECTED_REQUEST, pages and API alike (`edge.Edge` asks `refusal`)."""

    def __init__(self, allowed: tuple[str, ...] = ()) -> None:
        self.allowed = frozenset(host_name(name) or name.lower() for name in allowed)

    def allows(self, host: str | None) -> bool:
        """Whether a request with this `Host` header is answered."""
        name = host_name(host or "")
        return bool(name) and (is_loopback_name(name) or name in self.allowed)

    def refusal(self, headers: Headers) -> Response | None:
        """The 421 for a request with these headers, or None when it is answered."""
        if self.allows(headers.get("host")):
            return None
        return error_response(
            421,
            ErrorCode.MISDIRECTED_REQUEST,
            "this server answers only loopback host names (127.0.0.1, [::1], localhost) "
            "and those given with --allowed-host",
        )


def cross_site(headers: Headers) -> str | None:
    """Why a state-changing request comes from another site (None when it does not): an
    `Origin` other than the one the request is addressed to, or a `Sec-Fetch-Site` other
    than same-origin / none."""
    fetch_site = headers.get("sec-fetch-site")
    if fetch_site is not None and fetch_site.strip().lower() not in SAME_ORIGIN_FETCHES:
        return f"Sec-Fetch-Site: {fetch_site[:40]}"
    origin = headers.get("origin")
    if origin is None:
        return None
    parts = urlsplit(origin.strip())
    host = headers.get("host", "")
    if parts.scheme not in ("http", "https") or parts.netloc.lower() != host.strip().lower():
        return f"Origin {origin[:100]!r} is not this server's ({host[:100]!r})"
    return None


def is_json(content_type: str | None) -> bool:
    """Whether a `Content-Type` is `application/json` (parameters such as charset allowed)."""
    if content_type is None:
        return False
    return content_type.partition(";")[0].strip().lower() == "application/json"


def cross_site_refusal(scope: Scope, headers: Headers, api_prefix: str = "/v1") -> Response | None:
    """A state-changing request from another site gets 403 FORBIDDEN_ORIGIN; a POST to the
    API (`/v1`: every route that takes a body takes POST; other methods change nothing there
    or have no body) whose body is not `application/json` gets 415 UNSUPPORTED_MEDIA_TYPE —
    with a token or without. None: the request goes on."""
    method = scope.get("method", "GET")
    if method in SAFE_METHODS:
        return None
    why = cross_site(headers)
    if why is not None:
        return error_response(
            403,
            ErrorCode.FORBIDDEN_ORIGIN,
            f"cross-site requests may not change anything here ({why})",
        )
    path: str = scope["path"]
    on_api = path == api_prefix or path.startswith(api_prefix + "/")
    if on_api and method == "POST" and not is_json(headers.get("content-type")):
        return error_response(
            415,
            ErrorCode.UNSUPPORTED_MEDIA_TYPE,
            "the body must be sent as Content-Type: application/json (an empty body "
            "too), got "
            f"{(headers.get('content-type') or 'none')[:80]!r}",
        )
    return None


NOSNIFF = (b"x-content-type-options", b"nosniff")


def nosniff(send: Send) -> Send:
    """`send` with `X-Content-Type-Options: nosniff` on every answer, so a browser never
    reads JSON or an event stream as a script or a page."""

    async def send_marked(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = [
                (name, value)
                for name, value in message.get("headers", ())
                if name.lower() != b"x-content-type-options"
            ]
            message = {**message, "headers": [*headers, NOSNIFF]}
        await send(message)

    return send_marked
