"""Typed exceptions raised by the public API; each names what was wrong and where."""

from __future__ import annotations


class ActorloopError(Exception):
    """Base of every error actorloop raises on purpose."""


class SessionValidationError(ActorloopError, ValueError):
    """An append (or a loaded event) breaks a log rule; nothing was changed."""

    def __init__(self, seq: int, rule: str) -> None:
        super().__init__(f"event {seq}: {rule}")
        self.seq = seq
        self.rule = rule


class SessionFormatError(ActorloopError, ValueError):
    """Stored bytes cannot be decoded into a valid event (names the seq or location)."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}")
        self.where = where
        self.problem = problem


class SessionFormatUnsupported(ActorloopError):
    """The stored format version is newer or unknown; the session is refused, not repaired."""


class SessionCorruptError(ActorloopError):
    """Damage before the last intact turn end: the log cannot be repaired by truncation."""

    def __init__(self, location: str, problem: str) -> None:
        super().__init__(f"corrupt session log at {location}: {problem}")
        self.location = location
        self.problem = problem


class SessionForkError(ActorloopError):
    """A fork was refused; `code` is one of INVALID_BOUNDARY, OPEN_TURN, SESSION_NOT_FOUND,
    SESSION_ALREADY_EXISTS."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


class SessionNotFound(ActorloopError, KeyError):
    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id!r} not found")
        self.session_id = session_id

    def __str__(self) -> str:
        return str(self.args[0])


class SessionExists(ActorloopError):
    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id!r} already exists")
        self.session_id = session_id


class SessionBusy(ActorloopError):
    """Another live writer owns the session (single-writer rule)."""


class InvalidSessionId(ActorloopError, ValueError):
    pass


class HeaderFoldError(ActorloopError, ValueError):
    """A header delta appears before any snapshot, or does not apply."""


class InvariantViolation(ActorloopError, AssertionError):
    """A loop-built request is not what the log rebuilds (dev invariants)."""


class StoreError(ActorloopError):
    """The durable store failed; every pending and later flush barrier raises this."""


class AgentClosed(ActorloopError):
    """The agent was disposed (or failed); it takes no more work."""


class InboxFull(ActorloopError):
    """A synchronous enqueue found the bounded inbox full."""


class HookError(ActorloopError):
    """A listener broke the hook protocol (e.g. called next() twice)."""


class ProviderError(ActorloopError):
    """A model call failed; `code` is stable (e.g. CONTEXT_WINDOW_EXCEEDED, RATE_LIMITED)."""

    def __init__(self, message: str, code: str | None = None, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.retryable = retryable


class ScriptExhausted(ProviderError):
    def __init__(self, calls: int) -> None:
        super().__init__(
            f"ScriptedProvider script exhausted after {calls} calls", "SCRIPT_EXHAUSTED"
        )


class ActorStopped(ActorloopError):
    """An actor stopped (or failed) before it could take a message or answer an ask.

    The actor's failure, if any, is the `__cause__`.
    """

    def __init__(self, actor: str, problem: str) -> None:
        super().__init__(f"actor {actor!r} {problem}")
        self.actor = actor


class StoreUrlError(ActorloopError, ValueError):
    """A store URL (or store option) is not one this build understands."""
