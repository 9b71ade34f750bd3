"""`actorloop inspect --allowed-host NAME` (repeatable), as `serve` has it: a Host header of
an allowed name is answered, another non-loopback name gets 421 MISDIRECTED_REQUEST."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import trio
from serve_kit import child_env

from actorloop.runtime import AgentOptions, Runtime
from actorloop.runtime.testing import ScriptedProvider


def test_inspect_answers_its_allowed_host_names_and_refuses_others(tmp_path: Path) -> None:
    store = f"sqlite:{tmp_path / 'inspected.db'}"

    async def create_store() -> None:
        async with Runtime.open(store=store, provider=ScriptedProvider([])) as runtime:
            await runtime.spawn(AgentOptions(model="m"), session_id="seen")

    trio.run(create_store)
    command = [sys.executable, "-m", "actorloop.runtime.console", "inspect"]
    hosts = ["--allowed-host", "dev.test", "--allowed-host", "Box.Lan:9"]
    server = subprocess.Popen(
        [*command, "--store", store, "--port", "0", *hosts],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
        cwd=tmp_path,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        match = re.fullmatch(r"actorloop inspect: http://127\.0\.0\.1:(\d+)/ .*\n", line)
        assert match is not None, line
        port = match.group(1)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            for host in (f"dev.test:{port}", "DEV.test", f"box.lan:{port}", f"127.0.0.1:{port}"):
                page = client.get("/", headers={"host": host})
                assert page.status_code == 200, (host, page.text)
                assert 'data-session="seen"' in page.text
                assert client.get("/healthz", headers={"host": host}).status_code == 200
            for host in (f"attacker.example:{port}", "dev.test.attacker.example", "test"):
                refused = client.get("/", headers={"host": host})
                assert refused.status_code == 421, (host, refused.text)
                assert refused.json()["error"]["code"] == "MISDIRECTED_REQUEST"
        server.send_signal(signal.SIGTERM)
        _out, err = server.communicate(timeout=60)
        assert server.returncode == 0, err
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate(timeout=30)


def test_inspect_help_names_allowed_host() -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "actorloop.runtime.console", "inspect", "--help"],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=60,
        check=False,
    )
    assert shown.returncode == 0 and "--allowed-host NAME" in shown.stdout
