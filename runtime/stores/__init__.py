"""Durable session stores behind one `Store` seam: `open_store("memory:" | "sqlite:PATH" |
"jsonl:DIR")`, writer leases (`claim`), tail-checked appends, group commit and repair on load.

Writers call `lease = store.claim(id)` first and pass it to `store.load(id, lease=lease)`:
only the lease holder (or a loader that can take the lease itself) may repair a log.
Re-exported lazily: a store module is loaded when its name is first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

if TYPE_CHECKING:
    from .base import Lease, Store
    from .ids import MAX_SESSION_ID_LENGTH, check_session_id
    from .jsonl import JsonlStore
    from .memory import MemoryStore
    from .sqlite import SqliteStore
    from .urls import open_store

__getattr__, __dir__ = lazy_exports(
    globals(),
    {
        "MAX_SESSION_ID_LENGTH": "actorloop.runtime.stores.ids",
        "JsonlStore": "actorloop.runtime.stores.jsonl",
        "Lease": "actorloop.runtime.stores.base",
        "MemoryStore": "actorloop.runtime.stores.memory",
        "SqliteStore": "actorloop.runtime.stores.sqlite",
        "Store": "actorloop.runtime.stores.base",
        "check_session_id": "actorloop.runtime.stores.ids",
        "open_store": "actorloop.runtime.stores.urls",
    },
)

__all__ = [
    "MAX_SESSION_ID_LENGTH",
    "JsonlStore",
    "Lease",
    "MemoryStore",
    "SqliteStore",
    "Store",
    "check_session_id",
    "open_store",
]
