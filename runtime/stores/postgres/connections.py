"""The connections of a `PostgresStore`: a `psycopg_pool` pool opened on first use (the
schema prepared on its first connection), calls run on it in the calling worker thread,
and the errors typed: an outage is `StoreUnavailable`, anything else a `StoreError`."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from ...errors import StoreError, StoreUnavailable
from . import schema
from .config import PgSettings
from .locks import ATTEMPTS, ROLLED_BACK, run_retried

T = TypeVar("T")

CONNECT_TIMEOUT_S = 5
"""libpq's connect timeout unless the URL sets one."""
IDLE_IN_TRANSACTION_MIN_S = 10.0
"""The floor of the server-side `idle_in_transaction_session_timeout` of every connection
(2 × `lease_s` above it): a process stopped (SIGSTOP, a hung VM) in the middle of a
transaction would otherwise hold its row locks until it runs again, and no other instance
could take its sessions over; the server ends that transaction instead."""
POOL_WAIT_S = 2.0
"""How long a call waits for a pooled connection before it is `StoreUnavailable`. Calls are
limited to the pool's size, so a call waits only while connections cannot be made (the
database is down or unreachable): it fails soon, typed, rather than hang."""


def unavailable(settings: PgSettings, exc: BaseException) -> StoreUnavailable:
    """The `StoreUnavailable` for an outage `exc` (its first line, the URL without a
    password)."""
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    error = StoreUnavailable(f"postgres {settings.display}: the database is unavailable: {message}")
    error.__cause__ = exc
    return error


class Connections:
    """One store's pool (see the module docstring); `close` ends it for good."""

    def __init__(self, settings: PgSettings) -> None:
        self.settings = settings
        self._where = settings.display
        self._pool: ConnectionPool | None = None
        self._lock = threading.Lock()
        self._schema_ready = False
        self._closed = False

    @property
    def idle_ms(self) -> int:
        """The connections' `idle_in_transaction_session_timeout`, in milliseconds."""
        return round(max(2 * self.settings.lease_s, IDLE_IN_TRANSACTION_MIN_S) * 1000)

    @property
    def opened(self) -> bool:
        """Whether the pool was opened (a call was made) and is not closed."""
        return self._pool is not None

    def _open(self) -> ConnectionPool:
        with self._lock:
            if self._closed:
                raise StoreError(f"postgres store {self._where} is closed")
            if self._pool is None:
                kwargs: dict[str, Any] = {"autocommit": True}
                if "connect_timeout" not in self.settings.conninfo:
                    kwargs["connect_timeout"] = CONNECT_TIMEOUT_S
                kwargs["application_name"] = f"actorloop {self.settings.node}"[:63]
                if "options" not in self.settings.conninfo:
                    kwargs["options"] = f"-c idle_in_transaction_session_timeout={self.idle_ms}"
                pool = ConnectionPool(
                    self.settings.conninfo,
                    min_size=1,
                    max_size=self.settings.pool_max,
                    kwargs=kwargs,
                    open=False,
                    timeout=POOL_WAIT_S,
                    check=ConnectionPool.check_connection,
                    name=f"actorloop-{self.settings.node}",
                )
                pool.open(wait=False)
                self._pool = pool
            return self._pool

    def call(self, work: Callable[[psycopg.Connection], T]) -> T:
        """Run `work` on a pooled connection (blocking: in the calling worker thread), again
        if PostgreSQL rolls it back (`locks.run_retried`)."""
        try:
            with self._open().connection() as conn:
                if not self._schema_ready:
                    schema.prepare(conn)
                    self._schema_ready = True
                return run_retried(self._where, work, conn)
        except ROLLED_BACK as exc:
            # Not an outage: the database kept choosing this transaction to roll back.
            raise StoreError(
                f"postgres {self._where}: the database rolled this transaction back "
                f"{ATTEMPTS} times ({str(exc).strip().splitlines()[0]}); giving up"
            ) from exc
        except (PoolTimeout, psycopg.OperationalError) as exc:
            raise unavailable(self.settings, exc) from exc
        except psycopg.Error as exc:
            raise StoreError(f"postgres {self._where}: {type(exc).__name__}: {exc}") from exc

    def connect(self) -> psycopg.Connection:
        """A new connection of its own, outside the pool (blocking), e.g. to LISTEN; the
        caller closes it."""
        try:
            return psycopg.connect(
                self.settings.conninfo, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S
            )
        except psycopg.OperationalError as exc:
            raise unavailable(self.settings, exc) from exc

    def close(self) -> None:
        """Close the pool (blocking); no call opens it again."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
