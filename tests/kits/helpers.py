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


class FailingBarrier:
    """Makes a loop's barriers from the `fail_at`-th on raise `error`, whichever way each is
    written: by the loop itself (`_persist_now`, the codec's inline round) or queued to the
    codec actor (`_persist`); the barriers before it go through as before."""

    def __init__(self, loop: Any, fail_at: int, error: Exception) -> None:
        self.barriers = 0
        self._fail_at, self._error = fail_at, error
        self._queued, self._now = loop._persist, loop._persist_now
        self._declined = False
        """The current barrier was counted by `_persist_now`, which left it to the queue."""
        loop._persist, loop._persist_now = self.persist, self.persist_now

    def _count(self) -> None:
        self.barriers += 1
        if self.barriers >= self._fail_at:
            raise self._error

    def persist_now(self, session_id: str, events: Any) -> bool:
        self._count()
        done = self._now is not None and self._now(session_id, events)
        self._declined = not done
        return done

    async def persist(self, session_id: str, events: Any) -> None:
        if self._declined:
            self._declined = False
        else:
            self._count()
        await self._queued(session_id, events)


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
