"""`Runtime`: the supervisor and composition root — owns the nursery, the store and its
CodecActor, the compactor, providers, global listeners and the registry of live agents."""

from __future__ import annotations

import errno
import logging
import resource
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import trio

from ...actors.codec import CodecActor
from ...actors.compaction import CompactionActor
from ...actors.kernel import Supervisor
from ...actors.loop.actor import LoopActor
from ...actors.loop.context import Compactor
from ...actors.loop.effects import queue_reconciliation
from ...actors.loop.values import SessionStartKind
from ..control.collector import CollectorPolicy
from ..control.handle import Agent
from ..control.hooks import HookRegistry, Listener, Unsubscribe
from ..control.options import AgentOptions
from ..errors import (
    AgentClosed,
    CollectorPolicyError,
    ErrorCode,
    ProviderNotConfigured,
    RuntimeClosed,
    SessionBusy,
    SessionForkError,
    StoreError,
    sole_error,
)
from ..log.session import Session, SessionMeta, new_session_id
from ..mcp.servers import McpServers
from ..mcp.specs import McpServer, check_servers
from ..model.meta import DamagedSession
from ..providers.base import Provider
from ..stores.base import Store
from ..stores.ids import check_session_id
from ..stores.loading import fork_point, gc_paused, load_session, load_stored
from ..stores.snapshots import snapshot_store
from ..stores.urls import open_store
from .budgets import Budgets, labels_with_budget, stored_budget
from .checked_provider import InvariantCheckedProvider
from .telemetry import TelemetrySetting, Tracing, open_tracing

log = logging.getLogger("actorloop.runtime")


def _collector_policy(collector: object) -> CollectorPolicy:
    """The policy a runtime applies while open (a do-nothing one by default)."""
    if collector is not None and not isinstance(collector, CollectorPolicy):
        raise CollectorPolicyError(
            f"collector must be a CollectorPolicy or None, got {type(collector).__name__}"
        )
    return collector or CollectorPolicy()


def _named_providers(
    provider: Provider | None, providers: Mapping[str, Provider] | None
) -> tuple[dict[str, Provider], str | None]:
    """Every provider by name, and the default's name: `provider`'s, else the first named."""
    named: dict[str, Provider] = dict(providers or {})
    if provider is not None:
        named.setdefault(provider.name, provider)
        return named, provider.name
    return named, next(iter(named), None)


def _spawn_compaction(supervisor: Supervisor, compactor: CompactionActor) -> None:
    """Run the compaction actor under the supervisor, its mailbox attached."""
    compactor.attach(supervisor.spawn("compaction", compactor.run, capacity=compactor.capacity))


class Runtime:
    """Use `async with Runtime.open(...) as rt`; leaving it disposes every agent, flushes and
    closes the store, so nothing acknowledged is lost."""

    mcp: McpServers
    """The MCP servers the runtime was opened with (`Runtime.open(mcp=...)`, docs/mcp.md)."""

    def __init__(
        self,
        *,
        supervisor: Supervisor,
        owned_work: trio.Nursery,
        store: Store,
        codec: CodecActor,
        providers: Mapping[str, Provider],
        default_provider: str | None,
        dev_invariants: bool,
        compactor: Compactor | None,
        tracing: Tracing | None = None,
        collector: CollectorPolicy | None = None,
    ) -> None:
        self._supervisor = supervisor
        self._owned_work = owned_work
        self.store = store
        self.codec = codec
        # Bound once and shared by every loop: bound per spawn, they were two more objects
        # for each of thousands of idle agents to keep.
        self._persist = codec.persist
        self._persist_now = codec.persist_now
        self._on_loop_finished = self._loop_finished
        folding = snapshot_store(store)
        self._save_snapshot = None if folding is None else folding.save_snapshot
        """A store keeping fold snapshots: loops save one at turn boundaries when due."""
        self.dev_invariants = dev_invariants
        self.compactor = compactor
        self.collector = collector if collector is not None else CollectorPolicy()
        self.hooks = HookRegistry()
        self._loops: dict[str, LoopActor] = {}
        self.budgets = Budgets(store, self._loops)
        """Budget accounts of the live agents (docs/budgets.md)."""
        self._leases: dict[str, Any] = {}
        self._default_provider = default_provider
        self._closing = False
        self._checked: dict[str, InvariantCheckedProvider] = {}
        self.providers: dict[str, Provider] = {}
        for name, provider in providers.items():
            if tracing is not None:
                provider = tracing.wrap(provider)
            if dev_invariants:
                checked = InvariantCheckedProvider(provider, self._session_of)
                self._checked[name] = checked
                self.providers[name] = checked
            else:
                self.providers[name] = provider
        if tracing is not None:
            tracing.attach(self)

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        store: str | Store = "memory:",
        provider: Provider | None = None,
        *,
        providers: Mapping[str, Provider] | None = None,
        dev_invariants: bool = False,
        compactor: Compactor | None = None,
        compaction: bool = True,
        telemetry: TelemetrySetting = None,
        collector: CollectorPolicy | None = None,
        mcp: Mapping[str, McpServer] | None = None,
    ) -> AsyncIterator[Runtime]:
        """Open a runtime: `async with Runtime.open(...) as rt`.

        `store` is a URL (`memory:`, `sqlite:PATH`, `jsonl:DIR`) or a `Store`; `provider`
        becomes the default, `providers` adds named ones (an agent picks one with
        `AgentOptions.provider`). `dev_invariants` checks every loop-built request against
        a replay of the log before it is sent. `compactor`/`compaction` choose the
        compaction gate (on by default). `telemetry`: OpenTelemetry spans
        (runtime/host/telemetry.py); by default on when opentelemetry-api is importable, so the
        global tracer provider decides. `collector`: what the runtime does to Python's
        cyclic garbage collector while it is open (`CollectorPolicy`; by default nothing —
        `CollectorPolicy.many_agents()` for thousands of agents, docs/performance.md).
        `mcp`: MCP servers by name (`McpStdio`, `McpHttp`; docs/mcp.md), one connection
        each, opened on first use and closed with the runtime.
        Leaving the block disposes every agent (running turns end `disposed`), flushes and
        closes the store; errors come out as plain typed exceptions.
        """
        policy = _collector_policy(collector)
        mcp_servers = check_servers(mcp)
        tracing = open_tracing(telemetry)
        all_providers, default_name = _named_providers(provider, providers)
        store_obj = open_store(store) if isinstance(store, str) else store
        if compactor is None and compaction:
            compactor = CompactionActor()
        codec = CodecActor(store_obj, after_write=policy.after_flush())
        restore_collector = policy.apply()
        try:
            async with _plain_errors(), trio.open_nursery() as services:
                # The store writer outlives an outer cancellation: loops closing their turns
                # during shutdown still need it; `_shutdown` stops it explicitly.
                await services.start(_shielded(codec.run))
                try:
                    async with Supervisor.open() as supervisor, trio.open_nursery() as owned:
                        if isinstance(compactor, CompactionActor):
                            _spawn_compaction(supervisor, compactor)
                        runtime = cls(
                            supervisor=supervisor,
                            owned_work=owned,
                            store=store_obj,
                            codec=codec,
                            providers=all_providers,
                            default_provider=default_name,
                            dev_invariants=dev_invariants,
                            compactor=compactor,
                            tracing=tracing,
                            collector=collector,
                        )
                        runtime.mcp = McpServers(mcp_servers, owned, runtime.hooks)
                        for provider in all_providers.values():
                            await _open_provider(provider)
                        try:
                            yield runtime
                        finally:
                            with trio.CancelScope(shield=True):
                                await runtime._dispose_all()
                            owned.cancel_scope.cancel()
                finally:
                    with trio.CancelScope(shield=True):
                        try:
                            await codec.aclose()
                        finally:
                            for provider in all_providers.values():
                                await _close_provider(provider)
                    services.cancel_scope.cancel()
        finally:
            try:
                with trio.CancelScope(shield=True):
                    await store_obj.close()
            finally:
                restore_collector()  # a store that fails to close must not keep the freeze

    # ------------------------------------------------------------------ listeners

    def on(self, name: str, listener: Listener) -> Unsubscribe:
        """A runtime-wide listener (runs before agent listeners); returns an unsubscribe."""
        return self.hooks.on(name, listener)

    # ------------------------------------------------------------------ registry

    def get(self, agent_id: str) -> Agent | None:
        """The live agent of session `agent_id` in this runtime, or None."""
        loop = self._loops.get(agent_id)
        return loop.agent if loop is not None else None

    @property
    def agents(self) -> tuple[Agent, ...]:
        """Every live agent of this runtime."""
        return tuple(loop.agent for loop in self._loops.values())

    async def list_sessions(self) -> tuple[SessionMeta | DamagedSession, ...]:
        """Every session in the store, live or not: its meta, or a `DamagedSession` in its
        place when its record cannot be read."""
        return await self.store.list()

    @property
    def invariant_checks(self) -> int:
        """How many requests the dev invariant has checked and passed."""
        return sum(checked.checks_passed for checked in self._checked.values())

    def _session_of(self, session_id: str) -> Session:
        return self._loops[session_id].session

    def provider_for(self, options: AgentOptions) -> Provider:
        """The provider `options` names (or the default); ProviderNotConfigured if none."""
        name = options.provider or self._default_provider
        if name is None or name not in self.providers:
            known = ", ".join(sorted(self.providers)) or "none"
            raise ProviderNotConfigured(
                f"no provider named {name!r} in this runtime (configured: {known})"
            )
        return self.providers[name]

    # ------------------------------------------------------------------ lifecycle

    async def spawn(self, options: AgentOptions, session_id: str | None = None) -> Agent:
        """A new agent on a new session."""
        self._refuse_closing()
        session_id = new_session_id() if session_id is None else check_session_id(session_id)
        provider = self.provider_for(options)
        self._refuse_live(session_id)
        await self.mcp.check(options)
        self.budgets.check(options, self.provider_for(options).name)
        meta = SessionMeta(session_id, labels=labels_with_budget(options))
        lease = self._claim(session_id)
        try:
            await self.store.create(meta)
        except BaseException:
            lease.release()
            raise
        return await self._start(Session(meta), options, provider, lease, "startup")

    async def resume(self, session_id: str, options: AgentOptions | None = None) -> Agent:
        """A new loop instance on a stored session (repaired on load).

        Without `options`, the model, provider, system prompt and call settings are
        restored from the session's last request header (`AgentOptions.restored`); tools
        are code and are not stored, so a resumed agent has none until given some
        (`agent.reconfigure(tools=...)`).
        """
        self._refuse_closing()
        if options is not None:
            self.provider_for(options)
            await self.mcp.check(options)
            self.budgets.check(options, self.provider_for(options).name)
        self._refuse_live(session_id)
        lease = self._claim(session_id)
        try:
            with gc_paused():
                session = await load_stored(self.store, session_id, lease=lease)
                options = options or _stored_options(session)
            provider = self.provider_for(options)
            await self.budgets.preload(session, options)
        except BaseException:
            lease.release()
            raise
        return await self._start(session, options, provider, lease, "resume")

    async def fork(
        self,
        session_id: str,
        boundary: int | None = None,
        child_id: str | None = None,
        options: AgentOptions | None = None,
    ) -> Agent:
        """A child agent seeded with the source's events up to `boundary` (a turn/end)."""
        self._refuse_closing()
        source_loop = self._loops.get(session_id)
        if source_loop is None:
            return await self._fork_stored(session_id, boundary, child_id, options)
        options = options or source_loop.options
        provider = self.provider_for(options)
        await self.mcp.check(options)
        self.budgets.check(options, self.provider_for(options).name)
        if child_id is not None:
            await self._refuse_existing(child_id)  # the child id before the boundary (§5)
        # Fork first, then flush: the flush covers every event the child's seed holds, even
        # if the source appends more while it runs.
        child = source_loop.session.fork(boundary, child_id)
        await source_loop.flush()
        await self._refuse_existing(child.id)
        lease = self._claim(child.id)
        try:
            assert child.meta.seed_length is not None
            await self.store.fork(session_id, child.meta.seed_length - 1, child.id)
        except BaseException:
            lease.release()
            raise
        return await self._start(child, options, provider, lease, "fork")

    def _claim(self, session_id: str) -> Any:
        """The store's writer lease. A durable store's lease holds one lock-file descriptor
        per live session, so thousands of agents outgrow a 1024 soft fd limit: on EMFILE the
        soft limit is raised to the hard limit once (as Go's runtime does) and the claim
        retried; past the hard limit the error says what ran out."""
        try:
            return self.store.claim(session_id)
        except StoreError as exc:
            if not _out_of_fds(exc):
                raise
            if not _raise_fd_limit():
                raise StoreError(
                    f"cannot claim session {session_id!r}: out of file descriptors "
                    f"({len(self._loops)} live agents each hold a writer-lease lock file; "
                    "raise `ulimit -n`)"
                ) from exc
        return self._claim(session_id)

    async def _fork_stored(
        self,
        session_id: str,
        boundary: int | None,
        child_id: str | None,
        options: AgentOptions | None,
    ) -> Agent:
        """Fork a session no agent here owns (it may be live in another process)."""
        if child_id is not None and child_id in self._loops:
            raise SessionForkError(ErrorCode.SESSION_ALREADY_EXISTS, f"session {child_id!r} exists")
        point = await fork_point(self.store, session_id, boundary, child_id)
        seeded = point.seeded
        if options is None:
            # The options come from the seed's header: settle them (and refuse a seed
            # without one) before the store records the child, so a refusal creates nothing.
            if seeded is None:
                parent = await load_session(self.store, session_id, repair=False)
                seeded = parent.fork(point.boundary, point.child_id)
            options = _stored_options(seeded)
        provider = self.provider_for(options)
        await self.mcp.check(options)
        self.budgets.check(options, self.provider_for(options).name)
        await self._refuse_existing(point.child_id)
        lease = self._claim(point.child_id)
        try:
            await self.store.fork(session_id, point.boundary, point.child_id)
            child = seeded
            if child is None:
                child = await load_stored(self.store, point.child_id, lease=lease)
        except BaseException:
            lease.release()
            raise
        return await self._start(child, options, provider, lease, "fork")

    async def _refuse_existing(self, child_id: str) -> None:
        if child_id in self._loops or await self.store.exists(child_id):
            raise SessionForkError(ErrorCode.SESSION_ALREADY_EXISTS, f"session {child_id!r} exists")

    def _refuse_closing(self) -> None:
        if self._closing:
            raise RuntimeClosed("the runtime is shutting down; it starts no more agents")

    def run_owned(self, owner: Agent, work: Callable[[], Awaitable[None]]) -> None:
        """Run `work` in the background as part of `owner`'s work: cancelling (without
        `keep_inbox`) or disposing the owner cancels it. Used by background subagents."""
        loop = self._loops.get(owner.id)
        if loop is None:
            raise AgentClosed(f"agent {owner.id!r} is not live in this runtime")
        scope = trio.CancelScope()
        release = loop.own(scope)

        async def run() -> None:
            try:
                with scope:
                    await work()
            except Exception:
                # Owned work fails alone, like a supervised actor: reported, contained.
                log.exception("background work of agent %s failed", owner.id)
            finally:
                release()

        self._owned_work.start_soon(run)

    def _refuse_live(self, session_id: str) -> None:
        if session_id in self._loops:
            raise SessionBusy(f"session {session_id!r} is owned by a live agent in this runtime")

    async def _start(
        self,
        session: Session,
        options: AgentOptions,
        provider: Provider,
        lease: Any,
        origin: SessionStartKind,
    ) -> Agent:
        if self._closing:
            # Shutdown began while this spawn/resume/fork awaited the store: a loop started
            # now would outlive the codec and crash on its first flush.
            lease.release()
            raise RuntimeClosed("the runtime is shutting down; it starts no more agents")
        loop = LoopActor(
            session=session,
            options=options,
            provider=provider,
            global_hooks=self.hooks,
            persist=self._persist,
            persist_now=self._persist_now,
            compactor=self.compactor,
            origin=origin,
            on_finished=self._on_loop_finished,
            save_snapshot=self._save_snapshot,
        )
        self._loops[session.id] = loop
        self._leases[session.id] = lease
        self.budgets.attach(loop, options)
        mailbox = self._supervisor.spawn(
            f"loop:{session.id}", loop.run, capacity=options.inbox_capacity
        )
        loop.attach(mailbox)
        if origin != "startup":
            # Calls a crash left in doubt are reconciled before anything else runs.
            queue_reconciliation(loop)
        # Told here, in the caller's task, before the agent is handed out: the loop's task
        # may not have run yet (waiting for its first step took a random one or two
        # scheduler rounds), and nothing a listener can do with the agent needs it to.
        loop.notify("agent/session-start", origin)
        # One schedule point, as every spawn has one, so a loop of spawns lets the loops
        # run. Not a cancel point: once spawned, the loop is registered and must reach its
        # caller, who owns disposing it; a cancel here would leave a live agent nobody holds.
        await trio.lowlevel.cancel_shielded_checkpoint()
        self.collector.after_start()
        return loop.agent

    def _loop_finished(self, loop: LoopActor) -> None:
        self.collector.after_finish()
        self.budgets.detach(loop)
        if self._loops.get(loop.session.id) is loop:
            del self._loops[loop.session.id]
            lease = self._leases.pop(loop.session.id, None)
            if lease is not None:
                lease.release()

    async def _dispose_all(self) -> None:
        self._closing = True
        while self._loops:
            async with trio.open_nursery() as nursery:
                for loop in list(self._loops.values()):
                    nursery.start_soon(loop.dispose)


def _stored_options(session: Session) -> AgentOptions:
    header = session.header()
    if header is None:
        raise ValueError(
            f"session {session.id!r} has no stored request header to restore options from; "
            "pass options"
        )
    labels, budget = stored_budget(session.meta.labels)
    return AgentOptions.restored(header, labels=labels, budget=budget)


def _out_of_fds(exc: BaseException) -> bool:
    cause = exc.__cause__
    return isinstance(cause, OSError) and cause.errno == errno.EMFILE


def _raise_fd_limit() -> bool:
    """Raise the soft RLIMIT_NOFILE to the hard limit; whether it went up."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft >= hard:
        return False
    target = hard if hard != resource.RLIM_INFINITY else max(soft * 4, 65536)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (OSError, ValueError):
        return False
    log.info("raised the soft open-file limit from %d to %d for writer leases", soft, target)
    return True


def _shielded(
    run: Callable[..., Awaitable[None]],
) -> Callable[..., Awaitable[None]]:
    async def shielded(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with trio.CancelScope(shield=True):
            await run(task_status=task_status)

    return shielded


async def _open_provider(provider: Provider) -> None:
    """HTTP adapters build their client (and its SSL context) off the event loop here, so
    no first request blocks the trio thread."""
    opener = getattr(provider, "open", None)
    if opener is not None:
        await opener()


async def _close_provider(provider: Provider) -> None:
    """HTTP adapters pool connections; close them when the runtime ends."""
    inner = getattr(provider, "inner", provider)
    aclose = getattr(inner, "aclose", None)
    if aclose is not None:
        await aclose()


@asynccontextmanager
async def _plain_errors() -> AsyncIterator[None]:
    """Public API raises plain typed exceptions: unwrap nested nurseries' single-error
    groups down to the one error."""
    try:
        yield
    except BaseExceptionGroup as group:
        leaf = sole_error(group)
        if leaf is group:
            raise
        raise leaf from None
