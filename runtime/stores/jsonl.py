"""`JsonlStore` (`jsonl:DIR`): one directory per session holding a checksummed JSONL log.

Layout: `DIR/<id>/log.jsonl` (line 1 the meta record, then one event per line, framing in
`actorloop.codecs.jsonl`) and `DIR/<id>/lock` (the writer lease's flock). The log is born
complete (temp file + fsync + link, never overwriting); appends are written with O_APPEND,
cut back on a failed write, and fsynced on flush / group commit.
"""

from __future__ import annotations

import logging
import mmap
import os
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import trio

from actorloop.codecs.jsonl import (
    FIRST_EVENT_LINE,
    LogBuffer,
    LogScan,
    event_line,
    find_event_line,
    meta_line,
    read_meta,
    scan_log,
)
from actorloop.codecs.rows import check_version
from actorloop.runtime.errors import (
    ErrorCode,
    InvalidSessionId,
    SessionCorruptError,
    SessionExists,
    SessionForkError,
    SessionNotFound,
    StoreError,
)
from actorloop.runtime.events import SessionEvent, TurnEnd
from actorloop.runtime.session import SessionMeta
from actorloop.runtime.stores.base import (
    Batch,
    Lease,
    LeaseTable,
    Loaded,
    busy_error,
    check_continues,
    parent_of,
    plan_repair,
    refuse_live_repair,
    validate_stored,
    write_guard,
)
from actorloop.runtime.stores.ids import check_session_id

log = logging.getLogger("actorloop.stores.jsonl")

T = TypeVar("T")

LOG_NAME = "log.jsonl"
LOCK_NAME = "lock"


class _Tail:
    """What this store last saw of a log it writes: its size and the next seq."""

    __slots__ = ("dirty", "next_seq", "size")

    def __init__(self, size: int, next_seq: int) -> None:
        self.size = size
        self.next_seq = next_seq
        self.dirty = False


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _fsync_path(path: Path, flags: int = os.O_RDONLY) -> None:
    fd = os.open(path, flags | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class JsonlStore:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.url = f"jsonl:{self.root}"
        self._leases = LeaseTable(lambda session_id: self.root / session_id / LOCK_NAME)
        self._lock = threading.Lock()
        self._tails: dict[str, _Tail] = {}
        self._broken: dict[str, str] = {}
        self._closed = False

    # plumbing -------------------------------------------------------------------------

    def _log_path(self, session_id: str) -> Path:
        return self.root / session_id / LOG_NAME

    def _locked(self, work: Callable[[], T]) -> T:
        with self._lock:
            if self._closed:
                raise StoreError(f"jsonl store {self.root} is closed")
            try:
                return work()
            except OSError as exc:
                raise StoreError(f"jsonl store {self.root}: {exc}") from exc

    async def _in_thread(self, work: Callable[[], T]) -> T:
        return await trio.to_thread.run_sync(self._locked, work)

    @contextmanager
    def _mapped(self, session_id: str) -> Iterator[LogBuffer]:
        """The log mapped read-only: a fork probes a few lines without reading the file."""
        try:
            file = self._log_path(session_id).open("rb")
        except FileNotFoundError:
            raise SessionNotFound(session_id) from None
        with file:
            if os.fstat(file.fileno()).st_size == 0:
                yield b""
                return
            with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                yield mapped

    def _read(self, session_id: str) -> bytes:
        try:
            return self._log_path(session_id).read_bytes()
        except FileNotFoundError:
            raise SessionNotFound(session_id) from None

    def _scan(self, session_id: str, data: bytes) -> LogScan:
        name = str(self._log_path(session_id))
        meta = read_meta(data, name)
        if meta.id != session_id:
            raise SessionCorruptError(f"{name}:1", f"meta names session {meta.id!r}")
        return scan_log(data, name, first_seq=meta.seed_length or 0)

    def _seed(
        self, parent_id: str, length: int, child_log: str, seen: frozenset[str] = frozenset()
    ) -> list[SessionEvent]:
        """The first `length` events of a fork parent, following its own parents."""
        try:
            data = self._read(parent_id)
        except SessionNotFound:
            raise SessionCorruptError(
                f"{child_log}:1", f"fork parent {parent_id!r} is missing"
            ) from None
        name = str(self._log_path(parent_id))
        meta = read_meta(data, name)
        first = meta.seed_length or 0
        events: list[SessionEvent] = []
        if meta.parent_session is not None:
            grandparent = parent_of(meta, seen | {parent_id}, name)
            events = self._seed(grandparent, min(length, first), name, seen | {parent_id})
        if length > first:
            events.extend(scan_log(data, name, first_seq=first, limit=length - first).events)
        return events

    def _tail(self, session_id: str) -> _Tail:
        """The log's tail, rescanned if the file is not the size this store left it at."""
        tail = self._tails.get(session_id)
        if tail is not None and self._log_path(session_id).stat().st_size != tail.size:
            self._tails.pop(session_id)
            dirty, tail = tail.dirty, self._tail(session_id)
            tail.dirty = dirty
        if tail is None:
            scan = self._scan(session_id, self._read(session_id))
            if scan.torn is not None:
                raise StoreError(
                    f"{self._log_path(session_id)} has a torn tail at line {scan.torn.line} "
                    f"({scan.torn.problem}); load the session to repair it before appending"
                )
            first = scan.meta.seed_length or 0
            tail = self._tails[session_id] = _Tail(scan.intact_bytes, first + len(scan.events))
        return tail

    def _create(self, meta: SessionMeta) -> None:
        directory = self.root / meta.id
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / LOG_NAME
        if path.exists():
            raise SessionExists(meta.id)
        line = meta_line(meta)
        temp = directory / f".{LOG_NAME}.{uuid.uuid4().hex}.tmp"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            try:
                _write_all(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)
            # link() never replaces an existing name: a concurrent creator makes this fail.
            try:
                os.link(temp, path)
            except FileExistsError:
                raise SessionExists(meta.id) from None
        finally:
            temp.unlink(missing_ok=True)
        _fsync_path(directory)
        _fsync_path(self.root)
        self._tails[meta.id] = _Tail(len(line), meta.seed_length or 0)

    def _append_one(self, session_id: str, tail: _Tail, count: int, data: bytes) -> None:
        path = self._log_path(session_id)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        try:
            size = os.fstat(fd).st_size
            if size != tail.size:
                del self._tails[session_id]
                raise busy_error(
                    session_id,
                    f": {path} changed under this store ({size} bytes, expected "
                    f"{tail.size}); another writer appended",
                )
            try:
                _write_all(fd, data)
            except OSError as exc:
                try:
                    os.ftruncate(fd, tail.size)
                except OSError as undo:
                    self._broken[session_id] = f"a failed write could not be cut back ({undo})"
                    raise StoreError(
                        f"write to {path} failed ({exc}) and cutting it back failed ({undo}); "
                        "load the session to repair it"
                    ) from exc
                raise StoreError(
                    f"write to {path} failed ({exc}); cut back to {tail.size} bytes"
                ) from exc
        finally:
            os.close(fd)
        tail.size += len(data)
        tail.next_seq += count
        tail.dirty = True

    def _sync(self, session_ids: Sequence[str]) -> None:
        for session_id in session_ids:
            broken = self._broken.get(session_id)
            if broken is not None:
                # A second fsync after a failed one can succeed although the data is gone:
                # the session stays failed until a load repairs it.
                raise StoreError(
                    f"session {session_id!r} cannot be made durable: {broken}; load it to repair it"
                )
            tail = self._tails.get(session_id)
            if tail is None or not tail.dirty:
                continue
            try:
                _fsync_path(self._log_path(session_id))
            except OSError as exc:
                # After a failed fsync the kernel may have dropped the dirty pages: what was
                # written can no longer be trusted to be on disk.
                self._broken[session_id] = f"fsync failed ({exc})"
                raise StoreError(f"fsync of {self._log_path(session_id)} failed: {exc}") from exc
            tail.dirty = False

    # the Store API --------------------------------------------------------------------

    async def create(self, meta: SessionMeta) -> None:
        check_session_id(meta.id)
        check_version(meta.version, f"session {meta.id!r}")
        await self._in_thread(lambda: self._create(meta))

    async def append(self, session_id: str, events: Sequence[SessionEvent]) -> None:
        await self._write(((session_id, events),), sync=False)

    async def append_batch(self, batch: Batch) -> None:
        await self._write(batch, sync=True)

    async def _write(self, batch: Batch, *, sync: bool) -> None:
        for session_id, _events in batch:
            check_session_id(session_id)

        def run() -> None:
            # Encode outside the store lock; one buffer (one write) per session.
            lines: dict[str, list[bytes]] = {}
            counts: dict[str, list[Sequence[SessionEvent]]] = {}
            for session_id, events in batch:
                if events:
                    lines.setdefault(session_id, []).extend(event_line(e) for e in events)
                    counts.setdefault(session_id, []).append(events)
            self._locked(lambda: self._write_locked(lines, counts, sync=sync))

        await trio.to_thread.run_sync(run)

    def _write_locked(
        self,
        lines: dict[str, list[bytes]],
        parts: dict[str, list[Sequence[SessionEvent]]],
        *,
        sync: bool,
    ) -> None:
        # Check every session before writing any, so a refused batch writes nothing.
        for session_id in parts:
            if session_id in self._broken:
                raise StoreError(f"session {session_id!r} is unusable: {self._broken[session_id]}")
            self._tail(session_id)
        with write_guard(self._leases, parts):
            for session_id, chunks in parts.items():
                tail = self._tail(session_id)
                next_seq = tail.next_seq
                for events in chunks:
                    check_continues(session_id, events, next_seq)
                    next_seq += len(events)
            for session_id, chunks in parts.items():
                count = sum(len(events) for events in chunks)
                data = b"".join(lines[session_id])
                self._append_one(session_id, self._tails[session_id], count, data)
            if sync:
                self._sync(tuple(parts))

    async def flush(self, session_id: str | None = None) -> None:
        if session_id is not None:
            check_session_id(session_id)

        def run() -> None:
            if session_id is not None and not self._log_path(session_id).exists():
                raise SessionNotFound(session_id)
            self._sync(tuple(self._tails) if session_id is None else (session_id,))

        await self._in_thread(run)

    async def load(
        self, session_id: str, *, lease: Lease | None = None, repair: bool = True
    ) -> Loaded:
        check_session_id(session_id)

        def run() -> Loaded:
            if not repair:
                return self._load(session_id, may_write=False, repair=False)
            with self._leases.writer_right(session_id, lease) as may_write:
                return self._load(session_id, may_write)

        return await self._in_thread(run)

    def _load(self, session_id: str, may_write: bool, *, repair: bool = True) -> Loaded:
        path = self._log_path(session_id)
        scan = self._scan(session_id, self._read(session_id))
        meta = scan.meta
        first = meta.seed_length or 0
        events: list[SessionEvent] = []
        if meta.parent_session is not None:
            parent = parent_of(meta, frozenset({session_id}), f"{path}:1")
            events = self._seed(parent, first, str(path), frozenset({session_id}))
        events.extend(scan.events)

        def locate(seq: int) -> str:
            if seq < first:
                return f"{path} (seq {seq} of the shared fork seed)"
            return f"{path}:{seq - first + FIRST_EVENT_LINE}"

        if not repair:
            validate_stored(meta, events, locate)
            return meta, tuple(events)
        fixes = plan_repair(meta, events, locate)
        size = scan.intact_bytes
        if scan.torn is not None or fixes:
            if not may_write:
                what = "its log ends in an incomplete write" if scan.torn else "no turn/end"
                raise refuse_live_repair(session_id, what)
            size = self._repair(path, scan, fixes)
            self._broken.pop(session_id, None)
        previous = self._tails.get(session_id)
        tail = self._tails[session_id] = _Tail(size, len(events) + len(fixes))
        # A load must not forget appends this instance has not fsynced yet: the next flush
        # still owes them an fsync (a repair above fsynced everything it wrote).
        tail.dirty = previous is not None and previous.dirty and not (scan.torn or fixes)
        return meta, (*events, *fixes)

    def _repair(self, path: Path, scan: LogScan, fixes: Sequence[SessionEvent]) -> int:
        """Cut a torn tail, append the closers, fsync; returns the new size."""
        data = b"".join(event_line(event) for event in fixes)
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            if scan.torn is not None:
                torn = scan.torn
                log.warning(
                    "%s: cutting a torn tail at line %d (%s): %d line(s), %d byte(s)",
                    path,
                    torn.line,
                    torn.problem,
                    torn.dropped_lines,
                    torn.dropped_bytes,
                )
                os.ftruncate(fd, scan.intact_bytes)
            os.lseek(fd, scan.intact_bytes, os.SEEK_SET)
            try:
                _write_all(fd, data)
            except OSError:
                os.ftruncate(fd, scan.intact_bytes)
                raise
            os.fsync(fd)
        finally:
            os.close(fd)
        return scan.intact_bytes + len(data)

    async def exists(self, session_id: str) -> bool:
        check_session_id(session_id)
        return await self._in_thread(self._log_path(session_id).exists)

    async def list(self) -> tuple[SessionMeta, ...]:
        def run() -> tuple[SessionMeta, ...]:
            if not self.root.is_dir():
                return ()
            metas = []
            for entry in self.root.iterdir():
                try:
                    check_session_id(entry.name)
                except InvalidSessionId:
                    continue  # not a session directory (e.g. a temp or foreign file)
                path = entry / LOG_NAME
                try:
                    with path.open("rb") as file:
                        first_line = file.readline()
                except (FileNotFoundError, NotADirectoryError):
                    continue  # claimed but never created
                metas.append(read_meta(first_line, str(path)))
            return tuple(sorted(metas, key=lambda meta: (meta.created_at, meta.id)))

        return await self._in_thread(run)

    async def fork(self, parent_id: str, boundary: int, child_id: str) -> SessionMeta:
        check_session_id(parent_id)
        check_session_id(child_id)
        if isinstance(boundary, bool) or not isinstance(boundary, int) or boundary < 0:
            raise SessionForkError(
                ErrorCode.INVALID_BOUNDARY, f"boundary {boundary!r} is not a seq"
            )
        child = SessionMeta(child_id, parent_session=parent_id, seed_length=boundary + 1)

        def run() -> SessionMeta:
            if not self._log_path(parent_id).exists():
                raise SessionForkError(
                    ErrorCode.SESSION_NOT_FOUND, f"parent {parent_id!r} not found"
                )
            if self._log_path(child_id).exists():
                raise SessionForkError(
                    ErrorCode.SESSION_ALREADY_EXISTS, f"session {child_id!r} exists"
                )
            owner = parent_id
            seen: frozenset[str] = frozenset()
            while True:  # up the fork chain to the log that stores seq `boundary`
                with self._mapped(owner) as data:
                    name = str(self._log_path(owner))
                    meta = read_meta(data, name)
                    first = meta.seed_length or 0
                    if meta.parent_session is None or boundary >= first:
                        event = find_event_line(data, name, boundary, first)
                        break
                seen = seen | {owner}
                owner = parent_of(meta, seen, name)
            if event is None:
                raise SessionForkError(
                    ErrorCode.INVALID_BOUNDARY,
                    f"boundary {boundary} is not a stored seq of {parent_id!r}",
                )
            if not isinstance(event.data, TurnEnd):
                raise SessionForkError(
                    ErrorCode.INVALID_BOUNDARY,
                    f"boundary {boundary} is a {event.type}, not a turn/end",
                )
            try:
                self._create(child)
            except SessionExists:
                raise SessionForkError(
                    ErrorCode.SESSION_ALREADY_EXISTS, f"session {child_id!r} exists"
                ) from None
            return child

        return await self._in_thread(run)

    def claim(self, session_id: str) -> Lease:
        return self._leases.claim(check_session_id(session_id))

    async def close(self) -> None:
        def run() -> None:
            with self._lock:
                if self._closed:
                    return
                try:
                    self._sync(tuple(self._tails))
                finally:
                    self._closed = True

        try:
            await trio.to_thread.run_sync(run)
        finally:
            self._leases.release_all()
