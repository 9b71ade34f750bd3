"""Lazy re-exports for package `__init__` modules (PEP 562), so importing a low layer never
loads the layers above it: `actorloop.runtime.Runtime` is imported on first access."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    namespace: dict[str, Any],
    exports: Mapping[str, str],
    *,
    moved: Mapping[str, str] | None = None,
    moved_fallback: str | None = None,
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`__getattr__` and `__dir__` for a package whose public `name` lives in the module
    `exports[name]`; a resolved name is cached in the package's `namespace`.

    A name in `moved` (name -> its home module), or any public name of `moved_fallback`,
    is one the package no longer exports: it still resolves, with a `DeprecationWarning`
    naming its home, and is not cached, so every use outside the home is told."""

    package = namespace["__name__"]
    moved = moved or {}

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is not None:
            value = getattr(importlib.import_module(module), name)
            namespace[name] = value
            return value
        home = moved.get(name)
        fallback = moved_fallback
        if home is None and fallback and not name.startswith("_"):
            home = fallback if hasattr(importlib.import_module(fallback), name) else None
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        warnings.warn(
            f"{package}.{name} moved to {home}.{name}; the old path goes away in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(home), name)

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__
