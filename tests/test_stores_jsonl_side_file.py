"""The header line the files beside a JSONL log share (``side_file``): one stamp, and a stale or foreign one refused by each file's reader."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from test_stores_jsonl_value_file import session

from agents.memory.stores._jsonl import keyword_file, side_file, vector_file
from agents.memory.stores._jsonl.files import pread
from agents.memory.stores._jsonl.keyword_postings import DamagedIndexError
from agents.memory.stores._jsonl.value_file import SessionValueFiles
from agents.memory.stores._jsonl.vector_file import DamagedVectorFileError

SIDES = ("keywords", "vectors", "values")
STAMP = ["format", "version", "byteorder", "log", "offset", "tail"]


def _log(folder: Path) -> tuple[bytes, bytes]:
    """Return session ``s``'s log header line (with its newline) and the whole log."""
    data = (folder / "s.jsonl").read_bytes()
    return data[: data.index(b"\n") + 1], data


def _head(path: Path) -> dict[str, object]:
    data = path.read_bytes()
    head = orjson.loads(data[: data.index(b"\n")])
    assert type(head) is dict
    return head


def _accepted(folder: Path, side: str) -> bool | str:
    """Return ``True`` where the file's own reader takes the session's side file for its log as it is, else why not."""
    header, log = _log(folder)
    path = folder / f"s.{side}"
    if side == "values":
        values = SessionValueFiles(str(folder), read_only=True)
        return values.current("s", str(folder / "s.jsonl"), header, len(log)) or "not current"
    load = keyword_file.load if side == "keywords" else vector_file.load
    fd = os.open(path, os.O_RDONLY)
    try:
        load(fd, header, len(log), lambda start, end: log[start:end])
    except (DamagedIndexError, DamagedVectorFileError) as exc:
        return str(exc)
    finally:
        if side == "vectors":
            os.close(fd)  # the keyword index closes its own
    return True


def test_every_side_file_starts_with_the_same_stamp_of_its_log(tmp_path: Path) -> None:
    """The keyword, vector and value files of a session start their header with the same keys in order, naming the log's header, the length covered and its tail."""
    session(tmp_path)
    header, log = _log(tmp_path)
    for side in SIDES:
        head = _head(tmp_path / f"s.{side}")
        assert list(head)[: len(STAMP)] == STAMP, side
        offset = head["offset"]
        assert type(offset) is int
        assert head["log"] == side_file.log_hash(header)
        assert head["tail"] == side_file.log_hash(log[max(0, offset - side_file.TAIL) : offset])
        assert side_file.of_log(head, header, len(log))
        assert side_file.same_tail(head, lambda start, end: log[start:end])
        assert _accepted(tmp_path, side) is True


def _rewritten(path: Path, change: Callable[[dict[str, object]], None]) -> None:
    """Rewrite a side file's header line with ``change`` made, its length kept (the parts stay where they lie)."""
    data = path.read_bytes()
    cut = data.index(b"\n")
    head = orjson.loads(data[:cut])
    change(head)
    line = orjson.dumps(head)
    assert len(line) <= cut
    path.write_bytes(line + b" " * (cut - len(line)) + data[cut:])


@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize(
    ("field", "value", "why"),
    [
        ("log", "0" * 128, "header"),  # a file of another log
        ("tail", "0" * 128, "another log"),  # a log written anew with the same header
        ("byteorder", "middle", "header"),  # arrays of another machine
        ("version", 9, "header"),
    ],
)
def test_a_foreign_or_stale_header_is_refused_by_each_reader(
    tmp_path: Path, side: str, field: str, value: object, why: str
) -> None:
    """A side file whose header names another log, another tail, byte order or layout is not taken by its reader (the log is read instead)."""
    session(tmp_path)
    _rewritten(tmp_path / f"s.{side}", lambda head: head.__setitem__(field, value))
    expected = "not current" if side == "values" else why
    assert _accepted(tmp_path, side) == expected


def test_a_header_past_the_log_is_refused(tmp_path: Path) -> None:
    """A side file that covers more of the log than there is (the log cut back) is not of that log."""
    session(tmp_path)
    header, log = _log(tmp_path)
    head = _head(tmp_path / "s.keywords")
    assert side_file.of_log(head, header, len(log))
    offset = head["offset"]
    assert type(offset) is int
    assert not side_file.of_log(head, header, offset - 1)
    assert not side_file.of_log({**head, "offset": len(header) - 1}, header, len(log))
    assert not side_file.of_log({**head, "offset": str(offset)}, header, len(log))


def test_head_line_reads_a_long_header_in_a_second_read(tmp_path: Path) -> None:
    """``head_line`` finds a header line longer than its first read (up to ``most`` bytes), and none past ``most``."""
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100 + b"\nparts")
    fd = os.open(path, os.O_RDONLY)
    try:
        assert side_file.head_line(fd, 4096, first=16) == (b"x" * 100, 100)
        assert side_file.head_line(fd, 4096) == (b"x" * 100, 100)
        assert side_file.head_line(fd, 64, first=16) is None
        assert side_file.head_line(fd, 100) is None
        assert pread(fd, 0, 3) == b"xxx"
    finally:
        os.close(fd)
