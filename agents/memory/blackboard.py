"""``Blackboard``: what agents of one session share (UFO's names and meaning).

Four sections, each a :class:`~agents.memory.memory.Memory`: ``questions``
(questions asked and their answers), ``requests`` (the user's requests so
far), ``trajectories`` (steps completed earlier) and ``screenshots``
(screenshot records in UFO's shape: ``metadata``, ``image_path`` and the
image as a ``data:`` URL in ``image_str``). :meth:`Blackboard.blackboard_to_prompt`
renders them as chat content parts with the same text UFO writes, so prompt
templates written for UFO keep working.

Differences from UFO, each a fix or an option, listed in ``docs/ufo.md``: no
configuration is read (files and counts are arguments; in a UFO checkout
the switch-over file of ``docs/ufo.md`` reads UFO's configuration through
``agents.integrations.ufo.load_ufo_questions``); a screenshot that
cannot be read is sent as an empty image with an :class:`ImageReadWarning`
(``strict_images=True`` raises); ``add_image`` keeps the whole metadata dict
and passes URLs through; ``blackboard_from_dict`` is all-or-nothing;
prompts take token and image budgets; ``save`` and ``load`` round-trip the
whole blackboard; a lock makes it safe to share between agents in threads.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import warnings
from collections.abc import Iterable, Mapping
from typing import Any, Final

from agents.memory import _codec
from agents.memory._board_files import (
    FORMAT_NAME,
    FORMAT_VERSION,
    SECTIONS,
    read_board_file,
    read_json_lines,
    read_questions,
    sections_from_dict,
)
from agents.memory._board_prompt import (
    BLACKBOARD_PREFIX,
    QUESTIONS_PREFIX,
    REQUESTS_PREFIX,
    TRAJECTORIES_PREFIX,
    Part,
    metadata_text,
    text_part,
    trim_to_budget,
)
from agents.memory._codec import OnUnknownClass
from agents.memory._item import MemoryItem
from agents.memory.exceptions import (
    ArgumentTypeError,
    ImageReadError,
    ImageReadWarning,
    InvalidArgumentError,
)
from agents.memory.memory import Memory
from agents.memory.prompt import (
    EstimateCounter,
    TokenCounter,
    image_data_url,
    ufo_json,
)

__all__ = [
    "SECTIONS",
    "Blackboard",
    "ImageItem",
    "ImageMemoryItem",
    "ImageMemoryItemNames",
]


@dataclasses.dataclass(frozen=True)
class ImageMemoryItemNames:
    """The field names of a screenshot record, under UFO's constant names."""

    METADATA: str = "metadata"
    IMAGE_PATH: str = "image_path"
    IMAGE_STR: str = "image_str"


_NAMES: Final = ImageMemoryItemNames()


class ImageMemoryItem(MemoryItem):
    """A screenshot on the blackboard, in UFO's record shape.

    Fields, in this order: ``metadata`` (what ``add_image`` was given),
    ``image_path`` (the path or URL) and ``image_str`` (the image as a
    ``data:`` URL, ``""`` when it could not be read). A blackboard made with
    ``lazy_images=True`` leaves ``image_str`` out and reads the image when a
    prompt is built. Any other fields are kept as they are.
    """


ImageItem = ImageMemoryItem
"""kvmemory's earlier name of :class:`ImageMemoryItem`; files that name it still load."""


class Blackboard:
    """The shared memory of a multi-agent session (UFO's ``Blackboard``).

    Args:
        questions_file: A JSONL file of question-answer records to load now.
        questions_last_k: Load only the last ``k`` valid records of that file (``-1``: all).
        counter: The token counter for budgets in :meth:`blackboard_to_prompt`.
        lazy_images: ``add_image`` stores the path only and prompts read the
            image when they are built (UFO reads it in ``add_image`` and keeps
            it in the record as ``image_str``).
        strict_images: Raise :class:`~agents.memory.exceptions.ImageReadError`
            for a screenshot that cannot be read, instead of warning and
            sending an empty image as UFO does.
    """

    def __init__(
        self,
        *,
        questions_file: str | os.PathLike[str] | None = None,
        questions_last_k: int = -1,
        counter: TokenCounter | None = None,
        lazy_images: bool = False,
        strict_images: bool = False,
    ) -> None:
        self._lock = threading.RLock()
        self._questions = Memory()
        self._requests = Memory()
        self._trajectories = Memory()
        self._screenshots = Memory()
        self.counter: TokenCounter = counter or EstimateCounter()
        self.lazy_images = lazy_images
        self.strict_images = strict_images
        if questions_file is not None:
            self.load_questions(questions_file, questions_last_k)

    # -- sections ------------------------------------------------------------

    @property
    def questions(self) -> Memory:
        """Questions asked during the session and their answers."""
        return self._questions

    @property
    def requests(self) -> Memory:
        """The user's requests, oldest first."""
        return self._requests

    @property
    def trajectories(self) -> Memory:
        """Steps completed earlier, as agents recorded them."""
        return self._trajectories

    @property
    def screenshots(self) -> Memory:
        """Screenshots as :class:`ImageItem` (path and metadata)."""
        return self._screenshots

    @property
    def lock(self) -> threading.RLock:
        """The lock held by every method; hold it to read several sections consistently."""
        return self._lock

    def __getstate__(self) -> dict[str, Any]:
        """Return what ``pickle`` and ``copy`` keep: every section and setting, not the lock."""
        with self._lock:
            state = dict(self.__dict__)
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Take the state :meth:`__getstate__` gave, with a new lock."""
        self.__dict__.update(state)
        self._lock = threading.RLock()

    def _sections(self) -> dict[str, Memory]:
        return {
            "questions": self._questions,
            "requests": self._requests,
            "trajectories": self._trajectories,
            "screenshots": self._screenshots,
        }

    # -- adding --------------------------------------------------------------

    def add_data(self, data: MemoryItem | Mapping[str, Any] | str, memory: Memory) -> None:
        """Add ``data`` to ``memory``: an item as is, a dict as an item, a string as ``{"text": data}``.

        Raises:
            ArgumentTypeError: if ``data`` is of another type.
            InvalidKeyError: if a dict has a key that is not a string.
        """
        if isinstance(data, MemoryItem):
            item = data
        elif isinstance(data, Mapping):
            item = MemoryItem.from_mapping(data)
        elif isinstance(data, str):
            item = MemoryItem(text=data)
        else:
            msg = f"Blackboard data must be a MemoryItem, a dict or a string, got {type(data).__name__}."
            raise ArgumentTypeError(msg)
        with self._lock:
            memory.add_memory_item(item)

    def add_questions(self, questions: MemoryItem | Mapping[str, Any] | str) -> None:
        """Add a question (and its answer) to ``questions``."""
        self.add_data(questions, self._questions)

    def add_requests(self, requests: MemoryItem | Mapping[str, Any] | str) -> None:
        """Add a user request to ``requests``."""
        self.add_data(requests, self._requests)

    def add_trajectories(self, trajectories: MemoryItem | Mapping[str, Any] | str) -> None:
        """Add a completed step to ``trajectories``."""
        self.add_data(trajectories, self._trajectories)

    def add_image(
        self,
        screenshot_path: str | os.PathLike[str] = "",
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        """Add a screenshot record: its metadata, its path and the image as a ``data:`` URL.

        The image is read now, as UFO does, into ``image_str`` (``http(s)://``
        and ``data:`` URLs are kept as they are). A file that cannot be read
        gives ``image_str == ""`` and an :class:`ImageReadWarning`, so the
        prompt sends an empty image, as UFO's does. With ``lazy_images`` the
        record holds no ``image_str`` and prompts read the file.

        Args:
            screenshot_path: A file path, or an ``http(s)://`` or ``data:`` URL.
            metadata: Kept whole (a copy); ``None`` stores ``None``. UFO kept
                only ``metadata["metadata"]`` (see ``docs/ufo.md``).

        Raises:
            ArgumentTypeError: if ``metadata`` is not a mapping.
            ImageReadError: with ``strict_images``, if the image cannot be read;
                nothing is added.

        Warns:
            ImageReadWarning: naming the file that could not be read.
        """
        if metadata is not None and not isinstance(metadata, Mapping):
            msg = f"add_image() metadata must be a dict or None, got {type(metadata).__name__}."
            raise ArgumentTypeError(msg)
        path = os.fspath(screenshot_path)
        record: dict[str, Any] = {
            _NAMES.METADATA: None if metadata is None else dict(metadata),
            _NAMES.IMAGE_PATH: path,
        }
        if not self.lazy_images:
            record[_NAMES.IMAGE_STR] = self._image_url(path)
        item = ImageMemoryItem.from_mapping(record)
        with self._lock:
            self._screenshots.add_memory_item(item)

    def _image_url(self, path: str) -> str:
        """Return the image at ``path`` as a URL; on failure warn and return ``""`` (UFO's empty image)."""
        try:
            return image_data_url(path)
        except ImageReadError as exc:
            if self.strict_images:
                raise
            msg = f"{exc} An empty image is sent in its place, as UFO does; pass strict_images=True to raise."
            warnings.warn(ImageReadWarning(msg), stacklevel=3)
            return ""

    def load_questions(self, file_path: str | os.PathLike[str], last_k: int = -1) -> int:
        """Add question records from a JSONL file (one JSON object per line).

        Lines that are not JSON objects are skipped with a warning; ``last_k``
        counts only the valid records. A file that does not exist adds nothing
        (as in UFO, whose agents call this at start-up before any question was
        asked); nothing is added if the file cannot be read.

        Args:
            file_path: The JSONL file.
            last_k: Add only the last ``last_k`` valid records; ``-1`` adds all.

        Returns:
            How many records were added (0 for a missing file). UFO's
            ``load_questions`` returns ``None``; code that ignores the result,
            as UFO's does, is unaffected (see ``docs/ufo.md``).

        Raises:
            OSError: if the file exists but cannot be read (a directory, no permission).
            InvalidArgumentError: if ``last_k`` is below ``-1``, or the path holds a NUL byte.

        Warns:
            SkippedRecordWarning: naming the file and the lines skipped.
        """
        records = read_questions(file_path, last_k)
        with self._lock:
            self._questions.add_memory_items(records)
        return len(records)

    # -- JSON ----------------------------------------------------------------

    def questions_to_json(self) -> str:
        """Return ``questions`` as UFO's JSON array (see ``Memory.to_json``)."""
        return self._questions.to_json()

    def requests_to_json(self) -> str:
        """Return ``requests`` as UFO's JSON array (see ``Memory.to_json``)."""
        return self._requests.to_json()

    def trajectories_to_json(self) -> str:
        """Return ``trajectories`` as UFO's JSON array (see ``Memory.to_json``)."""
        return self._trajectories.to_json()

    def screenshots_to_json(self) -> str:
        """Return ``screenshots`` as UFO's JSON array of screenshot records (see ``Memory.to_json``)."""
        return self._screenshots.to_json()

    def blackboard_to_dict(self) -> dict[str, list[dict[str, Any]]]:
        """Return every section as a list of fresh field dicts, keyed by section name."""
        with self._lock:
            return {name: memory.to_list_of_dicts() for name, memory in self._sections().items()}

    def blackboard_to_json(self) -> str:
        """Return :meth:`blackboard_to_dict` as UFO writes it (``json.dumps`` with its defaults).

        Values ``json.dumps`` refuses are written as type tags (see
        ``Memory.to_json``); :meth:`save` writes the lossless form.

        Raises:
            SerializationError: naming the field and step of a value that cannot be encoded.
        """
        with self._lock:
            # json.dumps writes a dict as "{" + '"key": value' joined by ", " + "}";
            # each section's to_json is json.dumps of its list.
            body = ", ".join(
                f'"{name}": {memory.to_json()}' for name, memory in self._sections().items()
            )
        return "{" + body + "}"

    def blackboard_from_dict(self, blackboard_dict: Mapping[str, Any]) -> None:
        """Replace every section with the records of ``blackboard_dict``, all or nothing.

        Reads everything UFO writes: sections missing from the dict become
        empty, keys that are not sections are ignored (as UFO ignores them),
        and screenshot records load as they are (``metadata`` may be
        ``None``, extra fields stay) as :class:`ImageMemoryItem`. If a
        section or record has the wrong shape the blackboard is unchanged.

        Raises:
            ArgumentTypeError: if the dict, a section or a record has the wrong shape.
            InvalidKeyError: if a record has a key that is not a string.
            FieldValidationError: if a record is refused by its item class.
        """
        self._install(sections_from_dict(blackboard_dict, ImageMemoryItem))

    def _install(self, built: Mapping[str, list[MemoryItem]]) -> None:
        with self._lock:
            for name, memory in self._sections().items():
                memory.load(built.get(name, []))

    # -- files ---------------------------------------------------------------

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the whole blackboard to ``path`` as one versioned JSON document, atomically.

        Values JSON cannot hold are written as codec type tags, so :meth:`load`
        gives back equal sections, screenshots included.

        Raises:
            SerializationError: if a value cannot be encoded; no file is written.
            InvalidArgumentError: if ``path`` holds a NUL byte; no file is written.
        """
        with self._lock:
            sections = {
                name: _codec.loads(memory.to_json_bytes(), source=f"section {name!r}")
                for name, memory in self._sections().items()
            }
        document = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "sections": sections}
        _codec.atomic_write(path, [_codec.dumps(document)])

    def load(
        self,
        path: str | os.PathLike[str],
        *,
        on_unknown_class: OnUnknownClass = "error",
        trusted_import: bool = False,
    ) -> None:
        """Replace every section with those saved in ``path``, all or nothing.

        Reads files written by :meth:`save` and files holding
        :meth:`blackboard_to_json` (or UFO's ``json.dump`` of
        ``blackboard_to_dict()``).

        Args:
            path: The file.
            on_unknown_class: ``"base"`` loads items of a class this process
                does not define as plain ``MemoryItem`` (and enum members of an
                unknown class as their values) instead of raising.
            trusted_import: Import the modules the file names to find its
                classes. This runs their code: only for files you trust.

        Raises:
            FileNotFoundError: if ``path`` does not exist.
            InvalidArgumentError: if ``path`` holds a NUL byte.
            CorruptSessionError: naming the file and the bad part; the blackboard is unchanged.
            UnsupportedVersionError: if a newer kvmemory wrote the file.
        """
        built = read_board_file(
            path,
            screenshot_class=ImageMemoryItem,
            on_unknown_class=on_unknown_class,
            trusted_import=trusted_import,
        )
        self._install(built)

    @staticmethod
    def read_json_file(file_path: str | os.PathLike[str], last_k: int = -1) -> list[Any]:
        """Return the JSON values of a JSONL file's lines, as UFO's ``read_json_file`` does.

        ``last_k`` counts lines, as in UFO: only the last ``last_k`` lines
        are read (``-1`` reads all; ``0`` reads none, where UFO read all).
        A missing file, or an empty file name (UFO's ``QA_PAIR_FILE`` left
        unset), gives ``[]``. Lines that are not JSON are skipped with a
        warning (UFO printed one); blank lines are skipped silently.

        Args:
            file_path: The JSONL file.
            last_k: Read only the last ``last_k`` lines; ``-1`` reads all.

        Raises:
            InvalidArgumentError: if ``last_k`` is below ``-1``, or the path holds a NUL byte.

        Warns:
            SkippedRecordWarning: naming the file and the lines skipped.
        """
        return read_json_lines(file_path, last_k)

    @classmethod
    def from_file(
        cls,
        path: str | os.PathLike[str],
        *,
        on_unknown_class: OnUnknownClass = "error",
        trusted_import: bool = False,
        **options: Any,
    ) -> Blackboard:
        """Open a blackboard saved with :meth:`save`, or a file of :meth:`blackboard_to_json`.

        Args:
            path: The file.
            on_unknown_class: See :meth:`load`.
            trusted_import: See :meth:`load`.
            **options: Passed to the constructor (``counter``).

        Raises:
            FileNotFoundError: if ``path`` does not exist.
            CorruptSessionError: naming the file and the bad part.
        """
        board = cls(**options)
        board.load(path, on_unknown_class=on_unknown_class, trusted_import=trusted_import)
        return board

    # -- prompts -------------------------------------------------------------

    def texts_to_prompt(
        self, memory: Memory, prefix: str, *, last_k: int | None = None
    ) -> list[Part]:
        """Return one text part: ``prefix``, a newline, a space, and the items as JSON.

        The JSON is written like Python's ``json.dumps`` with default options,
        as UFO writes it.

        Args:
            memory: The section to render.
            prefix: The section title (``"[Request History:]"``).
            last_k: Only the newest ``last_k`` items.
        """
        records = _records(memory, last_k)
        return [text_part(prefix, [ufo_json(r) for r in records])]

    def screenshots_to_prompt(
        self, *, last_k: int | None = None, max_images: int | None = None
    ) -> list[Part]:
        """Return two parts per screenshot: its metadata as JSON text, then its image.

        The image is the record's ``image_str``, as UFO sends it. A record
        without one (``lazy_images``, or a record of an older kvmemory file)
        has its ``image_path`` read now, into a ``data:`` URL; URLs pass
        through, and a file that cannot be read is sent as ``""`` with an
        :class:`ImageReadWarning`.

        Args:
            last_k: Only the newest ``last_k`` screenshots.
            max_images: At most this many screenshots, the newest.

        Raises:
            ImageReadError: with ``strict_images``, naming a file that cannot be read.
        """
        records = _records(self._screenshots, _smallest(last_k, max_images))
        return self._screenshot_parts(records)

    def blackboard_to_prompt(
        self,
        *,
        last_k: int | Mapping[str, int] | None = None,
        max_tokens: int | None = None,
        max_images: int | None = None,
    ) -> list[Part]:
        """Return the blackboard as chat content parts, in UFO's order and wording.

        A ``[Blackboard:]`` text part, then ``[Questions & Answers:]``,
        ``[Request History:]`` and ``[Step Trajectories Completed Previously:]``
        parts, then the screenshots. With no arguments the parts are exactly
        UFO's.

        With ``max_tokens``, sections keep their newest items: while the prompt
        costs more than the budget (text under the blackboard's counter, plus
        ``counter.image_tokens`` per screenshot), the oldest item of the most
        expensive section is dropped.

        Args:
            last_k: Newest items to keep, for every section (an int) or per
                section name (``{"trajectories": 5}``).
            max_tokens: The budget for the whole prompt.
            max_images: At most this many screenshots, the newest.

        Raises:
            BudgetExceededError: if the section titles alone exceed ``max_tokens``.
            ImageReadError: with ``strict_images``, naming a file that cannot be read.
            InvalidArgumentError: naming an unknown section in ``last_k``.

        Warns:
            ImageReadWarning: naming a screenshot that could not be read (sent as an empty image).
        """
        per_section = _per_section(last_k)
        with self._lock:
            texts = {
                name: [ufo_json(r) for r in _records(memory, per_section.get(name))]
                for name, memory in self._sections().items()
                if name != "screenshots"
            }
            shots = _records(
                self._screenshots, _smallest(per_section.get("screenshots"), max_images)
            )
        if max_tokens is not None:
            trim_to_budget(texts, shots, max_tokens, self.counter)
        parts: list[Part] = [{"type": "text", "text": BLACKBOARD_PREFIX}]
        parts.append(text_part(QUESTIONS_PREFIX, texts["questions"]))
        parts.append(text_part(REQUESTS_PREFIX, texts["requests"]))
        parts.append(text_part(TRAJECTORIES_PREFIX, texts["trajectories"]))
        parts.extend(self._screenshot_parts(shots))
        return parts

    def _screenshot_parts(self, records: Iterable[Mapping[str, Any]]) -> list[Part]:
        parts: list[Part] = []
        for record in records:
            if _NAMES.IMAGE_STR in record:
                url = record[_NAMES.IMAGE_STR]
            else:
                url = self._image_url(record.get(_NAMES.IMAGE_PATH, ""))
            parts.append({"type": "text", "text": metadata_text(record)})
            parts.append({"type": "image_url", "image_url": {"url": url}})
        return parts

    # -- state ---------------------------------------------------------------

    def is_empty(self) -> bool:
        """Return whether every section is empty."""
        with self._lock:
            return all(memory.is_empty() for memory in self._sections().values())

    def clear(self) -> None:
        """Empty every section."""
        with self._lock:
            for memory in self._sections().values():
                memory.clear()

    def __repr__(self) -> str:
        sizes = ", ".join(f"{name}={len(memory)}" for name, memory in self._sections().items())
        return f"<Blackboard {sizes}>"


def _records(memory: Memory, last_k: int | None) -> list[dict[str, Any]]:
    if last_k is None:
        return memory.to_list_of_dicts()
    return [item.to_dict() for item in memory.last(last_k)]


def _smallest(*bounds: int | None) -> int | None:
    given = [b for b in bounds if b is not None]
    return min(given) if given else None


def _per_section(last_k: int | Mapping[str, int] | None) -> dict[str, int]:
    if last_k is None:
        return {}
    if isinstance(last_k, int):
        return dict.fromkeys(SECTIONS, last_k)
    unknown = [name for name in last_k if name not in SECTIONS]
    if unknown:
        msg = f"last_k names unknown sections {unknown}; expected some of {list(SECTIONS)}."
        raise InvalidArgumentError(msg)
    return dict(last_k)
