"""How to reach an MCP server: `McpStdio` (a child process over stdin/stdout) and `McpHttp`
(streamable HTTP), as frozen values a runtime is opened with."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeAlias

from attrs import field, frozen

from ..errors import McpConfigError


def _command(value: str | Sequence[str]) -> str | tuple[str, ...]:
    if isinstance(value, str):
        return value
    return tuple(value)


def _args(value: Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        raise McpConfigError(f"args must be a sequence of str, not the str {value!r}")
    return tuple(value)


def _env(value: Mapping[str, str] | None) -> tuple[tuple[str, str], ...] | None:
    return None if value is None else tuple(dict(value).items())


def _headers(value: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
    return () if value is None else tuple(dict(value).items())


def _all_str(what: str, values: Iterable[Any]) -> None:
    for value in values:
        if not isinstance(value, str):
            raise McpConfigError(f"{what} must hold only str, got {type(value).__name__}")


def _approvals(value: bool | Iterable[str]) -> bool | tuple[str, ...]:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        raise McpConfigError(
            f"needs_approval must be a bool or a sequence of tool names, got {value!r}"
        )
    names = tuple(value)
    _all_str("needs_approval tool names", names)
    return names


def _check_prefix(prefix: str | None) -> None:
    if prefix is not None and (not isinstance(prefix, str) or not prefix):
        raise McpConfigError(f"prefix must be a non-empty str or None, got {prefix!r}")


@frozen
class McpStdio:
    """An MCP server the runtime starts as a child process and talks to over stdio.

    `command` is the program (with `args`), or a sequence whose first item is the program
    and whose rest are its arguments (`McpStdio(["python", "server.py"])`). `env` is added
    over the SDK's safe inherited environment; `cwd` is the child's working directory.
    `prefix` renames the server's tools to `{prefix}_{name}`. `needs_approval`: True puts
    every tool of the server behind a decision (docs/approvals.md), a sequence of the
    server's tool names only those.
    """

    command: str | tuple[str, ...] = field(converter=_command)
    args: tuple[str, ...] = field(default=(), converter=_args)
    env: tuple[tuple[str, str], ...] | None = field(default=None, converter=_env)
    cwd: str | None = None
    prefix: str | None = None
    needs_approval: bool | tuple[str, ...] = field(default=False, converter=_approvals)

    def __attrs_post_init__(self) -> None:
        argv = self.argv
        if not argv or not argv[0]:
            raise McpConfigError("McpStdio needs a command (a program to run)")
        _all_str("McpStdio command and args", argv)
        if self.env is not None:
            _all_str("McpStdio env", (item for pair in self.env for item in pair))
        if self.cwd is not None and not isinstance(self.cwd, str):
            object.__setattr__(self, "cwd", str(self.cwd))
        _check_prefix(self.prefix)

    @property
    def argv(self) -> tuple[str, ...]:
        """The program and every argument, in order."""
        head = (self.command,) if isinstance(self.command, str) else self.command
        return (*head, *self.args)


@frozen
class McpHttp:
    """An MCP server reached over streamable HTTP at `url`, with extra request `headers`
    (an `Authorization` header, for instance). `prefix` and `needs_approval` as for
    `McpStdio`."""

    url: str
    headers: tuple[tuple[str, str], ...] = field(default=(), converter=_headers)
    prefix: str | None = None
    needs_approval: bool | tuple[str, ...] = field(default=False, converter=_approvals)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.url, str) or not self.url.startswith(("http://", "https://")):
            raise McpConfigError(f"McpHttp url must be an http(s) URL, got {self.url!r}")
        _all_str("McpHttp headers", (item for pair in self.headers for item in pair))
        _check_prefix(self.prefix)


McpServer: TypeAlias = McpStdio | McpHttp


def check_servers(servers: Mapping[str, McpServer] | None) -> dict[str, McpServer]:
    """The `mcp=` mapping of `Runtime.open`, checked: str names, server specs as values."""
    if servers is None:
        return {}
    if not isinstance(servers, Mapping):
        raise McpConfigError(
            f"mcp must be a mapping of name to server, got {type(servers).__name__}"
        )
    checked: dict[str, McpServer] = {}
    for name, server in servers.items():
        if not isinstance(name, str) or not name:
            raise McpConfigError(f"an MCP server name must be a non-empty str, got {name!r}")
        if not isinstance(server, (McpStdio, McpHttp)):
            raise McpConfigError(
                f"MCP server {name!r} must be McpStdio or McpHttp, got {type(server).__name__}"
            )
        checked[name] = server
    return checked


def needs_approval(server: McpServer, name: str) -> bool:
    """Whether calls of the server's tool `name` (its own name) wait for a decision."""
    rule = server.needs_approval
    return rule if isinstance(rule, bool) else name in rule


def tool_name(server: McpServer, name: str) -> str:
    """The name the model sees for the server's tool `name`."""
    return name if server.prefix is None else f"{server.prefix}_{name}"


__all__ = ["McpHttp", "McpServer", "McpStdio", "check_servers", "tool_name"]
