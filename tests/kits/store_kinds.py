"""The four stores a store test runs against, as URLs: memory, SQLite and JSONL under the
test's temporary directory, PostgreSQL through the `pg_url` fixture (its own server)."""

from __future__ import annotations

from pathlib import Path

import pytest

KINDS = ("memory", "sqlite", "jsonl", "postgres")


def url_for(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """The store URL of `kind` for one test."""
    if kind == "postgres":
        return str(request.getfixturevalue("pg_url"))
    return {
        "memory": "memory:",
        "sqlite": f"sqlite:{tmp_path / 'store.db'}",
        "jsonl": f"jsonl:{tmp_path / 'sessions'}",
    }[kind]
