"""The store a URL names: `open_store("memory:" | "sqlite:PATH" | "jsonl:DIR" |
"postgresql://...")`, the one table of URL schemes, apart from the `Store` seam itself."""

from __future__ import annotations

from ..errors import StoreUrlError
from .base import Store, Synchronous

ACCEPTED_URLS = (
    "memory:, sqlite:PATH[?synchronous=NORMAL|FULL], jsonl:DIR or "
    "postgresql://[USER@]HOST[:PORT]/DB[?lease_s=SECONDS]"
)


def open_store(url: str, *, synchronous: Synchronous = "NORMAL") -> Store:
    """A store for `url`: `memory:`, `sqlite:PATH[?synchronous=NORMAL|FULL]`, `jsonl:DIR`
    or a libpq URL `postgresql://...` (the `postgres` extra; `?lease_s=` and the other
    options of `stores/postgres/config.py`).

    A `synchronous` given in the URL wins over the keyword.
    """
    if not isinstance(url, str):
        raise StoreUrlError(f"store URL must be a str, got {type(url).__name__}")
    scheme, sep, rest = url.partition(":")
    # Each store's module is imported only for its own scheme (a CLI start pays for one).
    if scheme == "memory" and sep and not rest:
        from .memory import MemoryStore

        return MemoryStore()
    if scheme == "sqlite" and rest:
        path, _, query = rest.partition("?")
        mode: str = synchronous
        if query:
            key, eq, value = query.partition("=")
            if key != "synchronous" or not eq:
                raise StoreUrlError(f"store URL {url!r}: the only option is ?synchronous=")
            mode = value
        if not path:
            raise StoreUrlError(
                f"store URL {url!r} names no database file; accepted: {ACCEPTED_URLS}"
            )
        from .sqlite import SqliteStore

        return SqliteStore(path, synchronous=mode)
    if scheme == "jsonl" and rest:
        from .jsonl import JsonlStore

        return JsonlStore(rest)
    if scheme in ("postgresql", "postgres") and rest.startswith("//"):
        try:
            from .postgres.store import PostgresStore
        except ImportError as exc:
            raise StoreUrlError(
                f"store URL {url.partition('?')[0]!r:.80}: the PostgreSQL store needs the "
                f"postgres extra (pip install 'actorloop[postgres]'): {exc}"
            ) from None
        return PostgresStore(url)
    raise StoreUrlError(f"unknown store URL {url!r}; accepted: {ACCEPTED_URLS}")
