"""The `actorloop` console script, run as a user would: installed entry point, real files."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from actorloop.codecs.rows import event_crc

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "examples" / "tiny.toml"


def actorloop(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    script = shutil.which("actorloop", path=str(Path(sys.executable).parent))
    command = [script] if script else [sys.executable, "-m", "actorloop.runtime.cli"]
    return subprocess.run(
        [*command, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def session_ids(store: str, cwd: Path) -> list[str]:
    listed = actorloop("sessions", "--store", store, "list", "--json", cwd=cwd)
    assert listed.returncode == 0, listed.stderr
    return [orjson.loads(line)["id"] for line in listed.stdout.splitlines()]


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict[str, object]]:
    cwd = tmp_path_factory.mktemp("cli")
    store = f"sqlite:{cwd / 'runs.db'}"
    result = actorloop("run", str(TINY), "--store", store, "--json", cwd=cwd)
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


def test_run_under_context_pressure_compacts_and_verifies(tmp_path: Path) -> None:
    pressure = REPO / "examples" / "pressure.toml"
    store = f"sqlite:{tmp_path / 'pressure.db'}"
    result = actorloop("run", str(pressure), "--store", store, "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = orjson.loads(result.stdout)
    assert report["compactions"] > 0
    assert report["verified_sessions"] == report["sessions"]
    assert report["turn_reasons"].get("error") is None


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


def _assert_bad_input(result: subprocess.CompletedProcess[str], fragment: str) -> None:
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
