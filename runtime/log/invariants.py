"""The reconstructability invariant (docs/spec/session-log.md §8.3): a loop-built request must
equal what a fresh replay of the log rebuilds. A replay kept per session is extended by the
new events at each check (the provider wrapper that checks every request is
`host/checked_provider.py`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ...codecs.converter import canonical_bytes
from ..errors import InvariantViolation
from ..model.events import SessionEvent, StepStart
from ..model.header import EpochHeader
from ..model.messages import Message
from .header_algebra import HeaderFold
from .request import Request
from .session import Session


class EventSource:
    """The read access the check needs of a log: its length and one event by seq."""

    def __init__(self, length: Callable[[], int], event: Callable[[int], SessionEvent]) -> None:
        self.length = length
        self.event = event

    @classmethod
    def of_sequence(cls, events: Sequence[SessionEvent]) -> EventSource:
        """A fixed sequence of events (a test's log, a prefix of one)."""
        return cls(events.__len__, events.__getitem__)

    @classmethod
    def of_session(cls, session: Session) -> EventSource:
        """A live session, read in place: no snapshot copy per check."""
        return cls(session.__len__, session.event)


class ReplayCheck:
    """The replay state of one log, extended incrementally.

    A fresh `Session` is fed, with every append rule checked, the events before the latest
    `step/start`; a header fold is fed every event. The events a check has consumed are never
    re-read: the log is append-only, so what was replayed stays valid. Messages already
    matched at the previous check are re-compared by value (identity in the common case of
    the loop reusing its frozen messages); only the new ones are compared by canonical bytes.
    Any mismatch falls back to the full canonical comparison, so the error is the same one a
    from-scratch check reports.
    """

    __slots__ = (
        "_expected",
        "_header",
        "_header_len",
        "_matched",
        "_rebuild",
        "_settings",
        "_step_start",
    )

    def __init__(self) -> None:
        self._rebuild = Session.create("rebuild")
        self._header = HeaderFold()
        self._header_len = 0
        self._step_start: int | None = None
        # The request messages and the expected messages the last check found equal.
        self._matched: tuple[Message, ...] = ()
        self._expected: tuple[Message, ...] = ()
        # (header, config, system, tools) objects the last check found consistent.
        self._settings: tuple[object, ...] | None = None

    def check(self, source: EventSource, request: Request) -> None:
        """Raise InvariantViolation naming what diverged between `request` and the log."""
        length = source.length()
        step_start = self._find_step_start(source, length)
        if step_start is None:
            raise InvariantViolation("request has no step/start in the log")
        for seq in range(self._header_len, length):
            self._header.feed(source.event(seq))
        self._header_len = length
        header = self._header.current
        if header is None:
            raise InvariantViolation("request has no request/header in the log")
        # The private replay, as `Session.from_events` makes: every rule is checked, and
        # the rebuild shares the log's frozen events.
        self._rebuild._replay(source.event(seq) for seq in range(len(self._rebuild), step_start))
        prefix = header.message_prefix or ()
        expected = prefix + self._rebuild.derive_messages()
        if not self._messages_match(request.messages, expected):
            raise InvariantViolation(
                "request messages diverge from the boundary derivation at step/start seq "
                f"{step_start}"
            )
        self._matched, self._expected = request.messages, expected
        if request.prefix_length != len(prefix):
            raise InvariantViolation(
                "request prefix length diverges from the folded request header"
            )
        self._check_settings(header, request)

    def _find_step_start(self, source: EventSource, length: int) -> int | None:
        """The latest `step/start`: searched back only over events not seen before."""
        floor = self._header_len
        for seq in range(length - 1, floor - 1, -1):
            if isinstance(source.event(seq).data, StepStart):
                self._step_start = seq
                return seq
        return self._step_start

    def _messages_match(self, sent: tuple[Message, ...], expected: tuple[Message, ...]) -> bool:
        if len(sent) != len(expected):
            return False
        known = len(self._matched)
        if (
            known <= len(sent)
            and sent[:known] == self._matched
            and expected[:known] == self._expected
        ):
            return canonical_bytes(sent[known:]) == canonical_bytes(expected[known:])
        return canonical_bytes(sent) == canonical_bytes(expected)

    def _check_settings(self, header: EpochHeader, request: Request) -> None:
        tools = request.tools or None
        settings = (header, request.config, request.system, tools)
        if self._settings is not None and all(
            ours is theirs for ours, theirs in zip(settings, self._settings, strict=True)
        ):
            return
        for name, ours, logged in (
            ("config", request.config, header.config),
            ("system", request.system, header.system),
            ("tools", tools, header.tools),
        ):
            if canonical_bytes(ours) != canonical_bytes(logged):
                raise InvariantViolation(f"request {name} diverges from the folded request header")
        self._settings = settings


def check_request(events: Sequence[SessionEvent], request: Request) -> None:
    """Raise InvariantViolation naming what diverged between `request` and the log (a
    from-scratch replay of `events`)."""
    ReplayCheck().check(EventSource.of_sequence(events), request)
