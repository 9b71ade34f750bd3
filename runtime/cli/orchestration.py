"""Runs a `Workload`: a coordinator that delegates to subagents, workers that are forked,
cancelled and resumed, a shared skill-catalogue prefix — then verifies every stored log and
reports what happened, token usage included."""

from __future__ import annotations

import re
import statistics
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

import trio
from attrs import define, field, frozen

from ..control.handle import Agent, ToolContext
from ..control.options import AgentOptions, Tool
from ..host.runtime import Runtime
from ..host.subagents import subagent_tool
from ..log.request import Request
from ..log.usage import UsageTotals, session_usage
from ..log.verify import verify_log
from ..model.chunks import StreamChunk
from ..model.events import CompactionEnd, CompactionSummary, SessionEvent, TurnEnd
from ..model.messages import Message
from ..model.meta import SessionMeta
from ..providers.base import ModelInfo, Provider, opened_stream
from ..providers.sim import SimProvider
from ..stores.base import Store
from .workload import Skill, Workload

TOOL_MARKER = re.compile(r"call:([A-Za-z_][\w.-]*)")

Progress = Callable[[str], None]


@frozen
class RunReport:
    """What one run did. `usage` sums what every session of the run used itself (a fork's
    seed is counted once, in its parent); `session_usage` has it per session id."""

    workload: str
    run_id: str
    store: str
    sessions: int
    turns: int
    turn_reasons: Mapping[str, int]
    requests: int
    usage: UsageTotals
    session_usage: Mapping[str, UsageTotals]
    compactions: int
    failed_compactions: int
    invariant_checks: int
    verified_sessions: int
    step_overhead_p50_ms: float
    step_overhead_p99_ms: float
    wall_seconds: float


@define
class _Timings:
    """Per-step spans measured from the events as they are appended."""

    step_started: dict[tuple[str, int, int], float] = field(factory=dict)
    call_started: dict[tuple[str, str], float] = field(factory=dict)
    excluded: dict[tuple[str, int, int], float] = field(factory=dict)
    overheads: list[float] = field(factory=list)

    def on_event(self, agent: Agent, event: SessionEvent) -> None:
        now = time.perf_counter()
        data: Any = event.data
        if event.type == "step/start":
            self.step_started[(agent.id, data.turn, data.step)] = now
        elif event.type == "tool/call":
            self.call_started[(agent.id, data.call_id)] = now
        elif event.type == "tool/result" and (agent.id, data.call_id) in self.call_started:
            began = self.call_started.pop((agent.id, data.call_id))
            self.exclude(agent.id, data.turn, data.step, now - began)
        elif event.type == "step/end":
            key = (agent.id, data.turn, data.step)
            if key in self.step_started:
                span = now - self.step_started.pop(key)
                self.overheads.append(span - self.excluded.pop(key, 0.0))

    def exclude(self, session_id: str, turn: int, step: int, seconds: float) -> None:
        key = (session_id, turn, step)
        self.excluded[key] = self.excluded.get(key, 0.0) + seconds


class _TimedProvider:
    """Measures the time spent inside the model call so it is not counted as overhead."""

    def __init__(
        self,
        inner: Provider,
        timings: _Timings,
        open_steps: Callable[[str], tuple[int, int] | None],
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self._timings = timings
        self._open_steps = open_steps
        self.requests = 0

    def model_info(self, model: str) -> ModelInfo | None:
        return self.inner.model_info(model)

    async def stream(self, request: Request) -> AsyncIterator[StreamChunk]:
        self.requests += 1
        began = time.perf_counter()
        try:
            async with opened_stream(self.inner, request) as stream:
                async for chunk in stream:
                    yield chunk
        finally:
            step = None if request.one_shot else self._open_steps(request.session_id)
            if step is not None:
                self._timings.exclude(request.session_id, *step, time.perf_counter() - began)


def skill_catalogue(skills: Sequence[Skill]) -> Callable[..., Any]:
    """A session-prefix contributor: one opener message listing the available skills."""
    text = "Available skills:\n" + "\n".join(f"- {s.name}: {s.description}" for s in skills)
    opener = Message.user(text)

    async def contribute(agent: Agent, value: tuple[Message, ...], next: Any) -> Any:
        return (opener, *await next())

    return contribute


def marker_policy(request: Request) -> Sequence[tuple[str, Mapping[str, Any]]]:
    """Simulated model policy: `call:TOOL REST` in the last user text calls TOOL once, with
    REST as the delegate's task or the lookup's query."""
    if not request.history or request.history[-1].role != "user":
        return ()
    match = TOOL_MARKER.search(request.history[-1].text)
    if match is None or not any(tool.name == match.group(1) for tool in request.tools):
        return ()
    rest = request.history[-1].text[match.end() :].strip() or "Report your status."
    key = "task" if match.group(1) == "delegate" else "query"
    return [(match.group(1), {key: rest})]


def make_sim(latency_ms: float, context_window: int | None) -> SimProvider:
    return SimProvider(
        "anthropic",
        latency=latency_ms / 1000,
        tool_policy=marker_policy,
        context_window=context_window or 200_000,
    )


async def _lookup(args: dict[str, Any], ctx: ToolContext) -> str:
    return f"lookup({args.get('query', '')}): no surprises found"


LOOKUP = Tool(
    "lookup",
    "Look a fact up in the team wiki.",
    {"type": "object", "properties": {"query": {"type": "string"}}},
    _lookup,
)


def worker_options(workload: Workload, model: str) -> AgentOptions:
    """The options of the workload's workers (and of the coordinator's subagents)."""
    return AgentOptions(
        model=model,
        system=workload.workers.system,
        tools=(LOOKUP,),
        context_window=workload.context_window,
        labels={"name": "worker"},
    )


def workload_tools(rt: Runtime, workload: Workload, model: str) -> Mapping[str, Tool]:
    """Every tool the workload's agents are given, by name: the lookup, and the delegate
    whose subagents are workers."""
    delegate = subagent_tool(rt, options=worker_options(workload, model))
    return {tool.name: tool for tool in (delegate, LOOKUP)}


def role_tools(tools: Mapping[str, Tool], role: str | None) -> tuple[Tool, ...] | None:
    """The tools a workload gives the agent of `role` (its `name` label: the coordinator
    delegates and looks up, a worker looks up); None for a role no workload has."""
    if role == "coordinator":
        return (tools["delegate"], tools["lookup"])
    if role == "worker":
        return (tools["lookup"],)
    return None


def add_workload_listeners(rt: Runtime, workload: Workload) -> None:
    """The runtime-wide listeners the workload's sessions were run with: its skill
    catalogue as the session prefix."""
    if workload.skills:
        rt.on("agent/session-prefix", skill_catalogue(workload.skills))


async def run_workload(
    workload: Workload,
    store: Store,
    provider: Provider,
    *,
    model: str | None = None,
    progress: Progress = lambda _step: None,
) -> RunReport:
    """Run `workload` on `store` (the coordinator, then the workers side by side, then the
    forks, cancellations and resumes), verify every session it wrote, and report."""
    started = time.perf_counter()
    timings = _Timings()
    runtime_box: list[Runtime] = []

    def open_step(session_id: str) -> tuple[int, int] | None:
        agent = runtime_box[0].get(session_id) if runtime_box else None
        if agent is None or agent.session.open_turn is None or agent.session.open_step is None:
            return None
        return agent.session.open_turn, agent.session.open_step

    timed = _TimedProvider(provider, timings, open_step)
    model_name = model or workload.model
    run_id = f"{workload.name}-{uuid.uuid4().hex[:8]}"
    async with Runtime.open(store=store, provider=timed, dev_invariants=True) as rt:
        runtime_box.append(rt)
        rt.on("session/event", timings.on_event)
        add_workload_listeners(rt, workload)
        tools = workload_tools(rt, workload, model_name)
        coordinator = await rt.spawn(
            AgentOptions(
                model=model_name,
                system=workload.coordinator.system,
                tools=role_tools(tools, "coordinator") or (),
                context_window=workload.context_window,
                labels={"name": "coordinator"},
            ),
            session_id=f"{run_id}-coordinator",
        )
        for task in workload.coordinator.tasks:
            await coordinator.send(task)
            progress("coordinator turn")
        await _run_workers(rt, workload, worker_options(workload, model_name), run_id, progress)
        async with trio.open_nursery() as nursery:
            for agent in rt.agents:
                nursery.start_soon(agent.dispose)
        return await _report(
            workload,
            run_id,
            store,
            timings,
            timed.requests,
            rt.invariant_checks,
            time.perf_counter() - started,
        )


async def _run_workers(
    rt: Runtime, workload: Workload, options: AgentOptions, run_id: str, progress: Progress
) -> None:
    """The workers' turns side by side, then the forks, the cancellations and the resumes."""
    workers = workload.workers
    agents: list[Agent] = []
    for index in range(workers.count):
        agents.append(await rt.spawn(options, session_id=f"{run_id}-worker-{index}"))

    async def work(agent: Agent) -> None:
        for turn in range(workers.turns):
            await agent.send(f"Step {turn + 1} of your assignment. call:lookup")
            progress("worker turn")

    async with trio.open_nursery() as nursery:
        for agent in agents:
            nursery.start_soon(work, agent)

    for agent in agents[: workers.fork]:
        child = await rt.fork(agent.id, child_id=f"{agent.id}-fork")
        await child.send("You are a fork: try the alternative approach.")
        progress("fork turn")

    for agent in agents[: workers.cancel]:
        # Cancelled as its model request goes out, whatever the machine's speed: the turn
        # is aborted mid-step, never finished first.
        async def cancel_at_request(handle: Agent, config: Any, next: Any) -> Any:
            handle.cancel("workload cancellation")
            return await next()

        unsubscribe = agent.on("agent/request", cancel_at_request)
        try:
            await agent.send("A long task that will be cancelled.")
        finally:
            unsubscribe()
        progress("cancelled turn")

    for agent in agents[-workers.resume :] if workers.resume else []:
        await agent.dispose()
        again = await rt.resume(agent.id, options)
        await again.send("Resumed: wrap up your assignment.")
        progress("resumed turn")


async def _report(
    workload: Workload,
    run_id: str,
    store: Store,
    timings: _Timings,
    requests: int,
    invariant_checks: int,
    wall: float,
) -> RunReport:
    # A store may list a session it cannot read (a DamagedSession): it counts as a session
    # of the run that did not verify.
    listed = [entry for entry in await store.list() if entry.id.startswith(run_id)]
    turns = 0
    reasons: dict[str, int] = {}
    usages: dict[str, UsageTotals] = {}
    compactions = failed = 0
    verified = 0
    for entry in listed:
        if not isinstance(entry, SessionMeta):
            continue
        meta, events = await store.load(entry.id)
        verify_log(meta, events)
        verified += 1
        usages[meta.id] = session_usage(meta, events)
        for event in events[meta.seed_length or 0 :]:
            data = event.data
            if isinstance(data, TurnEnd):
                turns += 1
                reasons[data.reason.kind] = reasons.get(data.reason.kind, 0) + 1
            elif isinstance(data, CompactionSummary):
                compactions += 1
            elif isinstance(data, CompactionEnd) and data.error is not None:
                failed += 1
    overheads = sorted(timings.overheads) or [0.0]
    p99 = overheads[min(len(overheads) - 1, int(len(overheads) * 0.99))]
    return RunReport(
        workload=workload.name,
        run_id=run_id,
        store=store.url,
        sessions=len(listed),
        turns=turns,
        turn_reasons=reasons,
        requests=requests,
        usage=sum(usages.values(), UsageTotals()),
        session_usage=usages,
        compactions=compactions,
        failed_compactions=failed,
        invariant_checks=invariant_checks,
        verified_sessions=verified,
        step_overhead_p50_ms=statistics.median(overheads) * 1000,
        step_overhead_p99_ms=p99 * 1000,
        wall_seconds=wall,
    )
