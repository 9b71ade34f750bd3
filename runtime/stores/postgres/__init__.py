"""The PostgreSQL store (`postgresql://...`, the `postgres` extra): `config` (the URL's
settings), `schema` (tables and version), `connections` (the pool, typed errors), `locks`
(one lock order, rolled-back transactions retried), `claims` (fenced ownership, this
process's side), `commit` (the group commit), `keeper` (lease renewal), `store`
(`PostgresStore`), `inbox` (requests handed between instances, for routing).
Re-exported lazily: importing this package loads no psycopg."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...lazy import lazy_exports

if TYPE_CHECKING:
    from .claims import Owner
    from .store import PostgresStore

__getattr__, __dir__ = lazy_exports(
    globals(),
    {
        "Owner": "actorloop.runtime.stores.postgres.claims",
        "PostgresStore": "actorloop.runtime.stores.postgres.store",
    },
)

__all__ = ["Owner", "PostgresStore"]
