"""Per-step framework overhead of actorloop next to openai-agents, pydantic-ai and langgraph,
all running one multi-turn tool-calling workload against instant fake models in one process.

Run from the repository root (peers come from the `bench` extra):

    python -m benchmarks.bench_peers [--quick] [--turns N] [--reps N]

Writes benchmarks/results/peers.json and peers.md (`peers-quick.*` with --quick).

Workload, identical for every framework: one agent, N turns (20 by default); each turn is a
user message, a model step that calls the `echo` tool once, the tool run, and a model step
that answers with text, so 2 model steps per turn and 4 history entries more per turn. The
history of every earlier turn is sent to the model at every step. The fake models replay
canned responses (built before the clock starts) and return at once; what is timed is the
framework: one turn's wall time, from submitting the user message until the framework hands
back the turn's result and the history for the next turn, divided by its 2 model steps.
Frameworks run in turn (round-robin), each repetition on a fresh agent in a fresh event loop
(`trio.run` for actorloop, `asyncio.run` for the peers), after one discarded warm-up run.

Every framework validates the tool's arguments: the peers with pydantic (from the
function's signature), actorloop with jsonschema against the tool's JSON Schema. Ratios are
against actorloop on its durable `sqlite:` store (the default comparison with checkpointing
peers); a second conversation of 252 turns reads the per-step cost at 12, 100 and 1,000
history messages (the turns whose history reaches them, ±1 turn).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.util
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import trio

RESULTS = Path(__file__).resolve().parent / "results"
TURNS = 20
REPS = 10
QUICK_REPS = 2
STEPS_PER_TURN = 2
HISTORY_PER_TURN = 4
# Per-step cost read at these history lengths (messages before the turn), one conversation
# long enough for the largest; fewer repetitions than the short suite.
HISTORY_POINTS = (12, 100, 1_000)
QUICK_HISTORY_POINTS = (12, 100)
HISTORY_REPS = 3
BASE = "actorloop (sqlite:)"
"""The default comparison: checkpointing peers keep their history durable or in a saver, so
actorloop is compared on its durable store; the memory: row is shown beside it."""
SYSTEM = "You are terse. Use the echo tool when asked to echo something."
TOOL_NAME = "echo"
TOOL_DESCRIPTION = "Echo the argument x back."
TOOL_SCHEMA = {
    "type": "object",
    "properties": {"x": {"type": "string"}},
    "required": ["x"],
    "additionalProperties": False,
}
# Distribution names (for versions and the install check) per peer framework.
PEER_PACKAGES = {
    "openai-agents": ("openai-agents", "agents"),
    "pydantic-ai": ("pydantic-ai-slim", "pydantic_ai"),
    "langgraph": ("langgraph", "langgraph"),
}


def user_text(turn: int) -> str:
    return f"Turn {turn}: please echo turn-{turn}."


def tool_argument(turn: int) -> str:
    return f"turn-{turn}"


def call_id(turn: int) -> str:
    return f"call-{turn}"


def answer_text(turn: int) -> str:
    return f"Echoed turn-{turn}; done."


def echo_text(x: str) -> str:
    return f"echo:{x}"


async def echo(x: str) -> str:
    """The peers' tool: the same trivial coroutine for each framework."""
    return echo_text(x)


@dataclass
class Trial:
    """One repetition: per-turn wall and CPU seconds, history length seen last."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    seen_last: int = 0

    def __enter__(self) -> None:
        self._wall_start = time.perf_counter()
        self._cpu_start = time.process_time()

    def __exit__(self, *exc: object) -> None:
        self.wall.append(time.perf_counter() - self._wall_start)
        self.cpu.append(time.process_time() - self._cpu_start)


@dataclass(frozen=True)
class Peer:
    name: str
    framework: str
    per_step: str
    run: Callable[[int], Trial]


def _actorloop(store_of: Callable[[Path], str]) -> Callable[[int], Trial]:
    def run(turns: int) -> Trial:
        from actorloop.runtime import AgentOptions, Runtime, Tool
        from actorloop.runtime.testing import ScriptedProvider, reply, tool_call

        async def execute(args: dict[str, Any], ctx: Any) -> str:
            return echo_text(args["x"])

        tool = Tool(TOOL_NAME, TOOL_DESCRIPTION, TOOL_SCHEMA, execute)
        script = []
        for turn in range(1, turns + 1):
            script += [
                tool_call(call_id(turn), TOOL_NAME, {"x": tool_argument(turn)}),
                reply(answer_text(turn)),
            ]
        trial = Trial()

        async def main(directory: Path) -> None:
            provider = ScriptedProvider(script)
            async with Runtime.open(store=store_of(directory), provider=provider) as rt:
                agent = await rt.spawn(AgentOptions(model="m", system=SYSTEM, tools=(tool,)))
                for turn in range(1, turns + 1):
                    with trial:
                        result = await agent.send(user_text(turn))
                    assert result.reason == "completed", result
                assert provider.calls == STEPS_PER_TURN * turns
                trial.seen_last = len(provider.requests[-1].messages)

        with tempfile.TemporaryDirectory() as directory:
            trio.run(main, Path(directory))
        return trial

    return run


def _openai_agents(turns: int) -> Trial:
    from agents import Agent, RunConfig, Runner, function_tool
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    canned: list[ModelResponse] = []
    for turn in range(1, turns + 1):
        arguments = json.dumps({"x": tool_argument(turn)})
        call = ResponseFunctionToolCall(
            arguments=arguments, call_id=call_id(turn), name=TOOL_NAME, type="function_call"
        )
        text = ResponseOutputText(text=answer_text(turn), type="output_text", annotations=[])
        message = ResponseOutputMessage(
            id=f"msg-{turn}", content=[text], role="assistant", status="completed", type="message"
        )
        for output in (call, message):
            usage = Usage(requests=1, input_tokens=10, output_tokens=5, total_tokens=15)
            canned.append(ModelResponse(output=[output], usage=usage, response_id=None))
    trial = Trial()

    class CannedModel(Model):
        """Returns the next canned response; the Runner does everything else."""

        async def get_response(
            self,
            system_instructions: str | None,
            input: str | list[Any],
            *args: Any,
            **kwargs: Any,
        ) -> ModelResponse:
            trial.seen_last = len(input) if isinstance(input, list) else 1
            return canned.pop(0)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("the benchmark runs the non-streaming Runner.run")

    tool = function_tool(echo, name_override=TOOL_NAME, description_override=TOOL_DESCRIPTION)
    agent = Agent(name="bench", instructions=SYSTEM, model=CannedModel(), tools=[tool])
    # Tracing off: it exports spans to the OpenAI backend, which a real deployment may keep.
    config = RunConfig(tracing_disabled=True)

    async def main() -> None:
        history: list[Any] = []
        for turn in range(1, turns + 1):
            with trial:
                result = await Runner.run(
                    agent,
                    [*history, {"role": "user", "content": user_text(turn)}],
                    run_config=config,
                )
                history = result.to_input_list()
            assert result.final_output == answer_text(turn), result.final_output
        assert not canned

    asyncio.run(main())
    return trial


def _pydantic_ai(turns: int) -> Trial:
    from pydantic_ai import Agent, Tool
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.usage import RequestUsage

    canned: list[ModelResponse] = []
    for turn in range(1, turns + 1):
        # Explicit usage: without it FunctionModel estimates tokens over the whole history,
        # a cost of the test model, not of the framework.
        usage = RequestUsage(input_tokens=10, output_tokens=5)
        call = ToolCallPart(TOOL_NAME, {"x": tool_argument(turn)}, tool_call_id=call_id(turn))
        canned.append(ModelResponse(parts=[call], usage=usage))
        canned.append(ModelResponse(parts=[TextPart(answer_text(turn))], usage=usage))
    trial = Trial()

    async def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        trial.seen_last = len(messages)
        return canned.pop(0)

    tool = Tool(echo, name=TOOL_NAME, description=TOOL_DESCRIPTION)
    agent = Agent(FunctionModel(respond), instructions=SYSTEM, tools=[tool])

    async def main() -> None:
        history: list[ModelMessage] = []
        for turn in range(1, turns + 1):
            with trial:
                result = await agent.run(user_text(turn), message_history=history)
                history = result.all_messages()
            assert result.output == answer_text(turn), result.output
        assert not canned

    asyncio.run(main())
    return trial


def _langgraph(checkpointer: bool) -> Callable[[int], Trial]:
    def run(turns: int) -> Trial:
        from langchain_core.language_models.chat_models import BaseChatModel
        from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
        from langchain_core.outputs import ChatGeneration, ChatResult
        from langchain_core.tools import StructuredTool
        from langgraph.checkpoint.memory import InMemorySaver
        from langgraph.graph import START, MessagesState, StateGraph
        from langgraph.prebuilt import ToolNode, tools_condition

        canned: list[AIMessage] = []
        for turn in range(1, turns + 1):
            call = {
                "name": TOOL_NAME,
                "args": {"x": tool_argument(turn)},
                "id": call_id(turn),
                "type": "tool_call",
            }
            canned.append(AIMessage("", tool_calls=[call]))
            canned.append(AIMessage(answer_text(turn)))
        trial = Trial()

        class CannedChatModel(BaseChatModel):
            """A chat model answering from the canned list through langchain's Runnable path.

            `_agenerate` is native: the default would run `_generate` in a thread pool."""

            @property
            def _llm_type(self) -> str:
                return "canned"

            def _generate(
                self,
                messages: list[BaseMessage],
                stop: list[str] | None = None,
                run_manager: Any = None,
                **kwargs: Any,
            ) -> ChatResult:
                trial.seen_last = len(messages)
                return ChatResult(generations=[ChatGeneration(message=canned.pop(0))])

            async def _agenerate(
                self,
                messages: list[BaseMessage],
                stop: list[str] | None = None,
                run_manager: Any = None,
                **kwargs: Any,
            ) -> ChatResult:
                return self._generate(messages, stop)

        model = CannedChatModel()
        system = SystemMessage(SYSTEM)

        async def call_model(state: MessagesState) -> dict[str, list[BaseMessage]]:
            return {"messages": [await model.ainvoke([system, *state["messages"]])]}

        tool = StructuredTool.from_function(
            coroutine=echo, name=TOOL_NAME, description=TOOL_DESCRIPTION
        )
        # The ReAct graph of langgraph's docs: model node, ToolNode, tools_condition edge.
        graph = StateGraph(MessagesState)
        graph.add_node("model", call_model)
        graph.add_node("tools", ToolNode([tool]))
        graph.add_edge(START, "model")
        graph.add_conditional_edges("model", tools_condition)
        graph.add_edge("tools", "model")
        app = graph.compile(checkpointer=InMemorySaver() if checkpointer else None)
        config: Any = {"configurable": {"thread_id": "bench"}}

        async def main() -> None:
            history: list[Any] = []
            state: Any
            for turn in range(1, turns + 1):
                with trial:
                    if checkpointer:
                        state = await app.ainvoke(
                            MessagesState(messages=[HumanMessage(user_text(turn))]), config
                        )
                    else:
                        state = await app.ainvoke(
                            MessagesState(messages=[*history, HumanMessage(user_text(turn))])
                        )
                        history = state["messages"]
                assert state["messages"][-1].content == answer_text(turn)
            assert not canned

        asyncio.run(main())
        return trial

    return run


PEERS = (
    Peer(
        "actorloop",
        "actorloop",
        "ScriptedProvider streams the canned chunks; memory: store. Every chunk, message, "
        "tool call/result and step boundary is a validated, frozen log event (~11 per step), "
        "tool arguments are validated against the tool's JSON Schema (jsonschema), "
        "hooks run, the request is rebuilt from the log (system + history) with its digest, "
        "events go through the CodecActor to the store, a flush barrier ends each turn",
        _actorloop(lambda directory: "memory:"),
    ),
    Peer(
        "actorloop (sqlite:)",
        "actorloop",
        "as above, on a durable sqlite: store file (events encoded with cattrs+orjson and "
        "group-committed from a worker thread)",
        _actorloop(lambda directory: f"sqlite:{directory / 'bench.db'}"),
    ),
    Peer(
        "openai-agents",
        "openai-agents",
        "custom Model subclass (get_response returns a canned ModelResponse); Runner.run "
        "per turn with the caller's to_input_list() history; tracing disabled; function_tool "
        "args validated with pydantic",
        _openai_agents,
    ),
    Peer(
        "pydantic-ai",
        "pydantic-ai",
        "FunctionModel returning canned ModelResponses with usage set; agent.run per turn "
        "with message_history=result.all_messages(); tool args validated with pydantic",
        _pydantic_ai,
    ),
    Peer(
        "langgraph (checkpointer)",
        "langgraph",
        "StateGraph(MessagesState): model node calling a BaseChatModel subclass with canned "
        "AIMessages (tool_calls), ToolNode, tools_condition; InMemorySaver keeps the thread's "
        "history (a checkpoint per super-step)",
        _langgraph(checkpointer=True),
    ),
    Peer(
        "langgraph (no checkpointer)",
        "langgraph",
        "same graph without a checkpointer; the caller passes the whole history each turn",
        _langgraph(checkpointer=False),
    ),
)


def missing_peers() -> list[str]:
    """The peer frameworks that are not installed (the `bench` extra provides them)."""
    return [
        name
        for name, (_, module) in PEER_PACKAGES.items()
        if importlib.util.find_spec(module) is None
    ]


def _available(peers: Sequence[Peer]) -> list[Peer]:
    missing = set(missing_peers())
    return [peer for peer in peers if peer.framework not in missing]


def _run_suite(peers: Sequence[Peer], turns: int, reps: int) -> dict[str, list[Trial]]:
    for peer in peers:
        peer.run(min(turns, 3))  # warm-up: imports, lazy caches, schema builds
    trials: dict[str, list[Trial]] = {peer.name: [] for peer in peers}
    for _ in range(reps):
        for peer in peers:
            gc.collect()
            trials[peer.name].append(peer.run(turns))
    return trials


def _us_per_step(seconds: float) -> float:
    return seconds / STEPS_PER_TURN * 1e6


def _slope(values: Sequence[float]) -> float:
    """Least-squares slope of values against their index."""
    n = len(values)
    mean_x = (n - 1) / 2
    mean_y = sum(values) / n
    num = sum((x - mean_x) * (y - mean_y) for x, y in enumerate(values))
    den = sum((x - mean_x) ** 2 for x in range(n))
    return num / den


def _summarise(trials: list[Trial], turns: int) -> dict[str, Any]:
    steps = STEPS_PER_TURN * turns * len(trials)
    samples = [_us_per_step(wall) for trial in trials for wall in trial.wall]
    per_turn_wall = [
        statistics.median(_us_per_step(trial.wall[index]) for trial in trials)
        for index in range(turns)
    ]
    # Growth is read from CPU time: on shared cores a burst of other work inflates a few
    # turns' wall time, which a median over few runs does not always absorb.
    per_turn = [
        statistics.median(_us_per_step(trial.cpu[index]) for trial in trials)
        for index in range(turns)
    ]
    # Turn 1 carries one-off work (actorloop's header snapshot, peers' first-run caches):
    # growth is measured from turn 2.
    window = max(1, min(5, (turns - 1) // 2))
    early = statistics.median(per_turn[1 : 1 + window])
    late = statistics.median(per_turn[-window:])
    return {
        "reps": len(trials),
        "steps_per_rep": STEPS_PER_TURN * turns,
        "mean_us_per_step": round(sum(sum(t.wall) for t in trials) / steps * 1e6, 1),
        "median_us_per_step": round(statistics.median(samples), 1),
        "best_rep_us_per_step": round(
            min(sum(t.wall) for t in trials) / (STEPS_PER_TURN * turns) * 1e6, 1
        ),
        "cpu_us_per_step": round(sum(sum(t.cpu) for t in trials) / steps * 1e6, 1),
        "history_entries_seen_at_last_step": trials[-1].seen_last,
        "per_turn_median_wall_us_per_step": [round(value, 1) for value in per_turn_wall],
        "per_turn_median_cpu_us_per_step": [round(value, 1) for value in per_turn],
        "growth_window_turns": window,
        "early_us_per_step": round(early, 1),
        "late_us_per_step": round(late, 1),
        "growth_late_vs_early": round(late / early, 3),
        "slope_us_per_step_per_turn": round(_slope(per_turn[1:]), 3),
    }


def _with_ratios(rows: dict[str, dict[str, Any]], base: str) -> None:
    if base not in rows:
        return
    reference = rows[base]
    for row in rows.values():
        row["ratios_vs_base"] = {
            key: round(row[key] / reference[key], 3)
            for key in ("mean_us_per_step", "median_us_per_step", "cpu_us_per_step")
        }


def history_turns(points: Sequence[int]) -> int:
    """Turns a conversation needs so the turn after the largest point's turn exists."""
    return max(points) // HISTORY_PER_TURN + 2


def _at_history(trials: list[Trial], point: int) -> dict[str, Any]:
    """Median per-step cost over the runs and the turns around the one whose history (the
    messages before it) is `point`: that turn and its neighbours."""
    turn = point // HISTORY_PER_TURN  # 0-based index of the turn starting at `point`
    window = range(max(turn - 1, 1), turn + 2)
    wall = [_us_per_step(trial.wall[index]) for trial in trials for index in window]
    cpu = [_us_per_step(trial.cpu[index]) for trial in trials for index in window]
    return {
        "history_messages": point,
        "turns": [index + 1 for index in window],
        "median_us_per_step": round(statistics.median(wall), 1),
        "median_cpu_us_per_step": round(statistics.median(cpu), 1),
    }


def _history_rows(
    suite: dict[str, list[Trial]], points: Sequence[int]
) -> dict[str, dict[str, Any]]:
    rows = {
        name: {str(p): _at_history(trials, p) for p in points} for name, trials in suite.items()
    }
    if BASE in rows:
        for row in rows.values():
            for key, cell in row.items():
                reference = rows[BASE][key]
                cell["cpu_x_base"] = round(
                    cell["median_cpu_us_per_step"] / reference["median_cpu_us_per_step"], 3
                )
                cell["wall_x_base"] = round(
                    cell["median_us_per_step"] / reference["median_us_per_step"], 3
                )
    return rows


def environment() -> dict[str, Any]:
    versions: dict[str, str | None] = {}
    for distribution in (
        "actorloop",
        "trio",
        "attrs",
        "cattrs",
        "orjson",
        "openai-agents",
        "openai",
        "pydantic-ai-slim",
        "pydantic",
        "langgraph",
        "langchain-core",
    ):
        try:
            versions[distribution] = metadata.version(distribution)
        except metadata.PackageNotFoundError:
            versions[distribution] = None
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "versions": versions,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def run(turns: int, reps: int, points: Sequence[int], history_reps: int) -> dict[str, Any]:
    peers = _available(PEERS)
    report: dict[str, Any] = {
        "environment": environment(),
        "workload": {
            "turns": turns,
            "steps_per_turn": STEPS_PER_TURN,
            "reps": reps,
            "tool": f"{TOOL_NAME}(x) -> 'echo:' + x",
            "history_entries_per_turn": HISTORY_PER_TURN,
        },
        "base": BASE,
        "missing_peers": missing_peers(),
        "peers": {
            peer.name: {"framework": peer.framework, "per_step": peer.per_step} for peer in peers
        },
    }
    rows = {
        name: _summarise(trials, turns) for name, trials in _run_suite(peers, turns, reps).items()
    }
    _with_ratios(rows, BASE)
    report["results"] = rows
    long_turns = history_turns(points)
    suite = _run_suite(peers, long_turns, history_reps)
    report["history"] = {
        "turns": long_turns,
        "reps": history_reps,
        "points": list(points),
        "results": _history_rows(suite, points),
        "growth": {name: _summarise(trials, long_turns) for name, trials in suite.items()},
    }
    for row in report["history"]["growth"].values():
        del row["per_turn_median_wall_us_per_step"]  # per-turn lists of 252: CPU kept
    return report


def _growth_rows(results: dict[str, dict[str, Any]], turns: int) -> list[str]:
    middle = turns // 2
    lines = [
        f"| framework | turn 1 | turn 2 | turn {middle} | turn {turns} | "
        "late / early | slope µs per turn |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in results.items():
        per_turn = row["per_turn_median_cpu_us_per_step"]
        lines.append(
            f"| {name} | {per_turn[0]:,.0f} | {per_turn[1]:,.0f} | {per_turn[middle - 1]:,.0f} | "
            f"{per_turn[-1]:,.0f} | {row['growth_late_vs_early']:.2f} | "
            f"{row['slope_us_per_step_per_turn']:+.1f} |"
        )
    return lines


def _history_cell(cell: dict[str, Any]) -> str:
    ratio = cell.get("cpu_x_base", float("nan"))
    return f"{cell['median_cpu_us_per_step']:,.0f} ({ratio:.2f}×)"


def to_markdown(report: dict[str, Any], command: str) -> str:
    env = report["environment"]
    work = report["workload"]
    window = next(iter(report["results"].values()))["growth_window_turns"]
    versions = ", ".join(f"{k} {v}" for k, v in env["versions"].items() if v)
    lines = [
        "# Framework overhead per model step: actorloop and peers",
        "",
        f"`{command}` — Python {env['python']} on {env['platform']}, {env['cpus']} CPUs, "
        f"{env['time']}. Versions: {versions}.",
        "",
        f"Same workload for every framework: {work['turns']} turns × (one step calling the "
        f"`echo` tool + one final-answer step) = {work['turns'] * work['steps_per_turn']} model "
        f"steps per run, history growing by {work['history_entries_per_turn']} entries per "
        "turn and sent in full at every step; fake models answer instantly from canned "
        f"responses. {work['reps']} runs per framework, interleaved, after a warm-up run. "
        "µs/step = a turn's wall time / 2. *cpu* = process CPU time per step (close to wall on "
        "an idle machine; wall well above cpu means other processes held the cores). Ratios are "
        f"against **{report['base']}** (the durable store: the fair row against checkpointing "
        "peers) measured in the same run; absolute numbers depend on the machine (2 shared "
        "cores here), ratios much less. Every framework validates the tool's arguments "
        "(pydantic for the peers, jsonschema against the tool's JSON Schema for actorloop).",
        "",
    ]
    if report["missing_peers"]:
        lines += [
            f"Not measured (not installed): {', '.join(report['missing_peers'])}. "
            'Install them with `pip install -e ".[bench]"`.',
            "",
        ]
    lines += [
        "| framework | mean µs/step | median µs/step | best run µs/step | cpu µs/step | "
        "mean ratio | median ratio | cpu ratio | history entries at last step |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in report["results"].items():
        ratios = row.get("ratios_vs_base", {})
        lines.append(
            f"| {name} | {row['mean_us_per_step']:,.0f} | {row['median_us_per_step']:,.0f} | "
            f"{row['best_rep_us_per_step']:,.0f} | {row['cpu_us_per_step']:,.0f} | "
            f"{ratios.get('mean_us_per_step', float('nan')):.2f} | "
            f"{ratios.get('median_us_per_step', float('nan')):.2f} | "
            f"{ratios.get('cpu_us_per_step', float('nan')):.2f} | "
            f"{row['history_entries_seen_at_last_step']} |"
        )
    lines += [
        "",
        "History entries differ in unit, not in content: actorloop counts messages of its "
        "request (user, assistant tool call, tool result, assistant answer per turn); "
        "openai-agents counts Responses input items; pydantic-ai counts ModelRequest / "
        "ModelResponse objects; langgraph counts messages including the system message.",
        "",
        f"## Growth of per-step cost with history, turns 1 → {work['turns']}",
        "",
        "Median over runs of each turn's CPU µs/step (CPU time, so that other work on the "
        f"shared cores does not show as growth). *late / early* = median of the last {window} "
        f"turns ÷ median of turns 2–{window + 1} (turn 1 carries one-off work); *slope* = "
        "least-squares µs/step added per turn, turns 2 onward.",
        "",
        *_growth_rows(report["results"], work["turns"]),
    ]
    history = report["history"]
    points = history["points"]
    lines += [
        "",
        f"## Per-step cost at {', '.join(f'{p:,}' for p in points)} history messages",
        "",
        f"One conversation of {history['turns']} turns per framework, {history['reps']} runs "
        "interleaved. At each point: median over the runs and the turn whose history (messages "
        "before it) reaches the point and its neighbours, CPU µs per step, and in brackets "
        f"the ratio to {report['base']} at the same point.",
        "",
        "| framework | " + " | ".join(f"{p:,} messages" for p in points) + " |",
        "|---|" + "---:|" * len(points),
    ]
    for name, row in history["results"].items():
        cells = [_history_cell(row[str(point)]) for point in points]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "## What each framework does per step", ""]
    for name, info in report["peers"].items():
        lines.append(f"* **{name}** — {info['per_step']}.")
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="2 runs; history points 12 and 100 only, 1 run"
    )
    parser.add_argument("--turns", type=int, default=TURNS)
    parser.add_argument("--reps", type=int, default=None)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    missing = missing_peers()
    if missing:
        print(
            f'bench_peers: not installed, skipped: {", ".join(missing)} (pip install -e ".[bench]")'
        )
    reps = args.reps or (QUICK_REPS if args.quick else REPS)
    points = QUICK_HISTORY_POINTS if args.quick else HISTORY_POINTS
    report = run(args.turns, reps, points, 1 if args.quick else HISTORY_REPS)
    suffix = "-quick" if args.quick else ""
    command = "python -m benchmarks.bench_peers" + (" --quick" if args.quick else "")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"peers{suffix}.json").write_text(json.dumps(report, indent=2) + "\n")
    markdown = to_markdown(report, command)
    (args.out / f"peers{suffix}.md").write_text(markdown)
    print(markdown)
    return report


if __name__ == "__main__":
    main()
