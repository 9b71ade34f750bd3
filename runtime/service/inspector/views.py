"""What each inspector page shows, gathered from a `SessionService`: the sessions listing,
one session's timeline, its family tree, its cache health and one rebuilt request. Live
sessions are read from memory (ahead of the store by the step under way), stored ones
read-only from the store (no lease, nothing written)."""

from __future__ import annotations

from collections.abc import Sequence

from attrs import evolve, frozen

from ...errors import ActorloopError, SessionNotFound
from ...log.cache_health import RequestCache, cache_health
from ...log.rebuild import RebuiltRequest, rebuild_request
from ...log.session import Session
from ...log.summary import SessionSummary, summarize
from ...model.events import AssistantMessage, SessionEvent
from ...model.header import EpochHeader
from ...model.meta import DamagedSession, SessionMeta
from ..service import SessionService
from .chart import CacheChart, cache_chart
from .timeline import Timeline, build_timeline
from .tree import FamilyTree, Lineage, family_tree, lineage_of


@frozen
class SessionRow:
    """One row of the sessions list: a readable session (`summary`) or a damaged one
    (`problem`); `depth` indents a fork or subagent under its parent; `live` is the live
    agent's status (None when no agent of this server runs it)."""

    id: str
    depth: int
    lineage: Lineage | None
    summary: SessionSummary | None
    problem: str | None
    live: str | None

    @property
    def status(self) -> str:
        """What the status column says: `damaged`, `running`, or the stored status."""
        if self.summary is None:
            return "damaged"
        if self.live == "running":
            return "running"
        return self.summary.status


@frozen
class SessionPage:
    """One session: its summary, lineage, the live agent's status, the folded header now,
    its timeline, and the seq its live view follows from."""

    id: str
    meta: SessionMeta
    summary: SessionSummary
    lineage: Lineage
    live: str | None
    header: EpochHeader | None
    timeline: Timeline
    requests: int


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
    """The request behind one `assistant/message`: rebuilt, its header events, its cache
    health, and the requests before and after it in the log."""

    session: SessionPage
    rebuilt: RebuiltRequest
    snapshot: SessionEvent
    header_event: SessionEvent
    cache: RequestCache | None
    previous_seq: int | None
    next_seq: int | None


def _live(service: SessionService, session_id: str) -> str | None:
    agent = service.runtime.get(session_id)
    return None if agent is None else agent.status


async def session_rows(service: SessionService) -> tuple[SessionRow, ...]:
    """Every stored session, oldest first with its forks and subagents right after it; one
    that cannot be read is listed as damaged (with why) and the others all the same."""
    rows: list[SessionRow] = []
    for entry in await service.runtime.list_sessions():
        if isinstance(entry, DamagedSession):
            rows.append(SessionRow(entry.id, 0, None, None, entry.problem, None))
            continue
        try:
            session = await service.session(entry.id)
        except SessionNotFound:
            continue  # deleted between the listing and the load
        except ActorloopError as exc:
            problem = f"{type(exc).__name__}: {exc}"
            rows.append(SessionRow(entry.id, 0, lineage_of(entry), None, problem, None))
            continue
        summary = summarize(session.meta, session.events)
        rows.append(
            SessionRow(
                entry.id, 0, lineage_of(session.meta), summary, None, _live(service, entry.id)
            )
        )
    return _tree_order(rows)


def _tree_order(rows: Sequence[SessionRow]) -> tuple[SessionRow, ...]:
    def created(row: SessionRow) -> tuple[bool, int, str]:
        at = row.summary.created_at if row.summary is not None else None
        return (at is None, at or 0, row.id)

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


def _page(service: SessionService, session_id: str, session: Session) -> SessionPage:
    events = session.events
    return SessionPage(
        id=session_id,
        meta=session.meta,
        summary=summarize(session.meta, events),
        lineage=lineage_of(session.meta),
        live=_live(service, session_id),
        header=session.header(),
        timeline=build_timeline(session.meta, events),
        requests=sum(1 for event in events if isinstance(event.data, AssistantMessage)),
    )


async def session_page(service: SessionService, session_id: str) -> SessionPage:
    """One session's summary and timeline."""
    return _page(service, session_id, await service.session(session_id))


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
            rows[node.id] = SessionRow(node.id, node.depth, node.lineage, None, str(exc), None)
            continue
        summary = summarize(member.meta, member.events)
        rows[node.id] = SessionRow(
            node.id, node.depth, node.lineage, summary, None, _live(service, node.id)
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
    answers = [event.seq for event in events if isinstance(event.data, AssistantMessage)]
    position = answers.index(seq)
    health = {request.seq: request for request in cache_health(events)}
    return RequestPage(
        session=_page(service, session_id, session),
        rebuilt=rebuilt,
        snapshot=events[rebuilt.snapshot_seq],
        header_event=events[rebuilt.header_seq],
        cache=health.get(seq),
        previous_seq=answers[position - 1] if position else None,
        next_seq=answers[position + 1] if position + 1 < len(answers) else None,
    )
