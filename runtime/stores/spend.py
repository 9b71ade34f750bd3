"""What the stored sessions of a subagent tree spent: a session and every subagent session
below it (by their `parent_agent` label), each folded by the budget ledger (read only)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..log.ledger import Ledger, session_ledger
from ..model.meta import DamagedSession, SessionMeta
from .base import Store
from .loading import load_session

PARENT_LABEL = "parent_agent"
"""The label a subagent's session names its parent with (runtime/host/subagents.py)."""


def children_of(metas: Sequence[SessionMeta | DamagedSession]) -> Mapping[str, tuple[str, ...]]:
    """Each session's subagent sessions (by their `parent_agent` label)."""
    children: dict[str, list[str]] = {}
    for meta in metas:
        if isinstance(meta, SessionMeta):
            parent = meta.labels.get(PARENT_LABEL)
            if isinstance(parent, str):
                children.setdefault(parent, []).append(meta.id)
    return {parent: tuple(ids) for parent, ids in children.items()}


def subtree_ids(
    root: str, children: Mapping[str, tuple[str, ...]], *, include_root: bool = True
) -> tuple[str, ...]:
    """`root` (unless not `include_root`) and every subagent session below it."""
    found: list[str] = [root] if include_root else []
    stack = list(children.get(root, ()))
    seen = {root}
    while stack:
        session_id = stack.pop()
        if session_id in seen:
            continue
        seen.add(session_id)
        found.append(session_id)
        stack.extend(children.get(session_id, ()))
    return tuple(found)


async def tree_spend(store: Store, root: str, *, include_root: bool = True) -> Ledger:
    """The summed ledger of the stored sessions of `root`'s subagent tree (read only)."""
    ids = subtree_ids(root, children_of(await store.list()), include_root=include_root)
    total = Ledger()
    for session_id in ids:
        session = await load_session(store, session_id, repair=False)
        total += session_ledger(session.meta, session.events)
    return total
