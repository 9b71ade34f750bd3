"""JSONL damage: only an incomplete final write past the acknowledged head is a torn tail
(cut and repaired); a damaged complete line anywhere, a final fragment no write could have
left, or a log shorter than its acknowledged head is corruption (a typed error naming file
and line), and a refused load changes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from session_logs import begin_turn, closed_log, model_step

from actorloop.codecs.jsonl import (
    HEAD_RECORD_SIZE,
    AckHead,
    event_line,
    frame,
    head_record,
    is_torn_write,
    meta_line,
    read_head,
    scan_log,
    unframe,
)
from actorloop.runtime.errors import SessionBusy, SessionCorruptError
from actorloop.runtime.log.session import Session
from actorloop.runtime.model.messages import ToolCall
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


SESSION = open_log()
LAST_LINE = len(SESSION) + 1


def log_bytes(session: Session) -> bytes:
    return meta_line(session.meta) + b"".join(event_line(e) for e in session.events)


def write_log(root: Path, data: bytes, head: AckHead | None = None) -> Path:
    path = root / "j" / "log.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    if head is not None:
        (root / "j" / "head").write_bytes(head_record(head))
    return path


def full_head(data: bytes, session: Session = SESSION) -> AckHead:
    return AckHead(len(data), len(session))


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
    """Drop the second half of a line but keep its newline."""
    start, end = line_span(data, line)
    return data[: (start + end) // 2] + data[end:]


def duplicate(data: bytes, line: int) -> bytes:
    start, end = line_span(data, line)
    return data[: end + 1] + data[start : end + 1] + data[end + 1 :]


DAMAGE = {"flipped byte": flip, "truncated line": cut_inside, "duplicated line": duplicate}


@pytest.mark.parametrize("kind", DAMAGE)
@pytest.mark.parametrize("line", [2, 10, LAST_TURN_END_LINE, LAST_TURN_END_LINE + 3, LAST_LINE])
async def test_a_damaged_complete_line_is_corruption_wherever_it_is(
    tmp_path: Path, kind: str, line: int
) -> None:
    """Before or after the last turn/end, acknowledged or not: a line that kept its newline
    was written whole, so damage to it is never a torn tail."""
    data = DAMAGE[kind](log_bytes(SESSION), line)
    if kind == "duplicated line":
        line += 1  # the copy is the line out of place
    path = write_log(tmp_path, data)
    store = JsonlStore(tmp_path)
    for repair in (True, False):
        with pytest.raises(SessionCorruptError) as info:
            await store.load("j", repair=repair)
        assert info.value.location == f"{path}:{line}"
    assert path.read_bytes() == data  # a refused load changes nothing


async def test_a_damaged_meta_line_is_corruption(tmp_path: Path) -> None:
    path = write_log(tmp_path, flip(log_bytes(SESSION), 1, offset=12))
    with pytest.raises(SessionCorruptError) as info:
        await JsonlStore(tmp_path).load("j")
    assert info.value.location == f"{path}:1"


async def test_an_unacknowledged_final_line_missing_its_newline_is_cut(tmp_path: Path) -> None:
    data = log_bytes(SESSION)
    path = write_log(tmp_path, data[:-1], AckHead(line_span(data, LAST_LINE)[0], len(SESSION) - 1))
    store = JsonlStore(tmp_path)
    # A read-only load leaves the torn line out without cutting it.
    _, durable = await store.load("j", repair=False)
    assert durable == SESSION.events[:-1]
    assert path.read_bytes() == data[:-1]
    meta, events = await store.load("j")
    assert events[: len(SESSION) - 1] == SESSION.events[:-1]
    assert [e.type for e in events[len(SESSION) - 1 :]] == ["step/end", "turn/end"]
    Session.from_events("j", events, meta)
    # The cut and the closers are on disk, and the head now records them.
    assert path.read_bytes() == meta_line(meta) + b"".join(event_line(e) for e in events)
    head = read_head((tmp_path / "j" / "head").read_bytes(), "head")
    assert head == AckHead(path.stat().st_size, len(events))
    assert (await JsonlStore(tmp_path).load("j"))[1] == events


@pytest.mark.parametrize(
    "fragment",
    [b"0", b"0000abcd", b"0000abcd ", b'0000abcd {"data":{"tur', b'0000abcd {"a":"\xc3'],
)
async def test_a_strict_prefix_of_a_line_past_the_head_is_a_torn_tail(
    tmp_path: Path, fragment: bytes
) -> None:
    data = log_bytes(SESSION)
    write_log(tmp_path, data + fragment, full_head(data))
    _, events = await JsonlStore(tmp_path).load("j")
    assert events[: len(SESSION)] == SESSION.events
    assert [e.type for e in events[len(SESSION) :]] == ["tool/result", "step/end", "turn/end"]


@pytest.mark.parametrize(
    "fragment",
    [
        b"garbage without newline",
        b"\x00" * 40,
        b"0000ABCD {",
        b'0000abcd {"a":1}',  # complete JSON whose checksum does not match
        b'0000abcd {"a":\x01',
        b"0000abcd\t{",
    ],
)
async def test_a_final_fragment_no_write_could_leave_is_corruption(
    tmp_path: Path, fragment: bytes
) -> None:
    data = log_bytes(SESSION) + fragment
    path = write_log(tmp_path, data)
    with pytest.raises(SessionCorruptError) as info:
        await JsonlStore(tmp_path).load("j")
    assert info.value.location == f"{path}:{LAST_LINE + 1}"
    assert path.read_bytes() == data


@pytest.mark.parametrize("cut", [1, 40, "line", "lines"])
async def test_a_log_shorter_than_its_acknowledged_head_is_corruption(
    tmp_path: Path, cut: int | str
) -> None:
    """Losing acknowledged bytes is never a torn tail: not the final newline, not a cut
    inside the last line, not whole lines."""
    data = log_bytes(SESSION)
    if cut == "line":
        kept = data[: line_span(data, LAST_LINE)[0]]
    elif cut == "lines":
        kept = data[: line_span(data, LAST_TURN_END_LINE)[0]]
    else:
        assert isinstance(cut, int)
        kept = data[:-cut]
    path = write_log(tmp_path, kept, full_head(data))
    with pytest.raises(SessionCorruptError, match="acknowledged head"):
        await JsonlStore(tmp_path).load("j")
    assert path.read_bytes() == kept


async def test_a_head_disagreeing_with_the_log_is_corruption(tmp_path: Path) -> None:
    data = log_bytes(SESSION)
    write_log(tmp_path, data, AckHead(len(data), len(SESSION) + 1))
    with pytest.raises(SessionCorruptError, match="records 32 events"):
        await JsonlStore(tmp_path).load("j")


async def test_a_head_inside_a_line_is_corruption(tmp_path: Path) -> None:
    data = log_bytes(SESSION)
    write_log(tmp_path, data, AckHead(len(data) - 10, len(SESSION)))
    with pytest.raises(SessionCorruptError, match="ends inside this line"):
        await JsonlStore(tmp_path).load("j")


async def test_a_damaged_head_record_is_corruption_and_an_empty_one_is_none(
    tmp_path: Path,
) -> None:
    data = log_bytes(SESSION)
    write_log(tmp_path, data)
    head_file = tmp_path / "j" / "head"
    record = head_record(full_head(data))
    for damaged in (record[:-1], record[:20], flip(record, 1, offset=12), record + record):
        head_file.write_bytes(damaged)
        with pytest.raises(SessionCorruptError, match="acknowledged-head record is damaged"):
            await JsonlStore(tmp_path).load("j", repair=False)
    head_file.write_bytes(b"")  # created, never written (a crash between the two)
    assert (await JsonlStore(tmp_path).load("j", repair=False))[1] == SESSION.events


async def test_the_store_records_the_head_only_once_fsynced(tmp_path: Path) -> None:
    session = closed_log("h", 2)
    store = JsonlStore(tmp_path)
    await store.create(session.meta)
    head_file = tmp_path / "h" / "head"
    log = tmp_path / "h" / "log.jsonl"
    assert not head_file.exists()
    await store.append("h", session.events[:13])
    assert not head_file.exists()  # written, not yet durable: not acknowledged
    await store.flush("h")
    assert read_head(head_file.read_bytes(), "h") == AckHead(log.stat().st_size, 13)
    await store.append_batch([("h", session.events[13:])])  # a group commit is durable
    assert read_head(head_file.read_bytes(), "h") == AckHead(log.stat().st_size, 26)
    assert len(head_file.read_bytes()) == HEAD_RECORD_SIZE
    await store.close()
    # Cutting acknowledged bytes now fails the load instead of passing for a torn tail.
    log.write_bytes(log.read_bytes()[:-1])
    with pytest.raises(SessionCorruptError, match="acknowledged head"):
        await JsonlStore(tmp_path).load("h")


async def test_a_torn_tail_is_not_cut_while_a_writer_holds_the_lease(tmp_path: Path) -> None:
    data = log_bytes(SESSION) + b'0000abcd {"partial'
    path = write_log(tmp_path, data)
    writer = JsonlStore(tmp_path)
    with writer.claim("j"):
        with pytest.raises(SessionBusy, match="live turn is open"):
            await JsonlStore(tmp_path).load("j")
        assert path.read_bytes() == data


async def test_appending_to_a_torn_log_requires_a_repairing_load(tmp_path: Path) -> None:
    session = closed_log("j", 1)
    more = closed_log("j", 2)
    torn = event_line(more.events[len(session)])[:30]
    write_log(tmp_path, log_bytes(session) + torn)
    store = JsonlStore(tmp_path)
    with pytest.raises(Exception, match="torn tail"):
        await store.append("j", more.events[len(session) :])
    _, events = await store.load("j")
    assert events == session.events
    await store.append("j", more.events[len(session) :])
    assert (await JsonlStore(tmp_path).load("j"))[1] == more.events


# the pure scan, exhaustively over damage positions ---------------------------------------

DATA = log_bytes(SESSION)
NAME = "mem/log.jsonl"
META_END = DATA.index(b"\n") + 1


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


def test_every_prefix_of_a_line_is_a_torn_write_and_the_line_with_more_is_not() -> None:
    line = event_line(SESSION.events[-1])
    for cut in range(len(line)):  # up to the line without its newline
        assert is_torn_write(line[:cut]), cut
    assert not is_torn_write(line[:-1] + b"x")
    assert not is_torn_write(line)  # a whole line is not a fragment


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=META_END, max_value=len(DATA)))
def test_any_cut_past_the_head_keeps_the_complete_lines(cut: int) -> None:
    scan = scan_log(DATA[:cut], NAME, acked=AckHead(META_END, 0))
    complete = DATA[:cut].count(b"\n") - 1  # event lines that kept their newline
    assert len(scan.events) == complete
    assert scan.intact_bytes == DATA[:cut].rindex(b"\n") + 1
    assert (scan.torn is None) == (cut == scan.intact_bytes)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=len(DATA) - 1))
def test_any_cut_of_an_acknowledged_log_is_corruption(cut: int) -> None:
    with pytest.raises(SessionCorruptError):
        scan_log(DATA[:cut], NAME, acked=AckHead(len(DATA), len(SESSION)))


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=len(DATA) - 1), st.integers(1, 255))
def test_any_flipped_byte_is_corruption(index: int, mask: int) -> None:
    """Anywhere in the file, the last line and its newline included, with or without a
    head record: never a torn tail, never fewer events."""
    damaged = bytearray(DATA)
    damaged[index] ^= mask
    for acked in (None, AckHead(len(DATA), len(SESSION))):
        with pytest.raises(SessionCorruptError):
            scan_log(bytes(damaged), NAME, acked=acked)
