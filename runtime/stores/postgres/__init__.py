"""The PostgreSQL store (`postgresql://...`, the `postgres` extra): `config` (the URL's
settings), `schema` (tables and version), `claims` (fenced ownership, this process's side),
`store` (`PostgresStore`), `inbox` (requests handed between instances, for routing).
Re-exported lazily: importing this package loads no psycopg."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...lazy import lazy_exports

if TYPE_CHECKING:
    from .store import Owner, PostgresStore

__getattr__, __dir__ = lazy_exports(
    globals(),
    {
        "Owner": "actorloop.runtime.stores.postgres.store",
        "PostgresStore": "actorloop.runtime.stores.postgres.store",
    },
)

__all__ = ["Owner", "PostgresStore"]
