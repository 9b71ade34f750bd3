"""A store's filesystem location never reaches a client: an error body or an inspector
page names a SQLite file by its name only (`sqlite …/paths.db`), over a real server and a
real, damaged SQLite file (docs/serve.md, threat model)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import trio
from serve_kit import HeldModel, app_config_for, running_server

from actorloop.runtime import AgentOptions, Runtime
from actorloop.runtime.service.errors import hide_directories
from actorloop.runtime.testing import ScriptedProvider, reply


def _damaged_store(tmp_path: Path) -> str:
    """A SQLite store with one session whose events no longer decode."""
    url = f"sqlite:{tmp_path / 'paths.db'}"

    async def write() -> None:
        async with Runtime.open(store=url, provider=ScriptedProvider([reply("hi")])) as rt:
            agent = await rt.spawn(AgentOptions(model="m"), session_id="broken")
            await agent.send("hello")

    trio.run(write)
    with sqlite3.connect(tmp_path / "paths.db") as db:
        db.execute("UPDATE events SET body = X'00ff' WHERE session_id = 'broken'")
    return url


def test_error_bodies_and_pages_name_the_store_file_only(tmp_path: Path) -> None:
    url = _damaged_store(tmp_path)
    directory = str(tmp_path)

    async def main() -> None:
        config = app_config_for(HeldModel(), store=url)
        async with running_server(config, store=url) as server, server.client() as client:
            answer = await client.get("/v1/sessions/broken")
            assert answer.status_code == 409, answer.text
            message = answer.json()["error"]["message"]
            assert directory not in message and "…/paths.db" in message, message
            page = await client.get("/sessions/broken")
            assert page.status_code == 409, page.text
            assert directory not in page.text and "…/paths.db" in page.text
            index = await client.get("/")
            assert index.status_code == 200
            assert directory not in index.text

    trio.run(main)


def test_the_rule_keeps_names_urls_and_relative_paths() -> None:
    assert hide_directories("sqlite /home/user/x.db: locked") == "sqlite …/x.db: locked"
    assert hide_directories("write to '/srv/logs/a b.jsonl' failed") == (
        "write to '…/a b.jsonl' failed"
    )
    kept = "postgres store postgresql://app@db.example:5432/runs is closed; sqlite runs.db"
    assert hide_directories(kept) == kept
    assert hide_directories("sqlite data/x.db") == "sqlite data/x.db"
