"""The UI stream routes over a real server (in this trio run, real sockets): the AI SDK UI
message stream of a tool-using turn (headers, parts, ids), its resume from every frame of a
200-event turn — replayed after the turn, cut live and resumed, and resumed at another
PostgreSQL-backed instance — the stop rules (a client going away cancels its turn only, also
while its send waits in line), and an AG-UI run.

The replay after the turn resumes after every frame. By default the live cut-and-resume
test cuts at every 10th frame and the other instance replays from every 25th; with
ACTORLOOP_UI_RESUME_FULL=1 both take every frame (one fresh session per live cut; measured
at about 40 s)."""

from __future__ import annotations

import os

import orjson
import trio
import trio.testing
from serve_kit import HeldModel, app_config_for, running_server
from ui_kit import ChattyModel, Frame, chat_body, chatty_config, frames

from actorloop.runtime.service.ui_message_stream import DONE, messages_from_ui

FULL = os.environ.get("ACTORLOOP_UI_RESUME_FULL") == "1"
BIG = {"reasoning": 40, "text": 60, "arguments": 20, "answer": 52}


def parts(received: list[Frame]) -> list[dict[str, object]]:
    return [orjson.loads(frame.data) for frame in received if frame.data != "[DONE]"]


async def test_a_tool_using_turn_as_a_ui_message_stream() -> None:
    async with running_server(chatty_config(ChattyModel())) as server, server.client() as client:
        assert (await client.post("/v1/sessions", json={"session_id": "s1"})).status_code == 201
        async with client.stream("POST", "/v1/sessions/s1/chat", json=chat_body("lookup x")) as r:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            assert r.headers["x-vercel-ai-ui-message-stream"] == "v1"
            received = await frames(r)
        assert received[-1] == Frame(None, "[DONE]")
        types = [part["type"] for part in parts(received)]
        assert types[:4] == ["start", "start-step", "reasoning-start", "reasoning-delta"]
        for name in ("tool-input-start", "tool-input-delta", "tool-input-available"):
            assert name in types
        assert types.index("tool-input-available") < types.index("tool-output-available")
        assert types[-1] == "finish"
        finish = parts(received)[-1]
        assert finish["finishReason"] == "stop"
        start = parts(received)[0]
        assert start["messageId"] == "s1/1"
        # Every event's last frame carries its seq; the ones before it <seq>.<part>.
        ids = [frame.id for frame in received[:-1]]
        assert all(frame_id is not None for frame_id in ids)
        seqs = [int(str(frame_id).split(".")[0]) for frame_id in ids]
        assert seqs == sorted(seqs)
        agent = server.service.runtime.get("s1")
        assert agent is not None and agent.session.last_turn == 1
        # The conversation as UI messages, for a page that loads it (useChat's messages).
        history = (await client.get("/v1/sessions/s1/chat")).json()
        assert history["id"] == "s1"
        assert messages_from_ui(history["messages"]) == agent.session.derive_messages()


async def test_resume_from_every_frame_of_a_200_event_turn_replays_the_rest() -> None:
    async with (
        running_server(chatty_config(ChattyModel(**BIG))) as server,
        server.client() as client,
    ):
        await client.post("/v1/sessions", json={"session_id": "s1"})
        async with client.stream("POST", "/v1/sessions/s1/chat", json=chat_body("lookup")) as r:
            whole = await frames(r)
        agent = server.service.runtime.get("s1")
        assert agent is not None and len(agent.session) >= 200
        # With no turn open and no Last-Event-ID there is nothing to resume.
        assert (await client.get("/v1/sessions/s1/chat/stream")).status_code == 204
        for index, frame in enumerate(whole[:-1]):
            headers = {"Last-Event-ID": str(frame.id)}
            async with client.stream("GET", "/v1/sessions/s1/chat/stream", headers=headers) as r:
                assert r.status_code == 200
                assert await frames(r) == whole[index + 1 :], index


def _normal(received: list[Frame], session_id: str) -> list[Frame]:
    return [Frame(f.id, f.data.replace(session_id, "<sid>")) for f in received]


async def test_a_live_stream_cut_anywhere_and_resumed_equals_the_uncut_one() -> None:
    async with (
        running_server(chatty_config(ChattyModel(**BIG))) as server,
        server.client() as client,
    ):
        body = chat_body("lookup", detach=True)
        await client.post("/v1/sessions", json={"session_id": "ref"})
        async with client.stream("POST", "/v1/sessions/ref/chat", json=body) as r:
            whole = _normal(await frames(r), "ref")
        cuts = range(1, len(whole) - 1) if FULL else range(1, len(whole) - 1, 10)
        for cut in cuts:
            sid = f"cut{cut}"
            await client.post("/v1/sessions", json={"session_id": sid})
            async with client.stream("POST", f"/v1/sessions/{sid}/chat", json=body) as r:
                head = await frames(r, limit=cut)
            # The client went away mid-turn; the detached turn went on. Reconnect.
            headers = {"Last-Event-ID": str(head[-1].id)}
            async with client.stream(
                "GET", f"/v1/sessions/{sid}/chat/stream", headers=headers
            ) as r:
                tail = await frames(r)
            assert _normal(head + tail, sid) == whole, cut


async def test_a_reconnect_at_another_postgres_instance_resumes_the_stream(pg_url: str) -> None:
    url = f"{pg_url}?lease_s=2&poll_s=0.05"
    model_a, model_b = ChattyModel(**BIG), ChattyModel(**BIG)
    async with (
        running_server(chatty_config(model_a, url), store=url, grace_seconds=0.5) as a,
        running_server(chatty_config(model_b, url), store=url, grace_seconds=0.5) as b,
        a.client() as at_a,
        b.client() as at_b,
    ):
        await at_a.post("/v1/sessions", json={"session_id": "pg1"})
        async with at_a.stream("POST", "/v1/sessions/pg1/chat", json=chat_body("lookup")) as r:
            whole = await frames(r)
        cuts = range(len(whole) - 1) if FULL else range(0, len(whole) - 1, 25)
        for index in cuts:
            headers = {"Last-Event-ID": str(whole[index].id)}
            async with at_b.stream("GET", "/v1/sessions/pg1/chat/stream", headers=headers) as r:
                assert r.status_code == 200
                assert await frames(r) == whole[index + 1 :], index
        # Cut live at one instance, resumed at the other, which follows the durable log.
        body = chat_body("lookup", detach=True)
        for cut in (1, len(whole) // 2, len(whole) - 2):
            sid = f"pg-cut{cut}"
            await at_a.post("/v1/sessions", json={"session_id": sid})
            async with at_a.stream("POST", f"/v1/sessions/{sid}/chat", json=body) as r:
                head = await frames(r, limit=cut)
            headers = {"Last-Event-ID": str(head[-1].id)}
            async with at_b.stream("GET", f"/v1/sessions/{sid}/chat/stream", headers=headers) as r:
                tail = await frames(r)
            assert _normal(head + tail, sid) == _normal(whole, "pg1"), cut
        assert b.service.runtime.get("pg1") is None  # b read the durable log only
        assert model_b.calls == 0
        # A new turn is the owner's to run: asked elsewhere, it is refused before any stream.
        elsewhere = await at_b.post("/v1/sessions/pg1/chat", json=chat_body("hi"))
        assert elsewhere.status_code == 409, elsewhere.text
        assert model_b.calls == 0


async def test_going_away_while_queued_withdraws_only_that_send() -> None:
    model = HeldModel()
    async with running_server(app_config_for(model)) as server, server.client() as client:
        await client.post("/v1/sessions", json={"session_id": "s1"})
        first = await client.post(
            "/v1/sessions/s1/messages", json={"content": "hold", "wait": False}
        )
        assert first.status_code == 202
        await model.entered.wait()
        service = server.service
        async with trio.open_nursery() as nursery:

            async def chat() -> None:
                async with client.stream("POST", "/v1/sessions/s1/chat", json=chat_body("x")):
                    pass  # never reached: its turn never starts while it waits

            nursery.start_soon(chat)
            # The chat's send waits in line behind the held turn (no run id yet).
            while not (service._lines.get("s1") and len(service._lines["s1"]._tickets) == 2):
                await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()  # the client presses stop: it goes away
        while service._lines.get("s1") and len(service._lines["s1"]._tickets) == 2:
            await trio.testing.wait_all_tasks_blocked()
        model.release()
        agent = service.runtime.get("s1")
        assert agent is not None
        await agent.wait_idle()
        turns = [e for e in agent.session.events if e.type == "turn/end"]
        assert [(e.data.turn, e.data.reason.kind) for e in turns] == [(1, "completed")]


async def test_going_away_mid_turn_cancels_that_turn_only() -> None:
    model = HeldModel()
    async with running_server(app_config_for(model)) as server, server.client() as client:
        for sid in ("s1", "s2"):
            await client.post("/v1/sessions", json={"session_id": sid})
        async with client.stream("POST", "/v1/sessions/s1/chat", json=chat_body("hold")) as r:
            head = await frames(r, limit=2)  # start, start-step: the turn runs
        assert [orjson.loads(f.data)["type"] for f in head] == ["start", "start-step"]
        agent = server.service.runtime.get("s1")
        assert agent is not None
        await agent.wait_idle()
        end = agent.session.events[-1]
        assert (end.type, end.data.reason.kind) == ("turn/end", "aborted")
        model.release()
        answer = await client.post("/v1/sessions/s2/messages", json={"content": "hi"})
        assert answer.json()["text"] == "echo: hi"
        # The resumed stream of the aborted turn says how it ended.
        headers = {"Last-Event-ID": str(head[-1].id)}
        async with client.stream("GET", "/v1/sessions/s1/chat/stream", headers=headers) as r:
            tail = parts(await frames(r))
        assert tail[-2:] == [
            {"type": "abort", "reason": tail[-2]["reason"]},
            {
                "type": "finish",
                "finishReason": "interrupted",
                "messageMetadata": tail[-1]["messageMetadata"],
            },
        ]


async def test_a_chat_body_that_is_not_a_new_user_message_is_refused() -> None:
    async with running_server(chatty_config(ChattyModel())) as server, server.client() as client:
        await client.post("/v1/sessions", json={"session_id": "s1"})
        regenerate = chat_body("x", trigger="regenerate-message")
        for body, code in (
            ({"messages": []}, "VALIDATION_FAILED"),
            (regenerate, "VALIDATION_FAILED"),
            ({"messages": [{"role": "user", "parts": [{"type": "file"}]}]}, "INVALID_CONTENT"),
        ):
            answer = await client.post("/v1/sessions/s1/chat", json=body)
            assert (answer.status_code, answer.json()["error"]["code"]) == (422, code)
        missing = await client.post("/v1/sessions/nope/chat", json=chat_body("x"))
        assert missing.status_code == 404
        bad = await client.get("/v1/sessions/s1/chat/stream", headers={"Last-Event-ID": "x"})
        assert bad.status_code == 422


async def test_an_ag_ui_run_of_a_tool_using_turn() -> None:
    async with running_server(chatty_config(ChattyModel())) as server, server.client() as client:
        run = {
            "threadId": "thread-1",
            "runId": "client-run-id",
            "state": {},
            "messages": [{"id": "m1", "role": "user", "content": "lookup please"}],
            "tools": [],
            "context": [],
            "forwardedProps": {},
        }
        headers = {"Accept": "text/event-stream"}
        async with client.stream("POST", "/v1/ag-ui", json=run, headers=headers) as r:
            assert r.status_code == 200
            events = [orjson.loads(frame.data) for frame in await frames(r)]
        types = [event["type"] for event in events]
        assert events[0] == {"type": "RUN_STARTED", "threadId": "thread-1", "runId": "1"}
        assert types[-1] == "RUN_FINISHED"
        assert events[-1]["outcome"] == {"type": "success"}
        for name in ("REASONING_START", "TEXT_MESSAGE_CONTENT", "TOOL_CALL_ARGS"):
            assert name in types
        result = next(event for event in events if event["type"] == "TOOL_CALL_RESULT")
        assert result["toolCallId"] == "call1"
        # The thread is the session, created by its first run.
        assert server.service.runtime.get("thread-1") is not None
        bad = await client.post("/v1/ag-ui", json={"threadId": "t"})
        assert (bad.status_code, bad.json()["error"]["code"]) == (422, "VALIDATION_FAILED")


def test_done_is_the_protocols_last_frame() -> None:
    assert DONE == b"data: [DONE]\n\n"
