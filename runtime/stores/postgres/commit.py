"""The group commit of a `PostgresStore`: one transaction for every session of a batch
that locks their rows (in id order, `locks`), decides each session's owner epoch and
checks its head, inserts the events and moves the heads; a statement PostgreSQL refuses
for one session's rows is redone with a savepoint per session, so only that one fails.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import psycopg
from attrs import frozen

from ....codecs.rows import EventRow
from ...errors import (
    SessionError,
    SessionFenced,
    SessionNotFound,
    SessionValidationError,
    SessionWriteError,
    StoreError,
)
from ..base import Failures, check_seqs
from .claims import Claim, Claims, Owner
from .config import PgSettings
from .locks import LOCK_SESSIONS

_INSERT_EVENTS = (
    "INSERT INTO actorloop.events (session_id, seq, type, time, body, crc, epoch) "
    "SELECT * FROM unnest(%s::text[], %s::bigint[], %s::text[], %s::bigint[], %s::bytea[], "
    "%s::bigint[], %s::bigint[])"
)
_SET_HEADS = (
    "UPDATE actorloop.sessions AS s SET head = v.head, owner_epoch = v.epoch, "
    "owner_node = v.node, lease_expires = CASE WHEN v.node IS NULL THEN NULL "
    "ELSE now() + %s * interval '1 second' END "
    "FROM unnest(%s::text[], %s::bigint[], %s::bigint[], %s::text[]) AS v(id, head, epoch, node) "
    "WHERE s.id = v.id"
)
_HEADS = (
    "SELECT s.id, s.head, s.seed_length, s.owner_node, s.owner_epoch, "
    "coalesce(s.lease_expires > now(), false), "
    "(SELECT max(seq) FROM actorloop.events e WHERE e.session_id = s.id) "
    "FROM actorloop.sessions s WHERE s.id = ANY(%s)"
)


@frozen
class Write:
    """One session's part of a group commit: its rows, the epoch they are written under,
    who owns the session after the commit (None: a temporary claim, released), the
    claim it was written for, and when its transaction started."""

    rows: list[EventRow]
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
        self, rows: dict[str, list[EventRow]], failures: Failures, conn: psycopg.Connection
    ) -> dict[str, Write]:
        """Commit `rows` (blocking, on `conn`): what was written; the refused sessions go
        to `failures`. One transaction (two when a statement was refused), safe to run
        again whole if PostgreSQL rolls it back."""
        checked: Failures = {}
        started = time.monotonic()
        try:
            with conn.transaction():
                plan = self._plan(conn, rows, checked, started)
                self.write(conn, plan, checked, isolate=False)
        except RowRefused:
            # A statement PostgreSQL refused for one session's rows rolled the commit back:
            # redo it with a savepoint per session, so only that session is refused.
            checked = {}
            with conn.transaction():
                plan = self._plan(conn, rows, checked, started)
                self.write(conn, plan, checked, isolate=True)
        failures.update(checked)
        return {sid: write for sid, write in plan.items() if sid not in checked}

    def _plan(
        self,
        conn: psycopg.Connection,
        rows: dict[str, list[EventRow]],
        failures: Failures,
        started: float,
    ) -> dict[str, Write]:
        """Lock every session row of the commit (in id order, so concurrent transactions
        cannot deadlock) and decide each session's epoch; refused sessions go to
        `failures`."""
        ids = list(rows)
        conn.execute(LOCK_SESSIONS, (ids,))
        # Read after the locks, in a statement of its own: under READ COMMITTED it sees
        # every commit that finished while this one waited for a lock.
        found = {row[0]: row for row in conn.execute(_HEADS, (ids,))}
        plan: dict[str, Write] = {}
        for session_id, session_rows in rows.items():
            try:
                if session_id not in found:
                    raise SessionNotFound(session_id)
                _, head, seed_length, node, epoch, live, last = found[session_id]
                rows_end = (seed_length or 0) if last is None else last + 1
                if head != rows_end:
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
                    check_seqs(session_id, [row[1] for row in session_rows], head)
                except SessionValidationError as exc:
                    error = _after_failed_commit(claim, session_id, head, exc)
                    if error is exc:
                        raise
                    raise error  # noqa: B904 (its cause is the failed commit, set)
            except (SessionError, SessionFenced, SessionWriteError) as exc:
                failures[session_id] = exc
                continue
            plan[session_id] = Write(session_rows, write_epoch, after, claim, started)
        return plan

    def write(
        self,
        conn: psycopg.Connection,
        plan: dict[str, Write],
        failures: Failures,
        *,
        isolate: bool,
    ) -> None:
        """Insert the rows of `plan` and move their heads, inside the caller's transaction
        (whose rows are locked): RowRefused if a statement was refused, or with `isolate`
        a savepoint per session and the refused ones in `failures`."""

        def insert(part: dict[str, Write]) -> None:
            columns: list[list[Any]] = [[] for _ in range(7)]
            for write in part.values():
                for row in write.rows:
                    for index, value in enumerate(row):
                        columns[index].append(value)
                    columns[6].append(write.epoch)
            conn.execute(_INSERT_EVENTS, columns)
            conn.execute(
                _SET_HEADS,
                (
                    self._settings.lease_s,
                    list(part),
                    [write.rows[-1][1] + 1 for write in part.values()],
                    [write.epoch for write in part.values()],
                    [write.owner for write in part.values()],
                ),
            )

        if not plan:
            return
        if not isolate:
            try:
                insert(plan)
            except psycopg.OperationalError:
                raise
            except psycopg.Error as exc:
                raise RowRefused from exc
            return
        for session_id, write in plan.items():
            try:
                with conn.transaction():
                    insert({session_id: write})
            except psycopg.OperationalError:
                raise
            except psycopg.Error as exc:
                failures[session_id] = StoreError(f"postgres {self._settings.display}: {exc}")
                failures[session_id].__cause__ = exc
