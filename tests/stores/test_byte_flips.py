"""The byte-flip campaign: damage real store files, written by real turns of a Runtime, one
flipped byte (or one truncation) at a time. Every load must then return exactly what it
returned before the damage, or raise a typed error (an ActorloopError) — never fewer
events, never different events, never an untyped crash — and whenever a load raises, the
store's integrity check reports a problem. The listing shows every intact session as it was
and anything else it can read as damaged.

Bounded in CI: ACTORLOOP_FLIP_TRIALS flips per store (default 300) and a tenth as many
truncations, at seeded random positions (ACTORLOOP_FLIP_SEED replays one sequence). Full
mode: `ACTORLOOP_FLIP_TRIALS=all pytest tests/stores/test_byte_flips.py` flips every byte of every
file and truncates every file at every length (tens of minutes).
"""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from actorloop.runtime import AgentOptions, Runtime
from actorloop.runtime.control.options import Tool
from actorloop.runtime.errors import ActorloopError
from actorloop.runtime.model.meta import DamagedSession, SessionMeta
from actorloop.runtime.stores import open_store
from actorloop.runtime.testing import ScriptedProvider, reply, tool_call

TRIALS = os.environ.get("ACTORLOOP_FLIP_TRIALS", "300")
FULL = TRIALS == "all"
SEED = int(os.environ.get("ACTORLOOP_FLIP_SEED", str(random.SystemRandom().randrange(2**32))))


async def _echo(args: Any, _ctx: Any) -> str:
    return f"echo {args}"


ECHO = Tool("echo", "Echo the arguments back", {"type": "object"}, _echo)
OPTIONS = AgentOptions(model="m", system="You are terse.", tools=(ECHO,))


async def produce(url: str) -> None:
    """Real turns: a tool round trip and a plain answer per agent, and a fork child."""
    script = []
    for index in range(3):
        script += [
            tool_call(f"call-{index}", "echo", {"x": index}, text="let me check"),
            reply(f"the answer is {index} — ok ✓"),
            reply(f"second turn {index}"),
        ]
    script.append(reply("the child's own turn"))
    provider = ScriptedProvider(script)
    async with Runtime.open(store=url, provider=provider) as rt:
        for index in range(3):
            agent = await rt.spawn(
                attrs.evolve(OPTIONS, labels={"n": index}), session_id=f"agent-{index}"
            )
            assert (await agent.send(f"question {index}")).reason == "completed"
            assert (await agent.send("and then?")).reason == "completed"
        child = await rt.fork("agent-1", None, "child", OPTIONS)
        assert (await child.send("forked question")).reason == "completed"


def store_files(root: Path) -> list[Path]:
    """The files a campaign damages (the JSONL lock files are empty: nothing to flip)."""
    return sorted(path for path in root.rglob("*") if path.is_file() and path.stat().st_size > 0)


@dataclass
class Campaign:
    kind: str
    pristine: Path
    url_of: Any
    expected: dict[str, Any] = field(default_factory=dict)

    def url(self, root: Path) -> str:
        return str(self.url_of(root))


async def snapshot(url: str) -> dict[str, Any]:
    store = open_store(url)
    try:
        listing = await store.list()
        loaded = {meta.id: await store.load(meta.id) for meta in listing}
        assert await store.check_integrity() == ()
        return loaded
    finally:
        await store.close()


@pytest.fixture(scope="module", params=["sqlite", "jsonl"])
def campaign(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Campaign:
    kind = request.param
    pristine = tmp_path_factory.mktemp(f"pristine-{kind}")

    def url_of(root: Path) -> str:
        return f"sqlite:{root / 'store.db'}" if kind == "sqlite" else f"jsonl:{root / 'logs'}"

    trio.run(produce, url_of(pristine))
    found = Campaign(kind, pristine, url_of)
    found.expected = trio.run(snapshot, url_of(pristine))
    assert sorted(found.expected) == ["agent-0", "agent-1", "agent-2", "child"]
    if kind == "sqlite":
        # The last connection checkpointed the WAL: the database is one file.
        assert [path.name for path in store_files(pristine)] == ["store.db"]
    return found


@dataclass(frozen=True)
class Damage:
    path: Path  # relative to the store root
    offset: int
    mask: int | None  # None: truncate the file to `offset` bytes

    def __str__(self) -> str:
        what = f"flip {self.mask:#04x} at" if self.mask is not None else "truncate to"
        return f"{what} byte {self.offset} of {self.path}"


def plan(campaign: Campaign, rng: random.Random) -> Iterator[Damage]:
    root = campaign.pristine
    files = [(path.relative_to(root), path.stat().st_size) for path in store_files(root)]
    if FULL:
        for relative, size in files:
            for offset in range(size):
                yield Damage(relative, offset, rng.randrange(1, 256))
            for length in range(size):
                yield Damage(relative, length, None)
        return

    def locate(position: int) -> tuple[Path, int]:
        """The file and offset of the `position`-th byte of the whole store."""
        for relative, size in files:
            if position < size:
                return relative, position
            position -= size
        raise AssertionError("position past the store")

    flips = int(TRIALS)
    total = sum(size for _, size in files)
    for index in range(flips + flips // 10):
        # Positions uniform over all bytes of the store, so big files get most damage.
        relative, offset = locate(rng.randrange(total))
        yield Damage(relative, offset, rng.randrange(1, 256) if index < flips else None)


def damaged_copy(campaign: Campaign, damage: Damage, into: Path) -> None:
    shutil.rmtree(into, ignore_errors=True)
    shutil.copytree(campaign.pristine, into)
    target = into / damage.path
    data = bytearray(target.read_bytes())
    if damage.mask is None:
        del data[damage.offset :]
    else:
        data[damage.offset] ^= damage.mask
    target.write_bytes(bytes(data))


async def trial(campaign: Campaign, root: Path, *, emptied: bool = False) -> dict[str, str]:
    """Load every session twice (repairing, read-only) from a fresh store; returns how each
    ended. Anything but an identical load or an ActorloopError fails the campaign.

    `emptied`: the damage left a SQLite file that SQLite reads as a new, empty database;
    every load must then raise, and the check has nothing to find."""
    outcome: dict[str, str] = {}
    store = open_store(campaign.url(root))
    try:
        for session_id, expected in campaign.expected.items():
            for repair in (False, True):
                try:
                    loaded = await store.load(session_id, repair=repair)
                except ActorloopError as exc:
                    outcome[session_id] = type(exc).__name__
                    break
                assert loaded == expected, (
                    f"{session_id} (repair={repair}) loaded {len(loaded[1])} events that differ "
                    f"from the {len(expected[1])} stored, without an error"
                )
            else:
                outcome[session_id] = "identical"
        damaged = any(result != "identical" for result in outcome.values())
        try:
            listing = await store.list()
        except ActorloopError:
            listing = ()
            damaged = True
        # A listed meta is the stored one; anything else the damage made readable (a phantom
        # row) is listed as damaged; a session missing from the listing is damage too.
        for entry in listing:
            if isinstance(entry, SessionMeta):
                assert entry == campaign.expected[entry.id][0], f"listed {entry} as intact"
            else:
                assert isinstance(entry, DamagedSession)
                damaged = True
        listed = {entry.id for entry in listing}
        damaged = damaged or not listed >= set(campaign.expected)
        try:
            problems = await store.check_integrity()
        except ActorloopError as exc:
            problems = (str(exc),)
        if emptied:
            assert set(outcome.values()) == {"SessionNotFound"}, outcome
        else:
            assert problems or not damaged, f"damage seen ({outcome}) but the check found nothing"
    finally:
        await store.close()
    return outcome


def test_every_damaged_byte_loads_identically_or_raises_a_typed_error(
    campaign: Campaign, tmp_path: Path
) -> None:
    rng = random.Random(f"{SEED}-{campaign.kind}")
    tallies: dict[str, int] = {}
    trials = 0
    for damage in plan(campaign, rng):
        damaged_copy(campaign, damage, tmp_path / "trial")
        try:
            # SQLite reads a file cut to 0 or 1 bytes as a new, empty database.
            emptied = campaign.kind == "sqlite" and damage.mask is None and damage.offset <= 1
            outcome = trio.run(partial(trial, emptied=emptied), campaign, tmp_path / "trial")
        except BaseException as exc:
            raise AssertionError(
                f"{campaign.kind}: {damage} (ACTORLOOP_FLIP_SEED={SEED}): {exc!r}"
            ) from exc
        trials += 1
        for result in outcome.values():
            tallies[result] = tallies.get(result, 0) + 1
    print(f"{campaign.kind}: {trials} trials, outcomes per session load: {tallies}")
    assert trials >= (1 if FULL else int(TRIALS))
    # The campaign hit real data: most damage is caught, typed.
    caught = sum(count for result, count in tallies.items() if result != "identical")
    assert caught > trials // 4
