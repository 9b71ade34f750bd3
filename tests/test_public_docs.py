"""Every exported class and function, and every public method or property of an exported
class, has a docstring (a method implementing the `Store` or `Provider` seam may rely on
the seam's own). The exported names are those of the packages a user imports."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterator

import pytest

from actorloop.runtime.providers.base import Provider
from actorloop.runtime.stores.base import Store

PACKAGES = (
    "actorloop.runtime",
    "actorloop.runtime.aio",
    "actorloop.runtime.errors",
    "actorloop.runtime.providers",
    "actorloop.runtime.stores",
    "actorloop.runtime.testing",
)
SEAMS = (Store, Provider)


def exported() -> Iterator[tuple[str, object]]:
    for package in PACKAGES:
        module = importlib.import_module(package)
        names = getattr(module, "__all__", None) or [
            name for name in vars(module) if not name.startswith("_")
        ]
        for name in names:
            value = getattr(module, name)
            if (inspect.isclass(value) or inspect.isfunction(value)) and getattr(
                value, "__module__", ""
            ).startswith("actorloop."):
                yield f"{package}.{name}", value


def documented(value: object) -> bool:
    return bool((getattr(value, "__doc__", None) or "").strip())


def undocumented_members(cls: type) -> Iterator[str]:
    for name, member in vars(cls).items():
        if name.startswith("_"):
            continue
        target = member.fget if isinstance(member, property) else member
        target = getattr(target, "__func__", target)
        if not (inspect.isfunction(target) or isinstance(member, property)):
            continue
        if documented(target):
            continue
        inherited = (
            getattr(base, name, None) for base in (*cls.__mro__[1:], *SEAMS) if base is not object
        )
        if not any(documented(other) for other in inherited if other is not None):
            yield name


def test_the_packages_export_something() -> None:
    assert len(dict(exported())) > 50


@pytest.mark.parametrize("name", sorted(dict(exported())))
def test_an_exported_name_is_documented(name: str) -> None:
    value = dict(exported())[name]
    assert documented(value), f"{name} has no docstring"
    if inspect.isclass(value):
        missing = sorted(undocumented_members(value))
        assert not missing, f"{name}: no docstring on {', '.join(missing)}"
