"""The sweep of rows nobody will read again, which would otherwise grow with every
failure: `nodes` heartbeats of instances gone for good (each instance has a name of its
own by default), and `inbox` requests whose sender is gone (nobody reads the answer) or
whose owner died handling them (its sender answered `OWNER_LOST`).

A missing heartbeat means the same as an expired one (the node is not alive), so removing
one changes no decision; `SWEEP_GRACE_S` keeps rows of nodes that are only starting or
pausing briefly out of it. Every instance's lease keeper sweeps every `SWEEP_EVERY_S`.
"""

from __future__ import annotations

import psycopg
from attrs import frozen

SWEEP_EVERY_S = 60.0
"""How often a lease keeper sweeps."""
SWEEP_GRACE_S = 60.0
"""How long a heartbeat is expired, or a request row old, before the sweep removes it."""

_LIVE = "SELECT 1 FROM actorloop.nodes n WHERE n.id = {node} AND n.expires > now()"
_SWEEP_INBOX = (
    "DELETE FROM actorloop.inbox i WHERE i.created < now() - %(grace)s * interval '1 second' "
    f"AND (NOT EXISTS ({_LIVE.format(node='i.origin_node')}) "
    f"OR (i.state = 'taken' AND NOT EXISTS ({_LIVE.format(node='i.target_node')})))"
)
_SWEEP_NODES = "DELETE FROM actorloop.nodes WHERE expires < now() - %(grace)s * interval '1 second'"


@frozen
class Swept:
    """What one sweep removed."""

    inbox_rows: int
    nodes: int


def sweep(conn: psycopg.Connection, grace_s: float = SWEEP_GRACE_S) -> Swept:
    """Remove the rows of the module docstring, older than `grace_s` (blocking; one
    transaction)."""
    with conn.transaction():
        inbox = conn.execute(_SWEEP_INBOX, {"grace": grace_s}).rowcount
        nodes = conn.execute(_SWEEP_NODES, {"grace": grace_s}).rowcount
    return Swept(inbox, nodes)
