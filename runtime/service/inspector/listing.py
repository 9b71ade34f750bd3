"""The sessions list at scale: the query a listing page takes (search, filters, sort, page),
checked into typed errors, and the figures each row shows beyond the summary (the model,
errors, model-call latency) — pure functions of a session's meta and events."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Literal, TypeAlias
from urllib.parse import urlencode

from attrs import frozen

from ...model.events import (
    AssistantMessage,
    RequestHeaderEvent,
    SessionEvent,
    StepStart,
    ToolResultEvent,
    TurnEnd,
)
from ...model.header import HeaderDelta
from ..errors import InvalidRequestBody
from .timeline import CANCELLED_TOOL_CODES

SortKey: TypeAlias = Literal[
    "tree", "id", "created", "activity", "turns", "tokens", "cost", "errors", "latency"
]
SORT_KEYS: tuple[SortKey, ...] = (
    "tree",
    "id",
    "created",
    "activity",
    "turns",
    "tokens",
    "cost",
    "errors",
    "latency",
)
"""`tree` (the default) lists oldest first with forks and subagents under their parent;
the others sort the flat list by that column."""
SUMMARY_SORTS = frozenset({"activity", "turns", "tokens", "cost", "errors", "latency"})
"""Sorts that need every matching session loaded (the others order by the listing alone)."""
KINDS = ("root", "fork", "subagent")
STATUSES = (
    "running",
    "new",
    "open",
    "completed",
    "aborted",
    "disposed",
    "interrupted",
    "error",
    "rejected",
    "max-tokens",
    "budget_exhausted",
    "damaged",
)
PARAMETERS = frozenset({"q", "status", "kind", "sort", "page", "per_page"})
PER_PAGE = 50
MAX_PER_PAGE = 500
MAX_QUERY_CHARS = 200


@frozen
class SessionQuery:
    """What a listing page asks for: `q` a case-insensitive part of the session id,
    `status` and `kind` filters, the sort (`descending` when given as `-key`), and the
    page (1-based) of `per_page` rows."""

    q: str = ""
    status: str | None = None
    kind: str | None = None
    sort: SortKey = "tree"
    descending: bool = False
    page: int = 1
    per_page: int = PER_PAGE

    @property
    def needs_summaries(self) -> bool:
        """Whether filtering or sorting needs every matching session loaded."""
        return self.status is not None or self.sort in SUMMARY_SORTS

    @property
    def sort_param(self) -> str:
        """The sort as the `sort` parameter spells it."""
        return ("-" if self.descending else "") + self.sort

    def link(self, **changes: object) -> str:
        """This query's URL with `changes` applied (parameters at their default left out)."""
        values: dict[str, object] = {
            "q": self.q,
            "status": self.status,
            "kind": self.kind,
            "sort": self.sort_param,
            "page": self.page,
            "per_page": self.per_page,
        }
        values.update(changes)
        defaults: dict[str, object] = {"sort": "tree", "page": 1, "per_page": PER_PAGE}
        given = {
            key: value
            for key, value in values.items()
            if value not in ("", None) and value != defaults.get(key)
        }
        return "/?" + urlencode(given) if given else "/"

    def sort_link(self, key: SortKey) -> str:
        """The link a column header sorts by: that key, reversed if it is the sort now."""
        flip = self.sort == key and not self.descending
        return self.link(sort=("-" if flip else "") + key, page=1)


def parse_query(params: Mapping[str, str]) -> SessionQuery:
    """The listing query from a page's query parameters; anything unknown or out of range
    is refused (`InvalidRequestBody`, 422 VALIDATION_FAILED), never ignored."""
    unknown = sorted(set(params) - PARAMETERS)
    if unknown:
        raise InvalidRequestBody(f"the sessions list takes {sorted(PARAMETERS)}, got {unknown[:5]}")
    q = params.get("q", "").strip()
    if len(q) > MAX_QUERY_CHARS:
        raise InvalidRequestBody(f"q must be at most {MAX_QUERY_CHARS} characters")
    status = _choice(params, "status", STATUSES)
    kind = _choice(params, "kind", KINDS)
    raw_sort = params.get("sort", "") or "tree"
    descending = raw_sort.startswith("-")
    sort = next((key for key in SORT_KEYS if key == raw_sort.removeprefix("-")), None)
    if sort is None or (descending and sort == "tree"):
        raise InvalidRequestBody(
            f"sort must be one of {list(SORT_KEYS)} (or -key), got {raw_sort[:40]!r}"
        )
    return SessionQuery(
        q=q,
        status=status,
        kind=kind,
        sort=sort,
        descending=descending,
        page=_count(params, "page", 1, 1, 10**9),
        per_page=_count(params, "per_page", PER_PAGE, 1, MAX_PER_PAGE),
    )


def _choice(params: Mapping[str, str], name: str, allowed: Sequence[str]) -> str | None:
    value = params.get(name, "")
    if not value:
        return None
    if value not in allowed:
        raise InvalidRequestBody(f"{name} must be one of {list(allowed)}, got {value[:40]!r}")
    return value


def _count(params: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = params.get(name, "")
    if not raw:
        return default
    if not raw.isdigit():
        raise InvalidRequestBody(f"{name} must be a whole number, got {raw[:40]!r}")
    value = int(raw)
    if not low <= value <= high:
        raise InvalidRequestBody(f"{name} must be in {low}..{high}, got {value}")
    return value


@frozen
class RowStats:
    """What a row shows beside the summary, over the session's own events (a fork's seed
    left out): the model of its last answer, its errors (turns that ended `error` and
    failed tool results, cancellations not counted) and the median model-call latency
    (request to answer)."""

    model: str | None
    errors: int
    latency_ms: int | None


def row_stats(events: Sequence[SessionEvent], since: int = 0) -> RowStats:
    """The `RowStats` of `events[since:]`."""
    model: str | None = None
    errors = 0
    latencies: list[int] = []
    request_at: int | None = None
    for event in events[since:]:
        data = event.data
        if isinstance(data, StepStart):
            request_at = event.time
        elif isinstance(data, (RequestHeaderEvent, HeaderDelta)):
            request_at = event.time  # the request is sent after its header is logged
        elif isinstance(data, AssistantMessage):
            model = data.model
            if request_at is not None:
                latencies.append(event.time - request_at)
        elif _is_error(data):
            errors += 1
    latency = int(statistics.median(latencies)) if latencies else None
    return RowStats(model, errors, latency)


def _is_error(data: object) -> bool:
    """A failed tool result (a cancelled call is no error), or a turn that ended `error`."""
    if isinstance(data, ToolResultEvent):
        code = data.error.code if data.error is not None else None
        return data.is_error and code not in CANCELLED_TOOL_CODES
    return isinstance(data, TurnEnd) and data.reason.kind == "error"
