"""The UI stream translators on their own, over the log of a real turn (a runtime in memory,
no HTTP): what each event becomes in the AI SDK UI message stream and in AG-UI, the history a
client folds from them read back as `derive_messages()`, multi-part reasoning, how a turn's
end is told, and the resume positions of the SSE ids."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from ui_kit import ChattyModel

from actorloop.runtime import AgentOptions, Runtime
from actorloop.runtime.cli.orchestration import LOOKUP
from actorloop.runtime.model.chunks import BlockEnd, BlockStart, ReasoningDelta
from actorloop.runtime.model.events import (
    AssistantChunk,
    SessionEvent,
    TurnEnd,
    TurnEndReason,
)
from actorloop.runtime.service.agui import AguiTranslator, messages_from_agui
from actorloop.runtime.service.errors import InvalidRequestBody
from actorloop.runtime.service.turn_stream import Position, event_frames, turn_start_before
from actorloop.runtime.service.ui_message_stream import (
    UiMessageTranslator,
    chat_request,
    messages_from_ui,
    ui_messages,
)


async def turn_log() -> tuple[tuple[SessionEvent, ...], Any]:
    async with Runtime.open(provider=ChattyModel()) as rt:
        options = AgentOptions(model="chatty-1", system="Be brief.", tools=(LOOKUP,))
        agent = await rt.spawn(options, session_id="s1")
        await agent.send("lookup please")
        return agent.session.events, agent.session.derive_messages()


def fold_ui(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The assistant UI message the parts build (the oracle of what the `ai` package's
    processUIMessageStream does with them; the browser tests run the real one)."""
    message: dict[str, Any] = {"role": "assistant", "parts": []}
    open_parts: dict[str, dict[str, Any]] = {}
    tools: dict[str, dict[str, Any]] = {}
    for part in parts:
        kind = part["type"]
        if kind == "start-step":
            message["parts"].append({"type": "step-start"})
        elif kind in ("text-start", "reasoning-start"):
            open_parts[part["id"]] = {"type": kind.split("-")[0], "text": ""}
            message["parts"].append(open_parts[part["id"]])
        elif kind in ("text-delta", "reasoning-delta"):
            open_parts[part["id"]]["text"] += part["delta"]
        elif kind == "tool-input-start":
            tools[part["toolCallId"]] = {
                "type": "dynamic-tool",
                "toolCallId": part["toolCallId"],
                "toolName": part["toolName"],
                "state": "input-streaming",
            }
            message["parts"].append(tools[part["toolCallId"]])
        elif kind == "tool-input-available":
            tools[part["toolCallId"]].update(
                state="input-available",
                input=part["input"],
                callProviderMetadata=part["providerMetadata"],
            )
        elif kind == "tool-output-available":
            tools[part["toolCallId"]].update(state="output-available", output=part["output"])
    return message


def fold_agui(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages an AG-UI client builds from the events (the oracle of @ag-ui/client's
    defaultApplyEvents; the browser tests run the real one)."""
    messages: dict[str, dict[str, Any]] = {}
    calls: dict[str, dict[str, Any]] = {}
    for event in events:
        kind = event["type"]
        if kind == "TEXT_MESSAGE_START":
            messages.setdefault(event["messageId"], {"role": "assistant", "content": ""})
        elif kind == "TEXT_MESSAGE_CONTENT":
            messages[event["messageId"]]["content"] += event["delta"]
        elif kind == "REASONING_MESSAGE_START":
            messages[event["messageId"]] = {"role": "reasoning", "content": ""}
        elif kind == "REASONING_MESSAGE_CONTENT":
            messages[event["messageId"]]["content"] += event["delta"]
        elif kind == "TOOL_CALL_START":
            parent = messages.setdefault(event["parentMessageId"], {"role": "assistant"})
            call = {"id": event["toolCallId"], "function": {"name": event["toolCallName"]}}
            call["function"]["arguments"] = ""
            parent.setdefault("toolCalls", []).append(call)
            calls[event["toolCallId"]] = call
        elif kind == "TOOL_CALL_ARGS":
            calls[event["toolCallId"]]["function"]["arguments"] += event["delta"]
        elif kind == "TOOL_CALL_RESULT":
            messages[event["messageId"]] = {
                "role": "tool",
                "toolCallId": event["toolCallId"],
                "content": event["content"],
            }
    return list(messages.values())


async def test_the_ui_parts_of_a_turn_fold_back_to_its_messages() -> None:
    events, derived = await turn_log()
    translator = UiMessageTranslator("s1")
    parts = [part for event in events for part in translator.parts(event)]
    kinds = [part["type"] for part in parts]
    assert kinds[:2] == ["start", "start-step"] and kinds[-1] == "finish"
    assert kinds.count("start-step") == kinds.count("finish-step") == 2
    available = next(part for part in parts if part["type"] == "tool-input-available")
    assert available["input"] == {"query": "xx"}
    assert available["providerMetadata"] == {"actorloop": {"arguments": '{"query": "xx"}'}}
    user = {"role": "user", "parts": [{"type": "text", "text": "lookup please"}]}
    assert messages_from_ui([user, fold_ui(parts)]) == derived


async def test_the_ag_ui_events_of_a_turn_fold_back_to_its_messages() -> None:
    events, derived = await turn_log()
    translator = AguiTranslator("s1")
    frames = [frame for event in events for frame in translator.frames(event)]
    decoded = [orjson.loads(frame.removeprefix(b"data: ")) for frame in frames]
    assert decoded[0] == {"type": "RUN_STARTED", "threadId": "s1", "runId": "1"}
    assert decoded[-1]["type"] == "RUN_FINISHED" and decoded[-1]["runId"] == "1"
    kinds = [event["type"] for event in decoded]
    assert kinds.count("STEP_STARTED") == kinds.count("STEP_FINISHED") == 2
    assert kinds.index("REASONING_START") < kinds.index("REASONING_END")
    user = {"role": "user", "content": "lookup please"}
    assert messages_from_agui([user, *fold_agui(decoded)]) == derived


def chunk(seq: int, value: Any) -> SessionEvent:
    return SessionEvent("assistant/chunk", seq, 0, AssistantChunk(1, 1, value))


def test_a_reasoning_summary_of_several_parts_is_joined_as_the_log_joins_it() -> None:
    translator = UiMessageTranslator("s1")
    stream = (
        BlockStart(0, "reasoning"),
        ReasoningDelta(0, "one"),
        ReasoningDelta(0, "two", part=1),
        ReasoningDelta(0, " more", part=1),
        BlockEnd(0),
    )
    parts = [
        part for seq, value in enumerate(stream) for part in translator.parts(chunk(seq, value))
    ]
    deltas = "".join(part["delta"] for part in parts if part["type"] == "reasoning-delta")
    assert deltas == "one\n\ntwo more"
    assert parts[-1] == {"type": "reasoning-end", "id": "1.1.0"}


@pytest.mark.parametrize(
    ("reason", "ui_tail", "agui_type"),
    [
        (TurnEndReason("completed"), ["finish"], "RUN_FINISHED"),
        (
            TurnEndReason("error", message="boom", code="PROVIDER_ERROR"),
            ["error", "finish"],
            "RUN_ERROR",
        ),
        (TurnEndReason("aborted", reason="stop"), ["abort", "finish"], "RUN_FINISHED"),
    ],
)
def test_how_a_turn_ended_is_told(
    reason: TurnEndReason, ui_tail: list[str], agui_type: str
) -> None:
    end = SessionEvent("turn/end", 9, 0, TurnEnd(1, reason))
    assert [part["type"] for part in UiMessageTranslator("s1").parts(end)] == ui_tail
    (event,) = AguiTranslator("s1").events(end)
    assert event.type == agui_type
    if reason.kind == "aborted":
        assert event.outcome.type == "cancelled"  # type: ignore[union-attr]


def test_sse_ids_name_resume_positions() -> None:
    end = SessionEvent("turn/end", 7, 0, TurnEnd(1, TurnEndReason("error", message="x")))
    ids = [
        frame.split(b"\n")[0] for _, frame in event_frames(end, [b"data: a\n\n", b"data: b\n\n"])
    ]
    assert ids == [b"id: 7.0", b"id: 7"]
    assert Position.parse("7.0").sent(7, 0) and not Position.parse("7.0").sent(7, 1)
    assert Position.parse("7").sent(7, 1) and not Position.parse("6").sent(7, 0)
    for bad in ("x", "-1", "7.x", "7.-1"):
        with pytest.raises(InvalidRequestBody):
            Position.parse(bad)
    events = (SessionEvent("turn/start", 0, 0, None), end)  # type: ignore[arg-type]
    assert turn_start_before(events, 1) == 0 and turn_start_before(events[1:], 0) is None


def test_a_chat_body_can_ask_for_a_detached_turn() -> None:
    body = {"messages": [{"role": "user", "parts": [{"type": "text", "text": "hi"}]}]}
    assert chat_request(orjson.dumps({**body, "detach": True})).detach is True
    with pytest.raises(InvalidRequestBody):
        chat_request(orjson.dumps({**body, "detach": "yes"}))
    with pytest.raises(InvalidRequestBody):
        chat_request(b"not json")


async def test_the_log_as_ui_messages_reads_back_as_itself() -> None:
    events, derived = await turn_log()
    shown = ui_messages("s1", derived)
    assert [message["role"] for message in shown] == ["user", "assistant"]
    tool = next(part for part in shown[1]["parts"] if part["type"] == "dynamic-tool")
    assert tool["state"] == "output-available" and tool["input"] == {"query": "xx"}
    assert messages_from_ui(shown) == derived
    user = {"role": "user", "parts": [{"type": "text", "text": "lookup please"}]}
    translator = UiMessageTranslator("s1")
    folded = fold_ui([part for event in events for part in translator.parts(event)])
    assert [p["type"] for p in shown[1]["parts"]] == [p["type"] for p in folded["parts"]]
    assert messages_from_ui([user, folded]) == messages_from_ui(shown)
