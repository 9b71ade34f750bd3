"""Fixtures shared by the tests: a cache home of their own, a real local SSE server, a recorded
backoff, and a real PostgreSQL server (tests/kits/pg_server.py) whose store schema is emptied
before each test."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from pg_server import PgServer
from provider_kit import Waits
from sse_server import SseServer


@pytest.fixture(scope="session", autouse=True)
def _own_cache_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The CLI keeps a cache under $XDG_CACHE_HOME: the tests (and what they start) use
    their own, never the user's."""
    before = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("cache-home"))
    yield
    if before is None:
        del os.environ["XDG_CACHE_HOME"]
    else:
        os.environ["XDG_CACHE_HOME"] = before


@pytest.fixture
def server() -> Iterator[SseServer]:
    with SseServer() as srv:
        yield srv


@pytest.fixture
def waits() -> Waits:
    return Waits()


# ---------------------------------------------------------------------- PostgreSQL


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """One real PostgreSQL server for the whole test run (tests/kits/pg_server.py); skipped where
    PostgreSQL is not installed, a failure under CI, where .ci/run installs it."""
    bindir = PgServer.find()
    if bindir is None:
        if os.environ.get("CI") == "true":
            pytest.fail("PostgreSQL is not installed; .ci/run installs it for CI")
        pytest.skip("PostgreSQL is not installed (/usr/lib/postgresql/*/bin/initdb)")
    server = PgServer(bindir)
    try:
        server.init()
        server.start()
        yield server
    finally:
        server.cleanup()


@pytest.fixture(scope="session")
def pg_database(pg_server: PgServer) -> str:
    """The tests' database on the test server."""
    return pg_server.create_database()


@pytest.fixture
def pg_url(pg_server: PgServer, pg_database: str) -> str:
    """The URL of the tests' database, emptied of any store for this test."""
    pg_server.reset(pg_database)
    return pg_server.url(pg_database)
