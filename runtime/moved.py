"""Old module paths of the round-3 room moves, kept importable for one release: importing one
warns (`DeprecationWarning`) and gives the module at its new path, the same object."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType

MOVED = {
    "actorloop.runtime.messages": "actorloop.runtime.model.messages",
    "actorloop.runtime.chunks": "actorloop.runtime.model.chunks",
    "actorloop.runtime.header": "actorloop.runtime.model.header",
    "actorloop.runtime.events": "actorloop.runtime.model.events",
    "actorloop.runtime.meta": "actorloop.runtime.model.meta",
    "actorloop.runtime.seams": "actorloop.runtime.model.hook_values",
    "actorloop.runtime.header_algebra": "actorloop.runtime.log.header_algebra",
    "actorloop.runtime.structure": "actorloop.runtime.log.structure",
    "actorloop.runtime.surface": "actorloop.runtime.log.surface",
    "actorloop.runtime.session": "actorloop.runtime.log.session",
    "actorloop.runtime.repair": "actorloop.runtime.log.repair",
    "actorloop.runtime.request": "actorloop.runtime.log.request",
    "actorloop.runtime.tokens": "actorloop.runtime.log.tokens",
    "actorloop.runtime.verify": "actorloop.runtime.log.verify",
    "actorloop.runtime.usage": "actorloop.runtime.log.usage",
    "actorloop.runtime.summary": "actorloop.runtime.log.summary",
    "actorloop.runtime.stored": "actorloop.runtime.stores.loading",
    "actorloop.runtime.rebuild": "actorloop.runtime.log.rebuild",
    "actorloop.runtime.cache_health": "actorloop.runtime.log.cache_health",
    "actorloop.runtime.invariants": "actorloop.runtime.host.checked_provider",
    "actorloop.runtime.hooks": "actorloop.runtime.control.hooks",
    "actorloop.runtime.options": "actorloop.runtime.control.options",
    "actorloop.runtime.agent": "actorloop.runtime.control.handle",
    "actorloop.runtime.collector": "actorloop.runtime.control.collector",
    "actorloop.runtime.kernel": "actorloop.actors.kernel",
    "actorloop.runtime.runtime": "actorloop.runtime.host.runtime",
    "actorloop.runtime.subagents": "actorloop.runtime.host.subagents",
    "actorloop.runtime.telemetry": "actorloop.runtime.host.telemetry",
    "actorloop.runtime.render": "actorloop.runtime.cli.render",
    "actorloop.runtime.workload": "actorloop.runtime.cli.workload",
    "actorloop.runtime.orchestration": "actorloop.runtime.cli.orchestration",
}
"""Old dotted path -> the module's path since the room moves (docs/ARCHITECTURE.md)."""


class _MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path of `MOVED` and loads it as an alias of the module's new path."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = MOVED[spec.name]
        warnings.warn(
            f"{spec.name} moved to {new}; the old path goes away in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        """The module at the new path is already executed."""


def install() -> None:
    """Make the old paths importable (once per interpreter)."""
    if not any(isinstance(finder, _MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.append(_MovedModuleFinder())
