"""The per-step header shortcuts give exactly the encoded answers: header equality of
headers sharing their parts, and the digest's header part remembered by identity."""

from __future__ import annotations

from hypothesis import given, settings
from strategies import epoch_headers, header_transitions

from actorloop.codecs.converter import canonical_bytes
from actorloop.runtime.log.header_algebra import canonical, headers_equal
from actorloop.runtime.log.request import header_part_bytes
from actorloop.runtime.model.header import EpochHeader, LlmCallConfig, ToolSchema


def _encoded_equal(a: EpochHeader, b: EpochHeader) -> bool:
    return canonical_bytes(canonical(a)) == canonical_bytes(canonical(b))


@settings(max_examples=300, deadline=None)
@given(header_transitions())
def test_header_equality_is_equality_of_canonical_bytes(pair: tuple[EpochHeader, ...]) -> None:
    old, new = pair
    assert headers_equal(old, new) == _encoded_equal(old, new)
    rebuilt = EpochHeader(old.config, old.system, old.tools, old.message_prefix)
    assert headers_equal(old, rebuilt) and _encoded_equal(old, rebuilt)


@settings(max_examples=300, deadline=None)
@given(epoch_headers())
def test_the_header_part_is_the_encoded_header_part(header: EpochHeader) -> None:
    expected = canonical_bytes(EpochHeader(header.config, header.system, header.tools, None))
    assert header_part_bytes(header) == expected
    assert header_part_bytes(header) == expected  # remembered
    again = EpochHeader(header.config, header.system, header.tools, header.message_prefix)
    assert header_part_bytes(again) == expected


def test_a_changed_part_is_never_answered_from_memory() -> None:
    tools = (ToolSchema("read", "Read", {"type": "object"}),)
    config = LlmCallConfig("m", temperature=0.5)
    first = header_part_bytes(EpochHeader(config, "sys", tools))
    assert header_part_bytes(EpochHeader(config, "sys 2", tools)) != first
    other = LlmCallConfig("m", temperature=0.7)
    assert header_part_bytes(EpochHeader(other, "sys", tools)) != first
    listed = [ToolSchema("read", "Read", {"type": "object"})]
    as_list = EpochHeader(config, "sys", listed)  # type: ignore[arg-type]
    assert header_part_bytes(as_list) == first
    listed.append(ToolSchema("write"))  # a list may change: it is never remembered
    assert header_part_bytes(as_list) != first
