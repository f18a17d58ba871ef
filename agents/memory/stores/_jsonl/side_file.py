"""The header line of the files beside a session log (``.keywords``, ``.vectors``, ``.values``): written and checked one way.

Each of these files is a cache of what reading the log whole would give, up
to a byte offset of it. It starts with one JSON line whose first keys are
the same in all three (:func:`stamp`): ``format`` and ``version`` (the
file's kind and layout), ``byteorder`` (its arrays are native), ``log`` (the
blake2b of the log's header line), ``offset`` (the length of the log it
covers) and ``tail`` (the blake2b of the :data:`TAIL` bytes before that
offset); each file adds the keys of its own parts after them. A reader
takes the file only while the log still starts with that header, is at
least that long and holds those tail bytes (:func:`of_log`,
:func:`same_tail`): a log cleared, compacted or written anew makes the file
stale, and the caller reads the log as it would without the file. What a
file does with a header that does not check out (an error of its own with
the reason, or ``None``) stays with the file's module.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable, Mapping
from typing import Any, Final

import orjson

from agents.memory.stores._jsonl.files import pread

__all__ = [
    "TAIL",
    "head_line",
    "log_hash",
    "native",
    "of_log",
    "parse",
    "read_head",
    "same_tail",
    "stamp",
]

TAIL: Final = 4096
"""How many bytes before the offset a file covers are hashed to tell the same log from another."""


def log_hash(data: bytes) -> str:
    """Return the hash a header line names bytes of the log by (the log's header line, the tail)."""
    return hashlib.blake2b(data).hexdigest()


def stamp(format: str, version: int, header: bytes, offset: int, tail: bytes) -> dict[str, Any]:
    """Return the first keys of a file's header line: of the log that starts with ``header``, read to ``offset``, ``tail`` the bytes just before it."""
    return {
        "format": format,
        "version": version,
        "byteorder": sys.byteorder,
        "log": log_hash(header),
        "offset": offset,
        "tail": log_hash(tail),
    }


def head_line(fd: int, most: int, *, first: int | None = None) -> tuple[bytes, int] | None:
    """Return an open file's header line (without its newline) and its length, where the first ``most`` bytes hold its end; else ``None``.

    ``first`` bytes are read first (all ``most`` where not given), the rest
    only where they hold no line end and the file goes on.
    """
    size = most if first is None else first
    data = pread(fd, 0, size)
    cut = data.find(b"\n")
    if cut < 0 and len(data) == size < most:  # a long header line
        data = pread(fd, 0, most)
        cut = data.find(b"\n")
    return None if cut < 0 else (data[:cut], cut)


def parse(line: bytes, format: str) -> dict[str, Any] | None:
    """Return a header line parsed, where it is a JSON object naming ``format``; else ``None``.

    Raises:
        orjson.JSONDecodeError: if the line is not JSON.
    """
    head = orjson.loads(line)
    return head if type(head) is dict and head.get("format") == format else None


def read_head(
    fd: int, format: str, most: int, damaged: Callable[[str], Exception], kind: str
) -> tuple[dict[str, Any], int]:
    """Return an open file's header line parsed (:func:`parse`) and its length, for a reader that raises where there is none.

    Raises:
        Exception: ``damaged("no header line")`` where the first ``most``
            bytes hold no line end, ``damaged(f"not a {kind}")`` where the
            line is not a header of ``format``.
        orjson.JSONDecodeError: if the line is not JSON.
    """
    line = head_line(fd, most)
    if line is None:
        raise damaged("no header line")
    head = parse(line[0], format)
    if head is None:
        raise damaged(f"not a {kind}")
    return head, line[1]


def native(head: Mapping[str, Any], version: int) -> bool:
    """Return whether a header is of layout ``version`` with arrays in this machine's byte order."""
    return bool(head.get("version") == version and head.get("byteorder") == sys.byteorder)


def of_log(head: Mapping[str, Any], header: bytes, end_of_log: int) -> bool:
    """Return whether a header names the log that starts with ``header`` and covers a prefix of it no longer than ``end_of_log`` (its tail not yet checked: :func:`same_tail`)."""
    offset = head.get("offset")
    return (
        head.get("log") == log_hash(header)
        and type(offset) is int
        and len(header) <= offset <= end_of_log
    )


def same_tail(head: Mapping[str, Any], read_log: Callable[[int, int], bytes]) -> bool:
    """Return whether the log's :data:`TAIL` bytes before the offset a header covers (``read_log(start, end)``) are those it names; the header has passed :func:`of_log`."""
    offset: int = head["offset"]
    return log_hash(read_log(max(0, offset - TAIL), offset)) == head.get("tail")
