"""A JSONL log read in pieces: one ``os.pread`` may return fewer bytes than asked (Linux: at most 0x7ffff000 a call, so a log over 2 GiB), and no record past the first piece is lost."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest

from agents.memory import MemoryItem
from agents.memory.stores import open_store
from agents.memory.stores._jsonl.files import pread

PIECE = 97  # bytes one read returns at most here: a record spans several reads


@pytest.fixture
def short_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Make every ``os.pread`` return at most :data:`PIECE` bytes (as a read past 2 GiB does); return the sizes asked."""
    asked: list[int] = []
    real = os.pread

    def short(fd: int, length: int, offset: int) -> bytes:
        asked.append(length)
        return real(fd, min(length, PIECE), offset)

    monkeypatch.setattr(os, "pread", short)
    return asked


def _steps(n: int) -> list[MemoryItem]:
    return [MemoryItem(step=i, thought=f"step {i} " + "long text " * (i % 7)) for i in range(n)]


def test_a_log_read_in_short_pieces_loses_no_record(tmp_path: Path, short_reads: list[int]) -> None:
    """A fresh handle reads every item of a log whose reads come back short, with no warning of a cut line, and appends after them (main read one piece, took the rest for a crash's tail, and an append cut it off the file)."""
    url = f"jsonl://{tmp_path}"
    items = _steps(60)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a SkippedRecordWarning fails the test
        with open_store(url) as store:
            store.append("s", items)
        with open_store(url) as fresh:
            read = fresh.read_memory("s")
            more = fresh.search("s", "step 41", 1)
            # An append after a short view cut the "crash's tail" off: every record past it.
            fresh.append("s", _steps(61)[60:])
        with open_store(url) as again:
            after = again.read_memory("s")
    assert [item.to_dict() for item in read.content] == [item.to_dict() for item in items]
    assert [hit.item["step"] for hit in more] == [41]
    assert [item["step"] for item in after.content] == list(range(61))
    assert any(length > PIECE for length in short_reads)  # the log was asked in one read


def test_pread_reads_until_the_end_asked_or_the_file_ends(
    tmp_path: Path, short_reads: list[int]
) -> None:
    """pread joins short reads into the bytes asked, and stops at the end of a shorter file."""
    path = tmp_path / "f"
    data = bytes(range(256)) * 5
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert pread(fd, 3, 1000) == data[3:1000]
        assert pread(fd, 1200, 5000) == data[1200:]
        assert pread(fd, 10, 10) == b""
    finally:
        os.close(fd)
