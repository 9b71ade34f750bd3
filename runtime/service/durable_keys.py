"""Idempotency keys of the service kept by the store (runtime/stores/idempotency.py): a key
outlives a restart and a failover, and its first request's outcome is what every retry gets
(docs/serve.md §5).

A send claims its key once this instance owns the session (so it is the session's only
writer). A key claimed by another owner that never settled it belongs to a request whose
process is gone (it lost the session): its turn, if it started one, is in the log after the
claim's head, found by its `user/message` content; otherwise this instance takes the key
over and runs the turn. Other state-changing routes keep the first response (status and
body) under their key.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import orjson
import trio
from attrs import define, evolve, frozen

from ..errors import AgentBusy
from ..model.events import SessionEvent, TurnStart, UserMessage
from ..model.messages import Content
from ..stores.base import Store
from ..stores.idempotency import DEFAULT_RETENTION_S, KeyRecord, key_table, now_ms, settled
from .bodies import SendMessage
from .errors import IdempotencyKeyReused
from .idempotency import IdempotencyKeys, KeyEntry, fingerprint
from .outcomes import outcome_from_log
from .schemas import SessionState, SessionStatus, TurnOutcome, plain

STALE_CLAIM_MS = 60_000
"""A pending key of another route claimed elsewhere longer ago than this is taken over (its
claimer is presumed gone); a younger one answers 409 SESSION_BUSY: retry later."""

SEND_SCOPE = "messages"
"""The stored key of a send is `messages:<key>`; other routes use their own scope."""


@define
class ReplayFlag:
    """Set by the service when a response is a replay of a key's first outcome."""

    replayed: bool = False


@frozen
class Replay:
    """A key's request already ran (or runs under another live claim): its outcome."""

    outcome: TurnOutcome


@frozen
class Claimed:
    """This instance owns the key's request now: run it, then `settle` or `forget`."""

    record: KeyRecord


@frozen
class StoredResponse:
    """The first response of a keyed request of another route."""

    status: int
    body: bytes


def body_fingerprint(route: str, body: bytes) -> str:
    """What makes two requests of a route "the same": the route and its exact body."""
    return hashlib.sha256(route.encode() + b"\x00" + body).hexdigest()


def _turn_of(events: Sequence[SessionEvent], stamp: str) -> int | None:
    """The index in `events` of the first turn whose user message has content digest
    `stamp` (the turn a gone owner started for the key), or None."""
    start: int | None = None
    for index, event in enumerate(events):
        if isinstance(event.data, TurnStart):
            start = index
        elif (
            isinstance(event.data, UserMessage)
            and start is not None
            and fingerprint(event.data.content) == stamp
        ):
            return start
    return None


class DurableKeys:
    """The service's keys in its store, under an owner token of this instance."""

    def __init__(self, store: Store, retention_s: float = DEFAULT_RETENTION_S) -> None:
        self.table = key_table(store)
        self.retention_s = retention_s
        self.owner = f"serve-{uuid.uuid4().hex}"
        """This instance's token: a claim under it is settled by this process."""
        self._running: dict[tuple[str, str], trio.Event] = {}

    async def begin_send(
        self, session_id: str, key: str, content: Content, events: Sequence[SessionEvent]
    ) -> Replay | Claimed | None:
        """Claim a send's key. `events` is the session's log (this instance owns it).
        Replay: answer that. Claimed: run the turn. None: the key runs in this process
        (the caller waits on its local entry)."""
        stamp = fingerprint(content)
        scoped = f"{SEND_SCOPE}:{key}"
        while True:
            mine = KeyRecord(session_id, scoped, stamp, self.owner, len(events), now_ms())
            record, created = await self.table.claim(mine, self.retention_s)
            if created:
                return Claimed(mine)
            if record.fingerprint != stamp:
                raise IdempotencyKeyReused(
                    f"idempotency key {key!r} of session {session_id!r} was used for a "
                    "different request; its first outcome stands"
                )
            if record.outcome is not None:
                return Replay(plain.structure(orjson.loads(record.outcome), TurnOutcome))
            if record.owner == self.owner:
                return None
            # Claimed by an owner that lost the session (we own it now): its turn, if it
            # started one, is in the log; it was closed by the load's repair.
            tail = events[record.head :]
            start = _turn_of(tail, stamp)
            if start is not None:
                outcome = outcome_from_log(session_id, tail[start:])
                done = settled(evolve(record, owner=self.owner), plain.unstructure(outcome))
                if await self.table.update(done, expected_owner=record.owner):
                    return Replay(outcome)
                continue
            taken = evolve(mine, created_at=record.created_at)
            if await self.table.update(taken, expected_owner=record.owner):
                return Claimed(taken)

    async def settle(self, claim: Claimed, outcome: TurnOutcome) -> None:
        """The claimed send's turn ended with `outcome`: retries get it from now on."""
        with trio.CancelScope(shield=True):
            await self.table.update(
                settled(claim.record, plain.unstructure(outcome)), expected_owner=self.owner
            )

    async def forget(self, claim: Claimed) -> None:
        """The claimed send started no turn: a retry may claim the key again."""
        with trio.CancelScope(shield=True):
            await self.table.forget(claim.record.session_id, claim.record.key, self.owner)

    async def respond(
        self,
        scope: str,
        session_id: str,
        key: str,
        body: bytes,
        produce: Callable[[], Awaitable[StoredResponse]],
        flag: ReplayFlag,
    ) -> StoredResponse:
        """The response of a keyed request of another route: the first one's, replayed, or
        `produce()`'s, kept when it succeeded (a 2xx; an error keeps nothing)."""
        stamp = body_fingerprint(scope, body)
        scoped = f"{scope}:{key}"
        while True:
            mine = KeyRecord(session_id, scoped, stamp, self.owner, 0, now_ms())
            record, created = await self.table.claim(mine, self.retention_s)
            if not created:
                if record.fingerprint != stamp:
                    raise IdempotencyKeyReused(
                        f"idempotency key {key!r} was used for a different request; its "
                        "first outcome stands"
                    )
                if record.outcome is not None:
                    flag.replayed = True
                    return _stored(record.outcome)
                running = self._running.get((session_id, scoped))
                if record.owner == self.owner and running is not None:
                    await running.wait()
                    continue
                if record.owner != self.owner and mine.created_at - record.created_at < (
                    STALE_CLAIM_MS
                ):
                    raise AgentBusy(
                        f"a request with idempotency key {key!r} is in progress on another "
                        "instance; retry later"
                    )
                taken = evolve(mine, created_at=record.created_at)
                if not await self.table.update(taken, expected_owner=record.owner):
                    continue
                mine = taken
            return await self._produce(mine, produce)

    async def _produce(
        self, record: KeyRecord, produce: Callable[[], Awaitable[StoredResponse]]
    ) -> StoredResponse:
        slot = (record.session_id, record.key)
        done = self._running[slot] = trio.Event()
        kept = False
        try:
            response = await produce()
            if 200 <= response.status < 300:
                value: Any = {"status": response.status, "body": response.body.decode()}
                with trio.CancelScope(shield=True):
                    kept = await self.table.update(
                        settled(record, value), expected_owner=self.owner
                    )
            return response
        finally:
            if not kept:
                with trio.CancelScope(shield=True):
                    await self.table.forget(record.session_id, record.key, self.owner)
            del self._running[slot]
            done.set()


class SendKeys:
    """A send's key both here (who waits for which turn) and in the store."""

    def __init__(self, local: IdempotencyKeys[TurnOutcome], durable: DurableKeys) -> None:
        self.local = local
        self.durable = durable
        self._claims: dict[KeyEntry[TurnOutcome], Claimed] = {}

    async def begin(
        self,
        session_id: str,
        request: SendMessage,
        events: Sequence[SessionEvent],
        flag: ReplayFlag,
        status_of: Callable[[str], SessionStatus],
    ) -> KeyEntry[TurnOutcome] | TurnOutcome | SessionState | None:
        """The send's key, claimed here and in the store once this instance owns the session
        (`events` is its log). A new entry: run the turn, then `settle` or `forget` it. An
        outcome (or, not waiting, the session's state): the key's first request answers,
        and `flag` says it is a replay. None: no turn for the key; claim again."""
        assert request.idempotency_key is not None
        key, content = request.idempotency_key, request.content
        decision = await self.durable.begin_send(session_id, key, content, events)
        if isinstance(decision, Replay):
            flag.replayed = True
            return (
                decision.outcome
                if request.wait
                else SessionState(session_id, status_of(session_id))
            )
        entry, first = self.local.claim(session_id, key, content)
        if first and decision is None:
            # Our own claim in the store, being forgotten right now.
            self.local.forget(entry)
            await trio.lowlevel.checkpoint()
            return None
        if first:
            assert decision is not None
            self._claims[entry] = decision
            return entry
        if decision is not None:
            await self.durable.forget(decision)
        flag.replayed = True
        if not request.wait:
            running: SessionStatus = "running" if entry.running else status_of(session_id)
            return SessionState(session_id, running)
        outcome = await entry.wait()
        if outcome is None:
            flag.replayed = False
        return outcome

    async def settle(self, entry: KeyEntry[TurnOutcome], outcome: TurnOutcome) -> None:
        """The key's turn ended: here and in the store."""
        self.local.settle(entry, outcome)
        claim = self._claims.pop(entry, None)
        if claim is not None:
            await self.durable.settle(claim, outcome)

    async def forget(self, entry: KeyEntry[TurnOutcome]) -> None:
        """The key's request started no turn: forgotten here and in the store."""
        self.local.forget(entry)
        claim = self._claims.pop(entry, None)
        if claim is not None:
            await self.durable.forget(claim)


def _stored(outcome: str) -> StoredResponse:
    value = orjson.loads(outcome)
    return StoredResponse(int(value["status"]), str(value["body"]).encode())
