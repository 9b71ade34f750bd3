"""Routing between `actorloop serve` instances sharing a PostgreSQL store: a request for a
session another live instance owns is handed to the owner (a durable inbox row and a NOTIFY
carrying the request, polling as the fallback) and its answer comes back to the caller (in
the answer's NOTIFY, or read from the row); a request for an unowned or expired session is
served here, which claims it (replay, then run). Event streams of sessions live elsewhere
follow the durable log (docs/deployment.md, docs/spec/persistence.md §10, decision 0020).

`RoutingGate` is the ASGI side (which request goes where); `Router` owns the inbox work:
the listener thread delivers each notification for this node to the trio thread (a request
starts at once, an answer wakes its waiter), and one task per node polls every `poll_s` for
what no notification brought (rows to take, answers to read, cancels to pass on, owners
gone, heads of followed sessions) and forgets the rows whose story is over. Each request
taken from the inbox runs through this instance's own app as if it had arrived here.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable

import orjson
import trio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..control.handle import Agent
from ..errors import ActorloopError, InvalidSessionId, sole_error
from ..stores.ids import check_session_id
from ..stores.postgres.inbox import Handed, Inbox, Listener, Notice, RowState
from ..stores.postgres.store import PostgresStore
from .errors import OwnerLost, response_for
from .service import SessionService

log = logging.getLogger("actorloop.service")

FORWARDED = "actorloop.forwarded"
"""ASGI scope extension marking a request taken from the inbox (never handed on again)."""

_ROUTED = re.compile(
    r"^/v1/sessions/([^/]+)(?:/(messages|steer|inject|cancel|resume|approvals/[^/]+))?$"
)
"""The routes that act on (or read the status of) a live agent; the rest read the durable
log, which every instance can (events, requests, verify), or create a session (fork)."""
_BARE_METHODS = ("GET", "DELETE")
"""What is routed on `/v1/sessions/{id}` itself; every action below it is a POST."""


def routed_session(scope: Scope) -> str | None:
    """The session a request must reach the owner of, or None (served where it arrived)."""
    if scope.get("type") != "http" or FORWARDED in scope.get("extensions", {}):
        return None
    match = _ROUTED.match(scope.get("path", ""))
    if match is None:
        return None
    method = scope.get("method", "GET")
    if method not in (_BARE_METHODS if match.group(2) is None else ("POST",)):
        return None
    return match.group(1)


class _Waiter:
    """A request this node handed to another: woken whenever its row state is read."""

    __slots__ = ("changed", "state")

    def __init__(self) -> None:
        self.state: RowState | None = None
        self.changed = trio.Event()


class Router:
    """The inbox work of one serve instance (see the module docstring). Run it with
    `nursery.start(router.run)`; `attach(app)` names the app forwarded requests run in."""

    def __init__(self, service: SessionService, store: PostgresStore) -> None:
        self.service = service
        self.store = store
        self.node = store.node
        self.inbox = Inbox(store)
        self.poll_s = store.settings.poll_s
        self._app: ASGIApp | None = None
        self._nursery: trio.Nursery | None = None
        self._waiting: dict[int, _Waiter] = {}
        self._early: dict[int, tuple[RowState, int]] = {}
        self._ticks = 0
        self._handling: dict[int, trio.Event] = {}
        self._following: dict[str, dict[int, trio.Event]] = {}
        self._follow_ids = 0
        self._wake = trio.Event()
        self._finished: list[int] = []
        self._scope = trio.CancelScope()
        self._failing = False

    def gate(self, app: ASGIApp) -> ASGIApp:
        """`app` behind the routing gate (what `create_app(gate=...)` takes)."""
        return RoutingGate(app, self)

    def attach(self, app: ASGIApp) -> None:
        """The app a forwarded request runs through (the routes, below auth and limits)."""
        self._app = app

    # the node's task ---------------------------------------------------------------------

    def stop(self) -> None:
        """End `run` (after the drain: nothing is taken from the inbox any more)."""
        self._scope.cancel()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Heartbeat this node, then listen and poll until `stop()`."""
        self.store.on_fenced(self._fenced)
        await self.store.start_keeper()
        listener = Listener(self.store, self._notified, self.poll_s)
        try:
            with self._scope:
                async with trio.open_nursery() as nursery:
                    self._nursery = nursery
                    # Started once LISTENing: a request handed here from now on is heard.
                    await nursery.start(listener.run)
                    task_status.started()
                    await self._poll()
        finally:
            self._nursery = None  # a notification delivered from now on starts nothing

    async def _poll(self) -> None:
        while True:
            try:
                await self._tick()
            except ActorloopError as exc:
                if not self._failing:
                    log.warning("routing: %s", exc)
                self._failing = True
            else:
                self._failing = False
            with trio.move_on_after(self.poll_s):
                await self._wake.wait()
            self._wake = trio.Event()

    def _notified(self, notice: Notice) -> None:
        """A notification for this node (on the trio thread, from the listener thread)."""
        if self._nursery is None:
            return
        if notice.kind == "request":
            if notice.row_id not in self._handling and not self.service.drain.draining:
                self._start(notice.row_id, notice.handed, taken=False)
        elif notice.kind == "cancel":
            handling = self._handling.get(notice.row_id)
            if handling is not None:
                handling.set()
        elif notice.kind == "answer" and notice.answer is not None:
            waiter = self._waiting.get(notice.row_id)
            if waiter is None:  # its hand-over statement has not returned to trio yet
                self._early[notice.row_id] = (notice.answer, self._ticks)
            else:
                waiter.state = notice.answer
                waiter.changed.set()
        else:  # an answer too large to carry, or a (re)connected listener: read the rows
            self._wake.set()

    def _start(self, row_id: int, handed: Handed | None, *, taken: bool) -> None:
        assert self._nursery is not None
        cancel = self._handling[row_id] = trio.Event()
        self._nursery.start_soon(self._handle, row_id, handed, taken, cancel)

    async def _tick(self) -> None:
        self._ticks += 1
        for row_id in [key for key, (_, tick) in self._early.items() if tick < self._ticks - 1]:
            del self._early[row_id]  # nobody waits for it: its sender went away
        if not self.service.drain.draining:
            for handed in await self.inbox.take(tuple(self._handling)):
                if handed.id not in self._handling:  # else a notification brought it first
                    self._start(handed.id, handed, taken=True)
        if self._waiting:
            asked = tuple(self._waiting)
            states = await self.inbox.states(asked)
            for row_id in asked:
                waiter = self._waiting.get(row_id)
                if waiter is not None and not _answered(waiter.state):
                    waiter.state = states.get(row_id)
                    waiter.changed.set()
        if self._handling:
            for row_id in await self.inbox.cancelled(tuple(self._handling)):
                handling = self._handling.get(row_id)
                if handling is not None:
                    handling.set()
        if self._following:
            heads = await self.inbox.heads(tuple(self._following))
            for session_id, waiters in self._following.items():
                if session_id in heads:
                    for event in waiters.values():
                        event.set()
        if self._finished:
            done, self._finished = self._finished, []
            await self.inbox.forget(done)

    def _fenced(self, session_id: str) -> None:
        """A lease of this node was fenced (its session taken over): its agent stops now,
        so that it shows no longer live and the session's requests are routed."""
        agent = self.service.runtime.get(session_id)
        if agent is not None and self._nursery is not None:
            self._nursery.start_soon(_stop_fenced, agent)

    # handing a request on ----------------------------------------------------------------

    async def served_here(self, session_id: str) -> bool:
        """Whether `session_id` is served here without asking the database: it is live
        here (and still this node's), or not a session id at all (the route answers the
        error). Otherwise `hand` finds out whether another node owns it."""
        try:
            check_session_id(session_id)
        except InvalidSessionId:
            return True
        agent = self.service.runtime.get(session_id)
        if agent is None:
            return False
        if await self.store.owns(session_id):
            return True
        # Taken over while this node was paused or cut off: stop the agent, route.
        await _stop_fenced(agent)
        return False

    async def hand(self, session_id: str, scope: Scope, body: bytes) -> tuple[int, bytes] | None:
        """Hand the request to the live node owning `session_id` and wait for its answer
        (status, JSON body); None when no other node owns it, or the owner died before
        taking it: serve it here (once the session is claimable). OwnerLost when it died
        after taking it."""
        head = orjson.dumps(
            {
                "method": scope["method"],
                "path": scope["path"],
                "query": scope.get("query_string", b"").decode("latin-1"),
                "headers": [
                    [name.decode("latin-1"), value.decode("latin-1")]
                    for name, value in scope.get("headers", ())
                    if name.lower() in (b"content-type", b"last-event-id", b"idempotency-key")
                ],
            }
        )
        while True:
            handed = await self.inbox.hand(session_id, head, body)
            if handed is None:
                return None
            answer = await self._answer_of(session_id, handed)
            if not isinstance(answer, _Back):
                return answer
            # Its owner only lagged (its heartbeat is back, its lease never lapsed): hand
            # the request to it again.

    async def _answer_of(
        self, session_id: str, handed: tuple[int, str]
    ) -> tuple[int, bytes] | _Back | None:
        """The answer to the request in row `handed` (see `hand`); _BACK when it was
        withdrawn from an owner that then came back."""
        row_id, target = handed
        waiter = self._waiting[row_id] = _Waiter()
        early = self._early.pop(row_id, None)
        if early is not None:
            waiter.state = early[0]
            waiter.changed.set()
        try:
            while True:
                await waiter.changed.wait()
                waiter.changed = trio.Event()
                state = waiter.state
                if state is None:
                    raise OwnerLost(f"the request handed to node {target!r} disappeared")
                if state.state == "done":
                    assert state.status is not None and state.response is not None
                    self._finished.append(row_id)  # forgotten by the next poll, in a batch
                    return state.status, state.response
                if state.target_alive:
                    continue
                if state.state == "pending" and await self.inbox.withdraw(row_id):
                    self._finished.append(row_id)
                    if await self._until_claimable(session_id, target):
                        return None
                    return _BACK
                if state.state == "taken":
                    raise OwnerLost(
                        f"node {target!r}, owner of session {session_id!r}, stopped "
                        "answering while handling this request (its heartbeat lapsed: it "
                        "crashed, paused, or lost the database), so the outcome is unknown; "
                        "the session is taken over once its lease expires. Read its events "
                        "to see whether the request took effect, then retry"
                    )
        except BaseException:
            if waiter.state is None or waiter.state.state not in ("done", "withdrawn"):
                with trio.CancelScope(shield=True):
                    try:
                        await self.inbox.cancel(row_id)
                    except ActorloopError as exc:
                        log.warning("routing: could not withdraw request %d: %s", row_id, exc)
            raise
        finally:
            del self._waiting[row_id]

    async def _until_claimable(self, session_id: str, dead: str) -> bool:
        """Wait until the dead node's lease on `session_id` lapsed (True), or the node's
        heartbeat is back (False: it was only slow, and keeps renewing that lease). Lease
        expiries and heartbeats are real time-based events, the database's clock decides
        them: polled."""
        while True:
            owner = await self.store.owner(session_id)
            if owner is None or owner.node != dead or not owner.live:
                return True
            if await self.inbox.alive(dead):
                return False
            await trio.sleep(self.poll_s)

    # serving a request handed here ----------------------------------------------------

    async def _handle(
        self, row_id: int, handed: Handed | None, taken: bool, cancel: trio.Event
    ) -> None:
        """Run a request handed here and answer it. One the poll took (`taken`) runs at
        once; a `GET` a notification carried runs without being taken (running it twice
        changes nothing); anything else is taken first, so it never runs once its sender
        withdrew it."""
        try:
            if not taken and (handed is None or orjson.loads(handed.request)["method"] != "GET"):
                handed = await self.inbox.take_one(row_id, handed)
            if handed is None:
                return  # withdrawn, or answered already
            status, body = await self._run_forwarded(handed, cancel)
            await self.inbox.answer(row_id, status, body)
        except Exception as exc:
            where = "?" if handed is None else handed.session_id
            log.warning("routing: request %d for %s failed: %r", row_id, where, exc)
            try:
                response = response_for(sole_error(exc))
                await self.inbox.answer(row_id, response.status_code, bytes(response.body))
            except ActorloopError as unanswered:
                # Its sender sees this node alive and keeps waiting; a restart of this node
                # answers it. Say so, rather than leave a request hanging without a trace.
                log.error("routing: request %d for %s got no answer: %r", row_id, where, unanswered)
        finally:
            self._handling.pop(row_id, None)

    async def _run_forwarded(self, handed: Handed, cancel: trio.Event) -> tuple[int, bytes]:
        assert self._app is not None
        head = orjson.loads(handed.request)
        scope: Scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": head["method"],
            "scheme": "http",
            "path": head["path"],
            "raw_path": head["path"].encode(),
            "query_string": head["query"].encode("latin-1"),
            "root_path": "",
            "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in head["headers"]],
            "server": None,
            "client": None,
            "extensions": {FORWARDED: {"row": handed.id}},
        }
        sent_body = False
        status = 500
        chunks: list[bytes] = []

        async def receive() -> Message:
            nonlocal sent_body
            if not sent_body:
                sent_body = True
                return {"type": "http.request", "body": handed.body, "more_body": False}
            await cancel.wait()  # the caller at the other instance went away
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            elif message["type"] == "http.response.body":
                chunks.append(bytes(message.get("body", b"")))

        await self._app(scope, receive, send)
        return status, b"".join(chunks)

    # event streams of sessions live elsewhere -------------------------------------------

    async def wait_for_head(self, session_id: str, beyond: int) -> None:
        """Return once the durable log of `session_id` holds more than `beyond` events."""
        waiters = self._following.setdefault(session_id, {})
        self._follow_ids += 1
        key = self._follow_ids
        try:
            while True:
                event = waiters[key] = trio.Event()
                await event.wait()
                heads = await self.inbox.heads((session_id,))
                if heads.get(session_id, 0) > beyond:
                    return
        finally:
            waiters.pop(key, None)
            if not waiters:
                self._following.pop(session_id, None)


class RoutingGate:
    """ASGI middleware: a request for a session another live instance owns is handed to it
    (`Router.hand`) and its answer sent back; everything else goes to `app`."""

    def __init__(self, app: ASGIApp, router: Router) -> None:
        self.app = app
        self.router = router
        router.attach(app)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        session_id = routed_session(scope)
        if session_id is None:
            await self.app(scope, receive, send)
            return
        try:
            here = await self.router.served_here(session_id)
        except ActorloopError as exc:
            await response_for(exc)(scope, receive, send)
            return
        if here:
            await self.app(scope, receive, send)
            return
        body = await _read_body(receive)
        answer: tuple[int, bytes] | None = None
        gone = False
        try:
            async with trio.open_nursery() as nursery:

                async def watch() -> None:
                    nonlocal gone
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    gone = True
                    nursery.cancel_scope.cancel()

                nursery.start_soon(watch)
                answer = await self.router.hand(session_id, scope, body)
                nursery.cancel_scope.cancel()
        except Exception as exc:
            leaf = sole_error(exc)
            if not isinstance(leaf, ActorloopError):
                raise
            await response_for(leaf)(scope, receive, send)
            return
        if gone:
            return  # nobody reads it: the client is gone
        if answer is None:
            await self.app(scope, _replay(body, receive), send)
            return
        status, payload = answer
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(payload)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": payload})


class _Back:
    """The answer of a request withdrawn from an owner that then came back."""


_BACK = _Back()


def _answered(state: RowState | None) -> bool:
    return state is not None and state.state == "done"


async def _stop_fenced(agent: Agent) -> None:
    try:
        await agent.dispose()
    except Exception as exc:
        # Its writes are refused (fenced) whatever it was doing; it is stopped regardless.
        log.warning("routing: stopping fenced agent %s: %r", agent.id, exc)


async def _read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Callable[[], Awaitable[Message]]:
    """A `receive` that hands over an already read body, then the client's own messages
    (its disconnect)."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed
