"""The file formats of a memory: UFO's JSON text, kvmemory's JSON, session files, JSONL, pickles.

:class:`SessionFormats` gives ``Memory`` its reading and writing methods
(``to_json``, ``save``, ``from_file``, ``read_jsonl``, ...). It holds no
state: it reads a memory through ``_snapshot()`` (the items as a list later
changes do not touch) and ``_header()`` (the session file header), and loads
through ``_replace(items)`` and ``_take(header, items)``, which apply a whole
new content in one step, so a bad file leaves the memory as it was; an
unpickled memory makes its parts anew through ``_restart``. The
encodings themselves are the codec's (``_item``, ``_codec``) and the session
layouts ``_session``'s.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import IO, TYPE_CHECKING, Any, ClassVar

from typing_extensions import Self

from agents.memory import _session
from agents.memory._codec import OnUnencodable
from agents.memory._item import MemoryItem, OnUnknownClass, items_from_mappings
from agents.memory._steps import fields_of
from agents.memory._wire import dumps_items, ufo_json_items
from agents.memory.exceptions import ArgumentTypeError

if TYPE_CHECKING:
    import threading

    from agents.memory._listeners import Listeners

__all__ = ["SessionFormats"]


class SessionFormats:
    """The reading, writing and pickling methods of ``Memory`` (a mixin of methods over its hooks)."""

    if TYPE_CHECKING:

        def __init__(self, items: Iterable[MemoryItem] | None = None, **options: Any) -> None: ...

        @property
        def step_key(self) -> str: ...

        def _snapshot(self) -> list[MemoryItem]: ...

        def _replace(self, items: list[MemoryItem]) -> None: ...

        def _take(self, header: Mapping[str, Any], items: list[MemoryItem]) -> None: ...

        def _restart(self, settings: Mapping[str, Any], items: list[MemoryItem]) -> None: ...

        _RUNTIME: ClassVar[frozenset[str]]
        _listeners: Listeners
        session_id: str | None
        metadata: dict[str, Any]
        created_at: str

        @property
        def max_items(self) -> int | None: ...

        @property
        def lock(self) -> threading.RLock: ...

    def to_json(self, *, on_unencodable: OnUnencodable = "error") -> str:
        """Return the items as UFO writes them: ``json.dumps`` of the list of field dicts.

        Byte for byte what UFO's ``Memory.to_json`` writes for every value it
        can write: ``", "`` and ``": "`` separators, non-ASCII text escaped,
        ``str``/``int`` enums as their values, tuples as lists, so
        ``json.loads(memory.to_json())`` gives UFO's values back. A value
        ``json.dumps`` refuses (``datetime``, ``set``, ``bytes``, ...) is
        written as its type tag where UFO would raise; :meth:`from_json`
        decodes the tags. Items come back as plain ``MemoryItem``; use
        :meth:`to_json_bytes` or :meth:`save` to keep classes and types.

        Raises:
            SerializationError: naming the key, step and type of a value that
                cannot be encoded under ``on_unencodable``.
        """
        return ufo_json_items(
            self._snapshot(), step_key=self.step_key, on_unencodable=on_unencodable
        )

    def to_json_bytes(self, *, on_unencodable: OnUnencodable = "error") -> bytes:
        """Return the items in kvmemory's lossless form: a compact UTF-8 JSON array.

        Plain items are their field objects; values JSON cannot hold
        (``tuple``, ``datetime``, enums, NaN, ...) and typed item classes are
        kept with type tags (see ``docs/format.md``), so :meth:`from_json`
        gives back an equal memory. Session files and stores use this form.

        Raises:
            SerializationError: naming the key, step and type of a value that
                cannot be encoded under ``on_unencodable``.
        """
        return dumps_items(self._snapshot(), step_key=self.step_key, on_unencodable=on_unencodable)

    def to_list_of_dicts(self) -> list[dict[str, Any]]:
        """Return each item's fields as a new dict, in order."""
        return [dict(f) for f in map(fields_of, self._snapshot())]

    def from_list_of_dicts(
        self, data: Iterable[Mapping[str, Any]], *, item_class: type[MemoryItem] = MemoryItem
    ) -> None:
        """Replace the content with one item per mapping, all or nothing.

        Raises:
            ArgumentTypeError: naming the position of an element that is not a mapping.
            InvalidKeyError: naming a key that is not a string.
            FieldValidationError: if ``item_class`` declares fields and one is invalid.
        """
        self._replace(items_from_mappings(item_class, data, "the memory was left unchanged"))

    def save(
        self, path: str | os.PathLike[str], *, on_unencodable: OnUnencodable = "error"
    ) -> None:
        """Write the memory as a versioned session file, atomically.

        A path ending in ``.jsonl`` gets a JSONL stream (a header line, then one
        item per line); any other path gets one JSON document. The file is
        written to a temporary name, flushed to disk and renamed, so a crash
        leaves either the old file or the new one.

        Raises:
            SerializationError: if a value cannot be encoded; no file is written.
            InvalidArgumentError: if ``path`` holds a NUL byte; no file is written.
        """
        _session.save_items(
            path,
            self._header(),
            self._snapshot(),
            step_key=self.step_key,
            on_unencodable=on_unencodable,
        )

    def write_jsonl(self, stream: IO[bytes], *, on_unencodable: OnUnencodable = "error") -> None:
        """Stream the memory to a binary file as JSONL: a header line, then one line per item.

        Raises:
            SerializationError: if a value cannot be encoded (earlier lines are already written).
        """
        chunks = _session.session_chunks(
            self._header(),
            [self._snapshot()],
            jsonl=True,
            step_key=self.step_key,
            on_unencodable=on_unencodable,
        )
        for chunk in chunks:
            stream.write(chunk)

    @classmethod
    def from_file(
        cls,
        path: str | os.PathLike[str],
        *,
        on_unknown_class: OnUnknownClass = "error",
        trusted_import: bool = False,
        **options: Any,
    ) -> Self:
        """Open a session file (JSON document, JSONL stream or UFO's bare array) as a new memory.

        Args:
            path: The file to read.
            on_unknown_class: ``"base"`` loads items of a class this process
                does not define as plain ``MemoryItem`` (and enum members of an
                unknown class as their values) instead of raising.
            trusted_import: Import the modules the file names to find its
                classes. This runs their code: only for files you trust.
            **options: Passed to the constructor (``max_items``, ``callbacks``).

        Raises:
            FileNotFoundError: if ``path`` does not exist.
            InvalidArgumentError: if ``path`` holds a NUL byte.
            CorruptSessionError: naming the file and position of invalid content.
            UnsupportedVersionError: if a newer kvmemory wrote the file.
        """
        memory = cls(**options)
        memory.load_file(path, on_unknown_class=on_unknown_class, trusted_import=trusted_import)
        return memory

    def load_file(
        self,
        path: str | os.PathLike[str],
        *,
        on_unknown_class: OnUnknownClass = "error",
        trusted_import: bool = False,
    ) -> None:
        """Replace the content with a session file's items, all or nothing.

        The session id, metadata and step key saved in the file are restored.
        Classes are found among those this process defines; see
        :meth:`from_file` for ``on_unknown_class`` and ``trusted_import``.

        Raises:
            FileNotFoundError: if ``path`` does not exist.
            InvalidArgumentError: if ``path`` holds a NUL byte.
            CorruptSessionError: naming the file and position; the memory is unchanged.
            UnsupportedVersionError: if a newer kvmemory wrote the file.
        """
        options = _session.LoadOptions(on_unknown_class, trusted_import)
        self._take(*_session.read_path(path, options))

    @classmethod
    def from_json(
        cls,
        data: str | bytes,
        *,
        on_unknown_class: OnUnknownClass = "error",
        trusted_import: bool = False,
        **options: Any,
    ) -> Self:
        """Create a memory from :meth:`to_json` or :meth:`to_json_bytes` output, or a saved session document.

        See :meth:`from_file` for ``on_unknown_class`` and ``trusted_import``.

        Raises:
            CorruptSessionError: naming the position of invalid content.
        """
        memory = cls(**options)
        memory.load_json(data, on_unknown_class=on_unknown_class, trusted_import=trusted_import)
        return memory

    def load_json(
        self,
        data: str | bytes,
        *,
        source: str = "JSON input",
        on_unknown_class: OnUnknownClass = "error",
        trusted_import: bool = False,
    ) -> None:
        """Replace the content with the items of a JSON array or session document, all or nothing.

        See :meth:`from_file` for ``on_unknown_class`` and ``trusted_import``.

        Raises:
            CorruptSessionError: naming the position of invalid content; the memory is unchanged.
        """
        options = _session.LoadOptions(on_unknown_class, trusted_import)
        self._take(*_session.read_document(data, source, options))

    @classmethod
    def read_jsonl(
        cls,
        stream: IO[bytes],
        *,
        source: str = "JSONL input",
        on_unknown_class: OnUnknownClass = "error",
        trusted_import: bool = False,
        **options: Any,
    ) -> Self:
        """Create a memory from a JSONL stream written by :meth:`write_jsonl`, line by line.

        See :meth:`from_file` for ``on_unknown_class`` and ``trusted_import``.

        Raises:
            CorruptSessionError: naming the line of invalid content.
        """
        memory = cls(**options)
        load = _session.LoadOptions(on_unknown_class, trusted_import)
        memory._take(*_session.read_jsonl(stream, source, load))
        return memory

    # -- copying and pickling -------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        """Return what ``pickle`` and ``copy`` keep: the items and the settings, not the lock.

        The copy gets a lock of its own, builds its step index on its first
        lookup and has no observers (the search index is built again on the
        copy's first search; embeddings are computed again). Change callbacks
        travel with it (``pickle`` needs them to be picklable).

        Raises:
            ArgumentTypeError: if the memory writes to a store: a copy would
                write to the same session. Copy ``memory.content`` into a
                ``Memory`` instead.
        """
        with self.lock:
            if self._listeners.writer is not None:
                msg = (
                    f"{self!r} writes through to a store and cannot be pickled or copied (a copy "
                    "would write to the same session); copy its items instead: "
                    "Memory(copy.deepcopy(memory.content))."
                )
                raise ArgumentTypeError(msg)
            return _session.pickled_memory(
                {k: v for k, v in self.__dict__.items() if k not in self._RUNTIME},
                step_key=self.step_key,
                max_items=self.max_items,
                callbacks=self._listeners.callbacks,
                items=self._snapshot(),
            )

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Take the state :meth:`__getstate__` gave, with a new lock and no observers."""
        settings, attributes = _session.unpickled_memory(state)
        self.__dict__.update(attributes)
        self._restart(settings, list(settings["_items"]))

    # -- internals ---------------------------------------------------------------

    def _header(self) -> dict[str, Any]:
        """Return the session file header of this memory."""
        return _session.envelope(
            session_id=self.session_id,
            created_at=self.created_at,
            metadata=self.metadata,
            step_key=self.step_key,
        )
