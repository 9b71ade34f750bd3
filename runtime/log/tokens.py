"""Token estimation (the chars/4 heuristic used everywhere) and the incremental token meter."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from attrs import frozen

from ...codecs.converter import canonical_bytes
from ...codecs.snapshots import pack_ints, unpack_ints
from ..model.chunks import TokenUsage
from ..model.events import AssistantMessage, Replace
from ..model.header import ToolSchema
from ..model.messages import Block, Message, Reasoning, Text, ToolCall, ToolResult
from ..model.snapshot import MeterState
from .header_algebra import HeaderFold
from .session import Session
from .surface import project

PER_ITEM = 4


def _quarter(length: int) -> int:
    return -(-length // 4)


def estimate_block(block: Block) -> int:
    if isinstance(block, (Text, Reasoning)):
        return _quarter(len(block.text)) + PER_ITEM
    if isinstance(block, ToolCall):
        return _quarter(len(block.name)) + _quarter(len(block.arguments)) + PER_ITEM
    if isinstance(block, ToolResult):
        return sum(estimate_block(inner) for inner in block.content) + PER_ITEM
    raise TypeError(f"cannot estimate {type(block).__name__}")


def estimate_message(message: Message) -> int:
    return sum(estimate_block(block) for block in message.content) + PER_ITEM


def estimate_messages(messages: Sequence[Message]) -> int:
    return sum(estimate_message(message) for message in messages)


def estimate_system(system: str | None) -> int:
    return _quarter(len(system)) + PER_ITEM if system else 0


def estimate_tools(tools: Sequence[ToolSchema]) -> int:
    return _quarter(len(canonical_bytes(tuple(tools)))) + PER_ITEM if tools else 0


def fixed_part_key(
    system: str | None, tools: Sequence[ToolSchema], prefix: Sequence[Message]
) -> bytes:
    """Identity of everything outside the surface; a change voids the usage anchor."""
    return hashlib.sha256(canonical_bytes((system or "", tuple(tools), tuple(prefix)))).digest()


class TokenMeter:
    """Incremental estimate of one session's request size.

    The surface part is a fold over surface events in log order: an `Append` adds its node,
    a `Replace` swaps the nodes it shadows for the new one, so a meter built over a loaded
    log (a resumed or forked instance) counts exactly what the running meter would. When
    the provider reported usage for an answer and the fixed part (system, tools, prefix) of
    the header that request was sent with is unchanged since, the total is anchored on that
    real count (if it is not below the heuristic price of the same content) plus the
    heuristic growth after it. A `Replace` voids the anchor.
    """

    def __init__(self, session: Session) -> None:
        self._session = session
        self._scanned = 0
        self._nodes: list[int] = []
        self._cost: dict[int, int] = {}
        self._surface = 0
        self._header = HeaderFold()
        self._anchor: int | None = None
        self._anchor_surface = 0
        self._anchor_key: bytes | None = None
        self._fixed: _FixedPart | None = None
        snapshot = session.snapshot
        if snapshot is not None:
            # Restored from a fold snapshot: the meter it recorded, at its length.
            meter = snapshot.meter
            self._scanned = snapshot.length
            self._nodes = list(unpack_ints(snapshot.nodes))
            self._cost = dict(zip(self._nodes, unpack_ints(meter.costs), strict=True))
            self._surface = meter.surface
            self._header.current = snapshot.header
            self._anchor = meter.anchor
            self._anchor_surface = meter.anchor_surface
            self._anchor_key = None if meter.anchor_key is None else bytes.fromhex(meter.anchor_key)

    def state(self) -> MeterState:
        """The meter as a fold snapshot records it (after scanning every event so far)."""
        self.surface_tokens()
        cost = self._cost
        key = self._anchor_key
        return MeterState(
            self._surface,
            self._anchor,
            self._anchor_surface,
            None if key is None else key.hex(),
            pack_ints(cost[seq] for seq in self._nodes),
        )

    @property
    def scanned(self) -> int:
        """How many of the session's events the meter has taken in."""
        return self._scanned

    def surface_tokens(self) -> int:
        session = self._session
        for event in session.events_since(self._scanned):
            self._header.feed(event)
            op = event.surface_op
            if op is not None:
                message = project(event)
                cost = estimate_message(message) if message is not None else 0
                if isinstance(op, Replace):
                    start = self._nodes.index(op.start)
                    end = self._nodes.index(op.end, start)
                    for seq in self._nodes[start : end + 1]:
                        self._surface -= self._cost.pop(seq)
                    self._nodes[start : end + 1] = [event.seq]
                    self._anchor = None
                else:
                    self._nodes.append(event.seq)
                self._cost[event.seq] = cost
                self._surface += cost
            data = event.data
            if isinstance(data, AssistantMessage) and data.usage is not None:
                self._set_anchor(data.usage)
        self._scanned = len(session)
        return self._surface

    def _set_anchor(self, usage: TokenUsage) -> None:
        header = self._header.current
        system, tools, prefix = (
            (header.system, header.tools or (), header.message_prefix or ())
            if header is not None
            else (None, (), ())
        )
        anchor = usage.input + usage.cache_read + usage.cache_write + usage.output
        fixed = self._fixed_part(system, tools, prefix)
        if anchor >= fixed.tokens + self._surface:
            self._anchor = anchor
            self._anchor_surface = self._surface
            self._anchor_key = fixed.key
        else:
            self._anchor = None

    def _fixed_part(
        self, system: str | None, tools: Sequence[ToolSchema], prefix: Sequence[Message]
    ) -> _FixedPart:
        # A loop passes the very same tools and prefix objects step after step (both
        # deeply frozen): their hash and price are computed once, not every step.
        fixed = self._fixed
        if fixed is None or not fixed.describes(system, tools, prefix):
            fixed = self._fixed = _FixedPart(
                system,
                tools,
                prefix,
                fixed_part_key(system, tools, prefix),
                fixed_part_tokens(system, tools, prefix),
            )
        return fixed

    def total(
        self, system: str | None, tools: Sequence[ToolSchema], prefix: Sequence[Message]
    ) -> int:
        """Estimated tokens of a request with these fixed parts and the current surface."""
        surface = self.surface_tokens()
        fixed = self._fixed_part(system, tools, prefix)
        if self._anchor is not None and self._anchor_key == fixed.key:
            return self._anchor + (surface - self._anchor_surface)
        return fixed.tokens + surface


@frozen
class _FixedPart:
    """The hash and estimated price of one (system, tools, prefix), kept with the objects
    they were computed from; only exact tuples are trusted to stay as they were."""

    system: str | None
    tools: Sequence[ToolSchema]
    prefix: Sequence[Message]
    key: bytes
    tokens: int

    def describes(
        self, system: str | None, tools: Sequence[ToolSchema], prefix: Sequence[Message]
    ) -> bool:
        return (
            self.system == system
            and self.tools is tools
            and self.prefix is prefix
            and type(tools) is tuple
            and type(prefix) is tuple
        )


def fixed_part_tokens(
    system: str | None, tools: Sequence[ToolSchema], prefix: Sequence[Message]
) -> int:
    return estimate_system(system) + estimate_tools(tools) + estimate_messages(prefix)
