"""Request header data: the call config, tool schemas, the epoch header and its delta shape."""

from __future__ import annotations

from attrs import field, frozen

from actorloop.codecs.jsonvalue import EMPTY_OBJECT, FrozenDict, freeze_object
from actorloop.runtime.messages import Message


def _stop_tuple(value: object) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return (value,)
    return tuple(value)  # type: ignore[arg-type]


def _optional_float(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"temperature must be a number, got {type(value).__name__}")
    return float(value)


@frozen
class LlmCallConfig:
    """What a model call is configured with; `stop` is compared in order."""

    model: str
    provider: str | None = None
    temperature: float | None = field(default=None, converter=_optional_float)
    max_tokens: int | None = None
    stop: tuple[str, ...] | None = field(default=None, converter=_stop_tuple)


@frozen
class ToolSchema:
    """A tool as the request header records it: name, description, argument schema."""

    name: str
    description: str = ""
    parameters: FrozenDict = field(default=EMPTY_OBJECT, converter=freeze_object)


@frozen
class EpochHeader:
    """The request-wide state a step's request is built from (docs/spec/session-log.md §6.2).

    Canonical form: empty `system`, `tools` or `message_prefix` is None (absent).
    """

    config: LlmCallConfig
    system: str | None = None
    tools: tuple[ToolSchema, ...] | None = None
    message_prefix: tuple[Message, ...] | None = None


@frozen
class SystemPatch:
    """Line patch on `\\n`: keep `keep_start` old head lines and `keep_end` old tail lines."""

    keep_start: int
    keep_end: int
    insert: tuple[str, ...]


@frozen
class ToolsDelta:
    added: tuple[ToolSchema, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[ToolSchema, ...] = ()


@frozen
class HeaderDelta:
    """Only changed fields are present (not None). `message_prefix=()` means "now absent"."""

    system: SystemPatch | None = None
    tools: ToolsDelta | None = None
    config: LlmCallConfig | None = None
    message_prefix: tuple[Message, ...] | None = None

    @property
    def is_empty(self) -> bool:
        return (
            self.system is None
            and self.tools is None
            and self.config is None
            and self.message_prefix is None
        )
