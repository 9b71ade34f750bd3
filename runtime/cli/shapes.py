"""The JSON the `--json` flags print: token usage, a session's summary row, a damaged
session's row, and JSON lines on stdout."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import orjson

from ...codecs.converter import unstructure
from ...codecs.rows import meta_to_dict
from ..log.summary import SessionSummary
from ..log.usage import UsageTotals
from ..model.budget import Spend
from ..model.chunks import TokenUsage
from ..model.meta import SessionMeta
from .render import iso_utc


def token_usage_dict(usage: TokenUsage) -> dict[str, int]:
    """One usage figure by token kind, with the billed input they add up to."""
    return {
        "input": usage.input,
        "output": usage.output,
        "cache_read": usage.cache_read,
        "cache_write": usage.cache_write,
        "reasoning": usage.reasoning,
        "billed_input": usage.prompt_total,
    }


def usage_dict(usage: UsageTotals) -> dict[str, Any]:
    """The model's, the summarizer's and the total usage, with call counts."""
    fraction = usage.cached_fraction
    return {
        "model": token_usage_dict(usage.model),
        "compaction": token_usage_dict(usage.compaction),
        "total": token_usage_dict(usage.total),
        "model_calls": usage.model_calls,
        "compaction_calls": usage.compaction_calls,
        "unreported": usage.unreported,
        "cached_fraction": None if fraction is None else round(fraction, 4),
    }


def summary_dict(meta: SessionMeta, summary: SessionSummary) -> dict[str, Any]:
    """A readable session's row of `sessions list --json`."""
    return {
        **meta_to_dict(meta),
        "labels": unstructure(meta.labels),
        "damaged": False,
        "kind": summary.kind,
        "status": summary.status,
        "parent": summary.parent,
        "parent_call": summary.parent_call,
        "fork_seq": summary.fork_seq,
        "created": iso_utc(summary.created_at),
        "last_event_at": summary.last_event_at,
        "last_event": None if summary.last_event_at is None else iso_utc(summary.last_event_at),
        "events": summary.events,
        "turns": summary.turns,
        "open_turn": summary.open_turn,
        "usage": usage_dict(summary.usage),
        "spend": spend_dict(summary.spend),
    }


def spend_dict(spend: Spend) -> dict[str, Any]:
    """Tokens, model calls and dollars (None: a price is unknown; docs/budgets.md)."""
    return {"tokens": spend.tokens, "model_calls": spend.model_calls, "usd": spend.usd}


def damaged_dict(session_id: str, problem: str) -> dict[str, Any]:
    """The row of a session the store cannot read."""
    return {"id": session_id, "damaged": True, "status": "damaged", "problem": problem}


def write_json_lines(objects: Sequence[dict[str, Any]]) -> None:
    """One JSON object per line on stdout."""
    out = sys.stdout.buffer
    for value in objects:
        out.write(orjson.dumps(value) + b"\n")
    out.flush()
