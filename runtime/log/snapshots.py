"""Fold snapshots taken from a session and a session restored from one (persistence.md
§2.7): the folds a load would rebuild by replaying the first `length` events, without
reading those events (they are read lazily, `LazyPrefix`).

Adding a fold (a new slot of `FoldState`, or state a load computes from the whole log):
add its state to `FoldSnapshot` (`runtime/model/snapshot.py`) with a default, fill it in
`take_snapshot`, rebuild it in `restore`, and bump `SNAPSHOT_VERSION` so that snapshots
written without it are ignored (a full replay) rather than trusted.
`tests/stores/test_fold_snapshots.py` fails on a `FoldState` slot this module does not
know."""

from __future__ import annotations

from collections.abc import Sequence

from ...codecs.converter import encode_event
from ...codecs.rows import event_crc
from ...codecs.snapshots import pack_ints, unpack_ints
from ..errors import SessionFormatError, SessionValidationError
from ..model.messages import Message
from ..model.meta import SessionMeta
from ..model.snapshot import SNAPSHOT_VERSION, FoldSnapshot, StructureState, UsageState
from .event_log import EventLog, FoldState, LazyPrefix
from .session import Session
from .structure import TurnStructure
from .surface import SurfaceFold, project
from .tokens import TokenMeter
from .usage import UsageFold, UsageTotals

SNAPSHOT_EVERY = 512
"""Fewest events appended since the last snapshot before a loop takes the next one."""


def snapshot_due(session: Session, taken_at: int) -> bool:
    """Whether a loop should snapshot `session` now, its last snapshot covering `taken_at`
    events: at a turn boundary, once `SNAPSHOT_EVERY` events or an eighth of the surface's
    nodes (whichever is more: a snapshot's size grows with the surface) came since."""
    if session.open_turn is not None:
        return False
    return len(session) - taken_at >= max(SNAPSHOT_EVERY, len(session.surface_fold) // 8)


def take_snapshot(session: Session, meter: TokenMeter) -> FoldSnapshot | None:
    """The snapshot of `session`'s folds now, or None inside a turn (snapshots are taken
    at turn boundaries only, so a load's repair never needs the events before one)."""
    folds = session.folds
    structure = folds.structure
    if structure.open_turn is not None or structure.open_step is not None or not len(session):
        return None
    meter_state = meter.state()
    usage = folds.usage.totals()
    last = session.event(len(session) - 1)
    return FoldSnapshot(
        version=SNAPSHOT_VERSION,
        length=len(session),
        key_crc=event_crc(session.id, last.seq, encode_event(last)),
        structure=StructureState(
            structure.last_turn,
            structure.open_turn,
            structure.last_step,
            structure.open_step,
            tuple(structure.calls_in_step.items()),
            tuple(structure.results_in_step),
        ),
        nodes=pack_ints(folds.surface.nodes),
        generation=folds.surface.generation,
        header=folds.header.current,
        meter=meter_state,
        usage=UsageState(
            folds.usage.start,
            usage.model,
            usage.compaction,
            usage.model_calls,
            usage.compaction_calls,
            usage.unreported,
        ),
    )


def snapshot_problem(meta: SessionMeta, snapshot: FoldSnapshot, head: int) -> str | None:
    """Why `snapshot` cannot stand for the first events of `meta`'s log of `head` events
    (None: it can). What the checksums cannot tell: its shape against its own length."""
    length = snapshot.length
    if snapshot.version != SNAPSHOT_VERSION:
        return f"version {snapshot.version} is not {SNAPSHOT_VERSION}"
    if not (meta.seed_length or 0) < length <= head:
        return f"its length {length} is not within the session's own events (head {head})"
    if snapshot.structure.open_turn is not None or snapshot.structure.open_step is not None:
        return "it was taken inside a turn"
    if len(snapshot.nodes) != len(snapshot.meter.costs) or len(snapshot.nodes) % 8:
        return "its surface nodes and their costs disagree"
    if snapshot.usage.start != (meta.seed_length or 0):
        return "its usage does not start at the session's own events"
    return None


def restore(meta: SessionMeta, snapshot: FoldSnapshot, prefix: LazyPrefix) -> Session:
    """A session whose folds are `snapshot`'s and whose first `snapshot.length` events are
    `prefix` (read on first access). Call `extend_loaded` with the events after it."""
    if len(prefix) != snapshot.length:
        raise SessionFormatError("snapshot", "the prefix is not the snapshot's length")
    state = FoldState(meta.seed_length or 0)
    saved = snapshot.structure
    state.structure = TurnStructure(
        saved.last_turn,
        saved.open_turn,
        saved.last_step,
        saved.open_step,
        dict(saved.calls_in_step),
        dict.fromkeys(saved.results_in_step),
    )
    packed = snapshot.nodes
    length = snapshot.length

    def nodes() -> list[int]:
        unpacked = list(unpack_ints(packed))
        if unpacked and (min(unpacked) < 0 or max(unpacked) >= length):
            seq = next(seq for seq in unpacked if not 0 <= seq < length)
            raise SessionValidationError(seq, "a restored surface node lies outside its log")
        return unpacked

    def derive(seqs: Sequence[int]) -> Sequence[Message | None]:
        return [project(event) for event in prefix.pick(seqs)]

    state.surface = SurfaceFold.restored(len(packed) // 8, nodes, snapshot.generation, derive)
    state.header.current = snapshot.header
    usage = snapshot.usage
    state.usage = UsageFold.restored(
        usage.start,
        UsageTotals(
            usage.model,
            usage.compaction,
            usage.model_calls,
            usage.compaction_calls,
            usage.unreported,
        ),
    )
    return Session.restored(meta, EventLog(prefix, snapshot.length), state, snapshot)
