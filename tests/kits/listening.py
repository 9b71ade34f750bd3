"""A server child process started until it says where it listens (`listening on URL`), for
the tests' `actorloop serve` children and bench_serve's servers alike."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path


def start_listening(
    command: Sequence[str], env: dict[str, str], cwd: Path
) -> tuple[subprocess.Popen[str], str]:
    """`command` started with piped text stdio, once its first line says `listening on URL`:
    the process and the URL. Otherwise the process is killed and RuntimeError carries that
    line and its stderr."""
    proc = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=cwd,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # blocks until the server says it listens, or exits
    if "listening on" not in line:
        proc.kill()
        raise RuntimeError(f"server did not start: {line!r} {proc.communicate(timeout=30)[1]}")
    return proc, line.split("listening on ", 1)[1].split(" ", 1)[0].strip()
