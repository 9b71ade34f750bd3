"""Cross-site requests and rebound host names against a real server (issue 33, items 2 and
3): a state-changing request from another origin gets 403 FORBIDDEN_ORIGIN, a body that is
not `application/json` 415 UNSUPPORTED_MEDIA_TYPE (token or not), and without a token only
loopback host names — plus `--allowed-host` ones — are answered, the inspector's pages too;
nothing is created by a refused request."""

from __future__ import annotations

import httpx
import pytest
from serve_kit import TOKEN, HeldModel, Running, app_config_for, running_server

from actorloop.runtime.service.guards import host_name, is_loopback_name

JSON = {"content-type": "application/json"}


def code_of(response: httpx.Response) -> str:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    return str(body["error"]["code"])


async def stored(server: Running) -> list[str]:
    return [summary.id for summary in await server.service.runtime.list_sessions()]


def authority(server: Running) -> str:
    return server.url.split("://", 1)[1]


@pytest.mark.parametrize("token", [None, TOKEN])
async def test_cross_site_and_non_json_state_changes_are_refused(token: str | None) -> None:
    auth = {} if token is None else {"authorization": f"Bearer {token}"}
    async with (
        running_server(app_config_for(HeldModel()), token=token) as server,
        server.client(headers=auth) as client,
    ):
        body = b'{"session_id": "csrf"}'
        refusals = [
            ({"content-type": "text/plain"}, 415, "UNSUPPORTED_MEDIA_TYPE"),
            ({"content-type": "application/x-www-form-urlencoded"}, 415, "UNSUPPORTED_MEDIA_TYPE"),
            ({"content-type": "multipart/form-data; boundary=x"}, 415, "UNSUPPORTED_MEDIA_TYPE"),
            ({}, 415, "UNSUPPORTED_MEDIA_TYPE"),
            ({**JSON, "origin": "http://attacker.example"}, 403, "FORBIDDEN_ORIGIN"),
            ({**JSON, "origin": "null"}, 403, "FORBIDDEN_ORIGIN"),
            # another port of this machine is another origin (and the same site)
            ({**JSON, "origin": "http://127.0.0.1:1"}, 403, "FORBIDDEN_ORIGIN"),
            ({**JSON, "sec-fetch-site": "cross-site"}, 403, "FORBIDDEN_ORIGIN"),
            ({**JSON, "sec-fetch-site": "same-site"}, 403, "FORBIDDEN_ORIGIN"),
            ({"content-type": "text/plain", "origin": "http://a.example"}, 403, "FORBIDDEN_ORIGIN"),
        ]
        for headers, status, code in refusals:
            response = await client.post("/v1/sessions", content=body, headers=headers)
            assert response.status_code == status, (headers, response.text)
            assert code_of(response) == code, headers
        assert await stored(server) == []
        # A bodiless POST is state-changing too (a cancel, a resume): JSON or nothing.
        bare = await client.post("/v1/sessions/none/cancel")
        assert (bare.status_code, code_of(bare)) == (415, "UNSUPPORTED_MEDIA_TYPE")

        own_origin = {"origin": server.url, "sec-fetch-site": "same-origin"}
        accepted = await client.post(
            "/v1/sessions",
            content=body,
            headers={"content-type": "Application/JSON; charset=utf-8", **own_origin},
        )
        assert accepted.status_code == 201, accepted.text
        assert await stored(server) == ["csrf"]
        typed = await client.post("/v1/sessions", json={"session_id": "plain"})
        assert typed.status_code == 201
        disposed = await client.delete("/v1/sessions/plain", headers={"origin": "http://a.example"})
        assert (disposed.status_code, code_of(disposed)) == (403, "FORBIDDEN_ORIGIN")
        assert server.service.runtime.get("plain") is not None
        # Reads are not state-changing: another origin may not read them either (no CORS
        # header is ever sent), but the server answers them.
        listed = await client.get("/v1/sessions", headers={"origin": "http://a.example"})
        assert listed.status_code == 200 and "access-control-allow-origin" not in listed.headers


async def test_without_a_token_only_loopback_host_names_are_answered() -> None:
    async with (
        running_server(app_config_for(HeldModel())) as server,
        server.client() as client,
    ):
        port = authority(server).rsplit(":", 1)[1]
        await client.post("/v1/sessions", json={"session_id": "secret-session"})
        for host in (
            "attacker.example",
            f"attacker.example:{port}",
            "127.0.0.1.nip.io",
            f"localhost.attacker.example:{port}",
            "0.0.0.0",
            "[::ffff:8.8.8.8]",
            "127.0.0.1:notaport",
            "",
        ):
            for method, path in (
                ("GET", "/"),
                ("GET", "/sessions/secret-session"),
                ("GET", "/v1/sessions"),
                ("GET", "/healthz"),
                ("POST", "/v1/sessions"),
            ):
                response = await client.request(
                    method, path, headers={"host": host, **JSON}, content=b"{}"
                )
                assert response.status_code == 421, (host, path)
                assert code_of(response) == "MISDIRECTED_REQUEST"
                assert "secret-session" not in response.text
        for host in ("127.0.0.1", f"127.0.0.1:{port}", f"localhost:{port}", "LOCALHOST", "[::1]"):
            listed = await client.get("/v1/sessions", headers={"host": host})
            assert listed.status_code == 200, host
            assert [s["id"] for s in listed.json()["sessions"]] == ["secret-session"]
            assert (await client.get("/", headers={"host": host})).status_code == 200
        assert await stored(server) == ["secret-session"]


async def test_allowed_host_names_are_answered_and_a_token_lifts_the_check() -> None:
    async with (
        running_server(app_config_for(HeldModel()), allowed_hosts=("Agents.Internal",)) as server,
        server.client() as client,
    ):
        assert (await client.get("/healthz", headers={"host": "agents.internal:80"})).is_success
        refused = await client.get("/healthz", headers={"host": "other.internal"})
        assert refused.status_code == 421
    async with (
        running_server(app_config_for(HeldModel()), token=TOKEN) as server,
        server.client(headers={"authorization": f"Bearer {TOKEN}"}) as client,
    ):
        # With a token the token is what protects: any name reaches the server.
        listed = await client.get("/v1/sessions", headers={"host": "agents.example.com"})
        assert listed.status_code == 200


def test_host_names_and_loopback() -> None:
    assert [
        host_name(h) for h in ("LocalHost:80", "[::1]:8765", "[::1]", "a.b", "a:b:c", "[::1]x")
    ] == ["localhost", "[::1]", "[::1]", "a.b", "", ""]
    assert [
        is_loopback_name(n) for n in ("localhost", "127.0.0.2", "[::1]", "::1", "10.0.0.1")
    ] == [
        True,
        True,
        True,
        False,
        False,
    ]
