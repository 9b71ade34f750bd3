"""`SessionSummary`: what a listing says about one stored session — its kind and parent
(a fork's parent session, a subagent's parent agent), status, turns and token usage —
computed from its meta and events alone (a pure function; nothing is replayed or written)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, TypeAlias

from attrs import field, frozen

from ...codecs.jsonvalue import FrozenDict
from ..model.budget import NO_SPEND, Spend
from ..model.events import SessionEvent, TurnEnd, TurnEndKind, TurnStart
from ..model.meta import SessionMeta
from .ledger import session_ledger
from .usage import UsageTotals, inherited_usage, session_usage

SessionKind: TypeAlias = Literal["root", "fork", "subagent"]


@frozen
class SessionSummary:
    """One stored session at a glance.

    `kind` is `subagent` for a child spawned by a subagent tool (its parent agent is in the
    `parent_agent` label), `fork` for a fork child (`parent_session` in its meta), else
    `root`; `parent` names that parent. `turns` is the last turn number (a fork counts its
    seed's turns: turn numbers continue the parent's); `usage` is what the session used
    itself (a fork's seed is its parent's). `status` is `new` before the first turn, `open`
    while the last turn has no `turn/end` (its writer is live, or it crashed and the next
    load repairs it), else how the last turn ended.

    A fork's own and inherited work apart: `inherited_turns`, `inherited_events` and
    `inherited_usage` are its seed's (zero for a session that is no fork); `own_turns` and
    `own_events` what it did itself, beside `usage`.
    """

    id: str
    kind: SessionKind
    parent: str | None
    parent_call: str | None
    fork_seq: int | None
    created_at: int
    last_event_at: int | None
    events: int
    turns: int
    open_turn: int | None
    last_end: TurnEndKind | None
    usage: UsageTotals
    labels: FrozenDict
    inherited_turns: int = 0
    inherited_events: int = 0
    inherited_usage: UsageTotals = field(factory=UsageTotals)
    spend: Spend = NO_SPEND
    """What the session's own model and summarizer calls cost (docs/budgets.md): dollars
    are None when a price is unknown."""

    @property
    def own_turns(self) -> int:
        """The turns this session ran itself (a fork's seed turns left out)."""
        return self.turns - self.inherited_turns

    @property
    def own_events(self) -> int:
        """The events this session logged itself (a fork's seed left out)."""
        return self.events - self.inherited_events

    @property
    def status(self) -> str:
        if self.open_turn is not None:
            return "open"
        return self.last_end or "new"


def summarize(meta: SessionMeta, events: Sequence[SessionEvent]) -> SessionSummary:
    """The summary of a session from its stored meta and (durable) events."""
    parent_agent = _label(meta.labels, "parent_agent")
    kind: SessionKind
    if parent_agent is not None:
        kind, parent = "subagent", parent_agent
    elif meta.parent_session is not None:
        kind, parent = "fork", meta.parent_session
    else:
        kind, parent = "root", None
    turns = 0
    open_turn: int | None = None
    last_end: TurnEndKind | None = None
    for event in reversed(events):
        data = event.data
        if isinstance(data, TurnEnd):
            last_end, turns = data.reason.kind, data.turn
            break
        if isinstance(data, TurnStart):
            open_turn = turns = data.turn
            break
    return SessionSummary(
        id=meta.id,
        kind=kind,
        parent=parent,
        parent_call=_label(meta.labels, "parent_call") if kind == "subagent" else None,
        fork_seq=meta.seed_length - 1 if meta.seed_length else None,
        created_at=meta.created_at,
        last_event_at=events[-1].time if events else None,
        events=len(events),
        turns=turns,
        open_turn=open_turn,
        last_end=last_end,
        usage=session_usage(meta, events),
        labels=meta.labels,
        inherited_turns=_last_turn(events[: meta.seed_length or 0]),
        inherited_events=min(meta.seed_length or 0, len(events)),
        inherited_usage=inherited_usage(meta, events),
        spend=session_ledger(meta, events).total,
    )


def _last_turn(events: Sequence[SessionEvent]) -> int:
    """The number of the last turn that starts or ends in `events` (0 when none does)."""
    for event in reversed(events):
        if isinstance(event.data, (TurnEnd, TurnStart)):
            return event.data.turn
    return 0


def _label(labels: FrozenDict, key: str) -> str | None:
    value: Any = labels.get(key)
    return value if isinstance(value, str) and value else None
