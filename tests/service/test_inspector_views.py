"""What the inspector's pages say over the store the demo workload wrote (a real server and
socket, no browser): the sessions list searched, filtered, sorted, with its model, errors
and latency columns and a fork's own and inherited turns apart; a fork's summary split the
same way, and its parent's timeline marking where it was taken; a delegate call linking
its subagent's session; clock times; the request view's answer and the history messages
of a cancelled turn marked; harmless cache drops and 0% cached explained."""

from __future__ import annotations

import html
import re
from collections.abc import AsyncIterator

import httpx
import pytest
from inspector_kit import DemoStore, GateModel, demo_store, gate_config
from serve_kit import running_server

from actorloop.runtime.log.session import Session
from actorloop.runtime.log.summary import summarize
from actorloop.runtime.model.events import AssistantMessage
from actorloop.runtime.service.inspector.cache_notes import PROVIDER_MIN_CACHE_TOKENS
from actorloop.runtime.stores.loading import load_session
from actorloop.runtime.stores.urls import open_store

CLOCK = r"\d\d:\d\d:\d\d"
TOKENS = re.compile(r"([\d,.]+)(k?) / [\d,.]+k?")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> DemoStore:
    return demo_store(tmp_path_factory.mktemp("inspector-views"))


@pytest.fixture
async def client(store: DemoStore) -> AsyncIterator[httpx.AsyncClient]:
    async with (
        running_server(gate_config(GateModel(), store.url), store=store.url) as server,
        server.client() as client,
    ):
        yield client


async def page(client: httpx.AsyncClient, path: str, **params: str) -> str:
    response = await client.get(path, params=params)
    assert response.status_code == 200, (path, response.text[:800])
    return response.text


async def stored(store: DemoStore, session: str) -> Session:
    """The session as the store holds it (read-only)."""
    opened = open_store(store.url)
    try:
        return await load_session(opened, session, repair=False)
    finally:
        await opened.close()


def rows(text: str) -> list[str]:
    return re.findall(r'<tr[^>]* data-session="([^"]+)"', text)


def row_html(text: str, session: str) -> str:
    match = re.search(rf'<tr[^>]* data-session="{re.escape(session)}".*?</tr>', text, re.S)
    assert match is not None, session
    return match.group(0)


def plain(fragment: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


async def test_the_list_searches_filters_and_sorts(
    store: DemoStore, client: httpx.AsyncClient
) -> None:
    everything = rows(await page(client, "/"))
    worker = store.session(store.demo, "worker-0")
    found = rows(await page(client, "/", q="WORKER-0"))
    assert found and all("worker-0" in session for session in found)
    assert set(found) == {session for session in everything if "worker-0" in session}
    forks = rows(await page(client, "/", kind="fork"))
    assert set(forks) >= set(store.family[1:]) and worker not in forks
    aborted = rows(await page(client, "/", status="aborted"))
    assert worker in aborted and store.cancelled not in aborted  # its last turn completed
    assert rows(await page(client, "/", status="damaged")) == [store.damaged]
    by_tokens = await page(client, "/", sort="-tokens")
    listed = [plain(row_html(by_tokens, session)) for session in rows(by_tokens)]
    tokens = [
        float(match.group(1).replace(",", "")) * (1000 if match.group(2) else 1)
        for match in map(TOKENS.search, listed)
        if match
    ]
    assert tokens == sorted(tokens, reverse=True) and len(tokens) == len(everything) - 1
    assert 'aria-sort="descending"' in by_tokens
    empty = await page(client, "/", q="no-such-session")
    assert rows(empty) == [] and "No session of the" in empty
    for params, problem in (
        ({"page": "0"}, "page must be in"),
        ({"per_page": "9999"}, "per_page must be in"),
        ({"status": "weird"}, "status must be one of"),
        ({"sort": "-tree"}, "sort must be one of"),
        ({"colour": "red"}, "the sessions list takes"),
    ):
        refused = await client.get("/", params=params)
        assert refused.status_code == 422 and "VALIDATION_FAILED" in refused.text, params
        assert problem in html.unescape(refused.text), params


async def test_rows_show_model_errors_latency_and_a_forks_own_turns(
    store: DemoStore, client: httpx.AsyncClient
) -> None:
    text = await page(client, "/")
    worker, fork = store.family[0], store.family[1]
    worker_row = row_html(text, worker)
    assert '<td class="model">sim-1</td>' in worker_row
    assert re.search(r'<td class="num latency">\d+ ms</td>', worker_row)
    assert '<td class="num errors">0</td>' in worker_row  # a cancelled turn is no error
    assert '<td class="num turn-count">4</td>' in worker_row
    # the workload's fork ran one turn of its own on a seed of three
    assert re.search(
        r'<td class="num turn-count">1 <span class="inherited-note">\+ 3 inherited',
        row_html(text, fork),
    )


async def test_a_fork_shows_its_own_and_inherited_work_apart(
    store: DemoStore, client: httpx.AsyncClient
) -> None:
    worker, fork = store.family[0], store.family[1]
    loaded = await stored(store, fork)
    summary = summarize(loaded.meta, loaded.events)
    text = plain(await page(client, f"/sessions/{fork}"))
    own, inherited = summary.usage.model_calls, summary.inherited_usage.model_calls
    assert own > 0 and inherited > own
    assert f"Model requests {own} own + {inherited} inherited" in text
    assert "Turns 1 own + 3 inherited" in text
    assert f"Events {summary.own_events} own + {summary.inherited_events} inherited" in text
    assert "Own usage" in text and "Inherited usage" in text
    parent = await page(client, f"/sessions/{worker}")
    points = re.findall(r'class="fork-point" data-seq="(\d+)" data-child="([^"]+)"', parent)
    assert (str(loaded.meta.seed_length - 1), fork) in points  # type: ignore[operator]
    assert {child for _seq, child in points} == {fork, store.family[2]}
    assert re.search(
        rf'<h3>Turn 1 <span class="trigger">[^<]*</span> <time class="clock"[^>]*>{CLOCK}</time>',
        parent,
    )


async def test_a_delegate_call_links_its_subagent_session(
    store: DemoStore, client: httpx.AsyncClient
) -> None:
    coordinator = store.session(store.demo, "coordinator")
    text = await page(client, f"/sessions/{coordinator}")
    links = re.findall(r'<a class="subagent-link" href="/sessions/([^"]+)">', text)
    assert len(links) == 1 and links[0].startswith(f"{coordinator}.")
    child = await page(client, f"/sessions/{links[0]}")
    assert "subagent of" in child and f'href="/sessions/{coordinator}"' in child


async def test_the_request_view_shows_its_answer_and_marks_a_cancelled_turn(
    store: DemoStore, client: httpx.AsyncClient
) -> None:
    loaded = await stored(store, store.cancelled)
    answers = [e for e in loaded.events if isinstance(e.data, AssistantMessage)]
    first, after = answers
    text = await page(client, f"/sessions/{store.cancelled}/requests/{after.seq}")
    answer = re.search(r'id="part-answer">.*?</li>\s*</ol>', text, re.S)
    assert answer is not None
    assert after.data.content[0].text in html.unescape(answer.group(0))  # type: ignore[union-attr]
    marked = re.findall(
        r'class="message role-user unfinished" data-seq="(\d+)" data-turn="(\d+)"', text
    )
    prompt = next(
        e.seq for e in loaded.events if e.type == "user/message" and "cancelled" in str(e.data)
    )
    assert marked == [(str(prompt), "2")]
    assert "aborted</span> turn 2 (the user pressed stop)" in text
    assert "1 message of turns that did not complete" in text
    before = await page(client, f"/sessions/{store.cancelled}/requests/{first.seq}")
    assert "unfinished" not in before and first.data.content[0].text in html.unescape(before)  # type: ignore[union-attr]


async def test_harmless_drops_are_not_alarms_and_zero_cached_is_explained(
    store: DemoStore, client: httpx.AsyncClient
) -> None:
    text = await page(client, f"/sessions/{store.cache_notes}/cache")
    drops = re.findall(r'<li class="drop([^"]*)" data-seq="\d+" data-cause="([^"]+)"', text)
    assert drops == [(" harmless", "new-input"), ("", "unexplained")]
    assert (
        text.count('class="mark mark-harmless"') == 1 and text.count('class="mark mark-error"') == 1
    )
    assert (
        text.count('class="drop-marker harmless"') == 1 and text.count('class="drop-marker"') == 1
    )
    assert "2 times (1 harmless: new input, nothing cached lost)" in text
    assert f"300 input tokens is below the {PROVIDER_MIN_CACHE_TOKENS:,}-token minimum" in text
    # a cold write is plain from the cache-write column; the request view says it in words
    assert "the prefix was written to the cache" not in text
    notes = await stored(store, store.cache_notes)
    second = [e.seq for e in notes.events if isinstance(e.data, AssistantMessage)][1]
    written = await page(client, f"/sessions/{store.cache_notes}/requests/{second}")
    assert "the prefix was written to the cache (1,200 tokens) for the next request" in written
    tiny = await page(client, f"/sessions/{store.cancelled}")
    assert "0% cached" in plain(tiny) and "below the 1,024-token minimum providers cache" in tiny


async def test_the_fork_tree_counts_each_forks_own_turns(
    store: DemoStore, client: httpx.AsyncClient
) -> None:
    root, fork, alt, deeper = store.family
    text = await page(client, f"/sessions/{deeper}/tree")
    labels = dict(re.findall(r'data-session="([^"]+)"\s+aria-label="[^"]*?: ([^"]*)"', text))
    assert labels[root] == "root, aborted, 4 turns"
    assert labels[fork] == "fork, completed, 1 turn + 3 inherited"
    assert labels[alt] == "fork, completed, 1 turn + 1 inherited"
    assert labels[deeper] == "fork, completed, 1 turn + 2 inherited (this session)"
