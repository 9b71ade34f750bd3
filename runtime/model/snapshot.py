"""`FoldSnapshot`: what a load rebuilds from a session's first `length` events (the folds),
stored beside the log so a load replays only the events after it (persistence.md §2.7)."""

from __future__ import annotations

from attrs import field, frozen

from .chunks import TokenUsage
from .header import EpochHeader

SNAPSHOT_VERSION = 1
"""The snapshot format this build writes and trusts; a snapshot of any other version is
ignored (the load replays the whole log). Adding a fold adds a field and bumps it."""


@frozen
class StructureState:
    """`TurnStructure` at the snapshot (`calls_in_step`: call id and seq, in order)."""

    last_turn: int
    open_turn: int | None
    last_step: int
    open_step: int | None
    calls_in_step: tuple[tuple[str, int], ...] = ()
    results_in_step: tuple[str, ...] = ()


@frozen
class MeterState:
    """`TokenMeter` at the snapshot: the estimated cost of each surface node (in surface
    order, packed like `FoldSnapshot.nodes`), their sum, and the usage anchor
    (`anchor_key` hex) if one stands."""

    surface: int
    anchor: int | None = None
    anchor_surface: int = 0
    anchor_key: str | None = None
    costs: bytes = b""


@frozen
class UsageState:
    """`UsageFold` at the snapshot (the session's own usage, from `start` on)."""

    start: int = 0
    model: TokenUsage = field(factory=TokenUsage)
    compaction: TokenUsage = field(factory=TokenUsage)
    model_calls: int = 0
    compaction_calls: int = 0
    unreported: int = 0


@frozen
class FoldSnapshot:
    """The folds over a session's events `0 .. length - 1`: structure, surface (node seqs
    and the `Replace` generation; messages are projected from their events on first use),
    header, token meter and usage. Stored keyed by seq `length - 1` and that row's checksum."""

    version: int
    length: int
    structure: StructureState
    generation: int
    header: EpochHeader | None
    meter: MeterState
    usage: UsageState
    key_crc: int = 0
    """The checksum of the row at seq `length - 1` as the session that took the snapshot
    would store it (`codecs.rows.event_crc`): a store saves the snapshot only beside that
    very row."""
    nodes: bytes = b""
    """The surface's node seqs in order, packed (little-endian int64 each,
    `codecs.snapshots.pack_ints`): a load unpacks them only when it needs them."""
