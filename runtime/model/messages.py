"""Messages, content blocks and message sources: the frozen vocabulary of conversation content."""

from __future__ import annotations

from typing import Literal, TypeAlias

from attrs import frozen

from ..errors import ContentError

Role: TypeAlias = Literal["system", "user", "assistant"]


@frozen
class Text:
    """A text block."""

    text: str


@frozen
class Reasoning:
    """A reasoning block. The optional fields are provider-opaque data that must be sent back
    unchanged: `signature` (the provider's proof, Anthropic thinking), `redacted` (the data
    of an Anthropic `redacted_thinking` block), `encrypted_content` and `item_id` (an OpenAI
    Responses reasoning item). `parts` holds a summary that came in several parts (an
    OpenAI Responses item's `summary_text` parts, replayed as they came); `text` is then
    those parts joined by a blank line. It is None (canonically absent) for a single part."""

    text: str
    signature: str | None = None
    redacted: str | None = None
    encrypted_content: str | None = None
    item_id: str | None = None
    parts: tuple[str, ...] | None = None


@frozen
class ToolCall:
    """A model's request to run a tool; `arguments` is the raw JSON string the model produced."""

    id: str
    name: str
    arguments: str


@frozen
class ToolResult:
    """The answer to a tool call, as the model sees it in the next request."""

    tool_call_id: str
    content: tuple[Text, ...]
    is_error: bool = False


Block: TypeAlias = Text | Reasoning | ToolCall | ToolResult
Content: TypeAlias = tuple[Block, ...]
BLOCK_TYPES = (Text, Reasoning, ToolCall, ToolResult)


@frozen
class Message:
    """One conversation message: a role and a tuple of content blocks."""

    role: Role
    content: Content

    @classmethod
    def user(cls, text: str) -> Message:
        """A user message with one text block."""
        return cls("user", (Text(text),))

    @classmethod
    def assistant(cls, text: str) -> Message:
        """An assistant message with one text block."""
        return cls("assistant", (Text(text),))

    @classmethod
    def system(cls, text: str) -> Message:
        """A system-role message with one text block."""
        return cls("system", (Text(text),))

    @property
    def text(self) -> str:
        """The concatenated text blocks (a convenience for tests and displays)."""
        return "".join(block.text for block in self.content if isinstance(block, Text))


@frozen
class Source:
    """Who produced a message: the user, or a named plugin."""

    kind: Literal["user", "plugin"]
    plugin: str | None = None

    @classmethod
    def of_plugin(cls, name: str) -> Source:
        """The source of messages a named plugin contributes."""
        return cls("plugin", name)


USER = Source("user")


def as_content(content: str | Content | list[Block]) -> Content:
    """Normalize what users pass to `send`/`inject`: a string or a sequence of blocks."""
    if isinstance(content, str):
        return (Text(content),)
    if isinstance(content, (tuple, list)):
        for index, block in enumerate(content):
            if not isinstance(block, BLOCK_TYPES):
                raise ContentError(
                    f"content block {index} is {type(block).__name__}, "
                    "expected Text, Reasoning, ToolCall or ToolResult"
                )
        return tuple(content)
    raise ContentError(f"content must be a str or a tuple of blocks, got {type(content).__name__}")


def as_message_tuple(messages: object, where: str) -> tuple[Message, ...]:
    """Check a listener's result is a sequence of Message (the session-prefix contract)."""
    if not isinstance(messages, (tuple, list)):
        raise ContentError(f"{where} must return a tuple of Message, got {type(messages).__name__}")
    for index, message in enumerate(messages):
        if not isinstance(message, Message):
            raise ContentError(f"{where} item {index} is {type(message).__name__}, not a Message")
    return tuple(messages)
