"""The layout of an SQLite store file: its tables, the keyword index's statements, the migrations.

Layout (schema version 10, recorded in ``PRAGMA user_version``)::

    kvmemory_sessions(session_id TEXT PRIMARY KEY, step_key TEXT, created REAL,
                      metadata BLOB)                                   -- metadata: v2
    kvmemory_items(seq INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT,
                   step TEXT, created REAL, data BLOB,
                   terms TEXT, n_terms INTEGER,                        -- terms, n_terms: v4
                   key TEXT)                                           -- key: v7
    index (session_id, seq, n_terms), index (session_id, step),       -- n_terms: v9
    index (session_id, created)
    unique index (session_id, key) WHERE key IS NOT NULL                -- v7
    kvmemory_search(key INTEGER PRIMARY KEY, session_id TEXT, items INTEGER,
                    terms INTEGER)                                     -- v4
    kvmemory_fts: FTS5 over the terms, kvmemory_fts_row and _instance: its
    fts5vocab tables, kvmemory_fts_content: the view it reads   -- v4
    kvmemory_fts_mark(through INTEGER): rows of a seq up to it have their
                     FTS rows; later ones are pending               -- v6
    kvmemory_embedders(session_id TEXT PRIMARY KEY, model TEXT,
                       dimension INTEGER)                          -- v3
    kvmemory_vectors(session_id TEXT, seq INTEGER, fields TEXT, vector BLOB,
                     PRIMARY KEY (session_id, seq, fields))        -- v3
    kvmemory_vector_changes(id INTEGER PRIMARY KEY, session_id TEXT,
                            seq INTEGER,
                            nonce INTEGER)                         -- nonce: v10
    index (session_id, id, nonce); triggers on kvmemory_vectors that log
    each row written (with a random nonce: v10), and one that prunes the log -- v8

``data`` holds the codec's bytes for the item; ``step`` its canonical step
text, so step filters are answered by the ``(session_id, step)`` index;
``key`` the key a record is filed under (``NULL`` for an item appended as
an item), so a record is found by the ``(session_id, key)`` index;
``metadata`` the codec's bytes for the session's metadata; ``vector`` an
item's unit vector as little-endian float32 (empty for an item without
text), embedded over the fields ``fields`` names (``*``: all) by the model
``kvmemory_embedders`` records for the session. ``kvmemory_vector_changes``
logs the seq of every vector row inserted, replaced or deleted, whoever
writes it (see :data:`CHANGES_KEPT`).

:data:`MIGRATIONS` brings a file of any earlier version to
:data:`SCHEMA_VERSION` (:class:`~agents.memory.stores._sqlite.file.SQLiteFile`
runs them as it opens a file writable); the keyword index's statements
(:data:`FOLD` and its neighbours) are run by
:class:`~agents.memory.stores._sqlite.keyword.SQLiteKeywordIndex`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Final

from agents.memory.exceptions import CorruptSessionError, CorruptStoreError
from agents.memory.stores._core.encoding import decode_pairs
from agents.memory.stores._core.terms import Terms, item_terms

__all__ = [
    "CHANGES_KEPT",
    "COUNT_INSERTED",
    "FOLD",
    "FOLD_AT",
    "INDEXED_EAGERLY",
    "MARK",
    "MIGRATIONS",
    "NO_CHANGE_LOG",
    "NO_LENGTH_INDEX",
    "NO_NONCE",
    "NO_RECORD_KEYS",
    "READS_AS_CURRENT",
    "READ_ONLY_LAYOUTS",
    "SCHEMA_VERSION",
    "SEARCHED_BY_SCAN",
    "THROUGH",
    "build_keyword_index",
]


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
# batch with one INSERT ... SELECT (see COUNT_INSERTED and FOLD).

MARK: Final = "·"
"""What joins a session's key to each of its terms in the FTS table (never part of a term)."""


def _prefixed(row: str, key: str) -> str:
    """Return the SQL for the text FTS5 indexes for a row: its terms, each prefixed with the session key."""
    return (
        f"CASE WHEN {row}.n_terms = 0 THEN '' ELSE {key} || '{MARK}' || "
        f"replace({row}.terms, ' ', ' ' || {key} || '{MARK}') END"
    )


# Schema version 6: rows inserted a few at a time are folded into the FTS table
# later, many at once (FTS5 writes a segment per transaction that touches it: 150 us
# of the 200 us of database CPU a one-item commit cost). kvmemory_fts_mark holds
# one number, "through": every row of a seq up to it has its FTS row; the rows
# after it are pending (their terms are in their rows, and their counts already in
# kvmemory_search). A write folds the pending rows of every session once
# FOLD_AT are pending, and a batch of FOLD_AT rows or more is indexed at once
# (see SQLiteKeywordIndex.index_inserted). The triggers touch the FTS rows of folded
# rows only.
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
FOLD_AT: Final = 64
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


def build_keyword_index(con: sqlite3.Connection) -> None:
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
    build_keyword_index(con)


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
FOLD: Final = (
    "INSERT INTO kvmemory_fts (rowid, terms) SELECT i.seq, "
    + _prefixed("i", "s.key")
    + " FROM kvmemory_items AS i JOIN kvmemory_search AS s ON s.session_id = i.session_id"
    " WHERE i.seq > ?1 AND i.seq <= ?2"
)
THROUGH: Final = "SELECT through FROM kvmemory_fts_mark"
"""The seq up to which every row has its FTS row (the later rows are pending)."""
COUNT_INSERTED: Final = (
    "INSERT INTO kvmemory_search (session_id, items, terms) VALUES (?, ?, ?)"
    " ON CONFLICT (session_id) DO UPDATE SET items = items + excluded.items,"
    " terms = terms + excluded.terms"
)
"""Add a batch's rows and terms to its session's counts (BM25's statistics): session, rows, terms."""


def _add_record_keys(con: sqlite3.Connection) -> None:
    # Every row of an older file is a plain item: NULL, which the partial index leaves out.
    columns = {row[1] for row in con.execute("PRAGMA table_info(kvmemory_items)")}
    if "key" not in columns:
        con.execute("ALTER TABLE kvmemory_items ADD COLUMN key TEXT")
    con.execute(
        "CREATE UNIQUE INDEX IF NOT EXISTS kvmemory_items_key ON kvmemory_items (session_id, key)"
        " WHERE key IS NOT NULL"
    )


# -- the log of vector changes (schema version 8) ------------------------------------
#
# Every insert, replacement and delete of a vector row adds (session, seq) to
# kvmemory_vector_changes, by trigger, in the writing transaction, whoever writes it
# (any handle, any process, plain SQL). Its ids grow with every row (the writers of a
# file take turns, so they follow commit order); the largest of a session's rows (with
# its nonce: version 10) is the session's vector version, and the rows above a version name the items whose
# vectors changed since (Backend.vector_changes). A session's log keeps its newest
# CHANGES_KEPT rows: past them, the rows below are deleted and the oldest kept loses
# its seq (NULL: "changes before here are gone"), so a version older than that asks
# for the session to be read again.

CHANGES_KEPT: Final = 16384
"""The rows of a session's vector change log kept at least; the older ones are pruned.

A handle that kept a session's vectors at a version older than the last
this many vector writes of the session reads the session again; past one
item in four changed it would anyway. About 50 bytes a row."""

_PRUNE_EVERY: Final = 1024
"""A change row whose id is a multiple of this prunes its session's log (each session's share of the ids prunes it)."""

_CHANGE_LOG_DDL: Final = (
    """CREATE TABLE IF NOT EXISTS kvmemory_vector_changes (
        id INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL,
        seq INTEGER
    )""",
    "CREATE INDEX IF NOT EXISTS kvmemory_vector_changes_session"
    " ON kvmemory_vector_changes (session_id, id)",
    *(
        f"CREATE TRIGGER IF NOT EXISTS kvmemory_vectors_logged_{event.lower()}"
        f" AFTER {event} ON kvmemory_vectors BEGIN"
        " INSERT INTO kvmemory_vector_changes (session_id, seq)"
        f" VALUES ({row}.session_id, {row}.seq); END"
        for event, row in (("INSERT", "new"), ("UPDATE", "new"), ("DELETE", "old"))
    ),
    # The cut: the id of the session's oldest row kept (CHANGES_KEPT newer ones above it).
    f"""CREATE TRIGGER IF NOT EXISTS kvmemory_vector_changes_prune
    AFTER INSERT ON kvmemory_vector_changes WHEN new.id % {_PRUNE_EVERY} = 0 BEGIN
        DELETE FROM kvmemory_vector_changes WHERE session_id = new.session_id AND id < (
            SELECT id FROM kvmemory_vector_changes WHERE session_id = new.session_id
            ORDER BY id DESC LIMIT 1 OFFSET {CHANGES_KEPT});
        UPDATE kvmemory_vector_changes SET seq = NULL WHERE id = (
            SELECT id FROM kvmemory_vector_changes WHERE session_id = new.session_id
            ORDER BY id DESC LIMIT 1 OFFSET {CHANGES_KEPT});
    END""",
)


def _log_vector_changes(con: sqlite3.Connection) -> None:
    # The vectors already stored have no rows: a session's version is 0 until its next write.
    for statement in _CHANGE_LOG_DDL:
        con.execute(statement)


# -- the lengths in the session index (schema version 9) -----------------------------
#
# The (session_id, seq) index also holds each row's n_terms: a keyword query whose k
# best tie on a word that every item holds once ranks them by their lengths, read from
# the index alone (a row's terms and data lie on overflow pages: reading n_terms from
# the rows of 8,000 items took 38 ms, from the index 10 ms). One index entry a row as
# before, a few bytes longer. DROP and CREATE run in the migration's transaction: a
# crash leaves the file at version 8 with its old index.


def _index_lengths(con: sqlite3.Connection) -> None:
    con.execute("DROP INDEX IF EXISTS kvmemory_items_session")
    con.execute("CREATE INDEX kvmemory_items_session ON kvmemory_items (session_id, seq, n_terms)")


# -- a nonce in each change row (schema version 10) -----------------------------------
#
# A change row's id alone does not name a version of the vectors: a file put back to
# an older copy (a backup restored) and written again gives the same ids to other
# writes, and a coded file saved at one of them (beside the database) would be served
# as current or caught up from the wrong rows. Each row the triggers write gets a
# random 64-bit nonce, and a session's version is (id, nonce) of its newest row, read
# from the session index, which holds the nonce too (one index lookup, as before).
# A version is caught up from only while the row it names holds its nonce. ALTER TABLE
# cannot give the new column random() as its default: the triggers write it. The
# migration gives each session's newest row a nonce (older rows stay NULL: no version
# names them again), so that a version read before the next write has one too.


def _nonce_vector_changes(con: sqlite3.Connection) -> None:
    columns = {row[1] for row in con.execute("PRAGMA table_info(kvmemory_vector_changes)")}
    if "nonce" not in columns:
        con.execute("ALTER TABLE kvmemory_vector_changes ADD COLUMN nonce INTEGER")
    for event in ("insert", "update", "delete"):
        con.execute(f"DROP TRIGGER IF EXISTS kvmemory_vectors_logged_{event}")
    for statement in _NONCED_TRIGGERS:
        con.execute(statement)
    con.execute("DROP INDEX IF EXISTS kvmemory_vector_changes_session")
    con.execute(
        "CREATE INDEX kvmemory_vector_changes_session"
        " ON kvmemory_vector_changes (session_id, id, nonce)"
    )
    con.execute(
        "UPDATE kvmemory_vector_changes SET nonce = random() WHERE nonce IS NULL AND id IN"
        " (SELECT max(id) FROM kvmemory_vector_changes GROUP BY session_id)"
    )


_NONCED_TRIGGERS: Final = tuple(
    f"CREATE TRIGGER kvmemory_vectors_logged_{event.lower()}"
    f" AFTER {event} ON kvmemory_vectors BEGIN"
    " INSERT INTO kvmemory_vector_changes (session_id, seq, nonce)"
    f" VALUES ({row}.session_id, {row}.seq, random()); END"
    for event, row in (("INSERT", "new"), ("UPDATE", "new"), ("DELETE", "old"))
)


MIGRATIONS: Final = (
    _create_v1,
    _add_session_metadata,
    _add_vectors,
    _add_keyword_index,
    _index_inserts_by_batch,
    _fold_few_inserts,
    _add_record_keys,
    _log_vector_changes,
    _index_lengths,
    _nonce_vector_changes,
)
"""Step ``i`` brings a file from schema version ``i`` to ``i + 1`` (see :func:`migrate`)."""

SCHEMA_VERSION: Final = len(MIGRATIONS)
SEARCHED_BY_SCAN: Final = (
    3  # the layout before the keyword index: read-only opens search by scanning
)
READS_AS_CURRENT: Final = (
    4  # the layout whose inserts a trigger indexed: it reads as the current one
)
INDEXED_EAGERLY: Final = 5  # the last layout that indexed every insert at once (no pending rows)
NO_RECORD_KEYS: Final = 6  # the last layout without record keys: read-only opens have no records
NO_CHANGE_LOG: Final = (
    7  # the last layout without the vector change log: read-only opens stamp the file
)
NO_LENGTH_INDEX: Final = 8  # the last layout whose session index lacks the lengths
NO_NONCE: Final = (
    9  # the last layout whose change rows have no nonce: read-only opens version by id
)
READ_ONLY_LAYOUTS: Final = (
    0,
    SEARCHED_BY_SCAN,
    READS_AS_CURRENT,
    INDEXED_EAGERLY,
    NO_RECORD_KEYS,
    NO_CHANGE_LOG,
    NO_LENGTH_INDEX,
    NO_NONCE,
)
"""The older schema versions a read-only handle reads as they are (0: an empty file); it refuses the others."""
