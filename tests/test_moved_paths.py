"""The round-3 room moves keep the old spellings working for one release: an old module
path is the module at its new path, and importing it warns; a name the package stopped
exporting still resolves from `actorloop.runtime`, with a warning naming its home."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from actorloop.runtime.moved import MOVED

CONTRACT_PATHS = (
    "actorloop.runtime.verify",
    "actorloop.runtime.chunks",
    "actorloop.runtime.events",
    "actorloop.runtime.messages",
    "actorloop.runtime.session",
    "actorloop.runtime.subagents",
    "actorloop.runtime.invariants",
    "actorloop.runtime.runtime",
    "actorloop.runtime.orchestration",
)


def test_the_contract_paths_that_moved_are_in_the_table() -> None:
    assert set(CONTRACT_PATHS) <= set(MOVED)


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_module_path_warns_and_is_the_new_module(old: str) -> None:
    # A fresh interpreter: in this one the old name may already be cached in sys.modules.
    code = (
        "import importlib, warnings\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        f"    old = importlib.import_module({old!r})\n"
        f"new = importlib.import_module({MOVED[old]!r})\n"
        "print(old is new)\n"
        "print(sum(issubclass(w.category, DeprecationWarning) and "
        f"{MOVED[old]!r} in str(w.message) for w in caught))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "1"]


def test_from_import_of_an_old_path_gives_its_names() -> None:
    with pytest.warns(DeprecationWarning, match="actorloop.runtime.log.verify"):
        sys.modules.pop("actorloop.runtime.verify", None)
        from actorloop.runtime.verify import verify_log  # type: ignore[import-not-found]
    from actorloop.runtime.log.verify import verify_log as new

    assert verify_log is new


@pytest.mark.parametrize(
    ("name", "home"),
    [
        ("ScriptedProvider", "actorloop.runtime.testing"),
        ("reply", "actorloop.runtime.testing"),
        ("HANG", "actorloop.runtime.testing"),
        ("SessionFenced", "actorloop.runtime.errors"),
        ("InboxFull", "actorloop.runtime.errors"),
        ("ErrorInfo", "actorloop.runtime.model.chunks"),
    ],
)
def test_a_name_that_left_the_public_face_warns_and_resolves(name: str, home: str) -> None:
    import actorloop.runtime as public

    with pytest.warns(DeprecationWarning, match=home):
        value = getattr(public, name)
    assert value is getattr(importlib.import_module(home), name)
    assert name not in public.__all__


def test_the_public_face_is_small_and_resolves_without_warnings() -> None:
    import warnings

    import actorloop.runtime as public

    assert len(public.__all__) <= 50
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in public.__all__:
            getattr(public, name)


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    import actorloop.runtime as public

    with pytest.raises(AttributeError, match="no attribute 'NoSuchThing'"):
        public.NoSuchThing  # noqa: B018


def test_open_store_from_the_seam_module_still_works_and_warns() -> None:
    from actorloop.runtime.stores import base, urls

    with pytest.warns(DeprecationWarning, match="stores.urls"):
        moved = base.open_store
    assert moved is urls.open_store
