"""The SQLite store: one file, many processes, the embedded default.

Layout (schema version 6, recorded in ``PRAGMA user_version``)::

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
    kvmemory_fts_mark(through INTEGER): rows of a seq up to it have their
                     FTS rows; later ones are pending               -- v6
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
from collections.abc import Iterator, Sequence
from typing import Any, Final, Literal

from agents.memory import _codec
from agents.memory._text import BM25_B, BM25_K1, bm25_average_length, bm25_term_score
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
from agents.memory.stores._keyword import (
    KeywordMatch,
    Terms,
    bm25_score,
    item_terms,
    query_weights,
    rank_matches,
)
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


# Schema version 6: rows inserted a few at a time are folded into the FTS table
# later, many at once (FTS5 writes a segment per transaction that touches it: 150 us
# of the 200 us of database CPU a one-item commit cost). kvmemory_fts_mark holds
# one number, "through": every row of a seq up to it has its FTS row; the rows
# after it are pending (their terms are in their rows, and their counts already in
# kvmemory_search). A write folds the pending rows of every session once
# _FOLD_AT are pending, and a batch of _FOLD_AT rows or more is indexed at once
# (see SQLiteStore._insert_indexed). The triggers touch the FTS rows of folded rows only.
_MARK_DDL: Final = (
    "CREATE TABLE IF NOT EXISTS kvmemory_fts_mark (through INTEGER NOT NULL)",
    """CREATE TRIGGER kvmemory_items_search_delete AFTER DELETE ON kvmemory_items BEGIN
        INSERT INTO kvmemory_fts (kvmemory_fts, rowid, terms) SELECT 'delete', old.seq, """
    + _prefixed("old", "key")
    + """ FROM kvmemory_search WHERE session_id = old.session_id
            AND old.seq <= (SELECT through FROM kvmemory_fts_mark);
        UPDATE kvmemory_search SET items = items - 1, terms = terms - old.n_terms
            WHERE session_id = old.session_id;
    END""",
    """CREATE TRIGGER kvmemory_items_search_update AFTER UPDATE OF terms, n_terms ON kvmemory_items
    BEGIN
        INSERT INTO kvmemory_fts (kvmemory_fts, rowid, terms) SELECT 'delete', old.seq, """
    + _prefixed("old", "key")
    + """ FROM kvmemory_search WHERE session_id = old.session_id
            AND old.seq <= (SELECT through FROM kvmemory_fts_mark);
        INSERT INTO kvmemory_fts (rowid, terms) SELECT new.seq, """
    + _prefixed("new", "key")
    + """ FROM kvmemory_search WHERE session_id = new.session_id
            AND new.seq <= (SELECT through FROM kvmemory_fts_mark);
        UPDATE kvmemory_search SET terms = terms - old.n_terms + new.n_terms
            WHERE session_id = new.session_id;
    END""",
)
_FOLD_AT: Final = 64
"""Pending rows (or a batch's rows) from which a write folds them into the FTS table.

One-item commits, 2,000 UFO rows, database CPU per commit: FTS row in each
commit 198 us, folded every 16 rows 100 us, every 64 78 us, every 256 71 us,
never 51 us (benchmarks/bench_stores.py --targets; docs/stores.md)."""


def _mark_all_indexed(con: sqlite3.Connection) -> None:
    """Record every row as folded into the FTS table (true after a rebuild or a migration from an eager layout)."""
    con.execute("DELETE FROM kvmemory_fts_mark")
    con.execute(
        "INSERT INTO kvmemory_fts_mark (through) SELECT coalesce(max(seq), 0) FROM kvmemory_items"
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
    *_MARK_DDL,
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
    ("TABLE", "kvmemory_fts_mark"),
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
    _mark_all_indexed(con)  # every row has its FTS row: the updates below keep them
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


def _fold_few_inserts(con: sqlite3.Connection) -> None:
    con.execute("DROP TRIGGER IF EXISTS kvmemory_items_search_delete")
    con.execute("DROP TRIGGER IF EXISTS kvmemory_items_search_update")
    for statement in _MARK_DDL:
        con.execute(statement)
    _mark_all_indexed(con)  # layout 5 indexed every row as it was inserted


# The FTS rows of the pending rows of every session, seqs ?1 < seq <= ?2, in one
# statement (terms prefixed with the session's key, as _prefixed writes them). Run
# on every insert, with an empty range when nothing is folded: a missing FTS table
# is then reported by the write, as when every insert was indexed.
_FOLD: Final = (
    "INSERT INTO kvmemory_fts (rowid, terms) SELECT i.seq, "
    + _prefixed("i", "s.key")
    + " FROM kvmemory_items AS i JOIN kvmemory_search AS s ON s.session_id = i.session_id"
    " WHERE i.seq > ?1 AND i.seq <= ?2"
)
_THROUGH: Final = "SELECT through FROM kvmemory_fts_mark"
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
    _fold_few_inserts,
)
"""Step ``i`` brings a file from schema version ``i`` to ``i + 1`` (see :func:`migrate`)."""

SCHEMA_VERSION: Final = len(MIGRATIONS)
_SEARCHED_BY_SCAN: Final = (
    3  # the layout before the keyword index: read-only opens search by scanning
)
_READS_AS_CURRENT: Final = (
    4  # the layout whose inserts a trigger indexed: it reads as the current one
)
_INDEXED_EAGERLY: Final = 5  # the last layout that indexed every insert at once (no pending rows)

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
        self._no_tables = False
        self._indexed = True
        self._folds = True  # whether the file may hold rows not yet in the FTS table (layout 6)
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
    def no_tables(self) -> bool:
        """Whether the file holds no tables yet (read as empty), after following writers (see :meth:`_follow_writers`)."""
        with self._lock:
            self._follow_writers()
            return self._no_tables

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
        readable = (0, _SEARCHED_BY_SCAN, _READS_AS_CURRENT, _INDEXED_EAGERLY)
        if version == SCHEMA_VERSION or (self.read_only and version in readable):
            # A file of the layout before the keyword index reads the same, searched by scanning.
            self._no_tables = version == 0
            self._indexed = version >= _READS_AS_CURRENT
            self._folds = version == 0 or version > _INDEXED_EAGERLY
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
        self._folds = True

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

    def query_rows(self, sql: str, params: Sequence[object] = ()) -> list[Any]:
        """Run one read statement on this handle's connection and return its rows."""
        with self._lock:
            self._follow_writers()
            return self._con.execute(sql, params).fetchall()

    # -- reading ---------------------------------------------------------------------

    def read_session(self, session_id: str) -> SessionRow | None:
        if self.no_tables:
            return None
        rows = self.query_rows(_SELECT_SESSION, (session_id,))
        return rows[0] if rows else None

    def read_rows(
        self, session_id: str, *, steps: Sequence[str] | None = None, after: int | None = None
    ) -> list[tuple[int, bytes]]:
        if self.no_tables:
            return []
        sql = "SELECT seq, data FROM " + _rows_of(steps) + " WHERE session_id = ?"
        params: list[object] = [session_id]
        if after is not None:
            sql += " AND seq > ?"
            params.append(after)
        if steps is not None:
            sql += " AND step IN (SELECT value FROM json_each(?))"
            params.append(_json_list(steps))
        return self.query_rows(sql + " ORDER BY seq", params)

    def read_last(
        self, session_id: str, n: int, *, steps: Sequence[str] | None = None
    ) -> list[tuple[int, bytes]]:
        if self.no_tables:
            return []
        sql = "SELECT seq, data FROM " + _rows_of(steps) + " WHERE session_id = ?"
        params: list[object] = [session_id]
        if steps is not None:
            sql += " AND step IN (SELECT value FROM json_each(?))"
            params.append(_json_list(steps))
        rows = self.query_rows(sql + " ORDER BY seq DESC LIMIT ?", [*params, n])
        rows.reverse()
        return rows

    def read_pages(self, session_id: str, size: int) -> Iterator[list[tuple[int, bytes]]]:
        if self.no_tables:
            return
        first = "SELECT seq, data FROM kvmemory_items WHERE session_id = ? ORDER BY seq LIMIT ?"
        rows = self.query_rows(first, (session_id, size))
        later = "SELECT seq, data FROM kvmemory_items WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?"
        while rows:
            yield rows
            rows = self.query_rows(later, (session_id, rows[-1][0], size))

    def count(self, session_id: str) -> int:
        if self.no_tables:
            return 0
        rows = self.query_rows(
            "SELECT count(*) FROM kvmemory_items WHERE session_id = ?", (session_id,)
        )
        return int(rows[0][0])

    def sessions(self) -> list[str]:
        if self.no_tables:
            return []
        rows = self.query_rows("SELECT session_id FROM kvmemory_sessions ORDER BY session_id")
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
        (through,) = tx.execute(_THROUGH).fetchone()
        if last - through >= _FOLD_AT:
            tx.execute(_FOLD, (through, last))
            tx.execute("UPDATE kvmemory_fts_mark SET through = ?", (last,))
        else:
            tx.execute(_FOLD, (last, last))  # nothing to fold; checks the FTS table is there
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
        if self.no_tables:
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
            if not self.read_only and self._folds:
                self._fold_pending()
            self._con.close()

    def _fold_pending(self) -> None:
        """Fold the store's pending rows into the FTS table, if it can without waiting.

        A writable handle does this as it closes (readers of the closed file
        then search by the index alone) and before it searches (the FTS
        table then answers: scoring pending rows reads every posting of the
        query terms, 6x slower for common words). Best effort: while another
        process writes, or if the index is damaged, the rows stay pending
        (searches read them, the next write folds them, and a damaged index
        is reported by the search or write that meets it).
        """
        con = self._con
        with contextlib.suppress(sqlite3.Error):
            if not con.execute(_ANY_PENDING).fetchone()[0]:
                return
            con.execute("PRAGMA busy_timeout = 0")
            try:
                with self.transaction(None):
                    (through,) = con.execute(_THROUGH).fetchone()
                    (last,) = con.execute(
                        "SELECT coalesce(max(seq), 0) FROM kvmemory_items"
                    ).fetchone()
                    con.execute(_FOLD, (through, last))
                    con.execute("UPDATE kvmemory_fts_mark SET through = ?", (last,))
            finally:
                con.execute(f"PRAGMA busy_timeout = {int(self._timeout * 1000)}")

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
        if self.no_tables:
            return []
        sid = session_id
        try:
            with self._lock:
                self._follow_writers()
                return self._snapshot_top(sid, terms, k)
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise
            raise self._index_damaged("search", f" session {sid!r} of", str(exc)) from exc
        except sqlite3.DatabaseError as exc:
            raise self._index_damaged("search", f" session {sid!r} of", str(exc)) from exc

    def _snapshot_top(self, sid: str, terms: Sequence[str], k: int) -> list[tuple[float, int]]:
        """Score the session's items holding a query term, from one snapshot of the file.

        A writable handle first folds any pending rows (:meth:`_fold_pending`).
        With no pending row in the store (see :data:`_MARK_DDL`) the FTS table
        holds every row and :meth:`_indexed_top` scores; ``PRAGMA data_version``
        read before and after tells that no other connection committed in
        between (its snapshot was the one checked). Otherwise
        :meth:`_pending_top` scores, in one read transaction.
        """
        con = self._con
        if not self._folds:
            return self._indexed_top(sid, terms, k)
        if not self.read_only:
            self._fold_pending()
        for _ in range(_SNAPSHOT_TRIES):
            (version,) = con.execute("PRAGMA data_version").fetchone()
            if con.execute(_ANY_PENDING).fetchone()[0]:
                break
            best = self._indexed_top(sid, terms, k)
            if con.execute("PRAGMA data_version").fetchone()[0] == version:
                return best
        return self._pending_top(sid, terms, k)

    def _pending_top(self, sid: str, terms: Sequence[str], k: int) -> list[tuple[float, int]]:
        """Score the session's items by BM25 while some rows of the store are not yet in the FTS table.

        The one place that reads pending rows: the folded items holding a
        query term are counted from the FTS postings (the session's own, by
        their prefix), the session's pending rows from the terms they keep,
        and all of them ranked by :func:`rank_matches` with the session's
        counts (which include the pending rows): the ranking of
        ``Memory.search``, as every other path gives it. FTS5's table-wide
        statistics, which lack the pending rows, are not used.
        """
        con = self._con
        # One read transaction: counts, postings and pending rows from one snapshot.
        con.execute("BEGIN")
        try:
            stats = con.execute(_SESSION_COUNTS, (sid,)).fetchone()
            if stats is None or stats[1] <= 0:
                return []
            key, n_items, total = stats
            (through,) = con.execute(_THROUGH).fetchone()
            prefix = f"{key}{_MARK}"
            wanted = set(terms)
            held: dict[int, dict[str, int]] = {}
            for doc, name, tf in con.execute(
                "SELECT doc, term, count(*) FROM kvmemory_fts_instance"
                " WHERE term IN (SELECT value FROM json_each(?)) GROUP BY doc, term",
                (_json_list([prefix + term for term in wanted]),),
            ):
                held.setdefault(int(doc), {})[name[len(prefix) :]] = int(tf)
            lengths = dict(
                con.execute(
                    "SELECT seq, n_terms FROM kvmemory_items WHERE session_id = ? AND seq <= ?"
                    " AND seq IN (SELECT value FROM json_each(?))",
                    (sid, through, _json_list(list(held))),
                ).fetchall()
            )
            matches: list[KeywordMatch] = []
            for seq, counts in held.items():
                length = lengths.get(seq)
                if length is None or length < sum(counts.values()):
                    msg = f"the index holds item {seq}, which session {sid!r} does not hold with those terms"
                    raise sqlite3.DatabaseError(msg)
                matches.append((seq, int(length), counts))
            for seq, length, text in con.execute(_PENDING_ROWS, (sid, through)):
                counts = {}
                for word in text.split(" "):
                    if word in wanted:
                        counts[word] = counts.get(word, 0) + 1
                if counts:
                    matches.append((int(seq), int(length), counts))
            return rank_matches(n_items, total, matches, terms, k)
        finally:
            con.execute("COMMIT")

    def _indexed_top(self, sid: str, terms: Sequence[str], k: int) -> list[tuple[float, int]]:
        """Return the session's ``k`` best ``(score, seq)`` by BM25, from the FTS5 postings (see :class:`_Scorer`)."""
        con = self._con
        # One read transaction: the counts and the postings come from one snapshot.
        con.execute("BEGIN")
        try:
            stats = con.execute(_STATISTICS, (sid,)).fetchone()
            if stats is None or stats[1] <= 0:
                return []
            key, n_items, total, n_rows = stats
            prefix = f"{key}{_MARK}"
            names = {prefix + term: term for term in dict.fromkeys(terms)}
            # Each term's postings are the session's own (by their prefix): doc is
            # its document frequency in the session, cnt its number of occurrences.
            vocab = {
                names[name]: (int(docs), int(count))
                for name, docs, count in con.execute(
                    "SELECT term, doc, cnt FROM kvmemory_fts_row"
                    " WHERE term IN (SELECT value FROM json_each(?))",
                    (_json_list(list(names)),),
                )
            }
            if not vocab:
                return []
            scorer = _Scorer(con, sid, prefix, terms, vocab, n_items, total)
            # Every FTS row is this session's: FTS5's statistics are the session's own.
            scorer.alone = n_rows == n_items
            return scorer.best(k)
        finally:
            con.execute("COMMIT")

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
_SNAPSHOT_TRIES: Final = 3
"""Searches tried with the FTS table alone while other connections commit, before reading pending rows."""
_ANY_PENDING: Final = "SELECT EXISTS (SELECT 1 FROM kvmemory_items WHERE seq > (SELECT through FROM kvmemory_fts_mark))"
_PENDING_ROWS: Final = (
    "SELECT seq, n_terms, terms FROM kvmemory_items WHERE session_id = ? AND seq > ? ORDER BY seq"
)
_SESSION_COUNTS: Final = "SELECT key, items, terms FROM kvmemory_search WHERE session_id = ?"


class _Scorer:
    """The ``k`` best items of one session by BM25, as ``Memory.search`` scores them, from the FTS5 postings.

    Exact scores come from the terms each row keeps (:meth:`_exact`, summed
    as :func:`~agents.memory.stores._keyword.bm25_score` sums them, so they
    are the in-RAM index's floats); SQL over the postings (``_score_sql``)
    finds which rows to score, its sums equal to those to float rounding
    (they are compared with a margin of :data:`_MARGIN`).

    Every term counts (Lucene's IDF is above zero for any document
    frequency), so a query's common words would make SQL read most of the
    postings. :meth:`best` reads them only when it must, as MaxScore does:
    the rarest terms are scored first; an item holding none of them scores
    at most the sum of the other terms' upper bounds (:meth:`_bound`), so
    once the ``k``-th best over the rare terms alone beats that sum, only
    the items holding a rare term can make the top ``k``, and only those
    whose rare score plus the bounds for their length can reach it are
    scored in full.
    """

    def __init__(
        self,
        con: sqlite3.Connection,
        sid: str,
        prefix: str,
        terms: Sequence[str],
        vocab: dict[str, tuple[int, int]],
        n_items: int,
        total: int,
    ) -> None:
        self.con = con
        self.sid = sid
        self.prefix = prefix
        self.average = bm25_average_length(total, n_items)
        self.df = {term: docs for term, (docs, _) in vocab.items()}
        self.weighted = query_weights(terms, self.df, n_items)
        repeats = Counter(term for term, _ in self.weighted)
        weights = dict(self.weighted)
        # A term repeated in the query counts once per repeat: SQL multiplies instead.
        self.lifts = {term: repeats[term] * weight for term, weight in weights.items()}
        # The most times one item can hold a term: its occurrences past one per holder, plus one.
        self.most = {term: max(count - docs + 1, 1) for term, (docs, count) in vocab.items()}
        self.order = sorted(weights, key=lambda term: (self.df[term], term))  # rarest first
        self.alone = False  # whether the session is the only one in the FTS5 table

    def best(self, k: int, order: Sequence[str] | None = None) -> list[tuple[float, int]]:
        """Return the ``k`` best ``(score, seq)``, best first, ties by seq.

        With ``order`` (some of the query's terms, rarest first), the best by
        those terms alone; their scores are exact for the items that hold
        none of the other terms.
        """
        order = self.order if order is None else order
        if len(order) > _COLUMN_TERMS:
            # A column per term would pass SQLite's limits on columns and expression depth.
            return self._in_python(k)
        held = sum(self.df.values())
        for n_rare in range(1, len(order)):
            rare, rest = order[:n_rare], order[n_rare:]
            if 16 * sum(self.df[term] for term in rare) > held:
                # Past a sixteenth of the postings the rare terms score about as
                # flatly as the rest, so the bound seldom settles it: score them all.
                break
            rest_most = sum(self._bound(term) for term in rest) * _MARGIN
            if sum(self._bound(term) for term in rare) <= rest_most:
                continue  # no item's rare score can beat what the others may add
            found = self._rare_first(rare, rest, rest_most, k)
            if found is not None:
                return found
        return self._all(k, order)

    def _bound(self, term: str, length: int | None = None) -> float:
        """Return the most ``term`` can add to the score of an item (of ``length`` terms, if known).

        A term's share ``lift * tf / (tf + flat + slope * length)`` grows with
        ``tf`` and falls with ``length``, and ``tf <= length``: so it is at
        most its value at ``tf = length = most``, or for a known length at
        ``tf = min(most, length)``.
        """
        most = self.most[term]
        if length is None:
            return bm25_term_score(self.lifts[term], most, most, self.average)
        tf = min(most, length)
        return bm25_term_score(self.lifts[term], tf, length, self.average)

    def _rare_first(
        self, rare: Sequence[str], rest: Sequence[str], rest_most: float, k: int
    ) -> list[tuple[float, int]] | None:
        """Return the ``k`` best from the items holding a ``rare`` term, or ``None`` if that cannot settle them."""
        rows = self._scores(rare, None)
        if len(rows) < k:
            # Fewer than k items hold a rare term: they and the best by the other
            # terms (whose scores are whole for the items without a rare term).
            few = self._whole(rows, rest)
            taken = {seq for _, seq in few}
            others = [hit for hit in self.best(k + len(few), rest) if hit[1] not in taken]
            return heapq.nsmallest(k, few + others, key=_best_first)
        theta = heapq.nlargest(k, [row[1] for row in rows])[-1] / _MARGIN
        if rest_most >= theta:
            return None  # an item holding only the other terms may still beat the k-th
        bounds: dict[int, float] = {}
        chosen = []
        for row in rows:
            _, score, length, _ = row
            if score + rest_most < theta:
                continue
            most = bounds.get(length)
            if most is None:
                most = bounds[length] = sum(self._bound(term, length) for term in rest) * _MARGIN
            if score + most >= theta:
                chosen.append(row)
                if len(chosen) > _CANDIDATES:
                    return None  # too many to score one by one: a rarer term set will come
        return heapq.nsmallest(k, self._whole(chosen, rest), key=_best_first)

    def _all(self, k: int, order: Sequence[str]) -> list[tuple[float, int]]:
        """Return the ``k`` best by the terms ``order``: every item holding one scored in SQL, the best again exactly."""
        if len(order) == 1 and self.alone:
            # One term in a table of one session: FTS5's bm25() is its share times a
            # constant (the two IDFs' ratio), the same order at a direct query's cost.
            ranked = self._fts5(order[0], k + _SPARE)
            if len(ranked) == k + _SPARE and ranked[-1][1] >= ranked[k - 1][1] / _MARGIN**2:
                ranked = self._fts5(order[0], None, cut=ranked[k - 1][1] / _MARGIN**2)
            if len(ranked) > k:
                cut = ranked[k - 1][1] / _MARGIN**2
                ranked = [row for row in ranked if row[1] >= cut]
            return self._exact([seq for seq, _ in ranked], k)
        rows = self._scores(order, k + _SPARE)
        if len(rows) == k + _SPARE and rows[-1][1] >= rows[k - 1][1] / _MARGIN**2:
            # Items tie with the k-th to rounding past the spare rows: take every one.
            rows = self._scores(order, None, cut=rows[k - 1][1] / _MARGIN**2)
        if len(rows) > k:
            cut = rows[k - 1][1] / _MARGIN**2
            rows = [row for row in rows if row[1] >= cut]
        # The counts are every query term's for the items holding none but these.
        scored = [
            (bm25_score(counts, length, self.weighted, self.average), seq)
            for seq, _, length, counts in rows
        ]
        return heapq.nsmallest(k, scored, key=_best_first)

    def _whole(self, rows: Sequence[_Row], rest: Sequence[str]) -> list[tuple[float, int]]:
        """Return ``(score, seq)`` of ``rows`` (scored over some terms) over every query term, exactly.

        The counts of the ``rest`` of the terms come from their FTS5 postings,
        read for these items only.
        """
        if not rows:
            return []
        more: dict[int, dict[str, int]] = {}
        if rest:
            names = {self.prefix + term: term for term in rest}
            for doc, name, tf in self.con.execute(
                "SELECT doc, term, count(*) FROM kvmemory_fts_instance"
                " WHERE term IN (SELECT value FROM json_each(?))"
                " AND doc IN (SELECT value FROM json_each(?)) GROUP BY doc, term",
                (_json_list(list(names)), _json_list([row[0] for row in rows])),
            ):
                more.setdefault(int(doc), {})[names[name]] = int(tf)
        out = []
        for seq, _, length, counts in rows:
            extra = more.get(seq)
            held = {**counts, **extra} if extra else counts
            if length < sum(held.values()):
                msg = f"the index holds item {seq}, which session {self.sid!r} does not hold with those terms"
                raise sqlite3.DatabaseError(msg)
            out.append((bm25_score(held, length, self.weighted, self.average), seq))
        return out

    def _scores(
        self, terms: Sequence[str], limit: int | None, cut: float | None = None
    ) -> list[_Row]:
        """Return ``(seq, score over terms, length, {term: count})`` of the items holding one of ``terms``, best first.

        ``limit``: the best that many only; ``cut``: those scoring at least it only.
        """
        params: dict[str, object] = {
            "sid": self.sid,
            "flat": BM25_K1 * (1.0 - BM25_B),
            "slope": BM25_K1 * BM25_B / self.average,
            "k": -1 if limit is None else limit,
            "cut": cut,
        }
        for j, term in enumerate(terms):
            params[f"term{j}"] = self.prefix + term
            params[f"lift{j}"] = self.lifts[term]
        rows = self.con.execute(_score_sql(len(terms), cut is not None), params).fetchall()
        if rows and rows[0][3] != 1:
            msg = f"the index holds item {rows[0][0]}, which session {self.sid!r} does not hold with those terms"
            raise sqlite3.DatabaseError(msg)
        return [
            (
                int(row[0]),
                float(row[1]),
                int(row[2]),
                {term: int(tf) for term, tf in zip(terms, row[4:], strict=True) if tf},
            )
            for row in rows
        ]

    def _fts5(
        self, term: str, limit: int | None, cut: float | None = None
    ) -> list[tuple[int, float]]:
        """Return ``(seq, FTS5's bm25() negated)`` of the items holding ``term``, best first.

        ``limit``: the best that many only; ``cut``: those scoring at least it only.
        """
        params = ('"' + self.prefix + term + '"', math.inf if cut is None else -cut, limit or -1)
        return [(int(seq), -float(score)) for seq, score in self.con.execute(_BM25, params)]

    def _exact(self, seqs: Sequence[int], k: int) -> list[tuple[float, int]]:
        """Return the ``k`` best ``(score, seq)`` of the items ``seqs``, scored from the terms their rows keep."""
        if not seqs:
            return []
        rows = self.con.execute(
            "SELECT seq, n_terms, terms FROM kvmemory_items WHERE session_id = ?"
            " AND seq IN (SELECT value FROM json_each(?))",
            (self.sid, _json_list(list(seqs))),
        ).fetchall()
        if len(rows) != len(seqs):
            held = {row[0] for row in rows}
            seq = next(seq for seq in seqs if seq not in held)
            msg = f"the index holds item {seq}, which session {self.sid!r} does not hold"
            raise sqlite3.DatabaseError(msg)
        terms = self.order
        scored = []
        for seq, length, text in rows:
            words = text.split(" ")
            counts = {term: words.count(term) for term in terms}
            if not any(counts.values()):
                msg = f"the index holds item {seq} for a query term its row does not hold"
                raise sqlite3.DatabaseError(msg)
            scored.append((bm25_score(counts, length, self.weighted, self.average), seq))
        return heapq.nsmallest(k, scored, key=lambda hit: (-hit[0], hit[1]))

    def _in_python(self, k: int) -> list[tuple[float, int]]:
        """Return the best ``k`` ``(score, seq)``, for any number of terms: counts from SQL, scores in Python.

        One query counts each query term in each item holding one (the FTS5
        postings, as :meth:`_scores` reads them); the scores are summed here
        as :meth:`_exact` sums them.
        """
        names = {self.prefix + term: term for term in self.order}
        held: dict[int, dict[str, int]] = {}
        for doc, name, tf in self.con.execute(
            "SELECT doc, term, count(*) FROM kvmemory_fts_instance"
            " WHERE term IN (SELECT value FROM json_each(?)) GROUP BY doc, term",
            (_json_list(list(names)),),
        ):
            held.setdefault(int(doc), {})[names[name]] = int(tf)
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
            if length is None or length < sum(counts.values()):
                msg = f"the index holds item {seq}, which session {self.sid!r} does not hold with those terms"
                raise sqlite3.DatabaseError(msg)
            scored.append((bm25_score(counts, length, self.weighted, self.average), seq))
        return heapq.nsmallest(k, scored, key=_best_first)


_Row = tuple[int, float, int, dict[str, int]]
"""An item SQL scored: ``(seq, score over some terms, length, {term: count} of those terms)``."""


def _best_first(hit: tuple[float, int]) -> tuple[float, int]:
    """Sort key of ``(score, seq)``: the higher score first, then the lower seq."""
    return -hit[0], hit[1]


_COLUMN_TERMS: Final = 256
"""The most distinct query terms scored in SQL with a column each; more are scored by :meth:`_Scorer._in_python`."""
_MARGIN: Final = 1.0 + 1e-9
"""How far SQL's sums may be from the exact ones, as a ratio (they differ by float rounding)."""
_CANDIDATES: Final = 4096
"""The most items :meth:`_Scorer._rare_first` scores in full before it tries with one more rare term."""
_SPARE: Final = 64
"""Rows past the ``k``-th that :meth:`_Scorer._all` reads, to catch the items that tie with it to rounding."""


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
    tfs = ", ".join(f"t.tf{j}" for j in terms)
    return f"""
SELECT * FROM (
    SELECT t.doc, {score} AS score, i.n_terms,
        coalesce(i.session_id = :sid AND i.n_terms >= {held}, 0) AS sound, {tfs}
    FROM (
        SELECT doc, {counts} FROM kvmemory_fts_instance
        WHERE term IN ({", ".join(f":term{j}" for j in terms)}) GROUP BY doc
    ) AS t LEFT JOIN kvmemory_items AS i ON i.seq = t.doc
) {"WHERE sound = 0 OR score >= :cut" if cut else ""}
ORDER BY sound, score DESC, doc
LIMIT :k
"""


_STATISTICS: Final = (
    "SELECT key, items, terms, (SELECT sum(items) FROM kvmemory_search)"
    " FROM kvmemory_search WHERE session_id = ?"
)
"""The session's key, item count and term count (BM25's statistics), then the FTS5 table's row count."""

# FTS5's own BM25 of one term's items, best first (ties by rowid, as BM25 ties keep seq order).
_BM25: Final = (
    "SELECT * FROM (SELECT rowid, bm25(kvmemory_fts) AS score FROM kvmemory_fts"
    " WHERE kvmemory_fts MATCH ?) WHERE score <= ? ORDER BY score, rowid LIMIT ?"
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
