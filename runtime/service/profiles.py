"""Agent profiles for the service: named options + tools + listeners, the registry that holds
them, the `AppConfig` a `setup(app_config)` function fills in (`--app MODULE:FUNC`), the
`[profiles.*]` tables of a TOML file, and the built-in default profile."""

from __future__ import annotations

import importlib
import math
import tomllib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import cattrs
from attrs import evolve, field, frozen

from ..cli.workload import describe_structure_error as describe
from ..control.hooks import Listener
from ..control.options import AgentOptions, Tool
from ..errors import McpConfigError
from ..mcp.specs import McpHttp, McpServer, McpStdio
from ..model.budget import Budget
from ..providers.base import Provider
from .errors import ServeConfigError, UnknownProfile

if TYPE_CHECKING:
    from ..host.runtime import Runtime

OptionsFactory: TypeAlias = Callable[["Runtime"], AgentOptions]
"""Options that need the runtime (a subagent tool does), built once when the service starts."""

DEFAULT_PROFILE = "default"
PROFILE_LABEL = "actorloop.serve"
"""The session label under which the service records the profile (and the option overrides)
a session was created with, so a restarted server resumes it with the same options."""


@frozen
class Profile:
    """A named way to run an agent: its options (tools included) and the listeners every
    agent of the profile gets (`agent.on(name, listener)`: session-prefix contributors,
    prompt filters, ...)."""

    name: str
    options: AgentOptions | OptionsFactory = field(eq=False)
    listeners: tuple[tuple[str, Listener], ...] = field(default=(), eq=False)
    description: str = ""

    def build(self, runtime: Runtime) -> AgentOptions:
        """The profile's options, built against `runtime` if they need it."""
        options = self.options if isinstance(self.options, AgentOptions) else self.options(runtime)
        if not isinstance(options, AgentOptions):
            raise ServeConfigError(
                f"profile {self.name!r}: its options factory returned "
                f"{type(options).__name__}, not AgentOptions"
            )
        return options


class ProfileRegistry:
    """Profiles by name, one of them the default (the first added unless one asks to be)."""

    def __init__(self) -> None:
        self._profiles: dict[str, Profile] = {}
        self._default: str | None = None

    def add(self, profile: Profile, *, default: bool = False) -> Profile:
        """Register `profile`; a second profile of the same name is refused."""
        if not profile.name or not isinstance(profile.name, str):
            raise ServeConfigError(f"a profile needs a non-empty name, got {profile.name!r}")
        if profile.name in self._profiles:
            raise ServeConfigError(f"profile {profile.name!r} is registered twice")
        self._profiles[profile.name] = profile
        if default or self._default is None:
            self._default = profile.name
        return profile

    @property
    def default(self) -> str:
        """The name of the default profile."""
        if self._default is None:
            raise ServeConfigError("no agent profile is registered")
        return self._default

    def get(self, name: str | None) -> Profile:
        """The profile `name` (the default for None); `UnknownProfile` if there is none."""
        key = self.default if name is None else name
        profile = self._profiles.get(key)
        if profile is None:
            known = ", ".join(sorted(self._profiles)) or "none"
            raise UnknownProfile(f"no profile named {key!r} (registered: {known})")
        return profile

    def __iter__(self) -> Iterator[Profile]:
        return iter(self._profiles.values())

    def __len__(self) -> int:
        return len(self._profiles)


class AppConfig:
    """What a `setup(app_config)` function configures before the service starts.

    `provider` and `model` are what `--provider` named (the runtime's default provider;
    `model` is None for the simulator); `store_url` is where sessions live. A setup
    function adds profiles, extra named providers and runtime-wide listeners.
    """

    def __init__(self, *, provider: Provider, model: str | None, store_url: str) -> None:
        self.provider = provider
        self.model = model
        self.store_url = store_url
        self.profiles = ProfileRegistry()
        self.providers: dict[str, Provider] = {}
        self.listeners: list[tuple[str, Listener]] = []
        self.mcp: dict[str, McpServer] = {}
        """The runtime's MCP servers by name (`[mcp.NAME]` tables; docs/mcp.md)."""

    def add_profile(
        self,
        name: str,
        options: AgentOptions | OptionsFactory,
        *,
        listeners: Mapping[str, Listener] | tuple[tuple[str, Listener], ...] = (),
        description: str = "",
        default: bool = False,
    ) -> Profile:
        """Register a profile (see `Profile`); `default=True` makes it the default."""
        pairs = tuple(listeners.items()) if isinstance(listeners, Mapping) else tuple(listeners)
        return self.profiles.add(Profile(name, options, pairs, description), default=default)

    def add_provider(self, provider: Provider) -> None:
        """Make `provider` available by its name (`AgentOptions(provider=name)`)."""
        self.providers[provider.name] = provider

    def on(self, name: str, listener: Listener) -> None:
        """A runtime-wide listener (`rt.on`), for every agent of the service."""
        self.listeners.append((name, listener))

    def add_mcp(self, name: str, server: McpServer) -> None:
        """An MCP server of the runtime (`Runtime.open(mcp=...)`); profiles select it by
        name (`AgentOptions(mcp=(name,))`). A second server of one name is refused."""
        if name in self.mcp:
            raise ServeConfigError(f"MCP server {name!r} is declared twice")
        self.mcp[name] = server


def load_setup(spec: str) -> Callable[[AppConfig], Any]:
    """The function `MODULE:FUNC` names (`--app`); `ServeConfigError` saying what is wrong."""
    module_name, sep, function_name = spec.partition(":")
    if not sep or not module_name or not function_name:
        raise ServeConfigError(f"--app {spec!r}: write MODULE:FUNC, e.g. mypkg.agents:setup")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ServeConfigError(f"--app {spec!r}: cannot import {module_name!r}: {exc}") from exc
    function = getattr(module, function_name, None)
    if not callable(function):
        raise ServeConfigError(f"--app {spec!r}: {module_name} has no function {function_name!r}")
    return function


def run_setup(spec: str, app_config: AppConfig) -> None:
    """Load and call the `--app` setup function; it must register at least one profile."""
    load_setup(spec)(app_config)
    if not len(app_config.profiles):
        raise ServeConfigError(f"--app {spec!r} registered no agent profile")


# ---------------------------------------------------------------------- the default profile


def add_default_profile(app_config: AppConfig) -> Profile:
    """The profile used without `--app`: the configured provider (the simulator unless
    `--provider` names another) and the demo `lookup` tool (`call:lookup ...` in a message
    makes the simulator call it)."""
    from ..cli.orchestration import LOOKUP

    return app_config.add_profile(
        DEFAULT_PROFILE,
        AgentOptions(
            model=app_config.model or "sim-1",
            system="You are a helpful assistant. Answer briefly.",
            tools=(LOOKUP,),
        ),
        description="the demo profile: the configured provider with a lookup tool",
    )


# ---------------------------------------------------------------------- TOML profiles


def _finite(_instance: object, attribute: Any, value: float | None) -> None:
    if value is not None and not (math.isfinite(value) and 0 <= value <= 2):
        raise ValueError(f"{attribute.name} must be a number in 0..2, got {value}")


def _positive(_instance: object, attribute: Any, value: int | None) -> None:
    if value is not None and value <= 0:
        raise ValueError(f"{attribute.name} must be > 0, got {value}")


KNOWN_TOOLS = ("lookup", "delegate")


def _tool_names(_instance: object, attribute: Any, value: tuple[str, ...]) -> None:
    unknown = sorted(set(value) - set(KNOWN_TOOLS))
    if unknown:
        raise ValueError(f"{attribute.name}: unknown tools {unknown} (known: {list(KNOWN_TOOLS)})")


@frozen
class BudgetTable:
    """A profile's `budget = {usd = ..., tokens = ..., model_calls = ...}` (docs/budgets.md):
    every agent of the profile, with its subagents, shares one."""

    usd: float | None = None
    tokens: int | None = None
    model_calls: int | None = None

    def __attrs_post_init__(self) -> None:
        self.budget()  # a negative limit is refused as the file is read

    def budget(self) -> Budget:
        """The `Budget` the table declares."""
        return Budget(self.usd, self.tokens, self.model_calls)


@frozen
class ProfileTable:
    """One `[profiles.NAME]` table of a TOML file."""

    model: str = "sim-1"
    description: str = ""
    system: str | None = None
    provider: str | None = None
    temperature: float | None = field(default=None, validator=_finite)
    max_tokens: int | None = field(default=None, validator=_positive)
    context_window: int | None = field(default=None, validator=_positive)
    tools: tuple[str, ...] = field(default=(), validator=_tool_names)
    skills: bool = False
    """Give agents the file's `[[skills]]` as a skill-catalogue session prefix."""
    mcp: tuple[str, ...] = ()
    """The `[mcp.NAME]` servers whose tools the profile's agents get."""
    budget: BudgetTable | None = None
    """What each of the profile's agents (with its subagents) may spend."""
    default: bool = False


@frozen
class McpTable:
    """One `[mcp.NAME]` table: `command = [...]` (stdio) or `url = "..."` (streamable HTTP)."""

    command: tuple[str, ...] | None = None
    env: dict[str, str] | None = None
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] | None = None
    prefix: str | None = None
    needs_approval: bool | tuple[str, ...] = False
    """True, or the server's tool names whose calls wait for a decision."""

    def server(self) -> McpServer:
        """The server spec the table declares."""
        if (self.command is None) == (self.url is None):
            raise ValueError('give exactly one of command = [...] and url = "..."')
        if self.url is not None:
            if self.env is not None or self.cwd is not None:
                raise ValueError("env and cwd are for command servers")
            return McpHttp(
                self.url,
                headers=self.headers,
                prefix=self.prefix,
                needs_approval=self.needs_approval,
            )
        if self.headers is not None:
            raise ValueError("headers are for url servers")
        assert self.command is not None
        return McpStdio(
            self.command,
            env=self.env,
            cwd=self.cwd,
            prefix=self.prefix,
            needs_approval=self.needs_approval,
        )


@frozen
class SkillEntry:
    """One `[[skills]]` entry (as in a workload file)."""

    name: str
    description: str


def _strict_converter() -> cattrs.Converter:
    converter = cattrs.Converter(forbid_extra_keys=True)

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

    def approval_rule(value: Any, _: type) -> bool | tuple[str, ...]:
        if isinstance(value, bool):
            return value
        if isinstance(value, list) and all(isinstance(item, str) for item in value):
            return tuple(value)
        raise TypeError(f"expected true, false or a list of tool names, got {value!r}")

    converter.register_structure_hook(bool | tuple[str, ...], approval_rule)
    return converter


_toml = _strict_converter()


def add_toml_profiles(path: Path, app_config: AppConfig) -> tuple[Profile, ...]:
    """Register the `[profiles.NAME]` tables of the TOML file at `path` (a workload file
    may carry them; every other top-level key but `[[skills]]` is not read here)."""
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ServeConfigError(f"cannot read profiles file {path}: {exc.strerror or exc}") from exc
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ServeConfigError(f"{path}: not a UTF-8 TOML file ({exc})") from exc
    tables = raw.get("profiles")
    if not isinstance(tables, dict) or not tables:
        raise ServeConfigError(f"{path}: no [profiles.NAME] table")
    try:
        skills = _toml.structure(raw.get("skills", []), list[SkillEntry])
    except Exception as exc:
        raise ServeConfigError(f"{path}: [[skills]]: {describe(exc)}") from exc
    _add_toml_mcp(path, raw.get("mcp", {}), app_config)
    added = []
    for name, table in tables.items():
        try:
            spec = _toml.structure(table, ProfileTable)
        except Exception as exc:
            raise ServeConfigError(f"{path}: [profiles.{name}]: {describe(exc)}") from exc
        if spec.skills and not skills:
            raise ServeConfigError(f"{path}: [profiles.{name}] asks for skills; none declared")
        unknown = sorted(set(spec.mcp) - set(app_config.mcp))
        if unknown:
            raise ServeConfigError(f"{path}: [profiles.{name}] names no [mcp.*] server {unknown}")
        added.append(
            app_config.add_profile(
                name,
                _toml_options(spec),
                listeners=_toml_listeners(spec, skills),
                description=spec.description,
                default=spec.default,
            )
        )
    return tuple(added)


def _add_toml_mcp(path: Path, tables: Any, app_config: AppConfig) -> None:
    if not isinstance(tables, dict):
        raise ServeConfigError(f"{path}: mcp must be tables [mcp.NAME]")
    for name, table in tables.items():
        if isinstance(table, dict) and not isinstance(table.get("command", []), list):
            raise ServeConfigError(f"{path}: [mcp.{name}]: command must be an array of strings")
        try:
            server = _toml.structure(table, McpTable).server()
        except (McpConfigError, ValueError, TypeError, cattrs.BaseValidationError) as exc:
            raise ServeConfigError(f"{path}: [mcp.{name}]: {describe(exc)}") from exc
        app_config.add_mcp(name, server)


def _toml_options(spec: ProfileTable) -> OptionsFactory:
    def build(runtime: Runtime) -> AgentOptions:
        from ..cli.orchestration import LOOKUP
        from ..host.subagents import subagent_tool

        options = AgentOptions(
            model=spec.model,
            provider=spec.provider,
            system=spec.system,
            temperature=spec.temperature,
            max_tokens=spec.max_tokens,
            context_window=spec.context_window,
            mcp=spec.mcp,
            budget=None if spec.budget is None else spec.budget.budget(),
        )
        tools: list[Tool] = []
        if "lookup" in spec.tools:
            tools.append(LOOKUP)
        if "delegate" in spec.tools:
            # The child runs with the profile's options, minus the delegate tool itself.
            tools.append(subagent_tool(runtime, options=evolve(options, tools=tuple(tools))))
        return evolve(options, tools=tuple(tools))

    return build


def _toml_listeners(
    spec: ProfileTable, skills: list[SkillEntry]
) -> tuple[tuple[str, Listener], ...]:
    if not spec.skills:
        return ()
    from ..cli.orchestration import skill_catalogue
    from ..cli.workload import Skill

    return (
        ("agent/session-prefix", skill_catalogue([Skill(s.name, s.description) for s in skills])),
    )
