"""The blackboard's files: question records, UFO's JSON lines and saved blackboards.

Each function reads a file into items or values without touching a
blackboard; ``Blackboard`` applies the result in one step, so a bad file
leaves it unchanged.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Mapping
from typing import Any, Final

import orjson

from agents.memory import _codec
from agents.memory._codec import OnUnknownClass
from agents.memory._item import MemoryItem, decode_item
from agents.memory.exceptions import (
    ArgumentTypeError,
    CorruptSessionError,
    FieldValidationError,
    InvalidArgumentError,
    InvalidKeyError,
    SkippedRecordWarning,
)

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "SECTIONS",
    "read_board_file",
    "read_json_lines",
    "read_questions",
    "sections_from_dict",
]

SECTIONS: Final[tuple[str, ...]] = ("questions", "requests", "trajectories", "screenshots")
"""The blackboard's sections, in prompt order."""

FORMAT_NAME: Final = "kvmemory.blackboard"
FORMAT_VERSION: Final = 1


def read_questions(file_path: str | os.PathLike[str], last_k: int) -> list[MemoryItem]:
    """Return the question records of a JSONL file (``Blackboard.load_questions``); ``[]`` for a missing file.

    Raises:
        OSError: if the file exists but cannot be read.
        InvalidArgumentError: if ``last_k`` is below ``-1``, or the path holds a NUL byte.

    Warns:
        SkippedRecordWarning: naming the file and the lines skipped.
    """
    if type(last_k) is not int or last_k < -1:
        msg = f"last_k must be -1 (all records) or an int >= 0, got {last_k!r}."
        raise InvalidArgumentError(msg)
    name = _codec.file_path(file_path, what="questions file path")
    records: list[MemoryItem] = []
    skipped: list[int] = []
    try:
        stream = open(name, "rb")  # noqa: SIM115 - only a missing file is caught; the with below closes it
    except FileNotFoundError:
        return []
    with stream:
        for lineno, line in enumerate(stream, start=1):
            if not line.strip():
                continue
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError:
                skipped.append(lineno)
                continue
            if type(obj) is not dict:
                skipped.append(lineno)
                continue
            records.append(MemoryItem.from_mapping(obj))
    if skipped:
        msg = (
            f"Questions file {name!r}: skipped lines {skipped[:20]} (not JSON objects); "
            "fix or remove them to load those records."
        )
        warnings.warn(SkippedRecordWarning(msg), stacklevel=3)
    if last_k != -1:
        records = records[len(records) - last_k :] if last_k else []
    return records


def sections_from_dict(
    blackboard_dict: Mapping[str, Any], screenshot_class: type[MemoryItem]
) -> dict[str, list[MemoryItem]]:
    """Return the items of each section of ``blackboard_dict`` (``Blackboard.blackboard_from_dict``).

    Raises:
        ArgumentTypeError: if the dict, a section or a record has the wrong shape.
        InvalidKeyError: if a record has a key that is not a string.
        FieldValidationError: if a record is refused by its item class.
    """
    if not isinstance(blackboard_dict, Mapping):
        msg = f"blackboard_from_dict() takes a dict of sections, got {type(blackboard_dict).__name__}; the blackboard was left unchanged."
        raise ArgumentTypeError(msg)
    built: dict[str, list[MemoryItem]] = {}
    for name in SECTIONS:
        records = blackboard_dict.get(name, [])
        if not isinstance(records, (list, tuple)):
            msg = f"Section {name!r} must be a list of records, got {type(records).__name__}; the blackboard was left unchanged."
            raise ArgumentTypeError(msg)
        cls: type[MemoryItem] = screenshot_class if name == "screenshots" else MemoryItem
        items: list[MemoryItem] = []
        for position, record in enumerate(records):
            if isinstance(record, MemoryItem):
                record = record.to_dict()
            if not isinstance(record, Mapping):
                msg = f"Record {position} of section {name!r} is a {type(record).__name__}, not a dict; the blackboard was left unchanged."
                raise ArgumentTypeError(msg)
            try:
                items.append(cls.from_mapping(record))
            except (TypeError, ValueError) as exc:
                msg = f"Record {position} of section {name!r}: {exc} The blackboard was left unchanged."
                error = (
                    InvalidKeyError if isinstance(exc, InvalidKeyError) else FieldValidationError
                )
                raise error(msg) from exc
        built[name] = items
    return built


def read_board_file(
    path: str | os.PathLike[str],
    *,
    screenshot_class: type[MemoryItem],
    on_unknown_class: OnUnknownClass,
    trusted_import: bool,
) -> dict[str, list[MemoryItem]]:
    """Return the items of each section of a saved blackboard, or of a ``blackboard_to_json()`` file.

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        InvalidArgumentError: if ``path`` holds a NUL byte.
        CorruptSessionError: naming the file and the bad part.
        UnsupportedVersionError: if a newer kvmemory wrote the file.
    """
    name = _codec.file_path(path, what="blackboard file path")
    source = f"Blackboard file {name!r}"
    with open(name, "rb") as stream:
        document = _codec.loads(stream.read(), source=source)
    if type(document) is dict and "format" not in document:
        decoded = _codec.decode_value(
            document,
            where=source,
            on_unknown_class=on_unknown_class,
            trusted_import=trusted_import,
        )
        try:
            return sections_from_dict(decoded, screenshot_class)
        except (TypeError, ValueError) as exc:
            msg = f"{source} is not a blackboard: {exc}"
            raise CorruptSessionError(msg) from exc
    _codec.check_format(
        document,
        source=source,
        name=FORMAT_NAME,
        version=FORMAT_VERSION,
        kind="saved blackboard",
    )
    sections = document.get("sections")
    if type(sections) is not dict or any(name not in SECTIONS for name in sections):
        msg = f"{source} has no valid 'sections' object (expected keys among {list(SECTIONS)}); nothing was loaded."
        raise CorruptSessionError(msg)
    built: dict[str, list[MemoryItem]] = {}
    for name in SECTIONS:
        wires = sections.get(name, [])
        if type(wires) is not list:
            msg = f"{source}: section {name!r} is not a list; nothing was loaded."
            raise CorruptSessionError(msg)
        built[name] = [
            decode_item(
                wire,
                where=f"item {i} of section {name!r} of {source}",
                on_unknown_class=on_unknown_class,
                trusted_import=trusted_import,
            )
            for i, wire in enumerate(wires)
        ]
    return built


def read_json_lines(file_path: str | os.PathLike[str], last_k: int) -> list[Any]:
    """Return the JSON values of a JSONL file's lines (``Blackboard.read_json_file``).

    Raises:
        InvalidArgumentError: if ``last_k`` is below ``-1``, or the path holds a NUL byte.

    Warns:
        SkippedRecordWarning: naming the file and the lines skipped.
    """
    if type(last_k) is not int or last_k < -1:
        msg = f"last_k must be -1 (all lines) or an int >= 0, got {last_k!r}."
        raise InvalidArgumentError(msg)
    if isinstance(file_path, str) and not file_path:
        # UFO's os.path.exists("") is False: no QA_PAIR_FILE configured reads nothing.
        return []
    name = _codec.file_path(file_path, what="JSON file path")
    if not os.path.exists(name):
        return []
    with open(name, "rb") as stream:
        lines = stream.readlines()
    first = 1
    if last_k != -1:
        first = max(len(lines) - last_k, 0) + 1
        lines = lines[first - 1 :]
    values: list[Any] = []
    skipped: list[int] = []
    for lineno, line in enumerate(lines, start=first):
        if not line.strip():
            continue
        try:
            values.append(json.loads(line))
        except (ValueError, RecursionError):  # json.loads recurses once per nesting level
            skipped.append(lineno)
    if skipped:
        msg = f"JSON file {name!r}: skipped lines {skipped[:20]} (not JSON); fix or remove them to read those records."
        warnings.warn(SkippedRecordWarning(msg), stacklevel=3)
    return values
