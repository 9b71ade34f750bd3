"""The surface fold and its incremental derivation into messages (docs/spec/session-log.md §5).

Each surface node is projected once; appends extend the cache; a `Replace` rebuilds only
positions at and after the replaced span.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

from ...codecs.converter import canonical_bytes
from ..errors import ErrorCode, SessionValidationError
from ..model.events import (
    AssistantMessage,
    ContextMessage,
    Replace,
    SessionEvent,
    SteeringMessage,
    ToolResultEvent,
    UserMessage,
)
from ..model.messages import Message, ToolResult

SessionEventLookup = Callable[[int], SessionEvent]

RECONCILABLE_CODES = frozenset({ErrorCode.TOOL_OUTCOME_UNKNOWN})
"""The result codes of a call in doubt: a `Replace` may give it its reconciled outcome."""


def project(event: SessionEvent) -> Message | None:
    """The message a surface node derives to (None: the node derives to nothing)."""
    data = event.data
    if isinstance(data, UserMessage):
        return Message("user", data.content)
    if isinstance(data, AssistantMessage):
        return Message("assistant", data.content) if data.content else None
    if isinstance(data, ToolResultEvent):
        return Message("user", (ToolResult(data.call_id, data.content, data.is_error),))
    if isinstance(data, (ContextMessage, SteeringMessage)):
        return Message("user", data.content)
    return None


def chain_step(previous: bytes, message: Message) -> bytes:
    """One link of the message hash chain used for request digests."""
    return hashlib.sha256(previous + canonical_bytes(message)).digest()


def chain_of(messages: tuple[Message, ...] | list[Message]) -> bytes:
    link = b""
    for message in messages:
        link = chain_step(link, message)
    return link


class SurfaceFold:
    """Node seqs in surface order with their projections and cumulative hash chain."""

    __slots__ = (
        "_chain",
        "_derived",
        "_lazy",
        "_messages",
        "_messages_nodes",
        "_nodes",
        "_pending",
        "_pos",
        "_restored",
        "generation",
    )

    def __init__(self) -> None:
        self._nodes: list[int] = []
        self._derived: list[Message | None] = []
        self._pos: dict[int, int] | None = {}
        """Node seq → position; None (restored, not needed yet) until first asked for."""
        self.generation = 0
        # Cached derivation: the tuple for the first `_messages_nodes` nodes.
        self._messages: tuple[Message, ...] = ()
        self._messages_nodes = 0
        # _chain[i] = hash chain over the first i+1 derived messages (lazily extended).
        self._chain: list[bytes] = []
        # Restored from a fold snapshot, until first needed: how many nodes come before
        # `_nodes` (which then holds only those appended since) and how to get their seqs
        # (`_pending`), and what they derive to (`_lazy`; placeholders in `_derived`).
        self._restored = 0
        self._pending: Callable[[], list[int]] | None = None
        self._lazy: Callable[[], Sequence[Message | None]] | None = None

    @classmethod
    def restored(
        cls,
        count: int,
        nodes: Callable[[], list[int]],
        generation: int,
        derive: Callable[[Sequence[int]], Sequence[Message | None]],
    ) -> SurfaceFold:
        """The fold at a snapshot of `count` nodes and this `Replace` generation. `nodes()`
        gives their seqs and `derive(seqs)` what they derive to, each called once, when
        first needed (a derivation, a hash chain, a `Replace`, a position); appends before
        then need neither."""
        fold = cls()
        fold._derived = [None] * count
        fold._pos = None  # built on first use: appends need none of it
        fold.generation = generation
        if count:
            fold._restored, fold._pending = count, nodes
            fold._lazy = lambda: derive(fold._nodes[:count])
        return fold

    def _settle_nodes(self) -> None:
        """Put the restored nodes' seqs before the appended ones (once)."""
        pending = self._pending
        if pending is not None:
            restored = pending()
            if len(restored) != self._restored:
                raise ValueError("a restored surface unpacked another number of nodes")
            self._nodes[:0] = restored
            self._restored, self._pending = 0, None

    def _settle(self) -> None:
        """Settle the restored nodes and project them (once): `_derived` then holds every
        node's message."""
        self._settle_nodes()
        lazy = self._lazy
        if lazy is not None:
            derived = list(lazy())
            if len(derived) > len(self._derived):
                raise ValueError("a restored surface derived more nodes than it holds")
            self._derived[: len(derived)] = derived
            self._lazy = None

    @property
    def nodes(self) -> tuple[int, ...]:
        self._settle_nodes()
        return tuple(self._nodes)

    def __len__(self) -> int:
        return self._restored + len(self._nodes)

    def position(self, seq: int) -> int | None:
        return self._positions().get(seq)

    def _positions(self) -> dict[int, int]:
        positions = self._pos
        if positions is None:
            self._settle_nodes()
            positions = dict(zip(self._nodes, range(len(self._nodes)), strict=True))
            if len(positions) != len(self._nodes):
                seq = next(seq for seq in self._nodes if self._nodes.count(seq) > 1)
                raise SessionValidationError(seq, "a restored surface names this node twice")
            self._pos = positions
        return positions

    def check(self, event: SessionEvent, lookup: SessionEventLookup) -> None:
        """Raise if `event`'s surface op cannot apply; changes nothing."""
        op = event.surface_op
        if not isinstance(op, Replace):
            return
        positions = self._positions()
        start, end = positions.get(op.start), positions.get(op.end)
        if start is None or end is None:
            missing = op.start if start is None else op.end
            raise SessionValidationError(
                event.seq, f"{event.type}: replace names seq {missing}, which is not a current node"
            )
        if start > end:
            raise SessionValidationError(
                event.seq, f"{event.type}: replace start {op.start} comes after end {op.end}"
            )
        shadowed = self._nodes[start : end + 1]
        provenance = set(event.source_event_seqs or ())
        missing_seqs = [seq for seq in shadowed if seq not in provenance]
        if missing_seqs:
            raise SessionValidationError(
                event.seq,
                f"{event.type}: provenance must include every shadowed seq, missing {missing_seqs}",
            )
        if isinstance(event.data, ToolResultEvent):
            old = lookup(shadowed[0])
            if len(shadowed) != 1 or not isinstance(old.data, ToolResultEvent):
                raise SessionValidationError(
                    event.seq, "tool/result replacement must rewrite exactly one tool/result node"
                )
            new = event.data
            # A call in doubt (its outcome unknown after a crash) may get its reconciled
            # outcome, error flag and all (session-log.md §10.7); any other rewrite keeps
            # everything but the content.
            in_doubt = old.data.error is not None and old.data.error.code in RECONCILABLE_CODES
            if (old.data.turn, old.data.step, old.data.call_id) != (
                new.turn,
                new.step,
                new.call_id,
            ) or (
                not in_doubt and (old.data.is_error, old.data.error) != (new.is_error, new.error)
            ):
                raise SessionValidationError(
                    event.seq, "tool/result replacement may change only content"
                )

    def apply(self, event: SessionEvent) -> None:
        op = event.surface_op
        message = project(event)
        if isinstance(op, Replace):
            if self._lazy is not None:
                self._settle()
            positions = self._positions()
            start, end = positions[op.start], positions[op.end]
            if start < self._messages_nodes:
                # Keep the cached messages derived before `start`; count them from the
                # nearer end of the cached range rather than always from position 0.
                cached = self._messages_nodes
                if start <= cached - start:
                    kept = sum(1 for derived in self._derived[:start] if derived is not None)
                else:
                    dropped = sum(1 for d in self._derived[start:cached] if d is not None)
                    kept = len(self._messages) - dropped
                self._messages = self._messages[:kept]
                self._messages_nodes = start
                del self._chain[kept:]
            shadowed = self._nodes[start : end + 1]
            self._nodes[start : end + 1] = [event.seq]
            self._derived[start : end + 1] = [message]
            for seq in shadowed:
                del positions[seq]
            positions[event.seq] = start
            if end > start:  # later nodes moved left: only their positions change
                nodes = self._nodes
                for index in range(start + 1, len(nodes)):
                    positions[nodes[index]] = index
            self.generation += 1
        else:
            if self._pos is not None:
                self._pos[event.seq] = len(self._nodes)
            self._nodes.append(event.seq)
            self._derived.append(message)

    def messages(self) -> tuple[Message, ...]:
        if self._lazy is not None:
            self._settle()
        if self._messages_nodes < len(self._nodes):
            fresh = [m for m in self._derived[self._messages_nodes :] if m is not None]
            if fresh:
                self._messages = self._messages + tuple(fresh)
            self._messages_nodes = len(self._nodes)
        return self._messages

    def history_chain(self) -> bytes:
        """Hash chain over the current derivation; extends the cached links incrementally."""
        messages = self.messages()
        link = self._chain[-1] if self._chain else b""
        for message in messages[len(self._chain) :]:
            link = chain_step(link, message)
            self._chain.append(link)
        return link
