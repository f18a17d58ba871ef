"""The SQLite store: one file, many processes, the embedded default.

Layout (schema version 5, recorded in ``PRAGMA user_version``)::

    kvmemory_sessions(session_id TEXT PRIMARY KEY, step_key TEXT, created REAL,
                      metadata BLOB)                                   -- metadata: v2
    kvmemory_items(seq INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT,
                   step TEXT, created REAL, data BLOB,
                   terms TEXT, n_terms INTEGER)                        -- terms, n_terms: v4
    index (session_id, seq), index (session_id, step), index (session_id, created)
    kvmemory_search(key INTEGER PRIMARY KEY, session_id TEXT, items INTEGER,
                    terms INTEGER)                                     -- v4
    kvmemory_fts: FTS5 over the terms, kvmemory_fts_row and _instance: its
    fts5vocab tables, kvmemory_fts_content: the view it reads   -- v4
    kvmemory_embedders(session_id TEXT PRIMARY KEY, model TEXT,
                       dimension INTEGER)                              -- v3
    kvmemory_vectors(session_id TEXT, seq INTEGER, fields TEXT, vector BLOB,
                     PRIMARY KEY (session_id, seq, fields))            -- v3

``data`` holds the codec's bytes for the item; ``step`` its canonical step
text, so step filters are answered by the ``(session_id, step)`` index;
``metadata`` the codec's bytes for the session's metadata; ``vector`` an
item's unit vector as little-endian float32 (empty for an item without
text), embedded over the fields ``fields`` names (``*``: all) by the model
``kvmemory_embedders`` records for the session. Semantic search computes
exact cosines in SQL with the sqlite-vec extension's ``vec_distance_cosine``
over these same BLOBs where the extension loads (the ``sqlite-vec`` extra,
and a Python whose ``sqlite3`` can load extensions), and otherwise reads the
vectors a page at a time and computes them with numpy; either way the file
is the same, so every Python reads and writes it. The file runs in
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
import heapq
import importlib
import math
import os
import sqlite3
import struct
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Final, Literal

from agents.memory import _codec
from agents.memory._text import BM25_B, BM25_K1, MIN_IDF, bm25_idf
from agents.memory.exceptions import (
    CorruptSessionError,
    CorruptStoreError,
    InvalidArgumentError,
    SchemaVersionError,
    StoreError,
    StoreNotFoundError,
    missing_dependency,
)
from agents.memory.stores._backend import Backend
from agents.memory.stores._checks import check_store_path
from agents.memory.stores._encoding import Row, RowUpdate, SessionRow, decode_pairs
from agents.memory.stores._keyword import Terms, item_terms
from agents.memory.stores._migrations import check_schema_version, migrate
from agents.memory.stores._sql import SQLITE, SQLRows
from agents.memory.stores._store import Store

__all__ = ["SQLiteBackend", "SQLiteStore", "Synchronous"]

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


# -- the keyword index (schema version 4) ----------------------------------------------
#
# Each row keeps its search terms (the library tokenizer's, joined by spaces) and
# their number; an FTS5 table indexes them, each term prefixed with its session's
# key and "·" (never part of a term), so that a session's postings are its own:
# a term's document frequency is counted within the session, and a query never
# reads another session's postings. The "ascii" tokenizer splits only at ASCII
# characters that are not letters or digits, which terms never hold, so FTS5 sees
# exactly the library's terms. kvmemory_search keeps each session's key, item
# count and term count (BM25's statistics). Every row has an FTS row, empty for an
# item without text, so that a store holding one session has FTS5's own statistics
# equal to the session's. Triggers keep the FTS table and the counts in step with
# every update and delete of a row, whatever the statement; the FTS table reads its
# text (for 'rebuild') through a view. Inserts are indexed by the store itself, a
# batch at a time (schema version 5): an insert trigger ran an UPDATE of the counts
# and an FTS5 insert per row, four times the CPU of the same work done once per
# batch with one INSERT ... SELECT (see _INDEX_INSERTED).

_MARK: Final = "·"


def _prefixed(row: str, key: str) -> str:
    """Return the SQL for the text FTS5 indexes for a row: its terms, each prefixed with the session key."""
    return (
        f"CASE WHEN {row}.n_terms = 0 THEN '' ELSE {key} || '{_MARK}' || "
        f"replace({row}.terms, ' ', ' ' || {key} || '{_MARK}') END"
    )


_KEYWORD_DDL: Final = (
    """CREATE TABLE IF NOT EXISTS kvmemory_search (
        key INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL UNIQUE,
        items INTEGER NOT NULL DEFAULT 0,
        terms INTEGER NOT NULL DEFAULT 0
    )""",
    "CREATE VIEW kvmemory_fts_content AS SELECT i.seq AS seq, "
    + _prefixed("i", "s.key")
    + " AS terms FROM kvmemory_items AS i JOIN kvmemory_search AS s"
    " ON s.session_id = i.session_id",
    "CREATE VIRTUAL TABLE kvmemory_fts USING fts5(terms, content='kvmemory_fts_content',"
    " content_rowid='seq', tokenize='ascii')",
    "CREATE VIRTUAL TABLE kvmemory_fts_row USING fts5vocab(kvmemory_fts, row)",
    "CREATE VIRTUAL TABLE kvmemory_fts_instance USING fts5vocab(kvmemory_fts, instance)",
    """CREATE TRIGGER kvmemory_items_search_delete AFTER DELETE ON kvmemory_items BEGIN
        INSERT INTO kvmemory_fts (kvmemory_fts, rowid, terms) SELECT 'delete', old.seq, """
    + _prefixed("old", "key")
    + """ FROM kvmemory_search WHERE session_id = old.session_id;
        UPDATE kvmemory_search SET items = items - 1, terms = terms - old.n_terms
            WHERE session_id = old.session_id;
    END""",
    """CREATE TRIGGER kvmemory_items_search_update AFTER UPDATE OF terms, n_terms ON kvmemory_items
    BEGIN
        INSERT INTO kvmemory_fts (kvmemory_fts, rowid, terms) SELECT 'delete', old.seq, """
    + _prefixed("old", "key")
    + """ FROM kvmemory_search WHERE session_id = old.session_id;
        INSERT INTO kvmemory_fts (rowid, terms) SELECT new.seq, """
    + _prefixed("new", "key")
    + """ FROM kvmemory_search WHERE session_id = new.session_id;
        UPDATE kvmemory_search SET terms = terms - old.n_terms + new.n_terms
            WHERE session_id = new.session_id;
    END""",
)

_KEYWORD_OBJECTS: Final = (
    ("TRIGGER", "kvmemory_items_search_insert"),
    ("TRIGGER", "kvmemory_items_search_delete"),
    ("TRIGGER", "kvmemory_items_search_update"),
    ("TABLE", "kvmemory_fts_instance"),
    ("TABLE", "kvmemory_fts_row"),
    ("TABLE", "kvmemory_fts"),
    ("VIEW", "kvmemory_fts_content"),
    ("TABLE", "kvmemory_search"),
)


def _build_keyword_index(con: sqlite3.Connection) -> None:
    """(Re)create the keyword index from the rows' data: terms, counts, FTS table, triggers."""
    for kind, name in _KEYWORD_OBJECTS:
        con.execute(f"DROP {kind} IF EXISTS {name}")
    con.execute("UPDATE kvmemory_items SET terms = '', n_terms = 0 WHERE n_terms <> 0")
    for statement in _KEYWORD_DDL:
        con.execute(statement)
    # Keys and counts first, with no terms: the updates below add each row's terms.
    con.execute(
        "INSERT INTO kvmemory_search (session_id, items) SELECT session_id, count(*)"
        " FROM kvmemory_items GROUP BY session_id"
    )
    con.execute("INSERT INTO kvmemory_fts (kvmemory_fts) VALUES ('rebuild')")  # empty rows, counted
    after = 0
    while True:
        rows = con.execute(
            "SELECT seq, data FROM kvmemory_items WHERE seq > ? ORDER BY seq LIMIT 1000", (after,)
        ).fetchall()
        if not rows:
            return
        after = rows[-1][0]
        updates = [(text, n, seq) for seq, (text, n) in _terms_of_rows(rows) if n]
        con.executemany("UPDATE kvmemory_items SET terms = ?, n_terms = ? WHERE seq = ?", updates)


def _terms_of_rows(rows: Sequence[tuple[int, bytes]]) -> list[tuple[int, Terms]]:
    """Return the search terms of stored rows; a row that cannot be decoded has none."""
    try:
        pairs = decode_pairs(rows, "a row being indexed", "base")
    except (CorruptStoreError, CorruptSessionError):
        out: list[tuple[int, Terms]] = []
        for seq, data in rows:
            try:
                out.extend(
                    (s, item_terms(item)) for s, item in decode_pairs([(seq, data)], "", "base")
                )
            except (CorruptStoreError, CorruptSessionError):
                out.append((seq, ("", 0)))  # searched as an item without text
        return out
    return [(seq, item_terms(item)) for seq, item in pairs]


def _add_keyword_index(con: sqlite3.Connection) -> None:
    con.execute("ALTER TABLE kvmemory_items ADD COLUMN terms TEXT NOT NULL DEFAULT ''")
    con.execute("ALTER TABLE kvmemory_items ADD COLUMN n_terms INTEGER NOT NULL DEFAULT 0")
    _build_keyword_index(con)


def _index_inserts_by_batch(con: sqlite3.Connection) -> None:
    con.execute("DROP TRIGGER IF EXISTS kvmemory_items_search_insert")


# The keyword index of rows just inserted, in one statement per batch: their FTS
# rows (terms prefixed with the session's key, as _prefixed writes them).
_INDEX_INSERTED: Final = (
    "INSERT INTO kvmemory_fts (rowid, terms) SELECT i.seq, "
    + _prefixed("i", "s.key")
    + " FROM kvmemory_items AS i JOIN kvmemory_search AS s ON s.session_id = i.session_id"
    " WHERE i.session_id = ? AND i.seq BETWEEN ? AND ?"
)
_COUNT_INSERTED: Final = (
    "INSERT INTO kvmemory_search (session_id, items, terms) VALUES (?, ?, ?)"
    " ON CONFLICT (session_id) DO UPDATE SET items = items + excluded.items,"
    " terms = terms + excluded.terms"
)


MIGRATIONS: Final = (
    _create_v1,
    _add_session_metadata,
    _add_vectors,
    _add_keyword_index,
    _index_inserts_by_batch,
)
"""Step ``i`` brings a file from schema version ``i`` to ``i + 1`` (see :func:`migrate`)."""

SCHEMA_VERSION: Final = len(MIGRATIONS)
_SEARCHED_BY_SCAN: Final = (
    3  # the layout before the keyword index: read-only opens search by scanning
)
_READS_AS_CURRENT: Final = (
    4  # the layout whose inserts a trigger indexed: it reads as the current one
)

_NOT_A_DATABASE: Final = ("not a database", "file is encrypted")
_SQLITE_MAGIC: Final = b"SQLite format 3\x00"
_SQLITE_HEADER_SIZE: Final = 100
_DAMAGED: Final = ("malformed", "disk image", "Could not decode to UTF-8")


class SQLiteBackend(SQLRows, Backend):
    """The rows of an SQLite store: one file, many processes (see :class:`SQLiteStore` for the arguments).

    Opening checks the file (or, unless ``read_only``, creates and
    migrates it); :class:`SQLiteStore` is the store over this backend.
    """

    driver_errors = (sqlite3.Error,)
    dialect = SQLITE
    keeps_vectors = True

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Synchronous = "full",
        timeout: float = 30.0,
        read_only: bool = False,
        url: str | None = None,
        sqlite_vec: bool | None = None,
    ) -> None:
        self.path = check_store_path(path)
        self.url = url or f"sqlite:///{self.path}"
        self.read_only = read_only
        if synchronous not in ("full", "normal", "off"):
            msg = f"synchronous must be 'full', 'normal' or 'off', got {synchronous!r}."
            raise InvalidArgumentError(msg)
        self.synchronous: Synchronous = synchronous
        self._lock = threading.RLock()
        self._empty = False
        self._indexed = True
        self._check_whole_pages()  # an existing file, before SQLite opens it
        if read_only and not os.path.exists(self.path):
            msg = f"SQLite store {self.path!r} does not exist; it cannot be opened read-only (drop ?mode=ro to create it)."
            raise StoreNotFoundError(msg)
        if not read_only:
            self._create_file()
        # No -wal file: no connection has the database open, and every commit is in
        # the main file. Reading it as immutable keeps SQLite from creating the -wal
        # and -shm files a read-only connection to a WAL database otherwise leaves
        # behind. A writer that starts meanwhile writes to its own -wal, so the main
        # file this handle reads stays as it was until a checkpoint: every read first
        # looks for that (_follow_writers) and opens the file again when it changed.
        self._immutable = read_only and not os.path.exists(f"{self.path}-wal")
        self._stamp = self._file_stamp()
        self._timeout = timeout
        self._con = self._connect()
        try:
            with self._opening():
                self._setup()
            self._vec = _load_sqlite_vec(self._con, sqlite_vec, self.path)
        except BaseException:
            self._con.close()
            raise

    # -- opening ------------------------------------------------------------------

    @contextlib.contextmanager
    def _opening(self) -> Iterator[None]:
        """Report the driver's errors while the file is opened as :meth:`store_error` names them."""
        try:
            yield
        except StoreError:
            raise
        except sqlite3.Error as exc:
            raise self.store_error("open", "", exc) from exc

    def _connect(self) -> sqlite3.Connection:
        # A path written with a leading "//" would read as a URI authority; POSIX
        # treats extra leading slashes as one.
        absolute = "/" + os.path.abspath(self.path).lstrip("/")
        uri = f"file:{urllib.parse.quote(absolute)}?mode={'ro' if self.read_only else 'rw'}"
        if self._immutable:
            uri += "&immutable=1"
        try:
            return sqlite3.connect(
                uri, uri=True, timeout=self._timeout, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            msg = f"Cannot open SQLite store {self.path!r}: {exc}; check that the directory exists and is writable."
            raise StoreError(msg) from exc

    @property
    def connection(self) -> sqlite3.Connection:
        """The ``sqlite3`` connection reads and writes go through now, to trace or inspect (never commit, roll back or close it).

        A read-only handle on a file no writer had open reopens it when a
        writer appears, so ask again rather than keep it.
        """
        return self._con

    @property
    def _empty(self) -> bool:
        """Whether the file holds no tables yet (read as empty), after following writers (see :meth:`_follow_writers`)."""
        with self._lock:
            self._follow_writers()
            return self._no_tables

    @_empty.setter
    def _empty(self, value: bool) -> None:
        self._no_tables = value

    def _file_stamp(self) -> tuple[int, int, int] | None:
        try:
            info = os.stat(self.path)
        except OSError:
            return None
        return info.st_ino, info.st_size, info.st_mtime_ns

    def _follow_writers(self) -> None:
        """On a handle reading the file as immutable, open it again if a writer has changed it since.

        A writer at work has a -wal file: the handle then reads through
        SQLite's shared memory like any reader and sees each commit. A file
        changed with no -wal left (a writer came and went) is read afresh,
        still as immutable. Two ``stat`` calls per read, on this handle only.
        """
        if not self._immutable:
            return
        active = os.path.exists(f"{self.path}-wal")
        stamp = self._file_stamp()
        if not active and stamp == self._stamp:
            return
        old = self._con
        self._immutable = not active
        self._stamp = stamp
        self._con = self._connect()
        old.close()
        with self._opening():
            self._setup()
        if self._vec:
            self._vec = _load_sqlite_vec(self._con, None, self.path)

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

    def _check_whole_pages(self) -> None:
        """Refuse an SQLite file whose size is not a whole number of its pages (cut short), before SQLite writes to it.

        SQLite opens such a file and goes on writing to it, growing it back
        over the lost bytes; the rows in the cut-off part are then gone or
        damaged. A file that does not start with SQLite's header is left to
        the schema check, which names it.
        """
        try:
            with open(self.path, "rb") as file:
                header = file.read(_SQLITE_HEADER_SIZE)
                size = os.fstat(file.fileno()).st_size
        except OSError:
            return  # a missing or unreadable file is reported by the connection that follows
        if 0 < size < _SQLITE_HEADER_SIZE:
            # SQLite takes a 1-byte file for an empty database and writes a new
            # store over it; no SQLite file is shorter than its header.
            msg = (
                f"SQLite store {self.path!r} is {size} bytes long, shorter than an SQLite "
                f"header ({_SQLITE_HEADER_SIZE} bytes): it is not an SQLite database, or one cut "
                "short; it was left unchanged. Restore it from a backup or open another path."
            )
            raise CorruptStoreError(msg)
        if not header.startswith(_SQLITE_MAGIC):
            return  # not SQLite: the schema check names it
        (raw,) = struct.unpack(">H", header[16:18])
        page_size = 65536 if raw == 1 else raw
        if page_size < 512 or page_size & (page_size - 1) or size % page_size == 0:
            return  # an impossible page size: SQLite itself reports the file as damaged
        msg = (
            f"SQLite store {self.path!r} is damaged: it is {size} bytes long, not a whole number "
            f"of its {page_size}-byte pages, so it was cut short; it was left unchanged. Restore "
            "it from a backup or open another path."
        )
        raise CorruptStoreError(msg)

    def _setup(self) -> None:
        con = self._con
        version = self._kvmemory_version()
        readable = (0, _SEARCHED_BY_SCAN, _READS_AS_CURRENT)
        if version == SCHEMA_VERSION or (self.read_only and version in readable):
            # A file of the layout before the keyword index reads the same, searched by scanning.
            self._empty = version == 0
            self._indexed = version >= _READS_AS_CURRENT
            if not self.read_only:
                self._use_wal()
            return
        if self.read_only:
            msg = f"SQLite store {self.path!r} has schema version {version}; opened read-only it cannot be migrated to {SCHEMA_VERSION}. Open it once writable to migrate it."
            raise SchemaVersionError(msg)
        self._use_wal()
        with self.transaction(None):
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
            # Read as bytes: a damaged or hostile file's schema may hold text
            # that is not UTF-8, which the sqlite3 module cannot decode.
            try:
                schema = con.execute(
                    "SELECT CAST(type AS BLOB), CAST(name AS BLOB), CAST(tbl_name AS BLOB),"
                    " CAST(sql AS BLOB) FROM sqlite_master"
                ).fetchall()
            except (UnicodeDecodeError, sqlite3.DatabaseError) as exc:
                # SQLite could not parse the schema, and its message quotes bytes that are not
                # UTF-8: Python 3.11's sqlite3 raises the decoding error, 3.10's an error whose
                # message is empty. Any other database error is reported as it is.
                if isinstance(exc, sqlite3.DatabaseError) and str(exc):
                    raise
                reason = str(exc) or "SQLite's own message could not be decoded"
                msg = (
                    f"SQLite file {self.path!r} is damaged: its schema is malformed and holds text "
                    f"that is not UTF-8 ({reason}); it was left unchanged. Restore it from a backup "
                    "or open another path."
                )
                raise CorruptStoreError(msg) from exc
        finally:
            if not outer:
                con.execute("COMMIT")
        names = {name for kind, name in self._schema_text(schema) if kind == "table"}
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

    def _schema_text(self, rows: list[tuple[bytes | None, ...]]) -> list[tuple[str, str]]:
        """Return the schema rows as ``(type, name)``, refusing any text that is not UTF-8."""
        checked = []
        for row in rows:
            try:
                kind, name, *_ = [(value or b"").decode() for value in row]
            except UnicodeDecodeError as exc:
                msg = (
                    f"SQLite file {self.path!r} is damaged: its schema holds text that is not "
                    f"UTF-8 ({(row[1] or b'')[:40]!r}: {exc}); it was left unchanged. Restore it "
                    "from a backup or open another path."
                )
                raise CorruptStoreError(msg) from exc
            checked.append((kind, name))
        return checked

    def _use_wal(self) -> None:
        con = self._con
        # Switching a new file to WAL needs it to itself, and SQLite answers
        # "database is locked" at once, without its busy handler, while another
        # process is creating or migrating the store: wait for it here instead.
        deadline = time.monotonic() + self._timeout
        delay = 0.005
        while True:
            try:
                mode = con.execute("PRAGMA journal_mode=WAL").fetchone()[0]
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.1)
        if (
            str(mode).lower() != "wal"
        ):  # pragma: no cover - only on file systems without shared memory
            msg = f"SQLite store {self.path!r} cannot use WAL mode (got {mode!r})."
            raise StoreError(msg)
        con.execute(f"PRAGMA synchronous={self.synchronous.upper()}")

    # -- plumbing ------------------------------------------------------------------

    def store_error(self, action: str, where: str, exc: BaseException) -> StoreError:
        text = str(exc)
        if any(name in text for name in _INDEX_NAMES) or "fts5" in text:
            return self._index_damaged(action, where, text)
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

    def _index_damaged(self, action: str, where: str, reason: str) -> CorruptStoreError:
        msg = (
            f"Cannot {action}{where} SQLite store {self.path!r}: its keyword index is damaged or "
            f"missing ({reason}); nothing was changed. Rebuild the index from the stored items "
            "with store.rebuild_keyword_index()."
        )
        return CorruptStoreError(msg)

    @contextlib.contextmanager
    def transaction(self, session_id: str | None) -> Iterator[sqlite3.Connection]:
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
            self._follow_writers()
            return self._con.execute(sql, params).fetchall()

    # -- reading ---------------------------------------------------------------------

    def read_session(self, session_id: str) -> SessionRow | None:
        if self._empty:
            return None
        rows = self._query(_SELECT_SESSION, (session_id,))
        return rows[0] if rows else None

    def read_rows(
        self, session_id: str, *, steps: Sequence[str] | None = None, after: int | None = None
    ) -> list[tuple[int, bytes]]:
        if self._empty:
            return []
        sql = "SELECT seq, data FROM " + _rows_of(steps) + " WHERE session_id = ?"
        params: list[object] = [session_id]
        if after is not None:
            sql += " AND seq > ?"
            params.append(after)
        if steps is not None:
            sql += " AND step IN (SELECT value FROM json_each(?))"
            params.append(_json_list(steps))
        return self._query(sql + " ORDER BY seq", params)

    def read_last(
        self, session_id: str, n: int, *, steps: Sequence[str] | None = None
    ) -> list[tuple[int, bytes]]:
        if self._empty:
            return []
        sql = "SELECT seq, data FROM " + _rows_of(steps) + " WHERE session_id = ?"
        params: list[object] = [session_id]
        if steps is not None:
            sql += " AND step IN (SELECT value FROM json_each(?))"
            params.append(_json_list(steps))
        rows = self._query(sql + " ORDER BY seq DESC LIMIT ?", [*params, n])
        rows.reverse()
        return rows

    def read_pages(self, session_id: str, size: int) -> Iterator[list[tuple[int, bytes]]]:
        if self._empty:
            return
        first = "SELECT seq, data FROM kvmemory_items WHERE session_id = ? ORDER BY seq LIMIT ?"
        rows = self._query(first, (session_id, size))
        later = "SELECT seq, data FROM kvmemory_items WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?"
        while rows:
            yield rows
            rows = self._query(later, (session_id, rows[-1][0], size))

    def count(self, session_id: str) -> int:
        if self._empty:
            return 0
        rows = self._query(
            "SELECT count(*) FROM kvmemory_items WHERE session_id = ?", (session_id,)
        )
        return int(rows[0][0])

    def sessions(self) -> list[str]:
        if self._empty:
            return []
        rows = self._query("SELECT session_id FROM kvmemory_sessions ORDER BY session_id")
        return [str(row[0]) for row in rows]

    # -- writing ---------------------------------------------------------------------

    def lock_session(self, tx: sqlite3.Connection, session_id: str) -> SessionRow | None:
        # BEGIN IMMEDIATE already keeps every other writer out of the whole file.
        row: SessionRow | None = tx.execute(_SELECT_SESSION, (session_id,)).fetchone()
        return row

    def create_session(
        self, tx: sqlite3.Connection, session_id: str, step_key: str, created: float
    ) -> None:
        tx.execute(
            "INSERT INTO kvmemory_sessions (session_id, step_key, created) VALUES (?, ?, ?)",
            (session_id, step_key, created),
        )

    def set_metadata(self, tx: sqlite3.Connection, session_id: str, metadata: bytes) -> None:
        tx.execute(
            "UPDATE kvmemory_sessions SET metadata = ? WHERE session_id = ?", (metadata, session_id)
        )

    def insert_rows(
        self, tx: sqlite3.Connection, session_id: str, rows: Sequence[Row], terms: Sequence[Terms]
    ) -> list[int]:
        sql = (
            "INSERT INTO kvmemory_items (session_id, step, created, data, terms, n_terms)"
            " VALUES (?, ?, ?, ?, ?, ?)"
        )
        values = [
            (session_id, step, created, data, text, n)
            for (step, created, data), (text, n) in zip(rows, terms, strict=True)
        ]
        if len(rows) == 1:
            last = tx.execute(sql, values[0]).lastrowid
        else:
            tx.executemany(sql, values)
            last = tx.execute("SELECT last_insert_rowid()").fetchone()[0]
        assert last is not None  # an INSERT always sets the last rowid
        # BEGIN IMMEDIATE makes this the only writer, so the seqs are consecutive.
        first = last - len(rows) + 1
        tx.execute(_COUNT_INSERTED, (session_id, len(rows), sum(n for _, n in terms)))
        tx.execute(_INDEX_INSERTED, (session_id, first, last))
        return list(range(first, last + 1))

    def update_rows(
        self,
        tx: sqlite3.Connection,
        session_id: str,
        rows: Sequence[RowUpdate],
        terms: Sequence[Terms],
    ) -> list[int]:
        sql = (
            "UPDATE kvmemory_items SET step = ?, data = ?, terms = ?, n_terms = ?"
            " WHERE session_id = ? AND seq = ?"
        )
        return [
            seq
            for (seq, step, data), (text, n) in zip(rows, terms, strict=True)
            if tx.execute(sql, (step, data, text, n, session_id, seq)).rowcount
        ]

    def delete_session(self, session_id: str) -> bool:
        with self.transaction(session_id) as con:
            con.execute("DELETE FROM kvmemory_items WHERE session_id = ?", (session_id,))
            con.execute("DELETE FROM kvmemory_search WHERE session_id = ?", (session_id,))
            self.drop_vectors(con, session_id)
            gone = con.execute(
                "DELETE FROM kvmemory_sessions WHERE session_id = ?", (session_id,)
            ).rowcount
        return gone > 0

    # -- vectors ---------------------------------------------------------------------

    @property
    def uses_sqlite_vec(self) -> bool:
        """Whether semantic and hybrid searches compute cosines in SQL with the sqlite-vec extension.

        ``True`` when the extension loaded (the ``sqlite-vec`` extra, and a
        Python whose ``sqlite3`` can load extensions): a query then reads
        only the best rows' cosines into Python, not the vectors (except on
        a read-only handle while some items have no vector yet). ``False``
        when the vectors are read a page at a time and scored with numpy.
        The hits and their order are the same either way, the scores equal
        to float32 rounding.
        """
        return self._vec

    def nearest(
        self, session_id: str, fields: str, query: bytes, limit: int, among: Sequence[int]
    ) -> list[tuple[int, float | None, int]] | None:
        if not self._vec:
            return None
        if self._empty:
            return []
        params: dict[str, object] = {
            "sid": session_id,
            "fields": fields,
            "query": query,
            "size": len(query),
            "limit": limit + 1,
        }
        with self._lock:
            self._follow_writers()
            con = self._con
            # One read transaction: the best rows, their ties and the hybrid's own come from one snapshot.
            con.execute("BEGIN")
            try:
                rows = con.execute(_BEST, params).fetchall()
                if (
                    len(rows) > limit
                    and rows[limit][1] is not None
                    and rows[limit][1] == rows[limit - 1][1]
                ):
                    # More rows tie with the last of the best (rare): take them all.
                    rows = con.execute(_AT_LEAST, {**params, "cut": rows[limit][1]}).fetchall()
                else:
                    rows = rows[:limit]
                have = {row[0] for row in rows}
                missing = [seq for seq in among if seq not in have]
                if missing:
                    params["seqs"] = _json_list(missing)
                    rows += con.execute(_OF_SEQS, params).fetchall()
            finally:
                con.execute("COMMIT")
        return [
            (int(seq), None if cosine is None else float(cosine), int(length))
            for seq, cosine, length in rows
        ]

    def put_vectors(
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

    def close(self) -> None:
        with self._lock:
            self._con.close()

    # -- keyword search --------------------------------------------------------------

    @property
    def keyword_index(self) -> bool:
        """Whether keyword searches are answered by the FTS5 index (``False`` for an older file opened read-only)."""
        return self._indexed

    def keyword_top(
        self, session_id: str, terms: Sequence[str], k: int
    ) -> list[tuple[float, int]] | None:
        """Score the session by BM25 from the FTS5 index (``None``: an older file read-only, scanned by the store)."""
        if not self._indexed:
            return None
        if self._empty:
            return []
        sid = session_id
        try:
            with self._lock:
                self._follow_writers()
                return self._indexed_top(sid, terms, k)
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise
            raise self._index_damaged("search", f" session {sid!r} of", str(exc)) from exc
        except sqlite3.DatabaseError as exc:
            raise self._index_damaged("search", f" session {sid!r} of", str(exc)) from exc

    def _indexed_top(self, sid: str, terms: Sequence[str], k: int) -> list[tuple[float, int]]:
        """Score the session's items holding a query term by BM25 in SQL, from the FTS5 postings."""
        con = self._con
        # One read transaction: the counts and the postings come from one snapshot.
        con.execute("BEGIN")
        try:
            stats = con.execute(_STATISTICS, (sid,)).fetchone()
            if stats is None or stats[1] <= 0:
                return []
            key, n_items, total, n_rows, n_tokens = stats
            match = " OR ".join(f'"{key}{_MARK}{term}"' for term in terms)
            if n_rows == n_items:
                # Every FTS row is this session's: FTS5's statistics are the session's own.
                rows = con.execute(_BM25, (match, k)).fetchall()
                return self._checked(con, sid, [(-score, seq) for seq, score in rows])
            weights = Counter(terms)
            names = {f"{key}{_MARK}{term}": term for term in weights}
            df = {
                names[name]: int(docs)
                for name, docs in con.execute(
                    "SELECT term, doc FROM kvmemory_fts_row"
                    " WHERE term IN (SELECT value FROM json_each(?))",
                    (_json_list(list(names)),),
                )
            }
            if not df:
                return []
            avgdl = total / n_items if total else 1.0
            flat = BM25_K1 * (1.0 - BM25_B)
            slope = BM25_K1 * BM25_B / avgdl
            # A query term repeated counts once per occurrence, as in the in-RAM index.
            lifts = [
                (term, weights[term] * bm25_idf(n_items, df[term]) * (BM25_K1 + 1.0))
                for term in weights
                if term in df
            ]
            scorer = _Scorer(con, sid, flat, slope, f"{key}{_MARK}")
            if len(lifts) > _COLUMN_TERMS:
                # A column per term would pass SQLite's limits on columns and expression depth.
                return scorer.in_python(lifts, k)
            common = [(t, lift) for t, lift in lifts if bm25_idf(n_items, df[t]) == MIN_IDF]
            if common and len(common) < len(lifts):
                best = scorer.rare_first(lifts, common, k)
                if best is not None:
                    return best
            if common and n_tokens > 0:
                # Scoring every item holding a common word reads most of the postings
                # (slow in SQL): follow FTS5's own ranking instead, while it settles the top k.
                ratio = _ratio_to_fts5(n_items, avgdl, n_rows, n_tokens / n_rows, df.values())
                best = scorer.along_fts5(match, lifts, ratio, k)
                if best is not None:
                    return best
            return [(score, seq) for seq, score, _ in scorer.top(lifts, k)]
        finally:
            con.execute("COMMIT")

    @staticmethod
    def _checked(
        con: sqlite3.Connection, sid: str, best: list[tuple[float, int]]
    ) -> list[tuple[float, int]]:
        """Return ``best`` if the session holds every item it names, else raise (the index is damaged)."""
        if best:
            seqs = _json_list([seq for _, seq in best])
            (held,) = con.execute(
                "SELECT count(*) FROM kvmemory_items WHERE session_id = ?"
                " AND seq IN (SELECT value FROM json_each(?))",
                (sid, seqs),
            ).fetchone()
            if held != len(best):
                msg = f"the index names items {seqs} of which session {sid!r} holds {held}"
                raise sqlite3.DatabaseError(msg)
        return best

    def rebuild_keyword_index(self) -> None:
        """Rebuild the keyword index (FTS5 table, terms, counts) from the stored items, in one transaction (:meth:`SQLiteStore.rebuild_keyword_index`).

        The index follows every write on its own; this is the repair for an
        index that was damaged or dropped outside kvmemory, which searches
        and writes report with :class:`CorruptStoreError`. It reads and
        tokenizes every item of every session.

        Raises:
            StoreError: if the store is read-only or cannot be written; nothing is changed.
        """
        try:
            with self.transaction(None) as con:
                _build_keyword_index(con)
        except sqlite3.Error as exc:
            raise super().store_error("rebuild the keyword index of", "", exc) from exc


class SQLiteStore(Store):
    """Sessions in one SQLite file, safe for several processes at once: a :class:`Store` over :class:`SQLiteBackend`.

    Args:
        path: The database file; created (readable by its owner only) unless ``read_only``.
        synchronous: ``"full"`` (default), ``"normal"`` or ``"off"``; see the module docs.
        timeout: Seconds a writer waits for another process's transaction.
        read_only: Open without write access: the file must exist, and it is
            never created, migrated or written.
        url: The URL to report in messages (defaults to ``sqlite:///<path>``).
        sqlite_vec: Whether semantic and hybrid searches compute cosines in
            SQL with the sqlite-vec extension: ``None`` (default) when it
            loads, else with numpy; ``True`` requires it; ``False`` never
            loads it. See :attr:`uses_sqlite_vec`.

    Raises:
        InvalidStoreURLError: if the path holds a NUL character.
        MissingDependencyError: if ``sqlite_vec=True`` and the ``sqlite-vec``
            extra is not installed.
        StoreNotFoundError: if ``read_only`` and the file does not exist.
        CorruptStoreError: if the file is not a kvmemory store (it is left unchanged).
        SchemaVersionError: if a newer kvmemory wrote the file, or ``read_only``
            meets an older layout that needs a migration.
        StoreError: if the file cannot be opened, or ``sqlite_vec=True`` and
            this Python's ``sqlite3`` cannot load the extension.
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
        sqlite_vec: bool | None = None,
    ) -> None:
        backend = SQLiteBackend(
            path,
            synchronous=synchronous,
            timeout=timeout,
            read_only=read_only,
            url=url,
            sqlite_vec=sqlite_vec,
        )
        super().__init__(backend, read_only=read_only)
        self.backend: SQLiteBackend = backend

    @property
    def path(self) -> str:
        """The database file."""
        return self.backend.path

    @property
    def synchronous(self) -> Synchronous:
        """The durability setting (see the module docs)."""
        return self.backend.synchronous

    @property
    def uses_sqlite_vec(self) -> bool:
        """Whether semantic and hybrid searches compute cosines in SQL with the sqlite-vec extension.

        ``True`` when the extension loaded (the ``sqlite-vec`` extra, and a
        Python whose ``sqlite3`` can load extensions): a query then reads
        only the best rows' cosines into Python, not the vectors (except on
        a read-only handle while some items have no vector yet). ``False``
        when the vectors are read a page at a time and scored with numpy.
        The hits and their order are the same either way, the scores equal
        to float32 rounding.
        """
        return self.backend.uses_sqlite_vec

    def rebuild_keyword_index(self) -> None:
        """Rebuild the keyword index (FTS5 table, terms, counts) from the stored items, in one transaction.

        The index follows every write on its own; this is the repair for an
        index that was damaged or dropped outside kvmemory, which searches
        and writes report with :class:`CorruptStoreError`. It reads and
        tokenizes every item of every session.

        Raises:
            StoreError: if the store is read-only or cannot be written; nothing is changed.
        """
        if self.read_only and not self.closed:
            msg = f"Store {self.url} is open read-only; open it writable to rebuild its keyword index. Nothing was changed."
            raise StoreError(msg)
        with self.guarded("rebuild the keyword index of", write=True):
            self.backend.rebuild_keyword_index()


_INDEX_NAMES: Final = ("kvmemory_fts", "kvmemory_search")


class _Scorer:
    """BM25 of one session's items, as the in-RAM index scores them, in a store of several sessions.

    FTS5's ``bm25()`` ranks with the statistics of the whole table, so it
    does not give the session's scores; :meth:`along_fts5` uses its order to
    find the few items worth scoring. :meth:`top` and :meth:`rare_first`
    score from the FTS5 postings in SQL instead (one pass over every
    occurrence of the query terms: the slow way for common words).
    """

    def __init__(
        self, con: sqlite3.Connection, sid: str, flat: float, slope: float, prefix: str
    ) -> None:
        self.con = con
        self.sid = sid
        self.flat = flat
        self.slope = slope
        self.prefix = prefix

    def along_fts5(
        self, match: str, lifts: Sequence[tuple[str, float]], ratio: float, k: int
    ) -> list[tuple[float, int]] | None:
        """Score the items in FTS5's ``bm25()`` order until no item after them can make the top ``k``.

        An item FTS5 scores ``g`` scores at most ``ratio * g`` in the session
        (see :func:`_ratio_to_fts5`), so once the ``k``-th best score reaches
        ``ratio`` times FTS5's score of the next item, the items from there on
        are left unread: none can beat the ``k``-th by more than float
        rounding (scores equal to rounding may come in either order, as the
        store's ranking allows; exact ties keep seq order, since FTS5 orders
        its ties by rowid). Items are scored exactly from the terms their
        rows keep, in batches growing fourfold. ``None`` when the first
        :data:`_FTS5_CANDIDATES` items do not settle it, or when an item
        breaks the bound (FTS5 then ranks some other way than assumed).
        """
        ranked = self.con.execute(_BM25, (match, _FTS5_CANDIDATES)).fetchall()
        scored: list[tuple[float, int]] = []
        done = 0
        size = 4 * k
        while True:
            batch = ranked[done : done + size]
            exact = self._exact(batch, lifts, ratio)
            if exact is None:
                return None
            scored += exact
            done += len(batch)
            best = heapq.nsmallest(k, scored, key=lambda hit: (-hit[0], hit[1]))
            if done == len(ranked) and len(ranked) < _FTS5_CANDIDATES:
                return best  # every item holding a query term is scored
            following = -ranked[min(done, len(ranked) - 1)][1]
            if len(best) == k and best[-1][0] * _ROUNDING >= ratio * following:
                return best
            if done == len(ranked):
                return None
            size *= 4

    def _exact(
        self, batch: Sequence[tuple[int, float]], lifts: Sequence[tuple[str, float]], ratio: float
    ) -> list[tuple[float, int]] | None:
        """Return ``(score, seq)`` of the ``(seq, bm25)`` items FTS5 ranked, from the terms their rows keep."""
        if not batch:
            return []
        rows = self.con.execute(
            "SELECT seq, n_terms, terms FROM kvmemory_items WHERE session_id = ?"
            " AND seq IN (SELECT value FROM json_each(?))",
            (self.sid, _json_list([seq for seq, _ in batch])),
        ).fetchall()
        if len(rows) != len(batch):
            held = {row[0] for row in rows}
            seq = next(seq for seq, _ in batch if seq not in held)
            msg = f"the index holds item {seq}, which session {self.sid!r} does not hold"
            raise sqlite3.DatabaseError(msg)
        engine = dict(batch)
        flat = self.flat
        slope = self.slope
        out = []
        for seq, length, text in rows:
            words = text.split(" ")
            score = 0.0
            for term, lift in lifts:
                tf = words.count(term)
                if tf:
                    # The operations and their order of the SQL in _score_sql.
                    score += lift * tf / (tf + flat + slope * length)
            if not score:
                msg = f"the index holds item {seq} for a query term its row does not hold"
                raise sqlite3.DatabaseError(msg)
            if score > ratio * -engine[seq] * _ROUNDING:
                return None
            out.append((score, seq))
        return out

    def top(
        self, lifts: Sequence[tuple[str, float]], k: int | None, cut: float | None = None
    ) -> list[tuple[int, float, int]]:
        """Return ``(seq, score, length)`` of the best ``k`` items (all with ``cut``: those scoring at least it)."""
        params: dict[str, object] = {"sid": self.sid, "flat": self.flat, "slope": self.slope}
        params.update(k=-1 if k is None else k, cut=cut)
        for j, (term, lift) in enumerate(lifts):
            params[f"term{j}"] = self.prefix + term
            params[f"lift{j}"] = lift
        rows = self.con.execute(_score_sql(len(lifts), cut is not None), params).fetchall()
        if rows and rows[0][3] != 1:
            msg = f"the index holds item {rows[0][0]}, which session {self.sid!r} does not hold with those terms"
            raise sqlite3.DatabaseError(msg)
        return [(int(seq), float(score), int(length)) for seq, score, length, _ in rows]

    def in_python(self, lifts: Sequence[tuple[str, float]], k: int) -> list[tuple[float, int]]:
        """Return the best ``k`` ``(score, seq)``, for any number of terms: counts from SQL, scores in Python.

        One query counts each query term in each item holding one (the FTS5
        postings, as :meth:`top` reads them); the scores are summed here in
        query order, as the in-RAM index sums them.
        """
        lift_of = {self.prefix + term: (j, lift) for j, (term, lift) in enumerate(lifts)}
        held: dict[int, list[tuple[int, float, int]]] = {}
        for doc, term, tf in self.con.execute(
            "SELECT doc, term, count(*) FROM kvmemory_fts_instance"
            " WHERE term IN (SELECT value FROM json_each(?)) GROUP BY doc, term",
            (_json_list(list(lift_of)),),
        ):
            j, lift = lift_of[term]
            held.setdefault(int(doc), []).append((j, lift, int(tf)))
        if not held:
            return []
        lengths = {
            int(seq): int(n)
            for seq, n in self.con.execute(
                "SELECT seq, n_terms FROM kvmemory_items WHERE session_id = ?"
                " AND seq IN (SELECT value FROM json_each(?))",
                (self.sid, _json_list(list(held))),
            )
        }
        scored = []
        for seq, counts in held.items():
            length = lengths.get(seq)
            if length is None or length < sum(tf for _, _, tf in counts):
                msg = f"the index holds item {seq}, which session {self.sid!r} does not hold with those terms"
                raise sqlite3.DatabaseError(msg)
            score = 0.0
            for _, lift, tf in sorted(counts):
                score += lift * tf / (tf + self.flat + self.slope * length)
            scored.append((score, seq))
        return heapq.nsmallest(k, scored, key=lambda hit: (-hit[0], hit[1]))

    def rare_first(
        self,
        lifts: Sequence[tuple[str, float]],
        common: Sequence[tuple[str, float]],
        k: int,
    ) -> list[tuple[float, int]] | None:
        """Score the rare terms first and the common ones for the few items that can still make the top ``k``.

        A common term (in more than half the items) has its IDF floored, so
        it adds less than its lift to any score: the items whose score over
        the rare terms is below the ``k``-th best minus the common lifts can
        never reach the top ``k``, and the common postings (the largest) are
        read for the others only. ``None`` when too few items hold a rare
        term for that (then every item is scored).
        """
        names = {term for term, _ in common}
        rare = [pair for pair in lifts if pair[0] not in names]
        bound = sum(lift for _, lift in common)
        first = self.top(rare, k)
        if len(first) < k or first[-1][1] <= bound:
            return None
        candidates = self.top(rare, None, cut=first[-1][1] - bound)
        seqs = _json_list([seq for seq, _, _ in candidates])
        counts = ", ".join(f"count(*) FILTER (WHERE term = :term{j})" for j in range(len(common)))
        params: dict[str, object] = {
            f"term{j}": self.prefix + term for j, (term, _) in enumerate(common)
        }
        params["seqs"] = seqs
        terms = ", ".join(f":term{j}" for j in range(len(common)))
        tfs = {
            int(row[0]): row[1:]
            for row in self.con.execute(
                f"SELECT doc, {counts} FROM kvmemory_fts_instance WHERE term IN ({terms})"
                " AND doc IN (SELECT value FROM json_each(:seqs)) GROUP BY doc",
                params,
            )
        }
        scored = []
        for seq, score, length in candidates:
            # Common terms added after the rare ones, in query order, as the in-RAM index does.
            for (_, lift), tf in zip(common, tfs.get(seq, ()), strict=False):
                if tf:
                    score += lift * tf / (tf + self.flat + self.slope * length)
            scored.append((score, seq))
        return heapq.nsmallest(k, scored, key=lambda hit: (-hit[0], hit[1]))


def _ratio_to_fts5(
    n_items: int, avgdl: float, n_rows: int, table_avgdl: float, dfs: Iterable[int]
) -> float:
    """Return the most an item's BM25 in its session can be, as a multiple of FTS5's ``bm25()`` of it.

    Per query term both are ``idf * tf * (k1 + 1) / (tf + k1 * (1 - b) + k1 * b * dl / avgdl)``:
    the session's with its own IDF and average length, FTS5's with those of
    the whole table (``n_rows`` rows, ``table_avgdl`` terms on average; FTS5
    replaces an IDF <= 0 by 1e-6). With ``x = tf + k1 * (1 - b)`` and
    ``c = k1 * b * dl``, the ratio of the two fractions is
    ``(x + c / table_avgdl) / (x + c / avgdl)``, which lies between 1 and
    ``avgdl / table_avgdl``; so each term's share, and the sum, is at most
    the largest IDF ratio times ``max(1, avgdl / table_avgdl)``.
    """
    lengths = max(1.0, avgdl / table_avgdl)
    return lengths * max(bm25_idf(n_items, df) / _fts5_idf(n_rows, df) for df in dfs)


def _fts5_idf(n_rows: int, df: int) -> float:
    """Return the IDF FTS5's ``bm25()`` gives a term held by ``df`` of ``n_rows`` rows."""
    idf = math.log((n_rows - df + 0.5) / (df + 0.5))
    return idf if idf > 0.0 else 1e-6


_COLUMN_TERMS: Final = 256
"""The most distinct query terms scored in SQL with a column each; more are scored by :meth:`_Scorer.in_python`."""
_FTS5_CANDIDATES: Final = 1024
"""How many items, in FTS5's order, :meth:`_Scorer.along_fts5` scores at most before scoring all."""
_ROUNDING: Final = 1.0 + 1e-9
"""Float rounding in the bound of :meth:`_Scorer.along_fts5` (the ranking's own tolerance for ties)."""


# BM25 of the items holding a query term, from the FTS5 postings (the session's own,
# by their prefix): one pass over the query terms' occurrences counts each term's tf
# per item, and each term's lift (its IDF times k1 + 1, times its repeats in the
# query) is bound as a value. "sound" is 0 when the index names an item the session
# does not hold (or not with that many terms): such rows sort first and are refused.
def _score_sql(n_terms: int, cut: bool = False) -> str:
    terms = range(n_terms)
    counts = ", ".join(f"count(*) FILTER (WHERE term = :term{j}) AS tf{j}" for j in terms)
    score = " + ".join(
        f"(CASE WHEN t.tf{j} THEN :lift{j} * t.tf{j}"
        f" / (t.tf{j} + :flat + :slope * i.n_terms) ELSE 0.0 END)"
        for j in terms
    )
    held = " + ".join(f"t.tf{j}" for j in terms)
    return f"""
SELECT * FROM (
    SELECT t.doc, {score} AS score, i.n_terms,
        coalesce(i.session_id = :sid AND i.n_terms >= {held}, 0) AS sound
    FROM (
        SELECT doc, {counts} FROM kvmemory_fts_instance
        WHERE term IN ({", ".join(f":term{j}" for j in terms)}) GROUP BY doc
    ) AS t LEFT JOIN kvmemory_items AS i ON i.seq = t.doc
) {"WHERE sound = 0 OR score >= :cut" if cut else ""}
ORDER BY sound, score DESC, doc
LIMIT :k
"""


_STATISTICS: Final = (
    "SELECT key, items, terms, (SELECT sum(items) FROM kvmemory_search),"
    " (SELECT sum(terms) FROM kvmemory_search) FROM kvmemory_search WHERE session_id = ?"
)
"""The session's key, item and term counts (BM25's statistics), then the whole table's (FTS5's)."""

# FTS5's own BM25 over the whole table: the session's when the store holds one
# session, else the order _Scorer.along_fts5 follows.
_BM25: Final = (
    "SELECT rowid, bm25(kvmemory_fts) AS score FROM kvmemory_fts WHERE kvmemory_fts MATCH ?"
    " ORDER BY score, rowid LIMIT ?"
)

# The cosines of a session's vectors, computed in SQL by sqlite-vec over the stored
# BLOBs. A row of the wrong length gets no cosine and sorts first, so that the caller
# names it. A vector with no direction (all zeros) gets a NaN distance, which SQLite
# reads as NULL: its cosine is 0, as numpy computes it. (Ordering by the result
# columns' names computes each cosine once.)
_COSINES: Final = """
SELECT seq,
    CASE WHEN length(vector) = :size
        THEN coalesce(1.0 - vec_distance_cosine(vector, :query), 0.0) END AS cosine,
    length(vector) AS length
FROM kvmemory_vectors
WHERE session_id = :sid AND fields = :fields AND length(vector) > 0"""
_BEST: Final = _COSINES + " ORDER BY length = :size, cosine DESC, seq LIMIT :limit"
_AT_LEAST: Final = f"SELECT * FROM ({_COSINES}) WHERE cosine IS NULL OR cosine >= :cut"
_OF_SEQS: Final = _COSINES + " AND seq IN (SELECT value FROM json_each(:seqs))"

# Two vectors of kvmemory's layout (little-endian float32) whose cosine is 0.6: the
# extension reads vectors in the machine's byte order, and is used only where it
# reads ours as written.
_PROBE: Final = "SELECT 1.0 - vec_distance_cosine(?, ?)"
_PROBE_VECTORS: Final = (struct.pack("<2f", 1.0, 0.0), struct.pack("<2f", 0.6, 0.8))


def _load_sqlite_vec(con: sqlite3.Connection, wanted: bool | None, path: str) -> bool:
    """Load the sqlite-vec extension into ``con``; return whether searches use it.

    ``wanted`` is ``None`` to use it when it loads and reads kvmemory's
    vectors, ``True`` to raise when it cannot, ``False`` not to load it.
    Extension loading is switched on only for the load itself, so SQL run
    later on the connection cannot load other libraries.
    """
    if wanted is False:
        return False
    try:
        sqlite_vec = importlib.import_module("sqlite_vec")
    except ImportError as exc:
        if wanted:
            raise missing_dependency("sqlite_vec", "sqlite-vec") from exc
        return False
    enable = getattr(con, "enable_load_extension", None)
    if enable is None:
        problem = "this Python's sqlite3 module was built without extension loading"
    else:
        try:
            enable(True)
            try:
                sqlite_vec.load(con)
            finally:
                enable(False)
            cosine = con.execute(_PROBE, _PROBE_VECTORS).fetchone()[0]
        except (sqlite3.Error, OSError) as exc:
            problem = f"loading it failed ({exc})"
        else:
            if cosine is not None and abs(cosine - 0.6) < 1e-6:
                return True
            problem = f"it computed {cosine!r} for a cosine of 0.6 (another byte order?)"
    if wanted:
        msg = (
            f"SQLite store {path!r} cannot use the sqlite-vec extension: {problem}. Use a "
            "Python whose sqlite3 module can load extensions (a Linux distribution's python3 "
            "usually can), or open the store without sqlite_vec=True to search with numpy."
        )
        raise StoreError(msg)
    return False


def _rows_of(steps: Sequence[str] | None) -> str:
    """Return the table a read selects from: through the ``(session_id, step)`` index when steps filter it.

    Left to itself the planner walks the session's ``(session_id, seq)`` index
    to skip the sort and reads the whole session; a step filter names few
    steps as a rule, so their index answers it (sorting the rows it finds).
    """
    return "kvmemory_items" if steps is None else "kvmemory_items INDEXED BY kvmemory_items_step"


_SELECT_SESSION: Final = (
    "SELECT step_key, created, metadata FROM kvmemory_sessions WHERE session_id = ?"
)


def _json_list(values: Sequence[object]) -> str:
    return _codec.dumps(list(values)).decode("utf-8")
