"""Fenced session ownership, this store's side: the claims it holds (one per lease), the
owner epoch each one holds in the database once taken, which were fenced, and the releases
owed to the database.

A `Store.claim()` is synchronous, so it only reserves the session in this process (the
`LeaseTable` refuses a second writer here); the database claim is taken by the lease's first
use — `create`, `fork` (of the child), `load(lease=...)`, an append — in the same
transaction as that work: `owner_epoch + 1` where the session is unowned, owned by this
node, or its lease expired. From then on every commit is conditional on that epoch and the
expected head, so a writer whose lease was taken over can never append: it is fenced
(`SessionFenced`), stays fenced, and never retries. Fences are reported once (logged, and
to the store's listeners, which stop the session's agent).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from attrs import frozen

from ...errors import SessionBusy, SessionFenced
from ..leases import Lease, LeaseTable, busy_error

log = logging.getLogger("actorloop.stores.postgres")

CLAIMABLE = "(owner_node IS NULL OR owner_node = %(node)s OR lease_expires <= now())"
"""The claim rule, as SQL over a sessions row: unowned, this node's own, or expired."""


@frozen
class Owner:
    """Who owns a session now: `node` (None: unowned), its owner epoch, and whether its
    lease is live (unexpired by the database's clock); `head` is its acknowledged head."""

    node: str | None
    epoch: int
    live: bool
    head: int


class Claim:
    """One lease's standing in the database: `epoch` once taken (None before), `fenced`
    once a commit or a renewal found the epoch moved on, `renewed`, when (this process's
    monotonic clock) the round that last renewed its lease started, and `unconfirmed`,
    the first seq and the error of a commit of it that failed unconfirmed (cleared by its
    next commit), so that a write that no longer continues the tail names that cause."""

    __slots__ = ("epoch", "fenced", "renewed", "session_id", "unconfirmed")

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.epoch: int | None = None
        self.fenced: SessionFenced | None = None
        self.renewed = 0.0
        self.unconfirmed: tuple[int, Exception] | None = None


class Claims:
    """The `Locker` behind this store's `LeaseTable`: a `Claim` per lease, the claim rules
    of node `node`, the `(session id, epoch)` releases owed to the database (done by the
    lease keeper) and the fences not yet reported to the store's listeners."""

    def __init__(self, node: str, where: str, on_release: Callable[[], None]) -> None:
        self.node = node
        self._where = where
        self._on_release = on_release
        self._mutex = threading.Lock()
        self._claims: dict[str, Claim] = {}
        self._releases: list[tuple[str, int]] = []
        self._fenced: list[str] = []
        self.leases = LeaseTable(self)

    # the Locker protocol (called under the LeaseTable's mutex) ------------------------

    def acquire(self, session_id: str) -> object | None:
        claim = Claim(session_id)
        with self._mutex:
            self._claims[session_id] = claim
        return claim

    def release(self, session_id: str, token: object) -> None:
        assert isinstance(token, Claim)
        with self._mutex:
            if self._claims.get(session_id) is token:
                del self._claims[session_id]
            owed = token.epoch is not None and token.fenced is None
            if owed:
                assert token.epoch is not None
                self._releases.append((session_id, token.epoch))
        if owed:
            self._on_release()

    # the store's view -----------------------------------------------------------------

    def claim(self, session_id: str) -> Lease:
        """Reserve `session_id` for a writer of this process (SessionBusy if reserved)."""
        return self.leases.claim(session_id)

    def of(self, session_id: str) -> Claim | None:
        """This store's claim on `session_id`, if a lease of it is held."""
        with self._mutex:
            return self._claims.get(session_id)

    def held(self, lease: Lease, session_id: str) -> Claim:
        """The claim behind `lease` (ValueError if it is not a live lease of this store)."""
        if not self.leases.holds(lease, session_id):
            raise ValueError(f"{lease!r} is not a live lease of this store for {session_id!r}")
        claim = self.of(session_id)
        assert claim is not None
        return claim

    def taken(self, claim: Claim, epoch: int, started: float) -> None:
        """The database claim was committed at `epoch` by a transaction that started at
        `started` (owed back at once if its lease was released meanwhile)."""
        with self._mutex:
            claim.epoch = epoch
            claim.renewed = max(claim.renewed, started)
            if self._claims.get(claim.session_id) is not claim:
                self._releases.append((claim.session_id, epoch))

    def renewed(self, claims: list[Claim], started: float) -> None:
        """A keeper round that started at `started` renewed these claims' leases."""
        with self._mutex:
            for claim in claims:
                claim.renewed = max(claim.renewed, started)

    # the claim rules ------------------------------------------------------------------

    def claimable(self, owner: Owner) -> bool:
        """Whether this node may claim a session owned by `owner` (see CLAIMABLE)."""
        return owner.node is None or owner.node == self.node or not owner.live

    def busy(self, session_id: str, owner: Owner, detail: str) -> SessionBusy:
        return busy_error(session_id, f" (node {owner.node!r}, owner epoch {owner.epoch}){detail}")

    def epoch_for(self, claim: Claim, session_id: str, owner: Owner) -> int:
        """The epoch `claim` writes under now: its own (fenced if the session moved on), or
        a new one taken now (SessionBusy if the session is not claimable)."""
        if claim.fenced is not None:
            raise claim.fenced
        if claim.epoch is not None:
            if owner.epoch != claim.epoch:
                raise self.fence(claim, owner.epoch, owner.node)
            return claim.epoch
        if not self.claimable(owner):
            raise self.busy(session_id, owner, "; refusing a second writer")
        return owner.epoch + 1

    def fence(self, claim: Claim, current: int | None, node: str | None) -> SessionFenced:
        """Mark `claim` fenced (for good; by `node`, now at epoch `current`) and return the
        error its writer gets; the first time, it is logged and owed to the listeners."""
        with self._mutex:
            if claim.fenced is not None:
                return claim.fenced
            assert claim.epoch is not None
            claim.fenced = SessionFenced(
                claim.session_id, claim.epoch, current, f", by node {node!r}"
            )
            self._fenced.append(claim.session_id)
        log.error("postgres %s: node %s fenced: %s", self._where, self.node, claim.fenced)
        return claim.fenced

    def take_fenced(self) -> list[str]:
        """The sessions fenced since the last call, handed over once."""
        with self._mutex:
            fenced, self._fenced = self._fenced, []
            return fenced

    def owned(self) -> list[tuple[Claim, int]]:
        """Every claim taken in the database and not fenced, with its epoch (to renew)."""
        with self._mutex:
            return [
                (claim, claim.epoch)
                for claim in self._claims.values()
                if claim.epoch is not None and claim.fenced is None
            ]

    def take_releases(self) -> list[tuple[str, int]]:
        """The releases owed to the database, handed over once."""
        with self._mutex:
            owed, self._releases = self._releases, []
            return owed

    def give_back(self, releases: list[tuple[str, int]]) -> None:
        """Releases that could not be written (the database was away): owed again."""
        with self._mutex:
            self._releases[:0] = releases

    def release_all(self) -> None:
        self.leases.release_all()
