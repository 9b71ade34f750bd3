"""The group commit of a `PostgresStore`: one transaction for every session of a batch
that locks their rows and reads their heads and owners in one statement (in id order,
`locks`), decides each session's owner epoch, streams the events in with a binary COPY
(encoding them as it goes, while the server inserts), and moves the heads in a statement
that also checks each head against the stored rows; a statement PostgreSQL refuses for
one session's rows is redone with a savepoint per session, so only that one fails.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from attrs import frozen

from ....codecs.rows import EventRow, event_rows
from ...errors import (
    SessionError,
    SessionFenced,
    SessionNotFound,
    SessionValidationError,
    SessionWriteError,
    StoreError,
)
from ...model.events import SessionEvent
from ..base import Failures, check_seqs
from .claims import Claim, Claims, Owner
from .config import PgSettings
from .locks import LOCK_SESSIONS

_OWNER = (
    "s.head, s.seed_length, s.owner_node, s.owner_epoch, coalesce(s.lease_expires > now(), false)"
)
_LOCK_AND_READ = (
    f"SELECT s.id, {_OWNER} FROM actorloop.sessions s WHERE s.id = ANY(%s) ORDER BY s.id FOR UPDATE"
)
"""`LOCK_SESSIONS` that also reads what the commit decides on. Under READ COMMITTED a row
locked after waiting for another transaction is returned as that one committed it."""
_HEADS = (
    f"SELECT s.id, {_OWNER}, "
    "(SELECT max(seq) FROM actorloop.events e WHERE e.session_id = s.id) "
    "FROM actorloop.sessions s WHERE s.id = ANY(%s)"
)
"""The careful path's read, after `LOCK_SESSIONS`: also where each session's rows end."""
_COPY_EVENTS = (
    "COPY actorloop.events (session_id, seq, type, time, body, crc, epoch) "
    "FROM STDIN (FORMAT BINARY)"
)
_COPY_TYPES = ("text", "int8", "text", "int8", "bytea", "int8", "int8")
_SET_HEADS = (
    "WITH moved AS (UPDATE actorloop.sessions AS s SET head = v.head, owner_epoch = v.epoch, "
    "owner_node = v.node, lease_expires = CASE WHEN v.node IS NULL THEN NULL "
    "ELSE now() + %s * interval '1 second' END "
    "FROM unnest(%s::text[], %s::bigint[], %s::bigint[], %s::bigint[], %s::text[]) "
    "AS v(id, first, head, epoch, node) WHERE s.id = v.id "
    "RETURNING s.id, s.seed_length, v.first, v.head) "
    "SELECT m.id FROM moved m WHERE coalesce((SELECT max(seq) + 1 FROM actorloop.events e "
    "WHERE e.session_id = m.id AND e.seq < m.first), m.seed_length, 0) <> m.first "
    "OR (SELECT max(seq) FROM actorloop.events e WHERE e.session_id = m.id) <> m.head - 1"
)
"""Move the heads, and name every session whose stored rows do not run from its seed (or
0) to its new head without a gap below the commit's rows or a row past them (damage: the
rows the commit read as the head's). Its snapshot follows the COPY and the locks."""


class Pending:
    """The events of a group commit by session, each session's rows encoded once, when
    first written (the encoding runs in the commit's worker thread, beside the COPY), and
    kept for a transaction run again."""

    def __init__(self, events: dict[str, Sequence[SessionEvent]]) -> None:
        self.events = events
        self._rows: dict[str, list[EventRow] | Exception] = {}

    def rows(self, session_id: str) -> list[EventRow]:
        """The rows of `session_id`'s events; raises what encoding them raised."""
        rows = self._rows.get(session_id)
        if rows is None:
            try:
                rows = event_rows(session_id, self.events[session_id])
            except Exception as exc:
                rows = exc
            self._rows[session_id] = rows
        if isinstance(rows, Exception):
            raise rows
        return rows


@frozen
class Write:
    """One session's part of a group commit: the seq of its first row (the head it
    expects) and its new head, the epoch its rows are written under, who owns the session
    after the commit (None: a temporary claim, released), the claim it was written for,
    and when its transaction started."""

    first: int
    head: int
    epoch: int
    owner: str | None
    claim: Claim | None
    started: float = 0.0


def _after_failed_commit(
    claim: Claim | None, session_id: str, head: int, exc: SessionValidationError
) -> SessionError | SessionWriteError:
    """The error for rows that do not continue the stored tail at `head`: the earlier
    commit that failed, if its events are what is missing (not another writer's), else
    `exc`."""
    if claim is None or claim.unconfirmed is None or claim.unconfirmed[0] != head:
        return exc
    first, cause = claim.unconfirmed
    error = SessionWriteError(
        session_id,
        f"its commit of the events from seq {first} failed ({type(cause).__name__}: "
        f"{cause}) and did not land, so seq {exc.seq} does not continue the stored tail; "
        "load the session again to go on from what is stored",
    )
    error.__cause__ = cause
    return error


class RowRefused(Exception):
    """A group commit's statement failed for some session's rows: roll back, isolate."""


class _TailMismatch(RowRefused):
    """Some sessions' stored rows disagree with their heads: roll back, look closer."""


class GroupCommit:
    """The commit of one store (see the module docstring)."""

    def __init__(
        self, claims: Claims, settings: PgSettings, corrupt: Callable[[str, str], Exception]
    ) -> None:
        self._claims = claims
        self._settings = settings
        self._corrupt = corrupt
        """`corrupt(session_id, problem)`: the store's SessionCorruptError for a session."""

    def commit(
        self, pending: Pending, failures: Failures, conn: psycopg.Connection
    ) -> dict[str, Write]:
        """Commit `pending` (blocking, on `conn`): what was written; the refused sessions
        go to `failures`. One transaction (two when a statement was refused or a head
        disagreed with its rows), safe to run again whole if PostgreSQL rolls it back."""
        checked: Failures = {}
        started = time.monotonic()
        try:
            with conn.transaction():
                read = conn.execute(_LOCK_AND_READ, (list(pending.events),))
                found = {row[0]: (*row, None) for row in read}
                plan = self._plan(pending, found, checked, started, careful=False)
                self._write(conn, pending, plan, checked)
        except RowRefused:
            # A statement PostgreSQL refused for one session's rows rolled the commit back,
            # or a head disagreed with its rows: redo it reading where each session's rows
            # end, with a savepoint per session, so only the sessions at fault are refused.
            checked = {}
            with conn.transaction():
                ids = list(pending.events)
                conn.execute(LOCK_SESSIONS, (ids,))
                # Read after the locks, in a statement of its own: under READ COMMITTED
                # it sees every commit that finished while this one waited for a lock.
                found = {row[0]: row for row in conn.execute(_HEADS, (ids,))}
                plan = self._plan(pending, found, checked, started, careful=True)
                for session_id, write in plan.items():
                    self._write_isolated(conn, pending, session_id, write, checked)
        failures.update(checked)
        return {sid: write for sid, write in plan.items() if sid not in checked}

    def _plan(
        self,
        pending: Pending,
        found: dict[str, tuple[Any, ...]],
        failures: Failures,
        started: float,
        *,
        careful: bool,
    ) -> dict[str, Write]:
        """Decide each session's epoch from its locked row (`found`: id, head, seed
        length, owner node, owner epoch, lease live, and with `careful` the last stored
        seq, checked against the head); refused sessions go to `failures`."""
        plan: dict[str, Write] = {}
        for session_id, events in pending.events.items():
            try:
                if session_id not in found:
                    raise SessionNotFound(session_id)
                _, head, seed_length, node, epoch, live, last = found[session_id]
                rows_end = (seed_length or 0) if last is None else last + 1
                if careful and head != rows_end:
                    raise self._corrupt(
                        session_id,
                        f"acknowledged head {head!r} disagrees with the stored rows (they end "
                        f"before seq {rows_end}); load the session to see the damage",
                    )
                owner = Owner(node, epoch, live, head)
                claim = self._claims.of(session_id)
                if claim is not None:
                    write_epoch = self._claims.epoch_for(claim, session_id, owner)
                    after: str | None = self._claims.node
                elif self._claims.claimable(owner):
                    write_epoch, after = owner.epoch + 1, None  # a temporary claim
                else:
                    raise self._claims.busy(
                        session_id, owner, "; refusing to append without its lease"
                    )
                try:
                    check_seqs(session_id, [event.seq for event in events], head)
                except SessionValidationError as exc:
                    error = _after_failed_commit(claim, session_id, head, exc)
                    if error is exc:
                        raise
                    raise error  # noqa: B904 (its cause is the failed commit, set)
            except (SessionError, SessionFenced, SessionWriteError) as exc:
                failures[session_id] = exc
                continue
            plan[session_id] = Write(head, head + len(events), write_epoch, after, claim, started)
        return plan

    def _write(
        self,
        conn: psycopg.Connection,
        pending: Pending,
        plan: dict[str, Write],
        failures: Failures,
    ) -> None:
        """Insert the rows of `plan` (a session whose events do not encode goes to
        `failures`, nothing of it written) and move their heads, inside the caller's
        transaction (whose rows are locked); RowRefused if a statement was refused or a
        head disagreed with its rows."""
        try:
            with conn.cursor() as cursor, cursor.copy(_COPY_EVENTS) as copy:
                copy.set_types(_COPY_TYPES)
                for session_id, write in tuple(plan.items()):
                    try:
                        rows = pending.rows(session_id)
                    except Exception as exc:
                        failures[session_id] = exc
                        del plan[session_id]
                        continue
                    epoch = write.epoch
                    for row in rows:
                        copy.write_row((*row, epoch))
            if not plan:
                return
            damaged = conn.execute(
                _SET_HEADS,
                (
                    self._settings.lease_s,
                    list(plan),
                    [write.first for write in plan.values()],
                    [write.head for write in plan.values()],
                    [write.epoch for write in plan.values()],
                    [write.owner for write in plan.values()],
                ),
            ).fetchall()
        except psycopg.OperationalError:
            raise
        except psycopg.Error as exc:
            raise RowRefused(str(exc)) from exc
        if damaged:
            raise _TailMismatch(", ".join(repr(row[0]) for row in damaged))

    def _write_isolated(
        self,
        conn: psycopg.Connection,
        pending: Pending,
        session_id: str,
        write: Write,
        failures: Failures,
    ) -> None:
        """`_write` of one session under a savepoint: a refusal fails it alone."""
        try:
            with conn.transaction():
                self._write(conn, pending, {session_id: write}, failures)
        except _TailMismatch:
            failures[session_id] = self._corrupt(
                session_id, "its stored rows changed under the commit; load the session"
            )
        except RowRefused as exc:
            cause = exc.__cause__
            failures[session_id] = StoreError(f"postgres {self._settings.display}: {cause}")
            failures[session_id].__cause__ = cause

    def write_fixes(
        self,
        conn: psycopg.Connection,
        session_id: str,
        fixes: Sequence[SessionEvent],
        epoch: int,
        owner: str | None,
    ) -> None:
        """Append the repair `fixes` of `session_id` (its row locked, its rows read) under
        `epoch`, inside the caller's transaction; RowRefused if PostgreSQL refused them."""
        first = fixes[0].seq
        write = Write(first, first + len(fixes), epoch, owner, None)
        failures: Failures = {}
        self._write(conn, Pending({session_id: fixes}), {session_id: write}, failures)
        if failures:
            raise RowRefused(str(failures[session_id])) from failures[session_id]
