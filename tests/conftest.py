"""Fixtures shared by the provider tests: a real local SSE server and a recorded backoff."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from provider_kit import Waits
from sse_server import SseServer


@pytest.fixture
def server() -> Iterator[SseServer]:
    with SseServer() as srv:
        yield srv


@pytest.fixture
def waits() -> Waits:
    return Waits()
