"""A SQLite store that met a damaged file holds none of its file descriptors after
`close()`, without waiting for the cyclic collector (a process that loads many damaged
files would otherwise run out of descriptors: the byte-flip campaign's full mode did, after
40,960 trials, as `unable to open database file`)."""

from __future__ import annotations

import gc
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from actorloop.runtime import AgentOptions, Runtime
from actorloop.runtime.errors import ActorloopError
from actorloop.runtime.stores import open_store
from actorloop.runtime.testing import EchoProvider


def descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def no_collector() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.fixture
async def pristine(tmp_path: Path) -> Path:
    root = tmp_path / "pristine"
    async with Runtime.open(store=f"sqlite:{root / 'store.db'}", provider=EchoProvider()) as rt:
        agent = await rt.spawn(AgentOptions(model="m"), session_id="s")
        for turn in range(3):
            await agent.send(f"turn {turn}")
    return root


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts /proc/self/fd")
@pytest.mark.parametrize("offset", [60, -600, -3000])  # the schema version; rows near the end
async def test_no_descriptor_outlives_close_after_a_damaged_load(
    pristine: Path, tmp_path: Path, offset: int, no_collector: None
) -> None:
    damaged = tmp_path / f"damaged{offset}"
    shutil.copytree(pristine, damaged)
    data = bytearray((damaged / "store.db").read_bytes())
    data[offset] ^= 0x55
    (damaged / "store.db").write_bytes(bytes(data))
    before = descriptors()
    store = open_store(f"sqlite:{damaged / 'store.db'}")
    errors = 0
    try:
        for repair in (False, True):
            try:
                await store.load("s", repair=repair)
            except ActorloopError:
                errors += 1
        try:
            await store.check_integrity()
        except ActorloopError:
            errors += 1
    finally:
        await store.close()
    assert errors, "the damage was not seen: pick another byte"
    assert descriptors() == before
