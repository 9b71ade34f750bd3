"""Shared test helpers: every runtime a test opens has dev invariants on."""

from __future__ import annotations

import select
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio

from actorloop.runtime import Runtime
from actorloop.runtime.providers.base import Provider


@asynccontextmanager
async def open_runtime(
    provider: Provider, store: str = "memory:", **kwargs: Any
) -> AsyncIterator[Runtime]:
    async with Runtime.open(store=store, provider=provider, dev_invariants=True, **kwargs) as rt:
        yield rt


def types_of(events: Any) -> list[str]:
    return [event.type for event in events]


async def wait_until(predicate: Any) -> None:
    """Poll `predicate` (state owned by another task) for up to 5 s."""
    with trio.fail_after(5):
        while not predicate():  # noqa: ASYNC110 - the state has no event to wait on
            await trio.sleep(0.001)


def start_ready_child(script: str, *args: str) -> subprocess.Popen[bytes]:
    """`python -c script args...` with piped stdio, once it has printed READY (30 s at most;
    its stderr is the failure message otherwise)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 30)
    line = proc.stdout.readline() if ready else b""
    assert line == b"READY\n", proc.stderr.read() if proc.stderr else line
    return proc


def kill_child(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL `proc` (no clean-up of its own runs), reap it and close its pipes."""
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
