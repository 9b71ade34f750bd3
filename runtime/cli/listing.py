"""`sessions list`: every stored session with its summary (a damaged one in its place, the
others listed all the same), in tree order, as a table that fits a terminal (ids shortened
but still unique, before any column gives way) or, for a script, whole."""

from __future__ import annotations

from attrs import frozen
from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from ..errors import ActorloopError
from ..log.prices import format_usd
from ..log.summary import SessionSummary, summarize
from ..model.meta import DamagedSession, SessionMeta
from ..stores.base import Store
from .render import NO_VALUE, ago, percent, plural, shorten_ids, tokens, visible

MIN_ID_WIDTH = 12
COLUMNS = ("kind", "status", "turns", "tokens in/out", "cached", "cost", "created")
"""The columns between `id` and `parent` (README.md lists the same)."""
DROPPABLE = (
    (),
    ("created",),
    ("created", "cost"),
    ("created", "cost", "kind"),
    ("created", "cost", "kind", "cached"),
)
"""Columns left out, in turn, when the table is still wider than the terminal."""
STATUS_STYLE = {"completed": "green", "open": "yellow", "new": "dim", "damaged": "bold red"}


@frozen
class Listed:
    """One row of `sessions list`: a readable session (its meta and summary), or a damaged
    one (what is wrong with it; its creation time when the store could still say)."""

    id: str
    created_at: int | None
    summary: tuple[SessionMeta, SessionSummary] | None = None
    problem: str | None = None


async def list_all(store: Store) -> list[Listed]:
    """Every stored session with its summary; one the store cannot read is reported as
    damaged in its place (the others are listed all the same)."""
    listed: list[Listed] = []
    for entry in await store.list():
        if isinstance(entry, DamagedSession):
            listed.append(Listed(entry.id, None, problem=entry.problem))
            continue
        try:
            meta, events = await store.load(entry.id, repair=False)
        except ActorloopError as exc:
            problem = f"{type(exc).__name__}: {exc}"
            listed.append(Listed(entry.id, entry.created_at, problem=problem))
            continue
        listed.append(Listed(meta.id, meta.created_at, (meta, summarize(meta, events))))
    return _tree_order(listed)


def _tree_order(listed: list[Listed]) -> list[Listed]:
    """Oldest first (a damaged session without a known age last), each session's children
    (forks, subagents) right after it."""

    def key(entry: Listed) -> tuple[bool, int, str]:
        return (entry.created_at is None, entry.created_at or 0, entry.id)

    ids = {entry.id for entry in listed}
    children: dict[str | None, list[Listed]] = {}
    for entry in sorted(listed, key=key):
        parent = entry.summary[1].parent if entry.summary is not None else None
        children.setdefault(parent if parent in ids else None, []).append(entry)
    ordered: list[Listed] = []
    stack = list(reversed(children.get(None, [])))
    while stack:
        entry = stack.pop()
        ordered.append(entry)
        stack.extend(reversed(children.get(entry.id, [])))
    return ordered


def print_session_table(listed: list[Listed], out: Console, errors: Console) -> None:
    """The table, its footer, and one line on stderr per damaged session. On a terminal the
    table fits its width; otherwise (a pipe, a file) every id is whole and every column
    kept, however wide the lines get: scripts read them."""
    ids: list[str] = []
    parents: list[str | None] = []
    cells: list[list[str]] = []  # kind, status, turns, tokens, cached, cost, created
    for entry in listed:
        if entry.summary is None:
            ids.append(entry.id)
            parents.append(None)
            created = ago(entry.created_at) if entry.created_at is not None else ""
            cells.append([NO_VALUE, "damaged", NO_VALUE, NO_VALUE, NO_VALUE, NO_VALUE, created])
            continue
        summary = entry.summary[1]
        total = summary.usage.total
        ids.append(summary.id)
        parents.append(summary.parent)
        cells.append(
            [
                summary.kind,
                summary.status,
                f"{summary.turns:,}",
                f"{tokens(total.prompt_total)} / {tokens(total.output)}",
                percent(summary.usage.cached_fraction),
                format_usd(summary.spend.usd),
                ago(summary.created_at),
            ]
        )
    if out.is_terminal:
        out.print(_fit_table(out, ids, parents, cells))
    else:
        table = _session_table(ids, parents, cells, ())
        out.width = max(_natural_width(out, table), out.width)
        out.print(table)
    damaged = sum(row[1] == "damaged" for row in cells)
    footer = plural(len(ids), "session")
    if damaged:
        footer += f" ({damaged:,} damaged)"
    out.print(footer, highlight=False)
    for entry in listed:
        if entry.problem is not None:
            errors.print(
                visible(f"damaged: {entry.id}: {entry.problem}"),
                style="red",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )


def _natural_width(out: Console, table: Table) -> int:
    return Measurement.get(out, out.options.update_width(10**6), table).maximum


def _fit_table(
    out: Console, ids: list[str], parents: list[str | None], cells: list[list[str]]
) -> Table:
    """The sessions table, as wide as the terminal: ids and parents are shortened (still
    unique) before any column is dropped; the id column never wraps."""
    known = [parent for parent in parents if parent is not None]
    natural = (max(len("id"), *map(len, ids)), max(len("parent"), *map(len, known or [""])))
    table = Table()
    for dropped in DROPPABLE:
        id_width, parent_width = natural
        for _attempt in range(4):
            shown_ids = shorten_ids(ids, id_width, ids)
            shown_parents = shorten_ids(known, parent_width, [*ids, *known])
            table = _session_table(
                [shown_ids[i] for i in ids],
                [None if p is None else shown_parents[p] for p in parents],
                cells,
                dropped,
            )
            over = _natural_width(out, table) - out.width
            if over <= 0:
                return table
            narrower_id, narrower_parent = _share(id_width + parent_width - over, *natural)
            if (narrower_id, narrower_parent) == (id_width, parent_width):
                break
            id_width, parent_width = narrower_id, narrower_parent
    return table


def _share(room: int, id_natural: int, parent_natural: int) -> tuple[int, int]:
    """Split `room` between the id and parent columns: the narrower one keeps its natural
    width if it fits in half, the other takes the rest; neither below MIN_ID_WIDTH."""
    if parent_natural <= room // 2:
        id_width, parent_width = room - parent_natural, parent_natural
    elif id_natural <= room // 2:
        id_width, parent_width = id_natural, room - id_natural
    else:
        id_width, parent_width = room - room // 2, room // 2
    return max(id_width, MIN_ID_WIDTH), max(parent_width, MIN_ID_WIDTH)


def _session_table(
    shown_ids: list[str],
    shown_parents: list[str | None],
    cells: list[list[str]],
    dropped: tuple[str, ...],
) -> Table:
    keep = [index for index, name in enumerate(COLUMNS) if name not in dropped]
    table = Table("id", *(COLUMNS[index] for index in keep), "parent", box=box.SIMPLE_HEAD)
    for column in table.columns:
        column.no_wrap = True
        if column.header in ("turns", "tokens in/out", "cached"):
            column.justify = "right"
    # Ids are never cut by the table itself (a cut id would not copy whole): when the
    # terminal is too narrow even so, the other columns give way.
    table.columns[0].min_width = max(map(len, shown_ids))
    table.columns[-1].min_width = max(len("parent"), *(len(p or "") for p in shown_parents))
    for shown, parent, row in zip(shown_ids, shown_parents, cells, strict=True):
        values: list[str | Text] = [row[index] for index in keep]
        status = row[COLUMNS.index("status")]
        values[keep.index(COLUMNS.index("status"))] = Text(
            status, style=STATUS_STYLE.get(status, "red" if status == "error" else "")
        )
        table.add_row(Text(visible(shown)), *values, Text(visible(parent or "")))
    return table
