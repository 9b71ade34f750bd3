"""One run per session: the arrival-ordered line of sends waiting to start their turn through
the service (docs/spec/runtime.md §15.3)."""

from __future__ import annotations

from collections import deque

import trio


class Ticket:
    """A send's place in its session's line: `ready` is set when it is first, or when it
    was `discarded` (a cancel or dispose of the session, or the drain, emptied the line)."""

    __slots__ = ("discarded", "ready")

    def __init__(self) -> None:
        self.ready = trio.Event()
        self.discarded = False


class TurnLine:
    """Sends of one session, first come first served; the first holds the session's run."""

    def __init__(self) -> None:
        self._tickets: deque[Ticket] = deque()

    @property
    def busy(self) -> bool:
        """Whether a send holds the run or waits for it."""
        return bool(self._tickets)

    def enter(self) -> Ticket:
        """Join the line now (no checkpoint: the place is taken in arrival order)."""
        ticket = Ticket()
        self._tickets.append(ticket)
        if len(self._tickets) == 1:
            ticket.ready.set()
        return ticket

    def leave(self, ticket: Ticket) -> None:
        """Give up the place (the turn ended, or the send was cancelled while it waited);
        the next ticket becomes first."""
        if ticket not in self._tickets:
            return
        first = self._tickets[0] is ticket
        self._tickets.remove(ticket)
        if first and self._tickets:
            self._tickets[0].ready.set()

    def discard_waiting(self) -> int:
        """Discard every ticket behind the first (their sends end `discarded`); how many."""
        waiting = list(self._tickets)[1:]
        for ticket in waiting:
            self._tickets.remove(ticket)
            ticket.discarded = True
            ticket.ready.set()
        return len(waiting)
