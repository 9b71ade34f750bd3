"""JSONL damage: after the last intact turn/end it is a torn tail (cut and repaired); at or
before it, it is corruption (a typed error naming file and line)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from session_logs import begin_turn, closed_log, model_step

from actorloop.codecs.jsonl import event_line, frame, meta_line, scan_log, unframe
from actorloop.runtime.errors import SessionBusy, SessionCorruptError
from actorloop.runtime.messages import ToolCall
from actorloop.runtime.session import Session
from actorloop.runtime.stores import JsonlStore

CLOSED_TURNS = 2
LAST_TURN_END_LINE = 13 * CLOSED_TURNS + 1  # line 1 is the meta, event seq s is line s + 2


def open_log() -> Session:
    """Two closed turns (seqs 0..25), then an open turn: turn/start, user/message,
    step/start, chunk, assistant/message with a tool request (seqs 26..30, lines 28..32)."""
    session = closed_log("j", CLOSED_TURNS)
    turn = begin_turn(session, "open")
    model_step(session, turn, 1, "calling", (ToolCall("t", "echo", "{}"),))
    return session


def log_bytes(session: Session) -> bytes:
    return meta_line(session.meta) + b"".join(event_line(e) for e in session.events)


def write_log(root: Path, data: bytes) -> Path:
    path = root / "j" / "log.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    return path


def line_span(data: bytes, line: int) -> tuple[int, int]:
    """Byte range of 1-based `line`, without its newline."""
    start = 0
    for _ in range(line - 1):
        start = data.index(b"\n", start) + 1
    return start, data.index(b"\n", start)


def flip(data: bytes, line: int, offset: int = 20) -> bytes:
    start, _ = line_span(data, line)
    damaged = bytearray(data)
    damaged[start + offset] ^= 0x01
    return bytes(damaged)


def cut_inside(data: bytes, line: int) -> bytes:
    """Drop the second half of a line but keep its newline (a torn write in the middle)."""
    start, end = line_span(data, line)
    return data[: (start + end) // 2] + data[end:]


def duplicate(data: bytes, line: int) -> bytes:
    start, end = line_span(data, line)
    return data[: end + 1] + data[start : end + 1] + data[end + 1 :]


DAMAGE = {"flipped byte": flip, "truncated line": cut_inside, "duplicated line": duplicate}


@pytest.mark.parametrize("kind", DAMAGE)
@pytest.mark.parametrize("line", [2, 10, LAST_TURN_END_LINE - 1])
async def test_damage_at_or_before_the_last_turn_end_is_corruption(
    tmp_path: Path, kind: str, line: int
) -> None:
    data = DAMAGE[kind](log_bytes(open_log()), line)
    if kind == "duplicated line":
        line += 1  # the copy is the line out of place
    path = write_log(tmp_path, data)
    with pytest.raises(SessionCorruptError) as info:
        await JsonlStore(tmp_path).load("j")
    assert info.value.location == f"{path}:{line}"
    assert path.read_bytes() == data  # a refused load changes nothing


async def test_a_damaged_meta_line_is_corruption(tmp_path: Path) -> None:
    path = write_log(tmp_path, flip(log_bytes(open_log()), 1, offset=12))
    with pytest.raises(SessionCorruptError) as info:
        await JsonlStore(tmp_path).load("j")
    assert info.value.location == f"{path}:1"


@pytest.mark.parametrize("kind", DAMAGE)
async def test_damage_after_the_last_turn_end_is_a_torn_tail(tmp_path: Path, kind: str) -> None:
    session = open_log()
    line = LAST_TURN_END_LINE + 3  # seq 28, the open turn's step/start
    data = DAMAGE[kind](log_bytes(session), line)
    path = write_log(tmp_path, data)
    store = JsonlStore(tmp_path)
    meta, events = await store.load("j")
    kept = line - 2 if kind != "duplicated line" else line - 1
    assert events[:kept] == session.events[:kept]
    closers = [e.type for e in events[kept:]]
    # Without its step/start the open turn only needs its turn/end; with it (a duplicate
    # after it was cut) the step is closed too.
    expected = ["turn/end"] if kind != "duplicated line" else ["step/end", "turn/end"]
    assert closers == expected
    Session.from_events("j", events, meta)
    # The cut and the closers are on disk: a fresh store reads exactly this log back.
    assert (await JsonlStore(tmp_path).load("j"))[1] == events
    assert path.read_bytes() == meta_line(meta) + b"".join(event_line(e) for e in events)


async def test_a_damaged_last_turn_end_belongs_to_the_tail(tmp_path: Path) -> None:
    """The last *intact* turn/end decides: when the final turn/end itself is damaged and no
    other follows, the turn it closed is reopened by the cut and closed as interrupted."""
    session = closed_log("j", CLOSED_TURNS)
    write_log(tmp_path, flip(log_bytes(session), LAST_TURN_END_LINE))
    _, events = await JsonlStore(tmp_path).load("j")
    assert events[:-1] == session.events[:-1]
    assert events[-1].type == "turn/end"
    assert events[-1].data.reason.kind == "interrupted"  # type: ignore[union-attr]


async def test_a_final_line_without_newline_is_cut(tmp_path: Path) -> None:
    session = open_log()
    data = log_bytes(session)
    write_log(tmp_path, data[:-1])  # the last event lost only its newline
    _, events = await JsonlStore(tmp_path).load("j")
    assert events[: len(session) - 1] == session.events[:-1]
    assert [e.type for e in events[len(session) - 1 :]] == ["step/end", "turn/end"]


async def test_a_torn_tail_is_not_cut_while_a_writer_holds_the_lease(tmp_path: Path) -> None:
    session = open_log()
    data = log_bytes(session) + b"0000abcd {partial"
    path = write_log(tmp_path, data)
    writer = JsonlStore(tmp_path)
    with writer.claim("j"):
        with pytest.raises(SessionBusy, match="live turn is open"):
            await JsonlStore(tmp_path).load("j")
        assert path.read_bytes() == data


async def test_appending_to_a_torn_log_requires_a_repairing_load(tmp_path: Path) -> None:
    session = closed_log("j", 1)
    write_log(tmp_path, log_bytes(session) + b"garbage without newline")
    store = JsonlStore(tmp_path)
    more = closed_log("j", 2)
    with pytest.raises(Exception, match="torn tail"):
        await store.append("j", more.events[len(session) :])
    _, events = await store.load("j")
    assert events == session.events
    await store.append("j", more.events[len(session) :])
    assert (await JsonlStore(tmp_path).load("j"))[1] == more.events


# the pure scan, exhaustively over damage positions ---------------------------------------

DATA = log_bytes(open_log())
NAME = "mem/log.jsonl"
TAIL_START = line_span(DATA, LAST_TURN_END_LINE)[1] + 1  # first byte after that turn/end
LAST_TURN_END_START = line_span(DATA, LAST_TURN_END_LINE)[0]


def test_frames_round_trip_and_reject_damage() -> None:
    line = frame(b'{"a":1}')
    assert line.endswith(b"\n")
    assert unframe(line[:-1]) == b'{"a":1}'
    assert unframe(line[:-2]) is None
    crc = line[:8]
    for fake in (b" " + crc[1:], b"+" + crc[1:], crc[:4] + b"_" + crc[5:], crc.upper()):
        if fake != crc:
            assert unframe(fake + line[8:-1]) is None
    with pytest.raises(ValueError):
        frame(b"two\nlines")


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=TAIL_START, max_value=len(DATA) - 1))
def test_any_cut_in_the_tail_keeps_the_complete_lines(cut: int) -> None:
    scan = scan_log(DATA[:cut], NAME)
    complete = DATA[:cut].count(b"\n") - 1  # event lines that kept their newline
    assert len(scan.events) == complete
    assert scan.intact_bytes == DATA[:cut].rindex(b"\n") + 1
    assert (scan.torn is None) == (cut == scan.intact_bytes)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=LAST_TURN_END_START - 1), st.integers(1, 255))
def test_any_flipped_byte_before_the_last_turn_end_is_corruption(index: int, mask: int) -> None:
    if DATA[index : index + 1] == b"\n" or DATA[index] ^ mask == ord("\n"):
        return  # changes the line structure itself; covered by the cut/duplicate cases
    damaged = bytearray(DATA)
    damaged[index] ^= mask
    line = DATA[:index].count(b"\n") + 1
    with pytest.raises(SessionCorruptError) as info:
        scan_log(bytes(damaged), NAME)
    assert info.value.location == f"{NAME}:{line}"
