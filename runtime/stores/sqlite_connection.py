"""The SQLite store's one connection: where its work runs (the writer thread, or inline on
the trio thread when that cannot block), its transactions, busy timeout and WAL checkpoints,
and this process's handle on the database file."""

from __future__ import annotations

import logging
import sqlite3
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ..errors import StoreError, StoreUrlError
from .leases import OFD_LOCKS, FileIdentity
from .sqlite_schema import SCHEMA_VERSION, prepare_schema
from .writer import WriterThread

T = TypeVar("T")

BUSY_WAIT_MS = 10000
"""The busy timeout of work on the writer thread (inline work waits for nothing)."""
CHECKPOINT_PAGES = 1000
"""WAL pages (estimated) after which a passive checkpoint is posted to the writer thread:
SQLite's own automatic threshold, which NORMAL mode turns off (see `_note_wal`)."""

log = logging.getLogger("actorloop.store")


class Busy(Exception):
    """An inline commit found the write lock held: nothing was written, use the thread."""


def release_statements(exc: BaseException) -> None:
    """Drop the locals of the finished frames `exc` passed through: a cursor left there
    keeps its statement, and a statement keeps its connection (and its file descriptors)
    open past `close()` until the collector frees the exception's reference cycle, which a
    process loading many damaged files outruns."""
    traceback.clear_frames(exc.__traceback__)


class SqliteConnection:
    """The connection under a `SqliteStore` (its base class), opened on first use through
    the resolved path, and the writer thread that drives it."""

    def __init__(self, path: str | Path, *, synchronous: str = "NORMAL") -> None:
        mode = synchronous.upper()
        if mode not in ("NORMAL", "FULL"):
            raise StoreUrlError(f"sqlite synchronous must be NORMAL or FULL, got {synchronous!r}")
        self.path = Path(path)
        self.synchronous = mode
        # The database is opened (and its WAL named) through the resolved path, so symlinks
        # to one file are one database; a hard link is refused while another path is open.
        self._real = self.path.resolve()
        # Reentrant: a group commit holds it across its transactions and its tail memory.
        self._lock = threading.RLock()
        self._inline_now = False
        self._busy_ms = BUSY_WAIT_MS
        """The connection's busy timeout now: 0 while inline commits run (they must not
        wait), set back only when thread work needs it (not twice per inline commit)."""
        self._inline_commits = 0
        self._wal_pages = 0
        self._identity_lock = threading.Lock()
        self._file: FileIdentity | None = None
        self._db: sqlite3.Connection | None = None
        self._closed = False
        self._writer = WriterThread(self, f"sqlite store {self.path}")

    def _identity(self) -> FileIdentity:
        """This process's handle on the database file, bound to this store's path."""
        with self._identity_lock:
            if self._closed:
                raise StoreError(f"sqlite store {self.path} is closed")
            if self._file is None:
                identity = FileIdentity.open(self._real)
                try:
                    identity.bind(str(self._real))
                except BaseException:
                    identity.close()
                    raise
                self._file = identity
            return self._file

    def _connect(self) -> sqlite3.Connection:
        if self._db is not None:
            return self._db
        if OFD_LOCKS:
            self._identity()
        self._real.parent.mkdir(parents=True, exist_ok=True)
        # Autocommit mode: every transaction below is an explicit BEGIN ... COMMIT.
        db = sqlite3.connect(self._real, isolation_level=None, check_same_thread=False)
        try:
            db.execute(f"PRAGMA busy_timeout = {BUSY_WAIT_MS}")
            self._busy_ms = BUSY_WAIT_MS
            mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(f"sqlite {self.path}: cannot enable WAL (journal_mode={mode})")
            db.execute(f"PRAGMA synchronous = {self.synchronous}")
            if db.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
                prepare_schema(db, str(self.path))
            if self.synchronous == "NORMAL":
                # Checkpoints are posted to the writer thread (`_note_wal`), never run by
                # a commit: an inline commit must not fsync on the trio thread.
                db.execute("PRAGMA wal_autocheckpoint = 0")
        except BaseException as exc:
            release_statements(exc)
            db.close()
            raise
        self._db = db
        return db

    def _locked(self, work: Callable[[sqlite3.Connection], T]) -> T:
        with self._lock:
            if self._closed:
                raise StoreError(f"sqlite store {self.path} is closed")
            try:
                db = self._connect()
                wanted = 0 if self._inline_now else BUSY_WAIT_MS
                if self._busy_ms != wanted:
                    db.execute(f"PRAGMA busy_timeout = {wanted}")
                    self._busy_ms = wanted
                try:
                    return work(db)
                except BaseException as exc:
                    release_statements(exc)
                    raise
            except sqlite3.Error as exc:
                raise StoreError(f"sqlite {self.path}: {exc}") from exc
            except UnicodeDecodeError as exc:
                # The sqlite3 module decodes SQLite's messages and TEXT values as UTF-8: a
                # damaged file can hold neither (e.g. a mangled schema in the message).
                raise StoreError(f"sqlite {self.path}: undecodable text ({exc})") from exc

    def _transaction(self, work: Callable[[sqlite3.Connection], T], *, write: bool) -> T:
        def run(db: sqlite3.Connection) -> T:
            # IMMEDIATE takes the write lock up front, so a tail check and the insert that
            # follows it cannot be split by another writer.
            try:
                db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            except sqlite3.OperationalError as exc:
                if self._inline_now and exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY:
                    raise Busy from exc
                raise
            try:
                result = work(db)
                db.execute("COMMIT")
            except BaseException:
                # Also after a failed COMMIT (e.g. SQLITE_FULL): leaving the transaction
                # open would keep the write lock and block every later BEGIN.
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            return result

        return self._locked(run)

    async def _in_thread(self, work: Callable[[sqlite3.Connection], T], *, write: bool) -> T:
        return await self._writer.run(lambda: self._transaction(work, write=write))

    def _inline(self, run: Callable[[], None]) -> bool:
        """Run a small write (a create, a group commit of at most INLINE_EVENTS events and
        INLINE_BYTES bytes) here on the trio thread when that cannot block: NORMAL mode (a
        commit appends to the WAL, no fsync), the connection open and idle (no writer
        thread job holds `_lock`), the write lock free (no busy wait: `Busy`) and no
        checkpoint (those run on the writer thread). False when it did not run: nothing
        was written and the caller uses the thread. Same code and SQL either way."""
        if self.synchronous != "NORMAL" or self._db is None or self._closed:
            return False
        if not self._lock.acquire(blocking=False):
            return False
        try:
            db = self._db
            if db is None or self._closed:
                return False
            self._inline_now = True  # `_locked` turns the busy timeout off for it
            try:
                run()
            except Busy:
                return False
            finally:
                self._inline_now = False
            self._inline_commits += 1
            return True
        finally:
            self._lock.release()

    def _note_wal(self, pages: int) -> None:
        """Count the WAL pages a commit wrote (an estimate on the high side: twice its rows'
        bytes in pages, two pages per session, two for the head table and the b-tree
        above); past SQLite's own threshold, post a checkpoint."""
        if self.synchronous != "NORMAL":
            return  # FULL keeps SQLite's automatic checkpoints: it commits on the thread
        self._wal_pages += pages
        if self._wal_pages >= CHECKPOINT_PAGES:
            self._wal_pages = 0
            self._writer.post(self._checkpoint)

    def _checkpoint(self) -> None:
        """A passive WAL checkpoint on the writer thread (inline commits skip SQLite's)."""
        try:
            self._locked(lambda db: db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall())
        except StoreError as exc:
            # Not a durability matter: the commits are in the WAL; the next one retries.
            log.warning("sqlite %s: checkpoint failed: %s", self.path, exc)
