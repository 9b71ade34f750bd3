"""The browser attacks of issue 33 in a real headless Chromium (Debian's `chromium` driven by
Playwright) against a real tokenless server: a page on another origin posts to the API the
ways a page can without a preflight (a text/plain form, no-cors fetches) and with one —
nothing is created and no turn runs; a host name rebound to 127.0.0.1 (Chromium's host
resolver rules) gets no page and no data. Without /usr/bin/chromium these tests are
skipped, except under CI."""

from __future__ import annotations

import logging
import os

import pytest
import trio
from browser_kit import CHROMIUM, FLAGS
from serve_kit import HeldModel, app_config_for, running_server

REBOUND = "rebound.example"

if not CHROMIUM.exists() and not os.environ.get("CI"):
    pytest.skip(f"no Chromium at {CHROMIUM} (CI installs it)", allow_module_level=True)

from playwright.sync_api import sync_playwright  # noqa: E402

ATTACK = """<!doctype html><html><head><title>attacking</title></head><body>
<form id="form" method="POST" action="{api}/v1/sessions" enctype="text/plain">
<input name='{{"session_id": "form-text", "x": "' value='"}}'><button id="go">go</button>
</form>
<script>
(async () => {{
  const tries = [
    ["/v1/sessions", {{method: "POST", mode: "no-cors",
      body: JSON.stringify({{session_id: "fetch-plain"}})}}],
    ["/v1/sessions", {{method: "POST", mode: "no-cors", headers: {{"content-type": "text/plain"}},
      body: JSON.stringify({{session_id: "fetch-text"}})}}],
    ["/v1/sessions/victim/messages", {{method: "POST", mode: "no-cors",
      headers: {{"content-type": "text/plain"}},
      body: JSON.stringify({{content: "call:lookup"}})}}],
    ["/v1/sessions", {{method: "POST", headers: {{"content-type": "application/json"}},
      body: JSON.stringify({{session_id: "fetch-json"}})}}],
  ];
  for (const [path, init] of tries) {{
    try {{ await fetch("{api}" + path, init); }} catch (error) {{}}
  }}
  document.title = "sent";
}})();
</script></body></html>"""


async def serve_page(html: str, task_status: trio.TaskStatus[int]) -> None:
    """A one-page HTTP server on 127.0.0.1 (the attacker's origin); its port through
    `task_status`."""
    body = html.encode()

    async def answer(stream: trio.SocketStream) -> None:
        received = b""
        while b"\r\n\r\n" not in received:
            chunk = await stream.receive_some(65536)
            if not chunk:
                return
            received += chunk
        await stream.send_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: %d\r\n"
            b"connection: close\r\n\r\n%s" % (len(body), body)
        )
        await stream.aclose()

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    task_status.started(listeners[0].socket.getsockname()[1])
    await trio.serve_listeners(answer, listeners)


def run_attack(page_url: str) -> str:
    """Open the attacker's page, wait for its fetches, submit its form; the text of the
    page the form navigated to."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=FLAGS
        )
        try:
            page = browser.new_page()
            page.set_default_timeout(15_000)
            page.goto(page_url)
            page.wait_for_function("document.title === 'sent'")
            with page.expect_navigation():
                page.click("#go")
            return page.inner_text("body")
        finally:
            browser.close()


def answered(caplog: pytest.LogCaptureFixture, line: str) -> int:
    return sum(
        line in record.getMessage()
        for record in caplog.records
        if record.name == "actorloop.http.access"
    )


async def test_a_page_on_another_origin_creates_and_runs_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="actorloop.http.access")
    async with (
        running_server(app_config_for(HeldModel()), access_log=True) as server,
        server.client() as client,
        trio.open_nursery() as nursery,
    ):
        assert (await client.post("/v1/sessions", json={"session_id": "victim"})).is_success
        port = await nursery.start(serve_page, ATTACK.format(api=server.url))
        landing = await trio.to_thread.run_sync(run_attack, f"http://localhost:{port}/")
        assert "FORBIDDEN_ORIGIN" in landing  # the form's post reached the server: refused
        # Every post that left the browser was refused (the JSON one never left it: its
        # preflight got no CORS answer).
        lines = [r.getMessage() for r in caplog.records if r.name == "actorloop.http.access"]
        assert answered(caplog, '"POST /v1/sessions HTTP/1.1" 403') == 3, lines
        assert answered(caplog, '"POST /v1/sessions/victim/messages HTTP/1.1" 403') == 1, lines
        assert answered(caplog, '"OPTIONS /v1/sessions HTTP/1.1" 405') == 1, lines
        assert answered(caplog, '" 201 ') == 1, lines  # the test's own create only
        assert [s.id for s in await server.service.runtime.list_sessions()] == ["victim"]
        detail = (await client.get("/v1/sessions/victim")).json()
        assert detail["turns"] == 0
        nursery.cancel_scope.cancel()


def visit_rebound(url: str) -> tuple[int, str, str]:
    """Open `url` with `rebound.example` resolving to 127.0.0.1: the status and text of the
    page, and what a fetch of the session list from it got."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            headless=True,
            args=[*FLAGS, f"--host-resolver-rules=MAP {REBOUND} 127.0.0.1"],
        )
        try:
            page = browser.new_page()
            page.set_default_timeout(15_000)
            response = page.goto(url)
            assert response is not None
            listed = page.evaluate(
                "fetch('/v1/sessions').then(async r => r.status + ' ' + await r.text())"
            )
            return response.status, page.inner_text("body"), str(listed)
        finally:
            browser.close()


async def test_a_rebound_host_name_gets_no_page_and_no_data() -> None:
    async with running_server(app_config_for(HeldModel())) as server, server.client() as client:
        assert (await client.post("/v1/sessions", json={"session_id": "secret-42"})).is_success
        port = server.url.rsplit(":", 1)[1]
        for path in ("/", "/sessions/secret-42"):
            status, text, fetched = await trio.to_thread.run_sync(
                visit_rebound, f"http://{REBOUND}:{port}{path}"
            )
            assert status == 421 and "MISDIRECTED_REQUEST" in text
            assert fetched.startswith("421 ") and "MISDIRECTED_REQUEST" in fetched
            assert "secret-42" not in text + fetched
        # The same browser reaching the server by its loopback address sees the session:
        # what was refused was the name.
        status, text, fetched = await trio.to_thread.run_sync(visit_rebound, f"{server.url}/")
        assert status == 200 and "secret-42" in fetched


def bidi_of_holders(url: str, mark: str) -> list[str]:
    """The computed `unicode-bidi` (then tag.class) of every element with a text node
    holding `mark`."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=FLAGS
        )
        try:
            page = browser.new_page()
            page.set_default_timeout(15_000)
            page.goto(url)
            found = page.evaluate(
                """mark => Array.from(document.querySelectorAll('body *'))
                  .filter(e => Array.from(e.childNodes)
                    .some(n => n.nodeType === 3 && n.data.includes(mark)))
                  .map(e => `${getComputedStyle(e).unicodeBidi} ${e.tagName}.${e.className}`)""",
                mark,
            )
            return [str(value) for value in found]
        finally:
            browser.close()


async def test_bidi_controls_in_session_text_reorder_nothing_around_them() -> None:
    async with running_server(app_config_for(HeldModel())) as server, server.client() as client:
        assert (await client.post("/v1/sessions", json={"session_id": "bidi"})).is_success
        text = "pay \u202etxt.exe\u2066 now"
        sent = await client.post("/v1/sessions/bidi/messages", json={"content": text})
        assert sent.status_code == 200
        holders = await trio.to_thread.run_sync(
            bidi_of_holders, f"{server.url}/sessions/bidi", "\u202e"
        )
        assert len(holders) >= 2  # the user's message and the echoing answer
        assert {holder.split(" ")[0] for holder in holders} == {"isolate"}, holders
