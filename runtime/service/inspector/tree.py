"""The family of a session — the root it descends from and everything forked or spawned from
that root — laid out as a left-to-right tree for the inspector's SVG: a pure function of the
stored sessions' meta."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from attrs import frozen

from ...cli.render import shorten_ids
from ...log.summary import SessionKind
from ...model.meta import SessionMeta

NODE_WIDTH = 216
NODE_HEIGHT = 48
COLUMN_GAP = 64
ROW_GAP = 18
MARGIN = 12
LABEL_CHARS = 24


@frozen
class Lineage:
    """Where a session comes from: `root`, a `fork` of `parent` (its seed ends at
    `fork_seq`), or a `subagent` whose parent agent is `parent`."""

    kind: SessionKind
    parent: str | None
    fork_seq: int | None


def lineage_of(meta: SessionMeta) -> Lineage:
    """A session's lineage from its meta (the `parent_agent` label marks a subagent)."""
    parent_agent: Any = meta.labels.get("parent_agent")
    if isinstance(parent_agent, str) and parent_agent:
        return Lineage("subagent", parent_agent, None)
    if meta.parent_session is not None:
        seed = meta.seed_length
        return Lineage("fork", meta.parent_session, seed - 1 if seed else None)
    return Lineage("root", None, None)


@frozen
class TreeNode:
    """One session of the family at (`x`, `y`), the top-left corner of its box."""

    id: str
    label: str
    lineage: Lineage
    depth: int
    x: float
    y: float


@frozen
class TreeEdge:
    """The line from a parent's box to a child's (`path` is SVG path data), labelled just
    before the child's box (`label_x` is where the label ends)."""

    parent: str
    child: str
    kind: SessionKind
    label: str
    path: str
    label_x: float
    label_y: float


@frozen
class FamilyTree:
    """A laid-out family: the `root`, its nodes in depth-first order, the edges, and the
    drawing's size."""

    root: str
    nodes: tuple[TreeNode, ...]
    edges: tuple[TreeEdge, ...]
    width: float
    height: float


def family_tree(metas: Iterable[SessionMeta], session_id: str) -> FamilyTree:
    """The family of `session_id` among `metas` (it must be one of them). A parent that is
    not among them makes its child a root of the drawing; lineage cycles are cut."""
    by_id = {meta.id: meta for meta in metas}
    lineages = {session: lineage_of(meta) for session, meta in by_id.items()}
    root = _root(session_id, lineages)
    children: dict[str, list[str]] = {}
    for session in sorted(by_id, key=lambda s: (by_id[s].created_at, s)):
        parent = lineages[session].parent
        if parent is not None and parent in by_id and session != root:
            children.setdefault(parent, []).append(session)
    order: list[tuple[str, int]] = []
    seen: set[str] = set()
    stack = [(root, 0)]
    while stack:
        session, depth = stack.pop()
        if session in seen:
            continue
        seen.add(session)
        order.append((session, depth))
        stack.extend((child, depth + 1) for child in reversed(children.get(session, [])))
    rows = _rows(order, {s: [c for c in children.get(s, []) if c in seen] for s, _ in order})
    labels = shorten_ids([s for s, _ in order], LABEL_CHARS, list(by_id))
    nodes = tuple(
        TreeNode(
            id=session,
            label=labels[session],
            lineage=lineages[session],
            depth=depth,
            x=MARGIN + depth * (NODE_WIDTH + COLUMN_GAP),
            y=MARGIN + rows[session] * (NODE_HEIGHT + ROW_GAP),
        )
        for session, depth in order
    )
    placed = {node.id: node for node in nodes}
    edges = tuple(
        _edge(placed[lineages[node.id].parent or ""], node)
        for node in nodes
        if node.id != root and lineages[node.id].parent in placed
    )
    depth = max(d for _, d in order)
    height = max(rows.values()) + 1
    return FamilyTree(
        root=root,
        nodes=nodes,
        edges=edges,
        width=2 * MARGIN + (depth + 1) * NODE_WIDTH + depth * COLUMN_GAP,
        height=2 * MARGIN + height * NODE_HEIGHT + (height - 1) * ROW_GAP,
    )


def _root(session_id: str, lineages: Mapping[str, Lineage]) -> str:
    current, seen = session_id, {session_id}
    while True:
        parent = lineages[current].parent
        if parent is None or parent not in lineages or parent in seen:
            return current
        seen.add(parent)
        current = parent


def _rows(order: list[tuple[str, int]], children: Mapping[str, list[str]]) -> dict[str, float]:
    """Leaves on consecutive rows in depth-first order; a parent centred on its children."""
    rows: dict[str, float] = {}
    next_row = 0
    for session, _depth in order:
        if not children.get(session):
            rows[session] = next_row
            next_row += 1
    for session, _depth in reversed(order):
        kids = children.get(session)
        if kids:
            rows[session] = (rows[kids[0]] + rows[kids[-1]]) / 2
    return rows


def _edge(parent: TreeNode, child: TreeNode) -> TreeEdge:
    x1, y1 = parent.x + NODE_WIDTH, parent.y + NODE_HEIGHT / 2
    x2, y2 = child.x, child.y + NODE_HEIGHT / 2
    middle = (x1 + x2) / 2
    lineage = child.lineage
    label = f"fork @{lineage.fork_seq}" if lineage.kind == "fork" else lineage.kind
    return TreeEdge(
        parent=parent.id,
        child=child.id,
        kind=lineage.kind,
        label=label,
        path=f"M{x1:g},{y1:g} C{middle:g},{y1:g} {middle:g},{y2:g} {x2:g},{y2:g}",
        label_x=x2 - 6,
        label_y=y2 - 6,
    )
