"""UFO logs in: turn the log folder of a UFO run into a kvmemory session.

UFO writes each step of a run as one JSON object per line of
``response.log`` in the run's log folder (``logs/<task name>/``), and saves
screenshots beside it whose paths the step names in fields such as
``CleanScreenshot``, ``AnnotatedScreenshot``, ``ConcatScreenshot`` and
``SelectedControlScreenshot``.

:func:`read_ufo_log` reads such a folder into a ``Memory`` (step key
``"Step"``, as UFO writes it): one item per line, every field kept as UFO
wrote it. Screenshots are *linked*: each field whose name ends in
``screenshot`` (any case) and names an image file is looked up, as written,
then inside the log folder, then by its file name inside the log folder
(UFO often writes paths relative to its own working directory, with
Windows separators). The files found go, as absolute paths, into the
item's ``screenshots`` list (a field the prompt renderers read as images);
names not found go into ``missing_screenshots``. :func:`import_ufo_log`
writes the same items into a store session, and the command line does it
as ``kvmemory import ufo-log PATH --store URL --session ID``.
"""

from __future__ import annotations

import os
import pathlib
from typing import Any, Final

from agents.memory._codec import loads
from agents.memory._item import MemoryItem
from agents.memory.exceptions import (
    CorruptSessionError,
    InvalidSessionIdError,
    StoreNotFoundError,
)
from agents.memory.memory import Memory

__all__ = ["LOG_FILE", "import_ufo_log", "read_ufo_log"]

LOG_FILE: Final = "response.log"
"""The file of a UFO log folder that holds one step per line."""

_LINKED: Final = "screenshots"
_MISSING: Final = "missing_screenshots"


def _log_file(path: str | os.PathLike[str]) -> pathlib.Path:
    given = pathlib.Path(path)
    log = given / LOG_FILE if given.is_dir() else given
    if not log.is_file():
        msg = (
            f"No UFO log at {os.fspath(path)!r}: expected a log folder holding {LOG_FILE!r} "
            "(UFO's logs/<task name>/) or the log file itself."
        )
        raise StoreNotFoundError(msg)
    return log


def _find(reference: str, folder: pathlib.Path) -> pathlib.Path | None:
    as_written = pathlib.Path(reference)
    name = reference.replace("\\", "/").rsplit("/", 1)[-1]
    for candidate in (as_written, folder / as_written, folder / name):
        if name and candidate.is_file():
            return candidate.resolve()
    return None


def _link(fields: dict[str, Any], folder: pathlib.Path, where: str) -> None:
    found: list[str] = []
    missing: list[str] = []
    for key, value in fields.items():
        if not key.lower().endswith("screenshot") or not isinstance(value, str) or not value:
            continue
        path = _find(value, folder)
        if path is None:
            missing.append(value)
        else:
            found.append(os.fspath(path))
    if not found and not missing:
        return
    for key in (_LINKED, _MISSING):
        if key in fields:
            msg = (
                f"{where} already has a field {key!r}, where the linked screenshots go; "
                "pass link_screenshots=False (--no-link) to import it as it is."
            )
            raise CorruptSessionError(msg)
    if found:
        fields[_LINKED] = found
    if missing:
        fields[_MISSING] = missing


def read_ufo_log(
    path: str | os.PathLike[str],
    *,
    step_key: str = "Step",
    link_screenshots: bool = True,
) -> Memory:
    """Return a UFO run's log as a memory: one item per step, every field kept.

    Args:
        path: The run's log folder (holding ``response.log``) or the log file.
        step_key: The field that names a step (UFO writes ``"Step"``).
        link_screenshots: Look up the screenshots the steps name and list
            them in ``screenshots`` (and ``missing_screenshots``).

    Returns:
        A memory with the steps in log order, its session id the folder's name.

    Raises:
        StoreNotFoundError: if there is no log at ``path``.
        CorruptSessionError: naming the file and line that is not a JSON object.
    """
    log = _log_file(path)
    folder = log.parent
    items: list[MemoryItem] = []
    with log.open("rb") as stream:
        for number, raw in enumerate(stream, start=1):
            if not raw.strip():
                continue
            where = f"Line {number} of {os.fspath(log)!r}"
            fields = loads(raw, source=where)
            if not isinstance(fields, dict):
                msg = f"{where} holds {type(fields).__name__} {raw[:60]!r}, not a JSON object; a UFO step log holds one object per line."
                raise CorruptSessionError(msg)
            if link_screenshots:
                _link(fields, folder, where)
            items.append(MemoryItem(**fields))
    return Memory(items, step_key=step_key, session_id=folder.name)


def import_ufo_log(
    path: str | os.PathLike[str],
    store: Any,
    session_id: str,
    *,
    step_key: str = "Step",
    link_screenshots: bool = True,
    append: bool = False,
) -> int:
    """Write a UFO run's log into a store session, all or nothing; return the number of steps.

    Args:
        path: The run's log folder (holding ``response.log``) or the log file.
        store: A store URL or path, or an open store (left open).
        session_id: The session to write.
        step_key: The field that names a step (UFO writes ``"Step"``).
        link_screenshots: See :func:`read_ufo_log`.
        append: Append to a session that already holds items (refused by default).

    Raises:
        StoreNotFoundError: if there is no log at ``path``.
        CorruptSessionError: naming a line that is not a JSON object; nothing is written.
        InvalidSessionIdError: for a bad session id, or a non-empty session without ``append``.
        StoreError: if the store cannot be written.
    """
    from agents.memory.stores import BaseStore, check_session_id, open_store

    check_session_id(session_id)
    memory = read_ufo_log(path, step_key=step_key, link_screenshots=link_screenshots)
    opened = store if isinstance(store, BaseStore) else open_store(store)
    try:
        held = opened.count(session_id)
        if held and not append:
            msg = f"Session {session_id!r} already holds {held} items; import into a new session id, or pass append=True (--append)."
            raise InvalidSessionIdError(msg)
        opened.append(session_id, memory.content, step_key=step_key)
    finally:
        if opened is not store:
            opened.close()
    return len(memory)
