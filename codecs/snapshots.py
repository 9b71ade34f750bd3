"""Fold snapshots ↔ bytes (pure): canonical JSON of a `FoldSnapshot`, its version read first
so a snapshot of another format is refused before anything else is interpreted."""

from __future__ import annotations

import zlib
from typing import Any

import orjson
from attrs import evolve

from ..runtime.errors import SessionFormatError
from ..runtime.model.snapshot import SNAPSHOT_VERSION, FoldSnapshot
from .converter import canonical_bytes, structure_as


class SnapshotUnusable(SessionFormatError):
    """A stored fold snapshot that a load must not trust (damaged, another version, not
    keyed to the log it sits beside): the load replays the whole log instead."""


def encode_snapshot(snapshot: FoldSnapshot) -> bytes:
    """The snapshot's canonical JSON."""
    return canonical_bytes(snapshot)


def snapshot_crc(session_id: str, body: bytes) -> int:
    """CRC-32 of a stored snapshot body, keyed by its session."""
    return zlib.crc32(body, zlib.crc32(session_id.encode() + b"\x00snapshot\x00"))


def decode_snapshot(raw: bytes, where: str) -> FoldSnapshot:
    """A `FoldSnapshot` from its bytes; SnapshotUnusable for any other version or shape."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise SnapshotUnusable(where, f"snapshot is not JSON: {exc}") from exc
    version = body.get("version") if isinstance(body, dict) else None
    if type(version) is not int or version != SNAPSHOT_VERSION:
        raise SnapshotUnusable(
            where, f"snapshot version {version!r:.20} is not {SNAPSHOT_VERSION}, this build's"
        )
    # The two long int arrays (one entry per surface node) are checked here in bulk: the
    # converter's per-element hook would make the decode grow with the surface.
    meter = body.get("meter")
    nodes: Any = body.get("nodes")
    costs: Any = meter.get("costs") if isinstance(meter, dict) else None
    if not (_ints(nodes) and _ints(costs)):
        raise SnapshotUnusable(where, "snapshot nodes or costs are not arrays of ints >= 0")
    body["nodes"], meter["costs"] = [], []
    try:
        snapshot: FoldSnapshot = structure_as(body, FoldSnapshot)
    except SessionFormatError as exc:
        raise SnapshotUnusable(where, f"snapshot does not decode: {exc.problem}") from exc
    return evolve(snapshot, nodes=tuple(nodes), meter=evolve(snapshot.meter, costs=tuple(costs)))


def _ints(value: object) -> bool:
    """Whether `value` is a list of ints >= 0 (bools excluded), checked in C loops."""
    if type(value) is not list:
        return False
    return not value or (set(map(type, value)) == {int} and min(value) >= 0)
