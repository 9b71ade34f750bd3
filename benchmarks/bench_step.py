"""Step benchmark against a baseline tree: the CPU time of one model step in this tree and in
another checkout of actorloop, each in fresh subprocesses, interleaved round by round.

Run from the repository root:

    python -m benchmarks.bench_step --baseline-tree PATH [--rounds N] [--instructions]

`PATH` is a checkout of an earlier commit (`git worktree add --detach PATH <commit>`). The
workload is bench_floor's: one agent per store (`memory:`, and `sqlite:` in a temporary
directory), every turn a tool call with a JSON-Schema-validated argument and a text answer;
after a warm-up, the median CPU time (`time.process_time`, the store's thread included) of
300 turns, divided by their 2 model steps. Each round runs both trees (which goes first
alternates); the table shows the medians over rounds and the median of the per-round ratios.

`--instructions` adds instruction counts per step under valgrind's callgrind (the
difference between a run of 70 and one of 20 timed turns, so start-up cancels out), which
the machine's load does not move.

Writes benchmarks/results/step.json and step.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.baseline import linked_package

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
CALLGRIND = ("valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null")

CHILD = """
import gc, json, statistics, sys, tempfile
import trio
sys.path.insert(0, {root!r})
from benchmarks.bench_floor import OPTIONS, StepAgent
from actorloop.runtime.testing import ScriptedProvider
from actorloop.runtime.host.runtime import Runtime

async def measure(store, warm, timed):
    provider = ScriptedProvider()
    async with Runtime.open(store=store, provider=provider) as runtime:
        agent = StepAgent(await runtime.spawn(OPTIONS), provider)
        for _ in range(warm):
            await agent.turn()
        gc.collect()
        took = [await agent.turn() for _ in range(timed)]
    return statistics.median(took) / 2 * 1e6

stores = sys.argv[1].split(",")
warm, timed = int(sys.argv[2]), int(sys.argv[3])
directory = tempfile.mkdtemp()
out = {{}}
for store in stores:
    url = store if store == "memory:" else "sqlite:" + directory + "/steps.db"
    out[store.rstrip(":")] = trio.run(measure, url, warm, timed)
print(json.dumps(out))
"""


def _env(path: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if path is not None:
        env["PYTHONPATH"] = str(path)
    return env


def _child(path: Path | None, stores: str, warm: int, timed: int) -> dict[str, float]:
    code = CHILD.format(root=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-c", code, stores, str(warm), str(timed)],
        env=_env(path),
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _instructions(path: Path | None, store: str) -> int:
    """Instructions per step under callgrind: (70 timed turns − 20) / 100 steps."""
    code = CHILD.format(root=str(ROOT))

    def count(timed: int) -> int:
        done = subprocess.run(
            [*CALLGRIND, sys.executable, "-c", code, store, "10", str(timed)],
            env=_env(path),
            capture_output=True,
            text=True,
            check=True,
        )
        found = re.search(r"Collected : (\d+)", done.stderr)
        if found is None:
            raise RuntimeError("callgrind printed no instruction count")
        return int(found.group(1))

    with ThreadPoolExecutor(2) as pool:
        short, long = pool.map(count, (20, 70))
    return (long - short) // 100


def run(baseline: Path, rounds: int, instructions: bool) -> dict[str, Any]:
    packages = linked_package(baseline, Path(tempfile.mkdtemp(prefix="actorloop-tree-")))
    trees: dict[str, Path | None] = {"baseline": packages, "this tree": None}
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    try:
        for round_number in range(rounds):
            order = list(trees) if round_number % 2 == 0 else list(reversed(trees))
            for name in order:
                samples[name].append(_child(trees[name], "memory:,sqlite:", 40, 300))
        counts: dict[str, dict[str, int]] = {}
        if instructions:
            for name, path in trees.items():
                counts[name] = {"memory": _instructions(path, "memory:")}
    finally:
        shutil.rmtree(packages)
    stores: dict[str, Any] = {}
    for store in ("memory", "sqlite"):
        before = [sample[store] for sample in samples["baseline"]]
        after = [sample[store] for sample in samples["this tree"]]
        ratios = [a / b for a, b in zip(after, before, strict=True)]
        stores[store] = {
            "baseline_us": round(statistics.median(before), 1),
            "this_tree_us": round(statistics.median(after), 1),
            "ratio": round(statistics.median(ratios), 3),
            "ratio_range": [round(min(ratios), 3), round(max(ratios), 3)],
        }
    head = subprocess.run(
        ["git", "-C", str(baseline), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return {
        "benchmark": "step",
        "command": f"python -m benchmarks.bench_step --baseline-tree <{head}> --rounds {rounds}"
        + (" --instructions" if instructions else ""),
        "baseline_commit": head,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "when": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S%z"),
        "rounds": rounds,
        "stores": stores,
        "instructions_per_step": counts,
    }


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# Step CPU: this tree against a baseline tree",
        "",
        f"`{report['command']}` — Python {report['python']} on {report['platform']} "
        f"(a 2-core machine shared with other jobs: read the ratios), {report['when']}.",
        "",
        "Workload: bench_floor's tool-call + text turn (2 model steps), one agent per store; "
        f"median CPU per step over 300 turns after a warm-up, in fresh subprocesses, "
        f"{report['rounds']} rounds with the trees interleaved. Baseline: "
        f"{report['baseline_commit']}.",
        "",
        "| store | baseline µs | this tree µs | this ÷ baseline (range) |",
        "|---|---:|---:|---:|",
    ]
    for store, row in report["stores"].items():
        low, high = row["ratio_range"]
        lines.append(
            f"| `{store}:` | {row['baseline_us']} | {row['this_tree_us']} | "
            f"**{row['ratio']}** ({low}–{high}) |"
        )
    counts = report["instructions_per_step"]
    if counts:
        before, after = counts["baseline"]["memory"], counts["this tree"]["memory"]
        lines += [
            "",
            "Instructions per `memory:` step (callgrind; the machine's load does not move them):",
            "",
            "| baseline | this tree | this ÷ baseline |",
            "|---:|---:|---:|",
            f"| {before:,} | {after:,} | **{after / before:.3f}** |",
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-tree", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--instructions", action="store_true")
    args = parser.parse_args()
    report = run(args.baseline_tree.resolve(), args.rounds, args.instructions)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "step.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / "step.md").write_text(markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
