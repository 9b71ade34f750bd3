"""The read-only views of stored sessions the service answers with: a page of session
summaries (`GET /v1/sessions`) and one session's detail (`GET /v1/sessions/{id}`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ...codecs.converter import unstructure
from ..log.session import Session
from ..model.budget import Spend
from ..model.meta import DamagedSession, SessionMeta
from .outcomes import spend_report, usage_json
from .profiles import PROFILE_LABEL
from .schemas import Lineage, SessionDetail, SessionPage, SessionStatus, SessionSummary, UsageReport


def session_page(
    stored: Sequence[SessionMeta | DamagedSession],
    limit: int,
    cursor: str | None,
    live_agent: Callable[[str], Any],
) -> SessionPage:
    """The sessions in id order after `cursor`, at most `limit`; `live_agent(id)` is the
    agent running one here, or None."""
    ordered = sorted(stored, key=lambda meta: meta.id)
    if cursor is not None:
        ordered = [meta for meta in ordered if meta.id > cursor]
    page = ordered[:limit]
    summaries = []
    for meta in page:
        if isinstance(meta, DamagedSession):
            summaries.append(
                SessionSummary(meta.id, "damaged", False, None, None, None, {}, meta.problem)
            )
            continue
        agent = live_agent(meta.id)
        summaries.append(
            SessionSummary(
                id=meta.id,
                status=agent.status if agent is not None else "stored",
                live=agent is not None,
                created_at=meta.created_at,
                parent_session=meta.parent_session,
                seed_length=meta.seed_length,
                labels=dict(meta.labels),
            )
        )
    more = len(ordered) > limit
    return SessionPage(tuple(summaries), page[-1].id if more and page else None)


def session_detail(
    session: Session,
    status: SessionStatus,
    *,
    live: bool,
    live_profile: str | None,
    spend: Spend,
    subtree: Spend,
) -> SessionDetail:
    """One session's detail: `status` and `live` as the service sees it, the profile its
    agent runs (or the one recorded at creation), `spend` what it spent itself, `subtree`
    what it and its stored subagents spent."""
    meta = session.meta
    usage = session.usage()
    header = session.header()
    label = meta.labels.get(PROFILE_LABEL)
    recorded = label.get("profile") if isinstance(label, Mapping) else None
    return SessionDetail(
        id=session.id,
        status=status,
        live=live,
        profile=live_profile or recorded,
        created_at=meta.created_at,
        lineage=Lineage(meta.parent_session, meta.seed_length),
        labels=dict(meta.labels),
        events=len(session),
        turns=session.last_turn,
        open_turn=session.open_turn,
        header=None if header is None else unstructure(header),
        usage=UsageReport(
            model=usage_json(usage.model),
            compaction=usage_json(usage.compaction),
            total=usage_json(usage.total),
            model_calls=usage.model_calls,
            compaction_calls=usage.compaction_calls,
            cached_fraction=usage.cached_fraction,
        ),
        spend=spend_report(spend),
        subtree_spend=spend_report(subtree),
    )
