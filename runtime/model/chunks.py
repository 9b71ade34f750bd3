"""Provider stream chunks, token usage, the assembler that folds chunks into content, and
the checks of what providers and tools hand the loop (`check_chunk`, `check_tool_output`)."""

from __future__ import annotations

import itertools
from typing import Literal, TypeAlias, get_args

from attrs import frozen

from ...codecs.jsonvalue import MAX_SAFE_INT, check_text
from ..errors import JsonValueError, StreamProtocolError, ToolOutputError
from .messages import Block, Reasoning, Text, ToolCall

SUMMARY_JOINER = "\n\n"
"""Joins the parts of a reasoning summary into `Reasoning.text`."""

BlockKind: TypeAlias = Literal["text", "reasoning", "tool_call"]
# `pause`: the provider paused a long turn (Anthropic `pause_turn`); the loop continues it
# by sending the history, which holds the paused content, as the next step's request.
FinishKind: TypeAlias = Literal["stop", "tool-calls", "max-tokens", "pause", "error"]


@frozen
class TokenUsage:
    """Disjoint buckets: `input` is uncached input.

    Billed input = input + cache_read + cache_write.
    """

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    reasoning: int = 0

    @property
    def prompt_total(self) -> int:
        """Billed input: uncached input plus cache reads and writes."""
        return self.input + self.cache_read + self.cache_write

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            self.input + other.input,
            self.output + other.output,
            self.cache_read + other.cache_read,
            self.cache_write + other.cache_write,
            self.reasoning + other.reasoning,
        )


@frozen
class ErrorInfo:
    """A typed error as it is recorded in the log: a message and an optional stable code."""

    message: str
    code: str | None = None


@frozen
class BlockStart:
    index: int
    kind: BlockKind
    call_id: str | None = None
    name: str | None = None


@frozen
class TextDelta:
    index: int
    text: str


@frozen
class ReasoningDelta:
    """Reasoning text; the optional fields carry `Reasoning`'s opaque replay data (the last
    value seen for a block wins). `part` is the summary part the text belongs to: None for
    the block's current part (the first, at the start), else the current one or the next
    (a summary of several parts becomes `Reasoning.parts`)."""

    index: int
    text: str
    signature: str | None = None
    redacted: str | None = None
    encrypted_content: str | None = None
    item_id: str | None = None
    part: int | None = None


@frozen
class ToolCallDelta:
    index: int
    arguments: str


@frozen
class BlockEnd:
    index: int


@frozen
class UsageReport:
    usage: TokenUsage


@frozen
class Finish:
    kind: FinishKind
    error: ErrorInfo | None = None


StreamChunk: TypeAlias = (
    BlockStart | TextDelta | ReasoningDelta | ToolCallDelta | BlockEnd | UsageReport | Finish
)


class _OpenBlock:
    __slots__ = (
        "call_id",
        "encrypted_content",
        "item_id",
        "kind",
        "name",
        "part_starts",
        "parts",
        "redacted",
        "signature",
    )

    def __init__(self, kind: BlockKind, call_id: str | None, name: str | None) -> None:
        self.kind = kind
        self.call_id = call_id
        self.name = name
        self.parts: list[str] = []
        # Where each summary part after the first starts in `parts`.
        self.part_starts: list[int] = []
        self.signature: str | None = None
        self.redacted: str | None = None
        self.encrypted_content: str | None = None
        self.item_id: str | None = None

    def take(self, delta: ReasoningDelta) -> None:
        """Fold `delta` (whose text is already in `parts`, last) into the block's data."""
        current = len(self.part_starts)
        if delta.part is not None and delta.part != current:
            if delta.part != current + 1:
                raise StreamProtocolError(
                    f"reasoning block delta for summary part {delta.part} after part {current}"
                )
            self.part_starts.append(len(self.parts) - 1)
        if delta.signature:
            self.signature = delta.signature
        if delta.redacted:
            self.redacted = delta.redacted
        if delta.encrypted_content:
            self.encrypted_content = delta.encrypted_content
        if delta.item_id:
            self.item_id = delta.item_id

    def build(self) -> Block:
        body = "".join(self.parts)
        if self.kind == "text":
            return Text(body)
        if self.kind == "reasoning":
            parts = None
            if self.part_starts:
                bounds = [0, *self.part_starts, len(self.parts)]
                parts = tuple(
                    "".join(self.parts[start:end]) for start, end in itertools.pairwise(bounds)
                )
                body = SUMMARY_JOINER.join(parts)
            return Reasoning(
                body, self.signature, self.redacted, self.encrypted_content, self.item_id, parts
            )
        return ToolCall(self.call_id or "", self.name or "", body)


_DELTA_KINDS: dict[type, BlockKind] = {
    TextDelta: "text",
    ReasoningDelta: "reasoning",
    ToolCallDelta: "tool_call",
}
"""The kind of block each delta chunk continues."""


class ChunkAssembler:
    """Folds a chunk stream into content blocks (in block-index order), usage and finish."""

    def __init__(self) -> None:
        self._blocks: dict[int, _OpenBlock] = {}
        self.usage: TokenUsage | None = None
        self.finish: Finish | None = None

    def feed(self, chunk: StreamChunk) -> None:
        if isinstance(chunk, BlockStart):
            if chunk.index in self._blocks:
                raise StreamProtocolError(f"block {chunk.index} started twice")
            if chunk.kind == "tool_call" and not (chunk.call_id and chunk.name):
                raise StreamProtocolError(f"tool_call block {chunk.index} lacks call_id or name")
            self._blocks[chunk.index] = _OpenBlock(chunk.kind, chunk.call_id, chunk.name)
        elif isinstance(chunk, (TextDelta, ReasoningDelta, ToolCallDelta)):
            block = self._blocks.get(chunk.index)
            if block is None or block.kind != _DELTA_KINDS[type(chunk)]:
                raise StreamProtocolError(
                    f"{type(chunk).__name__} for block {chunk.index} that is not an open "
                    f"{_DELTA_KINDS[type(chunk)]} block"
                )
            block.parts.append(chunk.arguments if isinstance(chunk, ToolCallDelta) else chunk.text)
            if isinstance(chunk, ReasoningDelta):
                block.take(chunk)
        elif isinstance(chunk, UsageReport):
            self.usage = chunk.usage if self.usage is None else self.usage + chunk.usage
        elif isinstance(chunk, Finish):
            self.finish = chunk
        # BlockEnd carries no content: blocks are materialized in index order at the end.

    def content(self, *, drop_tool_calls: bool = False) -> tuple[Block, ...]:
        blocks = (self._blocks[index].build() for index in sorted(self._blocks))
        return tuple(
            block
            for block in blocks
            if not (drop_tool_calls and isinstance(block, ToolCall))
            and not (isinstance(block, Text) and block.text == "")
        )


# ---------------------------------------------------------------------- checks at the seams

CHUNK_TYPES: tuple[type, ...] = get_args(StreamChunk)
_BLOCK_KINDS: tuple[str, ...] = get_args(BlockKind)
_FINISH_KINDS: tuple[str, ...] = get_args(FinishKind)


def _fail(where: str, expected: str, value: object) -> StreamProtocolError:
    return StreamProtocolError(
        f"{where} must be {expected}, got {type(value).__name__} {value!r:.40}"
    )


def _count(value: object, where: str) -> None:
    if type(value) is not int or not 0 <= value <= MAX_SAFE_INT:
        raise _fail(where, "an int >= 0", value)


def _text(value: object, where: str, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if type(value) is not str:
        raise _fail(where, "a str or None" if optional else "a str", value)
    try:
        check_text(value, where)
    except JsonValueError as exc:
        raise StreamProtocolError(str(exc)) from exc


def _one_of(value: object, allowed: tuple[str, ...], where: str) -> None:
    if type(value) is not str or value not in allowed:
        raise _fail(where, f"one of {', '.join(allowed)}", value)


def check_chunk(chunk: object) -> StreamChunk:
    """`chunk` if it is a stream chunk whose every field has its declared type and whose
    strings are encodable (no lone surrogate); otherwise StreamProtocolError saying which
    field is wrong. The loop calls this on each chunk before appending it."""
    name = type(chunk).__name__
    if isinstance(chunk, BlockStart):
        _count(chunk.index, f"{name}.index")
        _one_of(chunk.kind, _BLOCK_KINDS, f"{name}.kind")
        _text(chunk.call_id, f"{name}.call_id", optional=True)
        _text(chunk.name, f"{name}.name", optional=True)
    elif isinstance(chunk, (TextDelta, ReasoningDelta)):
        _count(chunk.index, f"{name}.index")
        _text(chunk.text, f"{name}.text")
        if isinstance(chunk, ReasoningDelta):
            _text(chunk.signature, f"{name}.signature", optional=True)
            if chunk.part is not None:
                _count(chunk.part, f"{name}.part")
    elif isinstance(chunk, ToolCallDelta):
        _count(chunk.index, f"{name}.index")
        _text(chunk.arguments, f"{name}.arguments")
    elif isinstance(chunk, BlockEnd):
        _count(chunk.index, f"{name}.index")
    elif isinstance(chunk, UsageReport):
        usage = chunk.usage
        if type(usage) is not TokenUsage:
            raise _fail(f"{name}.usage", "a TokenUsage", usage)
        for bucket in ("input", "output", "cache_read", "cache_write", "reasoning"):
            _count(getattr(usage, bucket), f"{name}.usage.{bucket}")
    elif isinstance(chunk, Finish):
        _one_of(chunk.kind, _FINISH_KINDS, f"{name}.kind")
        error = chunk.error
        if error is not None:
            if type(error) is not ErrorInfo:
                raise _fail(f"{name}.error", "an ErrorInfo or None", error)
            _text(error.message, f"{name}.error.message")
            _text(error.code, f"{name}.error.code", optional=True)
    else:
        raise StreamProtocolError(
            f"provider yielded {name} {chunk!r:.40}, not a stream chunk "
            f"({', '.join(cls.__name__ for cls in CHUNK_TYPES)})"
        )
    if type(chunk) not in CHUNK_TYPES:
        raise StreamProtocolError(f"provider yielded {name}, a subclass of a stream chunk")
    return chunk


def check_tool_output(output: object) -> tuple[Text, ...]:
    """A tool's output as text blocks: a str, or a tuple/list of `Text` whose `text` is a
    str; every string encodable (no lone surrogate). Anything else raises ToolOutputError
    (code INVALID_TOOL_OUTPUT), for the loop to record as that tool's error result."""
    try:
        if type(output) is str:
            check_text(output, "output")
            return (Text(output),)
        if isinstance(output, (tuple, list)):
            for index, block in enumerate(output):
                if type(block) is not Text:
                    raise ToolOutputError(
                        f"tool output block {index} is {type(block).__name__}, expected Text"
                    )
                if type(block.text) is not str:
                    raise ToolOutputError(
                        f"tool output block {index}: Text.text is "
                        f"{type(block.text).__name__}, expected str"
                    )
                check_text(block.text, f"output[{index}].text")
            return tuple(output)
    except JsonValueError as exc:
        raise ToolOutputError(f"tool output at {exc.path}: {exc.problem}") from exc
    raise ToolOutputError(
        f"tool returned {type(output).__name__}; expected a str or a tuple of Text"
    )
