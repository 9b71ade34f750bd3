"""Crash-test child: writes turns into a store through the CodecActor until it is killed.

    python crash_child.py STORE_URL SESSION_PREFIX SESSIONS SEED

For each of SESSIONS sessions it claims the lease, loads (repairing what an earlier kill
left) or creates the session, then appends turns forever, flushing at the loop's barriers.
After each acknowledged flush it prints `ACK <session> <seq> <sha256>` (the digest of the
canonical bytes of events 0..seq) and flushes stdout, so the parent knows exactly what was
acknowledged before its kill -9 landed.
"""

from __future__ import annotations

import hashlib
import random
import sys

import trio
from session_logs import turn_script

from actorloop.actors.codec import CodecActor
from actorloop.codecs.converter import encode_event
from actorloop.runtime.log.session import Session, SessionMeta
from actorloop.runtime.stores import Store, open_store


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def write_forever(store: Store, actor: CodecActor, session_id: str, seed: int) -> None:
    lease = store.claim(session_id)
    if await store.exists(session_id):
        meta, events = await store.load(session_id, lease=lease)
        session = Session.from_events(session_id, events, meta)
    else:
        session = Session.create(session_id)
        await store.create(SessionMeta(session_id))
    digest = hashlib.sha256()
    for event in session.events:
        digest.update(encode_event(event))
    persisted = len(session)
    rng = random.Random(seed)
    turn = 0
    while True:
        turn += 1
        for _barrier in turn_script(session, rng, f"{session_id} turn {turn}"):
            fresh = session.events_since(persisted)
            await actor.persist(session_id, fresh)
            for event in fresh:
                digest.update(encode_event(event))
            persisted = len(session)
            say(f"ACK {session_id} {persisted - 1} {digest.hexdigest()}")


async def main(url: str, prefix: str, sessions: int, seed: int) -> None:
    store = open_store(url)
    async with trio.open_nursery() as nursery:
        actor = CodecActor(store)
        await nursery.start(actor.run)
        say("READY")
        for index in range(sessions):
            nursery.start_soon(write_forever, store, actor, f"{prefix}{index}", seed + index)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
