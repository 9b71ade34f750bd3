"""Real front-end clients in headless Chromium (Debian's `chromium`, driven by Playwright
over the system browser) against a real server: a page on the `ai` package's chat
(`AbstractChat`, what `useChat` wraps, with its `DefaultChatTransport`) and one on
`@ag-ui/client`'s `HttpAgent` render a tool-using turn, and the messages each rebuilt equal
the session's `derive_messages()`; the chat's stop() and the agent's abortRun() cancel
their own turn only, and the chat's resumeStream() reattaches to a running turn.

The page scripts are bundled from tests/js/src with esbuild (tests/js: `npm ci`, which
.ci/run does). Without node, the npm packages or /usr/bin/chromium these tests are skipped,
except under CI (CI=true), where they fail."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from serve_kit import Running, running_server
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route
from ui_kit import ChattyModel, chatty_config

from actorloop.runtime.service.agui import messages_from_agui
from actorloop.runtime.service.ui_message_stream import messages_from_ui

ROOT = Path(__file__).resolve().parents[2]
KIT = ROOT / "tests" / "js"
CHROMIUM = Path(os.environ.get("ACTORLOOP_CHROMIUM", "/usr/bin/chromium"))
MISSING = [
    what
    for what, there in (
        (f"Chromium at {CHROMIUM}", CHROMIUM.exists()),
        ("node and npm", shutil.which("node") is not None and shutil.which("npm") is not None),
        ("tests/js/node_modules (npm ci in tests/js)", (KIT / "node_modules").is_dir()),
    )
    if not there
]
if MISSING:
    if os.environ.get("CI") == "true":
        pytest.fail(f"missing {', '.join(MISSING)}: .ci/run installs them", pytrace=False)
    pytest.skip(f"missing {', '.join(MISSING)} (.ci/run installs them)", allow_module_level=True)

from browser_kit import Bridge, Chromium  # noqa: E402
from playwright.sync_api import Browser, Page  # noqa: E402


@pytest.fixture(scope="module")
def bundles() -> Path:
    """The page scripts, bundled by esbuild from tests/js/src."""
    subprocess.run(["npm", "run", "-s", "build"], cwd=KIT, check=True, timeout=120)
    return KIT / "dist"


@pytest.fixture(scope="module")
def chromium() -> Iterator[Chromium]:
    browser = Chromium()
    try:
        yield browser
    finally:
        browser.close()


PAGE = """<!doctype html><html><head><meta charset="utf-8"><link rel="icon" href="data:,">
<title>{name}</title></head><body><ul id="messages"></ul>
<script src="/ui-test/{name}.js"></script></body></html>"""


def page_routes(bundles: Path) -> list[Route]:
    async def page(request: Request) -> Response:
        name = request.path_params["name"]
        return HTMLResponse(PAGE.format(name=name))

    async def script(request: Request) -> Response:
        name = request.path_params["name"]
        body = (bundles / f"{name}.js").read_bytes()
        return Response(body, media_type="text/javascript")

    return [Route("/ui-test/{name}.js", script), Route("/ui-test/{name}", page)]


def open_page(browser: Browser, url: str) -> tuple[Page, list[str]]:
    page = browser.new_page()
    page.set_default_timeout(20_000)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(url)
    return page, errors


def chat_scenario(bridge: Bridge, browser: Browser, url: str) -> tuple[Any, str, list[str]]:
    page, errors = open_page(browser, f"{url}/ui-test/chat")
    result = page.evaluate("() => chatTurn('s1', 'lookup please')")
    shown = page.inner_text("#messages")
    page.close()
    return result, shown, errors


async def test_an_ai_sdk_chat_renders_a_tool_using_turn_and_rebuilds_the_history(
    chromium: Chromium, bundles: Path
) -> None:
    async with running(bundles) as (server, client, _model):
        await client.post("/v1/sessions", json={"session_id": "s1"})
        result, shown, errors = await chromium.run(chat_scenario, server.url)
        assert errors == []
        assert result["status"] == "ready"
        assert "tool lookup [output-available]" in shown and "answer 0" in shown
        agent = server.service.runtime.get("s1")
        assert agent is not None
        assert messages_from_ui(result["messages"]) == agent.session.derive_messages()


def agui_scenario(bridge: Bridge, browser: Browser, url: str) -> tuple[Any, str, list[str]]:
    page, errors = open_page(browser, f"{url}/ui-test/agui")
    result = page.evaluate("() => aguiTurn('thread-1', 'lookup please')")
    shown = page.inner_text("#messages")
    page.close()
    return result, shown, errors


async def test_an_ag_ui_client_renders_a_tool_using_turn_and_rebuilds_the_history(
    chromium: Chromium, bundles: Path
) -> None:
    async with running(bundles) as (server, _client, _model):
        result, shown, errors = await chromium.run(agui_scenario, server.url)
        assert errors == []
        assert result["result"] == {"end": "completed"}
        assert "call lookup" in shown and "answer 0" in shown
        agent = server.service.runtime.get("thread-1")
        assert agent is not None
        assert messages_from_agui(result["messages"]) == agent.session.derive_messages()


def stop_scenario(bridge: Bridge, browser: Browser, url: str, model: ChattyModel) -> Any:
    page, errors = open_page(browser, f"{url}/ui-test/chat")
    page.evaluate("() => chatStart('s1', 'hold on')")
    bridge.call(model.entered.wait)  # the turn runs: its model call is held
    result = page.evaluate("() => chatStop()")
    page.close()
    return result, errors


def agui_abort_scenario(bridge: Bridge, browser: Browser, url: str, model: ChattyModel) -> Any:
    page, errors = open_page(browser, f"{url}/ui-test/agui")
    page.evaluate("() => aguiStart('thread-2', 'hold on')")
    bridge.call(model.entered.wait)  # the run's turn is under way: its model call is held
    outcome = page.evaluate("() => aguiAbort()")
    page.close()
    return outcome, errors


async def _release(model: ChattyModel) -> None:
    model.release()


def resume_scenario(bridge: Bridge, browser: Browser, url: str, model: ChattyModel) -> Any:
    page, errors = open_page(browser, f"{url}/ui-test/chat")
    page.evaluate("() => { window.resumed = chatResume('s3') }")
    page.wait_for_function("() => document.querySelector('#messages li') !== null")
    bridge.call(_release, model)
    result = page.evaluate("() => window.resumed")
    page.close()
    return result, errors


async def test_stop_and_abort_cancel_only_their_turn_and_resume_reattaches(
    chromium: Chromium, bundles: Path
) -> None:
    async with running(bundles) as (server, client, model):
        for sid in ("s1", "s2", "s3"):
            await client.post("/v1/sessions", json={"session_id": sid})
        outcome, errors = await chromium.run(agui_abort_scenario, server.url, model)
        assert errors == [] and outcome == "finished", outcome
        thread = server.service.runtime.get("thread-2")
        assert thread is not None
        await thread.wait_idle()
        end = thread.session.events[-1]
        assert (end.type, end.data.reason.kind) == ("turn/end", "aborted")
        model.entered = trio.Event()
        result, errors = await chromium.run(stop_scenario, server.url, model)
        assert errors == [] and result["status"] == "ready"
        agent = server.service.runtime.get("s1")
        assert agent is not None
        await agent.wait_idle()
        end = agent.session.events[-1]
        assert (end.type, end.data.reason.kind) == ("turn/end", "aborted")
        # Another session still answers; a held turn there is resumed by a fresh page.
        answer = await client.post("/v1/sessions/s2/messages", json={"content": "hi"})
        assert answer.status_code == 200
        started = await client.post(
            "/v1/sessions/s3/messages", json={"content": "hold", "wait": False}
        )
        assert started.status_code == 202
        result, errors = await chromium.run(resume_scenario, server.url, model)
        assert errors == [] and result["status"] == "ready"
        assert [part["type"] for part in result["messages"][-1]["parts"]][-2:] == [
            "step-start",
            "text",
        ]
        third = server.service.runtime.get("s3")
        assert third is not None
        assert messages_from_ui(result["messages"]) == third.session.derive_messages()[1:]


@asynccontextmanager
async def running(bundles: Path) -> AsyncIterator[tuple[Running, httpx.AsyncClient, ChattyModel]]:
    """A server with the test pages at /ui-test/, its client and its model."""
    model = ChattyModel()
    async with (
        running_server(chatty_config(model), routes=page_routes(bundles)) as server,
        server.client() as client,
    ):
        yield server, client, model
