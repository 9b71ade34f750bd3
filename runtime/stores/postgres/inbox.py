"""Requests handed between instances through the database, the routing primitives: a request
for a session another live instance owns becomes a durable `inbox` row for that instance;
the owner takes it, answers into the row, and the instance that received it reads the
answer. `NOTIFY` is only a wake-up hint (`Listener`); every state is read from the rows,
so a lost notification costs a poll interval, never a request.

Row states: `pending` (waiting for its owner) → `taken` (the owner is handling it) →
`done` (answered); `withdrawn` when the sender takes it back while it is still pending
(its owner died, or the caller went away). `cancel_requested` tells the owner that the
caller of a taken request went away.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Sequence

import psycopg
from attrs import frozen

from .store import PostgresStore

log = logging.getLogger("actorloop.stores.postgres")

INBOX_CHANNEL = "actorloop_inbox"
"""NOTIFY channel: a row for the node named in the payload (or a cancel of one) is waiting."""
REPLY_CHANNEL = "actorloop_reply"
"""NOTIFY channel: a row sent by the node named in the payload was answered."""


@frozen
class Handed:
    """A request taken by its owner: the row id, its session, the request head (method,
    path, query, headers as canonical JSON bytes) and its body."""

    id: int
    session_id: str
    request: bytes
    body: bytes


@frozen
class RowState:
    """What the sender of a row sees: its state, the answer once `done`, and whether the
    node it was handed to is alive (its heartbeat unexpired)."""

    id: int
    state: str
    target_alive: bool
    status: int | None = None
    response: bytes | None = None


class Inbox:
    """The inbox operations of one node over a `PostgresStore`'s pool."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store
        self.node = store.node

    async def hand(self, session_id: str, target: str, request: bytes, body: bytes) -> int:
        """Hand a request to `target`, the node owning `session_id`; the row id."""

        def run(conn: psycopg.Connection) -> int:
            # One statement (one round trip, its own transaction): the NOTIFY goes out
            # when the row is committed.
            row = conn.execute(
                "WITH handed AS (INSERT INTO actorloop.inbox (session_id, target_node, "
                "origin_node, request, body) VALUES (%s, %s, %s, %s, %s) RETURNING id) "
                "SELECT id, pg_notify(%s, %s) FROM handed",
                (session_id, target, self.node, request, body, INBOX_CHANNEL, target),
            ).fetchone()
            assert row is not None
            return int(row[0])

        return await self.store.execute(run)

    async def take(self) -> list[Handed]:
        """Take every pending row handed to this node (each is taken by one taker only)."""

        def run(conn: psycopg.Connection) -> list[Handed]:
            rows = conn.execute(
                "UPDATE actorloop.inbox SET state = 'taken' WHERE id IN (SELECT id FROM "
                "actorloop.inbox WHERE target_node = %s AND state = 'pending' ORDER BY id "
                "FOR UPDATE SKIP LOCKED) RETURNING id, session_id, request, body",
                (self.node,),
                binary=True,
            ).fetchall()
            return sorted((Handed(*row) for row in rows), key=lambda handed: handed.id)

        return await self.store.execute(run)

    async def answer(self, row_id: int, status: int, response: bytes) -> None:
        """Answer a taken row; its sender is woken."""

        def run(conn: psycopg.Connection) -> None:
            conn.execute(
                "WITH answered AS (UPDATE actorloop.inbox SET state = 'done', status = %s, "
                "response = %s WHERE id = %s AND state = 'taken' RETURNING origin_node) "
                "SELECT pg_notify(%s, origin_node) FROM answered",
                (status, response, row_id, REPLY_CHANNEL),
            )

        await self.store.execute(run)

    async def states(self, row_ids: Sequence[int]) -> dict[int, RowState]:
        """The states of rows this node handed, with whether their target is alive."""

        def run(conn: psycopg.Connection) -> dict[int, RowState]:
            rows = conn.execute(
                "SELECT i.id, i.state, coalesce(n.expires > now(), false), i.status, "
                "i.response FROM actorloop.inbox i LEFT JOIN actorloop.nodes n "
                "ON n.id = i.target_node WHERE i.id = ANY(%s)",
                (list(row_ids),),
                binary=True,
            ).fetchall()
            return {row[0]: RowState(*row) for row in rows}

        return await self.store.execute(run)

    async def withdraw(self, row_id: int) -> bool:
        """Take a row back while it is still pending; whether it was (else it was taken)."""

        def run(conn: psycopg.Connection) -> bool:
            row = conn.execute(
                "UPDATE actorloop.inbox SET state = 'withdrawn' WHERE id = %s "
                "AND state = 'pending' RETURNING id",
                (row_id,),
            ).fetchone()
            return row is not None

        return await self.store.execute(run)

    async def cancel(self, row_id: int) -> None:
        """The caller went away: withdraw the row if pending, else ask its taker to cancel."""

        def run(conn: psycopg.Connection) -> None:
            conn.execute(
                "WITH marked AS (UPDATE actorloop.inbox SET cancel_requested = true, "
                "state = CASE WHEN state = 'pending' THEN 'withdrawn' ELSE state END "
                "WHERE id = %s RETURNING state, target_node) "
                "SELECT pg_notify(%s, target_node) FROM marked WHERE state = 'taken'",
                (row_id, INBOX_CHANNEL),
            )

        await self.store.execute(run)

    async def cancelled(self, row_ids: Sequence[int]) -> set[int]:
        """Which of the rows this node is handling had their caller go away."""

        def run(conn: psycopg.Connection) -> set[int]:
            rows = conn.execute(
                "SELECT id FROM actorloop.inbox WHERE id = ANY(%s) AND cancel_requested",
                (list(row_ids),),
            ).fetchall()
            return {row[0] for row in rows}

        return await self.store.execute(run)

    async def forget(self, row_ids: Sequence[int]) -> None:
        """Delete rows whose story is over (answered and read, or withdrawn)."""
        await self.store.execute(
            lambda conn: conn.execute(
                "DELETE FROM actorloop.inbox WHERE id = ANY(%s) AND state IN ('done', 'withdrawn')",
                (list(row_ids),),
            )
        )

    async def heads(self, session_ids: Sequence[str]) -> dict[str, int]:
        """The acknowledged heads of sessions (for event streams of sessions live elsewhere)."""

        def run(conn: psycopg.Connection) -> dict[str, int]:
            rows = conn.execute(
                "SELECT id, head FROM actorloop.sessions WHERE id = ANY(%s)",
                (list(session_ids),),
            ).fetchall()
            return {row[0]: row[1] for row in rows}

        return await self.store.execute(run)


class Listener:
    """A connection of its own LISTENing on both channels, read from a worker thread:
    `wait(timeout)` returns once a notification for this node arrived or `timeout`
    passed. A lost connection is reopened on the next wait (polling covers the gap)."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store
        self._conn: psycopg.Connection | None = None

    def wait(self, timeout: float) -> bool:
        """Blocking (a worker thread): whether a notification for this node arrived."""
        try:
            if self._conn is None or self._conn.closed:
                self._conn = self.store.connect()
                self._conn.execute(f"LISTEN {INBOX_CHANNEL}")
                self._conn.execute(f"LISTEN {REPLY_CHANNEL}")
            for notify in self._conn.notifies(timeout=timeout, stop_after=1):
                if notify.payload == self.store.node:
                    return True
            return False
        except Exception as exc:
            # Not fatal: the poll interval still finds every row. This is a worker thread:
            # waiting out the interval here keeps a database outage from spinning the poll.
            log.debug("inbox listener: %s", exc)
            self.close()
            time.sleep(timeout)
            return False

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()
