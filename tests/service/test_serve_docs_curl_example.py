"""docs/serve.md's curl example, run as written (with real curl and bash) against a real
server over the simulator: its last command asks for the request behind a model answer,
with a seq it derives from the session's events, and gets the rebuilt, verified request."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import trio
from inspector_kit import contributor
from serve_kit import running_server

from actorloop.runtime import AgentOptions
from actorloop.runtime.cli.orchestration import LOOKUP, make_sim
from actorloop.runtime.service.profiles import AppConfig

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTED = "localhost:8765"


def curl_example() -> list[str]:
    """The commands of serve.md's curl example (continued lines joined), in order."""
    text = (ROOT / "docs" / "serve.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)```", text, re.S)
    [block] = [b for b in blocks if "/requests/" in b and "curl" in b]
    joined = block.replace("\\\n", " ")
    return [line for line in joined.splitlines() if line.strip() and not line.startswith("#")]


def json_documents(output: str) -> list[Any]:
    """The JSON documents curl printed one after another (its output ends no line)."""
    decoder = json.JSONDecoder()
    documents, position = [], 0
    while position < len(output.rstrip()):
        document, position = decoder.raw_decode(output, position)
        documents.append(document)
        while position < len(output) and output[position].isspace():
            position += 1
    return documents


def simulated() -> AppConfig:
    config = AppConfig(provider=make_sim(0, None), model=None, store_url="memory:")
    config.add_profile(
        "default",
        AgentOptions(model="sim-1", system="Be brief.", tools=(LOOKUP,)),
        listeners={"agent/session-prefix": contributor("Available skills: search")},
    )
    return config


async def test_the_curl_example_gets_the_request_behind_the_last_answer() -> None:
    commands = curl_example()
    assert commands[-1].endswith("/requests/$seq")
    # the example's stream follows the session forever: run it once, not following
    runnable = [c for c in commands if " -sN " not in c]
    assert len(runnable) == len(commands) - 1
    async with running_server(simulated()) as server:
        address = server.url.removeprefix("http://").rstrip("/")
        script = "set -euo pipefail\n" + "\n".join(c.replace(DOCUMENTED, address) for c in runnable)
        done = await trio.to_thread.run_sync(
            lambda: subprocess.run(
                ["bash", "-c", script], capture_output=True, text=True, timeout=120, check=False
            )
        )
        assert done.returncode == 0, done.stderr
        rebuilt = json_documents(done.stdout)[-1]
        agent = server.service.runtime.get("demo")
        assert agent is not None
        answers = [e.seq for e in agent.session.events if e.type == "assistant/message"]
    assert len(answers) == 2  # the lookup call, then the answer after its result
    assert rebuilt["seq"] == answers[-1] and rebuilt["verified"] is True
    assert rebuilt["tools"][0]["name"] == "lookup"
