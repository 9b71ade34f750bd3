"""Requests handed between instances through the database, the routing primitives: a request
for a session another live instance owns becomes a durable `inbox` row for that instance;
the owner takes it, answers into the row, and the instance that received it reads the
answer.

The notifications carry the work itself when it fits (`PAYLOAD_MAX`): the hand-over's
`NOTIFY` the request (the owner need not read the row), the answer's `NOTIFY` the answer
(the sender need not read it). The row stays the record: whatever does not fit, and
whatever a lost notification did not deliver, is read from the rows by the `poll_s` poll,
so a lost notification costs a poll interval, never a request.

Row states: `pending` (waiting for its owner) → `taken` (the owner is handling it) →
`done` (answered); `withdrawn` when the sender takes it back while it is still pending
(its owner died, or the caller went away). `cancel_requested` tells the owner that the
caller of a taken request went away. A `GET` is answered without being taken (running it
twice changes nothing); everything else is taken before it runs, so a request the sender
withdrew never runs.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import threading
from collections.abc import Callable, Sequence

import psycopg
import trio
from attrs import frozen

from .store import PostgresStore

log = logging.getLogger("actorloop.stores.postgres")

INBOX_CHANNEL = "actorloop_inbox"
"""NOTIFY channel: a request for the node named first in the payload (or a cancel of one)."""
REPLY_CHANNEL = "actorloop_reply"
"""NOTIFY channel: a row sent by the node named first in the payload was answered."""
PAYLOAD_MAX = 7800
"""The most bytes of request or answer a notification carries (base64, ASCII: valid in any
server encoding). PostgreSQL refuses a payload of 8000 bytes or more; the rest is left for
the node name (at most 128), the kind and the row id."""


NOTIFY_WAIT_S = 0.2
"""The longest the listener thread waits for a notification before it looks whether it was
told to stop: how long a cancelled listener's scope waits for its thread."""


@frozen
class Handed:
    """A request for this node: the row id, its session, the request head (method, path,
    query, headers as canonical JSON bytes) and its body."""

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


@frozen
class Notice:
    """A notification for this node, parsed (`parse_notice`). `kind`: `request` (a row
    handed to this node; `handed` when the payload carried it), `cancel` (the caller of a
    row this node handles went away), `answer` (a row this node handed was answered;
    `answer` holds it when the payload carried it), or `wake` (read the rows now: the
    listener (re)connected, a notification was unreadable, or it came from a build that
    carries nothing in its notifications)."""

    kind: str
    row_id: int = 0
    handed: Handed | None = None
    answer: RowState | None = None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _inline(fields: Sequence[str]) -> str:
    """The payload's tail for `fields` (space separated, after the row id), or "" when it
    does not fit: the row is read instead."""
    tail = "".join(f" {field}" for field in fields)
    return tail if len(tail) <= PAYLOAD_MAX else ""


def parse_notice(channel: str, payload: str, node: str) -> Notice | None:
    """The notice in `payload` if it is for `node` (None: another node's; a `wake` when
    unreadable).
    Payloads: `NODE r ID [SESSION HEAD BODY]`, `NODE c ID`, `NODE a ID [STATUS ANSWER]`
    (HEAD, BODY and ANSWER base64), or `NODE` alone (a wake-up)."""
    parts = payload.split(" ")
    if parts[0] != node:
        return None
    if len(parts) == 1:
        return Notice("wake")
    try:
        kind, row_id = parts[1], int(parts[2])
        if channel == INBOX_CHANNEL and kind == "r":
            handed = None
            if len(parts) == 6:
                request, body = base64.b64decode(parts[4]), base64.b64decode(parts[5])
                handed = Handed(row_id, parts[3], request, body)
            return Notice("request", row_id, handed=handed)
        if channel == INBOX_CHANNEL and kind == "c":
            return Notice("cancel", row_id)
        if channel == REPLY_CHANNEL and kind == "a":
            answer = None
            if len(parts) == 5:
                answer = RowState(row_id, "done", True, int(parts[3]), base64.b64decode(parts[4]))
            return Notice("answer", row_id, answer=answer)
    except (IndexError, ValueError):  # binascii.Error is a ValueError
        pass
    log.warning("inbox listener: unreadable notification on %s: %.80r", channel, payload)
    return Notice("wake")  # read the rows instead


class Inbox:
    """The inbox operations of one node over a `PostgresStore`'s pool."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store
        self.node = store.node

    async def hand(self, session_id: str, request: bytes, body: bytes) -> tuple[int, str] | None:
        """Hand a request to the node owning `session_id`, if another node owns it with an
        unexpired lease: the row id and that node; None when nobody else does (serve it
        here)."""
        tail = _inline((session_id, _b64(request), _b64(body)))

        def run(conn: psycopg.Connection) -> tuple[int, str] | None:
            # One statement (one round trip, its own transaction): the owner looked up, the
            # row inserted, and the NOTIFY, carrying the request, sent when it commits.
            row = conn.execute(
                "WITH owner AS (SELECT owner_node FROM actorloop.sessions WHERE id = %(s)s "
                "AND owner_node <> %(node)s AND lease_expires > now()), "
                "handed AS (INSERT INTO actorloop.inbox (session_id, target_node, "
                "origin_node, request, body) SELECT %(s)s, owner_node, %(node)s, %(req)s, "
                "%(body)s FROM owner RETURNING id, target_node) "
                "SELECT id, target_node, pg_notify(%(channel)s, target_node || ' r ' || id "
                "|| %(tail)s) FROM handed",
                {
                    "s": session_id,
                    "node": self.node,
                    "req": request,
                    "body": body,
                    "channel": INBOX_CHANNEL,
                    "tail": tail,
                },
            ).fetchone()
            return None if row is None else (int(row[0]), str(row[1]))

        return await self.store.execute(run)

    async def take(self, skip: Sequence[int] = ()) -> list[Handed]:
        """Take every pending row handed to this node but those in `skip` (already being
        handled here); each is taken by one taker only."""

        def run(conn: psycopg.Connection) -> list[Handed]:
            rows = conn.execute(
                "UPDATE actorloop.inbox SET state = 'taken' WHERE id IN (SELECT id FROM "
                "actorloop.inbox WHERE target_node = %s AND state = 'pending' "
                "AND NOT id = ANY(%s) ORDER BY id FOR UPDATE SKIP LOCKED) "
                "RETURNING id, session_id, request, body",
                (self.node, list(skip)),
                binary=True,
            ).fetchall()
            return sorted((Handed(*row) for row in rows), key=lambda handed: handed.id)

        return await self.store.execute(run)

    async def take_one(self, row_id: int, carried: Handed | None) -> Handed | None:
        """Take the row a notification named (its request `carried` by the notification,
        or None: read from the row); None when it is no longer this node's to run
        (withdrawn, or already answered). A row this node's own poll took meanwhile is
        taken all the same: the poll leaves it to the caller."""

        def run(conn: psycopg.Connection) -> Handed | None:
            returning = "id" if carried is not None else "id, session_id, request, body"
            row = conn.execute(
                "UPDATE actorloop.inbox SET state = 'taken' WHERE id = %s AND target_node = %s "
                f"AND state IN ('pending', 'taken') RETURNING {returning}",
                (row_id, self.node),
                binary=True,
            ).fetchone()
            if row is None:
                return None
            return carried if carried is not None else Handed(*row)

        return await self.store.execute(run)

    async def answer(self, row_id: int, status: int, response: bytes) -> None:
        """Answer a row this node ran (taken, or a `GET` still pending); its sender is
        woken, with the answer in the notification when it fits. Nothing when the row is
        no longer open (withdrawn, or answered already): one answer per row."""
        tail = _inline((str(status), _b64(response)))

        def run(conn: psycopg.Connection) -> None:
            conn.execute(
                "WITH answered AS (UPDATE actorloop.inbox SET state = 'done', status = %s, "
                "response = %s WHERE id = %s AND state IN ('pending', 'taken') "
                "RETURNING id, origin_node) "
                "SELECT pg_notify(%s, origin_node || ' a ' || id || %s) FROM answered",
                (status, response, row_id, REPLY_CHANNEL, tail),
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

    async def alive(self, node: str) -> bool:
        """Whether `node`'s heartbeat is unexpired, by the database's clock."""

        def run(conn: psycopg.Connection) -> bool:
            row = conn.execute(
                "SELECT expires > now() FROM actorloop.nodes WHERE id = %s", (node,)
            ).fetchone()
            return row is not None and bool(row[0])

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
                "SELECT pg_notify(%s, target_node || ' c ' || %s) FROM marked "
                "WHERE state = 'taken'",
                (row_id, INBOX_CHANNEL, str(row_id)),
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
    """A connection of its own LISTENing on both channels, in a thread of its own: every
    notification for this node is parsed there and handed to `deliver` on the trio
    thread (`TrioToken.run_sync_soon`: one hop, the listener never waits for trio). A lost
    connection is reopened (`reconnect_s` later when it fails), and `deliver` gets a
    `wake` notice each time it is (re)opened: what was sent meanwhile is in the rows."""

    def __init__(
        self, store: PostgresStore, deliver: Callable[[Notice], None], reconnect_s: float
    ) -> None:
        self.store = store
        self.node = store.node
        self._deliver = deliver
        self._reconnect_s = reconnect_s
        self._stopped = threading.Event()
        self._attempted = trio.Event()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen until cancelled; started once the first connection attempt is over
        (LISTENing, or failed: the poll covers). A cancel stops the thread and waits for it
        (`NOTIFY_WAIT_S`, or what is left of a connect attempt's timeout while the database
        is unreachable), so its connection is closed before this returns."""
        token = trio.lowlevel.current_trio_token()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._stop_when_cancelled)
            nursery.start_soon(trio.to_thread.run_sync, self._listen, token)
            await self._attempted.wait()
            task_status.started()

    async def _stop_when_cancelled(self) -> None:
        try:
            await trio.sleep_forever()
        finally:
            self.close()

    def close(self) -> None:
        """Stop listening (the thread closes its connection and ends)."""
        self._stopped.set()

    def _delivered(self, notice: Notice) -> None:
        # On the trio thread: an exception escaping a run_sync_soon callback would crash
        # the whole run (TrioInternalError), so it is logged here instead.
        try:
            self._deliver(notice)
        except Exception:
            log.exception("inbox listener: delivering %r failed", notice)

    def _listen(self, token: trio.lowlevel.TrioToken) -> None:
        conn: psycopg.Connection | None = None
        try:
            while not self._stopped.is_set():
                try:
                    if conn is None:
                        conn = self.store.connect()
                        conn.execute(f"LISTEN {INBOX_CHANNEL}")
                        conn.execute(f"LISTEN {REPLY_CHANNEL}")
                        token.run_sync_soon(self._delivered, Notice("wake"))
                        token.run_sync_soon(self._attempted.set)
                    # Wakes every NOTIFY_WAIT_S to see close(): the trio side waits for
                    # this thread to end before the listener's scope does.
                    for notify in conn.notifies(timeout=NOTIFY_WAIT_S):
                        notice = parse_notice(notify.channel, notify.payload, self.node)
                        if notice is not None:
                            token.run_sync_soon(self._delivered, notice)
                        if self._stopped.is_set():
                            break
                except trio.RunFinishedError:
                    return
                except Exception as exc:
                    # Not fatal: the poll still finds every row. Waiting before the next
                    # attempt keeps a database outage from spinning this thread.
                    log.debug("inbox listener: %s", exc)
                    if conn is not None:
                        with contextlib.suppress(psycopg.Error):
                            conn.close()
                    conn = None
                    token.run_sync_soon(self._attempted.set)
                    self._stopped.wait(self._reconnect_s)
        finally:
            if conn is not None:
                with contextlib.suppress(psycopg.Error):
                    conn.close()
