"""The installed `actorloop` console script end to end, in real processes run from
directories outside the repository: the default workload and store, a built wheel, exit
codes and stderr as a shell sees them, and what `--help` loads. Everything else about the
commands is tested in-process (tests/cli/test_cli.py)."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import orjson

from actorloop.codecs.rows import event_crc

REPO = Path(__file__).resolve().parents[2]


def actorloop(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The console script `pip install` put beside this interpreter."""
    script = shutil.which("actorloop", path=str(Path(sys.executable).parent))
    assert script is not None, "the actorloop console script is not installed"
    return subprocess.run(
        [script, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **(env or {})},
    )


def test_run_without_arguments_runs_the_packaged_demo_anywhere(tmp_path: Path) -> None:
    """From a directory that is not the repository, with the default store."""
    assert not (tmp_path / "examples").exists()
    result = actorloop("run", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "actorloop run: demo (demo-" in result.stdout
    assert (tmp_path / "actorloop.db").exists()
    # the report's usage rows, with the cached fraction of the billed input
    [line] = [line for line in result.stdout.splitlines() if "input tokens" in line]
    assert "% cached:" in line and " read, " in line and " written)" in line
    assert any("output tokens" in line for line in result.stdout.splitlines())
    listed = actorloop("sessions", "list", "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert len(listed.stdout.splitlines()) == 8


def _copy_sources(target: Path) -> None:
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, target / name)
    for folder in ("runtime", "actors", "codecs"):
        shutil.copytree(
            REPO / folder, target / folder, ignore=shutil.ignore_patterns("__pycache__")
        )


def test_an_installed_wheel_runs_the_default_workload_from_any_directory(
    tmp_path: Path,
) -> None:
    """Built as `pip install` would (a wheel), installed apart from the source tree."""
    source, wheels, site, work = (tmp_path / d for d in ("src", "wheels", "site", "work"))
    for directory in (source, work):
        directory.mkdir()
    _copy_sources(source)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    built = subprocess.run(
        [*pip, "wheel", "--no-deps", "-w", str(wheels), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    [wheel] = wheels.glob("actorloop-*.whl")
    installed = subprocess.run(
        [*pip, "install", "--no-deps", "--target", str(site), str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr
    assert (site / "actorloop" / "runtime" / "cli" / "workloads" / "demo.toml").is_file()
    env = {**os.environ, "PYTHONPATH": str(site)}
    where = subprocess.run(
        [sys.executable, "-c", "import actorloop.runtime as r; print(r.__file__)"],
        cwd=work,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert where.stdout.startswith(str(site)), where.stdout + where.stderr
    result = subprocess.run(
        [sys.executable, "-m", "actorloop.runtime.console", "run", "--json"],
        cwd=work,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    report = orjson.loads(result.stdout)
    assert report["workload"] == "demo"
    assert report["verified_sessions"] == report["sessions"] == 8
    assert (work / "actorloop.db").exists()


def test_exit_codes_and_stderr_lines_as_a_shell_sees_them(tmp_path: Path) -> None:
    """Bad input exits 2 with one `actorloop: ...` line on stderr; a failed verify exits 1
    and names the event; nothing is written by a refused command."""
    bogus = actorloop("run", "tiny", "--store", "bogus:x", cwd=tmp_path)
    assert bogus.returncode == 2, bogus.stderr
    [line] = bogus.stderr.splitlines()
    assert line.startswith("actorloop: ") and "unknown store URL" in line
    assert list(tmp_path.iterdir()) == []
    store = f"sqlite:{tmp_path / 'alter.db'}"
    ran = actorloop("run", "tiny", "--store", store, "--json", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    worker = f"{orjson.loads(ran.stdout)['run_id']}-worker-1"
    with sqlite3.connect(tmp_path / "alter.db") as db:
        seq, body = db.execute(
            "SELECT seq, body FROM events WHERE session_id = ? AND type = 'user/message' "
            "ORDER BY seq LIMIT 1",
            (worker,),
        ).fetchone()
        tampered = bytes(body).replace(b"Step 1", b"Step 9")
        db.execute(
            "UPDATE events SET body = ?, crc = ? WHERE session_id = ? AND seq = ?",
            (tampered, event_crc(worker, seq, tampered), worker, seq),
        )
    verified = actorloop("sessions", "verify", worker, "--store", store, cwd=tmp_path)
    assert verified.returncode == 1, verified.stderr
    assert "verification failed" in verified.stderr and "request digest mismatch" in verified.stderr
    missing = actorloop(
        "sessions", "show", "no-such-session", cwd=tmp_path, env={"ACTORLOOP_STORE": store}
    )
    assert missing.returncode == 2, missing.stderr
    [line] = missing.stderr.splitlines()
    assert "not found" in line and f"--store {store}" in line


def test_the_pressure_demo_warns_about_nothing(tmp_path: Path) -> None:
    """The logging the console script sets up prints warnings on stderr: the demo gives it
    none to print."""
    result = actorloop("run", "pressure", "--store", f"sqlite:{tmp_path / 'p.db'}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "compactions" in result.stdout


LOADED = """
import sys
from actorloop.runtime.console import main
try:
    main(sys.argv[1:], prog_name="actorloop")
except SystemExit as exit:
    assert not exit.code, exit.code
print(" ".join(sorted(sys.modules)), file=sys.stderr)
"""


def loaded_modules(*args: str, cwd: Path) -> set[str]:
    """The modules a fresh interpreter has loaded once `actorloop ARGS` ran."""
    result = subprocess.run(
        [sys.executable, "-c", LOADED, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return set(result.stderr.split())


def test_help_loads_click_and_nothing_heavy(tmp_path: Path) -> None:
    """`--help` (of any group) imports no command's machinery, and `sessions list` none of
    the loop, the providers or HTTP: the imports are what a command costs to start."""
    heavy = ("trio", "rich", "httpx", "cattrs", "actorloop.codecs.converter", "actorloop.actors")
    for args in (["--help"], ["sessions", "--help"], ["workloads", "--help"]):
        loaded = loaded_modules(*args, cwd=tmp_path)
        assert "click" in loaded
        assert not [m for m in loaded if m.startswith(heavy)], args
    store = f"sqlite:{tmp_path / 'runs.db'}"
    assert actorloop("run", "tiny", "--store", store, cwd=tmp_path).returncode == 0
    listed = loaded_modules("sessions", "list", "--store", store, cwd=tmp_path)
    assert "actorloop.runtime.stores.sqlite" in listed
    unneeded = (
        "httpx",
        "actorloop.actors",
        "actorloop.runtime.providers",
        "actorloop.runtime.host",
    )
    # The cost column prices usage with genai-prices (the `prices` extra), whose package
    # imports its HTTP client (for its own price updates) with it: that one is allowed.
    allowed = ("httpx",) if "genai_prices" in listed else ()
    assert not [m for m in listed if m.startswith(unneeded) and not m.startswith(allowed)]


BUILT = """
import sys
from actorloop.runtime.console import main
import actorloop.codecs.converter as codec
try:
    main(sys.argv[1:], prog_name="actorloop")
except SystemExit as exit:
    assert not exit.code, exit.code
# The lazily built parts of the codec: the encoder with the checked decoder's hooks, and
# one generated decoder per event type looked up.
print(codec._hooks.cache_info().currsize, " ".join(sorted(codec.FAST_DECODERS)), file=sys.stderr)
"""


def test_sessions_list_builds_only_the_decoders_of_the_stored_types(tmp_path: Path) -> None:
    """Most of the codec's cost is building it: a listing of well-formed sessions generates
    the decoders of the event types it reads and builds neither the encoder nor the
    strict converter's per-type hooks (issue 40, item 13)."""
    db = tmp_path / "runs.db"
    assert actorloop("run", "tiny", "--store", f"sqlite:{db}", cwd=tmp_path).returncode == 0
    result = subprocess.run(
        [sys.executable, "-c", BUILT, "sessions", "list", "--store", f"sqlite:{db}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "turns" in result.stdout  # the table was printed
    hooks, *generated = result.stderr.split()
    with sqlite3.connect(db) as connection:
        stored = {row[0] for row in connection.execute("SELECT DISTINCT type FROM events")}
    assert hooks == "0"
    assert set(generated) == stored
