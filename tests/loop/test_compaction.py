"""The CompactionActor through the public API (docs/spec/compaction.md §2–§11, docs/spec/loop.md
§4.5 and §4.14): prefix-aware pressure, the summarizer request, the transaction's fail-closed and
cancellation rules, overflow recovery, manual compaction, the pruner, and durability."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import attrs
import pytest
import trio
import trio.testing
from helpers import open_runtime, types_of, wait_until

from actorloop.actors.compaction import (
    COMPACTION_SOURCE,
    INSTRUCTION,
    PRUNE_HEAD,
    PRUNE_TAIL,
    CompactionActor,
    SummaryJob,
    SummaryOutcome,
    frame_summary,
)
from actorloop.runtime import (
    AgentOptions,
    CompactionConfig,
    Message,
    ProviderError,
    Replace,
    ResponseFormat,
    Session,
    SessionEvent,
    Text,
    TokenUsage,
    Tool,
)
from actorloop.runtime.host.runtime import Runtime
from actorloop.runtime.log.invariants import check_request
from actorloop.runtime.log.request import Request
from actorloop.runtime.log.surface import project
from actorloop.runtime.log.tokens import estimate_message, estimate_messages, fixed_part_tokens
from actorloop.runtime.log.verify import verify_log
from actorloop.runtime.model.chunks import (
    BlockEnd,
    BlockStart,
    ErrorInfo,
    Finish,
    StreamChunk,
    TextDelta,
)
from actorloop.runtime.model.events import (
    CompactionEnd,
    CompactionPrune,
    CompactionStart,
    CompactionSummary,
    StepStart,
    ToolResultEvent,
    TurnEnd,
    TurnEndReason,
    UserMessage,
)
from actorloop.runtime.model.messages import ToolCall, ToolResult
from actorloop.runtime.providers.scripted import ScriptEntry
from actorloop.runtime.stores.urls import open_store
from actorloop.runtime.testing import HANG, ScriptedProvider, max_tokens_reply, reply, tool_call

T = TypeVar("T")
SYSTEM_MARK = "[system-marker]"
SYSTEM = f"You are terse. {SYSTEM_MARK}"
PREFIX_MARK = "[prefix-marker]"
WINDOW = 1000


async def _echo(args: dict[str, Any], ctx: Any) -> str:
    return f"echo:{args.get('x', '')}"


ECHO = Tool("echo", "Echo x back", {"type": "object"}, _echo)


def prefix_message(size: int, tag: str = "") -> Message:
    return Message.user(f"{PREFIX_MARK}{tag} " + "p" * size)


def prefix_listener(*messages: Message) -> Callable[..., Any]:
    async def listener(agent: Any, value: Any, next: Any) -> Any:
        return (*messages, *await next())

    return listener


def options(
    window: int | None = WINDOW, *, tools: Sequence[Tool] = (), **config: Any
) -> AgentOptions:
    return AgentOptions(
        model="m",
        system=SYSTEM,
        tools=tuple(tools),
        context_window=window,
        compaction=CompactionConfig(**config),
    )


class Model(ScriptedProvider):
    """Loop requests consume `script`; summarizer (one-shot) requests consume `summaries`
    (when that runs out: a short summary naming how many messages it saw)."""

    def __init__(
        self, script: Iterable[ScriptEntry] = (), summaries: Iterable[ScriptEntry] = ()
    ) -> None:
        super().__init__(script)
        self.summaries: list[ScriptEntry] = list(summaries)

    @property
    def loop_requests(self) -> list[Request]:
        return [request for request in self.requests if not request.one_shot]

    @property
    def summary_requests(self) -> list[Request]:
        return [request for request in self.requests if request.one_shot]

    async def stream(self, request: Request) -> AsyncIterator[StreamChunk]:
        if not request.one_shot:
            async for chunk in super().stream(request):
                yield chunk
            return
        self.requests.append(request)
        if self.summaries:
            entry = self.summaries.pop(0)
        else:
            entry = reply(f"summary of {len(request.history) - 1} messages")
        chunks: Iterable[StreamChunk]
        if callable(entry):
            chunks = entry(request)
        elif isinstance(entry, Sequence):
            chunks = entry
        else:  # HANG: one partial chunk, then wait until cancelled
            yield BlockStart(0, "text")
            yield TextDelta(0, "partial")
            await trio.sleep_forever()
            return
        for chunk in chunks:
            await trio.lowlevel.checkpoint()
            yield chunk


def request_tokens(request: Request) -> int:
    return fixed_part_tokens(request.system, request.tools, request.prefix) + estimate_messages(
        request.history
    )


def of_type(session: Session, kind: str) -> list[SessionEvent]:
    return [event for event in session.events if event.type == kind]


def data_of(session: Session, cls: type[T]) -> list[T]:
    return [data for data in (event.data for event in session.events) if isinstance(data, cls)]


def error_code(event: SessionEvent) -> str | None:
    data = event.data
    assert isinstance(data, CompactionEnd) and data.error is not None
    return data.error.code


def last_turn_end(session: Session) -> TurnEndReason:
    data = session.events[-1].data
    assert isinstance(data, TurnEnd)
    return data.reason


def snapshot(session: Session) -> tuple[Any, ...]:
    return (session.replace_generation, session.surface, session.derive_messages())


def texts_of(messages: Iterable[Message | None]) -> str:
    out = []
    for message in messages:
        if message is None:
            continue
        for block in message.content:
            out.append(getattr(block, "text", "") or getattr(block, "arguments", ""))
            out.extend(inner.text for inner in getattr(block, "content", ()))
    return "\n".join(out)


def check_transactions(session: Session) -> dict[str, list[SessionEvent]]:
    """Every compaction is start [summary user/message] end with one end; a failed one
    leaves no surface op between its start and its end."""
    groups: dict[str, list[SessionEvent]] = {}
    for event in session.events:
        if isinstance(event.data, (CompactionStart, CompactionSummary, CompactionEnd)):
            groups.setdefault(event.data.compaction_id, []).append(event)
    for events in groups.values():
        kinds = types_of(events)
        start, end = events[0], events[-1]
        assert isinstance(end.data, CompactionEnd)
        assert isinstance(start.data, CompactionStart)
        assert start.data.turn == end.data.turn
        if kinds == ["compaction/start", "compaction/summary", "compaction/end"]:
            summary = events[1]
            assert isinstance(summary.data, CompactionSummary)
            assert end.data.error is None
            assert end.seq == start.seq + 3 and summary.seq == start.seq + 1
            message = session.event(start.seq + 2)
            assert message.type == "user/message"
            assert isinstance(message.data, UserMessage)
            assert message.data.source == COMPACTION_SOURCE
            assert message.data.content == (Text(frame_summary(summary.data.summary)),)
            shadowed = summary.data.shadowed_seqs
            assert message.surface_op == Replace(shadowed[0], shadowed[-1])
            assert message.source_event_seqs == (start.seq, summary.seq, *shadowed)
            assert summary.data.shadowed_token_count == estimate_messages(
                [m for m in (project(session.event(s)) for s in shadowed) if m is not None]
            )
        else:
            assert kinds == ["compaction/start", "compaction/end"], kinds
            assert end.data.error is not None
            between = session.events[start.seq + 1 : end.seq]
            assert all(event.surface_op is None for event in between)
    return groups


# Sizes (estimator of docs/spec/compaction.md §2): system 12 tokens, a 2400-char prefix 608, a
# 400-char turn message 108. The window is 1000, the threshold 800.
BIG_PREFIX = prefix_message(2400)
TURN_TEXT = 400


def turn_text(index: int, size: int = TURN_TEXT) -> str:
    return f"u{index} " + "x" * (size - 3)


def answer(
    index: int, usage: TokenUsage | None = None, size: int = TURN_TEXT
) -> tuple[StreamChunk, ...]:
    return reply(f"a{index} " + "y" * (size - 3), usage)


# ---------------------------------------------------------------- K1 / K2


async def _k1_run(with_prefix: bool) -> tuple[Model, Any, list[tuple[int, int, int]]]:
    provider = Model([answer(i) for i in range(1, 5)])
    gauges: list[tuple[int, int, int]] = []

    async def pre_step(agent: Any, value: Any) -> None:
        surface = estimate_messages(agent.session.derive_messages())
        fixed = fixed_part_tokens(value.full_system_prompt, agent.current_tools, ())
        gauges.append((value.turn, fixed + surface, estimate_messages(value.session_prefix)))

    async with open_runtime(provider) as rt:
        if with_prefix:
            rt.on("agent/session-prefix", prefix_listener(BIG_PREFIX))
        agent = await rt.spawn(options(retain_tokens=100))
        agent.on("agent/pre-step", pre_step)
        for index in range(1, 4):
            assert (await agent.send(turn_text(index))).reason == "completed"
        return provider, agent, gauges


async def test_K1_large_prefix_pushes_a_session_under_threshold_over_it() -> None:
    threshold = 0.8 * WINDOW
    provider, agent, gauges = await _k1_run(with_prefix=True)
    session = agent.session
    compacted_turns = [start.turn for start in data_of(session, CompactionStart)]
    assert compacted_turns  # it did compact
    # the surface alone never reaches the threshold; the gate compacts exactly at the
    # pre-steps where system + tools + prefix + surface is over it
    assert all(without_prefix <= threshold for _, without_prefix, _ in gauges)
    assert compacted_turns == [
        turn for turn, without_prefix, prefix in gauges if without_prefix + prefix > threshold
    ]
    check_transactions(session)
    for event in of_type(session, "user/message"):
        assert PREFIX_MARK not in texts_of([project(event)])
        assert SYSTEM_MARK not in texts_of([project(event)])
    for request in provider.loop_requests:
        assert request.messages[0] == BIG_PREFIX and request.prefix_length == 1
        assert request_tokens(request) <= WINDOW
    # control: the same conversation without the prefix never compacts
    control, control_agent, _ = await _k1_run(with_prefix=False)
    assert of_type(control_agent.session, "compaction/start") == []
    assert control.summary_requests == []


async def test_K2_summarizer_request_is_header_system_tools_then_prefix_region_instruction() -> (
    None
):
    provider = Model(
        [tool_call("c1", "echo", {"x": "1"}), answer(1), answer(2), answer(3)],
        [reply("first summary"), reply("second summary")],
    )
    seen: list[tuple[tuple[Message, ...], Any]] = []

    def observe(agent: Any, event: SessionEvent) -> None:
        if event.type == "compaction/start":
            seen.append((agent.session.derive_messages(), agent.session.header()))

    async with open_runtime(provider) as rt:
        rt.on("agent/session-prefix", prefix_listener(BIG_PREFIX))
        agent = await rt.spawn(options(tools=[ECHO], retain_tokens=100))
        agent.on("session/event", observe)
        for index in range(1, 4):
            assert (await agent.send(turn_text(index))).reason == "completed"
        session = agent.session
        groups = check_transactions(session)
    assert len(groups) == len(provider.summary_requests) == len(seen) >= 2
    summaries = data_of(session, CompactionSummary)
    for request, (before, header), summary in zip(
        provider.summary_requests, seen, summaries, strict=True
    ):
        assert request.one_shot
        assert header is not None
        assert request.system == header.system == SYSTEM
        assert request.tools == header.tools == (ECHO.schema,)
        assert request.config.max_tokens == 8192
        assert request.messages[0] == BIG_PREFIX and request.prefix_length == 1
        region = request.messages[1:-1]
        assert request.messages[-1] == Message.user(INSTRUCTION)
        # the region is the head of the surface as it was at compaction/start
        assert region == before[: len(region)]
        shadowed = summary.shadowed_seqs
        assert region == tuple(
            m for m in (project(session.event(seq)) for seq in shadowed) if m is not None
        )
        # the request extends the previous loop request's cached prefix
        assert PREFIX_MARK not in texts_of(region) and SYSTEM_MARK not in texts_of(region)
    # a later summary merges the earlier one: it is the head of its region
    assert provider.summary_requests[1].messages[1] == Message.user(frame_summary("first summary"))


async def test_the_summarizer_call_keeps_deployment_settings_not_the_answer_shape() -> None:
    provider = Model([answer(1), answer(2), answer(3)], [reply("the summary")])
    base = options(retain_tokens=100)
    agent_options = attrs.evolve(
        base,
        extra_headers={"x-gateway": "team-a"},
        extra_body={"route": "eu"},
        user="user-7",
        tool_choice="none",
        response_format=ResponseFormat.json_schema({"type": "object"}, name="answer"),
    )
    async with open_runtime(provider) as rt:
        rt.on("agent/session-prefix", prefix_listener(BIG_PREFIX))
        agent = await rt.spawn(agent_options)
        for index in range(1, 4):
            assert (await agent.send(turn_text(index))).reason == "completed"
    summary = provider.summary_requests[0].config
    assert summary.extra_headers == {"x-gateway": "team-a"}
    assert summary.extra_body == {"route": "eu"} and summary.user == "user-7"
    assert summary.tool_choice is None and summary.response_format is None
    assert summary.max_tokens == 8192


# ---------------------------------------------------------------- resume with a grown prefix


async def test_resumed_instance_with_grown_prefix_compacts_before_its_first_request(
    tmp_path: Path,
) -> None:
    url = f"sqlite:{tmp_path / 'k.db'}"
    size = 200  # 58-token turn messages
    small = prefix_message(40, "small")
    grown = (small, prefix_message(2400, "grown"))
    # Usage anchors above the heuristic of the old instance's requests: the meter uses them
    # while the fixed part (system, tools, prefix) is unchanged.
    usage = TokenUsage(input=500, output=100)
    first = Model([answer(i, usage, size) for i in range(1, 5)])
    opts = options(retain_tokens=100)
    async with open_runtime(first, store=url) as rt:
        rt.on("agent/session-prefix", prefix_listener(small))
        agent = await rt.spawn(opts)
        for index in range(1, 5):
            assert (await agent.send(turn_text(index, size))).reason == "completed"
        assert of_type(agent.session, "compaction/start") == []
        session_id = agent.id
        assert agent._loop.meter.total(SYSTEM, (), (small,)) == 600

    second = Model([answer(5, None, size)])
    gate_inputs: list[tuple[Message, ...]] = []

    async def pre_step(agent: Any, value: Any) -> None:
        gate_inputs.append(value.session_prefix)

    async with open_runtime(second, store=url) as rt:
        rt.on("agent/session-prefix", prefix_listener(*grown))
        agent = await rt.resume(session_id, opts)
        agent.on("agent/pre-step", pre_step)
        stale = agent.session.header()
        assert stale is not None and stale.message_prefix == (small,)
        old_surface = estimate_messages(agent.session.derive_messages())
        assert (await agent.send(turn_text(5, size))).reason == "completed"
        session = agent.session
    new_message = estimate_message(Message.user(turn_text(5, size)))
    # The stale anchor (or the folded prefix) would have looked fine ...
    assert 600 + new_message <= 0.8 * WINDOW
    assert fixed_part_tokens(SYSTEM, (), (small,)) + old_surface + new_message <= 0.8 * WINDOW
    # ... but with the live prefix the first request does not fit the window uncompacted.
    assert fixed_part_tokens(SYSTEM, (), grown) + old_surface + new_message > WINDOW
    assert gate_inputs == [grown]
    kinds = types_of(session.events)
    resumed_at = len(kinds) - kinds[::-1].index("turn/start") - 1
    tail = kinds[resumed_at:]
    assert tail.index("compaction/summary") < tail.index("step/start")
    [request] = second.loop_requests
    assert request.messages[:2] == grown and request.prefix_length == 2
    assert request_tokens(request) <= 0.8 * WINDOW
    [summarizer] = second.summary_requests
    assert summarizer.messages[:2] == grown
    header = session.header()
    assert header is not None and header.message_prefix == grown


# ---------------------------------------------------------------- prefix and system stay out


async def test_prefix_and_system_never_enter_the_surface_or_a_summary_region() -> None:
    prefix = (prefix_message(1200, "a"), Message.assistant(f"{PREFIX_MARK} ack"))
    script: list[ScriptEntry] = []
    for index in range(1, 9):
        script += [tool_call(f"c{index}", "echo", {"x": "z" * 200}), answer(index)]
    provider = Model(script)
    async with open_runtime(provider) as rt:
        rt.on("agent/session-prefix", prefix_listener(*prefix))
        agent = await rt.spawn(options(tools=[ECHO]))
        for index in range(1, 9):
            assert (await agent.send(turn_text(index))).reason == "completed"
        session = agent.session
        assert rt.invariant_checks == len(provider.loop_requests)
    groups = check_transactions(session)
    assert len(of_type(session, "compaction/summary")) >= 3
    assert len(groups) == len(provider.summary_requests)
    for mark in (PREFIX_MARK, SYSTEM_MARK):
        for event in session.events:
            if event.type in ("user/message", "context/message", "tool/result"):
                assert mark not in texts_of([project(event)])
        for request in provider.summary_requests:
            assert mark not in texts_of(request.messages[request.prefix_length : -1])
        for summary in data_of(session, CompactionSummary):
            shadowed = [project(session.event(seq)) for seq in summary.shadowed_seqs]
            assert mark not in texts_of(shadowed)
        assert mark not in texts_of(session.derive_messages())
    for request in provider.requests:
        assert request.messages[:2] == prefix and request.prefix_length == 2
        assert request.system == SYSTEM


# ---------------------------------------------------------------- usage anchor in the loop


async def test_real_usage_counts_toward_pressure_while_the_header_is_unchanged() -> None:
    heavy = TokenUsage(input=700, output=50, cache_read=100)
    provider = Model([answer(1, heavy), answer(2), answer(3)])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(options(retain_tokens=100))
        assert (await agent.send(turn_text(1))).reason == "completed"
        heuristic = fixed_part_tokens(SYSTEM, (), ()) + estimate_messages(
            agent.session.derive_messages()
        )
        assert heuristic + 108 <= 0.8 * WINDOW  # the chars/4 estimate would not compact
        assert (await agent.send(turn_text(2))).reason == "completed"
        assert len(of_type(agent.session, "compaction/summary")) == 1
        # the answer without real usage anchors nothing: back to the heuristic
        assert (await agent.send(turn_text(3))).reason == "completed"
        assert len(of_type(agent.session, "compaction/summary")) == 1


# ---------------------------------------------------------------- cancellation


def _cancel_on_start(agent: Any) -> Callable[[Any, SessionEvent], None]:
    def listener(_agent: Any, event: SessionEvent) -> None:
        if event.type == "compaction/start":
            agent.cancel("on start")

    return listener


async def _compaction_turn(
    how: str,
) -> tuple[Model, Any, Any, tuple[Any, ...], tuple[Any, ...]]:
    """Turn 1 completes; turn 2's gate compacts and is cancelled at point `how`."""
    holder: dict[str, Any] = {}

    def cancel_in_summarizer(request: Request) -> Iterable[StreamChunk]:
        holder["agent"].cancel("in summarizer")
        return reply("never committed")

    def cancel_after_last_chunk(request: Request) -> Iterable[StreamChunk]:
        yield from reply("never committed")
        holder["agent"].cancel("after last chunk")

    summaries: dict[str, ScriptEntry] = {
        "summarizer-starts": cancel_in_summarizer,
        "summarizer-done": cancel_after_last_chunk,
        "hang-cancel": HANG,
        "hang-dispose": HANG,
    }
    provider = Model([answer(1), answer(2)], [summaries.get(how, reply("never committed"))])
    at_start: list[tuple[Any, ...]] = []

    def remember(agent: Any, event: SessionEvent) -> None:
        if event.type == "compaction/start":
            at_start.append(snapshot(agent.session))

    async with open_runtime(provider) as rt:
        rt.on("agent/session-prefix", prefix_listener(BIG_PREFIX))
        agent = holder["agent"] = await rt.spawn(options(retain_tokens=100))
        agent.on("session/event", remember)
        assert (await agent.send(turn_text(1))).reason == "completed"
        if how == "on-start":
            agent.on("session/event", _cancel_on_start(agent))
        if how == "answered":
            actor = rt.compactor
            assert isinstance(actor, CompactionActor)
            real = actor.summarize

            async def late_cancel(job: SummaryJob) -> SummaryOutcome:
                outcome = await real(job)
                agent.cancel("answered")  # no checkpoint before the commit would follow
                return outcome

            actor.summarize = late_cancel  # type: ignore[method-assign]
        results: list[Any] = []
        async with trio.open_nursery() as nursery:

            async def run() -> None:
                results.append(await agent.send(turn_text(2)))

            nursery.start_soon(run)
            if how.startswith("hang"):
                await wait_until(lambda: len(provider.summary_requests) == 1)
                await trio.testing.wait_all_tasks_blocked()
                if how == "hang-cancel":
                    agent.cancel("external")
                else:
                    await agent.dispose()
        [result] = results
        after = snapshot(agent.session)
        return provider, agent, result, at_start[0], after


CANCEL_POINTS = [
    "on-start",
    "summarizer-starts",
    "hang-cancel",
    "summarizer-done",
    "answered",
    "hang-dispose",
]


@pytest.mark.parametrize("how", CANCEL_POINTS)
async def test_cancellation_at_any_point_leaves_one_error_end_and_the_surface(how: str) -> None:
    provider, agent, result, before, after = await _compaction_turn(how)
    session = agent.session
    assert result.reason == ("disposed" if how == "hang-dispose" else "aborted")
    groups = check_transactions(session)
    [events] = groups.values()
    assert types_of(events) == ["compaction/start", "compaction/end"]
    end = events[-1].data
    assert isinstance(end, CompactionEnd) and end.error is not None
    assert end.error.code == "CANCELLED" and end.turn == 2
    assert of_type(session, "compaction/summary") == []
    assert after == before
    assert after[0] == 0  # replace_generation never moved
    # the cancellation propagated: no model call for turn 2, the turn ended right after
    assert len(provider.loop_requests) == 1
    kinds = types_of(session.events)
    assert kinds[-2:] == ["compaction/end", "turn/end"]
    assert last_turn_end(session).kind == result.reason


async def test_a_cancel_made_by_a_pre_step_listener_starts_no_compaction() -> None:
    """The listener cancels and returns normally: the gate must not open a transaction for
    a turn that is already cancelled."""

    async def pre_step(agent: Any, value: Any) -> None:
        if value.turn == 2:
            agent.cancel("listener")

    provider = Model([answer(1), answer(2)])
    async with open_runtime(provider) as rt:
        rt.on("agent/session-prefix", prefix_listener(BIG_PREFIX))
        agent = await rt.spawn(options(retain_tokens=100))
        agent.on("agent/pre-step", pre_step)
        await agent.send(turn_text(1))
        before = snapshot(agent.session)
        assert (await agent.send(turn_text(2))).reason == "aborted"
        session = agent.session
    kinds = types_of(session.events)
    assert not any(kind.startswith("compaction/") for kind in kinds)
    assert provider.summary_requests == []
    assert session.replace_generation == before[0] == 0
    assert kinds[-3:] == ["turn/start", "user/message", "turn/end"]


async def test_after_a_cancelled_compaction_the_next_turn_compacts() -> None:
    provider = Model([answer(1), answer(3)], [HANG])
    async with open_runtime(provider) as rt:
        rt.on("agent/session-prefix", prefix_listener(BIG_PREFIX))
        agent = await rt.spawn(options(retain_tokens=100))
        await agent.send(turn_text(1))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.send, turn_text(2))
            await wait_until(lambda: len(provider.summary_requests) == 1)
            agent.cancel()
        assert (await agent.send(turn_text(3))).reason == "completed"
        groups = check_transactions(agent.session)
        ends = [events[-1].data for events in groups.values()]
        assert [isinstance(end, CompactionEnd) and end.error is None for end in ends] == [
            False,
            True,
        ]
        assert agent.session.replace_generation == 1
        assert rt.invariant_checks == 2


# ---------------------------------------------------------------- fail closed


def _error_finish(request: Request) -> list[StreamChunk]:
    return [
        BlockStart(0, "text"),
        TextDelta(0, "half a sum"),
        BlockEnd(0),
        Finish("error", ErrorInfo("overloaded", "OVERLOADED")),
    ]


def _raises(request: Request) -> list[StreamChunk]:
    raise ProviderError("rate limited", "RATE_LIMITED")


def _adapter_bug(request: Request) -> list[StreamChunk]:
    raise RuntimeError("adapter bug")


FAILURES: dict[str, tuple[ScriptEntry, str]] = {
    "adapter-bug": (_adapter_bug, "COMPACTION_FAILED"),
    "error-finish": (_error_finish, "OVERLOADED"),
    "provider-raises": (_raises, "RATE_LIMITED"),
    "max-tokens": (max_tokens_reply("a summary that was cut"), "SUMMARY_TRUNCATED"),
    "empty": (reply(""), "SUMMARY_EMPTY"),
    "blank": (reply("  \n "), "SUMMARY_EMPTY"),
    "not-smaller": (reply("long " * 400), "SUMMARY_TOO_LARGE"),
    "no-finish": ([BlockStart(0, "text"), TextDelta(0, "x"), BlockEnd(0)], "STREAM_INCOMPLETE"),
}


@pytest.mark.parametrize("case", sorted(FAILURES))
async def test_summarizer_failures_fail_closed_and_the_turn_continues(case: str) -> None:
    entry, code = FAILURES[case]
    provider = Model([answer(1), answer(2)], [entry])
    at_start: list[tuple[Any, ...]] = []
    at_end: list[tuple[Any, ...]] = []

    def remember(agent: Any, event: SessionEvent) -> None:
        if event.type == "compaction/start":
            at_start.append(snapshot(agent.session))
        elif event.type == "compaction/end":
            at_end.append(snapshot(agent.session))

    async with open_runtime(provider) as rt:
        rt.on("agent/session-prefix", prefix_listener(BIG_PREFIX))
        agent = await rt.spawn(options(retain_tokens=100, compaction_retries=0))
        agent.on("session/event", remember)
        await agent.send(turn_text(1))
        assert (await agent.send(turn_text(2))).reason == "completed"
        session = agent.session
        actor = rt.compactor
        assert isinstance(actor, CompactionActor) and actor.failures == 1
    [events] = check_transactions(session).values()
    end = events[-1].data
    assert isinstance(end, CompactionEnd) and end.error is not None and end.error.code == code
    assert at_end == at_start
    assert session.replace_generation == 0
    # the turn went on with the unchanged surface
    assert len(provider.loop_requests) == 2
    assert provider.loop_requests[1].history == at_start[0][2]
    assert last_turn_end(session).kind == "completed"


async def test_failed_attempts_are_retried_up_to_compaction_retries_then_the_turn_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    provider = Model([answer(1), answer(2)], [reply(""), reply("")])
    async with open_runtime(provider) as rt:
        rt.on("agent/session-prefix", prefix_listener(BIG_PREFIX))
        agent = await rt.spawn(options(retain_tokens=100, compaction_retries=1))
        await agent.send(turn_text(1))
        assert (await agent.send(turn_text(2))).reason == "completed"
        groups = check_transactions(agent.session)
    assert len(groups) == 2 and len(provider.summary_requests) == 2
    assert all(error_code(events[-1]) == "SUMMARY_EMPTY" for events in groups.values())
    assert "still over" in caplog.text


# ---------------------------------------------------------------- overflow recovery


def _overflow(request: Request) -> list[StreamChunk]:
    raise ProviderError("prompt is too long", "CONTEXT_WINDOW_EXCEEDED")


async def test_overflow_compacts_everything_and_retries_in_a_new_step() -> None:
    provider = Model([answer(1), answer(2), _overflow, answer(3)], [reply("all so far")])
    async with open_runtime(provider) as rt:
        rt.on("agent/session-prefix", prefix_listener(prefix_message(100)))
        agent = await rt.spawn(options(window=None))
        await agent.send(turn_text(1))
        await agent.send(turn_text(2))
        before = agent.session.derive_messages()
        result = await agent.send(turn_text(3))
        assert result.reason == "completed"
        session = agent.session
        assert rt.invariant_checks == 4
    assert len(check_transactions(session)) == 1
    # retain 0: the whole surface, the new user message included, is summarized
    assert provider.summary_requests[0].history[:-1] == (*before, Message.user(turn_text(3)))
    assert session.replace_generation == 1
    steps = [(start.turn, start.step) for start in data_of(session, StepStart)]
    assert steps[-2:] == [(3, 1), (3, 2)]
    retried = provider.loop_requests[-1]
    assert retried.history == (Message.user(frame_summary("all so far")),)
    kinds = types_of(session.events)
    assert kinds[kinds.index("compaction/start") - 1] == "step/end"


async def test_overflow_without_a_successful_compaction_ends_the_turn_with_the_error() -> None:
    provider = Model([answer(1), _overflow], [reply("")])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(options(window=None))
        await agent.send(turn_text(1))
        result = await agent.send(turn_text(2))
        session = agent.session
    assert result.reason == "error"
    assert last_turn_end(session).code == "CONTEXT_WINDOW_EXCEEDED"
    [events] = check_transactions(session).values()
    assert error_code(events[-1]) == "SUMMARY_EMPTY"
    assert session.replace_generation == 0
    assert len(provider.loop_requests) == 2


@pytest.mark.parametrize("cap", [0, 1, 2])
async def test_overflow_retries_are_capped_by_max_overflow_retries(cap: int) -> None:
    provider = Model([answer(1)] + [_overflow] * 4)
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(options(window=None, max_overflow_retries=cap))
        await agent.send(turn_text(1))
        result = await agent.send(turn_text(2))
        session = agent.session
    assert result.reason == "error"
    # after the first summary the surface is one summary: nothing left to compact, no retry
    compactions = min(cap, 1)
    assert len(of_type(session, "compaction/summary")) == compactions
    assert session.replace_generation == compactions
    assert len(provider.loop_requests) == 1 + 1 + compactions
    assert len(provider.summary_requests) == compactions


# ---------------------------------------------------------------- manual compaction


async def test_manual_compact_on_an_idle_agent_is_a_one_shot_turn() -> None:
    provider = Model([answer(1), answer(2), answer(3)], [reply("manual summary")])
    async with open_runtime(provider) as rt:
        rt.on("agent/session-prefix", prefix_listener(prefix_message(80)))
        agent = await rt.spawn(options(retain_tokens=100))
        for index in range(1, 4):
            await agent.send(turn_text(index))
        assert of_type(agent.session, "compaction/start") == []
        seen = len(agent.session)
        result = await agent.compact()
        assert result.turn == 4 and result.reason == "completed"
        assert agent.status == "idle"
        session = agent.session
        tail = session.events[seen:]
        assert types_of(tail) == [
            "turn/start",
            "compaction/start",
            "compaction/summary",
            "user/message",
            "compaction/end",
            "turn/end",
        ]
        assert tail[0].data.turn == 4 and tail[0].data.trigger.kind == "compaction"
        assert tail[-1].data.reason.kind == "completed"
        assert session.derive_messages()[0] == Message.user(frame_summary("manual summary"))
        [summarizer] = provider.summary_requests
        assert summarizer.messages[0] == prefix_message(80)
        # an empty agent has nothing to compact: still one closed turn, no transaction
        empty = await rt.spawn(options())
        assert (await empty.compact()).reason == "completed"
        assert types_of(empty.session.events) == ["turn/start", "turn/end"]
    check_transactions(session)


async def test_manual_compact_first_thing_after_resume_composes_the_prefix(tmp_path: Path) -> None:
    url = f"jsonl:{tmp_path / 'logs'}"
    async with open_runtime(Model([answer(1), answer(2)]), store=url) as rt:
        agent = await rt.spawn(options(retain_tokens=50))
        await agent.send(turn_text(1))
        await agent.send(turn_text(2))
        session_id = agent.id
    provider = Model([answer(3)])
    opener = prefix_message(60, "resumed")
    async with open_runtime(provider, store=url) as rt:
        rt.on("agent/session-prefix", prefix_listener(opener))
        agent = await rt.resume(session_id, options(retain_tokens=50))
        assert (await agent.compact()).reason == "completed"
        [summarizer] = provider.summary_requests
        assert summarizer.messages[0] == opener
        assert (await agent.send(turn_text(3))).reason == "completed"
        assert provider.loop_requests[0].messages[0] == opener
        assert rt.invariant_checks == 1


# ---------------------------------------------------------------- the pruner


def _big_output(size: int) -> str:
    return "".join(f"{index:07d}\n" for index in range(size // 8 + 1))[:size]


def _tool_returning(text: str) -> Tool:
    async def execute(args: dict[str, Any], ctx: Any) -> str:
        return text

    return Tool("dump", "Dump a file", {"type": "object"}, execute)


async def test_pruner_shortens_big_tool_results_in_place() -> None:
    big = _big_output(40_000)  # 10,004 tokens: over the 8,000-token threshold alone
    exact = _big_output(8192)  # exactly at the limit: kept whole
    provider = Model([tool_call("c2", "exact", {}), tool_call("c1", "dump", {}), answer(1)])
    tools = [_tool_returning(big), Tool("exact", "8192 chars", {}, _tool_returning(exact).execute)]
    surfaces: list[tuple[int, ...]] = []

    def remember(agent: Any, event: SessionEvent) -> None:
        if event.type == "compaction/prune":
            surfaces.append(agent.session.surface)

    async with open_runtime(provider) as rt:
        agent = await rt.spawn(options(window=10_000, tools=tools, prune=True))
        agent.on("session/event", remember)
        assert (await agent.send("dump it")).reason == "completed"
        session = agent.session
        assert rt.invariant_checks == 3
    [prune] = of_type(session, "compaction/prune")
    assert isinstance(prune.data, CompactionPrune)
    [old_seq] = prune.data.shadowed_seqs
    old = session.event(old_seq)
    assert isinstance(old.data, ToolResultEvent) and old.data.call_id == "c1"
    message = project(old)
    assert message is not None
    assert prune.data.shadowed_token_count == estimate_message(message)
    replaced = session.event(prune.seq + 1)
    assert replaced.type == "tool/result"
    assert replaced.surface_op == Replace(old_seq, old_seq)
    assert replaced.source_event_seqs == (prune.seq, old_seq)
    new = replaced.data
    assert isinstance(new, ToolResultEvent)
    [block] = new.content
    assert block.text[:PRUNE_HEAD] == big[:PRUNE_HEAD]
    assert block.text[-PRUNE_TAIL:] == big[-PRUNE_TAIL:]
    middle = block.text[PRUNE_HEAD : len(block.text) - PRUNE_TAIL]
    assert middle.startswith("\n") and middle.endswith("\n")
    marker = middle[1:-1]
    assert marker and "\n" not in marker and "pruned" in marker
    # only the content changed, in place
    assert (new.turn, new.step, new.call_id, new.is_error, new.error) == (
        old.data.turn,
        old.data.step,
        old.data.call_id,
        old.data.is_error,
        old.data.error,
    )
    assert session.surface.index(replaced.seq) == surfaces[0].index(old_seq)
    # the 8192-character result was not over the limit
    [exact_seq] = [
        e.seq
        for e in session.events
        if isinstance(e.data, ToolResultEvent) and e.data.call_id == "c2"
    ]
    assert exact_seq in session.surface
    exact_result = session.event(exact_seq).data
    assert isinstance(exact_result, ToolResultEvent)
    assert exact_result.content == (Text(exact),)
    # pruning got the session under the threshold: no summary was needed
    assert of_type(session, "compaction/start") == []
    assert provider.summary_requests == []
    # the request after the prune carried the pruned text
    assert block.text in texts_of(provider.loop_requests[-1].history)


async def test_without_prune_the_gate_goes_straight_to_a_summary() -> None:
    big = _big_output(40_000)
    provider = Model([tool_call("c1", "dump", {}), answer(1)])
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(options(window=10_000, tools=[_tool_returning(big)]))
        assert (await agent.send("dump it")).reason == "completed"
        session = agent.session
    assert of_type(session, "compaction/prune") == []
    assert of_type(session, "compaction/start") != []
    assert provider.summary_requests != []


# ---------------------------------------------------------------- durability


@pytest.mark.parametrize("scheme", ["sqlite", "jsonl"])
async def test_compacted_log_reloads_with_the_same_derivation_and_rebuilds_every_request(
    tmp_path: Path, scheme: str
) -> None:
    url = f"sqlite:{tmp_path / 'c.db'}" if scheme == "sqlite" else f"jsonl:{tmp_path / 'logs'}"
    script: list[ScriptEntry] = []
    for index in range(1, 11):
        script += [tool_call(f"c{index}", "echo", {"x": "w" * 150}), answer(index)]
    script.insert(9, _overflow)  # one overflow recovery in the middle
    provider = Model(script)
    prefix = prefix_message(1200)
    async with open_runtime(provider, store=url) as rt:
        rt.on("agent/session-prefix", prefix_listener(prefix))
        agent = await rt.spawn(options(window=1400, tools=[ECHO]))
        for index in range(1, 11):
            assert (await agent.send(turn_text(index))).reason == "completed"
        session_id = agent.id
        live = agent.session
        live_state = (live.events, snapshot(live), live.header())
        assert rt.invariant_checks == len(provider.loop_requests)
    assert len(of_type(live, "compaction/summary")) >= 3
    check_transactions(live)
    store = open_store(url)
    try:
        meta, events = await store.load(session_id)
    finally:
        await store.close()
    loaded = Session.from_events(session_id, events, meta)
    assert (loaded.events, snapshot(loaded), loaded.header()) == live_state
    report = verify_log(meta, events)
    assert report.requests_checked == len(of_type(live, "assistant/message"))
    # every loop request (before and after each compaction) is what the reloaded log rebuilds
    starts = [i for i, event in enumerate(events) if event.type == "step/start"]
    assert len(starts) == len(provider.loop_requests)
    for start, request in zip(starts, provider.loop_requests, strict=True):
        cut = next(
            i
            for i in range(start + 1, len(events))
            if events[i].type in ("assistant/chunk", "assistant/message", "step/end")
        )
        check_request(events[:cut], request)
        assert request.messages[0] == prefix


# ---------------------------------------------------------------- reused call ids


def assert_wire_valid(history: Sequence[Message]) -> None:
    """Every tool result answers a call of the nearest assistant message before it."""
    last_calls: set[str] | None = None
    for message in history:
        if message.role == "assistant":
            last_calls = {b.id for b in message.content if isinstance(b, ToolCall)}
            continue
        for block in message.content:
            if isinstance(block, ToolResult):
                assert last_calls is not None and block.tool_call_id in last_calls, (
                    f"orphaned tool result {block.tool_call_id!r}"
                )


@pytest.mark.parametrize("retain", [40, 90, 160, 260])
async def test_compaction_keeps_pairs_when_a_provider_reuses_call_ids(retain: int) -> None:
    script: list[ScriptEntry] = []
    for index in range(1, 9):
        script += [tool_call("c1", "echo", {"x": "q" * 60}), answer(index, size=120)]
    provider = Model(script)
    async with open_runtime(provider) as rt:
        agent = await rt.spawn(options(window=700, tools=[ECHO], retain_tokens=retain))
        for index in range(1, 9):
            assert (await agent.send(turn_text(index, 120))).reason == "completed"
        session = agent.session
    assert len(of_type(session, "compaction/summary")) >= 2
    check_transactions(session)
    for request in provider.requests:
        assert_wire_valid(request.history)
    assert_wire_valid(session.derive_messages())


# ---------------------------------------------------------------- configuration and resume


async def test_a_resumed_compacted_session_is_measured_by_its_current_surface(
    tmp_path: Path,
) -> None:
    url = f"sqlite:{tmp_path / 'r.db'}"
    prefix = prefix_message(1200)
    opts = options(retain_tokens=100)
    async with open_runtime(Model([answer(i) for i in range(1, 4)]), store=url) as rt:
        rt.on("agent/session-prefix", prefix_listener(prefix))
        agent = await rt.spawn(opts)
        for index in range(1, 4):
            await agent.send(turn_text(index))
        assert len(of_type(agent.session, "compaction/summary")) == 1
        session_id = agent.id
    provider = Model([answer(4)])
    async with open_runtime(provider, store=url) as rt:
        rt.on("agent/session-prefix", prefix_listener(prefix))
        agent = await rt.resume(session_id, opts)
        session = agent.session
        fixed = fixed_part_tokens(SYSTEM, (), (prefix,))
        appended = sum(
            estimate_message(message)
            for message in (project(e) for e in session.events if e.surface_op is not None)
            if message is not None
        )
        live = fixed + estimate_messages(session.derive_messages())
        assert agent._loop.meter.total(SYSTEM, (), (prefix,)) == live
        new = estimate_message(Message.user(turn_text(4)))
        assert live + new <= 0.8 * WINDOW < fixed + appended + new
        assert (await agent.send(turn_text(4))).reason == "completed"
    assert len(of_type(session, "compaction/start")) == 1  # nothing new after the resume
    assert provider.summary_requests == []


async def test_summary_model_and_max_tokens_and_the_recorded_summary() -> None:
    usage = TokenUsage(input=50, output=7, cache_read=900)
    provider = Model([answer(1), answer(2)], [reply("short", usage)])
    async with open_runtime(provider) as rt:
        rt.on("agent/session-prefix", prefix_listener(BIG_PREFIX))
        opts = options(retain_tokens=100, summary_model="small-model", summary_max_tokens=512)
        agent = await rt.spawn(opts)
        await agent.send(turn_text(1))
        await agent.send(turn_text(2))
        session = agent.session
    [request] = provider.summary_requests
    assert request.config.model == "small-model" and request.config.max_tokens == 512
    [summary] = of_type(session, "compaction/summary")
    data = summary.data
    assert isinstance(data, CompactionSummary)
    assert (data.summary, data.provider, data.model, data.max_tokens, data.usage) == (
        "short",
        "scripted",
        "small-model",
        512,
        usage,
    )
    # the loop's own requests keep the agent's model
    assert {r.config.model for r in provider.loop_requests} == {"m"}


@pytest.mark.parametrize(
    ("option", "provider_window", "compacts"),
    [(None, WINDOW, True), (None, None, False), (WINDOW, 100_000, True), (100_000, WINDOW, False)],
)
async def test_context_window_from_options_wins_over_model_info(
    option: int | None, provider_window: int | None, compacts: bool
) -> None:
    provider = Model([answer(1), answer(2)])
    provider._context_window = provider_window
    async with open_runtime(provider) as rt:
        rt.on("agent/session-prefix", prefix_listener(BIG_PREFIX))
        agent = await rt.spawn(options(window=option, retain_tokens=100))
        await agent.send(turn_text(1))
        await agent.send(turn_text(2))
        assert bool(of_type(agent.session, "compaction/summary")) is compacts


async def test_one_agents_slow_summary_does_not_delay_another_agents_compaction() -> None:
    slow = Model([answer(1)], [HANG])
    fast = Model([answer(1), answer(2)])
    slow.name, fast.name = "slow", "fast"
    async with Runtime.open(providers={"slow": slow, "fast": fast}, dev_invariants=True) as rt:
        rt.on("agent/session-prefix", prefix_listener(BIG_PREFIX))
        stuck = await rt.spawn(attrs.evolve(options(retain_tokens=100), provider="slow"))
        quick = await rt.spawn(attrs.evolve(options(retain_tokens=100), provider="fast"))
        await stuck.send(turn_text(1))
        await quick.send(turn_text(1))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stuck.send, turn_text(2))
            await wait_until(lambda: len(slow.summary_requests) == 1)
            with trio.fail_after(5):
                assert (await quick.send(turn_text(2))).reason == "completed"
            assert quick.session.replace_generation == 1
            assert stuck.status == "running"
            stuck.cancel()
        assert stuck.session.replace_generation == 0
        check_transactions(stuck.session)
        check_transactions(quick.session)
