"""Declarative workload files (TOML) for `actorloop run`: their schema and strict parsing."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import cattrs
from attrs import field, frozen, validators

from actorloop.runtime.errors import ActorloopError


class WorkloadError(ActorloopError, ValueError):
    """A workload file is missing, unreadable or does not match the schema."""


def _positive(_instance: object, attribute: Any, value: int) -> None:
    if value < 0:
        raise ValueError(f"{attribute.name} must be >= 0, got {value}")


@frozen
class Skill:
    name: str
    description: str


@frozen
class Coordinator:
    """The agent that delegates: each task is one turn; `call:delegate` in a task makes the
    simulated model call the delegate tool with the rest of the task."""

    tasks: tuple[str, ...] = field(converter=tuple)
    system: str = "You coordinate a small team of worker agents."


@frozen
class Workers:
    count: int = field(default=4, validator=_positive)
    turns: int = field(default=2, validator=_positive)
    fork: int = field(default=1, validator=_positive)
    cancel: int = field(default=1, validator=_positive)
    resume: int = field(default=1, validator=_positive)
    system: str = "You are a worker agent. Answer briefly."


@frozen
class Workload:
    name: str
    coordinator: Coordinator
    model: str = "sim-1"
    skills: tuple[Skill, ...] = field(default=(), converter=tuple)
    workers: Workers = Workers()
    latency_ms: float = field(default=2.0, validator=validators.ge(0))
    context_window: int | None = None


_converter = cattrs.Converter(forbid_extra_keys=True)


def parse_workload(text: str, origin: str) -> Workload:
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise WorkloadError(f"{origin}: not valid TOML ({exc})") from exc
    try:
        return _converter.structure(raw, Workload)
    except Exception as exc:
        raise WorkloadError(f"{origin}: {_describe(exc)}") from exc


def load_workload(path: Path) -> Workload:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise WorkloadError(f"cannot read workload {path}: {exc.strerror or exc}") from exc
    return parse_workload(text, str(path))


def _describe(exc: BaseException) -> str:
    """One line for a cattrs error tree: the first leaf with its path."""
    if isinstance(exc, cattrs.ClassValidationError):
        notes = cattrs.transform_error(exc)
        return notes[0] if notes else str(exc)
    if isinstance(exc, cattrs.ForbiddenExtraKeysError):
        return f"unknown keys {sorted(exc.extra_fields)} in {exc.cl.__name__.lower()}"
    return str(exc)
