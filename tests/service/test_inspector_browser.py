"""The session inspector in a real headless Chromium (Debian's `chromium`, driven by
Playwright over the system browser): the sessions list, a session's timeline, a request view,
the fork tree by keyboard, the cache view, and a live turn arriving over SSE — against a real
server (Hypercorn in this trio run) over a store the demo workload wrote.

Screenshots are taken on every run; with ACTORLOOP_SCREENSHOTS=docs they are written to
docs/images/ (the ones the README shows), else to a temporary directory. CI installs the
browser (.ci/run); without /usr/bin/chromium these tests are skipped, except under CI."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser_kit import CHROMIUM, Bridge, Chromium
from inspector_kit import DemoStore, GateModel, demo_store, gate_config
from serve_kit import Running, running_server

from actorloop.runtime.cli.workload import find_workload
from actorloop.runtime.log.cache_health import cache_health
from actorloop.runtime.stores.loading import load_session

ROOT = Path(__file__).resolve().parents[2]
VIEWPORT = {"width": 1280, "height": 860}
PNG = b"\x89PNG\r\n\x1a\n"

if not CHROMIUM.exists() and not os.environ.get("CI"):
    pytest.skip(
        f"no Chromium at {CHROMIUM}: apt-get install chromium chromium-driver (CI installs it)",
        allow_module_level=True,
    )

from playwright.sync_api import Browser, Page  # noqa: E402


@pytest.fixture(scope="module")
def chromium() -> Iterator[Chromium]:
    browser = Chromium()
    try:
        yield browser
    finally:
        browser.close()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> DemoStore:
    return demo_store(tmp_path_factory.mktemp("inspector"))


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if os.environ.get("ACTORLOOP_SCREENSHOTS") == "docs":
        return ROOT / "docs" / "images"
    return tmp_path_factory.mktemp("screenshots")


def open_page(browser: Browser, *, javascript: bool = True) -> tuple[Page, list[str]]:
    """A page in a context of its own, and the list its script errors and console errors
    are collected in (a page that works leaves it empty)."""
    context = browser.new_context(viewport=VIEWPORT, java_script_enabled=javascript)
    page = context.new_page()
    page.set_default_timeout(15_000)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    return page, errors


def screenshot(page: Page, path: Path) -> None:
    page.screenshot(path=str(path), full_page=True)
    data = path.read_bytes()
    assert data.startswith(PNG) and len(data) > 10_000
    width = int.from_bytes(data[16:20], "big")
    assert width == VIEWPORT["width"]


TICKED = "s => Number((document.querySelector(s) || {dataset: {}}).dataset.ticks) >= 1"
"""A page function: the ticking element matched by the selector has ticked at least once."""


def elapsed_ms(text: str) -> float:
    """The duration a ticking element shows (`running 1.2 s (since …)`), in milliseconds."""
    match = re.match(r"\w+ ([\d.]+) (ms|s|min) ", text)
    assert match is not None, text
    return float(match.group(1)) * {"ms": 1, "s": 1000, "min": 60_000}[match.group(2)]


async def session_count(server: Running) -> int:
    return len(await server.service.runtime.list_sessions())


async def test_sessions_list_then_a_session_timeline(
    chromium: Chromium, store: DemoStore, shots: Path
) -> None:
    async with running_server(gate_config(GateModel(), store.url), store=store.url) as server:
        listed = await session_count(server)
        coordinator = store.session(store.demo, "coordinator")
        worker = store.session(store.demo, "worker-0")

        def scenario(bridge: Bridge, browser: Browser) -> None:
            # Without JavaScript the list is all there: it is rendered on the server.
            bare, _ = open_page(browser, javascript=False)
            bare.goto(server.url + "/")
            assert bare.get_by_role("main").count() == 1
            assert bare.get_by_role("heading", level=1).inner_text() == "Sessions"
            rows = bare.locator("table.sessions tbody tr")
            assert rows.count() == listed
            damaged = bare.locator(f'tr.damaged[data-session="{store.damaged}"]')
            assert "SessionCorruptError" in damaged.inner_text()
            assert "damaged" in bare.locator("p.lead").inner_text()
            fork = bare.locator(f'tr[data-session="{store.family[1]}"]')
            assert f"fork of {worker} at seq" in fork.locator(".lineage").inner_text()
            assert re.search(r"\d+ (s|min) ago", fork.locator("time").inner_text())
            assert bare.locator(f'tr[data-session="{worker}"] td').nth(0).inner_text() == "aborted"
            assert "+ 3 inherited" in fork.locator("td.turn-count").inner_text()
            assert fork.locator("td.model").inner_text() == "sim-1"
            bare.context.close()

            page, errors = open_page(browser)
            page.goto(server.url + "/")
            for role, name in (("banner", None), ("contentinfo", None), ("navigation", "Site")):
                assert page.get_by_role(role, name=name).count() == 1
            # The first Tab stop is the skip link; it moves focus to the main landmark.
            page.keyboard.press("Tab")
            assert page.evaluate("document.activeElement.textContent") == "Skip to content"
            page.keyboard.press("Enter")
            assert page.evaluate("document.activeElement.id") == "main"
            screenshot(page, shots / "inspector-sessions.png")

            # search and filter with the form, sort by a column, page through
            page.get_by_label("Session id contains").fill(worker)
            page.get_by_label("Kind").select_option("fork")
            page.get_by_role("button", name="Show").click()
            page.wait_for_url(re.compile(rf"/\?q={worker}&status=&kind=fork&sort=tree$"))
            found = page.locator("table.sessions tbody tr")
            assert sorted(found.evaluate_all("rs => rs.map(r => r.dataset.session)")) == sorted(
                store.family[1:]
            )
            page.get_by_role("link", name="Turns").click()
            page.wait_for_url(f"**/?q={worker}&kind=fork&sort=turns")
            assert page.locator('th[aria-sort="ascending"]').inner_text().startswith("Turns")
            page.goto(server.url + "/?per_page=5")
            assert page.locator("table.sessions tbody tr").count() == 5
            page.get_by_role("link", name="next page →").first.click()
            page.wait_for_url("**/?page=2&per_page=5")
            assert "page 2 of" in page.locator("#listing-count").inner_text()
            page.goto(server.url + "/")

            page.get_by_role("link", name=coordinator, exact=True).first.click()
            page.wait_for_url(f"**/sessions/{coordinator}")
            assert page.get_by_role("heading", level=1, name=f"Session {coordinator}").count() == 1
            assert page.locator("#turns > li.turn").count() == 3
            delegate = page.locator("#turn-1 .tool-call", has_text="delegate")
            assert delegate.count() == 1 and "ms" in delegate.locator(".duration").inner_text()
            assert page.get_by_role("navigation", name="Session views").count() == 1
            assert re.fullmatch(r"\d\d:\d\d:\d\d", page.locator("#turn-1 h3 .clock").inner_text())
            delegate.get_by_role("link", name=re.compile("^subagent session")).click()
            page.wait_for_url(f"**/sessions/{coordinator}.*")
            assert "subagent of" in page.locator(".session-badges .lineage").inner_text()

            page.goto(f"{server.url}/sessions/{worker}")
            cancelled = page.locator("#turn-4 .mark-cancelled")
            assert "aborted (workload cancellation)" in cancelled.inner_text()
            page.wait_for_selector('#live[data-following="true"]')
            points = page.locator("#turns .fork-point")
            assert sorted(points.evaluate_all("ps => ps.map(p => p.dataset.child)")) == sorted(
                (store.family[1], store.family[2])
            )
            screenshot(page, shots / "inspector-timeline.png")
            points.filter(has_text=store.family[1]).get_by_role("link").click()
            page.wait_for_url(f"**/sessions/{store.family[1]}")
            assert "own +" in page.locator("#fact-turns").inner_text()
            assert errors == []
            page.context.close()

        await chromium.run(scenario)


async def test_a_request_view_shows_the_rebuilt_parts_and_the_digest(
    chromium: Chromium, store: DemoStore, shots: Path
) -> None:
    worker = store.session(store.demo, "worker-1")
    system = find_workload("demo").workers.system
    async with (
        running_server(gate_config(GateModel(), store.url), store=store.url) as server,
        server.client() as client,
    ):

        async def api(path: str) -> Any:
            response = await client.get(path)
            assert response.status_code == 200, response.text
            return response.json()

        def scenario(bridge: Bridge, browser: Browser) -> None:
            page, errors = open_page(browser)
            page.goto(f"{server.url}/sessions/{worker}")
            link = page.locator("#turn-1 .model-call a").nth(1)
            seq = int(link.inner_text().rsplit(" ", 1)[1])
            said = page.locator(f'#turn-1 .model-call[data-seq="{seq}"] p.answer').inner_text()
            link.click()
            page.wait_for_url(f"**/sessions/{worker}/requests/{seq}")
            rebuilt = bridge.call(api, f"/v1/sessions/{worker}/requests/{seq}")
            assert rebuilt["verified"] is True
            digest = page.locator("#digest")
            assert digest.get_attribute("data-verified") == "true"
            assert rebuilt["digest"]["rebuilt"] in digest.inner_text()
            assert page.locator("#part-system pre").inner_text() == (system or "")
            prefix = page.locator("#part-prefix")
            assert "request-only" in (prefix.get_attribute("class") or "")
            assert prefix.locator(".request-only-badge").inner_text() == "request-only"
            assert "Available skills:" in prefix.locator(".message").inner_text()
            assert page.locator("#part-history .message").count() == len(rebuilt["history"])
            assert page.locator("#part-tools li").count() == len(rebuilt["tools"])
            header = page.locator("#header-event").inner_text()
            if rebuilt["header_seq"] == rebuilt["snapshot_seq"]:
                assert header.startswith("the snapshot itself")
            else:
                assert f"at seq {rebuilt['header_seq']}" in header
            assert f"at seq {rebuilt['snapshot_seq']}" in page.locator(".provenance").inner_text()
            answer = page.locator("#part-answer")
            assert answer.locator(".message.role-assistant").count() == 1
            assert said in answer.locator(".message").inner_text()  # as the timeline shows it
            screenshot(page, shots / "inspector-request.png")
            page.get_by_role("link", name=re.compile("^next request")).click()
            page.wait_for_url(re.compile(r"/requests/\d+$"))
            assert int(page.url.rsplit("/", 1)[1]) > seq
            assert page.locator("#digest").get_attribute("data-verified") == "true"
            # a cancelled prompt stays in the history of the next request, marked
            page.goto(f"{server.url}/sessions/{store.cancelled}")
            page.locator("#turn-3 .model-call a").last.click()
            page.wait_for_url(re.compile(r"/requests/\d+$"))
            unfinished = page.locator("#part-history .message.unfinished")
            assert unfinished.count() == 1
            assert "A prompt the user cancelled." in unfinished.inner_text()
            assert "ABORTED turn 2 (the user pressed stop)" in unfinished.inner_text()
            assert page.locator("#part-history .message.role-user").count() == 3
            assert errors == []
            page.context.close()

        await chromium.run(scenario)


async def test_the_fork_tree_opens_a_session_by_keyboard(
    chromium: Chromium, store: DemoStore, shots: Path
) -> None:
    root, fork, _alt, deeper = store.family
    async with running_server(gate_config(GateModel(), store.url), store=store.url) as server:

        def scenario(bridge: Bridge, browser: Browser) -> None:
            page, errors = open_page(browser)
            page.goto(f"{server.url}/sessions/{deeper}/tree")
            nodes = page.locator("svg.fork-tree a.node")
            assert sorted(nodes.evaluate_all("ns => ns.map(n => n.dataset.session)")) == sorted(
                store.family
            )
            current = page.locator('svg.fork-tree a.node[aria-current="page"]')
            assert current.get_attribute("data-session") == deeper
            assert (
                page.get_by_role("link", name=re.compile(f"^{re.escape(root)}: root")).count() == 1
            )
            assert page.locator("svg.fork-tree path.edge").count() == 3
            screenshot(page, shots / "inspector-fork-tree.png")
            # Tab until the workload's fork has focus, then open it with Enter.
            for _ in range(60):
                page.keyboard.press("Tab")
                if page.evaluate("document.activeElement.dataset.session || ''") == fork:
                    break
            else:
                raise AssertionError("the fork tree's nodes are not reachable with Tab")
            page.keyboard.press("Enter")
            page.wait_for_url(f"**/sessions/{fork}")
            assert page.get_by_role("heading", level=1, name=f"Session {fork}").count() == 1
            assert errors == []
            page.context.close()

        await chromium.run(scenario)


async def test_the_cache_view_charts_each_request_and_names_each_drop(
    chromium: Chromium, store: DemoStore, shots: Path
) -> None:
    async with running_server(gate_config(GateModel(), store.url), store=store.url) as server:
        session = await load_session(server.service.runtime.store, store.story, repair=False)
        health = cache_health(session.events)
        drops = [request for request in health if request.drop is not None]

        def scenario(bridge: Bridge, browser: Browser) -> None:
            page, errors = open_page(browser)
            page.goto(f"{server.url}/sessions/{store.story}/cache")
            chart = page.get_by_role("group", name=re.compile("^Input tokens per request"))
            assert chart.count() == 1
            assert page.locator("svg.cache-chart a.bar-link").count() == len(health)
            assert page.locator("svg.cache-chart .drop-marker").count() == len(drops)
            listed = page.locator("ol.drops > li")
            assert listed.evaluate_all("ls => ls.map(l => Number(l.dataset.seq))") == [
                request.seq for request in drops
            ]
            kinds = page.locator("ol.drops .reason").evaluate_all(
                "rs => rs.map(r => r.dataset.kind)"
            )
            assert kinds == ["system", "tools", "prefix", "compaction"]
            assert page.locator("table.requests tbody tr").count() == len(health)
            screenshot(page, shots / "inspector-cache.png")
            page.locator("ol.drops > li").first.get_by_role("link").click()
            page.wait_for_url(f"**/requests/{drops[0].seq}")
            # a harmless drop (new input) is drawn apart from one that lost cached tokens
            page.goto(f"{server.url}/sessions/{store.cache_notes}/cache")
            fill = "m => getComputedStyle(m).fill"
            harmless = page.locator(".drop-marker.harmless").evaluate(fill)
            lost = page.locator(".drop-marker:not(.harmless)").evaluate(fill)
            assert harmless != lost
            assert page.locator("table.requests .mark-error").count() == 1
            assert "new input" in page.locator("table.requests .mark-harmless").inner_text()
            assert "below the 1,024-token minimum" in page.locator("table.requests").inner_text()
            assert errors == []
            page.context.close()

        await chromium.run(scenario)


async def test_a_live_turn_arrives_on_the_open_page(
    chromium: Chromium, store: DemoStore, shots: Path
) -> None:
    model = GateModel()
    async with (
        running_server(gate_config(model, store.url), store=store.url) as server,
        server.client() as client,
    ):
        created = await client.post("/v1/sessions", json={"session_id": "live-turn"})
        assert created.status_code == 201

        async def start_held_turn() -> None:
            sent = await client.post(
                "/v1/sessions/live-turn/messages",
                json={"content": "Check the release. call:lookup then hold", "wait": False},
            )
            assert sent.status_code == 202
            await model.held.wait()

        async def release() -> None:
            model.release()

        async def fetch_text(path: str) -> str:
            return (await client.get(path)).text

        async def logged_types() -> list[tuple[int, str]]:
            agent = server.service.runtime.get("live-turn")
            assert agent is not None
            await agent.wait_idle()
            return [(e.seq, e.type) for e in agent.session.events if e.type != "assistant/chunk"]

        def scenario(bridge: Bridge, browser: Browser) -> None:
            page, errors = open_page(browser)
            page.goto(f"{server.url}/sessions/live-turn")
            page.wait_for_selector('#live[data-following="true"]')
            assert page.locator("#turns > li").count() == 0
            bridge.call(start_held_turn)
            # the turn's first step (the lookup) and the held model call of its second
            page.wait_for_selector("#turn-1 .model-call.running")
            page.wait_for_selector('#live-events li[data-type="tool/result"]')
            assert page.locator("#session-status .status-running").count() == 1
            assert page.locator("#turn-1 .tool-call", has_text="lookup").count() == 1
            assert page.locator("#turn-1 .step").count() == 2
            assert page.locator(".session-badges .status-running").count() == 1
            assert page.locator(".session-badges .live").inner_text() == "live agent: running"
            # the running turn's duration ticks between events (none arrive while held)
            ticking = page.locator("#turn-1 .turn-meta .ticking")
            page.wait_for_function(TICKED, arg="#turn-1 .turn-meta .ticking")
            first = elapsed_ms(ticking.inner_text())
            page.wait_for_function(
                "([s, n]) => Number(document.querySelector(s).dataset.ticks) >= n",
                arg=[
                    "#turn-1 .turn-meta .ticking",
                    int(ticking.get_attribute("data-ticks") or 0) + 2,
                ],
            )
            assert elapsed_ms(ticking.inner_text()) > first
            assert re.search(r"\(since \d\d:\d\d:\d\d\)$", ticking.inner_text())
            served = bridge.call(fetch_text, "/sessions/live-turn")
            assert re.search(r"running since <time[^>]*>\d\d:\d\d:\d\d</time>", served)
            screenshot(page, shots / "inspector-live.png")
            # a keyboard user's focus survives the live re-rendering
            first_request = page.locator("#turn-1 .model-call a").first
            first_request.focus()
            href = first_request.get_attribute("href")
            bridge.call(release)
            page.wait_for_selector("#turn-1 .turn-meta .status-completed")
            page.wait_for_selector('#live-events li[data-type="turn/end"]')
            assert page.locator("#turn-1 .model-call a").count() == 2
            expected = bridge.call(logged_types)
            page.wait_for_selector(f'#live[data-rendered-seq="{expected[-1][0]}"]')
            assert page.evaluate("document.activeElement.getAttribute('href')") == href
            assert page.locator(".session-badges .live").inner_text() == "live agent: idle"
            shown = page.locator("#live-events li").evaluate_all(
                "ls => ls.map(l => [Number(l.dataset.seq), l.dataset.type])"
            )
            assert [tuple(item) for item in shown] == expected
            assert errors == []
            page.context.close()

        await chromium.run(scenario)


def test_the_readme_shows_the_screenshots_the_browser_tests_take() -> None:
    readme = (ROOT / "README.md").read_text()
    names = re.findall(r"\(docs/images/(inspector-[a-z-]+\.png)\)", readme)
    assert sorted(names) == sorted(
        f"inspector-{name}.png"
        for name in ("sessions", "timeline", "request", "fork-tree", "cache", "live")
    )
    for name in names:
        assert (ROOT / "docs" / "images" / name).read_bytes().startswith(PNG)
