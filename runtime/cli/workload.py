"""Declarative workload files (TOML) for `actorloop run`: their schema, strict parsing, and
the workloads that ship inside the package (`runtime/cli/workloads/*.toml`, package data)."""

from __future__ import annotations

import math
import re
import tomllib
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import cattrs
from attrs import field, frozen
from cattrs.v import format_exception

from ...codecs.jsonvalue import EMPTY_OBJECT, FrozenDict, freeze_object
from ..errors import WorkloadError

NAME_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""Workload names prefix session ids, so they use the session-id alphabet."""

DEFAULT_WORKLOAD = "demo"
"""The packaged workload `actorloop run` runs when given none."""


def _not_negative(_instance: object, attribute: Any, value: int) -> None:
    if value < 0:
        raise ValueError(f"{attribute.name} must be >= 0, got {value}")


def _finite_not_negative(_instance: object, attribute: Any, value: float) -> None:
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{attribute.name} must be a finite number >= 0, got {value}")


def _positive_or_none(_instance: object, attribute: Any, value: int | None) -> None:
    if value is not None and value <= 0:
        raise ValueError(f"{attribute.name} must be > 0, got {value}")


def _name(_instance: object, attribute: Any, value: str) -> None:
    if not NAME_PATTERN.fullmatch(value):
        raise ValueError(
            f"{attribute.name} must be 1-64 letters, digits, '_' or '-', got {value!r}"
        )


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
    count: int = field(default=4, validator=_not_negative)
    turns: int = field(default=2, validator=_not_negative)
    fork: int = field(default=1, validator=_not_negative)
    cancel: int = field(default=1, validator=_not_negative)
    resume: int = field(default=1, validator=_not_negative)
    system: str = "You are a worker agent. Answer briefly."


@frozen
class Workload:
    name: str = field(validator=_name)
    coordinator: Coordinator
    description: str = ""
    model: str = "sim-1"
    skills: tuple[Skill, ...] = field(default=(), converter=tuple)
    workers: Workers = Workers()
    latency_ms: float = field(default=2.0, validator=_finite_not_negative)
    context_window: int | None = field(default=None, validator=_positive_or_none)
    profiles: FrozenDict = field(default=EMPTY_OBJECT, converter=freeze_object)
    """`[profiles.*]` tables for `actorloop serve --profiles` (the service checks them; a
    run ignores them), so one file can describe both."""

    @property
    def delegated_turns(self) -> int:
        """The subagent turns the coordinator's tasks start: one per `call:delegate`."""
        return sum("call:delegate" in task for task in self.coordinator.tasks)

    @property
    def planned_turns(self) -> int:
        """The turns a run of this workload reports: the coordinator's tasks and the
        subagent turns they delegate, the workers' turns, then one per fork, cancellation
        and resume."""
        workers = self.workers
        return (
            len(self.coordinator.tasks)
            + self.delegated_turns
            + workers.count * workers.turns
            + min(workers.fork, workers.count)
            + min(workers.cancel, workers.count)
            + min(workers.resume, workers.count)
        )


def _strict_converter() -> cattrs.Converter:
    """No coercion: TOML already types its values, so a wrong type is an error to report."""
    converter = cattrs.Converter(forbid_extra_keys=True)

    def table(value: Any, _: type) -> FrozenDict:
        if not isinstance(value, dict):
            raise ValueError(f"profiles must be a table, got {type(value).__name__}")
        return freeze_object(value)

    converter.register_structure_hook(FrozenDict, table)

    def exactly(kind: type, *accepted: type) -> None:
        def structure(value: Any, _: type) -> Any:
            if isinstance(value, bool) and bool not in accepted:
                raise TypeError(f"expected {kind.__name__}, got a boolean")
            if not isinstance(value, accepted):
                raise TypeError(f"expected {kind.__name__}, got {type(value).__name__}")
            return kind(value)

        converter.register_structure_hook(kind, structure)

    exactly(str, str)
    exactly(int, int)
    exactly(bool, bool)
    exactly(float, int, float)

    def tuple_of(value: Any, cls: Any) -> tuple[Any, ...]:
        if not isinstance(value, list):
            raise TypeError(f"expected an array, got {type(value).__name__}")
        (item,) = {arg for arg in cls.__args__ if arg is not Ellipsis}
        return tuple(converter.structure(element, item) for element in value)

    converter.register_structure_hook_func(
        lambda cls: getattr(cls, "__origin__", None) is tuple, tuple_of
    )
    return converter


_converter = _strict_converter()


def parse_workload(text: str, origin: str) -> Workload:
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise WorkloadError(f"{origin}: not valid TOML ({exc})") from exc
    try:
        return _converter.structure(raw, Workload)
    except Exception as exc:
        raise WorkloadError(f"{origin}: {describe_structure_error(exc)}") from exc


def load_workload(path: Path) -> Workload:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise WorkloadError(f"cannot read workload {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise WorkloadError(f"workload {path} is not UTF-8 text ({exc.reason})") from exc
    return parse_workload(text, str(path))


def _packaged() -> Traversable:
    return resources.files("actorloop.runtime.cli").joinpath("workloads")


def packaged_workloads() -> tuple[str, ...]:
    """The names of the workloads shipped inside the package, sorted."""
    return tuple(
        sorted(
            entry.name.removesuffix(".toml")
            for entry in _packaged().iterdir()
            if entry.name.endswith(".toml")
        )
    )


def packaged_workload_text(name: str) -> str:
    """The TOML text of the packaged workload `name` (a starting point for your own)."""
    if name not in packaged_workloads():
        known = ", ".join(packaged_workloads())
        raise WorkloadError(f"no packaged workload named {name!r} (packaged: {known})")
    return _packaged().joinpath(f"{name}.toml").read_text(encoding="utf-8")


def find_workload(argument: str | None) -> Workload:
    """The workload `actorloop run ARGUMENT` means: a TOML file if `argument` names one,
    else the packaged workload of that name; no argument is the packaged default."""
    if argument is None:
        argument = DEFAULT_WORKLOAD
    elif Path(argument).exists() or not NAME_PATTERN.fullmatch(argument):
        return load_workload(Path(argument))
    if argument in packaged_workloads():
        return parse_workload(packaged_workload_text(argument), f"packaged workload {argument}")
    known = ", ".join(packaged_workloads())
    raise WorkloadError(
        f"no workload file {argument!r} and no packaged workload of that name (packaged: {known})"
    )


def _format_leaf(exc: BaseException, type: Any) -> str:
    # Our validators word their own errors (they name the field and the rule).
    if isinstance(exc, ValueError) and not isinstance(exc, cattrs.BaseValidationError):
        return str(exc)
    return format_exception(exc, type)


def describe_structure_error(exc: BaseException) -> str:
    """One line for a cattrs error tree: the first leaf with its path (workload files and
    serve's profile tables alike)."""
    if isinstance(exc, cattrs.ClassValidationError):
        notes = cattrs.transform_error(exc, format_exception=_format_leaf)
        return notes[0] if notes else str(exc)
    if isinstance(exc, cattrs.ForbiddenExtraKeysError):
        return f"unknown keys {sorted(exc.extra_fields)} in {exc.cl.__name__.lower()}"
    return str(exc)
