"""The CLI's words and numbers: plurals, ages, token amounts, and shortened session ids that
always expand back to exactly the id they came from."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from actorloop.runtime.cli.render import (
    ELLIPSIS,
    FAILED_MARK,
    FAILED_STYLE,
    ago,
    expand,
    iso_utc,
    plural,
    shorten_ids,
    timeline,
    tokens,
)
from actorloop.runtime.model.chunks import ErrorInfo
from actorloop.runtime.model.events import CompactionEnd, CompactionSummary, SessionEvent
from actorloop.runtime.model.meta import SessionMeta

NOW = 1_800_000_000_000


def test_plurals_and_amounts() -> None:
    assert plural(1, "turn") == "1 turn"
    assert plural(0, "turn") == "0 turns"
    assert plural(2, "request") == "2 requests"
    assert plural(1204, "event") == "1,204 events"
    assert plural(3, "summary", "summaries") == "3 summaries"
    assert [tokens(n) for n in (950, 9950, 12_345, 4_100_000)] == ["950", "9,950", "12.3k", "4.1M"]


def test_ages_read_like_a_person_would_say_them() -> None:
    second, minute, hour, day = 1000, 60_000, 3_600_000, 86_400_000
    assert ago(NOW - 12 * second, NOW) == "12 s ago"
    assert ago(NOW - 5 * minute, NOW) == "5 min ago"
    assert ago(NOW - 3 * hour, NOW) == "3 h ago"
    assert ago(NOW - day, NOW) == "1 day ago"
    assert ago(NOW - 3 * day, NOW) == "3 days ago"
    assert len(ago(NOW - 30 * day, NOW)) == len("2026-12-01")  # a date beyond a week
    assert iso_utc(0) == "1970-01-01T00:00:00.000Z"


def test_a_shortened_id_keeps_what_tells_it_apart() -> None:
    ids = [
        "demo-4c5b1a5a-worker-0",
        "demo-4c5b1a5a-worker-0-fork",
        "demo-4c5b1a5a-worker-1",
        "demo-9f9f9f9f-worker-0",
    ]
    shown = shorten_ids(ids, 14, ids)
    assert all(len(text) <= 14 for text in shown.values())
    assert len(set(shown.values())) == len(ids)
    for session_id, text in shown.items():
        assert ELLIPSIS in text
        assert expand(text, ids) == (session_id,)
        assert expand(text.replace(ELLIPSIS, "..."), ids) == (session_id,)
    assert shorten_ids(["short"], 14, ids) == {"short": "short"}
    assert expand("demo-4c5b1a5a-worker-0", ids) == (
        "demo-4c5b1a5a-worker-0",
        "demo-4c5b1a5a-worker-0-fork",
    )  # a prefix: the caller decides (an exact id wins before expansion)
    assert expand("a…b…c", ids) == ()


_ID = st.text(alphabet="ab.-_0", min_size=1, max_size=40).filter(
    lambda s: not s.startswith(".") and ".." not in s
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_ID, min_size=1, max_size=25, unique=True), st.integers(5, 30))
def test_every_shortened_id_names_exactly_its_session(ids: list[str], width: int) -> None:
    shown = shorten_ids(ids, width, ids)
    for session_id, text in shown.items():
        if text != session_id:
            assert ELLIPSIS in text and len(text) < len(session_id)
            assert expand(text, ids) == (session_id,)
        if len(session_id) <= width:
            assert text == session_id  # what fits is never cut


def test_a_failed_compaction_is_marked_apart_from_a_summary() -> None:
    events = [
        SessionEvent(
            "compaction/summary",
            0,
            NOW,
            CompactionSummary("c1", "what happened", (1, 2), 40, "sim", "sim-1", 512),
        ),
        SessionEvent("compaction/end", 1, NOW, CompactionEnd("c1", 1)),
        SessionEvent(
            "compaction/end",
            2,
            NOW,
            CompactionEnd("c2", 1, ErrorInfo("summary is not smaller", "SUMMARY_TOO_LARGE")),
        ),
    ]
    summary, failed = timeline(SessionMeta("s"), events)
    assert FAILED_MARK not in summary.plain and summary.style != FAILED_STYLE
    assert failed.plain.split(None, 1) == [
        "compaction",
        f"{FAILED_MARK} failed (SUMMARY_TOO_LARGE): summary is not smaller; "
        "the history stays as it was",
    ]
    assert failed.style == FAILED_STYLE
