"""The settings of a `postgresql://` store URL: the libpq connection string, and actorloop's
own query parameters (lease TTL, node name, pool size, routing poll interval), taken out of
the URL before libpq sees it."""

from __future__ import annotations

import math
import os
import socket
import uuid
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from attrs import frozen

from ...errors import StoreUrlError

SCHEMES = ("postgresql", "postgres")
DEFAULT_LEASE_S = 15.0
DEFAULT_POOL_MAX = 10
DEFAULT_POLL_S = 1.0
_NODE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
OPTIONS = ("lease_s", "node", "pool_max", "poll_s")
"""The query parameters actorloop reads; every other one goes to libpq as it is."""


@frozen
class PgSettings:
    """A PostgreSQL store's settings.

    * `conninfo`: the URL libpq connects with (actorloop's parameters removed).
    * `lease_s`: how long an owner's lease on a session lasts without renewal; renewed
      every third of it. A crashed owner's sessions are claimable this long after its last
      renewal.
    * `node`: this store's owner name in the sessions table; unique per store instance by
      default. A stable name (`?node=web-1`) lets a restarted process reclaim its own
      sessions at once instead of waiting for their leases to expire.
    * `pool_max`: connections in the pool (and worker threads doing database calls).
    * `poll_s`: how often routing polls for forwarded requests and answers when no NOTIFY
      arrives (NOTIFY is only a wake-up hint).
    """

    conninfo: str
    lease_s: float = DEFAULT_LEASE_S
    node: str = ""
    pool_max: int = DEFAULT_POOL_MAX
    poll_s: float = DEFAULT_POLL_S

    @property
    def display(self) -> str:
        """The URL without a password (for messages and `store.url`)."""
        parts = urlsplit(self.conninfo)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, host = netloc.rsplit("@", 1)
            user = userinfo.split(":", 1)[0]
            netloc = f"{user}@{host}"
        query = [(k, v) for k, v in parse_qsl(parts.query) if k != "password"]
        query += [("lease_s", _number(self.lease_s)), ("node", self.node)]
        return urlunsplit((parts.scheme, netloc, parts.path, urlencode(query), ""))


def default_node() -> str:
    """host-pid-random: unique per store instance, readable in the sessions table."""
    host = "".join(c if c in _NODE_CHARS else "-" for c in socket.gethostname())[:40]
    return f"{host or 'node'}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def parse_url(url: str) -> PgSettings:
    """The settings of `postgresql://[user[:password]@][host][:port][/dbname][?param=...]`."""
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES:
        raise StoreUrlError(f"store URL {url!r:.80} is not a postgresql:// URL")
    if parts.fragment:
        raise StoreUrlError("a postgresql:// store URL takes no #fragment")
    ours: dict[str, str] = {}
    rest: list[tuple[str, str]] = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key in OPTIONS:
            if key in ours:
                raise StoreUrlError(f"store URL: ?{key}= is given twice")
            ours[key] = value
        else:
            rest.append((key, value))
    lease_s = _positive("lease_s", ours.get("lease_s"), DEFAULT_LEASE_S, low=0.2, high=3600)
    poll_s = _positive("poll_s", ours.get("poll_s"), DEFAULT_POLL_S, low=0.01, high=60)
    pool_max = _count("pool_max", ours.get("pool_max"), DEFAULT_POOL_MAX)
    node = ours.get("node") or default_node()
    if len(node) > 128 or not set(node) <= _NODE_CHARS:
        raise StoreUrlError(f"store URL: ?node= must be 1-128 of [A-Za-z0-9._-], got {node!r:.60}")
    conninfo = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(rest), ""))
    return PgSettings(conninfo, lease_s, node, pool_max, poll_s)


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else repr(value)


def _positive(name: str, raw: str | None, default: float, *, low: float, high: float) -> float:
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise StoreUrlError(
            f"store URL: ?{name}= must be a number of seconds, got {raw!r:.40}"
        ) from None
    if not math.isfinite(value) or not low <= value <= high:
        raise StoreUrlError(f"store URL: ?{name}= must be {low}..{high} seconds, got {raw!r:.40}")
    return value


def _count(name: str, raw: str | None, default: int) -> int:
    if raw is None:
        return default
    if not raw.isdigit() or not 1 <= int(raw) <= 1000:
        raise StoreUrlError(f"store URL: ?{name}= must be an integer 1..1000, got {raw!r:.40}")
    return int(raw)
