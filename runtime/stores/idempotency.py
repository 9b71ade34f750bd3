"""Idempotency keys kept by the store (docs/serve.md §5): which key claimed which request of a
session, by whom, and the outcome once settled; one table per store, so a key outlives the
process that claimed it and is seen by every instance of a shared store.

`key_table(store)` gives the store's `KeyTable`: a dict for `memory:`, a table in the same
file for `sqlite:`, files under `DIR/.idempotency/` for `jsonl:`, a table in the
`actorloop` schema for PostgreSQL. Every claim is an atomic insert-if-absent; settling and
taking over are compare-and-set on the owner, so two claimers never both win.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Protocol

import orjson
import trio
from attrs import evolve, frozen

from ..errors import StoreError
from .base import Store

DEFAULT_RETENTION_S = 24 * 3600.0
"""How long a settled key is kept after its request's outcome (serve `--idempotency-ttl`)."""


def now_ms() -> int:
    """Wall-clock milliseconds: records are compared across processes."""
    return int(time.time() * 1000)


@frozen
class KeyRecord:
    """One key of one session: the request it claimed and, once settled, its outcome."""

    session_id: str
    key: str
    fingerprint: str
    """What makes a retry "the same request" (a digest of its route and body)."""
    owner: str
    """Who runs the request (a service instance's token); a live owner settles it."""
    head: int
    """The session's log length when the request was claimed: its turn, if it started
    one, starts at or after it."""
    created_at: int
    outcome: str | None = None
    """The response, as JSON text, once settled."""
    settled_at: int | None = None

    def expired(self, now: int, retention_s: float) -> bool:
        """Settled longer ago than the retention (a pending key never expires)."""
        return self.settled_at is not None and now - self.settled_at > retention_s * 1000


class KeyTable(Protocol):
    """A store's idempotency keys."""

    async def claim(self, record: KeyRecord, retention_s: float) -> tuple[KeyRecord, bool]:
        """Insert `record` unless its (session, key) has a live record: (the record that
        stands, whether it is `record`). An expired record is replaced."""
        ...

    async def update(self, record: KeyRecord, expected_owner: str) -> bool:
        """Replace the unsettled record of (session, key) by `record` if it is still owned
        by `expected_owner` (settle, or take over); whether it was replaced."""
        ...

    async def forget(self, session_id: str, key: str, owner: str) -> None:
        """Drop the unsettled record of (session, key) owned by `owner` (its request
        started nothing), so a retry may claim the key again."""
        ...


class MemoryKeys:
    """The keys of a `memory:` store (gone with the process, like its sessions)."""

    def __init__(self) -> None:
        self._records: dict[tuple[str, str], KeyRecord] = {}

    async def claim(self, record: KeyRecord, retention_s: float) -> tuple[KeyRecord, bool]:
        await trio.lowlevel.checkpoint()
        slot = (record.session_id, record.key)
        old = self._records.get(slot)
        if old is not None and not old.expired(record.created_at, retention_s):
            return old, False
        self._records[slot] = record
        return record, True

    async def update(self, record: KeyRecord, expected_owner: str) -> bool:
        await trio.lowlevel.checkpoint()
        slot = (record.session_id, record.key)
        old = self._records.get(slot)
        if old is None or old.owner != expected_owner or old.outcome is not None:
            return False
        self._records[slot] = record
        return True

    async def forget(self, session_id: str, key: str, owner: str) -> None:
        await trio.lowlevel.checkpoint()
        old = self._records.get((session_id, key))
        if old is not None and old.owner == owner and old.outcome is None:
            del self._records[(session_id, key)]


_COLUMNS = "session_id, key, fingerprint, owner, head, created_at, outcome, settled_at"
CREATE_KEYS = """CREATE TABLE IF NOT EXISTS {table} (
    session_id text NOT NULL, key text NOT NULL, fingerprint text NOT NULL,
    owner text NOT NULL, head bigint NOT NULL, created_at bigint NOT NULL,
    outcome text, settled_at bigint, PRIMARY KEY (session_id, key)
)"""


def _row(record: KeyRecord) -> tuple[Any, ...]:
    return (
        record.session_id,
        record.key,
        record.fingerprint,
        record.owner,
        record.head,
        record.created_at,
        record.outcome,
        record.settled_at,
    )


class SqlKeys:
    """The keys as rows of one SQL table (SQLite or PostgreSQL), each call one short
    transaction in the store's own worker: `run(work)` hands `work` a connection."""

    def __init__(self, table: str, mark: str, run: Any) -> None:
        self._table = table
        self._mark = mark
        self._run = run
        self._ready = False
        self._creating = trio.Lock()

    def _sql(self, text: str) -> str:
        return text.format(table=self._table).replace("?", self._mark)

    async def _call(self, work: Any) -> Any:
        if not self._ready:
            async with self._creating:
                if not self._ready:
                    await self._create()
                    self._ready = True
        return await self._run(work)

    async def _create(self) -> None:
        """The table, in a database made before it existed (a new one has it already)."""
        try:
            await self._run(lambda db: db.execute(self._sql(CREATE_KEYS)))
        except StoreError:
            # Another process created it at the same moment (PostgreSQL's catalog refuses
            # the second CREATE ... IF NOT EXISTS); anything else fails here again.
            await self._run(lambda db: db.execute(self._sql(CREATE_KEYS)))

    async def claim(self, record: KeyRecord, retention_s: float) -> tuple[KeyRecord, bool]:
        cutoff = record.created_at - int(retention_s * 1000)
        marks = ", ".join("?" * 8)

        def work(db: Any) -> tuple[KeyRecord, bool]:
            db.execute(
                self._sql(
                    "DELETE FROM {table} WHERE session_id = ? AND key = ? "
                    "AND settled_at IS NOT NULL AND settled_at < ?"
                ),
                (record.session_id, record.key, cutoff),
            )
            inserted = db.execute(
                self._sql(
                    f"INSERT INTO {{table}} ({_COLUMNS}) VALUES ({marks}) "
                    "ON CONFLICT (session_id, key) DO NOTHING RETURNING key"
                ),
                _row(record),
            ).fetchall()
            if inserted:
                return record, True
            row = db.execute(
                self._sql(f"SELECT {_COLUMNS} FROM {{table}} WHERE session_id = ? AND key = ?"),
                (record.session_id, record.key),
            ).fetchone()
            return KeyRecord(*row), False

        return await self._call(work)

    async def update(self, record: KeyRecord, expected_owner: str) -> bool:
        def work(db: Any) -> bool:
            changed = db.execute(
                self._sql(
                    "UPDATE {table} SET fingerprint = ?, owner = ?, head = ?, created_at = ?, "
                    "outcome = ?, settled_at = ? WHERE session_id = ? AND key = ? "
                    "AND owner = ? AND outcome IS NULL RETURNING key"
                ),
                (*_row(record)[2:], record.session_id, record.key, expected_owner),
            ).fetchall()
            return bool(changed)

        return await self._call(work)

    async def forget(self, session_id: str, key: str, owner: str) -> None:
        await self._call(
            lambda db: db.execute(
                self._sql(
                    "DELETE FROM {table} WHERE session_id = ? AND key = ? AND owner = ? "
                    "AND outcome IS NULL"
                ),
                (session_id, key, owner),
            )
        )


class FileKeys:
    """The keys of a `jsonl:` store: one JSON file per (session, key) under
    `DIR/.idempotency/` (not a session directory: a dot name is no session id), born
    complete (written to a temp file, fsynced, linked: the link fails if it exists)."""

    def __init__(self, root: Path) -> None:
        self._dir = root / ".idempotency"

    def _path(self, session_id: str, key: str) -> Path:
        digest = hashlib.sha256(f"{session_id}\x00{key}".encode()).hexdigest()
        return self._dir / f"{digest}.json"

    def _read(self, path: Path) -> KeyRecord | None:
        try:
            return KeyRecord(**orjson.loads(path.read_bytes()))
        except FileNotFoundError:
            return None
        except (orjson.JSONDecodeError, TypeError) as exc:
            raise StoreError(f"jsonl idempotency record {path}: {exc}") from exc

    def _write(self, path: Path, record: KeyRecord, *, replace: bool) -> bool:
        self._dir.mkdir(parents=True, exist_ok=True)
        body = orjson.dumps(
            {name: getattr(record, name) for name in _COLUMNS.replace(" ", "").split(",")}
        )
        fd, temp = tempfile.mkstemp(dir=self._dir, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(body)
                file.flush()
                os.fsync(file.fileno())
            if replace:
                os.replace(temp, path)
            else:
                try:
                    os.link(temp, path)
                except FileExistsError:
                    return False
            dir_fd = os.open(self._dir, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
            return True
        finally:
            if os.path.exists(temp):
                os.unlink(temp)

    async def claim(self, record: KeyRecord, retention_s: float) -> tuple[KeyRecord, bool]:
        path = self._path(record.session_id, record.key)

        def work() -> tuple[KeyRecord, bool]:
            for _attempt in range(3):
                old = self._read(path)
                if old is not None and not old.expired(record.created_at, retention_s):
                    return old, False
                if self._write(path, record, replace=old is not None):
                    return record, True
            raise StoreError(f"jsonl idempotency record {path}: claimed and dropped repeatedly")

        return await trio.to_thread.run_sync(work)

    async def update(self, record: KeyRecord, expected_owner: str) -> bool:
        path = self._path(record.session_id, record.key)

        def work() -> bool:
            old = self._read(path)
            if old is None or old.owner != expected_owner or old.outcome is not None:
                return False
            return self._write(path, record, replace=True)

        return await trio.to_thread.run_sync(work)

    async def forget(self, session_id: str, key: str, owner: str) -> None:
        path = self._path(session_id, key)

        def work() -> None:
            old = self._read(path)
            if old is not None and old.owner == owner and old.outcome is None:
                path.unlink(missing_ok=True)

        await trio.to_thread.run_sync(work)


def key_table(store: Store) -> KeyTable:
    """The idempotency keys of `store` (made on first use, then the same object)."""
    table: KeyTable | None = getattr(store, "_idempotency_keys", None)
    if table is not None:
        return table
    table = _make_table(store)
    store._idempotency_keys = table  # type: ignore[attr-defined]
    return table


def _make_table(store: Store) -> KeyTable:
    from .jsonl import JsonlStore
    from .sqlite import SqliteStore

    if isinstance(store, SqliteStore):

        async def in_sqlite(work: Any) -> Any:
            return await store._in_thread(work, write=True)

        return SqlKeys("idempotency_keys", "?", in_sqlite)
    if isinstance(store, JsonlStore):
        return FileKeys(store.root)
    # The PostgreSQL store needs the `postgres` extra: a store of that class exists only once
    # its module was imported, so look there instead of importing it.
    postgres = sys.modules.get("actorloop.runtime.stores.postgres.store")
    if postgres is not None and isinstance(store, postgres.PostgresStore):
        return SqlKeys("actorloop.idempotency_keys", "%s", store.execute)
    return MemoryKeys()


def settled(record: KeyRecord, outcome: Any) -> KeyRecord:
    """`record` settled now with `outcome` (a JSON value)."""
    return evolve(record, outcome=orjson.dumps(outcome).decode(), settled_at=now_ms())
