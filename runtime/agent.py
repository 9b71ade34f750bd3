"""`Agent`: the public handle of one loop instance; every call goes to its LoopActor."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias

from actorloop.runtime.hooks import HookRegistry, Listener, Unsubscribe
from actorloop.runtime.messages import USER, Block, Content, Source, as_content
from actorloop.runtime.options import AgentOptions
from actorloop.runtime.seams import TurnResult
from actorloop.runtime.session import Session

if TYPE_CHECKING:
    from actorloop.runtime.header import ToolSchema

AgentStatus: TypeAlias = Literal["idle", "running", "disposed", "failed"]
SourceSpec: TypeAlias = str | Source | None


class LoopHandle(Protocol):
    """What an Agent needs from its loop instance (implemented by actors.loop.LoopActor)."""

    status: AgentStatus
    current_tools: tuple[ToolSchema, ...]

    async def send(self, content: Content, source: Source) -> TurnResult: ...

    def steer(self, content: Content, source: Source) -> None: ...

    def inject(self, content: Content, source: Source, meta: Mapping[str, Any] | None) -> None: ...

    def cancel(self, reason: str | None, keep_inbox: bool) -> None: ...

    async def dispose(self) -> None: ...

    async def wait_idle(self) -> None: ...

    async def compact(self) -> TurnResult: ...


def as_source(source: SourceSpec, default: Source) -> Source:
    if source is None:
        return default
    if isinstance(source, Source):
        return source
    if isinstance(source, str) and source:
        return Source.of_plugin(source)
    raise TypeError(f"source must be a plugin name or a Source, got {source!r}")


class Agent:
    """One live agent: `id` is its session id; lineage is on `session.meta`."""

    def __init__(self, session: Session, options: AgentOptions, loop: LoopHandle) -> None:
        self.session = session
        self.options = options
        self.hooks = HookRegistry()
        self._loop = loop

    @property
    def id(self) -> str:
        return self.session.id

    @property
    def status(self) -> AgentStatus:
        return self._loop.status

    @property
    def current_tools(self) -> tuple[ToolSchema, ...]:
        """The tool schemas assembled for the latest step (what the compaction gate counts)."""
        return self._loop.current_tools

    def on(self, name: str, listener: Listener) -> Unsubscribe:
        """Subscribe a listener for this agent only; returns an unsubscribe callable."""
        return self.hooks.on(name, listener)

    async def send(
        self, content: str | Content | list[Block], *, source: SourceSpec = None
    ) -> TurnResult:
        return await self._loop.send(as_content(content), as_source(source, USER))

    def steer(self, content: str | Content | list[Block], *, source: SourceSpec = None) -> None:
        self._loop.steer(as_content(content), as_source(source, USER))

    def inject(
        self,
        content: str | Content | list[Block],
        source: SourceSpec = "plugin",
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        self._loop.inject(as_content(content), as_source(source, USER), meta)

    def cancel(self, reason: str | None = None, keep_inbox: bool = False) -> None:
        self._loop.cancel(reason, keep_inbox)

    async def dispose(self) -> None:
        await self._loop.dispose()

    async def wait_idle(self) -> None:
        await self._loop.wait_idle()

    async def compact(self) -> TurnResult:
        """Compact now (idle agents only), recorded as a one-shot `compaction` turn."""
        return await self._loop.compact()

    def __repr__(self) -> str:
        return f"Agent(id={self.id!r}, status={self.status!r})"
