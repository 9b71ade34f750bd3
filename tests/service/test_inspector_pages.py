"""The inspector's pages over a real server and socket (no browser): served at `/` only
without an API token, its headers and assets, typed errors as HTML pages, a turn a killed
process left open and the crash repair marked once the session resumes, a store listing a
damaged session, the fork tree's layout, and `actorloop inspect` as a process."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import trio
from serve_kit import TOKEN, HeldModel, app_config_for, child_env, running_server

from actorloop.runtime import AgentOptions, Runtime
from actorloop.runtime.cli.orchestration import LOOKUP
from actorloop.runtime.model.meta import DamagedSession, SessionMeta
from actorloop.runtime.service.inspector import views
from actorloop.runtime.service.inspector.routes import SECURITY_HEADERS
from actorloop.runtime.service.inspector.tree import (
    NODE_HEIGHT,
    NODE_WIDTH,
    Lineage,
    family_tree,
)
from actorloop.runtime.service.profiles import Profile, ProfileRegistry
from actorloop.runtime.service.service import SessionService
from actorloop.runtime.stores import open_store
from actorloop.runtime.stores.sqlite import SqliteStore


def error_code(response: httpx.Response) -> str:
    """The code an HTML error page names."""
    match = re.search(r"<h1>\d+: <code>([A-Z_]+)</code></h1>", response.text)
    assert match is not None, response.text[:500]
    return match.group(1)


async def test_pages_headers_assets_and_typed_errors() -> None:
    async with (
        running_server(app_config_for(HeldModel())) as server,
        server.client() as client,
    ):
        assert (await client.post("/v1/sessions", json={"session_id": "s1"})).status_code == 201
        sent = await client.post("/v1/sessions/s1/messages", json={"content": "hi call:lookup"})
        assert sent.json()["reason"] == "completed"
        index = await client.get("/")
        assert index.status_code == 200
        assert index.headers["content-type"] == "text/html; charset=utf-8"
        for name, value in SECURITY_HEADERS.items():
            assert index.headers[name] == value
        assert 'data-session="s1"' in index.text and "<main" in index.text

        page = await client.get("/sessions/s1")
        assert page.status_code == 200
        assert 'id="turn-1"' in page.text and "lookup" in page.text
        assert 'data-events="/v1/sessions/s1/events"' in page.text
        fragment = await client.get("/sessions/s1/live")
        assert fragment.status_code == 200 and not fragment.text.lstrip().startswith("<!doctype")
        assert 'id="turn-1"' in fragment.text
        for path in ("/sessions/s1/tree", "/sessions/s1/cache", "/sessions/s1/requests/10"):
            assert (await client.get(path)).status_code == 200, path

        css = await client.get("/assets/inspector.css")
        assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
        again = await client.get(
            "/assets/inspector.css", headers={"If-None-Match": css.headers["etag"]}
        )
        assert again.status_code == 304 and again.content == b""
        script = await client.get("/assets/inspector.js")
        assert script.headers["content-type"].startswith("text/javascript")
        assert "EventSource" in script.text

        cases = [
            ("/assets/nothing.js", 404, "NOT_FOUND"),
            ("/?sort=nonsense", 422, "VALIDATION_FAILED"),
            ("/?colour=red", 422, "VALIDATION_FAILED"),
            ("/sessions/s1?sort=id", 422, "VALIDATION_FAILED"),
            ("/sessions/.hidden", 400, "INVALID_SESSION_ID"),
            ("/sessions/zz", 404, "SESSION_NOT_FOUND"),
            ("/sessions/zz/tree", 404, "SESSION_NOT_FOUND"),
            ("/sessions/s1/requests/0", 422, "NOT_A_MODEL_ANSWER"),
            ("/sessions/s1/requests/x", 422, "VALIDATION_FAILED"),
            ("/sessions/s1/requests/99999", 404, "EVENT_NOT_FOUND"),
        ]
        for path, status, code in cases:
            response = await client.get(path)
            assert (response.status_code, error_code(response)) == (status, code), path
            assert response.headers["content-type"].startswith("text/html")
        refused = await client.post("/")
        assert (
            refused.status_code == 405 and refused.json()["error"]["code"] == "METHOD_NOT_ALLOWED"
        )


async def test_with_an_api_token_the_inspector_is_not_served() -> None:
    async with (
        running_server(app_config_for(HeldModel()), token=TOKEN) as server,
        server.client() as client,
    ):
        for path in ("/", "/sessions/s1", "/assets/inspector.css"):
            response = await client.get(path)
            assert response.status_code == 404
            assert response.json()["error"]["code"] == "NOT_FOUND"


CRASH_CHILD = """
import sys, trio
from actorloop.runtime import AgentOptions, Runtime, Tool
from actorloop.runtime.testing import ScriptedProvider
from actorloop.runtime.providers.scripted import tool_call

async def stuck(args, ctx):
    print("TOOL STARTED", flush=True)
    await trio.sleep_forever()

async def main(url):
    provider = ScriptedProvider([tool_call("c1", "stuck", {})])
    tool = Tool("stuck", "Never returns.", {"type": "object"}, stuck)
    async with Runtime.open(store=url, provider=provider) as rt:
        agent = await rt.spawn(AgentOptions(model="m", tools=(tool,)), session_id="crashed")
        await agent.send("run the stuck tool")

trio.run(main, sys.argv[1])
"""


def kill_mid_tool(tmp_path: Path, url: str) -> None:
    """Run the crash child until its tool has started, then kill -9 it."""
    script = tmp_path / "child.py"
    script.write_text(CRASH_CHILD)
    child = subprocess.Popen(
        [sys.executable, str(script), url], stdout=subprocess.PIPE, text=True, env=child_env()
    )
    assert child.stdout is not None
    assert child.stdout.readline() == "TOOL STARTED\n"
    child.send_signal(signal.SIGKILL)
    assert child.wait(timeout=30) == -signal.SIGKILL


async def test_a_killed_turn_is_open_then_marked_repaired(tmp_path: Path) -> None:
    url = f"sqlite:{tmp_path / 'crash.db'}"
    await trio.to_thread.run_sync(kill_mid_tool, tmp_path, url)
    async with (
        running_server(app_config_for(HeldModel(), url), store=url) as server,
        server.client() as client,
    ):
        before = (await client.get("/sessions/crashed")).text
        assert "status-open" in before and "no turn/end" in before
        assert re.search(r'class="call tool-call"[^>]*>.*?stuck.*?running…', before, re.S)
        resumed = await client.post("/v1/sessions/crashed/resume", json={})
        assert resumed.status_code == 200
        after = (await client.get("/sessions/crashed")).text
        assert "interrupted: closed by crash repair" in after
        assert "TOOL_OUTCOME_UNKNOWN: written by crash repair" in after
        assert after.count('class="mark mark-repaired"') == 2


async def test_a_call_the_log_never_started_is_marked_repaired(tmp_path: Path) -> None:
    """The durable log ends at an answer asking for a tool (what a crash before the call's
    flush leaves): the resume's repair answers the call TOOL_NOT_STARTED."""
    url = f"sqlite:{tmp_path / 'torn.db'}"
    async with Runtime.open(store="memory:", provider=HeldModel()) as rt:  # type: ignore[arg-type]
        agent = await rt.spawn(AgentOptions(model="m", tools=(LOOKUP,)), session_id="torn")
        await agent.send("please call:lookup")
        asked = next(e.seq for e in agent.session.events if e.type == "assistant/message")
        meta, events = agent.session.meta, agent.session.events[: asked + 1]
    # Acknowledged up to the answer: the SQLite store holds that prefix as its whole log.
    store = open_store(url)
    try:
        await store.create(meta)
        await store.append("torn", events)
    finally:
        await store.close()
    async with (
        running_server(app_config_for(HeldModel(), url), store=url) as server,
        server.client() as client,
    ):
        resumed = await client.post("/v1/sessions/torn/resume", json={})
        assert resumed.status_code == 200, resumed.text
        page = (await client.get("/sessions/torn")).text
    assert "TOOL_NOT_STARTED: written by crash repair" in page
    assert "interrupted: closed by crash repair" in page
    assert re.search(r'class="call tool-call is-error".*?<strong>lookup</strong>', page, re.S)


def test_rows_a_lineage_cycle_keeps_from_every_root_are_still_listed() -> None:
    def row(session: str, parent: str | None) -> views.SessionRow:
        lineage = Lineage("fork", parent, 0) if parent else Lineage("root", None, None)
        return views.SessionRow(session, 0, lineage, None, None, "unreadable", None)

    rows = [row("x", "y"), row("y", "x"), row("r", None), row("c", "r")]
    ordered = views._tree_order(rows)
    assert sorted(r.id for r in ordered) == ["c", "r", "x", "y"]
    assert [(r.id, r.depth) for r in ordered][:2] == [("r", 0), ("c", 1)]


class ListsAGhost(SqliteStore):
    """A real SQLite store that also lists a session whose record it cannot read, as a
    store reports one (`DamagedSession`) in place of its meta."""

    async def list(self) -> tuple[Any, ...]:
        return (*await super().list(), DamagedSession("ghost", "meta record unreadable"))


async def test_a_store_listing_a_damaged_session_flags_it_and_lists_the_rest(
    tmp_path: Path,
) -> None:
    store = ListsAGhost(tmp_path / "ghost.db")
    async with Runtime.open(store=store, provider=HeldModel()) as rt:  # type: ignore[arg-type]
        agent = await rt.spawn(AgentOptions(model="m"), session_id="alive")
        await agent.send("hello")
        child = await rt.fork("alive", child_id="alive-fork")
        profiles = ProfileRegistry()
        profiles.add(Profile("default", AgentOptions(model="m")))
        async with SessionService.open(rt, profiles) as service:
            rows = await views.session_rows(service)
        await child.dispose()
    assert [(row.id, row.depth, row.status) for row in rows] == [
        ("alive", 0, "completed"),
        ("alive-fork", 1, "completed"),
        ("ghost", 0, "damaged"),
    ]
    assert rows[2].problem == "meta record unreadable" and rows[1].live == "idle"


def test_the_family_tree_lays_out_forks_and_subagents_without_overlap() -> None:
    metas = [
        SessionMeta("root", created_at=1),
        SessionMeta("a", created_at=2, parent_session="root", seed_length=5),
        SessionMeta("b", created_at=3, parent_session="root", seed_length=9),
        SessionMeta("a1", created_at=4, parent_session="a", seed_length=7),
        SessionMeta("sub", created_at=5, labels={"parent_agent": "b"}),
        SessionMeta("orphan", created_at=6, parent_session="gone", seed_length=3),
        SessionMeta("other", created_at=7),
    ]
    tree = family_tree(metas, "a1")
    assert tree.root == "root"
    by_id = {node.id: node for node in tree.nodes}
    assert set(by_id) == {"root", "a", "b", "a1", "sub"}
    assert [node.id for node in tree.nodes] == ["root", "a", "a1", "b", "sub"]
    assert {(e.parent, e.child, e.kind, e.label) for e in tree.edges} == {
        ("root", "a", "fork", "fork @4"),
        ("root", "b", "fork", "fork @8"),
        ("a", "a1", "fork", "fork @6"),
        ("b", "sub", "subagent", "subagent"),
    }
    for edge in tree.edges:
        assert by_id[edge.child].x > by_id[edge.parent].x + NODE_WIDTH
    nodes = list(tree.nodes)
    for index, one in enumerate(nodes):
        for other in nodes[index + 1 :]:
            apart_x = abs(one.x - other.x) >= NODE_WIDTH
            apart_y = abs(one.y - other.y) >= NODE_HEIGHT
            assert apart_x or apart_y, (one.id, other.id)
        assert one.x + NODE_WIDTH <= tree.width and one.y + NODE_HEIGHT <= tree.height
    # a parent sits midway between its first and last child
    assert by_id["root"].y == (by_id["a"].y + by_id["b"].y) / 2
    # a parent missing from the store makes its child a root of its own drawing
    assert family_tree(metas, "orphan").root == "orphan"
    looped = [
        SessionMeta("x", parent_session="y", seed_length=1),
        SessionMeta("y", parent_session="x", seed_length=1),
    ]
    assert {node.id for node in family_tree(looped, "x").nodes} == {"x", "y"}


def test_actorloop_inspect_serves_a_store_on_loopback_and_stops_on_sigterm(
    tmp_path: Path,
) -> None:
    store = f"sqlite:{tmp_path / 'runs.db'}"
    env = child_env(ACTORLOOP_API_TOKEN="ignored-by-inspect")
    command = [sys.executable, "-m", "actorloop.runtime.console"]
    ran = subprocess.run(
        [*command, "run", "tiny", "--store", store, "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    missing = subprocess.run(
        [*command, "inspect", "--store", f"sqlite:{tmp_path / 'none.db'}", "--port", "0"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert missing.returncode == 2 and "no store at" in missing.stderr
    assert not (tmp_path / "none.db").exists()
    server = subprocess.Popen(
        [*command, "inspect", "--store", store, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        match = re.fullmatch(
            r"actorloop inspect: (http://127\.0\.0\.1:\d+/) \(store (.*?);.*\n", line
        )
        assert match is not None, line
        assert match.group(2) == store
        index = httpx.get(match.group(1), timeout=30)
        assert index.status_code == 200
        assert index.text.count('<tr data-session="tiny-') == 5
        server.send_signal(signal.SIGTERM)
        _out, err = server.communicate(timeout=60)
        assert server.returncode == 0, err
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate(timeout=30)


def test_inspect_is_a_command_of_the_cli() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "actorloop.runtime.console", "inspect", "--help"],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=60,
        check=False,
    )
    assert result.returncode == 0
    assert "--store" in result.stdout and "--port" in result.stdout
    assert "127.0.0.1" in result.stdout
