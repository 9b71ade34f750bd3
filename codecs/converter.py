"""The one cattrs converter for events, headers, deltas, messages and chunks.

Unstructuring omits fields equal to their default (canonical absence); structuring is
strict: no extra keys, no type coercion, typed errors naming the seq.

Encoded bytes (`encode_event`, `canonical_bytes`) are canonical JSON with sorted keys,
except the JSON a user hands over to reach the model verbatim — tool parameter schemas,
response-format schemas and `extra_body` — which keeps the key order it was written in
(docs/decisions/0007-tool-schema-key-order.md).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any, get_args, get_origin

import cattrs
import orjson
from attrs import frozen
from cattrs.strategies import configure_tagged_union

from ..runtime.errors import SessionFormatError
from ..runtime.model.chunks import (
    BlockEnd,
    BlockStart,
    Finish,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
    UsageReport,
)
from ..runtime.model.events import (
    DATA_BY_TYPE,
    Append,
    IgnorableData,
    Replace,
    SessionEvent,
    SurfaceOp,
)
from ..runtime.model.header import EpochHeader, LlmCallConfig, ResponseFormat, ToolSchema
from ..runtime.model.messages import Block, Reasoning, Text, ToolCall, ToolResult
from .canonical import CanonicalChecks
from .fastdecode import DecoderBuilder
from .jsonvalue import (
    MAX_SAFE_INT,
    FrozenDict,
    JsonValueError,
    _check_scalar,
    _dumps,
    canonical_json,
    freeze_object,
    loads_json,
)

BLOCK_TAGS: dict[type, str] = {
    Text: "text",
    Reasoning: "reasoning",
    ToolCall: "tool_call",
    ToolResult: "tool_result",
}
CHUNK_TAGS: dict[type, str] = {
    BlockStart: "block_start",
    TextDelta: "text_delta",
    ReasoningDelta: "reasoning_delta",
    ToolCallDelta: "tool_call_delta",
    BlockEnd: "block_end",
    UsageReport: "usage",
    Finish: "finish",
}
OP_TAGS: dict[type, str] = {Append: "append", Replace: "replace"}
ORDERED_FIELDS: tuple[tuple[type, tuple[str, ...]], ...] = (
    (ToolSchema, ("parameters",)),
    (ResponseFormat, ("schema",)),
    (LlmCallConfig, ("extra_body",)),
)
"""Fields holding user-written JSON that reaches the model verbatim: encoded in the order
written (in dependency order: a class comes before the classes that contain it)."""
EMPTY_IS_ABSENT: dict[type, tuple[str, ...]] = {
    EpochHeader: ("system", "tools", "message_prefix"),
}
"""Fields whose empty value is written as absent (docs/spec/session-log.md §6.3), so it
comes back as None."""


def ordered_fragment(value: object) -> orjson.Fragment:
    """`value` as JSON with its keys in insertion order, embedded verbatim by canonical_json
    (orjson does not sort inside a fragment)."""
    return orjson.Fragment(_dumps(value, sort_keys=False))


def _register_ordered(conv: cattrs.Converter, cls: type, names: tuple[str, ...]) -> None:
    plain = conv.get_unstructure_hook(cls)

    def unstructure(value: Any) -> Any:
        body = plain(value)
        for name in names:
            if name in body:
                body[name] = ordered_fragment(body[name])
        return body

    conv.register_unstructure_hook(cls, unstructure)


def _strict(kind: type, check: Callable[[Any], bool]) -> Callable[[Any, type], Any]:
    def structure(value: Any, _: type) -> Any:
        if not check(value):
            raise TypeError(f"expected {kind.__name__}, got {type(value).__name__} {value!r:.40}")
        return value

    return structure


def _structure_int(value: Any, _: type) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected int, got {type(value).__name__} {value!r:.40}")
    if not -MAX_SAFE_INT <= value <= MAX_SAFE_INT:
        raise ValueError(f"integer {value} is outside ±(2^53−1)")
    return value


def _structure_float(value: Any, _: type) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"expected a number, got {type(value).__name__}")
    # Same discipline as freeze_json (docs/spec/session-log.md §9.2): no non-finite values,
    # no negative zero.
    _check_scalar(value, "$")
    return float(value)


def _is_homogeneous_tuple(cls: Any) -> bool:
    args = get_args(cls)
    return get_origin(cls) is tuple and len(args) == 2 and args[1] is Ellipsis


def _strict_tuple_factory(cls: Any, conv: cattrs.Converter) -> Callable[[Any, type], Any]:
    """`tuple[X, ...]` accepts only a JSON array (list or tuple): cattrs' default would
    iterate any iterable, turning a string into a tuple of characters (a silent coercion)."""
    item_type = get_args(cls)[0]
    structure_item = conv.get_structure_hook(item_type)

    def structure(value: Any, _: type) -> tuple[Any, ...]:
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"expected an array, got {type(value).__name__} {value!r:.40}")
        return tuple(structure_item(item, item_type) for item in value)

    return structure


def _build_converter(*, ordered: bool = False) -> cattrs.Converter:
    """The strict converter; `ordered=True` gives the encoder's variant, whose ORDERED_FIELDS
    unstructure to order-preserving fragments (bytes only: the plain variant's output is
    what values are detached and frozen through)."""
    conv = cattrs.Converter(omit_if_default=True, forbid_extra_keys=True, detailed_validation=False)
    conv.register_structure_hook(str, _strict(str, lambda v: isinstance(v, str)))
    conv.register_structure_hook(bool, _strict(bool, lambda v: isinstance(v, bool)))
    conv.register_structure_hook(int, _structure_int)
    conv.register_structure_hook(float, _structure_float)
    conv.register_structure_hook_factory(_is_homogeneous_tuple, _strict_tuple_factory)
    conv.register_structure_hook(FrozenDict, lambda v, _: freeze_object(v))
    conv.register_unstructure_hook(FrozenDict, lambda v: v)
    if ordered:
        for cls, names in ORDERED_FIELDS:
            _register_ordered(conv, cls, names)
    configure_tagged_union(
        Block,
        conv,
        tag_generator=BLOCK_TAGS.__getitem__,
        tag_name="type",
    )
    configure_tagged_union(
        StreamChunk,
        conv,
        tag_generator=CHUNK_TAGS.__getitem__,
        tag_name="type",
    )
    configure_tagged_union(
        SurfaceOp,
        conv,
        tag_generator=OP_TAGS.__getitem__,
        tag_name="op",
    )
    # Canonical form (docs/spec/session-log.md §6.3): an empty system, tools or message_prefix
    # is absent (key omitted).
    header_hook = conv.get_unstructure_hook(EpochHeader)
    absent_when_empty = EMPTY_IS_ABSENT[EpochHeader]

    def unstructure_header(header: EpochHeader) -> Any:
        fields = [getattr(header, name) for name in absent_when_empty]
        if any(value is not None and not value for value in fields):
            header = EpochHeader(
                header.config,
                header.system or None,
                header.tools or None,
                header.message_prefix or None,
            )
        return header_hook(header)

    conv.register_unstructure_hook(EpochHeader, unstructure_header)
    return conv


converter = _build_converter()


@frozen
class _Hooks:
    """The encoder and the checked decoder's per-type hooks."""

    encoder: cattrs.Converter
    unstructure_data: Mapping[type, Callable[[Any], Any]]
    unstructure_op: Callable[[Any], Any]
    structure_data: Mapping[str, Callable[[Any, type], Any]]


_hooks_lock = threading.Lock()


@cache
def _hooks() -> _Hooks:
    """Built on first use, not at import (a reader of well-formed logs, `sessions list`,
    takes only the generated decoders). Under a lock: store threads encode too, and the
    strict converter's hook cache is shared."""
    with _hooks_lock:
        encoder = _build_converter(ordered=True)
        return _Hooks(
            encoder=encoder,
            unstructure_data={
                cls: encoder.get_unstructure_hook(cls) for cls in DATA_BY_TYPE.values()
            },
            unstructure_op=encoder.get_unstructure_hook(SurfaceOp),
            structure_data={
                name: converter.get_structure_hook(cls) for name, cls in DATA_BY_TYPE.items()
            },
        )


_fast = DecoderBuilder(
    converter,
    {
        frozenset(tags): (tag_key, tags)
        for tags, tag_key in ((BLOCK_TAGS, "type"), (CHUNK_TAGS, "type"), (OP_TAGS, "op"))
    },
)


class _DecodersOnDemand(dict[str, Callable[[Any], SessionEvent]]):
    """The generated event decoders by type, each generated the first time its type is
    looked up (a listing reads a few of the types; generating all of them is most of the
    codec's import). A plain dict once generated: the hot path's look-up stays a dict's."""

    def __missing__(self, event_type: str) -> Callable[[Any], SessionEvent]:
        data = DATA_BY_TYPE[event_type]  # an unknown type: KeyError, the converter decides
        decoder = _fast.variants(SessionEvent, "data", {event_type: data})[event_type]
        return self.setdefault(event_type, decoder)


FAST_DECODERS: Mapping[str, Callable[[Any], SessionEvent]] = _DecodersOnDemand()
"""The generated decoder of a whole event (envelope and data in one function) by its type,
also for a reader taking parsed objects one by one: a type missing, or any exception, means
the input is for `event_from_dict` to decide."""


def _fast_event(body: Any) -> SessionEvent:
    """The generated decoder of an event object; raises (NotFast, KeyError, ...) where the
    strict converter must decide."""
    return FAST_DECODERS[body["type"]](body)


_canonical = CanonicalChecks(
    (tuple(BLOCK_TAGS), tuple(CHUNK_TAGS), tuple(OP_TAGS)),
    EMPTY_IS_ABSENT,
)
_structure_op = converter.get_structure_hook(SurfaceOp)

_DECODE_FAILURES = (
    KeyError,
    TypeError,
    ValueError,
    AttributeError,
    JsonValueError,
    cattrs.BaseValidationError,
    cattrs.errors.CattrsError,  # includes ForbiddenExtraKeysError and unknown Literal values
)
_ENVELOPE_KEYS = frozenset(
    {"type", "seq", "time", "data", "source_event_seqs", "surface_op", "ignorable"}
)


def is_canonical(value: object) -> bool:
    """True if the attrs domain value `value` is deeply immutable, exactly typed and in
    canonical form: detaching it through the codec would give back an equal value."""
    return _canonical.check(value)


def unstructure(value: object) -> Any:
    """Plain JSON values (dicts, lists, FrozenDicts) of a domain value; key order is kept."""
    return converter.unstructure(value)


def canonical_bytes(value: object) -> bytes:
    """Canonical JSON of any attrs value of the domain model (sorted keys, no spaces; the
    ORDERED_FIELDS keep the order written). Equality of headers and configs compares these."""
    return canonical_json(_hooks().encoder.unstructure(value))


def event_to_dict(event: SessionEvent) -> dict[str, Any]:
    """The event as a JSON-ready object for orjson (ORDERED_FIELDS are fragments)."""
    data = event.data
    body: dict[str, Any] = {
        "type": event.type,
        "seq": event.seq,
        "time": event.time,
        "data": data.payload
        if isinstance(data, IgnorableData)
        else _hooks().unstructure_data[type(data)](data),
    }
    if event.source_event_seqs is not None:
        body["source_event_seqs"] = event.source_event_seqs
    if event.surface_op is not None:
        body["surface_op"] = _hooks().unstructure_op(event.surface_op)
    if event.ignorable:
        body["ignorable"] = True
    return body


def encode_event(event: SessionEvent) -> bytes:
    return canonical_json(event_to_dict(event))


def _format_error(where: str, problem: object) -> SessionFormatError:
    return SessionFormatError(where, str(problem))


def event_from_dict(body: Any, where: str | None = None) -> SessionEvent:
    """Strictly structure one decoded event object; errors name the seq (or `where`).

    Well-formed JSON takes the generated decoders; anything they do not vouch for is decided
    (and reported) by the strict converter.
    """
    if type(body) is dict:
        try:
            return FAST_DECODERS[body["type"]](body)
        except Exception:  # NotFast, or any failure: the checked path below decides
            pass
    return _checked_event_from_dict(body, where)


def _checked_event_from_dict(body: Any, where: str | None) -> SessionEvent:
    if not isinstance(body, dict):
        raise _format_error(where or "event", f"expected an object, got {type(body).__name__}")
    seq = body.get("seq")
    label = where or (f"event seq {seq}" if isinstance(seq, int) else "event")
    extra = body.keys() - _ENVELOPE_KEYS
    if extra:
        raise _format_error(label, f"unknown envelope keys {sorted(extra)}")
    try:
        event_type = body["type"]
        if not isinstance(event_type, str):
            raise TypeError("type must be a string")
        ignorable = body.get("ignorable", False)
        if not isinstance(ignorable, bool):
            raise TypeError("ignorable must be a boolean")
        raw_data = body["data"]
        structure_data = _hooks().structure_data.get(event_type)
        if structure_data is None:
            if not ignorable:
                raise TypeError(f"unknown event type {event_type!r} (not marked ignorable)")
            data: Any = IgnorableData(freeze_object(raw_data, "$.data"))
        else:
            data = structure_data(raw_data, DATA_BY_TYPE[event_type])
        seqs = body.get("source_event_seqs")
        op = body.get("surface_op")
        event = SessionEvent(
            type=event_type,
            seq=converter.structure(body["seq"], int),
            time=converter.structure(body["time"], int),
            data=data,
            source_event_seqs=None if seqs is None else converter.structure(seqs, tuple[int, ...]),
            surface_op=None if op is None else _structure_op(op, SurfaceOp),
            ignorable=ignorable,
        )
    except SessionFormatError:
        raise
    except _DECODE_FAILURES as exc:
        problem = f"missing key {exc}" if isinstance(exc, KeyError) else exc
        raise _format_error(label, problem) from exc
    return event


def decode_event(raw: bytes | str, where: str | None = None) -> SessionEvent:
    """Decode one event's JSON strictly; errors are SessionFormatError naming `where`."""
    try:
        body = orjson.loads(raw)
        if type(body) is dict:
            return FAST_DECODERS[body["type"]](body)
    except Exception:  # NotFast, invalid or too deep JSON: the checked path decides
        pass
    try:
        body = loads_json(raw)
    except (orjson.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _format_error(where or "event", f"invalid JSON: {exc}") from exc
    return event_from_dict(body, where)


def structure_as(value: Any, cls: type[Any]) -> Any:
    """Strictly structure `value` as `cls`; raises SessionFormatError on mismatch."""
    try:
        return converter.structure(value, cls)
    except _DECODE_FAILURES as exc:
        raise _format_error(getattr(cls, "__name__", str(cls)), exc) from exc
