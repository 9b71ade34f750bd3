"""The SQLite store's rows read back, checked: a session's meta and acknowledged head, the
heads a group commit continues, every event through its fork parents; and whether a meta
reads back from its own row unchanged (`plain_meta`)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from functools import partial
from typing import Any

from ...codecs.jsonvalue import FrozenDict
from ...codecs.rows import READ_COLUMNS, head_of, meta_from_row
from ..errors import SessionCorruptError, SessionFormatError, SessionNotFound
from ..model.events import SessionEvent
from ..model.meta import FORMAT_VERSION, SessionMeta
from .base import Loaded, RowSource, read_rows
from .sqlite_connection import SqliteConnection
from .sqlite_schema import SESSION_COLUMNS

_IDS_PER_QUERY = 500


def plain_meta(meta: SessionMeta) -> bool:
    """Whether `meta` is plainly one `meta_from_row` reads back from its own row: fields of
    exactly the types it accepts, this build's version and no labels (labels are left to
    the round trip: one nested past the JSON parser's depth would not read back). False
    decides nothing: `create` then asks `meta_from_row`."""
    parent, seed = meta.parent_session, meta.seed_length
    return (
        type(meta.labels) is FrozenDict
        and not meta.labels
        and type(meta.version) is int
        and meta.version == FORMAT_VERSION
        and type(meta.created_at) is int
        and meta.created_at >= 0
        and (parent is None) == (seed is None)
        and (parent is None or type(parent) is str)
        and (seed is None or (type(seed) is int and seed >= 0))
    )


class SqliteReads(SqliteConnection):
    """The checked reads of a `SqliteStore` (its base class), each in the caller's
    transaction on the connection below."""

    def _where(self, session_id: str, seq: int | None = None) -> str:
        place = f"sqlite {self.path} session {session_id!r}"
        return place if seq is None else f"{place} seq {seq}"

    def _row(self, db: sqlite3.Connection, session_id: str) -> tuple[Any, ...] | None:
        row: tuple[Any, ...] | None = db.execute(
            f"SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?", (session_id,)
        ).fetchone()
        return row

    def _meta_head(self, db: sqlite3.Connection, session_id: str) -> tuple[SessionMeta, int] | None:
        row = self._row(db, session_id)
        if row is None:
            return None
        try:
            meta = meta_from_row(row, self._where(session_id))
            head = head_of(row, self._where(session_id))
        except SessionFormatError as exc:
            raise SessionCorruptError(exc.where, exc.problem) from exc
        if meta.id != session_id:
            raise SessionCorruptError(self._where(session_id), f"row names {meta.id!r}")
        if head < (meta.seed_length or 0):
            raise SessionCorruptError(
                self._where(session_id), f"acknowledged head {head} is below its fork seed"
            )
        return meta, head

    def _meta(self, db: sqlite3.Connection, session_id: str) -> SessionMeta | None:
        found = self._meta_head(db, session_id)
        return None if found is None else found[0]

    def _need(self, db: sqlite3.Connection, session_id: str) -> tuple[SessionMeta, int]:
        found = self._meta_head(db, session_id)
        if found is None:
            raise SessionNotFound(session_id)
        return found

    def _heads(self, db: sqlite3.Connection, session_ids: Sequence[str]) -> dict[str, Any]:
        """Per session of a group commit: (recorded head, next seq the rows end at), read in
        the caller's transaction (a few queries for the whole commit, not two per session)."""
        ids = sorted(session_ids)
        found: dict[str, Any] = {}
        for start in range(0, len(ids), _IDS_PER_QUERY):
            chunk = ids[start : start + _IDS_PER_QUERY]
            rows = db.execute(
                "SELECT id, head, seed_length, "
                "(SELECT MAX(seq) FROM events WHERE session_id = sessions.id) "
                f"FROM sessions WHERE id IN ({', '.join('?' * len(chunk))})",
                chunk,
            )
            for session_id, head, seed_length, last in rows:
                rows_end = (seed_length or 0) if last is None else last + 1
                found[session_id] = (head, rows_end)
        return found

    def _events(self, db: sqlite3.Connection, meta: SessionMeta, head: int) -> list[SessionEvent]:
        """Every event of the session (its fork seed read through its parents), checked."""

        def rows(of: SessionMeta, first: int, _end: int | None) -> Iterable[Any]:
            # No upper bound: a row past the head is damage, not something to skip.
            return db.execute(
                f"SELECT {READ_COLUMNS} FROM events WHERE session_id = ? AND seq >= ? ORDER BY seq",
                (of.id, first),
            )

        return read_rows(RowSource(self._where, partial(self._meta_head, db), rows), meta, head)

    def _load_all(self, db: sqlite3.Connection, session_id: str) -> Loaded:
        meta, head = self._need(db, session_id)
        return meta, tuple(self._events(db, meta, head))
