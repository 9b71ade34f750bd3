"""Real crashes: a child process writes turns through the CodecActor and is kill -9'd at
random moments; afterwards every acknowledged event must load back unchanged, the log must
validate, and an open turn must be closed by the repair closers.

Trials per store come from ACTORLOOP_CRASH_TRIALS (default 8, a few seconds). Full mode is
`ACTORLOOP_CRASH_TRIALS=200 pytest tests/stores/test_crash.py` (a few minutes); set
ACTORLOOP_CRASH_SEED to replay one sequence of kill points.
"""

from __future__ import annotations

import hashlib
import os
import random
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from actorloop.codecs.converter import encode_event
from actorloop.runtime.log.session import Session
from actorloop.runtime.model.events import TurnEnd
from actorloop.runtime.stores import open_store

CHILD = Path(__file__).resolve().parents[1] / "kits" / "crash_child.py"
TRIALS = int(os.environ.get("ACTORLOOP_CRASH_TRIALS", "8"))
SEED = int(os.environ.get("ACTORLOOP_CRASH_SEED", str(random.SystemRandom().randrange(2**32))))
SESSIONS = 3
STARTUP_TIMEOUT = 30.0


class Child:
    """A running crash child whose stdout is read line by line with a deadline."""

    def __init__(self, url: str, seed: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), url, "crash", str(SESSIONS), str(seed)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=CHILD.parent,
        )
        assert self.proc.stdout is not None
        self._fd = self.proc.stdout.fileno()
        self._buffer = b""
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._fd, selectors.EVENT_READ)

    def lines(self, deadline: float) -> list[str]:
        """Complete lines available before `deadline` (at least one, unless EOF)."""
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._selector.select(remaining):
                raise AssertionError(f"crash child went quiet; stderr:\n{self.stderr()}")
            chunk = os.read(self._fd, 65536)
            if not chunk:
                raise AssertionError(f"crash child exited early; stderr:\n{self.stderr()}")
            self._buffer += chunk
        complete, _, self._buffer = self._buffer.rpartition(b"\n")
        return complete.decode().splitlines()

    def kill(self) -> list[str]:
        """kill -9, then every complete line it printed before dying."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        assert self.proc.stdout is not None
        rest = self._buffer + self.proc.stdout.read()
        self._selector.close()
        self.proc.stdout.close()
        self.stderr()
        assert self.proc.returncode == -signal.SIGKILL, self.proc.returncode
        # A line cut by the kill was never acknowledged: only complete lines count.
        return rest.decode().split("\n")[:-1]

    def stderr(self) -> str:
        assert self.proc.stderr is not None
        if self.proc.poll() is None:
            return "(child still running)"
        text = self.proc.stderr.read().decode(errors="replace")
        self.proc.stderr.close()
        return text


def run_trial(url: str, rng: random.Random, acked: dict[str, tuple[int, str]]) -> None:
    child = Child(url, rng.randrange(2**31))
    deadline = time.monotonic() + STARTUP_TIMEOUT
    seen = child.lines(deadline)
    assert seen[0] == "READY", seen
    target = rng.choice([0, 1, 3, 10, 30, 100])
    acks = seen[1:]
    while len(acks) < target:
        acks += child.lines(deadline)
    time.sleep(rng.random() * 0.004)  # land the kill anywhere in the write path
    acks += child.kill()
    for line in acks:
        kind, session_id, seq, digest = line.split(" ")
        assert kind == "ACK", line
        if int(seq) >= acked.get(session_id, (-1, ""))[0]:
            acked[session_id] = (int(seq), digest)


async def verify(url: str, acked: dict[str, tuple[int, str]]) -> int:
    """Load every session (repairing it) and check the acknowledged prefixes; returns how
    many sessions needed closers."""
    store = open_store(url)
    repaired = 0
    try:
        for session_id, (seq, digest) in acked.items():
            meta, events = await store.load(session_id)
            Session.from_events(session_id, events, meta)  # the log validates
            assert len(events) > seq, f"{session_id}: acknowledged seq {seq} is missing"
            prefix = hashlib.sha256()
            for event in events[: seq + 1]:
                prefix.update(encode_event(event))
            assert prefix.hexdigest() == digest, f"{session_id}: acknowledged events changed"
            assert isinstance(events[-1].data, TurnEnd), "an open turn was left unclosed"
            if events[-1].data.reason.kind == "interrupted":
                repaired += 1
    finally:
        await store.close()
    return repaired


@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
def test_kill_9_never_loses_an_acknowledged_event(kind: str, tmp_path: Path) -> None:
    url = f"sqlite:{tmp_path / 'crash.db'}" if kind == "sqlite" else f"jsonl:{tmp_path / 'j'}"
    rng = random.Random(f"{SEED}-{kind}")
    acked: dict[str, tuple[int, str]] = {}
    repaired = 0
    for trial in range(TRIALS):
        run_trial(url, rng, acked)
        try:
            repaired += trio.run(verify, url, acked)
        except AssertionError as exc:
            raise AssertionError(f"trial {trial} (ACTORLOOP_CRASH_SEED={SEED}): {exc}") from exc
    assert acked, "no flush was ever acknowledged"
    if TRIALS >= 8:
        # Kills land mid-turn far more often than between turns.
        assert repaired > 0
