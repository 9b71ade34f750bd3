"""What each inspector page shows, gathered from a `SessionService`: a page of the sessions
listing, one session's timeline, its family tree, its cache health and one rebuilt request. Live
sessions are read from memory (ahead of the store by the step under way), stored ones
read-only from the store (no lease, nothing written)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from attrs import evolve, frozen

from ....codecs.jsonvalue import FrozenDict
from ...errors import ActorloopError, SessionNotFound
from ...log.approvals import ApprovalLedger
from ...log.cache_health import RequestCache, cache_health
from ...log.rebuild import RebuiltRequest, rebuild_request
from ...log.session import Session
from ...log.summary import SessionSummary, summarize
from ...model.approvals import PendingApproval
from ...model.budget import Spend
from ...model.events import AssistantMessage, SessionEvent
from ...model.header import EpochHeader
from ...model.meta import DamagedSession, SessionMeta
from ...stores.spend import tree_spend
from ..errors import hide_directories
from ..service import SessionService
from .chart import CacheChart, cache_chart
from .history import HistoryOrigin, history_origins
from .listing import MAX_PER_PAGE, RowStats, SessionQuery, row_stats
from .timeline import Timeline, build_timeline
from .tree import FamilyTree, Lineage, family_tree, lineage_of


@frozen
class SessionRow:
    """One row of the sessions list: a readable session (`summary`, and the `stats` a
    listing shows beside it) or a damaged one (`problem`); `depth` indents a fork or
    subagent under its parent; `live` is the live agent's status (None when no agent of
    this server runs it)."""

    id: str
    depth: int
    lineage: Lineage | None
    created_at: int | None
    summary: SessionSummary | None
    problem: str | None
    live: str | None
    stats: RowStats | None = None
    pending: int = 0
    """How many tool calls wait for a decision (the badge beside the status)."""

    @property
    def status(self) -> str:
        """What the status column says: `damaged`, `running`, or the stored status."""
        if self.summary is None:
            return "damaged"
        if self.live == "running":
            return "running"
        return self.summary.status


@frozen
class SessionListing:
    """One page of the sessions list: its rows, how many sessions matched the query
    (`matched`) out of how many are stored (`stored`), and the query itself."""

    rows: tuple[SessionRow, ...]
    matched: int
    stored: int
    query: SessionQuery

    @property
    def pages(self) -> int:
        """How many pages the matching sessions fill (at least one)."""
        return max(1, -(-self.matched // self.query.per_page))


@frozen
class SessionPage:
    """One session: its summary, lineage, the live agent's status, the folded header now,
    its timeline, the forks taken from it and the subagent session each spawning tool call
    started (`subagents`: call id → session id)."""

    id: str
    meta: SessionMeta
    summary: SessionSummary
    lineage: Lineage
    live: str | None
    header: EpochHeader | None
    timeline: Timeline
    forks: tuple[ForkPoint, ...]
    subagents: FrozenDict
    pending: tuple[PendingApproval, ...] = ()
    """The tool calls waiting for a decision (a turn that ended `awaiting_approval`)."""
    subtree_spend: Spend | None = None
    """What the session and its stored subagent sessions cost together (the session page
    only; docs/budgets.md)."""

    def forks_in(self, start_seq: int, end_seq: int | None) -> tuple[ForkPoint, ...]:
        """The forks taken at a seq from `start_seq` to `end_seq` (open: to the end)."""
        last = self.timeline.last_seq if end_seq is None else end_seq
        return tuple(fork for fork in self.forks if start_seq <= fork.seq <= last)


@frozen
class ForkPoint:
    """A fork child of this session (`child`) and the seq its seed ends at."""

    child: str
    seq: int


@frozen
class TreePage:
    """A session's family, laid out, with the row of each member (status and turns)."""

    session: SessionPage
    tree: FamilyTree
    rows: dict[str, SessionRow]


@frozen
class CachePage:
    """A session's requests with their cache health, and the chart of them."""

    session: SessionPage
    requests: tuple[RequestCache, ...]
    chart: CacheChart


@frozen
class RequestPage:
    """The request behind one `assistant/message`: rebuilt, the answer it produced, where
    each history message came from (None: unknown), its header events, its cache health,
    and the requests before and after it in the log."""

    session: SessionPage
    rebuilt: RebuiltRequest
    answer: AssistantMessage
    origins: tuple[HistoryOrigin, ...] | None
    snapshot: SessionEvent
    header_event: SessionEvent
    cache: RequestCache | None
    previous_seq: int | None
    next_seq: int | None


def _live(service: SessionService, session_id: str) -> str | None:
    agent = service.runtime.get(session_id)
    return None if agent is None else agent.status


def _listed(entry: SessionMeta | DamagedSession) -> SessionRow:
    """A row from the store's listing alone (nothing loaded yet)."""
    if isinstance(entry, DamagedSession):
        return SessionRow(entry.id, 0, None, None, None, hide_directories(entry.problem), None)
    return SessionRow(entry.id, 0, lineage_of(entry), entry.created_at, None, None, None)


async def _loaded(service: SessionService, row: SessionRow) -> SessionRow | None:
    """`row` with its session read: summary and stats, or the problem that kept it from
    being read (None when it was deleted since the listing)."""
    if row.lineage is None:
        return row  # the store reported it damaged
    try:
        session = await service.session(row.id)
    except SessionNotFound:
        return None
    except ActorloopError as exc:
        return evolve(row, problem=hide_directories(f"{type(exc).__name__}: {exc}"))
    meta, events = session.meta, session.events
    return evolve(
        row,
        summary=summarize(meta, events),
        stats=row_stats(events, meta.seed_length or 0),
        live=_live(service, row.id),
        pending=len(ApprovalLedger.of_events(meta.id, events).pending()),
    )


async def session_rows(service: SessionService) -> tuple[SessionRow, ...]:
    """Every stored session, oldest first with its forks and subagents right after it; one
    that cannot be read is listed as damaged (with why) and the others all the same."""
    listing = await session_listing(service, SessionQuery(per_page=MAX_PER_PAGE))
    rows = list(listing.rows)
    for page in range(2, listing.pages + 1):
        rows.extend((await session_listing(service, evolve(listing.query, page=page))).rows)
    return tuple(rows)


async def session_listing(service: SessionService, query: SessionQuery) -> SessionListing:
    """The page of the sessions list `query` asks for. Search and kind filter on the
    store's listing; a status filter or a sort by a figure loads every match, else only
    the page's sessions are read (a page of a thousand sessions reads fifty)."""
    listed = [_listed(entry) for entry in await service.runtime.list_sessions()]
    needle = query.q.casefold()
    matching = [
        row
        for row in listed
        if needle in row.id.casefold()
        and (query.kind is None or (row.lineage is not None and row.lineage.kind == query.kind))
    ]
    start, end = (query.page - 1) * query.per_page, query.page * query.per_page
    if query.needs_summaries:
        loaded = [row for row in [await _loaded(service, row) for row in matching] if row]
        if query.status is not None:
            loaded = [row for row in loaded if row.status == query.status]
        ordered = _sorted(loaded, query)
        shown = ordered[start:end]
    else:
        ordered = _sorted(matching, query)
        page = [await _loaded(service, row) for row in ordered[start:end]]
        shown = tuple(row for row in page if row is not None)
    return SessionListing(shown, len(ordered), len(listed), query)


def _sorted(rows: Sequence[SessionRow], query: SessionQuery) -> tuple[SessionRow, ...]:
    if query.sort == "tree":
        return _tree_order(rows)
    key = SORT_VALUES[query.sort]
    known = [row for row in rows if key(row) is not None]
    unknown = [row for row in rows if key(row) is None]
    known.sort(key=lambda row: (key(row), row.id), reverse=query.descending)
    return tuple(known + sorted(unknown, key=lambda row: row.id))  # no value: always last


def _tree_order(rows: Sequence[SessionRow]) -> tuple[SessionRow, ...]:
    def created(row: SessionRow) -> tuple[bool, int, str]:
        return (row.created_at is None, row.created_at or 0, row.id)

    ids = {row.id for row in rows}
    children: dict[str | None, list[SessionRow]] = {}
    for row in sorted(rows, key=created):
        parent = row.lineage.parent if row.lineage is not None else None
        children.setdefault(parent if parent in ids else None, []).append(row)
    ordered: list[SessionRow] = []
    seen: set[str] = set()
    # roots first; then any row a lineage cycle kept from every root, so none goes missing
    for top in [*children.get(None, []), *sorted(rows, key=created)]:
        stack = [(top, 0)]
        while stack:
            row, depth = stack.pop()
            if row.id in seen:
                continue
            seen.add(row.id)
            ordered.append(evolve(row, depth=depth))
            stack.extend((child, depth + 1) for child in reversed(children.get(row.id, [])))
    return tuple(ordered)


def _summary_value(pick: Callable[[SessionSummary], Any]) -> Callable[[SessionRow], Any]:
    return lambda row: None if row.summary is None else pick(row.summary)


def _stats_value(pick: Callable[[RowStats], Any]) -> Callable[[SessionRow], Any]:
    return lambda row: None if row.stats is None else pick(row.stats)


SORT_VALUES: dict[str, Callable[[SessionRow], Any]] = {
    "id": lambda row: row.id,
    "created": lambda row: row.created_at,
    "activity": _summary_value(lambda summary: summary.last_event_at),
    "turns": _summary_value(lambda summary: summary.own_turns),
    "tokens": _summary_value(lambda summary: summary.usage.total.prompt_total),
    "cost": _summary_value(lambda summary: summary.spend.usd),
    "errors": _stats_value(lambda stats: stats.errors),
    "latency": _stats_value(lambda stats: stats.latency_ms),
}
"""What each flat sort orders by (None: the row has no such value and goes last)."""


def _page(
    service: SessionService,
    session_id: str,
    session: Session,
    relatives: Sequence[SessionMeta | DamagedSession] = (),
) -> SessionPage:
    events = session.events
    forks = sorted(
        (
            ForkPoint(meta.id, meta.seed_length - 1)
            for meta in relatives
            if isinstance(meta, SessionMeta)
            and meta.parent_session == session_id
            and meta.seed_length
        ),
        key=lambda fork: (fork.seq, fork.child),
    )
    subagents = {
        call: meta.id
        for meta in relatives
        if isinstance(meta, SessionMeta)
        and meta.labels.get("parent_agent") == session_id
        and isinstance(call := meta.labels.get("parent_call"), str)
    }
    return SessionPage(
        id=session_id,
        meta=session.meta,
        summary=summarize(session.meta, events),
        lineage=lineage_of(session.meta),
        live=_live(service, session_id),
        header=session.header(),
        timeline=build_timeline(session.meta, events),
        forks=tuple(forks),
        subagents=FrozenDict(subagents),
        pending=ApprovalLedger.of_events(session_id, events).pending(),
    )


async def session_page(service: SessionService, session_id: str) -> SessionPage:
    """One session's summary and timeline, its fork points and the subagent sessions its
    tool calls spawned."""
    session = await service.session(session_id)
    page = _page(service, session_id, session, await service.runtime.list_sessions())
    subtree = await tree_spend(service.runtime.store, session_id)
    return evolve(page, subtree_spend=subtree.total)


async def tree_page(service: SessionService, session_id: str) -> TreePage:
    """The family of `session_id` (forks and subagents, from the root it descends from)."""
    session = await service.session(session_id)
    metas = [
        entry for entry in await service.runtime.list_sessions() if isinstance(entry, SessionMeta)
    ]
    if all(meta.id != session_id for meta in metas):
        metas.append(session.meta)
    tree = family_tree(metas, session_id)
    rows: dict[str, SessionRow] = {}
    for node in tree.nodes:
        try:
            member = session if node.id == session_id else await service.session(node.id)
        except ActorloopError as exc:
            rows[node.id] = SessionRow(
                node.id, node.depth, node.lineage, None, None, str(exc), None
            )
            continue
        summary = summarize(member.meta, member.events)
        rows[node.id] = SessionRow(
            node.id,
            node.depth,
            node.lineage,
            member.meta.created_at,
            summary,
            None,
            _live(service, node.id),
        )
    return TreePage(_page(service, session_id, session), tree, rows)


async def cache_page(service: SessionService, session_id: str) -> CachePage:
    """The session's own requests (a fork's seed left out) with their cache health."""
    session = await service.session(session_id)
    requests = cache_health(session.events, since=session.meta.seed_length or 0)
    return CachePage(_page(service, session_id, session), requests, cache_chart(requests))


async def request_page(service: SessionService, session_id: str, seq: int) -> RequestPage:
    """The request answered by the `assistant/message` at `seq`, rebuilt from the log; the
    digest is compared, not enforced (a mismatch is shown, not raised)."""
    session = await service.session(session_id)
    events = session.events
    rebuilt = rebuild_request(session_id, events, seq)
    answer = events[seq].data
    assert isinstance(answer, AssistantMessage)  # rebuild_request checked it
    answers = [event.seq for event in events if isinstance(event.data, AssistantMessage)]
    position = answers.index(seq)
    health = {request.seq: request for request in cache_health(events)}
    return RequestPage(
        session=_page(service, session_id, session),
        rebuilt=rebuilt,
        answer=answer,
        origins=history_origins(session_id, events, rebuilt.step_start_seq),
        snapshot=events[rebuilt.snapshot_seq],
        header_event=events[rebuilt.header_seq],
        cache=health.get(seq),
        previous_seq=answers[position - 1] if position else None,
        next_seq=answers[position + 1] if position + 1 < len(answers) else None,
    )
