"""A real PostgreSQL server for the tests: `initdb` into a temporary directory, `pg_ctl` on a
free loopback port, run as a non-root user (`nobody` when the tests run as root, as CI does),
with the store's schema dropped before every test. Nothing stands in for the server.

`PgServer.find()` locates the binaries (`ACTORLOOP_PG_BIN`, else the newest
/usr/lib/postgresql/*/bin); without them the PostgreSQL tests are skipped, except under CI
(`CI=true`), where a missing server is a failure: .ci/run installs it.
"""

from __future__ import annotations

import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

import psycopg

SUPERUSER = "actorloop"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PgServer:
    """One PostgreSQL cluster in a temporary directory; `start()`, `stop()`, `restart()`."""

    _counter = itertools.count()

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="actorloop-pg-"))
        self.data = self.root / "data"
        self.sockets = self.root / "sockets"
        self.logfile = self.root / "server.log"
        self.port = _free_port()
        self._user = "nobody" if os.geteuid() == 0 else None
        os.chmod(self.root, 0o755)
        self.sockets.mkdir()
        if self._user is not None:
            entry = pwd.getpwnam(self._user)
            for path in (self.root, self.sockets):
                os.chown(path, entry.pw_uid, entry.pw_gid)

    @staticmethod
    def find() -> Path | None:
        """The directory of `initdb`/`pg_ctl`, or None when PostgreSQL is not installed."""
        configured = os.environ.get("ACTORLOOP_PG_BIN")
        if configured:
            return Path(configured)
        found = sorted(
            Path("/usr/lib/postgresql").glob("*/bin/initdb"),
            key=lambda path: (
                int(path.parent.parent.name) if path.parent.parent.name.isdigit() else 0
            ),
        )
        return found[-1].parent if found else None

    def _run(self, program: str, *args: str) -> None:
        command: Sequence[str] = [str(self.bindir / program), *args]
        if self._user is not None:
            command = ["runuser", "-u", self._user, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=self.root)
        if done.returncode != 0:
            log = self.logfile.read_text() if self.logfile.exists() else ""
            raise RuntimeError(
                f"{program} failed ({done.returncode}): {done.stderr.strip()}\n{log[-2000:]}"
            )

    def init(self) -> None:
        """Create the cluster (trust auth on loopback only: nothing else can reach it)."""
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            SUPERUSER,
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
            "--no-instructions",
        )

    def start(self) -> None:
        """Start the server on 127.0.0.1:`port` and wait until it accepts connections."""
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.sockets} "
            "-c max_connections=300 -c shared_buffers=64MB"
        )
        self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.logfile), "-o", options, "-w", "start"
        )

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (`fast`: disconnect every client, a clean shutdown; `immediate`:
        like a crash, recovered from the WAL on the next start)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()

    @property
    def admin_url(self) -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/postgres"

    def url(self, database: str) -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        """A new empty database; its name."""
        name = f"t{os.getpid()}_{next(self._counter)}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
        return name

    def reset(self, name: str) -> None:
        """Empty database `name` of everything a store made in it, at once: every other
        connection to it is ended first (a killed server's leftovers, a store a test did
        not close), then the store's schema dropped (much faster than a new database)."""
        with psycopg.connect(self.url(name), autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            conn.execute("DROP SCHEMA IF EXISTS actorloop CASCADE")

    def cleanup(self) -> None:
        """Stop the server if it runs and remove its directory."""
        try:
            if (self.data / "postmaster.pid").exists():
                self.stop("immediate")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
