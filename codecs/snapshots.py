"""Fold snapshots ↔ bytes (pure): canonical JSON of a `FoldSnapshot`, its version read first
so a snapshot of another format is refused before anything else is interpreted, followed
by the two arrays with one entry per surface node (`nodes`, `meter.costs`) as they are
packed (little-endian int64s): a load slices them out, and unpacks them only when a fold
needs them, so reading a snapshot does not grow with the surface in Python steps."""

from __future__ import annotations

import sys
import zlib
from array import array
from collections.abc import Iterable
from typing import Any

import orjson
from attrs import evolve

from ..runtime.errors import SessionFormatError
from ..runtime.model.snapshot import SNAPSHOT_VERSION, FoldSnapshot
from .converter import structure_as, unstructure
from .jsonvalue import canonical_json


class SnapshotUnusable(SessionFormatError):
    """A stored fold snapshot that a load must not trust (damaged, another version, not
    keyed to the log it sits beside): the load replays the whole log instead."""


def pack_ints(values: Iterable[int]) -> bytes:
    """`values` as little-endian int64s (what `FoldSnapshot.nodes` and the costs hold)."""
    packed = array("q", values)
    if sys.byteorder != "little":
        packed.byteswap()
    return packed.tobytes()


def unpack_ints(raw: bytes) -> tuple[int, ...]:
    """The ints `pack_ints` packed."""
    unpacked = array("q")
    unpacked.frombytes(raw)
    if sys.byteorder != "little":
        unpacked.byteswap()
    return tuple(unpacked)


def encode_snapshot(snapshot: FoldSnapshot) -> bytes:
    """The snapshot's canonical JSON (the packed arrays' byte counts in it), a newline,
    then the packed nodes and costs."""
    nodes, costs = snapshot.nodes, snapshot.meter.costs
    body = unstructure(evolve(snapshot, nodes=b"", meter=evolve(snapshot.meter, costs=b"")))
    body["packed"] = [len(nodes), len(costs)]
    return canonical_json(body) + b"\n" + nodes + costs


def snapshot_crc(session_id: str, body: bytes) -> int:
    """CRC-32 of a stored snapshot body, keyed by its session."""
    return zlib.crc32(body, zlib.crc32(session_id.encode() + b"\x00snapshot\x00"))


def decode_snapshot(raw: bytes, where: str) -> FoldSnapshot:
    """A `FoldSnapshot` from its bytes; SnapshotUnusable for any other version or shape."""
    end = raw.find(b"\n")
    try:
        body = orjson.loads(raw[:end] if end >= 0 else raw)
    except orjson.JSONDecodeError as exc:
        raise SnapshotUnusable(where, f"snapshot is not JSON: {exc}") from exc
    version = body.get("version") if isinstance(body, dict) else None
    if type(version) is not int or version != SNAPSHOT_VERSION:
        raise SnapshotUnusable(
            where, f"snapshot version {version!r:.20} is not {SNAPSHOT_VERSION}, this build's"
        )
    packed: Any = body.pop("packed", None)
    tail = len(raw) - end - 1
    if (
        end < 0
        or type(packed) is not list
        or len(packed) != 2
        or not all(type(size) is int and size >= 0 and size % 8 == 0 for size in packed)
        or packed[0] + packed[1] != tail
    ):
        raise SnapshotUnusable(where, "snapshot's packed arrays do not match their sizes")
    try:
        snapshot: FoldSnapshot = structure_as(body, FoldSnapshot)
    except SessionFormatError as exc:
        raise SnapshotUnusable(where, f"snapshot does not decode: {exc.problem}") from exc
    start = end + 1
    nodes, costs = raw[start : start + packed[0]], raw[start + packed[0] :]
    return evolve(snapshot, nodes=nodes, meter=evolve(snapshot.meter, costs=costs))
