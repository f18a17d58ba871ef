"""The SQLite store: one file, many processes, the embedded default.

Layout (schema version 1, recorded in ``PRAGMA user_version``)::

    kvmemory_sessions(session_id TEXT PRIMARY KEY, step_key TEXT, created REAL)
    kvmemory_items(seq INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT,
                   step TEXT, created REAL, data BLOB)
    index (session_id, seq), index (session_id, step), index (session_id, created)

``data`` holds the codec's bytes for the item; ``step`` its canonical step
text, so step filters are answered by the ``(session_id, step)`` index. The
file runs in WAL mode; every write is one ``BEGIN IMMEDIATE`` transaction, so
writers from several processes queue on the busy timeout instead of failing
with "database is locked", and ``AUTOINCREMENT`` seqs follow commit order and
are never reused. Appends only insert rows; nothing is rewritten.

Durability follows ``synchronous`` (a URL option):

* ``full`` (default): the WAL is fsynced at every commit. A call that returned
  survives a process crash and a power cut.
* ``normal``: fsync only at checkpoints. A process crash loses nothing; a power
  cut can lose the last commits (never corrupts the file).
* ``off``: no fsync. A process crash loses nothing; a power cut can lose
  commits or corrupt the file.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final, Literal

from agents.memory import _codec
from agents.memory.exceptions import (
    CorruptStoreError,
    SchemaVersionError,
    StoreError,
    StoreNotFoundError,
)
from agents.memory.stores._base import BaseStore, Row

__all__ = ["SQLiteStore", "Synchronous"]

Synchronous = Literal["full", "normal", "off"]
SCHEMA_VERSION: Final = 1

_SCHEMA_V1: Final = (
    """CREATE TABLE IF NOT EXISTS kvmemory_sessions (
        session_id TEXT PRIMARY KEY,
        step_key TEXT NOT NULL,
        created REAL NOT NULL
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS kvmemory_items (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id TEXT NOT NULL,
        step TEXT,
        created REAL NOT NULL,
        data BLOB NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS kvmemory_items_session ON kvmemory_items (session_id, seq)",
    "CREATE INDEX IF NOT EXISTS kvmemory_items_step ON kvmemory_items (session_id, step)",
    "CREATE INDEX IF NOT EXISTS kvmemory_items_created ON kvmemory_items (session_id, created)",
)


def _migrate_0_to_1(con: sqlite3.Connection) -> None:
    for statement in _SCHEMA_V1:
        con.execute(statement)


# from-version -> step that brings the file to from-version + 1. Opening a file
# runs every step between its version and SCHEMA_VERSION, in one transaction.
_MIGRATIONS: Final[dict[int, Callable[[sqlite3.Connection], None]]] = {0: _migrate_0_to_1}

_CORRUPT_MARKERS: Final = ("not a database", "malformed", "disk image", "file is encrypted")


class SQLiteStore(BaseStore):
    """Sessions in one SQLite file, safe for several processes at once.

    Args:
        path: The database file; created (with its directory's permission) unless ``read_only``.
        synchronous: ``"full"`` (default), ``"normal"`` or ``"off"``; see the module docs.
        timeout: Seconds a writer waits for another process's transaction.
        read_only: Open without write access; the file must exist.
        url: The URL to report in messages (defaults to ``sqlite:///<path>``).

    Raises:
        StoreNotFoundError: if ``read_only`` and the file does not exist.
        CorruptStoreError: if the file is not an SQLite database.
        SchemaVersionError: if a newer kvmemory wrote the file.
        StoreError: if the file cannot be opened.
    """

    schema_version = SCHEMA_VERSION

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Synchronous = "full",
        timeout: float = 30.0,
        read_only: bool = False,
        url: str | None = None,
    ) -> None:
        self.path = os.fspath(path)
        super().__init__(url or f"sqlite:///{self.path}")
        if synchronous not in ("full", "normal", "off"):
            msg = f"synchronous must be 'full', 'normal' or 'off', got {synchronous!r}."
            raise ValueError(msg)
        self.synchronous: Synchronous = synchronous
        self.read_only = read_only
        self._lock = threading.RLock()
        if read_only and not os.path.exists(self.path):
            msg = f"SQLite store {self.path!r} does not exist; it cannot be opened read-only (drop ?mode=ro to create it)."
            raise StoreNotFoundError(msg)
        mode = "ro" if read_only else "rwc"
        # A path written with a leading "//" would read as a URI authority; POSIX
        # treats extra leading slashes as one.
        absolute = "/" + os.path.abspath(self.path).lstrip("/")
        uri = f"file:{urllib.parse.quote(absolute)}?mode={mode}"
        try:
            self._con = sqlite3.connect(
                uri, uri=True, timeout=timeout, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            msg = f"Cannot open SQLite store {self.path!r}: {exc}; check that the directory exists and is writable."
            raise StoreError(msg) from exc
        try:
            self._setup()
        except BaseException:
            self._con.close()
            raise

    # -- opening ------------------------------------------------------------------

    def _setup(self) -> None:
        con = self._con
        try:
            if not self.read_only:
                mode = con.execute("PRAGMA journal_mode=WAL").fetchone()[0]
                if (
                    str(mode).lower() != "wal"
                ):  # pragma: no cover - only on file systems without shared memory
                    msg = f"SQLite store {self.path!r} cannot use WAL mode (got {mode!r})."
                    raise StoreError(msg)
            con.execute(f"PRAGMA synchronous={self.synchronous.upper()}")
            version = con.execute("PRAGMA user_version").fetchone()[0]
            self._check_version(version)
            if version < SCHEMA_VERSION:
                if self.read_only:
                    if version == 0 and not self._has_tables():
                        return  # an empty file reads as a store without sessions
                    msg = f"SQLite store {self.path!r} has schema version {version}; open it once writable to migrate it to {SCHEMA_VERSION}."
                    raise SchemaVersionError(msg)
                with self._transaction("migrate"):
                    version = con.execute("PRAGMA user_version").fetchone()[0]
                    self._check_version(version)
                    while version < SCHEMA_VERSION:
                        _MIGRATIONS[version](con)
                        version += 1
                    con.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except sqlite3.Error as exc:
            raise self._error("open", None, exc) from exc

    def _check_version(self, version: int) -> None:
        if version > SCHEMA_VERSION:
            msg = (
                f"SQLite store {self.path!r} has schema version {version}, newer than the "
                f"{SCHEMA_VERSION} this kvmemory writes; upgrade kvmemory to open it."
            )
            raise SchemaVersionError(msg)

    def _has_tables(self) -> bool:
        row = self._con.execute(
            "SELECT count(*) FROM sqlite_master WHERE name = 'kvmemory_items'"
        ).fetchone()
        return bool(row[0])

    # -- plumbing ------------------------------------------------------------------

    def _error(self, action: str, session_id: str | None, exc: sqlite3.Error) -> StoreError:
        where = f" session {session_id!r} of" if session_id else ""
        text = str(exc)
        if any(marker in text for marker in _CORRUPT_MARKERS):
            msg = f"Cannot {action}{where} SQLite store {self.path!r}: the file is not a valid kvmemory database ({text}); restore it from a backup or open another path."
            return CorruptStoreError(msg)
        if "readonly" in text or "read-only" in text:
            msg = f"Cannot {action}{where} SQLite store {self.path!r}: it is open read-only ({text}); open it without ?mode=ro to write. Nothing was changed."
            return StoreError(msg)
        msg = f"Cannot {action}{where} SQLite store {self.path!r}: {text}; nothing was changed."
        return StoreError(msg)

    @contextlib.contextmanager
    def _transaction(self, action: str, session_id: str | None = None) -> Iterator[None]:
        con = self._con
        with self._lock:
            try:
                con.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise self._error(action, session_id, exc) from exc
            try:
                yield
                con.execute("COMMIT")
            except BaseException as exc:
                with contextlib.suppress(sqlite3.Error):
                    con.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise self._error(action, session_id, exc) from exc
                raise

    def _query(
        self, action: str, session_id: str | None, sql: str, params: Sequence[object] = ()
    ) -> list[Any]:
        with self._lock:
            try:
                return self._con.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise self._error(action, session_id, exc) from exc

    # -- primitives ----------------------------------------------------------------

    def _write(
        self,
        session_id: str,
        step_key: str,
        *,
        add: Sequence[Row] = (),
        delete: Sequence[int] = (),
        update: Sequence[tuple[int, str | None, bytes]] = (),
        clear: bool = False,
    ) -> tuple[list[int], int]:
        con = self._con
        added: list[int] = []
        deleted = 0
        with self._transaction("write to", session_id):
            if clear:
                con.execute("DELETE FROM kvmemory_items WHERE session_id = ?", (session_id,))
            if delete:
                deleted = con.execute(
                    "DELETE FROM kvmemory_items WHERE session_id = ? AND seq IN (SELECT value FROM json_each(?))",
                    (session_id, _json_list(delete)),
                ).rowcount
            if update:
                con.executemany(
                    "UPDATE kvmemory_items SET step = ?, data = ? WHERE session_id = ? AND seq = ?",
                    [(step, data, session_id, seq) for seq, step, data in update],
                )
            if add:
                self._ensure_session(session_id, step_key)
                if len(add) == 1:
                    step, created, data = add[0]
                    last = con.execute(
                        "INSERT INTO kvmemory_items (session_id, step, created, data) VALUES (?, ?, ?, ?)",
                        (session_id, step, created, data),
                    ).lastrowid
                else:
                    con.executemany(
                        "INSERT INTO kvmemory_items (session_id, step, created, data) VALUES (?, ?, ?, ?)",
                        [(session_id, step, created, data) for step, created, data in add],
                    )
                    last = con.execute("SELECT last_insert_rowid()").fetchone()[0]
                assert last is not None  # an INSERT always sets the last rowid
                # BEGIN IMMEDIATE makes this the only writer, so the seqs are consecutive.
                added = list(range(last - len(add) + 1, last + 1))
        return added, deleted

    def _ensure_session(self, session_id: str, step_key: str) -> None:
        con = self._con
        row = con.execute(
            "SELECT step_key FROM kvmemory_sessions WHERE session_id = ?", (session_id,)
        ).fetchone()
        if row is None:
            con.execute(
                "INSERT INTO kvmemory_sessions (session_id, step_key, created) VALUES (?, ?, ?)",
                (session_id, step_key, time.time()),
            )
        elif row[0] != step_key:
            msg = (
                f"Session {session_id!r} of SQLite store {self.path!r} files steps under "
                f"{row[0]!r}, not {step_key!r}; open it with step_key={row[0]!r}. Nothing was written."
            )
            raise StoreError(msg)

    def _fetch(
        self, session_id: str, *, steps: Sequence[str] | None, after: int | None
    ) -> list[tuple[int, bytes]]:
        sql = "SELECT seq, data FROM kvmemory_items WHERE session_id = ?"
        params: list[object] = [session_id]
        if after is not None:
            sql += " AND seq > ?"
            params.append(after)
        if steps is not None:
            sql += " AND step IN (SELECT value FROM json_each(?))"
            params.append(_json_list(steps))
        sql += " ORDER BY seq"
        if self.read_only and not self._readable():
            return []
        return self._query("read", session_id, sql, params)

    def _readable(self) -> bool:
        with self._lock:
            return self._has_tables()

    def _count(self, session_id: str) -> int:
        if self.read_only and not self._readable():
            return 0
        rows = self._query(
            "count",
            session_id,
            "SELECT count(*) FROM kvmemory_items WHERE session_id = ?",
            (session_id,),
        )
        return int(rows[0][0])

    def _delete_returning(
        self, action: str, session_id: str, sql: str, params: tuple[object, ...]
    ) -> list[int]:
        with self._transaction(action, session_id):
            return [int(row[0]) for row in self._con.execute(sql, params).fetchall()]

    def _delete_steps(self, session_id: str, steps: Sequence[str]) -> list[int]:
        return self._delete_returning(
            "delete steps from",
            session_id,
            "DELETE FROM kvmemory_items WHERE session_id = ? AND step IN (SELECT value FROM json_each(?)) RETURNING seq",
            (session_id, _json_list(steps)),
        )

    def _clear(self, session_id: str) -> int:
        with self._transaction("clear", session_id):
            return self._con.execute(
                "DELETE FROM kvmemory_items WHERE session_id = ?", (session_id,)
            ).rowcount

    def _sessions(self) -> list[str]:
        if self.read_only and not self._readable():
            return []
        rows = self._query(
            "list sessions of",
            None,
            "SELECT session_id FROM kvmemory_sessions ORDER BY session_id",
        )
        return [str(row[0]) for row in rows]

    def _delete_session(self, session_id: str) -> bool:
        con = self._con
        with self._transaction("delete", session_id):
            con.execute("DELETE FROM kvmemory_items WHERE session_id = ?", (session_id,))
            gone = con.execute(
                "DELETE FROM kvmemory_sessions WHERE session_id = ?", (session_id,)
            ).rowcount
        return gone > 0

    def _keep_last(self, session_id: str, n: int) -> list[int]:
        return self._delete_returning(
            "trim",
            session_id,
            "DELETE FROM kvmemory_items WHERE session_id = ? AND seq <= ("
            "SELECT seq FROM kvmemory_items WHERE session_id = ? ORDER BY seq DESC LIMIT 1 OFFSET ?"
            ") RETURNING seq",
            (session_id, session_id, n),
        )

    def _expire(self, session_id: str, cutoff: float) -> list[int]:
        return self._delete_returning(
            "expire items of",
            session_id,
            "DELETE FROM kvmemory_items WHERE session_id = ? AND created < ? RETURNING seq",
            (session_id, cutoff),
        )

    def _close(self) -> None:
        with self._lock:
            self._con.close()


def _json_list(values: Sequence[object]) -> str:
    return _codec.dumps(list(values)).decode("utf-8")
