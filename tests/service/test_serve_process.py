"""`actorloop serve` as a subprocess, the way an operator runs it: SIGTERM drains a running
turn (aborted after the grace period, flushed, exit 0) and a restarted server resumes the
session on demand; auth on and off; no non-loopback bind without a token; `--app` and
`--profiles`; and no API key or token in any response or log line."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import trio
from serve_kit import TOKEN, ServerProcess, SseReader, child_env, server_process
from sse_server import SseServer, json_reply


def start(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> ServerProcess:
    return ServerProcess(list(args), env or child_env(), tmp_path)


async def start_async(tmp_path: Path, *args: str, **kwargs: Any) -> ServerProcess:
    return await trio.to_thread.run_sync(lambda: start(tmp_path, *args, **kwargs))


async def test_sigterm_drains_a_running_turn_and_a_restart_resumes_it(tmp_path: Path) -> None:
    store = f"sqlite:{tmp_path}/serve.db"
    server = await start_async(
        tmp_path, "--store", store, "--sim-latency-ms", "600000", "--grace", "0.2"
    )
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            created = await client.post("/v1/sessions", json={"session_id": "long"})
            assert created.status_code == 201
            answer: dict[str, Any] = {}
            async with trio.open_nursery() as nursery:

                async def waiting_send() -> None:
                    response = await client.post(
                        "/v1/sessions/long/messages", json={"content": "a slow question"}
                    )
                    answer.update(status=response.status_code, body=response.json())

                nursery.start_soon(waiting_send)
                async with client.stream("GET", "/v1/sessions/long/events") as response:
                    async for event in SseReader(response):
                        if event.event == "request/header":
                            break  # the model call is under way
                server.proc.send_signal(signal.SIGTERM)
            code, _out, err = await trio.to_thread.run_sync(server.wait)
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
    assert code == 0, err
    assert answer["status"] == 200
    assert (answer["body"]["reason"], answer["body"]["message"]) == (
        "aborted",
        "server shutting down",
    )
    assert "SIGTERM: draining" in err and "stopped: sessions flushed" in err

    again = await start_async(tmp_path, "--store", store, "--sim-latency-ms", "0")
    try:
        async with httpx.AsyncClient(base_url=again.url, timeout=60) as client:
            stored = (await client.get("/v1/sessions/long")).json()
            assert (stored["status"], stored["turns"], stored["open_turn"]) == ("stored", 1, None)
            assert (await client.get("/v1/sessions/long/verify")).json()["ok"] is True
            turn = await client.post("/v1/sessions/long/messages", json={"content": "again"})
            assert (turn.json()["turn"], turn.json()["reason"]) == (2, "completed")
            live = (await client.get("/v1/sessions/long")).json()
            assert (live["status"], live["profile"]) == ("idle", "default")
    finally:
        code, _out, err = await trio.to_thread.run_sync(again.terminate)
    assert code == 0, err


def test_auth_on_and_off(tmp_path: Path) -> None:
    with server_process(tmp_path, "--store", "memory:") as open_server:
        assert httpx.get(f"{open_server.url}/v1/sessions").status_code == 200
        code, _, _ = open_server.terminate()
        assert code == 0
    with server_process(
        tmp_path, "--store", "memory:", env=child_env(ACTORLOOP_API_TOKEN=TOKEN)
    ) as guarded:
        refused = httpx.get(f"{guarded.url}/v1/sessions")
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "UNAUTHORIZED"
        headers = {"Authorization": f"Bearer {TOKEN}"}
        assert httpx.get(f"{guarded.url}/v1/sessions", headers=headers).status_code == 200
        assert httpx.get(f"{guarded.url}/healthz").status_code == 200
        code, out, err = guarded.terminate()
    assert code == 0
    assert TOKEN not in out + err


def test_a_non_loopback_bind_needs_a_token(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "actorloop.runtime.console", "serve", "--host", "0.0.0.0"],
        capture_output=True,
        text=True,
        env=child_env(),
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "refusing to bind '0.0.0.0' without an API token" in result.stderr
    assert not (tmp_path / "actorloop.db").exists()  # nothing was opened or written


def test_bad_app_and_profiles_files_exit_2_with_one_line(tmp_path: Path) -> None:
    bad_toml = tmp_path / "bad.toml"
    bad_toml.write_text('[profiles.x]\nmodel = "m"\ntemperature = "hot"\n')
    cases = [
        (["--app", "serve_app"], "write MODULE:FUNC"),
        (["--app", "no_such_module_here:setup"], "cannot import 'no_such_module_here'"),
        (["--app", "serve_app:setup_nothing"], "registered no agent profile"),
        (["--profiles", str(bad_toml)], "[profiles.x]"),
        (["--profiles", str(tmp_path / "missing.toml")], "cannot read profiles file"),
    ]
    for args, message in cases:
        result = subprocess.run(
            [sys.executable, "-m", "actorloop.runtime.console", "serve", "--port", "0", *args],
            capture_output=True,
            text=True,
            env=child_env(),
            cwd=tmp_path,
            timeout=60,
            check=False,
        )
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_app_and_toml_profiles_shape_the_requests(tmp_path: Path) -> None:
    profiles = tmp_path / "profiles.toml"
    profiles.write_text(
        "[[skills]]\n"
        'name = "search"\n'
        'description = "Find documents."\n'
        "[profiles.researcher]\n"
        'system = "Research."\n'
        'tools = ["lookup"]\n'
        "skills = true\n"
    )
    with server_process(
        tmp_path, "--store", "memory:", "--app", "serve_app:setup", "--profiles", str(profiles)
    ) as server:
        client = httpx.Client(base_url=server.url, timeout=60)
        names = [p["name"] for p in client.get("/v1/profiles").json()["profiles"]]
        assert names == ["polite", "researcher"]
        for profile, opener in (("polite", "APP OPENER"), ("researcher", "Available skills:")):
            created = client.post("/v1/sessions", json={"profile": profile}).json()
            sent = client.post(
                f"/v1/sessions/{created['id']}/messages", json={"content": "call:lookup it"}
            ).json()
            assert sent["reason"] == "completed"
            events = client.get(f"/v1/sessions/{created['id']}/events?follow=false").text
            seq = next(
                int(block.split("\n")[0][4:])
                for block in events.split("\n\n")
                if "event: assistant/message" in block
            )
            request = client.get(f"/v1/sessions/{created['id']}/requests/{seq}").json()
            assert request["verified"] is True
            assert request["prefix"][0]["content"][0]["text"].startswith(opener)
            assert request["tools"] == (
                [] if profile == "polite" else [{"name": "lookup"} | request["tools"][0]]
            )
        shouted = client.post("/v1/sessions", json={"profile": "polite"}).json()["id"]
        blocked = client.post(f"/v1/sessions/{shouted}/messages", json={"content": "HEY"}).json()
        assert (blocked["reason"], blocked["message"]) == ("rejected", "no shouting")
        client.close()
        code, _, err = server.terminate()
    assert code == 0, err


def test_api_keys_never_reach_a_response_or_a_log_line(tmp_path: Path) -> None:
    secret = "sk-test-DO-NOT-LEAK-4242424242"
    with SseServer() as upstream:
        upstream.push(json_reply(401, {"error": {"message": "Incorrect API key provided"}}))
        env = child_env(OPENAI_API_KEY=secret, ACTORLOOP_API_TOKEN=TOKEN)
        with server_process(
            tmp_path,
            "--store",
            "memory:",
            "--provider",
            "openai:gpt-test",
            "--base-url",
            f"{upstream.url}/v1",
            "--access-log",
            env=env,
        ) as server:
            client = httpx.Client(
                base_url=server.url, timeout=60, headers={"Authorization": f"Bearer {TOKEN}"}
            )
            bodies = [client.post("/v1/sessions", json={"session_id": "k"}).text]
            turn = client.post("/v1/sessions/k/messages", json={"content": "hello"})
            bodies.append(turn.text)
            assert turn.json()["reason"] == "error" and turn.json()["code"] == "AUTHENTICATION"
            for path in ("/v1/sessions/k", "/v1/sessions/k/events?follow=false", "/openapi.json"):
                bodies.append(client.get(path).text)
            client.close()
            code, out, err = server.terminate()
    assert upstream.requests[0].headers["authorization"] == f"Bearer {secret}"  # it was used
    assert code == 0
    assert "POST /v1/sessions/k/messages" in err  # the access log ran
    for text in (*bodies, out, err):
        assert secret not in text and TOKEN not in text
