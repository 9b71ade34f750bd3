"""The sessions list at scale, over a real SQLite file of a thousand sessions and a real
server: one page of fifty rows (not every session on one page), the pager, a page past the
end, and that a page in the default order reads only its own sessions from the store."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from serve_kit import HeldModel, app_config_for, running_server

from actorloop.runtime import AgentOptions, Runtime
from actorloop.runtime.model.meta import SessionMeta
from actorloop.runtime.service.inspector import views
from actorloop.runtime.service.inspector.listing import PER_PAGE, SessionQuery
from actorloop.runtime.service.profiles import Profile, ProfileRegistry
from actorloop.runtime.service.service import SessionService
from actorloop.runtime.stores.sqlite import SqliteStore

SESSIONS = 1000


class CountsLoads(SqliteStore):
    """A real SQLite store that counts the sessions it loads."""

    loads = 0

    async def load(self, *args: Any, **kwargs: Any) -> Any:
        CountsLoads.loads += 1
        return await super().load(*args, **kwargs)

    async def load_folded(self, *args: Any, **kwargs: Any) -> Any:
        # The service reads a stored session from its fold snapshot (persistence.md §2.7).
        CountsLoads.loads += 1
        return await super().load_folded(*args, **kwargs)


async def thousand_sessions(path: Path) -> str:
    """A store of `SESSIONS` sessions, created a millisecond apart (oldest first)."""
    store = SqliteStore(path)
    try:
        for index in range(SESSIONS):
            await store.create(SessionMeta(f"s-{index:04d}", created_at=1_000_000 + index))
    finally:
        await store.close()
    return f"sqlite:{path}"


def row_ids(html: str) -> list[str]:
    return re.findall(r'<tr data-session="([^"]+)"', html)


async def test_a_thousand_sessions_are_listed_fifty_to_a_page(tmp_path: Path) -> None:
    url = await thousand_sessions(tmp_path / "many.db")
    async with (
        running_server(app_config_for(HeldModel(), url), store=url) as server,
        server.client() as client,
    ):
        first = await client.get("/")
        assert first.status_code == 200
        assert row_ids(first.text) == [f"s-{index:04d}" for index in range(PER_PAGE)]
        assert "page 1 of 20 shows 1–50" in first.text
        assert 'href="/?page=2" rel="next"' in first.text
        everything = await client.get("/", params={"per_page": "500"})
        assert len(row_ids(everything.text)) == 500
        # a page holds its rows, not the store's: ten times the rows, ~ten times the bytes
        assert len(everything.content) > 8 * len(first.content)
        last = await client.get("/", params={"page": "20"})
        assert row_ids(last.text)[-1] == "s-0999" and len(row_ids(last.text)) == PER_PAGE
        assert 'rel="prev"' in last.text and "last page" in last.text
        beyond = await client.get("/", params={"page": "21"})
        assert beyond.status_code == 200 and row_ids(beyond.text) == []
        newest = await client.get("/", params={"sort": "-created", "q": "s-09"})
        assert row_ids(newest.text)[:3] == ["s-0999", "s-0998", "s-0997"]
        assert "100 of 1,000 sessions match" in newest.text


async def test_a_page_in_the_default_order_reads_only_its_own_sessions(tmp_path: Path) -> None:
    await thousand_sessions(tmp_path / "many.db")
    store = CountsLoads(tmp_path / "many.db")
    async with Runtime.open(store=store, provider=HeldModel()) as rt:  # type: ignore[arg-type]
        profiles = ProfileRegistry()
        profiles.add(Profile("default", AgentOptions(model="m")))
        async with SessionService.open(rt, profiles) as service:
            CountsLoads.loads = 0
            page = await views.session_listing(service, SessionQuery(page=3))
            assert [row.id for row in page.rows][:2] == ["s-0100", "s-0101"]
            assert (page.matched, page.stored, page.pages) == (SESSIONS, SESSIONS, 20)
            assert CountsLoads.loads == PER_PAGE
            # a sort by a figure needs every session's figures: each is read once
            CountsLoads.loads = 0
            by_turns = await views.session_listing(service, SessionQuery(sort="turns"))
            assert len(by_turns.rows) == PER_PAGE and CountsLoads.loads == SESSIONS
