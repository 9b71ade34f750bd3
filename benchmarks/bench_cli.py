"""CLI start-up benchmark: CPU of `actorloop --help` and `actorloop sessions list` against
the interpreter's own start (`python -c pass`) and `import trio`, measured in one run.

    python -m benchmarks.bench_cli [--quick] [--rounds R]

Writes benchmarks/results/cli.json and cli.md (`--quick`: cli-quick.*).

* Each figure is the median, over R fresh processes, of the child's user + system CPU
  (`resource.getrusage(RUSAGE_CHILDREN)` around one `subprocess.run`), so load from other
  processes on the machine changes it little.
* Bytecode caching is on (`PYTHONDONTWRITEBYTECODE` removed from the children's
  environment), as in a user's install; one warm-up run per command writes the caches.
* `sessions list` reads a SQLite store filled by `actorloop run` (8 sessions) in a
  temporary directory, and one with 200 more sessions (on `gpt-4o-mini`, a model
  genai-prices knows). With the `prices` extra installed, the cost column's rates come from
  the CLI's rates cache (runtime/cli/rates_cache.py, under a temporary `XDG_CACHE_HOME`),
  written by the warm-up run; the *cold* row removes that file before each run, so every
  run imports genai-prices (~0.2 s). The report says whether the extra was installed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from actorloop.runtime.cli.rates_cache import CACHE_FILE

RESULTS = Path(__file__).resolve().parent / "results"
CONSOLE = [sys.executable, "-m", "actorloop.runtime.console"]
TARGET_S = 0.3
"""The start-up budget for `--help` and `sessions list` (issue 40, item 13)."""


def _cpu(command: list[str], cwd: Path, env: dict[str, str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(command, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _fill(directory: Path, env: dict[str, str], extra_sessions: int) -> None:
    subprocess.run([*CONSOLE, "run"], cwd=directory, env=env, check=True, capture_output=True)
    if extra_sessions:
        script = (
            "import trio\n"
            "from actorloop.runtime import AgentOptions, Runtime\n"
            "from actorloop.runtime.testing import EchoProvider\n"
            "async def main():\n"
            "    store, provider = 'sqlite:actorloop.db', EchoProvider()\n"
            "    async with Runtime.open(store=store, provider=provider) as rt:\n"
            f"        for _ in range({extra_sessions}):\n"
            "            agent = await rt.spawn(AgentOptions(model='gpt-4o-mini'))\n"
            "            await agent.send('hi')\n"
            "trio.run(main)\n"
        )
        subprocess.run([sys.executable, "-c", script], cwd=directory, env=env, check=True)


def measure(rounds: int) -> dict[str, Any]:
    """Median CPU seconds per command, and each command's ratio to the interpreter floor."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    rows: dict[str, dict[str, float]] = {}
    with (
        tempfile.TemporaryDirectory() as small,
        tempfile.TemporaryDirectory() as large,
        tempfile.TemporaryDirectory() as cache_home,
    ):
        env["XDG_CACHE_HOME"] = cache_home
        rates_file = Path(cache_home) / CACHE_FILE
        _fill(Path(small), env, 0)
        _fill(Path(large), env, 200)
        commands = {
            "python -c pass (floor)": ([sys.executable, "-c", "pass"], Path(small)),
            "python -c 'import trio'": ([sys.executable, "-c", "import trio"], Path(small)),
            "actorloop --help": ([*CONSOLE, "--help"], Path(small)),
            "actorloop sessions list (8 sessions)": ([*CONSOLE, "sessions", "list"], Path(small)),
            "actorloop sessions list (208 sessions)": (
                [*CONSOLE, "sessions", "list"],
                Path(large),
            ),
        }
        for command, cwd in commands.values():
            _cpu(command, cwd, env)  # writes the bytecode caches
        cold = "actorloop sessions list (208 sessions, cold rates cache)"
        samples: dict[str, list[float]] = {name: [] for name in (*commands, cold)}
        for _ in range(rounds):
            for name, (command, cwd) in commands.items():
                samples[name].append(_cpu(command, cwd, env))
            rates_file.unlink(missing_ok=True)
            samples[cold].append(_cpu([*CONSOLE, "sessions", "list"], Path(large), env))
    floor = statistics.median(samples["python -c pass (floor)"])
    for name, values in samples.items():
        median = statistics.median(values)
        rows[name] = {
            "cpu_s_median": round(median, 4),
            "cpu_s_min": round(min(values), 4),
            "cpu_s_max": round(max(values), 4),
            "x_floor": round(median / floor, 1) if floor else float("nan"),
        }
    return {
        "rounds": rounds,
        "genai_prices_installed": importlib.util.find_spec("genai_prices") is not None,
        "target_cpu_s": TARGET_S,
        "results": rows,
        "environment": {"python": sys.version.split()[0], "machine": platform.machine()},
    }


def _markdown(report: dict[str, Any]) -> str:
    lines = [
        "# CLI start-up CPU (median of fresh processes, bytecode cached)",
        "",
        f"Rounds: {report['rounds']}; target for `--help` and `sessions list`: "
        f"≤ {report['target_cpu_s']} s CPU. genai-prices installed (the cost column): "
        f"{report['genai_prices_installed']}.",
        "",
        "| command | CPU s (median) | min | max | × interpreter start |",
        "|---|---|---|---|---|",
    ]
    for name, row in report["results"].items():
        lines.append(
            f"| {name} | {row['cpu_s_median']} | {row['cpu_s_min']} | {row['cpu_s_max']} "
            f"| {row['x_floor']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    """Measure and write results/cli.json and cli.md."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds, cli-quick.*")
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args()
    rounds = args.rounds or (3 if args.quick else 9)
    report = measure(rounds)
    stem = "cli-quick" if args.quick else "cli"
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / f"{stem}.md").write_text(_markdown(report))
    print(_markdown(report))


if __name__ == "__main__":
    main()
