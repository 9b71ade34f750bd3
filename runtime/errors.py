"""Every exception actorloop raises on purpose, and every stable error code, in one place.

The tree (each class also derives from the builtin named in brackets, so generic handlers
keep working)::

    ActorloopError
    ├── SessionError                   one session's log, lineage or id
    │   ├── SessionValidationError     [ValueError] an append breaks a log rule; nothing changed
    │   ├── SessionFormatError         [ValueError] stored bytes do not decode into an event
    │   ├── SessionFormatUnsupported   a newer or unknown format version; refused, not repaired
    │   ├── SessionCorruptError        damage a load cannot repair by cutting a torn tail
    │   ├── SessionNotFound            [KeyError] no such session in the store
    │   ├── SessionIdAmbiguous         [LookupError] a shortened id matches several sessions
    │   ├── SessionExists              a session with that id is already stored
    │   ├── SessionBusy                another live writer owns the session
    │   ├── SessionForkError           a fork was refused; `.code` is a fork code
    │   ├── InvalidSessionId           [ValueError] unusable as a file name or key
    │   └── HeaderFoldError            [ValueError] a header delta has nothing to apply to
    ├── ContentError                   [TypeError] content is not a str or a tuple of blocks
    ├── ToolOutputError                [TypeError] a tool output is not a str or tuple of Text
    ├── JsonValueError                 [ValueError] a value has no lossless JSON form
    ├── ToolOrderError                 [ValueError] `tool_order` names an unknown tool
    ├── InvalidToolSchema              [ValueError] a tool's parameters are not a JSON Schema
    ├── CallConfigError                [ValueError] a model call option is malformed or conflicts
    ├── AgentError                     a call on an agent handle was refused or failed
    │   ├── AgentClosed                the agent was disposed or failed
    │   ├── InboxFull                  a synchronous enqueue met a full inbox
    │   ├── AgentBusy                  a turn runs or waits (the service's one-run rule)
    │   ├── ApprovalAlreadyDecided     a second decision on a call already decided
    │   ├── ApprovalNotFound           [LookupError] no call waits for a decision by that id
    │   ├── ApprovalsPending           a send while calls wait for decisions
    │   └── TurnFailed                 `TurnResult.raise_for_error()` on an `error` turn
    ├── RuntimeClosed                  the runtime is shutting down; it starts nothing
    ├── HostError                      [RuntimeError] the asyncio host cannot run here
    │   └── HostTaskCancelled          an asyncio task of a tool was cancelled from outside
    ├── ProviderNotConfigured          [LookupError] no provider of that name in the runtime
    ├── ProviderSpecError              [ValueError] a provider spec string names nothing known
    ├── ProviderError                  a model call failed; `.code` is a provider code
    │   ├── TransientProviderError     retryable, before the first streamed byte
    │   └── ScriptExhausted            a ScriptedProvider ran out of entries
    ├── StreamProtocolError            [ValueError] a provider stream broke the chunk grammar
    ├── CompactionFailed               the summarizer failed closed; `.code` says how
    ├── SubagentError                  a child agent could not answer its parent's call
    ├── BudgetError                    a budget cannot be applied
    │   └── PriceUnknown               [LookupError] a dollar limit, and no price for the model
    ├── StoreError                     the durable store failed; barriers fail closed
    │   ├── StoreUrlError              [ValueError] a store URL this build does not understand
    │   ├── StoreUnavailable           the database cannot be reached now; retry later
    │   ├── SessionFenced              a writer lost its lease to a newer owner; it stops
    │   ├── SessionWriteError          one session's events were not written; others were
    │   └── GroupCommitError           a group commit wrote every session but the failed ones
    ├── HookError                      a listener broke the hook protocol
    │   └── UnknownHookError           [KeyError] no hook by that name
    ├── ActorStopped                   an actor ended before taking a message or answering
    ├── InvariantViolation             [AssertionError] a request is not what the log rebuilds
    ├── VerificationFailed             a stored log fails offline verification
    ├── RequestRebuildError            [LookupError] no model answer at that seq to rebuild
    ├── WorkloadError                  [ValueError] a workload file does not match its schema
    ├── TelemetryError                 tracing was asked for and cannot be set up
    ├── CollectorPolicyError           [ValueError] collector thresholds that gc cannot take
    ├── McpError                       an MCP server could not be used; `.code` says why
    │   ├── McpConfigError             [ValueError] a server spec or `mcp=` value is malformed
    │   ├── McpServerNotConfigured     [LookupError] options name a server the runtime lacks
    │   ├── McpToolNameClash           two tools (servers' or local) would share a name
    │   ├── McpConnectionFailed        a server could not be started, reached or initialized
    │   └── McpToolError               a server answered a tool call with `isError`
    └── ServiceError                   the HTTP service refused a request; `.code` says why
                                       (its subclasses: actorloop.runtime.service.errors)

Codes are the stable strings recorded in logs and shown to callers (`ErrorCode`); every
code actorloop writes is a member of it, so one grep finds every place that uses it (the
enum itself is `error_codes.py`, re-exported here).

The HTTP service's own errors (`InvalidRequestBody`, `UnknownProfile`, ...) live with the
service, in `actorloop.runtime.service.errors`; their old names here still resolve, with a
`DeprecationWarning`, for one release.
"""

from __future__ import annotations

from typing import Any

from .error_codes import ErrorCode
from .lazy import lazy_exports


class ActorloopError(Exception):
    """Base of every error actorloop raises on purpose."""


# ---------------------------------------------------------------------- sessions


class SessionError(ActorloopError):
    """Something is wrong with one session: its log, its lineage or its id."""


class SessionValidationError(SessionError, ValueError):
    """An append (or a loaded event) breaks a log rule; nothing was changed. `code` is set
    for the content rules a caller may want to map (e.g. DUPLICATE_TOOL_CALL_ID)."""

    def __init__(self, seq: int, rule: str, code: ErrorCode | None = None) -> None:
        super().__init__(f"event {seq}: {rule}")
        self.seq = seq
        self.rule = rule
        self.code = code


class SessionFormatError(SessionError, ValueError):
    """Stored bytes cannot be decoded into a valid event (names the seq or location)."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}")
        self.where = where
        self.problem = problem


class SessionFormatUnsupported(SessionError):
    """The stored format version is newer or unknown; the session is refused, not repaired."""


class SessionCorruptError(SessionError):
    """Damage before the last intact turn end: the log cannot be repaired by truncation."""

    def __init__(self, location: str, problem: str) -> None:
        super().__init__(f"corrupt session log at {location}: {problem}")
        self.location = location
        self.problem = problem


class SessionNotFound(SessionError, KeyError):
    """No session with this id is stored."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id!r} not found")
        self.session_id = session_id

    def __str__(self) -> str:
        return str(self.args[0])


class SessionIdAmbiguous(SessionError, LookupError):
    """A shortened or partial session id (as `sessions list` prints them) matches more
    than one stored session; `matches` holds them all."""

    def __init__(self, given: str, matches: tuple[str, ...]) -> None:
        shown = ", ".join(matches[:4]) + (", …" if len(matches) > 4 else "")
        super().__init__(f"session id {given!r} matches {len(matches)} sessions: {shown}")
        self.given = given
        self.matches = matches


class SessionExists(SessionError):
    """A session with this id is already stored."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id!r} already exists")
        self.session_id = session_id


class SessionBusy(SessionError):
    """Another live writer owns the session (single-writer rule)."""


class SessionForkError(SessionError):
    """A fork was refused; `code` is one of SESSION_NOT_FOUND, SESSION_ALREADY_EXISTS,
    INVALID_BOUNDARY (no event at that seq), OPEN_TURN (the seed would end inside a turn,
    closed or not in the source: the child would start with an open one)
    — docs/spec/fork-resume.md §5. The message does not repeat the code."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code

    @classmethod
    def not_a_seq(cls, session_id: str, boundary: object) -> SessionForkError:
        """INVALID_BOUNDARY: `boundary` is not a non-negative int naming a stored event."""
        return cls(
            ErrorCode.INVALID_BOUNDARY,
            f"fork boundary {boundary!r} is not a seq of session {session_id}",
        )

    @classmethod
    def inside_a_turn(cls, session_id: str, boundary: int, event_type: str) -> SessionForkError:
        """OPEN_TURN: the event at `boundary` exists but is not a turn/end, so a seed ending
        there would hold an unfinished turn (the code names the seed's turn, which would be
        open, whether or not the source's turn has ended since)."""
        return cls(
            ErrorCode.OPEN_TURN,
            f"fork boundary {boundary} in session {session_id} must be turn/end, got "
            f"{event_type}: a fork seeds whole turns, and a seed ending there would end inside "
            "a turn",
        )


class InvalidSessionId(SessionError, ValueError):
    """A session id that cannot be used as a file name and store key."""


class HeaderFoldError(SessionError, ValueError):
    """A header delta appears before any snapshot, or does not apply."""


# ---------------------------------------------------------------------- values


class ContentError(ActorloopError, TypeError):
    """Content given to the API is neither a string nor a tuple of content blocks."""


class ToolOutputError(ActorloopError, TypeError):
    """A tool returned something other than a str or a sequence of `Text` with str text
    (or a string with a lone surrogate); `code` is INVALID_TOOL_OUTPUT."""

    code = ErrorCode.INVALID_TOOL_OUTPUT


class JsonValueError(ActorloopError, ValueError):
    """A value is not losslessly representable as JSON; `path` names where."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"not JSON-representable at {path}: {problem}")
        self.path = path
        self.problem = problem


class ToolOrderError(ActorloopError, ValueError):
    """`tool_order` names a tool the agent does not have."""


class CallConfigError(ActorloopError, ValueError):
    """A model call option (`LlmCallConfig`) is malformed, or two options conflict."""


# ---------------------------------------------------------------------- agents and runtime


class InvalidToolSchema(ActorloopError, ValueError):
    """A `Tool`'s `parameters` is not a valid JSON Schema (refused when the Tool is made)."""


class AgentError(ActorloopError):
    """A call on an agent handle was refused."""


class AgentClosed(AgentError):
    """The agent was disposed (or failed); it takes no more work."""


class InboxFull(AgentError):
    """A synchronous enqueue (`steer`, `inject`) found the bounded inbox full."""


class AgentBusy(AgentError):
    """The agent has a turn running or queued, and the caller asked for none to wait behind
    it (the service's one-run-per-session rule, docs/spec/runtime.md §15.3)."""

    code = ErrorCode.SESSION_BUSY


class ApprovalAlreadyDecided(AgentError):
    """The call was already decided (approved or rejected, or a decision is on its way):
    a call gets exactly one decision."""

    code = ErrorCode.APPROVAL_ALREADY_DECIDED


class ApprovalNotFound(AgentError, LookupError):
    """No call of this session waits for a decision under that id."""

    code = ErrorCode.APPROVAL_NOT_FOUND


class ApprovalsPending(AgentError):
    """Calls wait for decisions: a new message would split them from their results. Decide
    them first, or send with `reject_pending=True`."""

    code = ErrorCode.APPROVALS_PENDING


class TurnFailed(AgentError):
    """A turn ended `error`; `result` is its `TurnResult` (message, code, step count)."""

    def __init__(self, result: Any) -> None:
        code = f" [{result.code}]" if getattr(result, "code", None) else ""
        super().__init__(f"turn {result.turn} failed{code}: {result.message}")
        self.result = result


class RuntimeClosed(ActorloopError):
    """The runtime is shutting down (or closed): it starts no more agents."""


class HostError(ActorloopError, RuntimeError):
    """The asyncio host (`actorloop.runtime.aio`) cannot run trio on this thread (trio is
    already running there), or a task it ran on the asyncio side was lost."""


class HostTaskCancelled(HostError):
    """An asyncio task running a tool's `execute` was cancelled from the asyncio side
    alone (not by its turn): the call fails with TOOL_FAILED."""


class ProviderNotConfigured(ActorloopError, LookupError):
    """The options name a provider this runtime was not opened with."""


# ---------------------------------------------------------------------- model calls


class ProviderSpecError(ActorloopError, ValueError):
    """A provider spec that names no known provider (or misuses one); `spec` is the input."""

    def __init__(self, spec: str, problem: str) -> None:
        super().__init__(f"provider spec {spec!r}: {problem}")
        self.spec = spec
        self.problem = problem


class ProviderError(ActorloopError):
    """A model call failed; `code` is stable (e.g. CONTEXT_WINDOW_EXCEEDED, RATE_LIMITED)."""

    def __init__(self, message: str, code: str | None = None, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.retryable = retryable


class TransientProviderError(ProviderError):
    """A retryable failure before the first streamed byte; `retry_after` is the server's hint."""

    def __init__(
        self,
        message: str,
        code: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, code, retryable=True)
        self.status = status
        self.retry_after = retry_after


class ScriptExhausted(ProviderError):
    """A `ScriptedProvider` was called more often than its script has entries."""

    def __init__(self, calls: int) -> None:
        super().__init__(
            f"ScriptedProvider script exhausted after {calls} calls", ErrorCode.SCRIPT_EXHAUSTED
        )


class StreamProtocolError(ActorloopError, ValueError):
    """A provider stream broke the chunk grammar (delta for an unknown block, ...)."""


class CompactionFailed(ActorloopError):
    """The summarizer call failed closed (error, cancel, max-tokens, empty or too long)."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


class SubagentError(ActorloopError):
    """The child could not answer (its turn did not complete); becomes an error tool result."""


class BudgetError(ActorloopError):
    """A budget cannot be applied (docs/budgets.md)."""

    code = ErrorCode.BUDGET_EXHAUSTED


class PriceUnknown(BudgetError, LookupError):
    """A dollar limit applies but the model's price is unknown (not in genai-prices, or the
    `prices` extra is not installed): the call is refused rather than left unpriced."""

    code = ErrorCode.PRICE_UNKNOWN


# ---------------------------------------------------------------------- stores and kernel


class StoreError(ActorloopError):
    """The durable store failed; every pending and later flush barrier raises this."""


class StoreUrlError(StoreError, ValueError):
    """A store URL (or store option) is not one this build understands."""


class StoreUnavailable(StoreError):
    """The store's database cannot be reached now (connection refused or lost, no pooled
    connection in time, the server restarting). Nothing is lost: a commit it interrupted
    either landed whole or not at all; retry once the database is back."""


class SessionFenced(StoreError):
    """This writer's lease on the session was taken over: another owner claimed it with a
    newer owner epoch (this one was paused or cut off past its lease). Every commit is
    conditional on the epoch, so nothing of this writer lands any more; its agent stops
    and it does not retry. `epoch` is the one it held, `current` the owner's now (None when
    unknown)."""

    code = ErrorCode.SESSION_FENCED

    def __init__(self, session_id: str, epoch: int, current: int | None, detail: str = "") -> None:
        now = "" if current is None else f" (owner epoch is now {current})"
        super().__init__(
            f"session {session_id!r}: this writer's lease (owner epoch {epoch}) was taken over"
            f"{now}{detail}; it writes nothing more and does not retry"
        )
        self.session_id = session_id
        self.epoch = epoch
        self.current = current


class SessionWriteError(StoreError):
    """The store could not write one session's events; the other sessions of the same group
    commit are unaffected. The store's own error (tail check, lease, encoding, I/O) is the
    `__cause__`."""

    def __init__(self, session_id: str, problem: str) -> None:
        super().__init__(f"session {session_id!r} was not written: {problem}")
        self.session_id = session_id
        self.problem = problem


class GroupCommitError(StoreError):
    """A group commit wrote and committed every session of the batch except those in
    `failures` (session id, the error that session met), which wrote nothing."""

    def __init__(self, failures: tuple[tuple[str, Exception], ...]) -> None:
        shown = "; ".join(f"{session_id!r}: {error}" for session_id, error in failures[:3])
        more = f" (and {len(failures) - 3} more)" if len(failures) > 3 else ""
        super().__init__(f"{len(failures)} session(s) not written: {shown}{more}")
        self.failures = failures


class HookError(ActorloopError):
    """A listener broke the hook protocol (e.g. called next() twice)."""


class UnknownHookError(HookError, KeyError):
    """`on()` was given a hook name that does not exist."""

    def __init__(self, name: str, known: str) -> None:
        super().__init__(f"unknown hook event {name!r}; known: {known}")

    def __str__(self) -> str:
        return str(self.args[0])


class ActorStopped(ActorloopError):
    """An actor stopped (or failed) before it could take a message or answer an ask.

    The actor's failure, if any, is the `__cause__`.
    """

    def __init__(self, actor: str, problem: str) -> None:
        super().__init__(f"actor {actor!r} {problem}")
        self.actor = actor


class InvariantViolation(ActorloopError, AssertionError):
    """A loop-built request is not what the log rebuilds (dev invariants)."""


class VerificationFailed(ActorloopError):
    """The log breaks a rule or a recorded digest does not match its rebuilt request."""

    def __init__(self, seq: int, problem: str) -> None:
        super().__init__(f"event {seq}: {problem}")
        self.seq = seq
        self.problem = problem


class RequestRebuildError(ActorloopError, LookupError):
    """The seq names no `assistant/message` whose request the log can rebuild; `code` is
    EVENT_NOT_FOUND (no such seq) or NOT_A_MODEL_ANSWER (another event type)."""

    def __init__(self, code: ErrorCode, seq: int, problem: str) -> None:
        super().__init__(f"event {seq}: {problem}")
        self.code = code
        self.seq = seq
        self.problem = problem

    def __str__(self) -> str:
        return str(self.args[0])


class WorkloadError(ActorloopError, ValueError):
    """A workload file is missing, unreadable or does not match the schema."""


class TelemetryError(ActorloopError):
    """Tracing was asked for and cannot be set up: opentelemetry-api is not installed (the
    `otel` extra), or the `telemetry` setting is not a bool, a `Telemetry` or None."""


class CollectorPolicyError(ActorloopError, ValueError):
    """A `CollectorPolicy` was given thresholds that are not three ints >= 0, or a runtime
    was given something that is not a `CollectorPolicy`."""


# ---------------------------------------------------------------------- MCP servers


class McpError(ActorloopError):
    """An MCP server could not be used as configured; `code` says why (docs/mcp.md)."""

    code: ErrorCode = ErrorCode.MCP_CONFIG


class McpConfigError(McpError, ValueError):
    """An `McpStdio`/`McpHttp` spec, the `mcp=` mapping of `Runtime.open` or
    `AgentOptions.mcp` is malformed, or the `mcp` extra is not installed."""

    code = ErrorCode.MCP_CONFIG


class McpServerNotConfigured(McpError, LookupError):
    """The options name an MCP server this runtime was not opened with."""

    code = ErrorCode.MCP_SERVER_NOT_CONFIGURED


class McpToolNameClash(McpError):
    """Two of an agent's tools would have one name: tools of two MCP servers, or an MCP
    tool and a local one. Raised at spawn (or at the step where a list change brings it)."""

    code = ErrorCode.MCP_TOOL_NAME_CLASH


class McpConnectionFailed(McpError):
    """An MCP server could not be started, reached or initialized, or its connection
    closed under a call; the next use opens a new connection."""

    code = ErrorCode.MCP_CONNECTION_FAILED


class McpToolError(McpError):
    """The server answered a tool call with `isError`: the model gets a tool error (the
    loop's TOOL_FAILED result with this message), the turn goes on."""

    code = ErrorCode.MCP_TOOL_ERROR


# ---------------------------------------------------------------------- the HTTP service


class ServiceError(ActorloopError):
    """The HTTP service refused a request; `code` is the stable code its error body names."""

    code: ErrorCode = ErrorCode.VALIDATION_FAILED

    def __init__(self, message: str, code: ErrorCode | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


def sole_error(error: BaseException) -> BaseException:
    """The one exception inside nested single-member exception groups (`error` itself when
    it is not such a group): public calls raise plain typed exceptions, never a group."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


MOVED_TO_SERVICE = frozenset(
    {
        "InvalidRequestBody",
        "UnknownProfile",
        "IdempotencyKeyReused",
        "ServiceDraining",
        "OwnerLost",
        "ServeConfigError",
    }
)
"""Service errors whose old home was this module (now `actorloop.runtime.service.errors`)."""


# The moved service errors under their old path, with a DeprecationWarning: the service
# module is imported by name on first use only, so this foundation module loads nothing
# above it, and a caller of an old name gets exactly the class the service raises.
__getattr__, __dir__ = lazy_exports(
    globals(), {}, moved=dict.fromkeys(MOVED_TO_SERVICE, "actorloop.runtime.service.errors")
)
