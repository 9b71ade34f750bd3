"""Idempotency keys of `POST /v1/sessions/{id}/messages` whose requests run in this process:
who waits for which turn, so concurrent sends of one key share one turn (docs/spec/runtime.md
§15.4). The keys that outlive the process are the store's (`durable_keys.py`).

Kept in memory, per session, for `ttl` seconds after their turn ended (24 hours by
default), at most `capacity` of them (the oldest settled keys go first; a key whose turn
still runs is never dropped).
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

import trio

from ...codecs.converter import canonical_bytes
from ..model.messages import Content
from .errors import IdempotencyKeyReused

DEFAULT_TTL_S = 24 * 3600.0
DEFAULT_CAPACITY = 100_000

Outcome = TypeVar("Outcome")


def fingerprint(content: Content) -> str:
    """What makes two sends "the same request": the content, canonically encoded."""
    return hashlib.sha256(canonical_bytes(content)).hexdigest()


class KeyEntry(Generic[Outcome]):
    """One key: its request's fingerprint and, once its turn ended, the outcome."""

    __slots__ = (
        "_settled",
        "fingerprint",
        "forgotten",
        "key",
        "outcome",
        "session_id",
        "settled_at",
    )

    def __init__(self, session_id: str, key: str, fingerprint: str) -> None:
        self.session_id = session_id
        self.key = key
        self.fingerprint = fingerprint
        self.outcome: Outcome | None = None
        self.settled_at: float | None = None
        self.forgotten = False
        self._settled = trio.Event()

    async def wait(self) -> Outcome | None:
        """The outcome once the key's turn ended; None if the key was forgotten because its
        request started no turn (then the caller may start one)."""
        await self._settled.wait()
        return self.outcome

    @property
    def running(self) -> bool:
        """Whether the key's request is still on its way (its turn not yet ended)."""
        return not self._settled.is_set()


class IdempotencyKeys(Generic[Outcome]):
    """The keys the service has seen, by (session id, key)."""

    def __init__(
        self,
        *,
        ttl: float = DEFAULT_TTL_S,
        capacity: int = DEFAULT_CAPACITY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl = ttl
        self.capacity = capacity
        self._clock = clock
        self._entries: OrderedDict[tuple[str, str], KeyEntry[Outcome]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def claim(self, session_id: str, key: str, content: Content) -> tuple[KeyEntry[Outcome], bool]:
        """The entry of `key` and whether this call created it (so its caller starts the
        turn). A known key sent with other content raises `IdempotencyKeyReused`."""
        self._expire()
        stamp = fingerprint(content)
        entry = self._entries.get((session_id, key))
        if entry is not None:
            if entry.fingerprint != stamp:
                raise IdempotencyKeyReused(
                    f"idempotency key {key!r} of session {session_id!r} was used for a "
                    "different message; its first turn stands"
                )
            return entry, False
        entry = KeyEntry(session_id, key, stamp)
        self._entries[(session_id, key)] = entry
        return entry, True

    def settle(self, entry: KeyEntry[Outcome], outcome: Outcome) -> None:
        """The key's turn ended with `outcome`: later sends of the key get it."""
        entry.outcome = outcome
        entry.settled_at = self._clock()
        entry._settled.set()
        self._entries.move_to_end((entry.session_id, entry.key))
        self._expire()

    def forget(self, entry: KeyEntry[Outcome]) -> None:
        """The key's request started no turn (refused, or cancelled while it waited): drop
        the key so a retry can start the turn; whoever waits on it is woken with None."""
        if self._entries.get((entry.session_id, entry.key)) is entry:
            del self._entries[(entry.session_id, entry.key)]
        entry.forgotten = True
        entry._settled.set()

    def _expire(self) -> None:
        now = self._clock()
        excess = len(self._entries) - self.capacity
        for item_key, entry in list(self._entries.items()):
            if entry.settled_at is None:
                continue
            if now - entry.settled_at <= self.ttl and excess <= 0:
                break
            del self._entries[item_key]
            excess -= 1
