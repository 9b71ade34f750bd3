"""One JSONL session's files on disk: the log born complete (temp file, fsync, link), whole
writes and fsyncs, the acknowledged-head record, the log mapped for a probe, and the repair
that cuts a torn tail and appends the closers."""

from __future__ import annotations

import logging
import mmap
import os
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from ...codecs.jsonl import (
    AckHead,
    LogBuffer,
    LogScan,
    event_line,
    head_record,
    meta_line,
    read_head,
)
from ..errors import SessionExists, SessionNotFound
from ..model.events import SessionEvent
from ..model.meta import SessionMeta

log = logging.getLogger("actorloop.stores.jsonl")

LOG_NAME = "log.jsonl"
HEAD_NAME = "head"
LOCK_NAME = "lock"


class Tail:
    """What this store last saw of a log it writes: its size and the next seq, and the
    paths of the log and its head record (kept as strings: the append path is hot)."""

    __slots__ = ("dirty", "head", "log", "next_seq", "size")

    def __init__(self, directory: Path, size: int, next_seq: int) -> None:
        self.log = os.path.join(directory, LOG_NAME)
        self.head = os.path.join(directory, HEAD_NAME)
        self.size = size
        self.next_seq = next_seq
        self.dirty = False


def write_all(fd: int, data: bytes) -> None:
    """Write all of `data` to `fd` (os.write may write less than it is given)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def fsync_path(path: Path | str, flags: int = os.O_RDONLY) -> None:
    """Fsync the file or directory at `path`."""
    fd = os.open(path, flags | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_head_file(path: Path) -> AckHead | None:
    """The acknowledged head recorded at `path`, None when there is none."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None  # a log no barrier was acknowledged on yet (or written before heads)
    return read_head(raw, str(path))


def write_head(tail: Tail) -> None:
    """Record the fsynced size as the acknowledged head (after the fsync, never before:
    the head must not claim what the disk may not hold)."""
    record = head_record(AckHead(tail.size, tail.next_seq))
    fd = os.open(tail.head, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        os.pwrite(fd, record, 0)
    finally:
        os.close(fd)


def create_log(root: Path, meta: SessionMeta) -> Tail:
    """The session's directory under `root` with its log born complete: its meta line
    written to a temp file, fsynced and linked in (never replacing one: `SessionExists`)."""
    directory = root / meta.id
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / LOG_NAME
    if path.exists():
        raise SessionExists(meta.id)
    line = meta_line(meta)
    temp = directory / f".{LOG_NAME}.{uuid.uuid4().hex}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        try:
            write_all(fd, line)
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
    fsync_path(directory)
    fsync_path(root)
    return Tail(directory, len(line), meta.seed_length or 0)


@contextmanager
def mapped_log(path: Path, session_id: str) -> Iterator[LogBuffer]:
    """The log mapped read-only: a fork probes a few lines without reading the file."""
    try:
        file = path.open("rb")
    except FileNotFoundError:
        raise SessionNotFound(session_id) from None
    with file:
        if os.fstat(file.fileno()).st_size == 0:
            yield b""
            return
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            yield mapped


def repair_log(path: Path, scan: LogScan, fixes: Sequence[SessionEvent]) -> int:
    """Cut a torn tail, append the closers, fsync; returns the new size."""
    data = b"".join(event_line(event) for event in fixes)
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        if scan.torn is not None:
            torn = scan.torn
            log.warning(
                "%s: cutting a torn tail at line %d (%s): %d byte(s) never acknowledged",
                path,
                torn.line,
                torn.problem,
                torn.dropped_bytes,
            )
            os.ftruncate(fd, scan.intact_bytes)
        os.lseek(fd, scan.intact_bytes, os.SEEK_SET)
        try:
            write_all(fd, data)
        except OSError:
            os.ftruncate(fd, scan.intact_bytes)
            raise
        os.fsync(fd)
    finally:
        os.close(fd)
    return scan.intact_bytes + len(data)
