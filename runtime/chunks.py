"""Provider stream chunks, token usage, and the assembler that folds chunks into content."""

from __future__ import annotations

from typing import Literal, TypeAlias

from attrs import frozen

from actorloop.runtime.errors import StreamProtocolError
from actorloop.runtime.messages import Block, Reasoning, Text, ToolCall

BlockKind: TypeAlias = Literal["text", "reasoning", "tool_call"]
FinishKind: TypeAlias = Literal["stop", "tool-calls", "max-tokens", "error"]


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
    value seen for a block wins)."""

    index: int
    text: str
    signature: str | None = None
    redacted: str | None = None
    encrypted_content: str | None = None
    item_id: str | None = None


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
        "parts",
        "redacted",
        "signature",
    )

    def __init__(self, kind: BlockKind, call_id: str | None, name: str | None) -> None:
        self.kind = kind
        self.call_id = call_id
        self.name = name
        self.parts: list[str] = []
        self.signature: str | None = None
        self.redacted: str | None = None
        self.encrypted_content: str | None = None
        self.item_id: str | None = None

    def take(self, delta: ReasoningDelta) -> None:
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
            return Reasoning(
                body, self.signature, self.redacted, self.encrypted_content, self.item_id
            )
        return ToolCall(self.call_id or "", self.name or "", body)


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
            expected = {TextDelta: "text", ReasoningDelta: "reasoning", ToolCallDelta: "tool_call"}
            if block is None or block.kind != expected[type(chunk)]:
                raise StreamProtocolError(
                    f"{type(chunk).__name__} for block {chunk.index} that is not an open "
                    f"{expected[type(chunk)]} block"
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
