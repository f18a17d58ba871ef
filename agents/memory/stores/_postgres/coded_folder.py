"""Where a PostgreSQL handle keeps its sessions' coded part vectors: a local folder the user names (``vector_cache``), none by default.

A session whose part vectors pass the kept-vector budget is kept coded as
int8 (``agents.memory.stores._search.compact``); building that table reads
every stored vector from the server (100,000 UFO-shaped steps cut into
parts: 2.1 GiB). With a folder named, a handle saves the table there as it
builds it and a fresh handle's first query loads it where it is current,
or catches a stale one up through the change log
(``agents.memory.stores._search.coded_file``: the tag, the HMAC keyed by
the session's first stored vector rows, the checks of its parts). The
database stays the record; the folder is this machine's cache of it.

Files: ``<folder>/<database>/<sha1 of the session id>-<sha1 of the fields>``,
``<database>`` a digest of the store's URL (without its password), the
database's name and the oid of its ``kvmemory_vectors`` table, so that two
databases, two schemas, or tables dropped and made again never share a file.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

from agents.memory.exceptions import StoreArgumentError
from agents.memory.stores._core.backend import Backend
from agents.memory.stores._search.coded_file import coded_name, remove_coded

__all__ = ["CodedFolder", "vector_cache_folder"]

_IDENTITY = "SELECT current_database(), to_regclass('kvmemory_vectors')::oid::bigint"


def _hex(text: str) -> str:
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()


def vector_cache_folder(folder: object) -> str | None:
    """Return ``folder`` as an absolute path (``None`` stays ``None``: no folder).

    Raises:
        StoreArgumentError: if ``folder`` is not a non-empty string.
    """
    if folder is None:
        return None
    if not isinstance(folder, str) or not folder:
        msg = f"vector_cache must be the path of a local folder for the coded part vectors (or None for none), got {folder!r}."
        raise StoreArgumentError(msg)
    return os.path.abspath(folder)


class CodedFolder(Backend):
    """The coded part vector files of a PostgreSQL backend in the folder ``vector_cache`` (a base of ``PostgresBackend``)."""

    url: str
    vector_cache: str | None = None
    """The folder of the coded files (absolute; set by ``PostgresStore``), or ``None``: none kept."""
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
        """Return the file of the session's coded part vectors over ``fields`` in the folder ``vector_cache`` (``None`` where none is named)."""
        if self.vector_cache is None:
            return None
        database = self._identity()
        if database is None:
            return None
        return os.path.join(self.vector_cache, database, coded_name(session_id, fields))

    @property
    def saves_vector_snapshots(self) -> bool:
        """Whether this handle saves coded part vectors: wherever a folder is named (a read-only handle too: the folder is this machine's, not the database's)."""
        return self.vector_cache is not None

    def remove_session_files(self, session_id: str) -> None:
        """Remove the deleted session's coded files from the folder (one left would never be taken again, only hold the disk)."""
        if self.vector_cache is None:
            return
        database = self._identity()
        if database is None:
            return
        remove_coded(os.path.join(self.vector_cache, database), session_id)
