"""Where a PostgreSQL handle keeps its sessions' coded part vectors: a local folder, by default this user's cache folder (``vector_cache="auto"``).

A session whose part vectors pass the kept-vector budget is kept coded as
int8 (``agents.memory.stores._search.compact``); building that table reads
every stored vector from the server (100,000 UFO-shaped steps cut into
parts: 2.1 GiB, 7.5 s for a fresh handle's first semantic query). A handle
saves the table in its folder as it builds it (and a writer as it closes,
``agents.memory.stores._search.coded_saves``), and a fresh handle's first
query loads it where it is current, or catches a stale one up through the
change log (``agents.memory.stores._search.coded_file``: the tag, the HMAC
keyed by the session's first stored vector rows, the checks of its
parts). The database stays the record; the folder is this machine's cache
of it, untrusted and unreliable: a file that fails its checks is not
used, and a folder that cannot be made, read or written (no home, a
read-only or full disk) leaves the handle to read the vectors from the
server, as without a folder, never failing a query or a write.

The folder: ``vector_cache="auto"`` (the default) is ``postgres`` in this
user's cache folder (:func:`cache_root`: ``$KVMEMORY_CACHE_DIR``, else
``%LOCALAPPDATA%\\kvmemory\\cache`` on Windows, ``~/Library/Caches/kvmemory``
on macOS, ``$XDG_CACHE_HOME/kvmemory`` or ``~/.cache/kvmemory`` elsewhere);
``None`` or ``"off"``: none; any other text: that folder. The folders a
handle makes are its owner's only (0o700; each file is made 0o600). After
each save the files of the folder are kept within :func:`cache_bytes`
(``$KVMEMORY_CACHE_MAX_BYTES``, 4 GiB by default): those used least
recently (saved or asked for: a handle marks the file it looks for) are
removed first; ``vector_cache_max_bytes=`` (an argument of ``PostgresStore``,
an option of its URL) sets that cap for one handle.

A folder that cannot be made, or a file in it that cannot be written, is
told once per folder and process with a :class:`VectorCacheWarning` that
names the folder and the fix (queries are still answered, from the
server): a default folder on a read-only home would otherwise slow every
fresh handle's first query in silence.

Files: ``<folder>/<database>/<sha1 of the session id>-<sha1 of the fields>``,
``<database>`` a digest of the store's URL (without its password), the
database's name and the oid of its ``kvmemory_vectors`` table, so that two
databases, two schemas, or tables dropped and made again never share a file.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import sys
import threading
import warnings
from typing import Any, Final

from agents.memory.exceptions import StoreArgumentError, VectorCacheWarning
from agents.memory.stores._core.backend import Backend
from agents.memory.stores._search.coded_file import coded_name, remove_coded

__all__ = [
    "CACHE_BYTES",
    "CACHE_DIR_ENV",
    "CACHE_MAX_BYTES_ENV",
    "CodedFolder",
    "cache_bytes",
    "cache_root",
    "trim_folder",
    "vector_cache_folder",
    "warn_unwritable",
]

CACHE_DIR_ENV: Final = "KVMEMORY_CACHE_DIR"
"""The environment variable naming this user's kvmemory cache folder (the default folder is ``postgres`` in it)."""

CACHE_MAX_BYTES_ENV: Final = "KVMEMORY_CACHE_MAX_BYTES"
"""The environment variable giving the bytes a folder of coded files keeps at most (:data:`CACHE_BYTES` where unset)."""

CACHE_BYTES: Final = 4 << 30
"""The bytes a folder of coded files keeps at most by default (100,000 UFO-shaped steps cut into parts: a 0.3 GB file)."""

_IDENTITY = "SELECT current_database(), to_regclass('kvmemory_vectors')::oid::bigint"
_DATABASE: Final = re.compile("[0-9a-f]{40}")  # a database's subfolder (``CodedFolder._identity``)
_CODED: Final = re.compile("[0-9a-f]{40}-[0-9a-f]{40}")  # a coded file (``coded_name``)
_PRIVATE: Final = 0o700


def _hex(text: str) -> str:
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()


def cache_root() -> str | None:
    """Return this user's kvmemory cache folder (absolute), or ``None`` where there is none to name (no home).

    ``$KVMEMORY_CACHE_DIR`` where set, else ``%LOCALAPPDATA%\\kvmemory\\cache``
    on Windows, ``~/Library/Caches/kvmemory`` on macOS, and
    ``$XDG_CACHE_HOME/kvmemory`` (an absolute one) or ``~/.cache/kvmemory``
    elsewhere. Nothing is made here.
    """
    named = os.environ.get(CACHE_DIR_ENV)
    if named:
        return os.path.abspath(os.path.expanduser(named))
    if sys.platform == "win32":
        local = os.environ.get("LOCALAPPDATA")
        return os.path.join(local, "kvmemory", "cache") if local else None
    if sys.platform == "darwin":
        base = os.path.join(os.path.expanduser("~"), "Library", "Caches")
    else:
        xdg = os.environ.get("XDG_CACHE_HOME", "")
        base = xdg if os.path.isabs(xdg) else os.path.join(os.path.expanduser("~"), ".cache")
    # A home that cannot be found leaves "~" as it is: no folder rather than one in the working folder.
    return os.path.join(base, "kvmemory") if os.path.isabs(base) else None


def cache_bytes(given: object = None) -> int:
    """Return the bytes a folder of coded files keeps at most: ``given`` where not ``None``, else ``$KVMEMORY_CACHE_MAX_BYTES`` where set, else :data:`CACHE_BYTES`.

    Raises:
        StoreArgumentError: if ``given`` is not ``None`` nor an integer >= 0,
            or the variable is set to anything but a whole number of bytes.
    """
    if given is not None:
        if isinstance(given, bool) or not isinstance(given, int) or given < 0:
            msg = f"vector_cache_max_bytes must be a whole number of bytes >= 0 (the coded vector files the folder keeps at most, 0 for none), or None for ${CACHE_MAX_BYTES_ENV} or {CACHE_BYTES} (4 GiB), got {given!r}."
            raise StoreArgumentError(msg)
        return given
    value = os.environ.get(CACHE_MAX_BYTES_ENV)
    if value is None or value == "":
        return CACHE_BYTES
    if not (value.isascii() and value.isdigit()):
        msg = f"{CACHE_MAX_BYTES_ENV}={value!r} must be a whole number of bytes (the coded vector files a folder keeps at most, 0 for none), or unset for {CACHE_BYTES} (4 GiB)."
        raise StoreArgumentError(msg)
    return int(value)


def vector_cache_folder(folder: object) -> str | None:
    """Return the folder that ``vector_cache`` names, absolute: ``"auto"`` this user's (``postgres`` in :func:`cache_root`), ``None`` or ``"off"`` none (``None``).

    Raises:
        StoreArgumentError: if ``folder`` is not ``None`` nor a non-empty string.
    """
    if folder is None or folder == "off":
        return None
    if not isinstance(folder, str) or not folder:
        msg = f"vector_cache must be 'auto' (this user's cache folder), 'off' or None (none), or the path of a local folder for the coded part vectors, got {folder!r}."
        raise StoreArgumentError(msg)
    if folder == "auto":
        root = cache_root()
        return None if root is None else os.path.join(root, "postgres")
    return os.path.abspath(folder)


_warned: set[str] = set()  # the folders told of (VectorCacheWarning), once each a process
_warned_lock = threading.Lock()


def warn_unwritable(folder: str, what: str, error: OSError) -> None:
    """Warn (:class:`VectorCacheWarning`) that the coded vector folder ``folder`` cannot be made or written (``what``: the path that failed), once per folder and process."""
    with _warned_lock:
        if folder in _warned:
            return
        _warned.add(folder)
    reason = error.strerror or type(error).__name__
    msg = (
        f"kvmemory cannot make or write its PostgreSQL vector cache folder {folder!r} "
        f"({reason}: {what!r}); fresh handles' first semantic and hybrid queries read every "
        "vector from the server instead (queries are still answered). Make the folder "
        f"writable, point ${CACHE_DIR_ENV} or vector_cache= at a writable local folder, or "
        "pass vector_cache='off' (?vector_cache=off) to keep none."
    )
    warnings.warn(msg, VectorCacheWarning, stacklevel=2)


def _made(folder: str) -> None:
    """Make ``folder`` and the folders above it that are missing, each its owner's only.

    Raises:
        OSError: if one cannot be made.
    """
    parent = os.path.dirname(folder)
    if os.path.isdir(folder) or parent == folder:
        return
    _made(parent)
    with contextlib.suppress(FileExistsError):  # made meanwhile by another handle
        os.mkdir(folder, _PRIVATE)


def trim_folder(folder: str, most: int, saved: str) -> None:
    """Remove the coded files under ``folder`` used least recently (oldest ``mtime`` first, ``saved`` last) until they hold at most ``most`` bytes.

    Only files named as coded files are counted or removed
    (``<folder>/<database>/<session>-<fields>``, each a sha1): a folder the
    user named may hold others, and a save's file not yet renamed in place
    is not one. What cannot be listed or removed stays: it is a cache.
    """
    files: list[tuple[bool, float, int, str]] = []
    for database in _entries(folder):
        if not (_DATABASE.fullmatch(database.name) and database.is_dir(follow_symlinks=False)):
            continue
        for entry in _entries(database.path):
            if not (_CODED.fullmatch(entry.name) and entry.is_file(follow_symlinks=False)):
                continue
            with contextlib.suppress(OSError):  # removed meanwhile
                stat = entry.stat(follow_symlinks=False)
                files.append((entry.path == saved, stat.st_mtime, stat.st_size, entry.path))
    total = sum(size for _, _, size, _ in files)
    for _, _, size, path in sorted(files):
        if total <= most:
            return
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass  # removed meanwhile
        except OSError:
            continue  # not ours, or in use (Windows): it stays, the cap is a best effort
        total -= size


def _entries(folder: str) -> list[os.DirEntry[str]]:
    """Return the entries of ``folder`` (none where it cannot be listed)."""
    try:
        with os.scandir(folder) as entries:
            return list(entries)
    except OSError:
        return []


class CodedFolder(Backend):
    """The coded part vector files of a PostgreSQL backend in the folder ``vector_cache`` (a base of ``PostgresBackend``)."""

    url: str
    vector_cache: str | None = None
    """The folder of the coded files (absolute; set by ``PostgresStore``), or ``None``: none kept."""
    vector_cache_bytes: int = CACHE_BYTES
    """The bytes the folder's files are kept within after each save (set by ``PostgresStore``: :func:`cache_bytes`)."""
    _database: str | None = None

    def query_rows(self, sql: str, params: Any = (), *, indexed: bool = False) -> list[Any]:
        raise NotImplementedError  # the backend's

    def _identity(self) -> str | None:
        """Return the digest that names this database's subfolder (read once), or ``None`` where it has no vector table."""
        if self._database is None:
            rows = self.query_rows(_IDENTITY, ())
            if not rows or rows[0][1] is None:
                return None
            self._database = _hex(repr((self.url, str(rows[0][0]), int(rows[0][1]))))
        return self._database

    def vector_snapshot_path(self, session_id: str, fields: str) -> str | None:
        """Return the file of the session's coded part vectors over ``fields`` in the folder ``vector_cache`` (``None`` where none is named).

        Its folder is made (its owner's only) where missing, and the file,
        where there is one, marked used now (its ``mtime``: the folder's cap
        removes the files used least recently first); what fails here is
        left to the load or save, which go without the file.
        """
        if self.vector_cache is None:
            return None
        database = self._identity()
        if database is None:
            return None
        path = os.path.join(self.vector_cache, database, coded_name(session_id, fields))
        try:
            _made(os.path.dirname(path))
        except OSError as exc:
            warn_unwritable(self.vector_cache, os.path.dirname(path), exc)
            return path  # a file there may be read still; a save fails and is told
        with contextlib.suppress(OSError):  # none yet, or not ours to mark
            os.utime(path)
        return path

    @property
    def saves_vector_snapshots(self) -> bool:
        """Whether this handle saves coded part vectors: wherever a folder is named (a read-only handle too: the folder is this machine's, not the database's)."""
        return self.vector_cache is not None

    def vector_snapshot_unsaved(self, path: str, error: OSError) -> None:
        """Warn that the folder cannot be written (:func:`warn_unwritable`, once per folder and process)."""
        if self.vector_cache is not None:
            warn_unwritable(self.vector_cache, path, error)

    def vector_snapshot_saved(self, path: str) -> None:
        """Keep the folder's files within :attr:`vector_cache_bytes`, the file just saved at ``path`` removed last (:func:`trim_folder`)."""
        if self.vector_cache is not None:
            trim_folder(self.vector_cache, self.vector_cache_bytes, path)

    def remove_session_files(self, session_id: str) -> None:
        """Remove the deleted session's coded files from the folder (one left would never be taken again, only hold the disk)."""
        if self.vector_cache is None:
            return
        database = self._identity()
        if database is None:
            return
        remove_coded(os.path.join(self.vector_cache, database), session_id)
