"""Append, decode and resume benchmark (issue 15 items 1, 5, 6), against floors measured in
the same process and, when a baseline tree is given, against that tree in the same run.

Run from the repository root:

    python -m benchmarks.bench_decode [--quick] [--base-python PATH] [--rounds N]

Writes benchmarks/results/decode.json and decode.md (`--quick`: decode-quick.*).

What one *round* measures, each in a fresh subprocess of one interpreter (CPU time,
`time.process_time`, which counts the store's worker thread too):

* **append** — `Session.append(type, data, ...)` per event over loop-shaped turns
  (benchmarks/bench_session.py's workload: chunks, tool call and result, header snapshot),
  data built before the clock starts; best of 3 passes.
* **decode** — `decode_event(bytes)` per event over the same log's canonical bytes, and the
  floor `orjson.loads(bytes)` over the same bytes; GC paused as `timeit` does; best of 5.
* **resume** — `Runtime.resume(id)` of a stored `sqlite:` session of 100,000 events (the
  store's load with its checks and repair planning, the session's fold, the loop start),
  GC as configured by default; and the floor: `SELECT` of the same rows through sqlite3
  plus `orjson.loads` of every body, in the same process, with the cyclic collector paused
  as the resume pauses it.

Rounds alternate the baseline interpreter and this tree's (interleaved, so both see the
same machine load); the tables show the median of the rounds. `--base-python` is the
interpreter of a baseline worktree (its own editable install of actorloop); without one
only this tree is measured and the figures are its ratios to the floors. Both trees must
write the same bytes for the log: the SHA-256 of the encoded log is compared.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
SESSION_ID = "resume-bench"


# ---------------------------------------------------------------- worker (one interpreter)


def _cpu(action: Any) -> float:
    started = time.process_time()
    action()
    return time.process_time() - started


def _append_and_decode(events: int) -> dict[str, Any]:
    from actorloop.codecs.converter import decode_event, encode_event
    from actorloop.runtime.log.session import Session
    from benchmarks.bench_session import workload

    ops = workload(events)

    def appends() -> Session:
        session = Session.create("bench")
        append = session.append
        for event_type, data, op, seqs in ops:
            append(event_type, data, surface_op=op, source_event_seqs=seqs, time=1)
        return session

    session = appends()
    gc.collect()
    append_s = min(_cpu(appends) for _ in range(3))
    raw = [encode_event(event) for event in session.events]
    import orjson

    def timed(action: Any) -> float:
        gc.collect()
        gc.disable()
        try:
            return _cpu(action)
        finally:
            gc.enable()

    decoded = [decode_event(item) for item in raw]
    assert decoded == list(session.events)
    decode_s = min(timed(lambda: [decode_event(item) for item in raw]) for _ in range(5))
    orjson_s = min(timed(lambda: [orjson.loads(item) for item in raw]) for _ in range(5))
    count = len(raw)
    return {
        "events": count,
        "log_sha256": hashlib.sha256(b"\n".join(raw)).hexdigest(),
        "append_us_per_event": append_s / count * 1e6,
        "decode_us_per_event": decode_s / count * 1e6,
        "decode_events_per_s": count / decode_s,
        "orjson_us_per_event": orjson_s / count * 1e6,
        "decode_x_orjson": decode_s / orjson_s,
    }


def _header_shortcuts(reps: int) -> dict[str, Any]:
    """Item 6, old and new code path in the same process: the digest's header part and the
    per-step header equality, for a loop's header rebuilt each step from the same parts."""
    from actorloop.codecs.converter import canonical_bytes
    from actorloop.runtime.log.header_algebra import canonical, header_bytes, headers_equal
    from actorloop.runtime.log.request import header_part_bytes
    from actorloop.runtime.model.header import EpochHeader
    from benchmarks.bench_session import HEADER

    folded = canonical(HEADER)

    def step_header() -> EpochHeader:
        return EpochHeader(folded.config, folded.system, folded.tools, folded.message_prefix)

    headers = [step_header() for _ in range(reps)]

    def per_call(action: Any) -> float:
        return min(_cpu(lambda: [action(header) for header in headers]) for _ in range(5)) / reps

    def old_part(header: EpochHeader) -> bytes:
        return canonical_bytes(EpochHeader(header.config, header.system, header.tools, None))

    def old_equal(header: EpochHeader) -> bool:
        return header_bytes(folded) == header_bytes(header)

    assert all(old_part(h) == header_part_bytes(h) for h in headers[:10])
    assert all(old_equal(h) == headers_equal(folded, h) for h in headers[:10])
    return {
        "header_part_old_us": per_call(old_part) * 1e6,
        "header_part_new_us": per_call(header_part_bytes) * 1e6,
        "headers_equal_old_us": per_call(old_equal) * 1e6,
        "headers_equal_new_us": per_call(lambda header: headers_equal(folded, header)) * 1e6,
    }


def _setup_store(path: Path, events: int) -> None:
    import trio

    from actorloop.runtime.log.session import Session
    from actorloop.runtime.model.meta import SessionMeta
    from actorloop.runtime.stores import open_store
    from benchmarks.bench_session import HEADER, workload

    session = Session.create(SESSION_ID)
    for event_type, data, op, seqs in workload(events):
        session.append(event_type, data, surface_op=op, source_event_seqs=seqs, time=1)
    assert session.header() == HEADER

    async def write() -> None:
        store = open_store(f"sqlite:{path}")
        try:
            await store.create(SessionMeta(SESSION_ID))
            log = session.events
            for start in range(0, len(log), 5_000):
                await store.append(SESSION_ID, log[start : start + 5_000])
        finally:
            await store.close()

    trio.run(write)


def _resume(path: Path) -> dict[str, Any]:
    import orjson
    import trio

    from actorloop.runtime.host.runtime import Runtime
    from actorloop.runtime.testing import EchoProvider

    def floor() -> int:
        db = sqlite3.connect(path)
        try:
            rows = db.execute(
                "SELECT session_id, seq, type, time, body, crc FROM events "
                "WHERE session_id = ? ORDER BY seq",
                (SESSION_ID,),
            ).fetchall()
            bodies = [orjson.loads(row[4]) for row in rows]
        finally:
            db.close()
        return len(bodies)

    result: dict[str, Any] = {}

    async def resume() -> None:
        async with Runtime.open(store=f"sqlite:{path}", provider=EchoProvider()) as rt:
            wall = time.perf_counter()
            cpu = time.process_time()
            agent = await rt.resume(SESSION_ID)
            result["resume_cpu_s"] = time.process_time() - cpu
            result["resume_wall_s"] = time.perf_counter() - wall
            result["resumed_events"] = len(agent.session)

    gc.collect()
    gc.disable()  # as the resume pauses it: a collection over the parsed bodies is no floor
    try:
        floor_s = min(_cpu(floor) for _ in range(2))
    finally:
        gc.enable()
    gc.collect()
    trio.run(resume)
    result["floor_cpu_s"] = floor_s
    result["resume_x_floor"] = result["resume_cpu_s"] / floor_s
    return result


def worker(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(ROOT))
    if args.setup:
        _setup_store(Path(args.setup), args.resume_events)
        return
    out = _append_and_decode(args.events)
    out.update(_header_shortcuts(2_000))
    out.update(_resume(Path(args.store)))
    print(json.dumps(out))


# ---------------------------------------------------------------- driver


def _run(python: str, *extra: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [python, "-m", "benchmarks.bench_decode", "--worker", *extra],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{python} worker failed:\n{done.stderr[-4000:]}")
    lines = done.stdout.strip().splitlines()
    return json.loads(lines[-1]) if lines else {}


def _median(rounds: list[dict[str, Any]], key: str) -> float | None:
    values = [row[key] for row in rounds if key in row]
    return statistics.median(values) if values else None


FIGURES = (
    ("append_us_per_event", "append, µs/event (CPU)"),
    ("decode_us_per_event", "decode, µs/event (CPU, GC paused)"),
    ("decode_events_per_s", "decode, events/s"),
    ("orjson_us_per_event", "floor: orjson.loads, µs/event"),
    ("decode_x_orjson", "decode ÷ orjson floor"),
    ("resume_cpu_s", "resume, CPU s"),
    ("resume_wall_s", "resume, wall s"),
    ("floor_cpu_s", "floor: SQL + orjson, CPU s"),
    ("resume_x_floor", "resume ÷ floor"),
    ("header_part_old_us", "digest header part, encoded each step (old path), µs"),
    ("header_part_new_us", "digest header part, `header_part_bytes` now, µs"),
    ("headers_equal_old_us", "header equality by bytes (old path), µs"),
    ("headers_equal_new_us", "header equality, `headers_equal` now, µs"),
)


def drive(quick: bool, base_python: str | None, rounds: int) -> dict[str, Any]:
    events = 5_000 if quick else 20_000
    resume_events = 10_000 if quick else 100_000
    trees = {"this tree": sys.executable}
    if base_python:
        trees = {"baseline": base_python, **trees}
    with tempfile.TemporaryDirectory(prefix="bench-decode-") as tmp:
        stores = {}
        for label, python in trees.items():
            stores[label] = str(Path(tmp) / f"{label.replace(' ', '-')}.db")
            _run(python, "--setup", stores[label], "--resume-events", str(resume_events))
        samples: dict[str, list[dict[str, Any]]] = {label: [] for label in trees}
        for index in range(rounds):
            for label, python in trees.items():
                row = _run(python, "--store", stores[label], "--events", str(events))
                samples[label].append(row)
                print(
                    f"round {index + 1}/{rounds} {label}: append "
                    f"{row['append_us_per_event']:.2f} µs, decode "
                    f"{row['decode_events_per_s']:,.0f}/s, resume {row['resume_cpu_s']:.3f} s "
                    f"({row['resume_x_floor']:.2f}× floor)",
                    flush=True,
                )
    medians = {
        label: {key: _median(rows, key) for key, _ in FIGURES} for label, rows in samples.items()
    }
    hashes = {label: {row["log_sha256"] for row in rows} for label, rows in samples.items()}
    headline = headline_figures(medians, resume_events)
    report: dict[str, Any] = {
        "headlines": headline,
        "environment": {
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "trees": trees,
        },
        "setup": {
            "append_decode_events": samples["this tree"][0]["events"],
            "resume_events": samples["this tree"][0]["resumed_events"],
            "rounds": rounds,
        },
        "same_bytes_in_every_tree": len(set().union(*hashes.values())) == 1,
        "medians": medians,
        "rounds": samples,
    }
    if base_python:
        report["new_over_base"] = {
            key: medians["this tree"][key] / medians["baseline"][key]
            for key, _ in FIGURES
            if medians["this tree"][key] and medians["baseline"][key]
        }
    return report


def headline_figures(medians: dict[str, dict[str, float]], resume_events: int) -> dict[str, Any]:
    """The figures the benchmark summary shows (this tree's, and its gain on the baseline)."""
    mine = medians["this tree"]
    headline = {
        "append µs/event": round(mine["append_us_per_event"], 2),
        "decode events/s": round(mine["decode_events_per_s"]),
        "decode ÷ orjson.loads": round(mine["decode_x_orjson"], 2),
        f"resume CPU s ({resume_events:,}-event sqlite log)": round(mine["resume_cpu_s"], 3),
        "resume ÷ floor (SQL + orjson)": round(mine["resume_x_floor"], 2),
    }
    base = medians.get("baseline")
    if base is not None:
        headline["append × faster than baseline"] = round(
            base["append_us_per_event"] / mine["append_us_per_event"], 2
        )
        headline["decode × faster than baseline"] = round(
            mine["decode_events_per_s"] / base["decode_events_per_s"], 2
        )
        headline["resume × faster than baseline"] = round(
            base["resume_cpu_s"] / mine["resume_cpu_s"], 2
        )
    return headline


def to_markdown(report: dict[str, Any], command: str) -> str:
    env = report["environment"]
    setup = report["setup"]
    labels = list(report["medians"])
    lines = [
        "# Append, decode and resume: this tree against the floors"
        + (" and the baseline" if "new_over_base" in report else ""),
        "",
        f"`{command}` — Python {env['python']} on {env['platform']}, {env['cpus']} CPUs "
        f"(shared with other benchmarks: ratios are what carries over), {env['time']}.",
        "",
        f"Append and decode over {setup['append_decode_events']:,} loop-shaped events "
        f"(benchmarks/bench_session.py's workload); resume of a stored `sqlite:` session of "
        f"{setup['resume_events']:,} events through `Runtime.resume`. Each of "
        f"{setup['rounds']} rounds runs every tree in a fresh subprocess, trees interleaved; "
        "the table shows the median over rounds of CPU time (`time.process_time`, the "
        "store's thread included). Floors are measured in the same process: `orjson.loads` "
        "of the same bytes for decode; for resume a sqlite3 `SELECT` of the same rows plus "
        "`orjson.loads` of every body, the cyclic collector paused as the resume pauses it. "
        "Same log bytes in every tree: "
        f"{'yes' if report['same_bytes_in_every_tree'] else 'NO'}.",
        "",
        "| figure | " + " | ".join(labels) + (" | this ÷ baseline |" if len(labels) > 1 else " |"),
        "|---|" + "---:|" * (len(labels) + (len(labels) > 1)),
    ]
    for key, title in FIGURES:
        if any(report["medians"][label].get(key) is None for label in labels):
            continue
        cells = []
        for label in labels:
            value = report["medians"][label][key]
            cells.append(f"{value:,.0f}" if key == "decode_events_per_s" else f"{value:.3f}")
        if len(labels) > 1:
            cells.append(f"{report['new_over_base'][key]:.2f}")
        lines.append(f"| {title} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "The header rows (issue 15 item 6) time both code paths in the same process of each "
        "tree: the old path is the expression the code used before (encode the header part "
        "of a header rebuilt each step; compare two headers by their canonical bytes), the "
        "new one the function as it is in that tree (the baseline's functions are the old "
        "path, so its two rows agree).",
    ]
    lines += [
        "",
        "Trees: " + ", ".join(f"{label} = `{python}`" for label, python in env["trees"].items()),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--base-python", default=os.environ.get("ACTORLOOP_BASE_PYTHON"))
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--setup", help=argparse.SUPPRESS)
    parser.add_argument("--store", help=argparse.SUPPRESS)
    parser.add_argument("--events", type=int, default=20_000, help=argparse.SUPPRESS)
    parser.add_argument("--resume-events", type=int, default=100_000, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args)
        return {}
    rounds = args.rounds or (2 if args.quick else 5)
    report = drive(args.quick, args.base_python, rounds)
    stem = "decode-quick" if args.quick else "decode"
    command = "python -m benchmarks.bench_decode" + (" --quick" if args.quick else "")
    if args.base_python:
        command += f" --base-python {args.base_python}"
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / f"{stem}.md").write_text(to_markdown(report, command))
    print(to_markdown(report, command))
    return report


if __name__ == "__main__":
    main()
