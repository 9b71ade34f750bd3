"""Idempotency keys kept by every store (runtime/stores/idempotency.py, docs/serve.md §5): one
claim wins, settling and taking over are compare-and-set on the owner, settled keys expire
after the retention, and a durable store's keys survive reopening and are shared by two
store instances on the same database (concurrent claims: exactly one winner)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
from attrs import evolve
from store_kinds import KINDS, url_for

from actorloop.runtime.stores import Store, open_store
from actorloop.runtime.stores.idempotency import KeyRecord, key_table, settled


@pytest.fixture(params=KINDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return url_for(request.param, tmp_path, request)


@pytest.fixture(params=KINDS[1:])
def durable_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return url_for(request.param, tmp_path, request)


@pytest.fixture
async def store(url: str) -> AsyncIterator[Store]:
    opened = open_store(url)
    yield opened
    await opened.close()


def record(owner: str = "a", key: str = "k1", at: int = 1_000_000) -> KeyRecord:
    return KeyRecord("s1", key, "fp", owner, 3, at)


async def test_one_claim_wins_and_the_owner_settles_it(store: Store) -> None:
    keys = key_table(store)
    assert key_table(store) is keys
    first, created = await keys.claim(record("a"), 60)
    assert created and first == record("a")
    standing, created = await keys.claim(record("b"), 60)
    assert not created and standing == record("a")
    # Only the owner settles; once settled nobody changes it.
    assert not await keys.update(settled(record("a"), {"turn": 2}), expected_owner="b")
    done = settled(record("a"), {"turn": 2})
    assert await keys.update(done, expected_owner="a")
    assert not await keys.update(settled(record("a"), {"turn": 3}), expected_owner="a")
    standing, created = await keys.claim(record("b"), 60)
    assert not created and standing == done and standing.outcome == '{"turn":2}'


async def test_take_over_forget_and_retention(store: Store) -> None:
    keys = key_table(store)
    await keys.claim(record("a"), 60)
    # A claimer that is gone: another takes the key over (compare-and-set on the owner).
    assert await keys.update(evolve(record("a"), owner="b", head=9), expected_owner="a")
    assert not await keys.update(evolve(record("a"), owner="c"), expected_owner="a")
    await keys.forget("s1", "k1", owner="a")  # not the owner: nothing happens
    assert (await keys.claim(record("c"), 60))[0].owner == "b"
    await keys.forget("s1", "k1", owner="b")
    assert (await keys.claim(record("c"), 60)) == (record("c"), True)
    # Settled keys expire after the retention; an unsettled one never does.
    assert await keys.update(settled(record("c"), "x"), expected_owner="c")
    stamp = (await keys.claim(record("d"), 60))[0].settled_at
    assert stamp is not None
    late = record("d", at=stamp + 61_000)
    assert await keys.claim(late, 60) == (late, True)
    pending = record("e", key="k2")
    await keys.claim(pending, 60)
    assert (await keys.claim(record("f", key="k2", at=10**13), 60))[0] == pending


async def test_keys_survive_reopening(durable_url: str) -> None:
    store = open_store(durable_url)
    done = settled(record("a"), {"turn": 1})
    await key_table(store).claim(record("a"), 3600)
    await key_table(store).update(done, expected_owner="a")
    await store.close()
    again = open_store(durable_url)
    try:
        assert await key_table(again).claim(record("b"), 3600) == (done, False)
    finally:
        await again.close()


async def test_concurrent_claims_on_two_store_instances_have_one_winner(
    durable_url: str,
) -> None:
    stores = [open_store(durable_url), open_store(durable_url)]
    wins: list[str] = []

    async def claim(index: int, attempt: int) -> None:
        owner = f"{index}-{attempt}"
        _, created = await key_table(stores[index]).claim(record(owner, key="race"), 3600)
        if created:
            wins.append(owner)

    try:
        async with trio.open_nursery() as nursery:
            for attempt in range(10):
                for index in (0, 1):
                    nursery.start_soon(claim, index, attempt)
        assert len(wins) == 1
    finally:
        for store in stores:
            await store.close()
