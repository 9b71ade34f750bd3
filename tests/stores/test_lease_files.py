"""SQLite writer leases in lock files beside the database (schema 3, persistence.md §5): the
lock sits where every process looks, a second process is refused for sessions in every
lock file, kill -9 frees them all, and a schema-2 database migrates only when no older
build (which locks leases on the database file itself) has it open."""

from __future__ import annotations

import fcntl
import os
import sqlite3
import struct
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest
from helpers import kill_child, start_ready_child

from actorloop.runtime.errors import SessionBusy, StoreError
from actorloop.runtime.log.session import SessionMeta
from actorloop.runtime.stores import SqliteStore
from actorloop.runtime.stores.leases import LEASE_FILES, OFD_LOCKS, lease_place
from actorloop.runtime.stores.sqlite import SCHEMA_VERSION

pytestmark = pytest.mark.skipif(not OFD_LOCKS, reason="lease lock files are the OFD layout")

HOLDER = r"""
import sys
import trio
from actorloop.runtime.stores import SqliteStore


async def main(path: str, ids: str) -> None:
    store = SqliteStore(path)
    leases = [store.claim(session_id) for session_id in ids.split(",")]
    print("READY", flush=True)
    await trio.to_thread.run_sync(sys.stdin.readline)


trio.run(main, sys.argv[1], sys.argv[2])
"""

OLD_BUILD = r"""
import fcntl, os, struct, sys

# What a build of schema 2 holds while it has the database open and no lease: a read lock
# on its path's slot in [2**62 + 2**61, +2**60) (a lease would add a write lock in
# [2**62, +2**60)).
fd = os.open(sys.argv[1], os.O_RDWR)
start = 2**62 + 2**61 + 12345
fcntl.fcntl(fd, fcntl.F_OFD_SETLK, struct.pack("hhqqi4x", fcntl.F_RDLCK, os.SEEK_SET, start, 1, 0))
print("READY", flush=True)
sys.stdin.readline()
"""

OLD_BUILD_BINDS = r"""
import fcntl, hashlib, os, struct, sys

# A build of schema 2 binding the database's path (its leases.FileIdentity.bind): a read
# lock on its path's slot, then a probe for any other lock in its path range.
BASE, SLOTS = 2**62 + 2**61, 2**60
digest = hashlib.blake2b(sys.argv[2].encode(), digest_size=8).digest()
slot = BASE + int.from_bytes(digest, "big") % SLOTS
fd = os.open(sys.argv[1], os.O_RDWR)


def free(start, length):
    probe = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, start, length, 0)
    answer = fcntl.fcntl(fd, fcntl.F_OFD_GETLK, probe)
    return struct.unpack("hhqqi4x", answer)[0] == fcntl.F_UNLCK


try:
    fcntl.fcntl(fd, fcntl.F_OFD_SETLK, struct.pack("hhqqi4x", fcntl.F_RDLCK, 0, slot, 1, 0))
    held = True
except OSError:
    held = False
bound = held and free(BASE, slot - BASE) and free(slot + 1, BASE + SLOTS - slot - 1)
print("BOUND" if bound else "REFUSED")
"""


class Child:
    """A subprocess that prints READY once it holds its locks, until killed."""

    def __init__(self, script: str, *args: str) -> None:
        self.proc = start_ready_child(script, *args)

    def kill(self) -> None:
        kill_child(self.proc)


def ids_in_every_lease_file() -> list[str]:
    """Session ids covering each lease lock file at least once."""
    chosen: dict[int, str] = {}
    index = 0
    while len(chosen) < LEASE_FILES:
        chosen.setdefault(lease_place(f"s{index}")[0], f"s{index}")
        index += 1
    return sorted(chosen.values())


def locked_by_another(path: Path, offset: int) -> bool:
    fd = os.open(path, os.O_RDWR)
    try:
        probe = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, offset, 1, 0)
        answer = fcntl.fcntl(fd, fcntl.F_OFD_GETLK, probe)
        return struct.unpack("hhqqi4x", answer)[0] == fcntl.F_WRLCK
    finally:
        os.close(fd)


def as_schema_2(path: Path) -> None:
    """Stamp a database this build wrote as schema 2 (the same tables; leases elsewhere)."""
    with closing(sqlite3.connect(path, isolation_level=None)) as db:
        db.execute("PRAGMA user_version = 2")


async def test_another_process_is_refused_in_every_lease_file_until_kill_9(
    tmp_path: Path,
) -> None:
    path = tmp_path / "leases.db"
    ids = ids_in_every_lease_file()
    store = SqliteStore(path)
    await store.create(SessionMeta("first"))
    holder = Child(HOLDER, str(path), ",".join(ids))
    try:
        for session_id in ids:
            shard, offset = lease_place(session_id)
            # The lock is where every build of schema 3 looks for it.
            assert locked_by_another(path.with_name("leases.db.leases") / f"{shard:02x}", offset)
            with pytest.raises(SessionBusy):
                store.claim(session_id)
        with store.claim("free-session"):
            pass
    finally:
        holder.kill()
    # The kernel dropped every lock of the killed holder, in every file.
    leases = [store.claim(session_id) for session_id in ids]
    assert all(lease.held for lease in leases)
    await store.close()


async def _store_kept(path: Path) -> None:
    """A database at `path` holding the one session "kept", closed again."""
    store = SqliteStore(path)
    await store.create(SessionMeta("kept"))
    await store.close()


async def test_a_schema_2_database_is_migrated_and_keeps_its_sessions(tmp_path: Path) -> None:
    path = tmp_path / "v2.db"
    await _store_kept(path)
    as_schema_2(path)
    again = SqliteStore(path)
    try:
        assert [meta.id for meta in await again.list()] == ["kept"]
        with again.claim("kept"):
            pass
    finally:
        await again.close()
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3


async def test_migration_is_refused_while_an_older_build_has_the_database_open(
    tmp_path: Path,
) -> None:
    path = tmp_path / "shared.db"
    await _store_kept(path)
    as_schema_2(path)
    old = Child(OLD_BUILD, str(path))
    try:
        refused = SqliteStore(path)
        with pytest.raises(StoreError, match="an older actorloop build"):
            await refused.list()
        await refused.close()
        with closing(sqlite3.connect(path)) as db:
            assert db.execute("PRAGMA user_version").fetchone()[0] == 2  # nothing migrated
    finally:
        old.kill()
    after = SqliteStore(path)
    try:
        assert [meta.id for meta in await after.list()] == ["kept"]
    finally:
        await after.close()


async def test_an_older_build_cannot_bind_any_path_while_this_build_has_it_open(
    tmp_path: Path,
) -> None:
    # Through another path (a hard link) an older build would read the database past this
    # path's WAL and lease files, through this one it would not see the leases: it must
    # meet a path binding it understands, whatever path it comes by.
    path = tmp_path / "open.db"

    def old_build_binds(name: Path) -> str:
        done = subprocess.run(
            [sys.executable, "-c", OLD_BUILD_BINDS, str(path), str(name)],
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout.strip()

    store = SqliteStore(path)
    try:
        await store.create(SessionMeta("s1"))
        assert old_build_binds(tmp_path / "alias.db") == "REFUSED"
        assert old_build_binds(path.resolve()) == "REFUSED"
    finally:
        await store.close()
    assert old_build_binds(path.resolve()) == "BOUND"  # released with the store


async def test_this_build_does_not_open_a_database_an_older_build_has_open(
    tmp_path: Path,
) -> None:
    # Whatever the version: a schema-3 database with an older build bound is one that
    # build is about to refuse, but until it lets go, its path binding stands.
    path = tmp_path / "v3.db"
    await _store_kept(path)
    old = Child(OLD_BUILD, str(path))
    try:
        refused = SqliteStore(path)
        with pytest.raises(StoreError, match="an older actorloop build"):
            refused.claim("kept")
        await refused.close()
    finally:
        old.kill()
    after = SqliteStore(path)
    try:
        with after.claim("kept") as lease:
            assert lease.held
    finally:
        await after.close()
