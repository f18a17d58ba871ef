"""Session files: the versioned JSON document and the JSONL stream of a session.

A session file is a header (format name and version, session id, creation
time, step key, metadata) and the items' wire forms (see ``_codec``). Two
layouts carry it:

* **Document** (any path not ending in ``.jsonl``): one JSON object, the
  header with an ``"items"`` array. UFO's bare array of field objects is read
  as a document without a header.
* **JSONL** (a path ending in ``.jsonl``, or a stream whose first line is a
  JSONL header): a header line with ``"items": "jsonl"``, then one item per
  line, so a session can be written and read a line at a time.

This module writes both (:func:`session_chunks`, :func:`write_session`) and
reads both into a checked header and a list of items
(:func:`read_session_file`, :func:`read_document`, :func:`read_jsonl`)
without touching any memory: ``Memory`` applies what they return in one step,
so a bad file leaves it unchanged.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import IO, Any, Final, NamedTuple

import attrs
import orjson

from agents.memory import _codec
from agents.memory._codec import OnUnencodable, OnUnknownClass
from agents.memory._item import MemoryItem, dumps_item
from agents.memory._wire import decode_items, dumps_items
from agents.memory.exceptions import CorruptSessionError, InvalidArgumentError

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "PICKLED_SETTINGS",
    "LoadOptions",
    "SessionPages",
    "check_header",
    "envelope",
    "pickled_memory",
    "read_document",
    "read_jsonl",
    "read_jsonl_pages",
    "read_path",
    "read_session_file",
    "read_session_pages",
    "save_items",
    "session_chunks",
    "unpickled_memory",
    "write_session",
]

FORMAT_NAME: Final = "kvmemory.session"
FORMAT_VERSION: Final = 1


class LoadOptions(NamedTuple):
    """How a load resolves the classes a file names (see ``Memory.from_file``)."""

    on_unknown_class: OnUnknownClass = "error"
    trusted_import: bool = False


# -- the header ------------------------------------------------------------------


def envelope(
    *,
    session_id: str | None,
    created_at: str,
    metadata: Mapping[str, Any],
    step_key: str,
) -> dict[str, Any]:
    """Return the header of a session file, without its items."""
    return {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "session_id": session_id,
        "created_at": created_at,
        "step_key": step_key,
        "metadata": _codec.encode_value(dict(metadata)),
    }


def check_header(header: Any, *, source: str, options: LoadOptions) -> dict[str, Any]:
    """Validate a session header completely and return what a memory takes from it.

    Every field is checked here, before anything is loaded, so that applying
    the header afterwards cannot fail half-way.

    Returns:
        ``metadata`` (a decoded ``dict``), plus ``session_id`` (``str`` or
        ``None``), ``created_at`` and ``step_key`` (``str``) when the header
        has them.

    Raises:
        CorruptSessionError: if it is not a kvmemory session header or a field
            has the wrong type, naming the field's path (``$.metadata.run``).
        UnsupportedVersionError: if a newer version of the format wrote it.
    """
    _codec.check_format(
        header, source=source, name=FORMAT_NAME, version=FORMAT_VERSION, kind="kvmemory session"
    )
    out: dict[str, Any] = {}
    expected = {"session_id": "a string or null", "created_at": "a string", "step_key": "a string"}
    for key, what in expected.items():
        if key not in header:
            continue
        value = header[key]
        if not (type(value) is str or (value is None and key == "session_id")):
            msg = f"The header of {source}, at $.{key}: expected {what}, got {repr(value)[:60]}; nothing was loaded."
            raise CorruptSessionError(msg)
        out[key] = value
    # Decoded inside a one-key object, so an error's JSON path starts at $.metadata.
    metadata = _codec.decode_value(
        {"metadata": header.get("metadata") or {}},
        where=f"The header of {source}",
        on_unknown_class=options.on_unknown_class,
        trusted_import=options.trusted_import,
    )["metadata"]
    if type(metadata) is not dict:
        shown = repr(header.get("metadata"))[:60]
        msg = f"The header of {source}, at $.metadata: expected an object of metadata, got {shown}; nothing was loaded."
        raise CorruptSessionError(msg)
    out["metadata"] = metadata
    return out


# -- writing ---------------------------------------------------------------------


def session_chunks(
    header: dict[str, Any],
    pages: Iterable[Sequence[MemoryItem]],
    *,
    jsonl: bool,
    step_key: str,
    on_unencodable: OnUnencodable,
) -> Iterator[bytes]:
    """Yield a session file: a JSONL stream (header line, one line per item) or one JSON document.

    The document is the header object with the items array spliced in, page by
    page, so a writer holds one page of items at a time.
    """
    if jsonl:
        yield _codec.dumps({**header, "items": "jsonl"}) + b"\n"
        for page in pages:
            for item in page:
                yield dumps_item(item, step_key=step_key, on_unencodable=on_unencodable) + b"\n"
        return
    yield _codec.dumps(header)[:-1] + b',"items":['
    separator = b""
    for page in pages:
        array = dumps_items(page, step_key=step_key, on_unencodable=on_unencodable)
        if len(array) > 2:  # not "[]"
            yield separator + array[1:-1]
            separator = b","
    yield b"]}"


def write_session(
    path: str | os.PathLike[str],
    pages: Iterable[Sequence[MemoryItem]],
    *,
    session_id: str | None = None,
    step_key: str = "step",
    metadata: Mapping[str, Any] | None = None,
    on_unencodable: OnUnencodable = "error",
) -> int:
    """Write items to a session file a page at a time, holding one page at once.

    The file is what :meth:`Memory.save` writes for the same items (a JSONL
    stream for a path ending in ``.jsonl``, else one JSON document) and is
    written atomically: a failure part way, in a page or in the pages'
    source, leaves the old file (or none) in place. ``kvmemory convert``
    streams a store session to a file this way.

    Args:
        path: The session file to write.
        pages: The items, in order, in pages (lists) of any size; an iterator is read once.
        session_id: The session id the file records.
        step_key: The field that names an item's step.
        metadata: The session's metadata.
        on_unencodable: The codec's policy for values JSON cannot hold.

    Returns:
        The number of items written.

    Raises:
        SerializationError: if a value cannot be encoded; no file is written.
        InvalidArgumentError: if ``path`` holds a NUL byte; no file is written.
        OSError: if the file cannot be written.
    """
    header = envelope(
        session_id=session_id,
        created_at=dt.datetime.now(dt.timezone.utc).isoformat(),
        metadata=metadata or {},
        step_key=step_key,
    )
    written = 0

    def counted() -> Iterator[Sequence[MemoryItem]]:
        nonlocal written
        for page in pages:
            written += len(page)
            yield page

    name = _codec.file_path(path, what="session file path")
    chunks = session_chunks(
        header,
        counted(),
        jsonl=name.endswith(".jsonl"),
        step_key=step_key,
        on_unencodable=on_unencodable,
    )
    _codec.atomic_write(name, chunks)
    return written


# -- reading ---------------------------------------------------------------------


def read_session_file(name: str, options: LoadOptions) -> tuple[dict[str, Any], list[MemoryItem]]:
    """Read a session file of either layout (or UFO's bare array): its checked header and items.

    Raises:
        FileNotFoundError: if the file does not exist.
        CorruptSessionError: naming the file and position of invalid content.
        UnsupportedVersionError: if a newer kvmemory wrote the file.
    """
    source = f"Session file {name!r}"
    with open(name, "rb") as stream:
        if name.endswith(".jsonl") or _looks_like_jsonl(stream):
            return read_jsonl(stream, source, options)
        return read_document(stream.read(), source, options)


@attrs.frozen
class SessionPages:
    """A session file's header, and its items a page at a time (see :func:`read_session_pages`)."""

    session_id: str | None
    """The session id the file records, or ``None``."""
    step_key: str
    """The field that names an item's step."""
    metadata: dict[str, Any]
    """The session's metadata."""
    pages: Iterator[list[MemoryItem]]
    """The items in order, in lists of at most the page size; read once."""


@contextlib.contextmanager
def read_session_pages(
    path: str | os.PathLike[str],
    *,
    size: int = 1000,
    on_unknown_class: OnUnknownClass = "error",
) -> Iterator[SessionPages]:
    """Open a session file and read its items a page at a time, for files larger than memory.

    A JSONL file (``.jsonl``, or a stream whose first line is a JSONL header)
    is read a line at a time and held a page at a time; a JSON document is
    one value and is read whole first, then handed out in pages. Classes are
    found among those this process defines (see ``Memory.from_file``). The
    file stays open until the ``with`` block ends. ``kvmemory convert`` streams
    a JSONL file into a store this way.

    Args:
        path: The session file to read.
        size: The most items in a page (1 or more).
        on_unknown_class: ``"base"`` reads items of a class this process does
            not define as plain ``MemoryItem`` instead of raising.

    Yields:
        The header (session id, step key, metadata) and the pages.

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        InvalidArgumentError: if ``path`` holds a NUL byte or ``size`` is not a positive int.
        CorruptSessionError: naming the file and line of invalid content, for
            a JSONL file when the page holding it is reached.
        UnsupportedVersionError: if a newer kvmemory wrote the file.
    """
    if type(size) is not int or size < 1:
        msg = f"size must be a whole number of items, 1 or more, got {size!r}."
        raise InvalidArgumentError(msg)
    name = _codec.file_path(path, what="session file path")
    source = f"Session file {name!r}"
    options = LoadOptions(on_unknown_class)
    with open(name, "rb") as stream:
        if name.endswith(".jsonl") or _looks_like_jsonl(stream):
            header, pages = read_jsonl_pages(stream, source, options, size=size)
        else:
            header, items = read_document(stream.read(), source, options)
            pages = (items[start : start + size] for start in range(0, len(items), size))
        yield SessionPages(
            session_id=header.get("session_id"),
            step_key=header.get("step_key", "step"),
            metadata=header["metadata"] if header else {},
            pages=pages,
        )


def read_document(
    data: str | bytes, source: str, options: LoadOptions
) -> tuple[dict[str, Any], list[MemoryItem]]:
    """Read one JSON session document (or UFO's bare array): its checked header and items.

    Raises:
        CorruptSessionError: if the document is invalid JSON or not a session.
        UnsupportedVersionError: if a newer version of the format wrote it.
    """
    doc = _codec.loads(data, source=source)
    header: dict[str, Any] = {}
    if type(doc) is list:
        wires = doc
    else:
        header = check_header(doc, source=source, options=options)
        wires = doc.get("items")
        if type(wires) is not list:
            msg = f"{source} has no 'items' array; nothing was loaded."
            raise CorruptSessionError(msg)
    # to_json writes type tags inside plain field objects; only walk them when there can be one.
    marker = f'"{_codec.TAG}"'
    tagged = marker in data if isinstance(data, str) else marker.encode() in data
    items = decode_items(
        wires,
        where=lambda i: f"item {i} of {source}",
        on_unknown_class=options.on_unknown_class,
        trusted_import=options.trusted_import,
        tagged_values=tagged,
    )
    return header, items


def read_jsonl(
    stream: IO[bytes], source: str, options: LoadOptions
) -> tuple[dict[str, Any], list[MemoryItem]]:
    """Read a JSONL session stream (a header line is optional): its checked header and items.

    Raises:
        CorruptSessionError: naming the line of invalid content.
        UnsupportedVersionError: if a newer version of the format wrote it.
    """
    header, pages = read_jsonl_pages(stream, source, options, size=_WHOLE)
    return header, [item for page in pages for item in page]


_WHOLE: Final = 1 << 62  # a page size no stream reaches: the whole stream as one page


def read_jsonl_pages(
    stream: IO[bytes], source: str, options: LoadOptions, *, size: int
) -> tuple[dict[str, Any], Iterator[list[MemoryItem]]]:
    """Read a JSONL session stream's checked header now, and its items a page at a time.

    The pages are decoded as they are asked for, so a stream of any length is
    held one page at a time; an error in a later page is raised when that
    page is reached.

    Raises:
        CorruptSessionError: naming the line of invalid content (from the
            iterator, for lines after the header).
        UnsupportedVersionError: if a newer version of the format wrote it.
    """
    lines = _jsonl_lines(stream, source)
    header: dict[str, Any] = {}
    pending: list[tuple[int, Any]] = []
    first = next(lines, None)
    if first is not None:
        obj = first[1]
        if type(obj) is dict and "format" in obj and obj.get("items") == "jsonl":
            header = check_header(obj, source=source, options=options)
        else:
            pending.append(first)

    def pages() -> Iterator[list[MemoryItem]]:
        numbered = pending
        for line in lines:
            numbered.append(line)
            if len(numbered) >= size:
                yield _decode_lines(numbered, source, options)
                numbered = []
        if numbered:
            yield _decode_lines(numbered, source, options)

    return header, pages()


def _decode_lines(
    numbered: list[tuple[int, Any]], source: str, options: LoadOptions
) -> list[MemoryItem]:
    return decode_items(
        [wire for _, wire in numbered],
        where=lambda i: f"line {numbered[i][0]} of {source}",
        on_unknown_class=options.on_unknown_class,
        trusted_import=options.trusted_import,
    )


def _jsonl_lines(stream: IO[bytes], source: str) -> Iterator[tuple[int, Any]]:
    """Yield ``(line_number, decoded_json)`` for each non-blank line of a JSONL stream.

    Raises:
        CorruptSessionError: naming the line of the first invalid JSON line.
    """
    for lineno, line in enumerate(stream, start=1):
        if not line.strip():
            continue
        try:
            yield lineno, orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            truncated = "" if line.endswith(b"\n") else " (the line is truncated)"
            msg = (
                f"{source} is not valid JSON at line {lineno}, column {exc.colno}"
                f"{truncated}; nothing was loaded."
            )
            raise CorruptSessionError(msg) from exc


def _looks_like_jsonl(stream: IO[bytes]) -> bool:
    """Return whether a stream's first non-blank line is a JSONL session header; rewind it."""
    # Skip leading whitespace a block at a time: a file of megabytes of blanks
    # costs one pass, not one call per byte.
    head = b""
    while not head:
        block = stream.read(65536)
        if not block:
            break
        head = block.lstrip()
    if head[:1] == b"{" and b"\n" not in head:
        head += stream.readline()
    stream.seek(0)
    return head[:1] == b"{" and b'"items":"jsonl"' in head.split(b"\n", 1)[0]


# -- a memory's own files and pickles --------------------------------------------


def save_items(
    path: str | os.PathLike[str],
    header: dict[str, Any],
    items: Sequence[MemoryItem],
    *,
    step_key: str,
    on_unencodable: OnUnencodable,
) -> None:
    """Write ``items`` under ``header`` as a session file at ``path``, atomically (``Memory.save``).

    Raises:
        SerializationError: if a value cannot be encoded; no file is written.
        InvalidArgumentError: if ``path`` holds a NUL byte; no file is written.
    """
    name = _codec.file_path(path, what="session file path")
    # Encoded before the file is opened, so an unencodable value writes nothing.
    chunks = list(
        session_chunks(
            header,
            [items],
            jsonl=name.endswith(".jsonl"),
            step_key=step_key,
            on_unencodable=on_unencodable,
        )
    )
    _codec.atomic_write(name, chunks)


def read_path(
    path: str | os.PathLike[str], options: LoadOptions
) -> tuple[dict[str, Any], list[MemoryItem]]:
    """Read the session file at ``path`` (``Memory.load_file``): its checked header and items.

    Raises:
        FileNotFoundError: if the file does not exist.
        InvalidArgumentError: if ``path`` holds a NUL byte.
        CorruptSessionError: naming the file and position of invalid content.
        UnsupportedVersionError: if a newer kvmemory wrote the file.
    """
    return read_session_file(_codec.file_path(path, what="session file path"), options)


# The settings a pickled memory keeps beside its own attributes, under the
# names every release has written (so that pickles load across releases).
PICKLED_SETTINGS: Final = ("_step_key", "_max_items", "_callbacks", "_items")


def pickled_memory(
    attributes: Mapping[str, Any],
    *,
    step_key: str,
    max_items: int | None,
    callbacks: Sequence[Any],
    items: Sequence[MemoryItem],
) -> dict[str, Any]:
    """Return the state ``pickle`` keeps of a memory: its attributes, settings and items."""
    return {
        **attributes,
        "_step_key": step_key,
        "_max_items": max_items,
        "_callbacks": list(callbacks),
        "_items": list(items),
    }


def unpickled_memory(state: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split a pickled memory's state into its settings (``PICKLED_SETTINGS``) and its other attributes."""
    attributes = dict(state)
    settings: dict[str, Any] = {}
    for name in PICKLED_SETTINGS:
        if name in attributes:
            settings[name] = attributes.pop(name)
    return settings, attributes
