"""Fold snapshots on PostgreSQL (issue 38, persistence.md §2.7): a new owner's claim and
replay starts from the latest snapshot, gives the session a full replay gives, and its
next request is the one the log rebuilds byte for byte; a damaged snapshot is ignored and
reported. Against a real server (tests/kits/pg_server.py)."""

from __future__ import annotations

from typing import Any

import attrs
import psycopg
import pytest

from actorloop.codecs.converter import canonical_bytes
from actorloop.runtime import AgentOptions, Runtime, Tool
from actorloop.runtime.log.rebuild import rebuild_request
from actorloop.runtime.log.snapshots import SNAPSHOT_EVERY
from actorloop.runtime.log.tokens import TokenMeter
from actorloop.runtime.model.events import (
    Replace,
    ToolResultEvent,
    Trigger,
    TurnEnd,
    TurnEndReason,
    TurnStart,
)
from actorloop.runtime.model.messages import USER, Text
from actorloop.runtime.stores.loading import load_stored
from actorloop.runtime.stores.postgres.config import parse_url
from actorloop.runtime.stores.postgres.store import PostgresStore
from actorloop.runtime.testing import ScriptedProvider, reply, tool_call

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


async def _lookup(args: dict[str, Any], ctx: object) -> str:
    return "found"


OPTIONS = AgentOptions(
    model="m", system="be brief", tools=(Tool("lookup", "Look.", {"type": "object"}, _lookup),)
)
TURNS = SNAPSHOT_EVERY // 9 + 4


def _query(pg_url: str, statement: str) -> int:
    with psycopg.connect(parse_url(pg_url).conninfo, autocommit=True) as conn:
        return conn.execute(statement).rowcount


async def _build(pg_url: str) -> None:
    provider = ScriptedProvider()
    for turn in range(TURNS):
        if turn % 2:
            provider.push(tool_call(f"c{turn}", "lookup", {"q": turn}))
        provider.push(reply(f"answer {turn}"))
    store = PostgresStore(f"{pg_url}?node=first")
    async with Runtime.open(store=store, provider=provider) as rt:
        agent = await rt.spawn(OPTIONS, session_id="s")
        for turn in range(TURNS):
            await agent.send(f"question {turn}")
    assert store.snapshot_counters.written >= 1


async def test_a_new_owner_claims_and_replays_from_the_snapshot(pg_url: str) -> None:
    await _build(pg_url)
    provider = ScriptedProvider()
    provider.push(reply("taken over"))
    store = PostgresStore(f"{pg_url}?node=second")
    async with Runtime.open(store=store, provider=provider) as rt:
        agent = await rt.resume("s", OPTIONS)
        assert store.snapshot_counters.restored == 1
        await agent.send("one more")
        answered = max(
            event.seq for event in agent.session.events if event.type == "assistant/message"
        )
    plain = PostgresStore(f"{pg_url}?node=third")
    plain.snapshot_state.enabled = False
    folding = PostgresStore(f"{pg_url}?node=fourth")
    try:
        replayed = await load_stored(plain, "s", repair=False)
        folded = await load_stored(folding, "s", repair=False)
        assert folding.snapshot_counters.restored == 1
        (request,) = provider.requests
        rebuilt = rebuild_request("s", replayed.events, answered)
        assert canonical_bytes(rebuilt.request) == canonical_bytes(request)
        assert folded.derive_messages() == replayed.derive_messages()
        assert folded.usage() == replayed.usage()
        assert TokenMeter(folded).state() == TokenMeter(replayed).state()
        assert folded.events == replayed.events
    finally:
        await plain.close()
        await folding.close()


async def test_a_prune_after_the_snapshot_reads_its_node_on_the_load_connection(
    pg_url: str,
) -> None:
    """A `Replace` in the rows after the snapshot needs an event from before it while the
    load runs: it is read on the load's own connection (a pool of one would wait forever
    for a second), and the session is the one a full replay gives."""
    await _build(pg_url)
    writer = PostgresStore(f"{pg_url}?node=writer")
    try:
        lease = writer.claim("s")
        session = await load_stored(writer, "s", lease=lease)
        result = next(
            session.event(seq)
            for seq in reversed(session.surface)
            if session.event(seq).type == "tool/result"
        )
        old = result.data
        assert isinstance(old, ToolResultEvent)
        start = len(session)
        turn = session.last_turn + 1
        session.append("turn/start", TurnStart(turn, Trigger("message", USER)))
        session.append(
            "tool/result",
            attrs.evolve(old, content=(Text("[pruned]"),)),
            surface_op=Replace(result.seq, result.seq),
            source_event_seqs=(result.seq,),
        )
        session.append("turn/end", TurnEnd(turn, TurnEndReason("completed")))
        await writer.append("s", session.events_since(start))
        lease.release()
    finally:
        await writer.close()
    store = PostgresStore(f"{pg_url}?node=second&pool_max=1")
    plain = PostgresStore(f"{pg_url}?node=third")
    plain.snapshot_state.enabled = False
    try:
        folded = await load_stored(store, "s")
        replayed = await load_stored(plain, "s")
        assert store.snapshot_counters.restored == 1
        assert folded.derive_messages() == replayed.derive_messages()
        assert folded.replace_generation == replayed.replace_generation
    finally:
        await store.close()
        await plain.close()


async def test_a_damaged_snapshot_is_ignored_and_reported(pg_url: str) -> None:
    await _build(pg_url)
    assert _query(pg_url, "UPDATE actorloop.snapshots SET crc = crc + 1") == 1
    store = PostgresStore(f"{pg_url}?node=second")
    plain = PostgresStore(f"{pg_url}?node=third")
    plain.snapshot_state.enabled = False
    try:
        folded = await load_stored(store, "s", repair=False)
        replayed = await load_stored(plain, "s", repair=False)
        assert store.snapshot_counters.ignored == 1
        assert "checksum" in (store.snapshot_counters.last_problem or "")
        assert folded.events == replayed.events
    finally:
        await store.close()
        await plain.close()
