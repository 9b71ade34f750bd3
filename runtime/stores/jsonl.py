"""`JsonlStore` (`jsonl:DIR`): one directory per session holding a checksummed JSONL log.

Layout: `DIR/<id>/log.jsonl` (line 1 the meta record, then one event per line, framing in
`actorloop.codecs.jsonl`), `DIR/<id>/head` (the acknowledged head: bytes and events of the
log fsynced before a barrier returned, rewritten in place after each fsync) and
`DIR/<id>/lock` (the writer lease's flock). The log is born complete (temp file + fsync +
link, never overwriting); appends are written with O_APPEND, cut back on a failed write,
and fsynced on flush / group commit. The head is written only after the fsync it records,
so it never claims more than the disk holds: a log shorter than its head has lost
acknowledged events, which a load reports as corruption instead of cutting a "torn tail".
The file operations themselves are `jsonl_files`'.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from ...codecs.jsonl import (
    FIRST_EVENT_LINE,
    LogScan,
    event_line,
    find_event_line,
    read_meta,
    scan_log,
)
from ...codecs.rows import check_version
from ..control.collector import gc_paused
from ..errors import (
    ErrorCode,
    GroupCommitError,
    InvalidSessionId,
    SessionCorruptError,
    SessionError,
    SessionExists,
    SessionForkError,
    SessionFormatUnsupported,
    SessionNotFound,
    StoreError,
)
from ..log.session import SessionMeta
from ..model.events import SessionEvent, TurnEnd
from ..model.meta import DamagedSession
from .base import (
    Batch,
    Failures,
    Listing,
    Loaded,
    check_continues,
    parent_of,
    plan_repair,
    raise_failures,
    refuse_live_repair,
    sole_failure,
    validate_stored,
    write_rights,
)
from .ids import check_session_id
from .jsonl_files import (
    HEAD_NAME,
    LOCK_NAME,
    LOG_NAME,
    Tail,
    create_log,
    fsync_path,
    mapped_log,
    read_head_file,
    repair_log,
    write_all,
    write_head,
)
from .leases import FlockFiles, Lease, LeaseTable, busy_error
from .writer import WriterThread

T = TypeVar("T")


class JsonlStore:
    """A `Store` of one directory per session under `root`: an append-only `log.jsonl` (a
    meta line, one event per line) and its head record; fsync group commits
    (persistence.md §6)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.url = f"jsonl:{self.root}"
        self._leases = LeaseTable(FlockFiles(lambda session_id: self.root / session_id / LOCK_NAME))
        self._lock = threading.Lock()
        self._tails: dict[str, Tail] = {}
        self._broken: dict[str, str] = {}
        self._closed = False
        self._writer = WriterThread(self, f"jsonl store {self.root}")

    # plumbing -------------------------------------------------------------------------

    def _log_path(self, session_id: str) -> Path:
        return self.root / session_id / LOG_NAME

    def _head_path(self, session_id: str) -> Path:
        return self.root / session_id / HEAD_NAME

    def _locked(self, work: Callable[[], T]) -> T:
        with self._lock:
            if self._closed:
                raise StoreError(f"jsonl store {self.root} is closed")
            try:
                return work()
            except OSError as exc:
                raise StoreError(f"jsonl store {self.root}: {exc}") from exc

    async def _in_thread(self, work: Callable[[], T]) -> T:
        return await self._writer.run(lambda: self._locked(work))

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
        acked = read_head_file(self._head_path(session_id))
        return scan_log(data, name, first_seq=meta.seed_length or 0, acked=acked)

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

    def _tail(self, session_id: str) -> Tail:
        """The log's tail, rescanned if the file is not the size this store left it at."""
        tail = self._tails.get(session_id)
        if tail is not None and os.stat(tail.log).st_size != tail.size:
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
            tail = self._tails[session_id] = Tail(
                self.root / session_id, scan.intact_bytes, first + len(scan.events)
            )
        return tail

    def _create(self, meta: SessionMeta) -> None:
        self._tails[meta.id] = create_log(self.root, meta)

    def _append_one(self, session_id: str, tail: Tail, count: int, data: bytes) -> None:
        path = tail.log
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
                write_all(fd, data)
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
        """Make the sessions' appends durable; raises the first failure (after recording
        the heads of the sessions fsynced before it)."""
        synced: list[str] = []
        try:
            for session_id in session_ids:
                if self._fsync_one(session_id):
                    synced.append(session_id)
        finally:
            for session_id in synced:
                self._record_head(session_id)

    def _fsync_one(self, session_id: str) -> bool:
        """Fsync one session's appends; whether there was anything to fsync."""
        broken = self._broken.get(session_id)
        if broken is not None:
            # A second fsync after a failed one can succeed although the data is gone:
            # the session stays failed until a load repairs it.
            raise StoreError(
                f"session {session_id!r} cannot be made durable: {broken}; load it to repair it"
            )
        tail = self._tails.get(session_id)
        if tail is None or not tail.dirty:
            return False
        try:
            fsync_path(tail.log)
        except OSError as exc:
            # After a failed fsync the kernel may have dropped the dirty pages: what was
            # written can no longer be trusted to be on disk.
            self._broken[session_id] = f"fsync failed ({exc})"
            raise StoreError(f"fsync of {tail.log} failed: {exc}") from exc
        tail.dirty = False
        return True

    def _record_head(self, session_id: str) -> None:
        try:
            write_head(self._tails[session_id])
        except OSError as exc:
            raise StoreError(
                f"{self._log_path(session_id)} is fsynced but its acknowledged head could not "
                f"be recorded: {exc}"
            ) from exc

    # the Store API --------------------------------------------------------------------

    async def create(self, meta: SessionMeta) -> None:
        check_session_id(meta.id)
        check_version(meta.version, f"session {meta.id!r}")
        await self._in_thread(lambda: self._create(meta))

    async def append(self, session_id: str, events: Sequence[SessionEvent]) -> None:
        try:
            await self._write(((session_id, events),), sync=False)
        except GroupCommitError as exc:
            raise sole_failure(exc) from None

    async def append_batch(self, batch: Batch) -> None:
        await self._write(batch, sync=True)

    async def _write(self, batch: Batch, *, sync: bool) -> None:
        failures: Failures = {}
        merged: dict[str, list[SessionEvent]] = {}
        for session_id, events in batch:
            try:
                check_session_id(session_id)
            except SessionError as exc:
                failures[session_id] = exc
                continue
            if events:
                merged.setdefault(session_id, []).extend(events)

        def run() -> None:
            # Encode outside the store lock; one buffer (one write) per session.
            data: dict[str, tuple[list[SessionEvent], bytes]] = {}
            for session_id, events in merged.items():
                try:
                    data[session_id] = (events, b"".join(event_line(e) for e in events))
                except Exception as exc:
                    failures[session_id] = exc
            self._locked(lambda: self._write_locked(data, failures, sync=sync))

        if merged:
            await self._writer.run(run)
        raise_failures(failures)

    def _write_locked(
        self,
        data: dict[str, tuple[list[SessionEvent], bytes]],
        failures: Failures,
        *,
        sync: bool,
    ) -> None:
        """Write each session on its own: a session that cannot be written (broken, damaged
        tail, held by another writer, tail check, I/O on its file) is recorded in `failures`
        and leaves its file as it was; the others are written and, with `sync`, fsynced."""

        def isolated(session_id: str, work: Callable[[str], object]) -> bool:
            try:
                work(session_id)
            except OSError as exc:
                failures[session_id] = StoreError(f"jsonl store {self.root}: {exc}")
                failures[session_id].__cause__ = exc
            except Exception as exc:
                failures[session_id] = exc
            else:
                return True
            return False

        def check(session_id: str) -> None:
            if session_id in self._broken:
                raise StoreError(f"session {session_id!r} is unusable: {self._broken[session_id]}")
            check_continues(session_id, data[session_id][0], self._tail(session_id).next_seq)

        def append(session_id: str) -> None:
            events, lines = data[session_id]
            self._append_one(session_id, self._tails[session_id], len(events), lines)

        ready = [session_id for session_id in data if isolated(session_id, check)]
        with write_rights(self._leases, ready) as refused:
            failures.update(refused)
            allowed = [session_id for session_id in ready if session_id not in refused]
            written = [session_id for session_id in allowed if isolated(session_id, append)]
            if sync:
                # Every fsync first, then the heads: a head written between two fsyncs
                # would make the next one commit its metadata too.
                synced = [sid for sid in written if isolated(sid, self._fsync_one)]
                for session_id in synced:
                    isolated(session_id, self._record_head)

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

        with gc_paused():  # every caller's load pauses the collector (control/collector.py)
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
            size = repair_log(path, scan, fixes)
            self._broken.pop(session_id, None)
        previous = self._tails.get(session_id)
        tail = self._tails[session_id] = Tail(path.parent, size, len(events) + len(fixes))
        if scan.torn is not None or fixes:
            write_head(tail)  # the repair was fsynced
        # A load must not forget appends this instance has not fsynced yet: the next flush
        # still owes them an fsync (a repair above fsynced everything it wrote).
        tail.dirty = previous is not None and previous.dirty and not (scan.torn or fixes)
        return meta, (*events, *fixes)

    async def exists(self, session_id: str) -> bool:
        check_session_id(session_id)
        return await self._in_thread(self._log_path(session_id).exists)

    def _session_dirs(self) -> list[str]:
        """The ids of the session directories under the root (others are not sessions)."""
        if not self.root.is_dir():
            return []
        ids = []
        for entry in self.root.iterdir():
            try:
                check_session_id(entry.name)
            except InvalidSessionId:
                continue  # not a session directory (e.g. a temp or foreign file)
            if (entry / LOG_NAME).is_file():
                ids.append(entry.name)  # a directory without a log was claimed, never created
        return sorted(ids)

    async def list(self) -> Listing:
        def run() -> Listing:
            metas: list[SessionMeta] = []
            damaged: list[DamagedSession] = []
            for session_id in self._session_dirs():
                path = self._log_path(session_id)
                try:
                    with path.open("rb") as file:
                        first_line = file.readline()
                    meta = read_meta(first_line, str(path))
                    if meta.id != session_id:
                        raise SessionCorruptError(f"{path}:1", f"meta names session {meta.id!r}")
                except (SessionCorruptError, SessionFormatUnsupported) as exc:
                    damaged.append(DamagedSession(session_id, str(exc)))
                    continue
                except FileNotFoundError:
                    continue  # removed while listing
                metas.append(meta)
            ordered = sorted(metas, key=lambda meta: (meta.created_at, meta.id))
            return (*ordered, *damaged)

        return await self._in_thread(run)

    async def check_integrity(self) -> tuple[str, ...]:
        """Every session's log and head read in full (and its fork seed): damage, and torn
        tails a load would cut, are reported; nothing is changed."""

        def run() -> tuple[str, ...]:
            problems: list[str] = []
            for session_id in self._session_dirs():
                try:
                    scan = self._scan(session_id, self._read(session_id))
                    self._load(session_id, may_write=False, repair=False)
                except (SessionError, StoreError) as exc:
                    problems.append(str(exc))
                    continue
                if scan.torn is not None:
                    problems.append(
                        f"{self._log_path(session_id)}:{scan.torn.line}: torn tail "
                        f"({scan.torn.problem}, {scan.torn.dropped_bytes} bytes never "
                        "acknowledged); the next load cuts it"
                    )
            return tuple(problems)

        return await self._in_thread(run)

    async def fork(self, parent_id: str, boundary: int, child_id: str) -> SessionMeta:
        check_session_id(parent_id)
        check_session_id(child_id)
        valid = not isinstance(boundary, bool) and isinstance(boundary, int) and boundary >= 0

        def run() -> SessionMeta:
            if not self._log_path(parent_id).exists():
                raise SessionForkError(
                    ErrorCode.SESSION_NOT_FOUND, f"parent {parent_id!r} not found"
                )
            if self._log_path(child_id).exists():
                raise SessionForkError(
                    ErrorCode.SESSION_ALREADY_EXISTS, f"session {child_id!r} exists"
                )
            if not valid:
                raise SessionForkError.not_a_seq(parent_id, boundary)
            owner = parent_id
            seen: frozenset[str] = frozenset()
            while True:  # up the fork chain to the log that stores seq `boundary`
                with mapped_log(self._log_path(owner), owner) as data:
                    name = str(self._log_path(owner))
                    meta = read_meta(data, name)
                    first = meta.seed_length or 0
                    if meta.parent_session is None or boundary >= first:
                        event = find_event_line(data, name, boundary, first)
                        break
                seen = seen | {owner}
                owner = parent_of(meta, seen, name)
            if event is None:
                raise SessionForkError.not_a_seq(parent_id, boundary)
            if not isinstance(event.data, TurnEnd):
                raise SessionForkError.inside_a_turn(parent_id, boundary, event.type)
            child = SessionMeta(child_id, parent_session=parent_id, seed_length=boundary + 1)
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
            if not self._writer.closed:
                try:
                    await self._writer.run(run)
                finally:
                    await self._writer.close()
        finally:
            self._leases.release_all()
