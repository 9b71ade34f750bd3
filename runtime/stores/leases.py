"""Writer leases (one live writer per session, across processes) and the locks behind them.

Two locks back a lease, both released by the kernel when the holder dies (even by kill -9):

* `FlockFiles`: an exclusive `flock` on a per-session lock file (the JSONL store keeps it in
  the session's directory, which every path to the store reaches).
* `RangeLocks`: an open-file-description (OFD) byte-range lock in one of `LEASE_FILES` lock
  files beside the database, chosen and placed by a hash of the session id. The kernel
  walks one list of locks per file on every lock and unlock, so spreading the leases keeps
  each list short. The database file itself carries the *path binding*
  (`FileIdentity.bind`): a read lock per path the database is open through, so a second
  path (a hard link, for which SQLite keeps a second WAL, and its lock files) is refused
  while the first is open. The lock files are named after the path the binding admits.
  The binding also keeps builds of schema <= 2 (leases on the database file) out while
  this one has it open, and the other way round.

One descriptor per file identity is kept per process (`FileIdentity`) and closed only when
the last store using it has closed its SQLite connection: closing any descriptor of a file
drops every POSIX lock the process holds on it, SQLite's included.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import struct
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import ClassVar, Protocol

from ..errors import SessionBusy, StoreError

OFD_LOCKS = hasattr(fcntl, "F_OFD_SETLK")
"""Whether this platform has OFD locks (Linux >= 3.15); elsewhere SQLite falls back to lock
files beside the resolved database path (symlinks share them, hard links do not)."""

LEASE_FILES = 16
"""Lock files the leases of one database are spread over (persistence.md §5): each kernel
list then holds about 1/16 of them, at the cost of at most 16 descriptors per database."""

_LEASE_BASE = 1 << 62
_SLOTS = 1 << 60
_PATH_BASE = _LEASE_BASE + _SLOTS
"""Path bindings on the database file (schema 3): below the ranges older builds lock."""
_OLDER_PATH_BASE = _LEASE_BASE + (1 << 61)
"""Where builds of schema <= 2 bind paths on the database file ([base, base + _SLOTS));
their leases are at [_LEASE_BASE, _LEASE_BASE + _SLOTS)."""
_SCHEMA_3_MARK = _OLDER_PATH_BASE + _SLOTS - 1
"""The byte every process of this build read-locks while it has the database open: to a
build of schema <= 2 it is another path's binding."""
_OLDER_BUILDS_LOCK = ((_LEASE_BASE, _SLOTS), (_OLDER_PATH_BASE, _SLOTS - 1))
"""Where a lock means a build of schema <= 2 has the database open (the mark excluded)."""
_FLOCK = struct.Struct("hhqqi4x")
"""`struct flock` on Linux: l_type, l_whence, l_start, l_len, l_pid (+ padding)."""


def busy_error(session_id: str, detail: str = "") -> SessionBusy:
    return SessionBusy(f"session {session_id!r} is owned by a live writer{detail}")


class Lease:
    """Proof that its holder is the single writer of one session until `release()`."""

    # The table and the lock token are held here (not a bound release method and a table
    # entry per lease): every live agent holds a lease.
    __slots__ = ("_table", "_token", "session_id")

    def __init__(self, session_id: str, table: LeaseTable, token: object) -> None:
        self.session_id = session_id
        self._table: LeaseTable | None = table
        self._token = token

    @property
    def held(self) -> bool:
        """Whether this lease is still held (not released)."""
        return self._table is not None

    def release(self) -> None:
        """Give the session up (idempotent)."""
        table, self._table = self._table, None
        if table is not None:
            table._release(self)

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"Lease({self.session_id!r}, held={self.held})"


class Locker(Protocol):
    """The inter-process lock behind each lease of a `LeaseTable`."""

    def acquire(self, session_id: str) -> object | None:
        """A token for the lock, or None if another holder has it."""

    def release(self, session_id: str, token: object) -> None: ...


class FlockFiles:
    """An exclusive flock on `lock_path(session_id)` per lease (the descriptor is the token)."""

    def __init__(self, lock_path: Callable[[str], Path]) -> None:
        self._lock_path = lock_path

    def acquire(self, session_id: str) -> object | None:
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
        return fd

    def release(self, session_id: str, token: object) -> None:
        assert isinstance(token, int)
        os.close(token)  # closing the descriptor drops the flock


def _slot(base: int, key: str) -> int:
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return base + int.from_bytes(digest, "big") % _SLOTS


def _lease_hash(session_id: str) -> int:
    """A 64-bit hash of the session id: its top 4 bits pick the lease lock file, its low 60
    bits the byte (`lease_place`). An int, so a held lease's key is no tracked object."""
    return int.from_bytes(hashlib.blake2b(session_id.encode(), digest_size=8).digest(), "big")


def _place(value: int) -> tuple[int, int]:
    """The lock file and the byte of it that a lease hash names."""
    return value >> 60, _LEASE_BASE + (value & (_SLOTS - 1))


def lease_place(session_id: str) -> tuple[int, int]:
    """Which lock file and which byte of it hold the session's lease: the same in every
    process (persistence.md §5)."""
    return _place(_lease_hash(session_id))


def _range_lock(fd: int, kind: int, start: int, length: int = 1) -> bool:
    """Set (or clear, with F_UNLCK) an OFD lock; False if another description holds it."""
    try:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _FLOCK.pack(kind, os.SEEK_SET, start, length, 0))
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


def _range_free(fd: int, start: int, length: int) -> bool:
    """Whether no other open file description holds any lock in the range."""
    probe = _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, start, length, 0)
    answer = fcntl.fcntl(fd, fcntl.F_OFD_GETLK, probe)
    return _FLOCK.unpack(answer)[0] == fcntl.F_UNLCK


class FileIdentity:
    """This process's one descriptor on a file, keyed by device + inode, with the leases and
    path bindings that process holds on it. Get it with `FileIdentity.open(path)`."""

    _registry: ClassVar[dict[tuple[int, int], FileIdentity]] = {}
    _registry_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, key: tuple[int, int], fd: int, path: Path) -> None:
        self.key = key
        self.fd = fd
        self.users = 0
        self.paths: Counter[str] = Counter()
        self.leased: set[int] = set()
        """The hashes of the leases this process holds in the lease lock files."""
        self.mutex = threading.Lock()
        self.lease_dir = path.with_name(path.name + ".leases")
        """Where the lease lock files are: beside the path the file was first opened by
        (a second path is refused while this one is bound)."""
        self._lease_fds: list[int | None] = [None] * LEASE_FILES

    @classmethod
    def open(cls, path: Path) -> FileIdentity:
        """The identity of the file at `path` (created empty if missing), one more user."""
        with cls._registry_lock:
            try:
                stat = os.stat(path)
            except FileNotFoundError:
                stat = None
            except OSError as exc:
                raise StoreError(f"cannot open {path}: {exc}") from exc
            identity = None if stat is None else cls._registry.get((stat.st_dev, stat.st_ino))
            if identity is None:
                # Opened only when no descriptor of this file is registered: a second one
                # could never be closed without dropping the process's POSIX locks on it.
                try:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
                except OSError as exc:
                    raise StoreError(f"cannot open {path}: {exc}") from exc
                opened = os.fstat(fd)
                key = (opened.st_dev, opened.st_ino)
                identity = cls._registry[key] = cls(key, fd, path)
            identity.users += 1
        return identity

    def close(self) -> None:
        """One user fewer; the last one closes the descriptor (after its SQLite connection)."""
        with self._registry_lock:
            self.users -= 1
            if self.users:
                return
            del self._registry[self.key]
        for fd in self._lease_fds:
            if fd is not None:
                os.close(fd)
        os.close(self.fd)

    def lease_fd(self, shard: int) -> int:
        """The descriptor of lease lock file `shard` (opened on first use), under `mutex`."""
        fd = self._lease_fds[shard]
        if fd is None:
            path = self.lease_dir / f"{shard:02x}"
            try:
                self.lease_dir.mkdir(exist_ok=True)
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as exc:
                raise StoreError(f"cannot open lease lock file {path}: {exc}") from exc
            self._lease_fds[shard] = fd
        return fd

    def bind(self, name: str) -> None:
        """Record that the file is open through path `name`; StoreError if this or another
        process has it open through a different path (a hard link)."""
        slot = _slot(_PATH_BASE, name)
        with self.mutex:
            others = [path for path in self.paths if path != name]
            if others:
                raise _alias_error(name, f"this process has it open as {others[0]}")
            if not self.paths[name]:
                # Read locks never conflict with each other: every process open through
                # this path holds one; a probe for any lock on another path's slot finds
                # the processes open through other paths.
                held = _range_lock(self.fd, fcntl.F_RDLCK, slot)
                below = _range_free(self.fd, _PATH_BASE, slot - _PATH_BASE)
                above = _range_free(self.fd, slot + 1, _PATH_BASE + _SLOTS - slot - 1)
                if not (held and below and above):
                    _range_lock(self.fd, fcntl.F_UNLCK, slot)
                    raise _alias_error(name, "another process has it open through another path")
                self._exclude_older_builds(name, slot)
            self.paths[name] += 1

    def _exclude_older_builds(self, name: str, slot: int) -> None:
        """Keep builds of schema <= 2 (which lock leases on this file, where this build does
        not look) and this one from having the file open at the same time, in the same
        lock-then-probe way as the path binding, so that of two opening at once at least
        one sees the other: a read lock at `_SCHEMA_3_MARK`, inside the range where those
        builds bind paths (any of them binding later finds it and refuses, as a second
        path), then a probe for any of their locks (a path binding, a lease)."""
        marked = _range_lock(self.fd, fcntl.F_RDLCK, _SCHEMA_3_MARK)
        free = marked and all(
            _range_free(self.fd, start, length) for start, length in _OLDER_BUILDS_LOCK
        )
        if not free:
            _range_lock(self.fd, fcntl.F_UNLCK, _SCHEMA_3_MARK)
            _range_lock(self.fd, fcntl.F_UNLCK, slot)
            raise StoreError(
                f"sqlite {name}: an older actorloop build (database schema 2 or below) has "
                "this database open, and it locks writer leases elsewhere; close it, then "
                "open the database with this build (which migrates it to schema 3)"
            )

    def unbind(self, name: str) -> None:
        with self.mutex:
            self.paths[name] -= 1
            if self.paths[name] <= 0:
                del self.paths[name]
                _range_lock(self.fd, fcntl.F_UNLCK, _slot(_PATH_BASE, name))
                _range_lock(self.fd, fcntl.F_UNLCK, _SCHEMA_3_MARK)


def _alias_error(name: str, detail: str) -> StoreError:
    return StoreError(
        f"sqlite {name}: the database file is in use through another path ({detail}); "
        "SQLite keeps its WAL beside each path, so two names for one database would corrupt "
        "it. Open it through one path."
    )


class RangeLocks:
    """Leases as OFD byte-range locks in the lease lock files of a database's identity (the
    token: the lease's hash, `_lease_hash`)."""

    def __init__(self, identity: Callable[[], FileIdentity]) -> None:
        self._identity = identity
        self._file: FileIdentity | None = None
        """The identity the first claim got (a store's never changes): a release needs it
        after the store has closed its connection."""

    def acquire(self, session_id: str) -> object | None:
        identity = self._file = self._identity()
        value = _lease_hash(session_id)
        with identity.mutex:
            # Another store instance of this process shares the descriptors, and locks of
            # one description never conflict with each other: check in-process holders.
            if value in identity.leased:
                return None
            shard, byte = _place(value)
            if not _range_lock(identity.lease_fd(shard), fcntl.F_WRLCK, byte):
                return None
            identity.leased.add(value)
        return value

    def release(self, session_id: str, token: object) -> None:
        assert isinstance(token, int) and self._file is not None
        identity = self._file
        with identity.mutex:
            if token in identity.leased:
                identity.leased.remove(token)
                shard, byte = _place(token)
                _range_lock(identity.lease_fd(shard), fcntl.F_UNLCK, byte)


class LeaseTable:
    """The writer leases one store instance holds, each backed by `locker` (which excludes
    other processes and other store instances); without one (memory store) leases are
    in-process only."""

    def __init__(self, locker: Locker | None = None) -> None:
        self._locker = locker
        self._held: dict[str, Lease] = {}
        # Stores check leases from worker threads while `claim` runs on the trio thread.
        self._mutex = threading.Lock()

    def claim(self, session_id: str) -> Lease:
        lease = self.try_claim(session_id)
        if lease is None:
            raise busy_error(session_id, " (its writer lease is held); refusing a second writer")
        return lease

    def try_claim(self, session_id: str) -> Lease | None:
        with self._mutex:
            if session_id in self._held:
                return None
            token: object = None
            if self._locker is not None:
                token = self._locker.acquire(session_id)
                if token is None:
                    return None
            lease = self._held[session_id] = Lease(session_id, self, token)
            return lease

    def holds(self, lease: Lease | None, session_id: str) -> bool:
        return lease is not None and self._held.get(session_id) is lease

    def lease_of(self, session_id: str) -> Lease | None:
        """The lease this store instance holds on `session_id`, if any."""
        return self._held.get(session_id)

    def held_here(self, session_id: str) -> bool:
        """Whether this store instance holds a lease on `session_id`."""
        return session_id in self._held

    def _release(self, lease: Lease) -> None:
        with self._mutex:
            if self._held.get(lease.session_id) is not lease:
                return
            del self._held[lease.session_id]
            if self._locker is not None:
                self._locker.release(lease.session_id, lease._token)

    def release_all(self) -> None:
        for lease in tuple(self._held.values()):
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
