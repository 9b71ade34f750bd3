"""Fenced session ownership, this store's side: the claims it holds (one per lease), the
owner epoch each one holds in the database once taken, which were fenced, and the releases
owed to the database.

A `Store.claim()` is synchronous, so it only reserves the session in this process (the
`LeaseTable` refuses a second writer here); the database claim is taken by the lease's first
use — `create`, `fork` (of the child), `load(lease=...)`, an append — in the same
transaction as that work: `owner_epoch + 1` where the session is unowned, owned by this
node, or its lease expired. From then on every commit is conditional on that epoch and the
expected head, so a writer whose lease was taken over can never append: it is fenced
(`SessionFenced`), stays fenced, and never retries.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ...errors import SessionFenced
from ..leases import Lease, LeaseTable

CLAIMABLE = "(owner_node IS NULL OR owner_node = %(node)s OR lease_expires <= now())"
"""The claim rule, as SQL over a sessions row: unowned, this node's own, or expired."""


class Claim:
    """One lease's standing in the database: `epoch` once taken (None before), `fenced`
    once a commit or a renewal found the epoch moved on."""

    __slots__ = ("epoch", "fenced", "session_id")

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.epoch: int | None = None
        self.fenced: SessionFenced | None = None


class Claims:
    """The `Locker` behind this store's `LeaseTable`: a `Claim` per lease, and the
    `(session id, epoch)` releases owed to the database (done by the lease keeper)."""

    def __init__(self, on_release: Callable[[], None]) -> None:
        self._on_release = on_release
        self._mutex = threading.Lock()
        self._claims: dict[str, Claim] = {}
        self._releases: list[tuple[str, int]] = []
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

    def taken(self, claim: Claim, epoch: int) -> None:
        """The database claim was committed at `epoch` (owed back at once if its lease was
        released meanwhile)."""
        with self._mutex:
            claim.epoch = epoch
            if self._claims.get(claim.session_id) is not claim:
                self._releases.append((claim.session_id, epoch))

    def fence(self, claim: Claim, current: int | None, detail: str = "") -> SessionFenced:
        """Mark `claim` fenced (for good) and return the error its writer gets."""
        with self._mutex:
            if claim.fenced is None:
                assert claim.epoch is not None
                claim.fenced = SessionFenced(claim.session_id, claim.epoch, current, detail)
            return claim.fenced

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
