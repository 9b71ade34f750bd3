"""`SessionService`: what the HTTP API does with the runtime, apart from HTTP — sessions by
profile, resume on demand, one run per session, idempotency keys, and the drain
(docs/spec/runtime.md §15). It speaks in the shapes of `schemas`; `app` only maps HTTP."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any
from weakref import WeakKeyDictionary

import trio
from attrs import evolve

from ..control.handle import Agent
from ..control.options import AgentOptions
from ..errors import (
    AgentBusy,
    ApprovalsPending,
    SessionBusy,
    SessionExists,
    SessionNotFound,
    VerificationFailed,
)
from ..host.runtime import Runtime
from ..log.ledger import Ledger, LedgerFold
from ..log.rebuild import RebuiltRequest, check_digest, rebuild_request
from ..log.session import Session
from ..log.verify import verify_log
from ..model.hook_values import TurnResult
from ..model.messages import Content
from ..stores.ids import check_session_id
from ..stores.loading import load_session
from ..stores.spend import tree_spend
from .bodies import (
    Cancel,
    CreateSession,
    Fork,
    Inject,
    Resume,
    SendMessage,
)
from .drain import Drain
from .durable_keys import DurableKeys, ReplayFlag, SendKeys
from .errors import InvalidRequestBody, UnknownProfile
from .idempotency import IdempotencyKeys, KeyEntry
from .outcomes import outcome_from_log, turn_outcome
from .profiles import PROFILE_LABEL, ProfileRegistry
from .reads import session_detail, session_page
from .runs import Ticket, TurnLine
from .schemas import (
    CancelOutcome,
    ForkOutcome,
    Health,
    ProfileInfo,
    ProfileList,
    ResumeOutcome,
    SessionDetail,
    SessionPage,
    SessionState,
    SessionStatus,
    TurnOutcome,
    VerifyOutcome,
)

log = logging.getLogger("actorloop.service")

SHUTDOWN_REASON = "server shutting down"
MAX_PAGE = 1000


class SessionService:
    """The service over one `Runtime`. Open it with `SessionService.open(runtime, profiles)`:
    it owns the tasks of sends that do not wait (cancelled, so their turns end `aborted`,
    if the service closes before they end)."""

    def __init__(
        self,
        runtime: Runtime,
        profiles: ProfileRegistry,
        nursery: trio.Nursery,
        *,
        keys: IdempotencyKeys[TurnOutcome] | None = None,
        durable: DurableKeys | None = None,
    ) -> None:
        self.runtime = runtime
        self.profiles = profiles
        self.keys: IdempotencyKeys[TurnOutcome] = keys or IdempotencyKeys()
        """The keys whose requests run in this process (who waits for which turn)."""
        self.durable = durable or DurableKeys(runtime.store, self.keys.ttl)
        """The keys in the store: what a retry after a restart or a failover finds."""
        self.send_keys = SendKeys(self.keys, self.durable)
        self.drain = Drain()
        self._nursery = nursery
        self._options = {profile.name: profile.build(runtime) for profile in profiles}
        self._live_profile: dict[str, str] = {}
        self._lines: dict[str, TurnLine] = {}
        self._resuming: dict[str, trio.Lock] = {}
        self._generation: dict[str, int] = {}
        self._started = trio.lowlevel.ParkingLot()
        self._ledgers: WeakKeyDictionary[Session, LedgerFold] = WeakKeyDictionary()
        self.follow_durable: Callable[[str, int], Awaitable[None]] | None = None
        """Set by routing (several instances on one store): wait until a session's durable
        log holds more than the given number of events."""
        self._unsubscribe = (
            runtime.on("agent/session-start", self._session_started),
            runtime.on("agent/status", self._status_changed),
        )

    @classmethod
    @asynccontextmanager
    async def open(
        cls, runtime: Runtime, profiles: ProfileRegistry, **kwargs: Any
    ) -> AsyncIterator[SessionService]:
        """The service for the life of the block."""
        async with trio.open_nursery() as nursery:
            service = cls(runtime, profiles, nursery, **kwargs)
            try:
                yield service
            finally:
                for unsubscribe in service._unsubscribe:
                    unsubscribe()
                nursery.cancel_scope.cancel()

    @property
    def nursery(self) -> trio.Nursery:
        """Where work that outlives its request runs (sends nobody awaits, detached UI
        stream turns); cancelled when the service closes."""
        return self._nursery

    # ------------------------------------------------------------------ listeners

    def _session_started(self, agent: Agent, _kind: str) -> None:
        self._generation[agent.id] = self._generation.get(agent.id, 0) + 1
        self._started.unpark_all()

    def _status_changed(self, agent: Agent, status: str) -> None:
        if status in ("disposed", "failed") and self.runtime.get(agent.id) in (None, agent):
            self._live_profile.pop(agent.id, None)

    def generation(self, session_id: str) -> int:
        """How many loop instances have started on `session_id` in this runtime."""
        return self._generation.get(session_id, 0)

    async def wait_for_agent(
        self, session_id: str, generation: int, durable: int | None = None
    ) -> None:
        """Wait until a loop instance newer than `generation` starts on `session_id` — or,
        with `durable` and another instance able to run it (`follow_durable`, set by
        routing), until its durable log holds more than `durable` events."""
        follow = self.follow_durable
        if follow is None or durable is None:
            await self._local_agent(session_id, generation)
            return
        async with trio.open_nursery() as nursery:

            async def first(wait: Awaitable[None]) -> None:
                await wait
                nursery.cancel_scope.cancel()

            nursery.start_soon(first, self._local_agent(session_id, generation))
            nursery.start_soon(first, follow(session_id, durable))

    async def _local_agent(self, session_id: str, generation: int) -> None:
        while self.generation(session_id) == generation:
            await self._started.park()

    # ------------------------------------------------------------------ lookups

    def status_of(self, session_id: str) -> SessionStatus:
        """The live agent's status, or `stored`."""
        agent = self.runtime.get(session_id)
        return agent.status if agent is not None else "stored"

    def live_profile(self, session_id: str) -> str | None:
        """The profile the live agent of `session_id` runs, if the service started it."""
        return self._live_profile.get(session_id) if self.runtime.get(session_id) else None

    async def session(self, session_id: str) -> Session:
        """The live session, or the durable part of the stored one (read-only, no lease)."""
        check_session_id(session_id)
        agent = self.runtime.get(session_id)
        if agent is not None:
            return agent.session
        return await load_session(self.runtime.store, session_id, repair=False, folded=True)

    async def require(self, session_id: str) -> None:
        """Raise `SessionNotFound` unless `session_id` is live or stored."""
        check_session_id(session_id)
        if self.runtime.get(session_id) is None and not await self.runtime.store.exists(session_id):
            raise SessionNotFound(session_id)

    def _line(self, session_id: str) -> TurnLine:
        line = self._lines.get(session_id)
        if line is None:
            line = self._lines[session_id] = TurnLine()
        return line

    def _options_for(self, profile: str, changes: Mapping[str, Any]) -> AgentOptions:
        options = self._options[self.profiles.get(profile).name]
        labels = {**options.labels, PROFILE_LABEL: {"profile": profile, "options": dict(changes)}}
        return evolve(options, **changes, labels=labels)

    def _attach(self, agent: Agent, profile: str) -> Agent:
        for name, listener in self.profiles.get(profile).listeners:
            agent.on(name, listener)
        self._live_profile[agent.id] = profile
        return agent

    async def _stored_profile(self, session_id: str) -> tuple[str, dict[str, Any]]:
        """The profile (and option overrides) a stored session was created with: its own
        label, else its nearest ancestor's (a fork child has none), else the default."""
        seen: set[str] = set()
        current: str | None = session_id
        while current is not None and current not in seen:
            seen.add(current)
            try:
                meta = (await load_session(self.runtime.store, current, repair=False)).meta
            except SessionNotFound:
                if current == session_id:
                    raise
                break
            label = meta.labels.get(PROFILE_LABEL)
            if isinstance(label, Mapping) and isinstance(label.get("profile"), str):
                name = label["profile"]
                try:
                    self.profiles.get(name)
                except UnknownProfile:
                    raise UnknownProfile(
                        f"session {session_id!r} runs profile {name!r}, which this server "
                        "does not have; resume it with an explicit profile"
                    ) from None
                options = label.get("options")
                return name, dict(options) if isinstance(options, Mapping) else {}
            current = meta.parent_session
        return self.profiles.default, {}

    async def live_agent(self, session_id: str, profile: str | None = None) -> Agent:
        """The live agent of `session_id`, resuming the stored session on demand (with its
        recorded profile, or `profile`)."""
        check_session_id(session_id)
        agent = self.runtime.get(session_id)
        if agent is not None:
            return agent
        async with self._one_at_a_time(session_id):
            agent = self.runtime.get(session_id)
            if agent is not None:
                return agent
            self.drain.refuse()
            if profile is None:
                name, changes = await self._stored_profile(session_id)
            else:
                name, changes = self.profiles.get(profile).name, {}
            agent = await self.runtime.resume(session_id, self._options_for(name, changes))
            return self._attach(agent, name)

    @asynccontextmanager
    async def _one_at_a_time(self, session_id: str | None) -> AsyncIterator[None]:
        """Resume, create and fork-into one session id one request at a time: a second
        concurrent create sees the first's session (SESSION_ALREADY_EXISTS), not its lease
        (SESSION_BUSY). None (an id the runtime picks) needs no turn."""
        if session_id is None:
            yield
            return
        lock = self._resuming.setdefault(session_id, trio.Lock())
        try:
            async with lock:
                yield
        finally:
            if not lock.locked() and lock.statistics().tasks_waiting == 0:
                self._resuming.pop(session_id, None)

    # ------------------------------------------------------------------ sessions

    async def create(self, request: CreateSession) -> SessionState:
        """Spawn an agent of `request.profile` on a new session."""
        self.drain.refuse()
        profile = self.profiles.get(request.profile).name
        options = self._options_for(profile, request.options.changes())
        async with self._one_at_a_time(request.session_id):
            try:
                agent = await self.runtime.spawn(options, session_id=request.session_id)
            except SessionBusy:
                if request.session_id is not None and self.runtime.get(request.session_id):
                    raise SessionExists(request.session_id) from None
                raise
            self._attach(agent, profile)
        return SessionState(agent.id, agent.status)

    async def list(self, limit: int = 100, cursor: str | None = None) -> SessionPage:
        """Stored sessions in id order after `cursor`, at most `limit`."""
        if isinstance(limit, bool) or not 1 <= limit <= MAX_PAGE:
            raise InvalidRequestBody(f"limit must be 1..{MAX_PAGE}, got {limit}")
        return session_page(await self.runtime.list_sessions(), limit, cursor, self.runtime.get)

    async def detail(self, session_id: str) -> SessionDetail:
        """Status, lineage, turns, the folded header, usage and spend of one session."""
        session = await self.session(session_id)
        own = self._ledger(session)
        below = await tree_spend(self.runtime.store, session_id, include_root=False)
        return session_detail(
            session,
            self.status_of(session_id),
            live=self.runtime.get(session_id) is not None,
            live_profile=self.live_profile(session_id),
            spend=own.total,
            subtree=own.total + below.total,
        )

    def _ledger(self, session: Session) -> Ledger:
        """What `session` itself spent, folded over the events since the last read of it
        (a live session's log only grows): a read costs the same at any history length."""
        fold = self._ledgers.get(session)
        if fold is None:
            fold = self._ledgers[session] = LedgerFold()
            fold.folded = session.meta.seed_length or 0  # the parent's: charged there
        fold.add(session.events_since(fold.folded))
        return fold.ledger()

    async def dispose(self, session_id: str) -> SessionState:
        """Dispose the live agent (its running turn ends `disposed`); the log stays."""
        await self.require(session_id)
        self._discard_line(session_id)
        agent = self.runtime.get(session_id)
        if agent is None:
            return SessionState(session_id, "stored")
        await agent.dispose()
        return SessionState(session_id, agent.status)

    # ------------------------------------------------------------------ turns

    async def send(
        self,
        session_id: str,
        request: SendMessage,
        *,
        started: Callable[[int], None] | None = None,
        replay: ReplayFlag | None = None,
    ) -> TurnOutcome | SessionState:
        """One turn with `request.content` (docs/spec/runtime.md §15.3, §15.4): its outcome
        when `wait`, else the session's state once the send is accepted. `started` is told
        the seq the turn's events begin at, once the send holds the run (the UI streams). A
        send whose key already has an outcome (kept by the store) gets it, and `replay` says
        so."""
        self.drain.refuse()
        flag = replay or ReplayFlag()
        while True:
            agent = await self.live_agent(session_id)
            entry: KeyEntry[TurnOutcome] | None = None
            if request.idempotency_key is not None:
                begun = await self.send_keys.begin(
                    session_id, request, agent.session.events, flag, self.status_of
                )
                if begun is None:
                    continue  # the key has no turn (its first request started none): claim
                if not isinstance(begun, KeyEntry):
                    return begun  # the key's outcome: a replay
                entry = begun
            if agent.pending_approvals() and not request.reject_pending:
                if entry is not None:
                    await self.send_keys.forget(entry)
                raise ApprovalsPending(
                    f"session {session_id!r} has calls waiting for a decision: decide them "
                    '(POST .../approvals/{call_id}) or send with "reject_pending": true'
                )
            line = self._line(session_id)
            if request.if_busy == "reject" and (line.busy or agent.status == "running"):
                if entry is not None:
                    await self.send_keys.forget(entry)
                raise AgentBusy(
                    f"session {session_id!r} has a turn running or queued; wait for its "
                    'turn/end, steer or cancel it, or send with "if_busy": "queue"'
                )
            ticket = line.enter()
            if request.wait:
                return await self._run_turn(
                    session_id, request.content, ticket, entry, started, request.reject_pending
                )
            self._nursery.start_soon(
                self._run_in_background,
                session_id,
                request.content,
                ticket,
                entry,
                request.reject_pending,
            )
            return SessionState(session_id, "running")

    async def _run_turn(
        self,
        session_id: str,
        content: Content,
        ticket: Ticket,
        entry: KeyEntry[TurnOutcome] | None,
        started: Callable[[int], None] | None = None,
        reject_pending: bool = False,
    ) -> TurnOutcome:
        line = self._line(session_id)
        try:
            if not ticket.ready.is_set():
                # The first in line goes on at once: a set Event's wait would still yield,
                # one more resume of the request's whole ASGI await chain per send.
                await ticket.ready.wait()
            if ticket.discarded:
                outcome = turn_outcome(session_id, TurnResult(None, "discarded"))
            else:
                self.drain.refuse()
                agent = await self.live_agent(session_id)
                await agent.wait_idle()
                first_seq = len(agent.session)
                if started is not None:
                    started(first_seq)
                try:
                    result = await agent.send(content, reject_pending=reject_pending)
                except trio.Cancelled:
                    # The caller went away: its turn was ended (caller cancellation); the
                    # key remembers how, from the log.
                    if entry is not None:
                        await self.send_keys.settle(
                            entry,
                            outcome_from_log(session_id, agent.session.events_since(first_seq)),
                        )
                    raise
                outcome = turn_outcome(session_id, result)
            if entry is not None:
                await self.send_keys.settle(entry, outcome)
            return outcome
        finally:
            if entry is not None and entry.running:
                await self.send_keys.forget(entry)
            line.leave(ticket)
            if not line.busy and self._lines.get(session_id) is line:
                del self._lines[session_id]

    async def _run_in_background(
        self,
        session_id: str,
        content: Content,
        ticket: Ticket,
        entry: KeyEntry[TurnOutcome] | None,
        reject_pending: bool = False,
    ) -> None:
        try:
            await self._run_turn(session_id, content, ticket, entry, reject_pending=reject_pending)
        except Exception as exc:
            # Nobody awaits this send: what went wrong goes to the log (and the session's
            # events show whether a turn ran); one failed send never takes the service down.
            log.warning("send to session %s (not awaited) failed: %r", session_id, exc)

    def _discard_line(self, session_id: str) -> None:
        line = self._lines.get(session_id)
        if line is not None:
            line.discard_waiting()

    async def steer(self, session_id: str, content: Content) -> SessionState:
        """Redirect the running turn (on an idle agent: start one)."""
        self.drain.refuse()
        agent = await self.live_agent(session_id)
        agent.steer(content)
        return SessionState(session_id, agent.status)

    async def inject(self, session_id: str, request: Inject) -> SessionState:
        """Add durable context from the plugin `request.source`."""
        self.drain.refuse()
        agent = await self.live_agent(session_id)
        agent.inject(request.content, source=request.source, meta=request.meta)
        return SessionState(session_id, agent.status)

    async def cancel(self, session_id: str, request: Cancel) -> CancelOutcome:
        """Cancel the running turn; without `keep_inbox` also every queued send."""
        await self.require(session_id)
        agent = self.runtime.get(session_id)
        line = self._lines.get(session_id)
        queued = 0 if request.keep_inbox or line is None else line.discard_waiting()
        if agent is None:
            return CancelOutcome(session_id, "stored", queued > 0)
        had_work = agent.status == "running" or queued > 0
        agent.cancel(request.reason, keep_inbox=request.keep_inbox)
        return CancelOutcome(session_id, agent.status, had_work)

    async def fork(self, session_id: str, request: Fork) -> ForkOutcome:
        """A child seeded with the session up to `request.boundary` (a turn/end)."""
        self.drain.refuse()
        check_session_id(session_id)
        if request.child_id is not None:
            check_session_id(request.child_id)
        options: AgentOptions | None = None
        if request.profile is not None:
            profile = self.profiles.get(request.profile).name
            options = self._options_for(profile, {})
        elif self.runtime.get(session_id) is not None:
            profile = self.live_profile(session_id) or self.profiles.default
        else:
            profile, changes = await self._stored_profile(session_id)
            options = self._options_for(profile, changes)
        async with self._one_at_a_time(request.child_id):
            child = await self.runtime.fork(session_id, request.boundary, request.child_id, options)
            self._attach(child, profile)
        meta = child.session.meta
        assert meta.parent_session is not None and meta.seed_length is not None
        return ForkOutcome(child.id, child.status, meta.parent_session, meta.seed_length)

    async def resume(self, session_id: str, request: Resume) -> ResumeOutcome:
        """Start a loop instance on the stored session (no-op if it is live already)."""
        self.drain.refuse()
        check_session_id(session_id)
        agent = self.runtime.get(session_id)
        if agent is not None:
            live = self.live_profile(session_id) or self.profiles.default
            if request.profile is not None and request.profile != live:
                raise AgentBusy(
                    f"session {session_id!r} is live with profile {live!r}; "
                    f"DELETE it first to resume it with {request.profile!r}"
                )
            return ResumeOutcome(session_id, agent.status, live, False)
        if request.profile is not None:
            self.profiles.get(request.profile)
        agent = await self.live_agent(session_id, request.profile)
        return ResumeOutcome(session_id, agent.status, self.live_profile(session_id) or "", True)

    # ------------------------------------------------------------------ the log

    async def rebuilt_request(self, session_id: str, seq: int) -> RebuiltRequest:
        """The exact request the `assistant/message` at `seq` answered, digest checked."""
        session = await self.session(session_id)
        return check_digest(rebuild_request(session_id, session.events, seq))

    async def verify(self, session_id: str) -> VerifyOutcome:
        """Offline verification of the session's log (structure and every digest)."""
        session = await self.session(session_id)
        try:
            report = verify_log(session.meta, session.events)
        except VerificationFailed as exc:
            return VerifyOutcome(
                session_id, False, len(session), session.last_turn, 0, 0, exc.seq, exc.problem
            )
        return VerifyOutcome(
            session_id,
            True,
            report.events,
            report.turns,
            report.requests_checked,
            report.requests_without_digest,
        )

    # ------------------------------------------------------------------ the service

    def health(self) -> Health:
        """`ok`, or `draining` once the drain began."""
        return Health(
            "draining" if self.drain.draining else "ok",
            len(self.runtime.agents),
            self.drain.open_streams,
        )

    def profile_list(self) -> ProfileList:
        """The registered profiles."""
        default = self.profiles.default
        return ProfileList(
            tuple(
                ProfileInfo(
                    name=profile.name,
                    description=profile.description,
                    model=self._options[profile.name].model,
                    provider=self._options[profile.name].provider,
                    tools=tuple(tool.name for tool in self._options[profile.name].tools),
                    default=profile.name == default,
                )
                for profile in self.profiles
            )
        )

    async def shutdown(self, grace: float) -> None:
        """The drain: take no new work, stop listening, end the event streams and the sends
        still waiting in line (`discarded`); give running turns `grace` seconds, then
        cancel them (they end `aborted`, reason "server shutting down")."""
        self.drain.begin()
        for line in self._lines.values():
            line.discard_waiting()
        with self.drain.grace(grace):
            await self._all_idle()
        busy = [agent for agent in self.runtime.agents if agent.status == "running"]
        if busy:
            log.warning("drain: cancelling %d running turn(s) after the grace period", len(busy))
            for agent in busy:
                agent.cancel(SHUTDOWN_REASON)
        await self._all_idle()

    async def _all_idle(self) -> None:
        while True:
            busy = [agent for agent in self.runtime.agents if agent.status == "running"]
            if not busy:
                return
            for agent in busy:
                await agent.wait_idle()
