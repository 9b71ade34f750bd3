"""Every package module imports on its own, in a fresh interpreter, whatever is loaded first
(the runtime wires the actors, and the actors and codecs use the runtime's data classes)."""

from __future__ import annotations

import subprocess
import sys

import pytest

FIRST_IMPORTS = [
    "actorloop.runtime",
    "actorloop.actors.loop",
    "actorloop.actors.loop.actor",
    "actorloop.actors.codec",
    "actorloop.actors.compaction",
    "actorloop.codecs.converter",
    "actorloop.codecs.jsonvalue",
    "actorloop.runtime.log.session",
    "actorloop.runtime.cli.commands",
    "actorloop.runtime.providers",
]


@pytest.mark.parametrize("module", FIRST_IMPORTS)
def test_module_imports_first(module: str) -> None:
    code = f"import {module}\nfrom actorloop.runtime import Runtime, AgentOptions\nprint('ok')"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_the_bare_folder_names_are_not_importable() -> None:
    code = (
        "import codecs, importlib.util as u\n"
        "print(codecs.__file__)\n"
        "print(u.find_spec('runtime'), u.find_spec('actors'))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd="/",
    )
    assert result.returncode == 0, result.stderr
    stdlib_codecs, specs = result.stdout.strip().splitlines()
    assert "actorloop" not in stdlib_codecs
    assert specs == "None None"
