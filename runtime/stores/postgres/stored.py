"""`StoredRow`: a session's row as one transaction of the PostgreSQL store read it (its
meta, acknowledged head and owner)."""

from __future__ import annotations

from attrs import frozen

from ...model.meta import SessionMeta
from .claims import Owner


@frozen
class StoredRow:
    """A session row: its meta, its acknowledged head (the next seq) and who owns it."""

    meta: SessionMeta
    head: int
    owner: Owner
