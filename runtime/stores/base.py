"""The `Store` seam every durable session store implements, writer leases, the load-time
repair plan shared by all stores, and `open_store(url)`."""

from __future__ import annotations

import errno
import fcntl
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Literal, Protocol, TypeAlias

from actorloop.runtime.errors import (
    InvalidSessionId,
    SessionBusy,
    SessionCorruptError,
    SessionValidationError,
    StoreError,
    StoreUrlError,
)
from actorloop.runtime.events import SessionEvent
from actorloop.runtime.repair import closers
from actorloop.runtime.session import Session, SessionMeta
from actorloop.runtime.stores.ids import check_session_id

Synchronous: TypeAlias = Literal["NORMAL", "FULL"]
Batch: TypeAlias = Sequence[tuple[str, Sequence[SessionEvent]]]
Loaded: TypeAlias = tuple[SessionMeta, tuple[SessionEvent, ...]]

ACCEPTED_URLS = "memory:, sqlite:PATH[?synchronous=NORMAL|FULL] or jsonl:DIR"


class Lease:
    """Proof that its holder is the single writer of one session until `release()`."""

    __slots__ = ("_release", "session_id")

    def __init__(self, session_id: str, release: Callable[[Lease], None]) -> None:
        self.session_id = session_id
        self._release: Callable[[Lease], None] | None = release

    @property
    def held(self) -> bool:
        return self._release is not None

    def release(self) -> None:
        """Give the session up (idempotent)."""
        release, self._release = self._release, None
        if release is not None:
            release(self)

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"Lease({self.session_id!r}, held={self.held})"


class Store(Protocol):
    """Durable append-only session logs. Every method is async except `claim`.

    * `append`/`append_batch`: seqs must continue the stored tail exactly (checked in the
      same transaction as the write); durable once `flush` (or `append_batch`) returns.
    * `append_batch` is a group commit: one transaction / one fsync round for all sessions.
    * `load` truncates a torn tail, validates, and appends and persists repair closers for
      an open last turn. Repair needs the writer's right: pass the caller's `lease`, or
      the store takes a temporary one; if someone else holds it, repair is refused with
      SessionBusy ("live turn is open"). With `repair=False` it is a read-only look at
      the durable part of the log: validated, nothing cut or appended, no lease needed
      (a live session's open turn stays open; a torn tail is left out, not cut).
    * `fork` is O(1): the child stores a parent pointer and seed length, nothing is copied.
    * `claim` grants the single-writer lease (across processes too); SessionBusy if held.
    """

    url: str

    async def create(self, meta: SessionMeta) -> None: ...

    async def append(self, session_id: str, events: Sequence[SessionEvent]) -> None: ...

    async def append_batch(self, batch: Batch) -> None: ...

    async def flush(self, session_id: str | None = None) -> None: ...

    async def load(
        self, session_id: str, *, lease: Lease | None = None, repair: bool = True
    ) -> Loaded: ...

    async def exists(self, session_id: str) -> bool: ...

    async def list(self) -> tuple[SessionMeta, ...]: ...

    async def fork(self, parent_id: str, boundary: int, child_id: str) -> SessionMeta: ...

    def claim(self, session_id: str) -> Lease: ...

    async def close(self) -> None: ...


def busy_error(session_id: str, detail: str = "") -> SessionBusy:
    return SessionBusy(f"session {session_id!r} is owned by a live writer{detail}")


class LeaseTable:
    """The writer leases one store instance holds.

    With `lock_path`, each lease is also an exclusive `flock` on a lock file, so it excludes
    other processes and other store instances, and the kernel frees it if the holder dies
    (even by kill -9). Without it (memory store) leases are in-process only.
    """

    def __init__(self, lock_path: Callable[[str], Path] | None = None) -> None:
        self._lock_path = lock_path
        self._held: dict[str, tuple[Lease, int | None]] = {}
        # Stores check leases from worker threads while `claim` runs on the trio thread.
        self._mutex = threading.Lock()

    def claim(self, session_id: str) -> Lease:
        lease = self.try_claim(session_id)
        if lease is None:
            raise busy_error(session_id, " (its writer lease is held); refusing a second writer")
        return lease

    def try_claim(self, session_id: str) -> Lease | None:
        with self._mutex:
            return self._try_claim(session_id)

    def _try_claim(self, session_id: str) -> Lease | None:
        if session_id in self._held:
            return None
        fd: int | None = None
        if self._lock_path is not None:
            path = self._lock_path(session_id)
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as exc:
                raise StoreError(f"cannot open lock file {path}: {exc}") from exc
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    return None
                raise StoreError(f"cannot lock {path}: {exc}") from exc
        lease = Lease(session_id, self._release)
        self._held[session_id] = (lease, fd)
        return lease

    def holds(self, lease: Lease | None, session_id: str) -> bool:
        entry = self._held.get(session_id)
        return lease is not None and entry is not None and entry[0] is lease

    def held_here(self, session_id: str) -> bool:
        """Whether this store instance holds a lease on `session_id`."""
        return session_id in self._held

    def _release(self, lease: Lease) -> None:
        with self._mutex:
            entry = self._held.get(lease.session_id)
            if entry is None or entry[0] is not lease:
                return
            del self._held[lease.session_id]
            if entry[1] is not None:
                os.close(entry[1])  # closing the descriptor drops the flock

    def release_all(self) -> None:
        for lease, _fd in tuple(self._held.values()):
            lease.release()

    @contextmanager
    def writer_right(self, session_id: str, lease: Lease | None) -> Iterator[bool]:
        """Whether the caller may write `session_id` now: its own live `lease`, or a
        temporary one taken for the duration of the block (False if someone holds it)."""
        if lease is not None:
            if not self.holds(lease, session_id):
                raise ValueError(f"{lease!r} is not a live lease of this store for {session_id!r}")
            yield True
            return
        temporary = self.try_claim(session_id)
        try:
            yield temporary is not None
        finally:
            if temporary is not None:
                temporary.release()


@contextmanager
def write_guard(leases: LeaseTable, session_ids: Iterable[str]) -> Iterator[None]:
    """Hold every session's writer right for a write: this store's own lease, or a
    temporary one; SessionBusy if another writer (process or store instance) holds it."""
    with ExitStack() as stack:
        for session_id in session_ids:
            if leases.held_here(session_id):
                continue
            if not stack.enter_context(leases.writer_right(session_id, None)):
                raise busy_error(session_id, "; refusing to append without its lease")
        yield


def check_continues(session_id: str, events: Sequence[SessionEvent], next_seq: int) -> None:
    """Appended seqs must continue the stored tail exactly (no gap, no overlap)."""
    for offset, event in enumerate(events):
        if event.seq != next_seq + offset:
            raise SessionValidationError(
                event.seq,
                f"session {session_id!r}: seq {event.seq} does not continue the stored tail "
                f"(expected seq {next_seq + offset}); another writer may own this session",
            )


def parent_of(meta: SessionMeta, seen: frozenset[str], where: str) -> str:
    """The fork parent to read next; a stored lineage that names an invalid id or loops back
    is corruption, never a path outside the store or an endless walk."""
    parent = meta.parent_session
    assert parent is not None
    try:
        check_session_id(parent)
    except InvalidSessionId as exc:
        raise SessionCorruptError(where, f"fork parent id is invalid: {exc}") from None
    if parent in seen or parent == meta.id:
        raise SessionCorruptError(where, f"fork lineage loops back to {parent!r}")
    return parent


def validate_stored(
    meta: SessionMeta, events: Sequence[SessionEvent], locate: Callable[[int], str]
) -> Session:
    """Replay a stored log through every append rule; a rule broken is corruption, and
    `locate(seq)` names where."""
    try:
        return Session.from_events(meta.id, events, meta)
    except SessionValidationError as exc:
        raise SessionCorruptError(locate(exc.seq), exc.rule) from exc


def plan_repair(
    meta: SessionMeta, events: Sequence[SessionEvent], locate: Callable[[int], str]
) -> tuple[SessionEvent, ...]:
    """Validate a stored log and return the closers for an open last turn (maybe none)."""
    session = validate_stored(meta, events, locate)
    fixes = closers(events)
    for event in fixes:
        session.append_event(event)
    return fixes


def refuse_live_repair(session_id: str, what: str) -> SessionBusy:
    return busy_error(
        session_id, f": live turn is open ({what}); refusing to repair it from a second loader"
    )


def open_store(url: str, *, synchronous: Synchronous = "NORMAL") -> Store:
    """A store for `url`: `memory:`, `sqlite:PATH[?synchronous=NORMAL|FULL]` or `jsonl:DIR`.

    A `synchronous` given in the URL wins over the keyword.
    """
    from actorloop.runtime.stores.jsonl import JsonlStore
    from actorloop.runtime.stores.memory import MemoryStore
    from actorloop.runtime.stores.sqlite import SqliteStore

    if not isinstance(url, str):
        raise StoreUrlError(f"store URL must be a str, got {type(url).__name__}")
    scheme, sep, rest = url.partition(":")
    if scheme == "memory" and sep and not rest:
        return MemoryStore()
    if scheme == "sqlite" and rest:
        path, _, query = rest.partition("?")
        mode: str = synchronous
        if query:
            key, eq, value = query.partition("=")
            if key != "synchronous" or not eq:
                raise StoreUrlError(f"store URL {url!r}: the only option is ?synchronous=")
            mode = value
        if not path:
            raise StoreUrlError(
                f"store URL {url!r} names no database file; accepted: {ACCEPTED_URLS}"
            )
        return SqliteStore(path, synchronous=mode)
    if scheme == "jsonl" and rest:
        return JsonlStore(rest)
    raise StoreUrlError(f"unknown store URL {url!r}; accepted: {ACCEPTED_URLS}")
