"""The route table: every route of the API once — method, path, handler, the query
parameters it takes and its body — read by the app (its routes) and by the OpenAPI document
(its paths), so neither keeps a list of its own."""

from __future__ import annotations

from attrs import frozen

from .approval_shapes import Decide
from .bodies import Cancel, CreateSession, Fork, Inject, Resume, SendMessage, Steer


@frozen
class Endpoint:
    """One route: `handler` names its method on `handlers.Handlers`, `operation_id` its
    operation in the OpenAPI document (None: not documented, as /openapi.json itself);
    `query` the query parameters it takes (any other is refused), `body` its request body
    class (`bodies`)."""

    method: str
    path: str
    handler: str
    operation_id: str | None
    query: tuple[str, ...] = ()
    body: type | None = None


ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint("GET", "/healthz", "health", "health"),
    Endpoint("GET", "/openapi.json", "openapi_json", None),
    Endpoint("GET", "/v1/profiles", "profiles", "listProfiles"),
    Endpoint("POST", "/v1/sessions", "create_session", "createSession", body=CreateSession),
    Endpoint("GET", "/v1/sessions", "list_sessions", "listSessions", ("limit", "cursor")),
    Endpoint("GET", "/v1/sessions/{id}", "get_session", "getSession"),
    Endpoint("DELETE", "/v1/sessions/{id}", "dispose_session", "disposeSession"),
    Endpoint("POST", "/v1/sessions/{id}/messages", "send_message", "sendMessage", body=SendMessage),
    Endpoint("POST", "/v1/sessions/{id}/steer", "steer", "steer", body=Steer),
    Endpoint("POST", "/v1/sessions/{id}/inject", "inject", "inject", body=Inject),
    Endpoint("POST", "/v1/sessions/{id}/cancel", "cancel", "cancel", body=Cancel),
    Endpoint("POST", "/v1/sessions/{id}/fork", "fork", "fork", body=Fork),
    Endpoint("POST", "/v1/sessions/{id}/resume", "resume", "resume", body=Resume),
    Endpoint("GET", "/v1/sessions/{id}/approvals", "approvals", "listApprovals"),
    Endpoint(
        "POST", "/v1/sessions/{id}/approvals/{call_id}", "decide", "decideApproval", body=Decide
    ),
    Endpoint("GET", "/v1/sessions/{id}/events", "events", "streamEvents", ("after", "follow")),
    Endpoint("POST", "/v1/sessions/{id}/chat", "chat", "chat"),
    Endpoint("GET", "/v1/sessions/{id}/chat", "chat_messages", "getChatMessages"),
    Endpoint("GET", "/v1/sessions/{id}/chat/stream", "chat_stream", "resumeChatStream"),
    Endpoint("POST", "/v1/ag-ui", "ag_ui", "runAgUi"),
    Endpoint("GET", "/v1/sessions/{id}/requests/{seq}", "rebuilt_request", "getRequest"),
    Endpoint("GET", "/v1/sessions/{id}/verify", "verify", "verifySession"),
)
"""Every route of the API, in the order they are matched."""
