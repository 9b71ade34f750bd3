"""Session-row locks: the one order every transaction takes them in, so the store's own
transactions cannot deadlock, and the retry of a transaction PostgreSQL rolled back to
break a deadlock or a serialization conflict (anything else locking the rows).

The rule: a transaction that locks several session rows locks all of them first, in one
`LOCK_SESSIONS` statement (`ORDER BY id`: the database's collation decides the order, the
same for every statement), before it updates any; a transaction that locks one row locks
it alone. Two transactions then never hold rows the other waits for.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

import psycopg
from psycopg import errors as pg_errors
from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt
from tenacity.wait import wait_random_exponential

T = TypeVar("T")
log = logging.getLogger("actorloop.stores.postgres")

LOCK_SESSIONS = "SELECT 1 FROM actorloop.sessions WHERE id = ANY(%s) ORDER BY id FOR UPDATE"
"""Lock the session rows of a list of ids, in id order (the first statement of a
transaction that locks several)."""

ROLLED_BACK = (pg_errors.DeadlockDetected, pg_errors.SerializationFailure)
"""SQLSTATE 40P01 and 40001: PostgreSQL rolled the whole transaction back, so running it
again from the start is safe (nothing of it landed)."""

ATTEMPTS = 8
"""Runs of a transaction before a rollback of it is reported (each waits a random,
growing backoff of up to half a second first, so that the transactions in conflict stop
meeting)."""


def _retrying(where: str) -> Retrying:
    def report(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        code = getattr(error, "sqlstate", None)
        log.warning(
            "postgres %s: the database rolled a transaction back (%s, SQLSTATE %s); "
            "running it again (attempt %d of %d)",
            where,
            str(error).strip().splitlines()[0] if error is not None else "?",
            code,
            state.attempt_number + 1,
            ATTEMPTS,
        )

    return Retrying(
        retry=retry_if_exception_type(ROLLED_BACK),
        stop=stop_after_attempt(ATTEMPTS),
        wait=wait_random_exponential(multiplier=0.01, max=0.5),
        before_sleep=report,
        reraise=True,
    )


def run_retried(where: str, work: Callable[[psycopg.Connection], T], conn: psycopg.Connection) -> T:
    """`work(conn)`, run again while PostgreSQL rolls it back as a deadlock victim or a
    serialization failure (blocking: a worker thread). `work` must be one transaction or
    one statement: a rolled-back one left nothing behind. The last rollback is raised once
    the attempts are spent."""
    return _retrying(where)(work, conn)


def rolled_back(exc: BaseException) -> bool:
    """Whether `exc` (or its cause) is a rollback `run_retried` gave up on."""
    return isinstance(exc, ROLLED_BACK) or isinstance(exc.__cause__, ROLLED_BACK)
