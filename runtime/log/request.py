"""The frozen model request the loop builds, and its canonical digest."""

from __future__ import annotations

import hashlib

from attrs import frozen

from ...codecs.converter import canonical_bytes
from ..model.header import EpochHeader, LlmCallConfig, ToolSchema
from ..model.messages import Message
from .surface import chain_of


@frozen
class Request:
    """Wire order: system slot, then `messages` (the session prefix, then derived history).

    `prefix_length` counts the leading messages that are the session prefix, so adapters
    can place a cache breakpoint after it. `one_shot` marks calls outside the loop's
    reconstructable steps (e.g. the compaction summarizer).
    """

    session_id: str
    config: LlmCallConfig
    system: str | None
    tools: tuple[ToolSchema, ...]
    messages: tuple[Message, ...]
    prefix_length: int = 0
    one_shot: bool = False

    @property
    def model(self) -> str:
        """The model the request is for."""
        return self.config.model

    @property
    def prefix(self) -> tuple[Message, ...]:
        """The session prefix messages (request-only; never in the derived history)."""
        return self.messages[: self.prefix_length]

    @property
    def history(self) -> tuple[Message, ...]:
        """The derived history: the boundary snapshot of the session's surface."""
        return self.messages[self.prefix_length :]


def header_part_bytes(header: EpochHeader) -> bytes:
    """Canonical bytes of the non-message part of a request (config, system, tools)."""
    return _header_parts.bytes_of(header.config, header.system, header.tools)


class _HeaderPartCache:
    """The header part's bytes of recently seen (config, system, tools), by identity.

    A loop builds every step's header from the same config and tools objects, so the digest
    would encode the same bytes each step. Only values that cannot change are kept: a
    config is deeply frozen by construction (its converters freeze every container), and so
    is each exact `ToolSchema`; the tools must be an exact tuple of them.
    """

    LIMIT = 1024

    def __init__(self) -> None:
        self._entries: dict[tuple[int, int, str | None], tuple[LlmCallConfig, object, bytes]] = {}

    def bytes_of(
        self, config: LlmCallConfig, system: str | None, tools: tuple[ToolSchema, ...] | None
    ) -> bytes:
        cacheable = (
            type(config) is LlmCallConfig
            and (system is None or type(system) is str)
            and (tools is None or (type(tools) is tuple and _exact_tools(tools)))
        )
        key = (id(config), id(tools), system)
        if cacheable:
            entry = self._entries.get(key)
            if entry is not None and entry[0] is config and entry[1] is tools:
                return entry[2]
        encoded = canonical_bytes(EpochHeader(config, system, tools, None))
        if cacheable:
            if len(self._entries) >= self.LIMIT:
                self._entries.clear()
            self._entries[key] = (config, tools, encoded)
        return encoded


def _exact_tools(tools: tuple[object, ...]) -> bool:
    return all(type(tool) is ToolSchema for tool in tools)


_header_parts = _HeaderPartCache()


def request_digest(header: EpochHeader, prefix_chain: bytes, history_chain: bytes) -> str:
    """sha256 over the header part and the hash chains of the prefix and history messages.

    The chains make the digest incremental: a step hashes only messages it has not seen.
    """
    hasher = hashlib.sha256(header_part_bytes(header))
    hasher.update(b"\x00prefix\x00" + prefix_chain)
    hasher.update(b"\x00history\x00" + history_chain)
    return hasher.hexdigest()


def digest_of(
    header: EpochHeader, prefix: tuple[Message, ...], history: tuple[Message, ...]
) -> str:
    """The same digest computed from scratch (offline verification)."""
    return request_digest(header, chain_of(prefix), chain_of(history))
