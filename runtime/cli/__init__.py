"""The `actorloop` command line: commands, workloads and their run report, and the text
they print. `main` (the console script, runtime/console.py) is reachable here too, under
the path older installs name."""

from __future__ import annotations

from ..lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(globals(), {"main": "actorloop.runtime.console"})

__all__ = ["main"]
