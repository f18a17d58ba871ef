"""UFO, as it runs today: its logs in, and its configuration read for the switch-over files.

**Logs in.** UFO writes each step of a run as one JSON object per line of
``response.log`` in the run's log folder (``logs/<task name>/``) and saves
screenshots beside it. Two generations of UFO write two shapes:

* UFO 2.x writes CamelCase keys: ``Step``, ``Cost``, and screenshot fields
  ``CleanScreenshot``, ``AnnotatedScreenshot``, ``ConcatScreenshot`` and
  ``SelectedControlScreenshot``.
* UFO 3 writes its processing context's serializable fields in snake_case:
  no ``Step``; AppAgent lines carry ``session_step``, HostAgent lines only
  ``round_step`` and ``agent_step``; ``llm_cost``; screenshot fields
  ``clean_screenshot_path``, ``annotated_screenshot_path``,
  ``concat_screenshot_path``, ``selected_control_screenshot_path`` and
  ``desktop_screenshot_path``.

:func:`read_ufo_log` recognises the generation (:func:`ufo_log_generation`),
keeps every field as UFO wrote it, and uses that generation's step key
(``Step`` or ``session_step``). Screenshots are *linked*: every field whose
name ends in ``screenshot`` or ``screenshot_path`` (any case) is looked up
**inside the log folder only** (its path as written relative to the folder,
the part after the folder's own name, then its file name, the way UFO's own
trajectory parser finds them). A reference with a ``..`` part, a link that
resolves outside the folder, an absolute path (unless
``allow_absolute=True``) or a file whose bytes are not an image (PNG, JPEG,
GIF, BMP, WebP, recognised by content, never by name) is not linked. The
files found go, as absolute paths, into the item's ``screenshots`` list
(which prompt renderers read as images); references not linked go into
``missing_screenshots``. A damaged *last* line (a run killed mid-write) is
skipped with a :class:`~agents.memory.exceptions.SkippedRecordWarning`;
damage anywhere else is an error. :func:`import_ufo_log` writes the same
items into a store session, with the log's generation and cost field in the
session's metadata, and the command line does it as
``kvmemory import ufo-log PATH --store URL --session ID``.

**Configuration.** :func:`ufo_question_settings` reads UFO's customization
settings (``USE_CUSTOMIZATION``, ``QA_PAIR_FILE``, ``QA_PAIR_NUM``) the way
the installed UFO version's own ``blackboard.py`` reads them, and
:func:`load_ufo_questions` loads the saved question-answer pairs into a
blackboard as that ``blackboard.py`` did. The switch-over files in
``docs/ufo.md`` call it.
"""

from __future__ import annotations

import importlib
import os
import pathlib
import re
import stat
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final, Literal

import attrs
import orjson

from agents.memory._codec import loads
from agents.memory._images import MAX_IMAGE_BYTES, image_mime_of
from agents.memory._item import MemoryItem
from agents.memory.exceptions import (
    CorruptSessionError,
    InvalidArgumentError,
    MissingDependencyError,
    SkippedRecordWarning,
    StoreNotFoundError,
)
from agents.memory.memory import Memory
from agents.memory.prompt import DEFAULT_IMAGE_KEYS, image_refs

if TYPE_CHECKING:
    from agents.memory.blackboard import Blackboard

__all__ = [
    "LOG_FILE",
    "UFO_LOG_GENERATIONS",
    "UfoLogGeneration",
    "UfoQuestionSettings",
    "import_ufo_log",
    "load_ufo_questions",
    "read_ufo_log",
    "ufo_log_generation",
    "ufo_question_settings",
]

LOG_FILE: Final = "response.log"
"""The file of a UFO log folder that holds one step per line."""

_Generation = Literal["auto", "ufo2", "ufo3"]


@attrs.frozen
class UfoLogGeneration:
    """What one generation of UFO writes to ``response.log``.

    Attributes:
        name: ``"ufo2"`` or ``"ufo3"``.
        step_key: The field that numbers a step (``Step``; ``session_step``).
        cost_key: The field that holds a step's model cost (``Cost``; ``llm_cost``).
        agent_key: The field that names a step's agent (``Agent``; ``agent_type``).
    """

    name: str
    step_key: str
    cost_key: str
    agent_key: str


UFO_LOG_GENERATIONS: Final[dict[str, UfoLogGeneration]] = {
    "ufo2": UfoLogGeneration("ufo2", "Step", "Cost", "Agent"),
    "ufo3": UfoLogGeneration("ufo3", "session_step", "llm_cost", "agent_type"),
}
"""The log shapes :func:`read_ufo_log` knows, by name."""

_UFO3_MARKS: Final = frozenset(
    {"session_step", "round_step", "agent_step", "agent_type", "llm_cost"}
)
_UFO2_MARKS: Final = frozenset({"Step", "RoundStep", "AgentStep", "Cost", "Agent"})

_URL_PREFIXES: Final = ("http://", "https://", "data:")
_LINKED: Final = "screenshots"
_MISSING: Final = "missing_screenshots"
_SNIFF_BYTES: Final = 16
_BIG_INT: Final = re.compile(rb"\d{19}")
_WINDOWS_DRIVE: Final = re.compile(r"^[A-Za-z]:")


def ufo_log_generation(fields: dict[str, Any]) -> UfoLogGeneration | None:
    """Return the UFO generation whose shape one logged step has, or ``None`` if it shows neither.

    A step with UFO 2's CamelCase keys (``Step``, ``Cost``, ``Agent``, ...) is
    ``"ufo2"``; one with UFO 3's snake_case keys (``session_step``,
    ``round_step``, ``agent_type``, ``llm_cost``, ...) is ``"ufo3"``.

    Args:
        fields: One parsed line of ``response.log``.
    """
    if not _UFO2_MARKS.isdisjoint(fields):
        return UFO_LOG_GENERATIONS["ufo2"]
    if not _UFO3_MARKS.isdisjoint(fields):
        return UFO_LOG_GENERATIONS["ufo3"]
    return None


def _log_file(path: str | os.PathLike[str]) -> tuple[pathlib.Path, pathlib.Path]:
    """Return ``(log file, log folder)`` for a folder or a log file path."""
    given = pathlib.Path(path)
    log = given / LOG_FILE if given.is_dir() else given
    if not log.is_file():
        msg = (
            f"No UFO log at {os.fspath(path)!r}: expected a log folder holding {LOG_FILE!r} "
            "(UFO's logs/<task name>/) or the log file itself."
        )
        raise StoreNotFoundError(msg)
    folder = log.parent
    if not _inside(os.path.realpath(log), os.path.realpath(folder)):
        msg = (
            f"The UFO log {os.fspath(log)!r} is a link to a file outside its folder; "
            "import the folder the log really is in."
        )
        raise CorruptSessionError(msg)
    return log, folder


def _inside(real: str, folder_real: str) -> bool:
    """Return whether the resolved path ``real`` lies strictly inside the resolved ``folder_real``."""
    try:
        return real != folder_real and os.path.commonpath([real, folder_real]) == folder_real
    except ValueError:  # paths on two Windows drives have no common path
        return False


def _not_an_image(path: str) -> str:
    """Return why ``path`` cannot be linked as a screenshot, or ``""`` if it can.

    Linked files must be regular files whose first bytes are an image's, no
    larger than a prompt can send (``MAX_IMAGE_BYTES``): a linked file that a
    prompt cannot send would break every prompt that holds its step.
    """
    try:
        # O_NONBLOCK: a named pipe must not block the import.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            return "is not a regular file"
        if status.st_size > MAX_IMAGE_BYTES:
            return f"is larger than {MAX_IMAGE_BYTES} bytes, more than a prompt can send"
        if image_mime_of(os.read(fd, _SNIFF_BYTES)) is None:
            return "is not an image file (by its contents)"
        return ""
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    finally:
        os.close(fd)


def _candidates(reference: str, folder: pathlib.Path) -> Iterator[pathlib.Path]:
    """Yield the places inside ``folder`` where a logged screenshot path may be."""
    parts = [part for part in reference.replace("\\", "/").split("/") if part not in ("", ".")]
    if parts and _WINDOWS_DRIVE.match(parts[0]):
        parts = parts[1:]
    if not parts:
        return
    absolute = reference.startswith(("/", "\\")) or _WINDOWS_DRIVE.match(reference) is not None
    if not absolute:
        yield folder.joinpath(*parts)
    if folder.name in parts[:-1]:
        # UFO logs paths relative to its own working directory: logs/<task>/name.png.
        last = len(parts) - 1 - parts[::-1].index(folder.name)
        yield folder.joinpath(*parts[last + 1 :])
    yield folder / parts[-1]


def _resolve(
    reference: str, folder: pathlib.Path, folder_real: str, allow_absolute: bool
) -> tuple[str | None, str]:
    """Return ``(absolute path, "")`` of the screenshot ``reference`` names, or ``(None, why not)``.

    ``why`` is ``""`` for a file that is simply not there.
    """
    if "\0" in reference:
        return None, "holds a NUL byte"
    parts = reference.replace("\\", "/").split("/")
    if ".." in parts:
        return None, "names a parent folder ('..')"
    absolute = reference.startswith(("/", "\\")) or _WINDOWS_DRIVE.match(reference) is not None
    # Without allow_absolute an absolute path is looked up by its tail inside the folder
    # below, as UFO's own trajectory parser does.
    if allow_absolute and absolute and os.path.isabs(reference) and os.path.lexists(reference):
        real = os.path.realpath(reference)
        why = _not_an_image(real)
        return (None, why) if why else (real, "")
    why = ""  # not found: the usual case for a screenshot UFO did not save, no warning
    for candidate in _candidates(reference, folder):
        if not os.path.lexists(candidate):
            continue
        real = os.path.realpath(candidate)
        if not _inside(real, folder_real):
            why = "is a link that leaves the log folder"
            continue
        why = _not_an_image(real)
        if why:
            continue
        return real, ""
    return None, why


def _link(
    fields: dict[str, Any],
    folder: pathlib.Path,
    folder_real: str,
    where: str,
    allow_absolute: bool,
    refused: list[str],
) -> None:
    for key in DEFAULT_IMAGE_KEYS:
        if key == _LINKED or key not in fields:
            continue
        local = [ref for ref in image_refs(fields[key]) if not ref.startswith(_URL_PREFIXES)]
        if local:
            # Prompt renderers read this field from disk as given (relative to the working
            # directory), so leaving it would bypass the folder check. UFO never writes it.
            msg = (
                f"{where} has a field {key!r} holding the path {local[0][:200]!r}, which prompt "
                "renderers would read from disk as it is written; UFO writes no such field. "
                "Rename the field, or pass link_screenshots=False (--no-link) only for a log you trust."
            )
            raise CorruptSessionError(msg)
    found: list[str] = []
    missing: list[str] = []
    for key, value in fields.items():
        lowered = key.lower()
        if not lowered.endswith(("screenshot", "screenshot_path")):
            continue
        if not isinstance(value, str) or not value:
            continue
        path, why = _resolve(value, folder, folder_real, allow_absolute)
        if path is None:
            missing.append(value)
            if why:
                refused.append(f"{where}, field {key!r}: {value[:200]!r} {why}")
        else:
            found.append(path)
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


def _parse(raw: bytes, where: str) -> Any:
    """Parse one log line; integers beyond 64 bits stay ints (orjson would make them floats)."""
    if _BIG_INT.search(raw) is None:
        return loads(raw, source=where)
    # Only lines holding a run of 19+ digits take the slower parser that keeps big ints exact.
    import json

    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        try:
            orjson.loads(raw)
        except orjson.JSONDecodeError:
            return loads(raw, source=where)  # raises, naming line and column
        msg = f"{where} holds a number Python cannot read ({exc}); nothing was loaded."
        raise CorruptSessionError(msg) from exc


def _lines(log: pathlib.Path) -> Iterator[tuple[int, bytes, bool]]:
    """Yield ``(line number, line, was cut)`` for the log's non-blank lines.

    A line was cut when it is the file's last and has no newline at its end
    (a run stopped while writing it). Every other line was written whole,
    the last one included when it ends with its newline.
    """
    with log.open("rb") as stream:
        for number, raw in enumerate(stream, start=1):
            if raw.strip():
                yield number, raw, not raw.endswith(b"\n")


def _check_generation(generation: str) -> None:
    if generation != "auto" and generation not in UFO_LOG_GENERATIONS:
        msg = f"generation must be 'auto', 'ufo2' or 'ufo3', got {generation!r}."
        raise InvalidArgumentError(msg)


def read_ufo_log(
    path: str | os.PathLike[str],
    *,
    step_key: str | None = None,
    generation: _Generation = "auto",
    link_screenshots: bool = True,
    allow_absolute: bool = False,
) -> Memory:
    """Return a UFO run's log as a memory: one item per step, every field kept.

    Args:
        path: The run's log folder (holding ``response.log``) or the log file.
        step_key: The field that names a step; default: the generation's
            (``"Step"`` for UFO 2, ``"session_step"`` for UFO 3).
        generation: ``"auto"`` (recognised from the lines, UFO 2 when they
            show neither shape), ``"ufo2"`` or ``"ufo3"``.
        link_screenshots: Look up the screenshots the steps name, inside the
            log folder, and list them in ``screenshots`` (and the references
            not linked in ``missing_screenshots``).
        allow_absolute: Also link screenshots by an absolute path as written,
            wherever it points (still only image files).

    Returns:
        A memory with the steps in log order, its session id the folder's
        name, its metadata ``{"source": "ufo-log", "ufo_generation": ...,
        "cost_keys": [...]}``.

    Raises:
        StoreNotFoundError: if there is no log at ``path``.
        CorruptSessionError: naming the file and line that is not a JSON
            object, or a log file that is a link out of its folder. Only a
            last line without its newline (cut when a run stopped while
            writing it) is skipped with a warning instead; a last line that
            ends with its newline was written whole, and damage there is an
            error as anywhere else.
        InvalidArgumentError: for an unknown ``generation``.

    Warns:
        SkippedRecordWarning: naming a cut last line that was skipped, and
            the screenshot references that were not linked and why.
    """
    _check_generation(generation)
    log, folder = _log_file(path)
    folder_real = os.path.realpath(folder)
    rows: list[tuple[str, dict[str, Any]]] = []
    shape = None if generation == "auto" else UFO_LOG_GENERATIONS[generation]
    for number, raw, cut in _lines(log):
        where = f"Line {number} of {os.fspath(log)!r}"
        try:
            fields = _parse(raw, where)
        except CorruptSessionError:
            if not cut:
                raise
            msg = (
                f"{where}, the last line, is not valid JSON and has no newline at its end "
                "(a run stopped while writing it) and was skipped; the lines before it were read."
            )
            warnings.warn(SkippedRecordWarning(msg), stacklevel=2)
            continue
        if type(fields) is not dict:
            msg = f"{where} holds {type(fields).__name__} {raw[:60]!r}, not a JSON object; a UFO step log holds one object per line."
            raise CorruptSessionError(msg)
        if shape is None:
            shape = ufo_log_generation(fields)
        rows.append((where, fields))
    shape = shape or UFO_LOG_GENERATIONS["ufo2"]
    refused: list[str] = []
    items: list[MemoryItem] = []
    for where, fields in rows:
        if link_screenshots:
            _link(fields, folder, folder_real, where, allow_absolute, refused)
        items.append(MemoryItem(**fields))
    if refused:
        shown = "; ".join(refused[:5])
        more = f" (and {len(refused) - 5} more)" if len(refused) > 5 else ""
        msg = (
            f"{len(refused)} screenshot references of {os.fspath(log)!r} were not linked and are "
            f"listed in 'missing_screenshots': {shown}{more}. Only image files inside the log "
            "folder are linked (absolute paths with allow_absolute=True / --allow-absolute)."
        )
        warnings.warn(SkippedRecordWarning(msg), stacklevel=2)
    metadata = {
        "source": "ufo-log",
        "ufo_generation": shape.name,
        "cost_keys": [shape.cost_key],
        "agent_keys": [shape.agent_key],
    }
    return Memory(
        items,
        step_key=step_key if step_key is not None else shape.step_key,
        session_id=folder.name,
        metadata=metadata,
    )


def import_ufo_log(
    path: str | os.PathLike[str],
    store: Any,
    session_id: str,
    *,
    step_key: str | None = None,
    generation: _Generation = "auto",
    link_screenshots: bool = True,
    allow_absolute: bool = False,
    append: bool = False,
) -> int:
    """Write a UFO run's log into a store session, all or nothing; return the number of steps.

    The session's metadata gets the log's ``source``, ``ufo_generation``,
    ``cost_keys`` (which ``kvmemory stats`` sums by default) and
    ``agent_keys`` (which the session lists show as the agents), added to what
    the session already holds.

    Args:
        path: The run's log folder (holding ``response.log``) or the log file.
        store: A store URL or path, or an open store (left open).
        session_id: The session to write.
        step_key: See :func:`read_ufo_log`.
        generation: See :func:`read_ufo_log`.
        link_screenshots: See :func:`read_ufo_log`.
        allow_absolute: See :func:`read_ufo_log`.
        append: Append to a session that already holds items (refused by default).

    Raises:
        StoreNotFoundError: if there is no log at ``path``.
        CorruptSessionError: naming a line that is not a JSON object; nothing is written.
        InvalidSessionIdError: for a bad session id, or a non-empty session without ``append``.
        StoreError: if the store cannot be written (also when an existing
            session has another step key); nothing is written.
    """
    from agents.memory.stores import check_session_id
    from agents.service import import_memory

    check_session_id(session_id)
    memory = read_ufo_log(
        path,
        step_key=step_key,
        generation=generation,
        link_screenshots=link_screenshots,
        allow_absolute=allow_absolute,
    )
    return import_memory(memory, store, session_id, append=append)


# -- UFO's configuration, read as the installed UFO's blackboard.py reads it ---------------------


@attrs.frozen
class UfoQuestionSettings:
    """UFO's customization settings, as the installed UFO version's ``blackboard.py`` reads them.

    Attributes:
        use_customization: ``USE_CUSTOMIZATION``: load saved question-answer pairs.
        qa_pair_file: ``QA_PAIR_FILE``: the JSONL file of saved pairs.
        qa_pair_num: ``QA_PAIR_NUM``: how many of its last lines to load.
        source: Which configuration was read, for messages (``"UFO 3 typed
            configuration"``, ``"UFO 2 Config"``).
    """

    use_customization: bool
    qa_pair_file: str
    qa_pair_num: int
    source: str


def _ufo3_settings() -> UfoQuestionSettings | None:
    """UFO 3: ``config.config_loader.get_ufo_config().system``, typed, with UFO 3's defaults."""
    try:
        loader = importlib.import_module("config.config_loader")
    except ImportError:
        return None
    get_ufo_config = getattr(loader, "get_ufo_config", None)
    if get_ufo_config is None:
        return None
    system = get_ufo_config().system
    return UfoQuestionSettings(
        bool(system.use_customization),
        system.qa_pair_file,
        system.qa_pair_num,
        "UFO 3 typed configuration (config.config_loader.get_ufo_config().system)",
    )


def _ufo2_settings() -> UfoQuestionSettings | None:
    """UFO 2.x: ``Config.get_instance().config_data``, a dict read with UFO 2's ``.get`` defaults."""
    for module_name, source in (
        ("ufo.config.config", "UFO 2 configuration (ufo.config.config.Config)"),
        ("ufo.config", "UFO 2 configuration (ufo.config.Config)"),
    ):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        config = getattr(module, "Config", None)
        if config is None:
            continue
        data = config.get_instance().config_data or {}
        return UfoQuestionSettings(
            bool(data.get("USE_CUSTOMIZATION", False)),
            data.get("QA_PAIR_FILE", ""),
            data.get("QA_PAIR_NUM", -1),
            source,
        )
    return None


def ufo_question_settings() -> UfoQuestionSettings:
    """Return UFO's customization settings, read the way the installed UFO's own ``blackboard.py`` reads them.

    UFO 3 (a top-level ``config`` package with ``config_loader.get_ufo_config``)
    is read through its typed configuration, ``get_ufo_config().system``, so
    UFO 3's defaults apply (``qa_pair_file="customization/global_memory.jsonl"``,
    ``qa_pair_num=20``). UFO 2.x is read from ``Config.get_instance().config_data``
    (``ufo.config.config.Config`` in UFO 2.0.0, ``ufo.config.Config`` in later
    2.x), with UFO 2's defaults (``False``, ``""``, ``-1``).

    Raises:
        MissingDependencyError: if neither UFO configuration module can be imported.
    """
    settings = _ufo3_settings() or _ufo2_settings()
    if settings is None:
        msg = (
            "No UFO configuration found: neither config.config_loader.get_ufo_config (UFO 3) nor "
            "ufo.config.config.Config / ufo.config.Config (UFO 2.x) can be imported; run from "
            "the root of a UFO checkout."
        )
        raise MissingDependencyError(msg)
    return settings


def load_ufo_questions(board: Blackboard) -> int:
    """Load UFO's saved question-answer pairs into ``board`` when UFO's configuration asks for it.

    Does what UFO's ``Blackboard.__init__`` does: with ``USE_CUSTOMIZATION``
    on, the last ``QA_PAIR_NUM`` lines of ``QA_PAIR_FILE`` are read with
    UFO's ``read_json_file`` (a missing or empty file name reads nothing;
    ``QA_PAIR_NUM`` of 0 reads every line, as UFO's ``lines[-0:]`` does) and
    each object is added to ``questions``, each string as ``{"text": ...}``.
    A line that is JSON but neither (an array, a number, ``true``, ``null``)
    is skipped with a warning, as UFO prints one and goes on.

    Args:
        board: The blackboard to fill.

    Returns:
        How many records were added.

    Raises:
        MissingDependencyError: if no UFO configuration can be imported.
        InvalidArgumentError: if ``QA_PAIR_NUM`` is not an int of -1 or more.

    Warns:
        SkippedRecordWarning: naming the file and the values skipped.
    """
    settings = ufo_question_settings()
    if not settings.use_customization:
        return 0
    last_k = settings.qa_pair_num
    if type(last_k) is not int or last_k < -1:
        msg = f"QA_PAIR_NUM in the {settings.source} must be -1 (all lines) or an int >= 0, got {last_k!r}."
        raise InvalidArgumentError(msg)
    records = board.read_json_file(settings.qa_pair_file or "", -1 if last_k == 0 else last_k)
    added = 0
    skipped: list[str] = []
    for record in records:
        if isinstance(record, (dict, str)):
            board.add_questions(record)
            added += 1
        else:
            skipped.append(repr(record)[:40])
    if skipped:
        msg = (
            f"Questions file {settings.qa_pair_file!r}: skipped {len(skipped)} values that are "
            f"neither JSON objects nor strings ({', '.join(skipped[:5])}), as UFO skips them."
        )
        warnings.warn(SkippedRecordWarning(msg), stacklevel=2)
    return added
