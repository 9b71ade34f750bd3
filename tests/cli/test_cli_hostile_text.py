"""Stored strings with terminal control sequences (screen clears, OSC 8 links, BEL, a bidi
override) come out of `sessions show`, `show --derived` and `list` inert and visible, and
out of their `--json` forms as exact JSON."""

from __future__ import annotations

from pathlib import Path

import orjson
import trio
from test_cli import actorloop

HOSTILE = "\x1b[2J \x1b]8;;http://x\x07link\x1b]8;;\x07 \x07 pay \u202etxt.exe"
VISIBLE = "\\u001b[2J \\u001b]8;;http://x\\u0007link\\u001b]8;;\\u0007 \\u0007 pay \\u202etxt.exe"
RAW = ("\x1b", "\x07", "\u202e")


def _write_hostile_session(url: str) -> None:
    from actorloop.runtime import AgentOptions, Runtime
    from actorloop.runtime.testing import ScriptedProvider, reply

    async def write() -> None:
        provider = ScriptedProvider([reply(f"answer {HOSTILE}")])
        async with Runtime.open(store=url, provider=provider) as rt:
            options = AgentOptions(model=f"m {HOSTILE}", labels={"team": HOSTILE})
            agent = await rt.spawn(options, session_id="hostile")
            await agent.send(f"hello {HOSTILE}")

    trio.run(write)


def _assert_inert(text: str) -> None:
    for raw in RAW:
        assert raw not in text, f"raw {raw!r} in the output"


def test_show_derived_and_list_render_control_characters_visibly(tmp_path: Path) -> None:
    url = f"sqlite:{tmp_path / 'hostile.db'}"
    _write_hostile_session(url)
    env = {"COLUMNS": "400"}

    shown = actorloop("sessions", "--store", url, "show", "hostile", cwd=tmp_path, env=env)
    assert shown.returncode == 0, shown.stderr
    _assert_inert(shown.stdout)
    assert f"user       hello {VISIBLE}" in shown.stdout
    assert f"answer {VISIBLE}" in shown.stdout
    assert f"m {VISIBLE}" in shown.stdout  # the model name, in the answer's usage note
    assert f"team={VISIBLE}" in shown.stdout

    derived = actorloop(
        "sessions", "--store", url, "show", "hostile", "--derived", cwd=tmp_path, env=env
    )
    assert derived.returncode == 0, derived.stderr
    _assert_inert(derived.stdout)
    assert f"hello {VISIBLE}" in derived.stdout and f"answer {VISIBLE}" in derived.stdout

    listed = actorloop("sessions", "--store", url, "list", cwd=tmp_path, env=env)
    assert listed.returncode == 0, listed.stderr
    _assert_inert(listed.stdout + listed.stderr)
    assert "hostile" in listed.stdout


def test_json_forms_keep_the_strings_exact(tmp_path: Path) -> None:
    url = f"sqlite:{tmp_path / 'hostile.db'}"
    _write_hostile_session(url)
    shown = actorloop("sessions", "--store", url, "show", "hostile", "--json", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    _assert_inert(shown.stdout.replace("\u202e", ""))  # JSON escapes controls, not U+202E
    document = orjson.loads(shown.stdout)
    assert document["session"]["labels"] == {"team": HOSTILE}
    texts = [block["text"] for m in document["conversation"] for block in m["content"]]
    assert f"hello {HOSTILE}" in texts and f"answer {HOSTILE}" in texts

    listed = actorloop("sessions", "--store", url, "list", "--json", cwd=tmp_path)
    (row,) = map(orjson.loads, listed.stdout.splitlines())
    assert row["labels"] == {"team": HOSTILE}
