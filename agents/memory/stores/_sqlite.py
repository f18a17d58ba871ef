"""The SQLite store: one file, many processes, the embedded default.

Layout (schema version 3, recorded in ``PRAGMA user_version``)::

    kvmemory_sessions(session_id TEXT PRIMARY KEY, step_key TEXT, created REAL,
                      metadata BLOB)                                   -- metadata: v2
    kvmemory_items(seq INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT,
                   step TEXT, created REAL, data BLOB)
    index (session_id, seq), index (session_id, step), index (session_id, created)
    kvmemory_embedders(session_id TEXT PRIMARY KEY, model TEXT,
                       dimension INTEGER)                              -- v3
    kvmemory_vectors(session_id TEXT, seq INTEGER, fields TEXT, vector BLOB,
                     PRIMARY KEY (session_id, seq, fields))            -- v3

``data`` holds the codec's bytes for the item; ``step`` its canonical step
text, so step filters are answered by the ``(session_id, step)`` index;
``metadata`` the codec's bytes for the session's metadata; ``vector`` an
item's unit vector as little-endian float32 (empty for an item without
text), embedded over the fields ``fields`` names (``*``: all) by the model
``kvmemory_embedders`` records for the session. Semantic search reads the
vectors a page at a time and computes exact cosines with numpy (the
sqlite-vec extension is not used). The file runs in
WAL mode; every write is one ``BEGIN IMMEDIATE`` transaction, so writers from
several processes queue on the busy timeout instead of failing with
"database is locked", and ``AUTOINCREMENT`` seqs follow commit order and are
never reused, not even by a session deleted and created again. Appends only
insert rows; nothing is rewritten.

A new file is created readable by its owner only (``0600``); SQLite gives
its ``-wal`` and ``-shm`` files the same permissions. A file that is not a
kvmemory store (not an SQLite database, or a database with other tables) is
refused with :class:`CorruptStoreError` before anything is written to it.

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
import urllib.parse
from collections.abc import Iterator, Sequence
from typing import Any, Final, Literal

from agents.memory import _codec
from agents.memory.exceptions import (
    CorruptStoreError,
    InvalidArgumentError,
    SchemaVersionError,
    StoreError,
    StoreNotFoundError,
)
from agents.memory.stores._base import (
    BaseStore,
    IndexEntry,
    Row,
    RowUpdate,
    SessionRow,
    check_schema_version,
    check_store_path,
    migrate,
)

__all__ = ["SQLiteStore", "Synchronous"]

Synchronous = Literal["full", "normal", "off"]


def _create_v1(con: sqlite3.Connection) -> None:
    con.execute(
        """CREATE TABLE IF NOT EXISTS kvmemory_sessions (
        session_id TEXT PRIMARY KEY,
        step_key TEXT NOT NULL,
        created REAL NOT NULL
    ) WITHOUT ROWID"""
    )
    con.execute(
        """CREATE TABLE IF NOT EXISTS kvmemory_items (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id TEXT NOT NULL,
        step TEXT,
        created REAL NOT NULL,
        data BLOB NOT NULL
    )"""
    )
    con.execute(
        "CREATE INDEX IF NOT EXISTS kvmemory_items_session ON kvmemory_items (session_id, seq)"
    )
    con.execute(
        "CREATE INDEX IF NOT EXISTS kvmemory_items_step ON kvmemory_items (session_id, step)"
    )
    con.execute(
        "CREATE INDEX IF NOT EXISTS kvmemory_items_created ON kvmemory_items (session_id, created)"
    )


def _add_session_metadata(con: sqlite3.Connection) -> None:
    # x'7b7d' is the codec's bytes for an empty dict: sessions of v1 had no metadata.
    con.execute("ALTER TABLE kvmemory_sessions ADD COLUMN metadata BLOB NOT NULL DEFAULT x'7b7d'")


def _add_vectors(con: sqlite3.Connection) -> None:
    con.execute(
        """CREATE TABLE IF NOT EXISTS kvmemory_embedders (
        session_id TEXT PRIMARY KEY,
        model TEXT NOT NULL,
        dimension INTEGER NOT NULL
    ) WITHOUT ROWID"""
    )
    # A rowid table: its rows hold a kB or more of vector, which WITHOUT ROWID
    # tables keep inside the index pages less well.
    con.execute(
        """CREATE TABLE IF NOT EXISTS kvmemory_vectors (
        session_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        fields TEXT NOT NULL,
        vector BLOB NOT NULL,
        PRIMARY KEY (session_id, seq, fields)
    )"""
    )


MIGRATIONS: Final = (_create_v1, _add_session_metadata, _add_vectors)
"""Step ``i`` brings a file from schema version ``i`` to ``i + 1`` (see :func:`migrate`)."""

SCHEMA_VERSION: Final = len(MIGRATIONS)

_NOT_A_DATABASE: Final = ("not a database", "file is encrypted")
_DAMAGED: Final = ("malformed", "disk image")


class SQLiteStore(BaseStore):
    """Sessions in one SQLite file, safe for several processes at once.

    Args:
        path: The database file; created (readable by its owner only) unless ``read_only``.
        synchronous: ``"full"`` (default), ``"normal"`` or ``"off"``; see the module docs.
        timeout: Seconds a writer waits for another process's transaction.
        read_only: Open without write access: the file must exist, and it is
            never created, migrated or written.
        url: The URL to report in messages (defaults to ``sqlite:///<path>``).

    Raises:
        InvalidStoreURLError: if the path holds a NUL character.
        StoreNotFoundError: if ``read_only`` and the file does not exist.
        CorruptStoreError: if the file is not a kvmemory store (it is left unchanged).
        SchemaVersionError: if a newer kvmemory wrote the file, or ``read_only``
            meets an older layout that needs a migration.
        StoreError: if the file cannot be opened.
    """

    schema_version = SCHEMA_VERSION
    driver_errors = (sqlite3.Error,)

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Synchronous = "full",
        timeout: float = 30.0,
        read_only: bool = False,
        url: str | None = None,
    ) -> None:
        self.path = check_store_path(path)
        super().__init__(url or f"sqlite:///{self.path}", read_only=read_only)
        if synchronous not in ("full", "normal", "off"):
            msg = f"synchronous must be 'full', 'normal' or 'off', got {synchronous!r}."
            raise InvalidArgumentError(msg)
        self.synchronous: Synchronous = synchronous
        self._lock = threading.RLock()
        self._empty = False
        if read_only and not os.path.exists(self.path):
            msg = f"SQLite store {self.path!r} does not exist; it cannot be opened read-only (drop ?mode=ro to create it)."
            raise StoreNotFoundError(msg)
        if not read_only:
            self._create_file()
        # A path written with a leading "//" would read as a URI authority; POSIX
        # treats extra leading slashes as one.
        absolute = "/" + os.path.abspath(self.path).lstrip("/")
        uri = f"file:{urllib.parse.quote(absolute)}?mode={'ro' if read_only else 'rw'}"
        if read_only and not os.path.exists(f"{self.path}-wal"):
            # No -wal file: no connection has the database open, and every commit is in
            # the main file. Reading it as immutable keeps SQLite from creating the
            # -wal and -shm files a read-only connection to a WAL database otherwise
            # leaves behind. A writer that starts meanwhile writes to its own -wal,
            # so the main file this handle reads stays as it was.
            uri += "&immutable=1"
        try:
            self._con = sqlite3.connect(
                uri, uri=True, timeout=timeout, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            msg = f"Cannot open SQLite store {self.path!r}: {exc}; check that the directory exists and is writable."
            raise StoreError(msg) from exc
        try:
            with self._errors("open", None):
                self._setup()
        except BaseException:
            self._con.close()
            raise

    # -- opening ------------------------------------------------------------------

    def _create_file(self) -> None:
        # Created here rather than by SQLite so that it is private from the first byte.
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        try:
            os.close(os.open(self.path, flags, 0o600))
        except FileExistsError:
            pass
        except OSError as exc:
            msg = f"Cannot create SQLite store {self.path!r}: {exc}; check that the directory exists and is writable."
            raise StoreError(msg) from exc

    def _setup(self) -> None:
        con = self._con
        version = self._kvmemory_version()
        if version == SCHEMA_VERSION or (self.read_only and version == 0):
            self._empty = version == 0
            if not self.read_only:
                self._use_wal()
            return
        if self.read_only:
            msg = f"SQLite store {self.path!r} has schema version {version}; opened read-only it cannot be migrated to {SCHEMA_VERSION}. Open it once writable to migrate it."
            raise SchemaVersionError(msg)
        self._use_wal()
        with self._transaction(None):
            found = self._kvmemory_version()  # another process may have migrated it meanwhile
            reached = migrate(MIGRATIONS, found, con, store=f"SQLite store {self.path!r}")
            con.execute(f"PRAGMA user_version={reached}")

    def _kvmemory_version(self) -> int:
        """Return the file's schema version (0 when empty); refuse a file that is not a kvmemory store."""
        con = self._con
        # One read transaction, so that the version and the tables come from one
        # snapshot even while another process creates the store.
        outer = con.in_transaction
        if not outer:
            con.execute("BEGIN")
        try:
            version = con.execute("PRAGMA user_version").fetchone()[0]
            names = {
                row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            }
        finally:
            if not outer:
                con.execute("COMMIT")
        ours = "kvmemory_items" in names and "kvmemory_sessions" in names
        if version > SCHEMA_VERSION:
            return check_schema_version(
                version, SCHEMA_VERSION, store=f"SQLite store {self.path!r}"
            )
        if (version == 0 and names) or (version > 0 and not ours):
            msg = (
                f"SQLite file {self.path!r} is not a kvmemory store: it holds other tables "
                f"({', '.join(sorted(names)) or 'none'}, user_version {version}); it was left "
                "unchanged. Point the URL at a kvmemory store or at a new file."
            )
            raise CorruptStoreError(msg)
        return check_schema_version(version, SCHEMA_VERSION, store=f"SQLite store {self.path!r}")

    def _use_wal(self) -> None:
        con = self._con
        mode = con.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if (
            str(mode).lower() != "wal"
        ):  # pragma: no cover - only on file systems without shared memory
            msg = f"SQLite store {self.path!r} cannot use WAL mode (got {mode!r})."
            raise StoreError(msg)
        con.execute(f"PRAGMA synchronous={self.synchronous.upper()}")

    # -- plumbing ------------------------------------------------------------------

    def _error(self, action: str, where: str, exc: BaseException) -> StoreError:
        text = str(exc)
        if any(marker in text for marker in _NOT_A_DATABASE):
            msg = f"Cannot {action}{where} SQLite store {self.path!r}: the file is not a kvmemory store (not an SQLite database: {text}); it was left unchanged. Open another path."
            return CorruptStoreError(msg)
        if any(marker in text for marker in _DAMAGED):
            msg = f"Cannot {action}{where} SQLite store {self.path!r}: the database is damaged ({text}); restore it from a backup or open another path."
            return CorruptStoreError(msg)
        if "readonly" in text or "read-only" in text:
            msg = f"Cannot {action}{where} SQLite store {self.path!r}: it is open read-only ({text}); open it without ?mode=ro to write. Nothing was changed."
            return StoreError(msg)
        msg = f"Cannot {action}{where} SQLite store {self.path!r}: {text}; nothing was changed."
        return StoreError(msg)

    @contextlib.contextmanager
    def _transaction(self, session_id: str | None) -> Iterator[sqlite3.Connection]:
        con = self._con
        with self._lock:
            con.execute("BEGIN IMMEDIATE")
            try:
                yield con
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    con.execute("ROLLBACK")
                raise
            try:
                con.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    con.execute("ROLLBACK")
                raise

    def _query(self, sql: str, params: Sequence[object] = ()) -> list[Any]:
        with self._lock:
            return self._con.execute(sql, params).fetchall()

    # -- reading ---------------------------------------------------------------------

    def _read_session(self, session_id: str) -> SessionRow | None:
        if self._empty:
            return None
        rows = self._query(_SELECT_SESSION, (session_id,))
        return rows[0] if rows else None

    def _fetch(
        self, session_id: str, *, steps: Sequence[str] | None, after: int | None
    ) -> list[tuple[int, bytes]]:
        if self._empty:
            return []
        sql = "SELECT seq, data FROM kvmemory_items WHERE session_id = ?"
        params: list[object] = [session_id]
        if after is not None:
            sql += " AND seq > ?"
            params.append(after)
        if steps is not None:
            sql += " AND step IN (SELECT value FROM json_each(?))"
            params.append(_json_list(steps))
        return self._query(sql + " ORDER BY seq", params)

    def _fetch_last(
        self, session_id: str, n: int, *, steps: Sequence[str] | None
    ) -> list[tuple[int, bytes]]:
        if self._empty:
            return []
        sql = "SELECT seq, data FROM kvmemory_items WHERE session_id = ?"
        params: list[object] = [session_id]
        if steps is not None:
            sql += " AND step IN (SELECT value FROM json_each(?))"
            params.append(_json_list(steps))
        rows = self._query(sql + " ORDER BY seq DESC LIMIT ?", [*params, n])
        rows.reverse()
        return rows

    def _fetch_pages(self, session_id: str, size: int) -> Iterator[list[tuple[int, bytes]]]:
        if self._empty:
            return
        first = "SELECT seq, data FROM kvmemory_items WHERE session_id = ? ORDER BY seq LIMIT ?"
        rows = self._query(first, (session_id, size))
        later = "SELECT seq, data FROM kvmemory_items WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?"
        while rows:
            yield rows
            rows = self._query(later, (session_id, rows[-1][0], size))

    def _count(self, session_id: str) -> int:
        if self._empty:
            return 0
        rows = self._query(
            "SELECT count(*) FROM kvmemory_items WHERE session_id = ?", (session_id,)
        )
        return int(rows[0][0])

    def _sessions(self) -> list[str]:
        if self._empty:
            return []
        rows = self._query("SELECT session_id FROM kvmemory_sessions ORDER BY session_id")
        return [str(row[0]) for row in rows]

    # -- writing ---------------------------------------------------------------------

    def _lock_session(self, tx: sqlite3.Connection, session_id: str) -> SessionRow | None:
        # BEGIN IMMEDIATE already keeps every other writer out of the whole file.
        row: SessionRow | None = tx.execute(_SELECT_SESSION, (session_id,)).fetchone()
        return row

    def _create_session(
        self, tx: sqlite3.Connection, session_id: str, step_key: str, created: float
    ) -> None:
        tx.execute(
            "INSERT INTO kvmemory_sessions (session_id, step_key, created) VALUES (?, ?, ?)",
            (session_id, step_key, created),
        )

    def _set_metadata(self, tx: sqlite3.Connection, session_id: str, metadata: bytes) -> None:
        tx.execute(
            "UPDATE kvmemory_sessions SET metadata = ? WHERE session_id = ?", (metadata, session_id)
        )

    def _insert_rows(
        self, tx: sqlite3.Connection, session_id: str, rows: Sequence[Row]
    ) -> list[int]:
        sql = "INSERT INTO kvmemory_items (session_id, step, created, data) VALUES (?, ?, ?, ?)"
        if len(rows) == 1:
            step, created, data = rows[0]
            last = tx.execute(sql, (session_id, step, created, data)).lastrowid
        else:
            tx.executemany(sql, [(session_id, step, created, data) for step, created, data in rows])
            last = tx.execute("SELECT last_insert_rowid()").fetchone()[0]
        assert last is not None  # an INSERT always sets the last rowid
        # BEGIN IMMEDIATE makes this the only writer, so the seqs are consecutive.
        return list(range(last - len(rows) + 1, last + 1))

    def _update_rows(
        self, tx: sqlite3.Connection, session_id: str, rows: Sequence[RowUpdate]
    ) -> list[int]:
        sql = "UPDATE kvmemory_items SET step = ?, data = ? WHERE session_id = ? AND seq = ?"
        return [
            seq
            for seq, step, data in rows
            if tx.execute(sql, (step, data, session_id, seq)).rowcount
        ]

    def _delete_rows(
        self, tx: sqlite3.Connection, session_id: str, seqs: Sequence[int]
    ) -> list[int]:
        rows = tx.execute(
            "DELETE FROM kvmemory_items WHERE session_id = ? AND seq IN (SELECT value FROM json_each(?)) RETURNING seq",
            (session_id, _json_list(seqs)),
        ).fetchall()
        return sorted(int(row[0]) for row in rows)

    def _clear_rows(self, tx: sqlite3.Connection, session_id: str) -> int:
        return tx.execute("DELETE FROM kvmemory_items WHERE session_id = ?", (session_id,)).rowcount

    def _row_index(self, tx: sqlite3.Connection, session_id: str) -> list[IndexEntry]:
        return tx.execute(
            "SELECT seq, step, created FROM kvmemory_items WHERE session_id = ? ORDER BY seq",
            (session_id,),
        ).fetchall()

    def _delete_session(self, session_id: str) -> bool:
        with self._transaction(session_id) as con:
            con.execute("DELETE FROM kvmemory_items WHERE session_id = ?", (session_id,))
            self._drop_vectors(con, session_id)
            gone = con.execute(
                "DELETE FROM kvmemory_sessions WHERE session_id = ?", (session_id,)
            ).rowcount
        return gone > 0

    def _fetch_seqs(self, session_id: str, seqs: Sequence[int]) -> list[tuple[int, bytes]]:
        if self._empty:
            return []
        return self._query(
            "SELECT seq, data FROM kvmemory_items WHERE session_id = ?"
            " AND seq IN (SELECT value FROM json_each(?)) ORDER BY seq",
            (session_id, _json_list(seqs)),
        )

    # -- vectors ---------------------------------------------------------------------

    def _vector_model(self, session_id: str) -> tuple[str, int] | None:
        if self._empty:
            return None
        rows = self._query(
            "SELECT model, dimension FROM kvmemory_embedders WHERE session_id = ?", (session_id,)
        )
        return (str(rows[0][0]), int(rows[0][1])) if rows else None

    def _vector_count(self, session_id: str, fields: str) -> int:
        if self._empty:
            return 0
        rows = self._query(
            "SELECT count(*) FROM kvmemory_vectors WHERE session_id = ? AND fields = ?",
            (session_id, fields),
        )
        return int(rows[0][0])

    def _vector_counts(self, session_id: str, fields: str) -> tuple[int, int]:
        if self._empty:
            return 0, 0
        rows = self._query(
            "SELECT count(*), coalesce(sum(length(vector) > 0), 0) FROM kvmemory_vectors"
            " WHERE session_id = ? AND fields = ?",
            (session_id, fields),
        )
        return int(rows[0][0]), int(rows[0][1])

    def _vector_pages(
        self, session_id: str, fields: str, size: int
    ) -> Iterator[list[tuple[int, bytes]]]:
        if self._empty:
            return
        sql = (
            "SELECT seq, vector FROM kvmemory_vectors WHERE session_id = ? AND fields = ?"
            " AND seq > ? ORDER BY seq LIMIT ?"
        )
        rows = self._query(sql, (session_id, fields, -1, size))
        while rows:
            yield rows
            rows = self._query(sql, (session_id, fields, rows[-1][0], size))

    def _fetch_vectors(
        self, session_id: str, fields: str, seqs: Sequence[int]
    ) -> list[tuple[int, bytes]]:
        if self._empty:
            return []
        return self._query(
            "SELECT seq, vector FROM kvmemory_vectors WHERE session_id = ? AND fields = ?"
            " AND seq IN (SELECT value FROM json_each(?)) ORDER BY seq",
            (session_id, fields, _json_list(seqs)),
        )

    def _unembedded_pages(
        self, session_id: str, fields: str, size: int
    ) -> Iterator[list[tuple[int, bytes]]]:
        if self._empty:
            return
        sql = (
            "SELECT seq, data FROM kvmemory_items AS i WHERE session_id = ? AND seq > ?"
            " AND NOT EXISTS (SELECT 1 FROM kvmemory_vectors AS v"
            " WHERE v.session_id = i.session_id AND v.seq = i.seq AND v.fields = ?)"
            " ORDER BY seq LIMIT ?"
        )
        rows = self._query(sql, (session_id, -1, fields, size))
        while rows:
            yield rows
            rows = self._query(sql, (session_id, rows[-1][0], fields, size))

    def _claim_vector_model(
        self, tx: sqlite3.Connection, session_id: str, model: str, dimension: int
    ) -> tuple[str, int]:
        tx.execute(
            "INSERT OR IGNORE INTO kvmemory_embedders (session_id, model, dimension) VALUES (?, ?, ?)",
            (session_id, model, dimension),
        )
        row = tx.execute(
            "SELECT model, dimension FROM kvmemory_embedders WHERE session_id = ?", (session_id,)
        ).fetchone()
        return str(row[0]), int(row[1])

    def _put_vectors(
        self,
        tx: sqlite3.Connection,
        session_id: str,
        fields: str,
        rows: Sequence[tuple[int, bytes, bytes]],
    ) -> int:
        cur = tx.executemany(
            "INSERT OR REPLACE INTO kvmemory_vectors (session_id, seq, fields, vector)"
            " SELECT ?1, ?2, ?3, ?4 WHERE EXISTS (SELECT 1 FROM kvmemory_items"
            " WHERE session_id = ?1 AND seq = ?2 AND data = ?5)",
            [(session_id, seq, fields, vector, data) for seq, data, vector in rows],
        )
        return int(cur.rowcount)

    def _delete_vectors(self, tx: sqlite3.Connection, session_id: str, seqs: Sequence[int]) -> None:
        tx.execute(
            "DELETE FROM kvmemory_vectors WHERE session_id = ? AND seq IN (SELECT value FROM json_each(?))",
            (session_id, _json_list(seqs)),
        )

    def _drop_vectors(self, tx: sqlite3.Connection, session_id: str) -> int:
        gone = tx.execute(
            "DELETE FROM kvmemory_vectors WHERE session_id = ?", (session_id,)
        ).rowcount
        tx.execute("DELETE FROM kvmemory_embedders WHERE session_id = ?", (session_id,))
        return int(gone)

    def _close(self) -> None:
        with self._lock:
            self._con.close()


_SELECT_SESSION: Final = (
    "SELECT step_key, created, metadata FROM kvmemory_sessions WHERE session_id = ?"
)


def _json_list(values: Sequence[object]) -> str:
    return _codec.dumps(list(values)).decode("utf-8")
