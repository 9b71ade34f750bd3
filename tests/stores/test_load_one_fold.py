"""A load folds the log once: the session built from a store's load adopts the fold of the
store's validating replay (repair closers included) and it equals a fresh fold; it is never
adopted while the replaying session is still in use, nor for other events."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from strategies import LogBuilder, valid_logs

from actorloop.runtime.log.session import Session
from actorloop.runtime.model.events import SessionEvent
from actorloop.runtime.model.meta import SessionMeta
from actorloop.runtime.stores.loading import load_session
from actorloop.runtime.stores.sqlite import SqliteStore


def _fresh_fold(events: tuple[SessionEvent, ...]) -> Session:
    session = Session(SessionMeta("x"))
    for event in events:
        session.append_event(event)
    return session


def _same_state(loaded: Session, fresh: Session) -> None:
    assert loaded.derive_messages() == fresh.derive_messages()
    assert loaded.header() == fresh.header()
    assert loaded.surface == fresh.surface
    assert loaded.history_chain() == fresh.history_chain()
    assert (loaded.open_turn, loaded.open_step, loaded.last_turn) == (
        fresh.open_turn,
        fresh.open_step,
        fresh.last_turn,
    )
    assert loaded.replace_generation == fresh.replace_generation


def _log_with_open_turn(text: str = "hi") -> tuple[SessionEvent, ...]:
    b = LogBuilder()
    b.turn_start()
    b.user(text)
    b.step_start()
    b.assistant("hello")
    b.step_end()
    b.turn_end()
    b.turn_start()
    b.user("more")
    b.step_start()
    b.chunk("par")  # crash here: the load repairs the open step and turn
    return tuple(b.events)


async def test_a_repaired_load_adopts_the_validating_fold(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "fold.db")
    try:
        await store.create(SessionMeta("f"))
        await store.append("f", _log_with_open_turn())
        loaded = await load_session(store, "f")
    finally:
        await store.close()
    assert loaded._state is not None  # adopted: no second fold is pending
    assert len(loaded) > len(_log_with_open_turn())  # the closers were appended
    _same_state(loaded, _fresh_fold(loaded.events))
    assert loaded.open_turn is None and loaded.last_turn == 2


@settings(max_examples=40, deadline=None)
@given(valid_logs())
def test_an_adopted_fold_equals_a_fresh_one(events: tuple[SessionEvent, ...]) -> None:
    Session.from_events("v", events)  # the replay is dropped at once, as a store does
    loaded = Session.from_loaded("v", events, SessionMeta("v"))
    assert loaded._state is not None
    _same_state(loaded, _fresh_fold(events))


def test_a_live_replay_is_never_adopted() -> None:
    events = _log_with_open_turn()[:6]
    replay = Session.from_events("v", events)
    loaded = Session.from_loaded("v", events, SessionMeta("v"))
    assert loaded._state is None  # folded lazily, on its own
    replay.append("turn/start", events[0].data.__class__(2, events[0].data.trigger), time=9)
    assert loaded.open_turn is None and replay.open_turn == 2


def test_another_log_or_session_is_never_adopted() -> None:
    events = _log_with_open_turn()[:6]
    Session.from_events("v", events)
    assert Session.from_loaded("other", events, SessionMeta("other"))._state is None
    Session.from_events("v", events)
    shorter = events[:5]
    assert Session.from_loaded("v", shorter, SessionMeta("v"))._state is None
    Session.from_events("v", _log_with_open_turn("other text")[:6])
    different = Session.from_loaded("v", events, SessionMeta("v"))
    assert different._state is None
    _same_state(different, _fresh_fold(events))
