"""Session id validation: ids become file names and SQL keys, so hostile ids are refused."""

from __future__ import annotations

import re

from ..errors import InvalidSessionId

MAX_SESSION_ID_LENGTH = 128
_ALLOWED = re.compile(r"[A-Za-z0-9._-]+")


def check_session_id(session_id: object) -> str:
    """Return `session_id` if it is safe as a file name and key, else raise InvalidSessionId.

    Allowed: 1..128 characters from [A-Za-z0-9._-], not starting with '.', no '..'.
    """
    if not isinstance(session_id, str):
        raise InvalidSessionId(f"session id must be a str, got {type(session_id).__name__}")
    if (
        _ALLOWED.fullmatch(session_id) is not None
        and len(session_id) <= MAX_SESSION_ID_LENGTH
        and not session_id.startswith(".")
        and ".." not in session_id
    ):
        return session_id  # the common case: valid, and no message to build
    shown = repr(session_id[:40]) + ("..." if len(session_id) > 40 else "")
    if not session_id:
        raise InvalidSessionId("session id must not be empty")
    if len(session_id) > MAX_SESSION_ID_LENGTH:
        raise InvalidSessionId(
            f"session id {shown} is {len(session_id)} characters (max {MAX_SESSION_ID_LENGTH})"
        )
    if _ALLOWED.fullmatch(session_id) is None:
        raise InvalidSessionId(
            f"session id {shown} may only contain letters, digits, '.', '_' and '-'"
        )
    if session_id.startswith("."):
        raise InvalidSessionId(f"session id {shown} must not start with '.'")
    if ".." in session_id:
        raise InvalidSessionId(f"session id {shown} must not contain '..'")
    return session_id
