"""The `actorloop` console script: the CLI's commands (`run`, `workloads`, `sessions`) and
the service's (`serve`, `inspect`) under one group. It stands above both rooms, so neither
imports the other to be reachable from the command line. Only click loads with it."""

from __future__ import annotations

import logging
import os
import sys

import click

from .cli.commands import run, workloads
from .cli.sessions import sessions
from .service.command import serve
from .service.inspector.command import inspect


@click.group()
@click.version_option(package_name="actorloop")
def main() -> None:
    """actorloop: agent loops whose every request is a pure function of the session log."""
    logging.basicConfig(level=logging.WARNING, format="actorloop: %(levelname)s %(message)s")


for command in (run, workloads, sessions, serve, inspect):
    main.add_command(command)


if __name__ == "__main__":  # pragma: no cover - `python -m actorloop.runtime.console`
    main(prog_name=os.path.basename(sys.argv[0]) or "actorloop")
