"""The CLI's rates cache: a listing after the first prices sessions without importing
genai-prices, with the same dollars; a stale or unreadable cache file is rebuilt."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import trio

from actorloop.runtime import AgentOptions, Runtime
from actorloop.runtime.cli.rates_cache import CACHE_FILE
from actorloop.runtime.testing import ScriptedProvider, reply

LISTING = """
import sys
from actorloop.runtime.console import main
try:
    main(sys.argv[1:], prog_name="actorloop")
except SystemExit as exit:
    assert not exit.code, exit.code
print("genai_prices" in sys.modules, file=sys.stderr)
"""


def _fill(store: str) -> None:
    async def go() -> None:
        provider = ScriptedProvider([reply("a"), reply("b")])
        async with Runtime.open(store=store, provider=provider) as rt:
            for model in ("gpt-4o-mini", "not-a-priced-model"):
                await (await rt.spawn(AgentOptions(model=model))).send("hi")

    trio.run(go)


def _list(store: str, cache_home: Path, cwd: Path) -> tuple[list[float | None], bool]:
    """The listed dollars per session (in listing order), and whether genai-prices loaded."""
    result = subprocess.run(
        [sys.executable, "-c", LISTING, "sessions", "list", "--json", "--store", store],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"XDG_CACHE_HOME": str(cache_home), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    rows = [orjson.loads(line) for line in result.stdout.splitlines()]
    return [row["spend"]["usd"] for row in rows], result.stderr.split()[-1] == "True"


def test_the_second_listing_prices_from_the_cache_without_genai_prices(tmp_path: Path) -> None:
    store = f"sqlite:{tmp_path / 'priced.db'}"
    _fill(store)
    cache_home = tmp_path / "cache"
    first, imported_first = _list(store, cache_home, tmp_path)
    assert imported_first
    assert sorted(first, key=lambda usd: usd is None) == [first[0] or first[1], None]
    assert any(usd is not None and usd > 0 for usd in first)
    assert (cache_home / CACHE_FILE).is_file()
    second, imported_second = _list(store, cache_home, tmp_path)
    assert not imported_second
    assert second == first  # same dollars, the unknown model still unknown (not zero)


def test_a_stale_or_broken_cache_file_is_asked_of_genai_prices_again(tmp_path: Path) -> None:
    store = f"sqlite:{tmp_path / 'priced.db'}"
    _fill(store)
    cache_home = tmp_path / "cache"
    expected, _ = _list(store, cache_home, tmp_path)
    cached = cache_home / CACHE_FILE
    content = orjson.loads(cached.read_bytes())
    stale = {**content, "day": "2001-01-01"}
    broken_rate = {
        **content,
        "known": [
            {**entry, "rates": ["not a number"] * 5} if entry["rates"] else entry
            for entry in content["known"]
        ],
    }
    for written in (orjson.dumps(stale), orjson.dumps(broken_rate), b"{not json", b"[]"):
        cached.write_bytes(written)
        listed, imported = _list(store, cache_home, tmp_path)
        assert imported, written
        assert listed == expected, written
        assert orjson.loads(cached.read_bytes()) == content, written  # rebuilt
