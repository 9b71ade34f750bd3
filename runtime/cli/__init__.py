"""The `actorloop` command line: commands, workloads and their run report, and the text
they print. `main` is the console script."""

from __future__ import annotations

from ..lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(globals(), {"main": "actorloop.runtime.cli.commands"})

__all__ = ["main"]
