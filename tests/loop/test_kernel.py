"""The actor kernel: tell/ask, backpressure, supervision and shutdown."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from actorloop.actors.kernel import ActorRef, Reply, Supervisor
from actorloop.runtime.errors import ActorStopped, InboxFull


async def echo_body(mailbox: trio.MemoryReceiveChannel[Any]) -> None:
    async for kind, value, reply in mailbox:
        if kind == "echo":
            reply.send(value)
        elif kind == "refuse":
            reply.fail(LookupError(value))
        elif kind == "crash":
            raise RuntimeError(value)


async def test_tell_is_handled_in_order() -> None:
    seen: list[int] = []

    async def body(mailbox: trio.MemoryReceiveChannel[int]) -> None:
        async for value in mailbox:
            seen.append(value)

    async with Supervisor.open() as sup:
        ref = sup.spawn("collector", body, capacity=4)
        for value in range(10):
            await ref.tell(value)
        await sup.stop(ref)
    assert seen == list(range(10))
    assert not ref.alive


async def test_ask_returns_the_reply_and_reraises_fail() -> None:
    async with Supervisor.open() as sup:
        ref = sup.spawn("echo", echo_body)
        assert await ref.ask(lambda reply: ("echo", 42, reply)) == 42
        with pytest.raises(LookupError, match="nope"):
            await ref.ask(lambda reply: ("refuse", "nope", reply))
        # The actor is unaffected by a failed reply.
        assert await ref.ask(lambda reply: ("echo", "again", reply)) == "again"


async def test_reply_is_one_shot() -> None:
    reply: Reply[int] = Reply()
    reply.send(1)
    with pytest.raises(RuntimeError, match="one-shot"):
        reply.send(2)
    with pytest.raises(RuntimeError, match="one-shot"):
        reply.fail(ValueError())
    assert await reply.wait() == 1


def test_an_answered_reply_is_read_without_waiting() -> None:
    pending: Reply[int] = Reply()
    with pytest.raises(RuntimeError, match="not answered"):
        pending.result()
    pending.send(7)
    assert pending.result() == 7
    failed: Reply[int] = Reply()
    failed.fail(LookupError("gone"))
    with pytest.raises(LookupError, match="gone"):
        failed.result()


class _HeldActor:
    """An actor with a mailbox of 2 that takes each message, then holds it until `release`
    is set; `fill()` leaves it holding 0 with 1 and 2 queued, and `blocked_send(3)` is a
    sender waiting for room (`sent` set once 3 is queued)."""

    def __init__(self, sup: Supervisor) -> None:
        self.release = trio.Event()
        self.sent = trio.Event()
        self.handled: list[int] = []
        self.ref: ActorRef[int] = sup.spawn("slow", self._body, capacity=2)

    async def _body(self, mailbox: trio.MemoryReceiveChannel[int]) -> None:
        async for value in mailbox:
            await self.release.wait()
            self.handled.append(value)

    async def fill(self) -> None:
        await self.ref.tell(0)  # taken by the actor, which then blocks
        await trio.testing.wait_all_tasks_blocked()
        await self.ref.tell(1)
        await self.ref.tell(2)

    async def blocked_send(self, value: int) -> None:
        await self.ref.tell(value)
        self.sent.set()


async def test_tell_waits_when_the_mailbox_is_full() -> None:
    async with Supervisor.open() as sup:
        actor = _HeldActor(sup)
        await actor.fill()
        with pytest.raises(InboxFull, match="slow"):
            actor.ref.tell_nowait(3)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(actor.blocked_send, 3)
            await trio.testing.wait_all_tasks_blocked()
            assert not actor.sent.is_set()  # backpressure: the sender waits
            actor.release.set()
        assert actor.sent.is_set()
        await sup.stop(actor.ref)
    assert actor.handled == [0, 1, 2, 3]


async def test_withdraw_all_takes_back_what_is_queued_and_frees_waiting_senders() -> None:
    async with Supervisor.open() as sup:
        actor = _HeldActor(sup)
        await actor.fill()
        assert actor.ref.queued == 2
        async with trio.open_nursery() as nursery:
            nursery.start_soon(actor.blocked_send, 3)
            await trio.testing.wait_all_tasks_blocked()
            assert not actor.sent.is_set()
            assert actor.ref.withdraw_all() == [1, 2]  # oldest first; 0 was handed over
            await trio.testing.wait_all_tasks_blocked()
            assert actor.sent.is_set() and actor.ref.queued == 1  # the waiting sender got in
            actor.release.set()
        await sup.stop(actor.ref)
    assert actor.handled == [0, 3] and actor.ref.withdraw_all() == []


async def test_a_failing_actor_is_reported_and_siblings_keep_running() -> None:
    failures: list[tuple[str, BaseException]] = []
    async with Supervisor.open(on_failure=lambda name, exc: failures.append((name, exc))) as sup:
        doomed = sup.spawn("doomed", echo_body)
        sibling = sup.spawn("sibling", echo_body)
        await doomed.tell(("crash", "boom", None))
        await trio.testing.wait_all_tasks_blocked()
        assert [(name, str(exc)) for name, exc in failures] == [("doomed", "boom")]
        assert not doomed.alive
        assert await sibling.ask(lambda reply: ("echo", "alive", reply)) == "alive"
        with pytest.raises(ActorStopped, match="doomed") as info:
            await doomed.tell(("echo", 1, None))
        assert isinstance(info.value.__cause__, RuntimeError)


async def test_pending_asks_fail_when_the_actor_dies() -> None:
    started = trio.Event()

    async def dies_later(mailbox: trio.MemoryReceiveChannel[Any]) -> None:
        async for message in mailbox:
            if message == "die":
                raise ValueError("died with asks pending")
            started.set()  # an ask arrived: keep its reply unanswered

    async with Supervisor.open() as sup:
        ref: ActorRef[Any] = sup.spawn("flaky", dies_later)
        outcome: list[BaseException] = []

        async def asker() -> None:
            try:
                await ref.ask(lambda reply: ("hold", reply))
            except ActorStopped as exc:
                outcome.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(asker)
            await started.wait()
            await ref.tell("die")
        assert len(outcome) == 1
        assert "failed before answering" in str(outcome[0])
        assert isinstance(outcome[0].__cause__, ValueError)


async def test_asks_queued_behind_a_stop_fail_instead_of_hanging() -> None:
    async def answers_once(mailbox: trio.MemoryReceiveChannel[Any]) -> None:
        _kind, value, reply = await mailbox.receive()
        reply.send(value)  # then returns, leaving later messages unread

    async with Supervisor.open() as sup:
        ref = sup.spawn("once", answers_once)
        results: list[object] = []

        async def ask(value: int) -> None:
            try:
                results.append(await ref.ask(lambda reply: ("echo", value, reply)))
            except ActorStopped as exc:
                results.append(type(exc))

        with trio.fail_after(2):
            async with trio.open_nursery() as nursery:
                for value in range(3):
                    nursery.start_soon(ask, value)
    answered = [result for result in results if result is not ActorStopped]
    assert len(results) == 3
    assert len(answered) == 1
    assert answered[0] in (0, 1, 2)


async def test_leaving_the_context_drains_and_stops_every_actor() -> None:
    seen: list[str] = []

    async def body(mailbox: trio.MemoryReceiveChannel[str]) -> None:
        async for value in mailbox:
            seen.append(value)

    async with Supervisor.open() as sup:
        refs = [sup.spawn(f"a{index}", body, capacity=8) for index in range(3)]
        for ref in refs:
            ref.tell_nowait(ref.name)
    assert sorted(seen) == ["a0", "a1", "a2"]
    assert not any(ref.alive for ref in refs)
    with pytest.raises(RuntimeError, match="closed"):
        sup.spawn("late", body)


async def test_an_error_in_the_context_body_cancels_the_actors() -> None:
    cancelled = trio.Event()

    async def forever(mailbox: trio.MemoryReceiveChannel[None]) -> None:
        try:
            await trio.sleep_forever()
        finally:
            cancelled.set()

    with pytest.raises(KeyError):
        async with Supervisor.open() as sup:
            sup.spawn("forever", forever)
            await trio.testing.wait_all_tasks_blocked()
            raise KeyError("body failed")
    assert cancelled.is_set()


async def test_cancellation_is_not_reported_as_a_failure() -> None:
    failures: list[str] = []

    async def nested(mailbox: trio.MemoryReceiveChannel[None]) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.sleep_forever)
            await trio.sleep_forever()

    with trio.move_on_after(0.05):
        async with Supervisor.open(on_failure=lambda name, _exc: failures.append(name)) as sup:
            sup.spawn("nested", nested)
            await trio.sleep_forever()
    assert failures == []


async def test_spawn_refuses_unbounded_or_duplicate_mailboxes() -> None:
    async with Supervisor.open() as sup:
        with pytest.raises(ValueError, match="bounded"):
            sup.spawn("inf", echo_body, capacity=float("inf"))  # type: ignore[arg-type]
        ref = sup.spawn("one", echo_body)
        with pytest.raises(ValueError, match="already running"):
            sup.spawn("one", echo_body)
        await sup.stop(ref)
        again = sup.spawn("one", echo_body)  # the name is free once the first one ended
        assert await again.ask(lambda reply: ("echo", 7, reply)) == 7


async def test_a_raising_failure_handler_is_contained() -> None:
    def bad_handler(_name: str, _exc: BaseException) -> None:
        raise RuntimeError("handler bug")

    async with Supervisor.open(on_failure=bad_handler) as sup:
        ref = sup.spawn("doomed", echo_body)
        await ref.tell(("crash", "x", None))
        await trio.testing.wait_all_tasks_blocked()
        sibling = sup.spawn("sibling", echo_body)
        assert await sibling.ask(lambda reply: ("echo", 1, reply)) == 1
