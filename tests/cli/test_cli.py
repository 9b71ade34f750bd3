"""The `actorloop` command line, run in-process through click's test runner: real stores
and files, each command run from a directory of its own. tests/cli/test_cli_process.py runs
the installed console script as a user would."""

from __future__ import annotations

import contextlib
import logging
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
import trio
from attrs import frozen
from click.testing import CliRunner

from actorloop.codecs.rows import event_crc
from actorloop.runtime.console import main

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "runtime" / "cli" / "workloads" / "tiny.toml"


@frozen
class Ran:
    """What one command did: its exit code and what it printed."""

    returncode: int
    stdout: str
    stderr: str


def actorloop(*args: str, cwd: Path, env: dict[str, str] | None = None) -> Ran:
    """Run `actorloop ARGS` in-process from `cwd`; an exception other than an exit is not
    an exit code but a crash, and fails the test with its traceback."""
    with contextlib.chdir(cwd):
        result = CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)
    return Ran(result.exit_code, result.stdout, result.stderr)


def session_ids(store: str, cwd: Path) -> list[str]:
    listed = actorloop("sessions", "--store", store, "list", "--json", cwd=cwd)
    assert listed.returncode == 0, listed.stderr
    return [orjson.loads(line)["id"] for line in listed.stdout.splitlines()]


@pytest.fixture(scope="module")
def untouched(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict[str, object]]:
    """A run of `tiny` that tests only read (`ran` is forked and resumed by some)."""
    cwd = tmp_path_factory.mktemp("cli-read")
    store = f"sqlite:{cwd / 'runs.db'}"
    result = actorloop("run", "tiny", "--store", store, "--json", cwd=cwd)
    assert result.returncode == 0, result.stderr
    return cwd, store, orjson.loads(result.stdout)


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict[str, object]]:
    cwd = tmp_path_factory.mktemp("cli")
    store = f"sqlite:{cwd / 'runs.db'}"
    result = actorloop("run", "tiny", "--store", store, "--json", cwd=cwd)
    assert result.returncode == 0, result.stderr
    return cwd, store, orjson.loads(result.stdout)


def test_run_tiny_workload_completes_and_reports(ran: tuple[Path, str, dict[str, object]]) -> None:
    _cwd, _store, report = ran
    assert report["workload"] == "tiny"
    # coordinator + its delegate child + 2 workers + 1 fork
    assert report["sessions"] == 5
    assert report["verified_sessions"] == report["sessions"]
    assert report["invariant_checks_passed"] == report["requests"]
    reasons = report["turn_reasons"]
    assert isinstance(reasons, dict) and reasons.get("aborted") == 1
    assert report["step_overhead_p99_ms"] >= report["step_overhead_p50_ms"] > 0


def test_run_under_context_pressure_compacts_and_verifies(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = f"sqlite:{tmp_path / 'pressure.db'}"
    result = actorloop("run", "pressure", "--store", store, "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = orjson.loads(result.stdout)
    assert report["compactions"] > 0
    assert report["verified_sessions"] == report["sessions"]
    assert report["turn_reasons"].get("error") is None
    # a demo does not warn about itself: every compaction it runs succeeds
    assert report["failed_compactions"] == 0
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_sessions_verify_passes_on_every_session(ran: tuple[Path, str, dict[str, object]]) -> None:
    cwd, store, _report = ran
    ids = session_ids(store, cwd)
    assert len(ids) == 5
    for session_id in ids:
        verified = actorloop("sessions", "--store", store, "verify", session_id, cwd=cwd)
        assert verified.returncode == 0, verified.stderr
        assert verified.stdout.startswith(f"ok: {session_id}")


def test_show_events_fork_and_resume(ran: tuple[Path, str, dict[str, object]]) -> None:
    cwd, store, _report = ran
    coordinator = next(i for i in session_ids(store, cwd) if i.endswith("-coordinator"))
    shown = actorloop("sessions", "--store", store, "show", coordinator, cwd=cwd)
    assert shown.returncode == 0 and "session prefix: 1 message" in shown.stdout
    events = actorloop("sessions", "--store", store, "events", coordinator, cwd=cwd)
    lines = [orjson.loads(line) for line in events.stdout.splitlines()]
    assert [line["seq"] for line in lines] == list(range(len(lines)))
    forked = actorloop(
        "sessions", "--store", store, "fork", coordinator, "--child", "cli-fork", cwd=cwd
    )
    assert forked.returncode == 0, forked.stderr
    resumed = actorloop(
        "sessions", "--store", store, "resume", "cli-fork", "--message", "and now?", cwd=cwd
    )
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.startswith("turn 2 completed")
    again = actorloop("sessions", "--store", store, "verify", "cli-fork", cwd=cwd)
    assert again.returncode == 0, again.stderr


def test_verify_fails_and_names_the_altered_event(tmp_path: Path) -> None:
    store = f"sqlite:{tmp_path / 'alter.db'}"
    assert actorloop("run", str(TINY), "--store", store, cwd=tmp_path).returncode == 0
    worker = next(i for i in session_ids(store, tmp_path) if i.endswith("-worker-1"))
    with sqlite3.connect(tmp_path / "alter.db") as db:
        seq, body = db.execute(
            "SELECT seq, body FROM events WHERE session_id = ? AND type = 'user/message' "
            "ORDER BY seq LIMIT 1",
            (worker,),
        ).fetchone()
        tampered = bytes(body).replace(b"Step 1", b"Step 9")
        assert tampered != body
        # The row checksum is rewritten too (a forger, not damage: damage fails the load).
        db.execute(
            "UPDATE events SET body = ?, crc = ? WHERE session_id = ? AND seq = ?",
            (tampered, event_crc(worker, seq, tampered), worker, seq),
        )
    verified = actorloop("sessions", "--store", store, "verify", worker, cwd=tmp_path)
    assert verified.returncode == 1
    assert "verification failed" in verified.stderr
    assert "request digest mismatch" in verified.stderr
    assert "event " in verified.stderr


def _assert_bad_input(result: Ran, fragment: str) -> None:
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("actorloop: "), result.stderr
    assert fragment in result.stderr


def test_unknown_store_url_is_bad_input(tmp_path: Path) -> None:
    _assert_bad_input(
        actorloop("run", str(TINY), "--store", "bogus:x", cwd=tmp_path), "unknown store URL"
    )
    assert list(tmp_path.iterdir()) == []


def test_missing_session_and_missing_store_write_nothing(tmp_path: Path) -> None:
    _assert_bad_input(
        actorloop("sessions", "--store", f"sqlite:{tmp_path / 'none.db'}", "list", cwd=tmp_path),
        "no store at",
    )
    assert list(tmp_path.iterdir()) == []
    store = f"sqlite:{tmp_path / 'runs.db'}"
    assert actorloop("run", str(TINY), "--store", store, cwd=tmp_path).returncode == 0
    _assert_bad_input(
        actorloop("sessions", "--store", store, "show", "no-such-session", cwd=tmp_path),
        "not found",
    )


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('name = "x"', "required field missing"),
        ('name = 12\n[coordinator]\ntasks = ["a"]\n', "expected str @ $.name"),
        ('name = "x"\n[coordinator]\ntasks = "abc"\n', "$.coordinator.tasks"),
        ('name = "x"\n[coordinator]\ntasks = ["a"]\n[workers]\ncount = 1.9\n', "count"),
        ('name = "x"\nlatency_ms = inf\n[coordinator]\ntasks = ["a"]\n', "finite"),
        ('name = "x"\ncontext_window = -5\n[coordinator]\ntasks = ["a"]\n', "> 0"),
        ('name = "my demo"\n[coordinator]\ntasks = ["a"]\n', "letters, digits"),
        ('name = "x"\n[coordinator]\ntasks = ["a"]\nsurprise = 1\n', "surprise"),
        ("this is not = = toml", "not valid TOML"),
    ],
)
def test_bad_workload_file_is_bad_input(tmp_path: Path, text: str, fragment: str) -> None:
    workload = tmp_path / "bad.toml"
    workload.write_text(text)
    store = tmp_path / "never.db"
    _assert_bad_input(
        actorloop("run", str(workload), "--store", f"sqlite:{store}", cwd=tmp_path), fragment
    )
    assert not store.exists()


def test_corrupt_store_file_is_bad_input(tmp_path: Path) -> None:
    directory = tmp_path / "logs"
    store = f"jsonl:{directory}"
    assert actorloop("run", str(TINY), "--store", store, cwd=tmp_path).returncode == 0
    worker = next(i for i in session_ids(store, tmp_path) if i.endswith("-worker-0"))
    log = next(path for path in (directory / worker).iterdir() if path.suffix == ".jsonl")
    lines = log.read_bytes().split(b"\n")
    middle = len(lines) // 3
    lines[middle] = lines[middle].replace(b'"turn"', b'"tUrn"', 1)
    log.write_bytes(b"\n".join(lines))
    _assert_bad_input(
        actorloop("sessions", "--store", store, "verify", worker, cwd=tmp_path), "corrupt"
    )


def test_non_utf8_workload_is_bad_input(tmp_path: Path) -> None:
    workload = tmp_path / "binary.toml"
    workload.write_bytes(b"\xff\xfe")
    _assert_bad_input(actorloop("run", str(workload), cwd=tmp_path), "not UTF-8")


def test_store_locations_that_are_not_stores_are_bad_input(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    _assert_bad_input(
        actorloop("sessions", "--store", f"sqlite:{empty}", "list", cwd=tmp_path), "is empty"
    )
    assert empty.read_bytes() == b""
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a database at all" * 10)
    _assert_bad_input(
        actorloop("run", str(TINY), "--store", f"sqlite:{garbage}", cwd=tmp_path),
        "not an SQLite database",
    )
    _assert_bad_input(
        actorloop("sessions", "--store", f"jsonl:{garbage}", "list", cwd=tmp_path),
        "not a directory",
    )
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as db:
        db.execute("CREATE TABLE sessions (token TEXT)")
    before = foreign.read_bytes()
    _assert_bad_input(
        actorloop("sessions", "--store", f"sqlite:{foreign}", "list", cwd=tmp_path),
        "not an actorloop store",
    )
    assert foreign.read_bytes() == before
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "empty.db",
        "foreign.db",
        "garbage.db",
    ]


# ---------------------------------------------------------------------- the default workload


def test_the_run_report_usage_adds_up_to_the_sessions_usage(
    untouched: tuple[Path, str, dict[str, object]],
) -> None:
    cwd, store, report = untouched
    usage, per_session = report["usage"], report["session_usage"]
    assert isinstance(usage, dict) and isinstance(per_session, dict)
    total = usage["total"]
    assert total["billed_input"] == total["input"] + total["cache_read"] + total["cache_write"]
    for key in ("input", "output", "cache_read", "cache_write"):
        assert total[key] == sum(u["total"][key] for u in per_session.values())
    assert usage["model_calls"] + usage["compaction_calls"] <= report["requests"]
    assert report["cached_fraction"] == usage["cached_fraction"]
    # `sessions list --json` reports the same usage for each session
    listed = actorloop("sessions", "--store", store, "list", "--json", cwd=cwd)
    rows = {row["id"]: row for row in map(orjson.loads, listed.stdout.splitlines())}
    assert {sid: row["usage"] for sid, row in rows.items()} == per_session


def test_packaged_workloads_are_listed_and_printable(tmp_path: Path) -> None:
    listed = actorloop("workloads", "list", "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    rows = [orjson.loads(line) for line in listed.stdout.splitlines()]
    assert [row["name"] for row in rows] == ["demo", "pressure", "tiny"]
    assert [row["default"] for row in rows] == [True, False, False]
    assert all(row["description"] for row in rows)
    table = actorloop("workloads", "list", cwd=tmp_path)
    assert "demo (default)" in table.stdout
    shown = actorloop("workloads", "show", "pressure", cwd=tmp_path)
    assert shown.returncode == 0
    # the user-facing copy in examples/ is the packaged file itself, not a second copy
    assert (REPO / "examples" / "pressure.toml").resolve() == (
        REPO / "runtime" / "cli" / "workloads" / "pressure.toml"
    )
    assert shown.stdout == (REPO / "examples" / "pressure.toml").read_text()
    mine = tmp_path / "mine.toml"
    mine.write_text(shown.stdout.replace('name = "pressure"', 'name = "mine"'))
    result = actorloop(
        "run", str(mine), "--store", f"sqlite:{tmp_path / 'm.db'}", "--json", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert orjson.loads(result.stdout)["workload"] == "mine"
    _assert_bad_input(actorloop("workloads", "show", "nope", cwd=tmp_path), "no packaged workload")
    _assert_bad_input(actorloop("run", "nope", cwd=tmp_path), "no workload file 'nope'")
    assert not (tmp_path / "actorloop.db").exists()


# ---------------------------------------------------------------------- sessions list


def listed_rows(store: str, cwd: Path) -> dict[str, dict[str, object]]:
    listed = actorloop("sessions", "--store", store, "list", "--json", cwd=cwd)
    assert listed.returncode == 0, listed.stderr
    return {row["id"]: row for row in map(orjson.loads, listed.stdout.splitlines())}


def test_list_json_says_kind_parent_status_turns_and_usage(
    untouched: tuple[Path, str, dict[str, object]],
) -> None:
    cwd, store, _report = untouched
    rows = listed_rows(store, cwd)
    by_role = {sid.split("-", 2)[2]: row for sid, row in rows.items()}
    coordinator = by_role["coordinator"]
    [child] = [row for role, row in by_role.items() if role.startswith("coordinator.")]
    assert coordinator["kind"] == "root" and coordinator["parent"] is None
    assert child["kind"] == "subagent" and child["parent"] == coordinator["id"]
    assert child["parent_call"] and str(child["id"]).endswith(str(child["parent_call"]))
    fork = by_role["worker-0-fork"]
    assert fork["kind"] == "fork" and fork["parent"] == by_role["worker-0"]["id"]
    assert fork["fork_seq"] == fork["seed_length"] - 1  # type: ignore[operator]
    assert by_role["worker-0"]["status"] == "aborted"  # its last turn was cancelled
    assert by_role["worker-1"]["status"] == "completed"
    assert by_role["worker-1"]["turns"] == 2  # its turn, then the resumed one
    for row in rows.values():
        assert row["damaged"] is False and row["open_turn"] is None
        assert str(row["created"]).endswith("Z") and "T" in str(row["created"])
        usage = row["usage"]
        assert isinstance(usage, dict) and usage["model_calls"] >= 1
    # the fork counts only what it used itself, not its parent's seed
    assert fork["usage"]["model_calls"] == 1  # type: ignore[index]
    ids = actorloop("sessions", "--store", store, "list", "--ids", cwd=cwd)
    assert ids.stdout.splitlines() == list(rows)


def terminal(columns: str) -> dict[str, str]:
    """The environment of a terminal `columns` wide (rich then fits its output to it)."""
    return {"COLUMNS": columns, "TTY_COMPATIBLE": "1", "NO_COLOR": "1"}


def unstyled(text: str) -> str:
    """`text` without the terminal's escape sequences (bold headers)."""
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def test_the_list_table_fits_the_terminal_and_its_ids_copy_whole(
    untouched: tuple[Path, str, dict[str, object]],
) -> None:
    cwd, store, _report = untouched
    whole = list(listed_rows(store, cwd))
    for columns in ("200", "80", "60"):
        table = actorloop("sessions", "--store", store, "list", cwd=cwd, env=terminal(columns))
        assert table.returncode == 0, table.stderr
        lines = unstyled(table.stdout).splitlines()
        assert lines[-1] == "5 sessions"
        rows = [line for line in lines if line.strip().startswith("tiny-")]
        assert len(rows) == len(whole)  # one line per session: nothing wrapped
        assert all(len(line) <= int(columns) for line in lines)
        header = next(line for line in lines if line.strip().startswith("id "))
        assert "parent" in header  # ids and parents are never squeezed
        if columns != "60":
            for column in ("status", "turns", "tokens in/out", "cached"):
                assert column in header
        shown = [row.split()[0] for row in rows]
        if columns == "200":
            assert shown == whole and "created" in header and "kind" in header
        else:
            assert any("…" in cell for cell in shown)
        for cell, session_id in zip(shown, whole, strict=True):
            # what the table shows is what a user copies: it names exactly that session
            show = actorloop("sessions", "--store", store, "show", cell, cwd=cwd)
            assert show.returncode == 0, show.stderr
            assert show.stdout.splitlines()[0] == f"session {session_id}"
    wide = actorloop("sessions", "--store", store, "list", cwd=cwd, env=terminal("200"))
    child_line = next(line for line in unstyled(wide.stdout).splitlines() if "subagent" in line)
    assert child_line.rstrip().endswith(next(i for i in whole if i.endswith("-coordinator")))
    assert "s ago" in child_line or "min ago" in child_line


def test_shortened_and_partial_ids_resolve_or_say_why_not(
    untouched: tuple[Path, str, dict[str, object]],
) -> None:
    cwd, store, _report = untouched
    whole = list(listed_rows(store, cwd))
    coordinator = next(i for i in whole if i.endswith("-coordinator"))
    prefix = coordinator[: coordinator.index("-coordinator")]
    fork = f"{prefix}-worker-0-fork"
    by_prefix = actorloop("sessions", "--store", store, "verify", f"{prefix}-worker-0-f", cwd=cwd)
    assert by_prefix.returncode == 0 and by_prefix.stdout.startswith(f"ok: {fork}:")
    # a prefix of two ids names neither, even when it is most of one of them
    _assert_bad_input(
        actorloop("sessions", "--store", store, "show", f"{prefix}-coord", cwd=cwd),
        "matches 2 sessions",
    )
    dots = actorloop("sessions", "--store", store, "verify", f"{prefix[:6]}...dinator", cwd=cwd)
    assert dots.returncode == 0 and dots.stdout.startswith(f"ok: {coordinator}:")
    _assert_bad_input(
        actorloop("sessions", "--store", store, "show", "tiny-", cwd=cwd), "matches 5 sessions"
    )
    _assert_bad_input(
        actorloop("sessions", "--store", store, "show", "zzz…nothing", cwd=cwd), "not found"
    )


def test_a_damaged_session_is_listed_as_such_and_the_others_still_are(tmp_path: Path) -> None:
    directory = tmp_path / "logs"
    store = f"jsonl:{directory}"
    assert actorloop("run", "tiny", "--store", store, cwd=tmp_path).returncode == 0
    rows = listed_rows(store, tmp_path)
    worker = next(i for i in rows if i.endswith("-worker-1"))
    log = next(path for path in (directory / worker).iterdir() if path.suffix == ".jsonl")
    lines = log.read_bytes().split(b"\n")
    middle = next(i for i in range(len(lines) // 3, len(lines)) if b'"turn"' in lines[i])
    lines[middle] = lines[middle].replace(b'"turn"', b'"tUrn"', 1)
    log.write_bytes(b"\n".join(lines))
    after = listed_rows(store, tmp_path)
    assert list(after) == list(rows)
    assert after[worker]["damaged"] is True and after[worker]["status"] == "damaged"
    assert "corrupt" in str(after[worker]["problem"]).lower()
    assert all(row["damaged"] is False for sid, row in after.items() if sid != worker)
    table = actorloop("sessions", "--store", store, "list", cwd=tmp_path)
    assert table.returncode == 0
    assert table.stdout.splitlines()[-1] == "5 sessions (1 damaged)"
    assert f"damaged: {worker}:" in table.stderr


# ---------------------------------------------------------------------- show and verify


def test_show_renders_calls_results_prefix_and_headers(
    untouched: tuple[Path, str, dict[str, object]],
) -> None:
    cwd, store, _report = untouched
    ids = list(listed_rows(store, cwd))
    coordinator = next(i for i in ids if i.endswith("-coordinator"))
    text = actorloop("sessions", "--store", store, "show", coordinator, cwd=cwd).stdout
    assert "session prefix: 1 message\n" in text
    assert (
        "  user       Available skills:\n             - search: Find documents by keyword." in text
    )
    assert "turn 1 · message from user" in text
    assert "user       Split the work. call:delegate Report the weather." in text
    assert "header     initial snapshot: model sim-1 · system" in text
    assert "2 tools: delegate, lookup · session prefix 1 message" in text
    assert "→ delegate [" in text and '] {"task":"Report the weather."}' in text
    assert "tool       ← delegate [" in text
    assert "[step 1 · sim-1 · " in text and " in (" in text and " out]" in text
    assert "turn 1 completed in " in text
    assert "kind     root" in text and "usage    " in text and "1 turn ·" in text
    for placeholder in ("ToolCall", "ToolResult", "message(s)", "1 turns", " a assistant"):
        assert placeholder not in text
    worker = next(i for i in ids if i.endswith("-worker-1"))
    resumed = actorloop("sessions", "--store", store, "show", worker, cwd=cwd).stdout
    assert "header     resume snapshot: model sim-1" in resumed
    assert "→ lookup [" in resumed and "← lookup [" in resumed
    assert ": lookup(Report your status.): no surprises found" in resumed
    fork = next(i for i in ids if i.endswith("-fork"))
    forked = actorloop("sessions", "--store", store, "show", fork, cwd=cwd).stdout
    assert f"kind     fork of {fork.removesuffix('-fork')} at seq " in forked
    assert f"── forked from {fork.removesuffix('-fork')} at seq " in forked
    derived = actorloop("sessions", "--store", store, "show", coordinator, "--derived", cwd=cwd)
    assert "the conversation the next request is built from" in derived.stdout
    assert "header " not in derived.stdout
    as_json = orjson.loads(
        actorloop("sessions", "--store", store, "show", coordinator, "--json", cwd=cwd).stdout
    )
    assert as_json["session"]["id"] == coordinator
    assert as_json["header"]["config"]["model"] == "sim-1"
    assert as_json["conversation"][0]["role"] == "user"


def test_verify_counts_in_words(untouched: tuple[Path, str, dict[str, object]]) -> None:
    cwd, store, _report = untouched
    rows = listed_rows(store, cwd)
    child = next(sid for sid, row in rows.items() if row["kind"] == "subagent")
    verified = actorloop("sessions", "--store", store, "verify", child, cwd=cwd)
    assert verified.returncode == 0, verified.stderr
    events = rows[child]["events"]
    assert verified.stdout == (
        f"ok: {child}: {events} events, 1 turn, 1 request rebuilt and matched its digest\n"
    )
    as_json = orjson.loads(
        actorloop("sessions", "--store", store, "verify", child, "--json", cwd=cwd).stdout
    )
    assert as_json == {
        "ok": True,
        "id": child,
        "events": events,
        "turns": 1,
        "requests_checked": 1,
        "requests_without_digest": 0,
        "open_turn": None,
    }


LIVE_WRITER = """
import sys, trio
from actorloop.runtime import AgentOptions, Runtime
from actorloop.runtime.testing import HANG, ScriptedProvider, reply

async def main():
    provider = ScriptedProvider([reply("first answer"), HANG])
    async with Runtime.open(store=sys.argv[1], provider=provider) as rt:
        agent = await rt.spawn(AgentOptions(model="m"), session_id="live-one")
        await agent.send("hello")
        def on_event(_agent, event):
            if event.type == "assistant/chunk":  # turn 2 streams; all before it is durable
                print("streaming", flush=True)
        agent.on("session/event", on_event)
        await agent.send("wait for me")

trio.run(main)
"""


def test_a_live_session_is_read_and_verified_without_touching_it(tmp_path: Path) -> None:
    store = f"sqlite:{tmp_path / 'live.db'}"
    writer = subprocess.Popen(
        [sys.executable, "-c", LIVE_WRITER, store],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None
        assert writer.stdout.readline() == "streaming\n", writer.stderr
        before = actorloop("sessions", "--store", store, "events", "live-one", cwd=tmp_path)
        verified = actorloop("sessions", "--store", store, "verify", "live-one", cwd=tmp_path)
        assert verified.returncode == 0, verified.stderr
        first, note = verified.stdout.splitlines()
        assert first.startswith("ok: live-one: ") and ", 2 turns, 1 request rebuilt" in first
        assert note.startswith("note: turn 2 is still open (its writer is live")
        row = listed_rows(store, tmp_path)["live-one"]
        assert row["status"] == "open" and row["open_turn"] == 2
        shown = actorloop("sessions", "--store", store, "show", "live-one", cwd=tmp_path)
        assert "turn 2 is still open" in shown.stdout
        after = actorloop("sessions", "--store", store, "events", "live-one", cwd=tmp_path)
        assert after.stdout == before.stdout  # nothing was repaired or appended
        assert writer.poll() is None  # the writer still holds its session
    finally:
        writer.kill()
        writer.wait(timeout=30)


def test_resume_reports_the_turns_usage(ran: tuple[Path, str, dict[str, object]]) -> None:
    cwd, store, _report = ran
    worker = next(i for i in listed_rows(store, cwd) if i.endswith("-worker-1"))
    forked = actorloop(
        "sessions", "--store", store, "fork", worker, "--child", "usage-fork", cwd=cwd
    )
    assert forked.returncode == 0, forked.stderr
    assert forked.stdout.startswith(f"forked {worker} at seq ")
    resumed = actorloop("sessions", "--store", store, "resume", "usage-fork", cwd=cwd)
    assert resumed.returncode == 0, resumed.stderr
    answer, usage = resumed.stdout.splitlines()
    assert answer.startswith("turn 3 completed: ")
    assert usage.startswith("usage: ") and " input tokens (" in usage and "1 model call" in usage


def test_resume_keeps_the_stored_system_prompt_and_config(
    ran: tuple[Path, str, dict[str, object]],
) -> None:
    cwd, store, _report = ran
    worker = next(i for i in listed_rows(store, cwd) if i.endswith("-worker-0"))

    def headers() -> list[dict[str, object]]:
        events = actorloop("sessions", "--store", store, "events", worker, cwd=cwd)
        lines = [orjson.loads(line) for line in events.stdout.splitlines()]
        return [e["data"]["header"] for e in lines if e["type"] == "request/header"]

    before = headers()
    resumed = actorloop("sessions", "--store", store, "resume", worker, cwd=cwd)
    assert resumed.returncode == 0, resumed.stderr
    after = headers()
    assert len(after) == len(before) + 1
    assert after[-1]["system"] == before[-1]["system"] and after[-1]["system"]
    assert after[-1]["config"] == before[-1]["config"]


def test_show_renders_deltas_steering_context_and_blocked_prompts(tmp_path: Path) -> None:
    from actorloop.runtime import AgentOptions, Runtime, Tool
    from actorloop.runtime.model.hook_values import Block, PromptSubmit
    from actorloop.runtime.testing import ScriptedProvider, reply, tool_call

    sections: list[str] = []

    async def assemble(agent: object, value: tuple[str, ...], next: object) -> object:
        return (*await next(), *sections)  # type: ignore[operator]

    async def gate(agent: object, value: PromptSubmit, next: object) -> object:
        if "forbidden" in "".join(getattr(block, "text", "") for block in value.content):
            return Block("no forbidden words")
        return await next()  # type: ignore[operator]

    async def nudge(args: dict[str, object], ctx: object) -> str:
        ctx.agent.steer("also mention the weather")  # type: ignore[attr-defined]
        return "nudged"

    provider = ScriptedProvider(
        [tool_call("c1", "nudge", {"how": "gently"}), reply("one"), reply("two")]
    )
    url = f"sqlite:{tmp_path / 'misc.db'}"

    async def write() -> None:
        async with Runtime.open(store=url, provider=provider) as rt:
            rt.on("system-prompt/assemble", assemble)
            rt.on("prompt/submit", gate)
            tool = Tool("nudge", "Steer the turn.", {"type": "object"}, nudge)
            agent = await rt.spawn(
                AgentOptions(model="m", system="Be brief.", tools=(tool,)), session_id="misc"
            )
            await agent.send("hello")
            agent.inject("a note from a plugin", source="notes")
            await agent.wait_idle()
            assert (await agent.send("forbidden words")).reason == "rejected"
            sections.append("Today is Monday.")
            assert (await agent.send("again")).reason == "completed"

    trio.run(write)  # the CLI runs trio itself: the log is written first
    shown = actorloop("sessions", "--store", url, "show", "misc", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert '→ nudge [c1] {"how":"gently"}' in text
    assert "tool       ← nudge [c1]: nudged" in text
    assert "steering   also mention the weather" in text
    assert "turn 2 · injection from plugin notes" in text
    assert "context    [from plugin notes] a note from a plugin" in text
    assert "blocked    (no forbidden words) forbidden words" in text
    assert "turn 3 rejected (no forbidden words)" in text
    # the section comes after a blank line: two lines inserted after the one kept
    assert "header     delta: system patched (kept 1 + 0 lines, 2 lines inserted)" in text
    assert "[step 1 · m · 0 in, 1 out]" in text  # no cached share of nothing
    assert "no system prompt" not in text and 'system "Be brief."' in text


# ---------------------------------------------------------------------- conventions


@pytest.mark.parametrize("blank", ["", "  ", "\t"])
def test_an_empty_or_blank_session_id_is_refused_by_every_command(
    untouched: tuple[Path, str, dict[str, object]], blank: str
) -> None:
    cwd, store, _report = untouched
    before = listed_rows(store, cwd)
    coordinator = next(i for i in before if i.endswith("-coordinator"))
    for command in (["show"], ["events"], ["verify"], ["fork"], ["resume"]):
        _assert_bad_input(
            actorloop("sessions", "--store", store, *command, blank, cwd=cwd),
            "SESSION_ID is empty or blank",
        )
    _assert_bad_input(
        actorloop("sessions", "--store", store, "fork", coordinator, "--child", blank, cwd=cwd),
        "--child is empty or blank",
    )
    assert listed_rows(store, cwd) == before  # nothing was forked or resumed


def test_store_is_taken_after_the_subcommand_and_from_the_environment(
    untouched: tuple[Path, str, dict[str, object]], tmp_path: Path
) -> None:
    cwd, store, _report = untouched
    ids = actorloop("sessions", "--store", store, "list", "--ids", cwd=cwd).stdout
    after = actorloop("sessions", "list", "--ids", "--store", store, cwd=tmp_path)
    assert after.returncode == 0 and after.stdout == ids
    from_env = actorloop("sessions", "list", "--ids", cwd=tmp_path, env={"ACTORLOOP_STORE": store})
    assert from_env.returncode == 0 and from_env.stdout == ids
    # the option after the subcommand wins over the one before it, which wins over the env
    elsewhere = f"sqlite:{tmp_path / 'none.db'}"
    wins = actorloop("sessions", "--store", elsewhere, "list", "--ids", "--store", store, cwd=cwd)
    assert wins.stdout == ids
    before = actorloop(
        "sessions", "--store", store, "list", "--ids", cwd=cwd, env={"ACTORLOOP_STORE": elsewhere}
    )
    assert before.stdout == ids
    first = ids.splitlines()[0]
    for args in (["show", first, "--store", store], ["verify", first, "--store", store]):
        assert actorloop("sessions", *args, cwd=tmp_path).returncode == 0, args
    # the hints name the store the user gave, so the command they suggest works as printed
    missing = actorloop("sessions", "show", "no-such", "--store", store, cwd=tmp_path)
    _assert_bad_input(missing, f"`actorloop sessions list --store {store}`")
    ambiguous = actorloop("sessions", "show", "tiny-", "--store", store, cwd=tmp_path)
    _assert_bad_input(ambiguous, f"`actorloop sessions list --store {store} --ids`")
    assert not (tmp_path / "actorloop.db").exists()


def test_a_run_on_a_memory_store_suggests_no_listing(tmp_path: Path) -> None:
    on_memory = actorloop("run", "tiny", "--store", "memory:", cwd=tmp_path)
    assert on_memory.returncode == 0, on_memory.stderr
    assert "sessions list" not in on_memory.stdout
    store = f"sqlite:{tmp_path / 'kept.db'}"
    kept = actorloop("run", "tiny", "--store", store, cwd=tmp_path)
    assert kept.stdout.splitlines()[-1] == f"per session: actorloop sessions list --store {store}"


def test_the_workloads_list_says_the_turns_a_run_reports(
    untouched: tuple[Path, str, dict[str, object]], tmp_path: Path
) -> None:
    _cwd, _store, report = untouched
    listed = actorloop("workloads", "list", "--json", cwd=tmp_path)
    rows = {row["name"]: row for row in map(orjson.loads, listed.stdout.splitlines())}
    assert rows["tiny"]["planned_turns"] == report["turns"]
    demo = actorloop(
        "run", "demo", "--store", f"sqlite:{tmp_path / 'd.db'}", "--json", cwd=tmp_path
    )
    assert rows["demo"]["planned_turns"] == orjson.loads(demo.stdout)["turns"]


README = (REPO / "README.md").read_text(encoding="utf-8")


def test_a_piped_list_keeps_ids_whole_and_every_column_the_readme_names(
    untouched: tuple[Path, str, dict[str, object]],
) -> None:
    cwd, store, _report = untouched
    whole = list(listed_rows(store, cwd))
    table = actorloop("sessions", "--store", store, "list", cwd=cwd, env={"COLUMNS": "80"})
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    header = next(line for line in lines if line.strip().startswith("id "))
    columns = re.split(r"\s{2,}", header.strip())
    assert columns == [
        "id",
        "kind",
        "status",
        "turns",
        "tokens in/out",
        "cached",
        "cost",
        "created",
        "parent",
    ]
    rows = [line.split()[0] for line in lines if line.strip().startswith("tiny-")]
    assert rows == whole  # whole ids, one line each: what a script reads
    # the README lists the same columns, in the same order, under the same names
    bullet = README.split("**`sessions list`**", 1)[1].split("\n* ", 1)[0]
    named = bullet.split("in the columns ", 1)[1].split(". ", 1)[0]
    assert re.findall(r"`([^`]+)`", re.sub(r"\([^()]*\)", "", named)) == columns


def test_resume_with_the_workload_gets_its_tools_and_prefix_back(
    ran: tuple[Path, str, dict[str, object]],
) -> None:
    cwd, store, _report = ran
    worker = next(i for i in listed_rows(store, cwd) if i.endswith("-worker-1"))

    def last_header() -> dict[str, Any]:
        events = actorloop("sessions", "--store", store, "events", worker, cwd=cwd)
        lines = [orjson.loads(line) for line in events.stdout.splitlines()]
        headers = [e["data"]["header"] for e in lines if e["type"] == "request/header"]
        return headers[-1]

    stored = last_header()
    assert [tool["name"] for tool in stored["tools"]] == ["lookup"]
    assert len(stored["message_prefix"]) == 1
    bare = actorloop("sessions", "--store", store, "resume", worker, cwd=cwd)
    assert bare.returncode == 0, bare.stderr
    [warning] = bare.stderr.splitlines()
    assert warning.startswith("actorloop: warning: the stored session had tools lookup and ")
    assert "a session prefix (1 message)" in warning and "--workload NAME" in warning
    lacking = last_header()
    assert "tools" not in lacking and "message_prefix" not in lacking  # what the warning said
    again = actorloop("sessions", "--store", store, "resume", worker, "--workload", "tiny", cwd=cwd)
    assert again.returncode == 0, again.stderr
    assert again.stderr == ""  # nothing lacking, nothing to warn about
    restored = last_header()
    assert restored["tools"] == stored["tools"]
    assert restored["message_prefix"] == stored["message_prefix"]
    assert restored["system"] == stored["system"]
    help_text = actorloop("sessions", "resume", "--help", cwd=cwd).stdout
    assert "--workload NAME" in help_text and "cache goes cold" in " ".join(help_text.split())
    _assert_bad_input(
        actorloop("sessions", "--store", store, "resume", worker, "--workload", "nope", cwd=cwd),
        "no workload file 'nope'",
    )


def test_a_fork_inside_a_closed_turn_says_so_and_names_its_code_once(
    untouched: tuple[Path, str, dict[str, object]],
) -> None:
    cwd, store, _report = untouched
    coordinator = next(i for i in listed_rows(store, cwd) if i.endswith("-coordinator"))
    events = actorloop("sessions", "--store", store, "events", coordinator, cwd=cwd)
    inside = next(
        e["seq"]
        for e in map(orjson.loads, events.stdout.splitlines())
        if e["type"] == "user/message"
    )
    refused = actorloop(
        "sessions", "--store", store, "fork", coordinator, "--at", str(inside), cwd=cwd
    )
    _assert_bad_input(refused, "SessionForkError (OPEN_TURN): fork boundary ")
    assert refused.stderr.count("OPEN_TURN") == 1
    assert "got user/message: a fork seeds whole turns" in refused.stderr
    nowhere = actorloop("sessions", "--store", store, "fork", coordinator, "--at", "99999", cwd=cwd)
    _assert_bad_input(nowhere, "SessionForkError (INVALID_BOUNDARY): fork boundary 99999 is not")


def test_a_damaged_sqlite_session_is_one_line_for_every_read(tmp_path: Path) -> None:
    store = f"sqlite:{tmp_path / 'damaged.db'}"
    ran = actorloop("run", "tiny", "--store", store, "--json", cwd=tmp_path)
    worker = f"{orjson.loads(ran.stdout)['run_id']}-worker-1"
    with sqlite3.connect(tmp_path / "damaged.db") as db:
        # damage, not forgery: the row checksum no longer matches the bytes
        db.execute(
            "UPDATE events SET body = CAST(replace(CAST(body AS TEXT), 'Step 1', 'Step 9') "
            "AS BLOB) WHERE session_id = ? AND type = 'user/message'",
            (worker,),
        )
    for command in ("verify", "show", "events"):
        _assert_bad_input(
            actorloop("sessions", command, worker, "--store", store, cwd=tmp_path),
            "SessionCorruptError: corrupt session log at sqlite ",
        )
