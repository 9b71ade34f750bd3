"""The lease keeper of a `PostgresStore`: a background task that renews every lease the
store holds and its node's heartbeat each `lease_s / 3`, writes the releases owed to the
database (woken at once by a release), and fences a lease whose epoch moved on. It also
sweeps the rows of dead nodes (`sweep`), when it starts and every `SWEEP_EVERY_S`.

A round locks the rows of its releases and renewals together, in id order, before it
updates any (`locks`): it cannot deadlock with a group commit.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from functools import partial

import psycopg
import trio

from .claims import Claims
from .config import PgSettings
from .locks import LOCK_SESSIONS
from .sweep import SWEEP_EVERY_S, sweep

log = logging.getLogger("actorloop.stores.postgres")

_RELEASE = (
    "UPDATE actorloop.sessions AS s SET owner_node = NULL, lease_expires = NULL "
    "FROM unnest(%s::text[], %s::bigint[]) AS v(id, epoch) "
    "WHERE s.id = v.id AND s.owner_epoch = v.epoch AND s.owner_node = %s"
)
_RENEW = (
    "UPDATE actorloop.sessions AS s SET lease_expires = now() + %s * interval '1 second' "
    "FROM unnest(%s::text[], %s::bigint[]) AS v(id, epoch) "
    "WHERE s.id = v.id AND s.owner_epoch = v.epoch RETURNING s.id"
)
_HEARTBEAT = (
    "INSERT INTO actorloop.nodes (id, expires) VALUES (%s, now() + %s * interval '1 second') "
    "ON CONFLICT (id) DO UPDATE SET expires = excluded.expires"
)


class LeaseKeeper:
    """The keeper of one store (see the module docstring): `round` is one round (blocking,
    on a pooled connection), `ensure` starts the task, `stop` ends it."""

    def __init__(
        self,
        claims: Claims,
        settings: PgSettings,
        run: Callable[[Callable[[psycopg.Connection], object]], Awaitable[object]],
    ) -> None:
        self._claims = claims
        self._settings = settings
        self._where = settings.display
        self._run = run
        self._scope: trio.CancelScope | None = None
        self._done: trio.Event | None = None
        self._wake = trio.Event()
        self._failing = False
        self._stopped = False
        self._swept: float | None = None

    def ensure(self) -> None:
        """Start the task (a system task, cancelled by `stop`), once."""
        if self._scope is not None or self._stopped:
            return
        self._scope = trio.CancelScope()
        self._done = trio.Event()
        trio.lowlevel.spawn_system_task(self._keep, name=f"lease keeper {self._settings.node}")

    def wake(self) -> None:
        """Run a round now (a release is owed); ignored off the trio thread, where the next
        round writes it."""
        try:
            trio.lowlevel.current_task()
        except RuntimeError:
            return
        self._wake.set()

    async def stop(self) -> None:
        """End the task; no round runs after this returns."""
        self._stopped = True
        if self._scope is not None:
            self._scope.cancel()
            assert self._done is not None
            await self._done.wait()

    async def _keep(self) -> None:
        assert self._scope is not None and self._done is not None
        try:
            with self._scope:
                while True:
                    with trio.move_on_after(self._settings.lease_s / 3):
                        await self._wake.wait()
                    self._wake = trio.Event()
                    try:
                        await self._run(self.round)
                    except Exception as exc:
                        # A system task must not raise: the store reports and keeps trying;
                        # leases that lapse meanwhile are fenced by their epochs, not lost.
                        if not self._failing:
                            log.warning("postgres %s: cannot renew leases: %s", self._where, exc)
                        self._failing = True
                    else:
                        if self._failing:
                            log.warning("postgres %s: renewing leases again", self._where)
                        self._failing = False
                        await self._sweep_when_due()
        finally:
            self._done.set()

    async def _sweep_when_due(self) -> None:
        now = time.monotonic()
        if self._swept is not None and now - self._swept < SWEEP_EVERY_S:
            return
        self._swept = now
        try:
            swept = await self._run(sweep)
        except Exception as exc:
            log.warning("postgres %s: cannot sweep dead nodes' rows: %s", self._where, exc)
        else:
            log.debug("postgres %s: swept %s", self._where, swept)

    def final_round(self) -> Callable[[psycopg.Connection], None]:
        """The last round, on close: releases written, the node's heartbeat removed."""
        return partial(self.round, final=True)

    def round(self, conn: psycopg.Connection, *, final: bool = False) -> None:
        """One round: write the owed releases, renew every lease still held (a lease whose
        epoch moved on is fenced), and the node's heartbeat (removed when `final`)."""
        node, lease_s = self._settings.node, self._settings.lease_s
        releases = self._claims.take_releases()
        owned = self._claims.owned()
        started = time.monotonic()
        try:
            with conn.transaction():
                ids = {session_id for session_id, _ in releases}
                ids.update(claim.session_id for claim, _ in owned)
                if ids:
                    conn.execute(LOCK_SESSIONS, (list(ids),))
                if releases:
                    conn.execute(
                        _RELEASE,
                        ([sid for sid, _ in releases], [epoch for _, epoch in releases], node),
                    )
                renewed: set[str] = set()
                if owned:
                    ids_epochs = ([c.session_id for c, _ in owned], [e for _, e in owned])
                    renewed = {row[0] for row in conn.execute(_RENEW, (lease_s, *ids_epochs))}
                lost = [(claim, epoch) for claim, epoch in owned if claim.session_id not in renewed]
                current: dict[str, tuple[int, str | None]] = {}
                if lost:
                    current = {
                        row[0]: (row[1], row[2])
                        for row in conn.execute(
                            "SELECT id, owner_epoch, owner_node FROM actorloop.sessions "
                            "WHERE id = ANY(%s)",
                            ([claim.session_id for claim, _ in lost],),
                        )
                    }
                if final:
                    conn.execute("DELETE FROM actorloop.nodes WHERE id = %s", (node,))
                else:
                    conn.execute(_HEARTBEAT, (node, lease_s))
        except BaseException:
            self._claims.give_back(releases)
            raise
        self._claims.renewed([claim for claim, _ in owned if claim.session_id in renewed], started)
        for claim, _epoch in lost:
            now_epoch, by = current.get(claim.session_id, (None, None))
            self._claims.fence(claim, now_epoch, by)
