"""The SQLite store: one file, many processes, the embedded default.

:class:`SQLiteBackend` is built of three parts, each in a module of its own:
the open file (:class:`~agents.memory.stores._sqlite.file.SQLiteFile`:
checks, connection, WAL mode, migrations, a read-only handle following
writers), its layout (:mod:`~agents.memory.stores._sqlite.schema`: tables,
index statements, migrations) and the keyword index
(:class:`~agents.memory.stores._sqlite.keyword.SQLiteKeywordIndex`, FTS5
filled in batches, BM25 over its postings). The backend itself reads and
writes rows and vectors through the file's connection.

Semantic search computes exact cosines in SQL with the sqlite-vec
extension's ``vec_distance_cosine`` over the stored vectors where the
extension loads (the ``sqlite-vec`` extra, and a Python whose ``sqlite3``
can load extensions), and otherwise reads the vectors a page at a time and
computes them with numpy; either way the file is the same, so every Python
reads and writes it. The file runs in WAL mode; every write is one ``BEGIN IMMEDIATE`` transaction, so writers from
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
import hashlib
import os
import sqlite3
import time
from collections.abc import Hashable, Iterator, Sequence
from typing import Any, Final

from agents.memory import _codec
from agents.memory._filter import FilterNode
from agents.memory.exceptions import StoreArgumentError, StoreError
from agents.memory.stores._core.encoding import Row, RowUpdate, SessionRow
from agents.memory.stores._core.terms import Terms
from agents.memory.stores._sql.dialect import SQLITE, SQLRows
from agents.memory.stores._sqlite.change_log import changes_between, newest_change
from agents.memory.stores._sqlite.file import SQLiteFile, Synchronous
from agents.memory.stores._sqlite.filters import SQLiteFilters
from agents.memory.stores._sqlite.keyword import KeywordFold, SQLiteKeywordIndex
from agents.memory.stores._sqlite.schema import SCHEMA_VERSION
from agents.memory.stores._sqlite.snapshots import (
    KeywordSnapshotMode,
    SnapshotFiles,
    SnapshotsOnClose,
    vector_snapshot_mode,
)
from agents.memory.stores._store import Store

__all__ = ["KeywordFold", "KeywordSnapshotMode", "SQLiteBackend", "SQLiteStore", "Synchronous"]


class SQLiteBackend(SQLRows, SnapshotFiles):
    """The rows of an SQLite store: one file, many processes (see :class:`SQLiteStore` for the arguments).

    Opening checks the file (or, unless ``read_only``, creates and
    migrates it); :class:`SQLiteStore` is the store over this backend. The
    backend reads and writes rows and vectors; it holds the open file
    (:class:`~agents.memory.stores._sqlite.file.SQLiteFile`: connection,
    lock, transactions) and the file's keyword index
    (:class:`~agents.memory.stores._sqlite.keyword.SQLiteKeywordIndex`), and
    uses both through their public calls.
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
        keyword_fold: KeywordFold = "batched",
        keyword_snapshot: KeywordSnapshotMode = "auto",
        vector_snapshot: KeywordSnapshotMode = "auto",
    ) -> None:
        if keyword_fold not in ("batched", "lazy"):
            msg = f"keyword_fold must be 'batched' or 'lazy', got {keyword_fold!r}."
            raise StoreArgumentError(msg)
        self._file = SQLiteFile(
            path,
            synchronous=synchronous,
            timeout=timeout,
            read_only=read_only,
            sqlite_vec=sqlite_vec,
        )
        self.path = self._file.path
        self.url = url or f"sqlite:///{self.path}"
        self.read_only = read_only
        self.synchronous: Synchronous = synchronous
        self.keyword_fold: KeywordFold = keyword_fold
        self._keywords = SQLiteKeywordIndex(self._file, keyword_fold)
        self._filters = SQLiteFilters(self._file, self, self._keywords, self.count)
        self.snapshots_on_close = SnapshotsOnClose(keyword_snapshot)  # the sessions it wrote
        self.vector_snapshot = vector_snapshot_mode(vector_snapshot)

    def filter_candidates(self, session_id: str, tree: FilterNode) -> set[int] | None:
        """Judge the filter in SQL (:meth:`SQLRows.filter_candidates`), kept while no other connection commits to the file, this handle's own writes judged again row by row (:class:`SQLiteFilters`: why)."""
        return self._filters.candidates(session_id, tree)

    def filter_few(self, session_id: str, tree: FilterNode, most: int) -> set[int] | None:
        """Judge the filter in SQL up to ``most + 1`` rows (:meth:`SQLRows.filter_few`), from the answers kept where they tell (:class:`SQLiteFilters`)."""
        return self._filters.few(session_id, tree, most)

    def filter_few_kept(self, session_id: str, tree: FilterNode, most: int) -> set[int] | None:
        """Judge the filter on its second ask, then take the answer kept (:meth:`SQLiteFilters.kept_few`): a rare filter asked again scores only its rows' vectors."""
        return self._filters.kept_few(session_id, tree, most)

    def keyword_top_where(
        self, session_id: str, terms: Sequence[str], k: int, tree: FilterNode
    ) -> list[tuple[float, int]] | None:
        """Score only the rows that may pass a rare filter, judged as :meth:`filter_few` judges them, when it is asked again (:meth:`SQLiteFilters.top_where`)."""
        return self._filters.top_where(session_id, terms, k, tree) if self.keyword_index else None

    # -- the file ------------------------------------------------------------------

    @property
    def connection(self) -> sqlite3.Connection:
        """The ``sqlite3`` connection reads and writes go through now, to trace or inspect (never commit, roll back or close it).

        A read-only handle on a file no writer had open reopens it when a
        writer appears, so ask again rather than keep it.
        """
        return self._file.connection

    @property
    def no_tables(self) -> bool:
        """Whether the file holds no tables yet (read as empty), after following writers (see :meth:`SQLiteFile.follow_writers`)."""
        return self._file.no_tables

    def store_error(self, action: str, where: str, exc: BaseException) -> StoreError:
        return self._file.error(action, where, exc)

    def transaction(
        self, session_id: str | None
    ) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        return self._file.transaction()

    def query_rows(self, sql: str, params: Sequence[object] = ()) -> list[Any]:
        """Run one read statement on this handle's connection and return its rows."""
        return self._file.query_rows(sql, params)

    def close(self) -> None:
        with self._file.lock:
            self._keywords.fold_pending()
            due = self.snapshots_on_close.due(self.keyword_snapshot_path, self.query_rows)
        # The connection closes once the snapshots due are saved, on a thread of their own.
        self.snapshots_on_close.save_then_close(due, self.read_rows_terms, self._file.close)

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

    def keyword_version(self, session_id: str) -> tuple[int, int, int] | None:
        """Return the file's change stamp (:meth:`SQLiteFile.change_stamp`), which every commit to the file changes; ``None`` without a keyword index.

        A writable handle first folds the rows pending in the FTS table
        (which changes no session's rows), so that the ranking asked next
        does not change the stamp by folding them itself.
        """
        if not self._file.keyword_indexed:
            return None
        with self._file.lock:
            self._keywords.fold_pending()
            return self._file.change_stamp()

    def keyword_snapshot_path(self, session_id: str) -> str | None:
        """Return ``<file>.keywords/<sha1 of the session id>`` (``None`` where the file keeps no keyword index)."""
        if not self._file.keyword_indexed:
            return None
        name = hashlib.sha1(session_id.encode(), usedforsecurity=False).hexdigest()
        return os.path.join(f"{self._file.path}.keywords", name)

    def read_rows_terms(self, session_id: str) -> list[tuple[int, bytes, str]] | None:
        if self.no_tables:
            return []
        # One statement: the rows and their terms of one snapshot.
        return self.query_rows(_ROWS_TERMS, (session_id,))

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

    def append_rows(
        self, session_id: str, step_key: str, rows: Sequence[Row], terms: Sequence[Terms]
    ) -> list[int] | None:
        """Append rows in one transaction (session created or checked, rows inserted and counted); ``None`` to decline.

        The general transaction's steps for appends alone, without its
        checks for the other writes: it declines, writing nothing, when the
        session files its steps under another key (the store then raises).
        """
        with self._file.transaction() as tx:
            row = tx.execute(_SELECT_STEP_KEY, (session_id,)).fetchone()
            if row is None:
                self.create_session(tx, session_id, step_key, time.time())
            elif row[0] != step_key:
                return None  # nothing written: the transaction commits no change
            return self.insert_rows(tx, session_id, rows, terms)

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
        return self._insert(tx, session_id, sql, values, terms)

    def insert_keyed(
        self,
        tx: sqlite3.Connection,
        session_id: str,
        rows: Sequence[Row],
        keys: Sequence[str],
        terms: Sequence[Terms],
    ) -> list[int]:
        sql = (
            "INSERT INTO kvmemory_items (session_id, step, created, data, terms, n_terms, key)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)"
        )
        values = [
            (session_id, step, created, data, text, n, key)
            for (step, created, data), (text, n), key in zip(rows, terms, keys, strict=True)
        ]
        return self._insert(tx, session_id, sql, values, terms)

    @property
    def keyed_rows(self) -> bool:
        """Whether the rows have the record key column (``False`` for an older file opened read-only: no records)."""
        return self._file.keyed

    def _insert(
        self,
        tx: sqlite3.Connection,
        session_id: str,
        sql: str,
        values: Sequence[tuple[object, ...]],
        terms: Sequence[Terms],
    ) -> list[int]:
        if len(values) == 1:
            last = tx.execute(sql, values[0]).lastrowid
        else:
            tx.executemany(sql, values)
            last = tx.execute("SELECT last_insert_rowid()").fetchone()[0]
        assert last is not None  # an INSERT always sets the last rowid
        # BEGIN IMMEDIATE makes this the only writer, so the seqs are consecutive.
        first = last - len(values) + 1
        self._keywords.index_inserted(tx, session_id, terms, last)
        self.snapshots_on_close.appended(session_id)
        self._filters.touched(session_id, range(first, last + 1), grown=True)
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
        self.snapshots_on_close.changed(session_id)
        self._filters.touched(session_id, [seq for seq, _, _ in rows])
        return [
            seq
            for (seq, step, data), (text, n) in zip(rows, terms, strict=True)
            if tx.execute(sql, (step, data, text, n, session_id, seq)).rowcount
        ]

    def delete_rows(self, tx: Any, session_id: str, seqs: Sequence[int]) -> list[int]:
        self.snapshots_on_close.changed(session_id)
        self._filters.touched(session_id, seqs)
        return super().delete_rows(tx, session_id, seqs)

    def clear_rows(self, tx: Any, session_id: str) -> int:
        self.snapshots_on_close.changed(session_id)
        self._filters.touched(session_id, None)
        return super().clear_rows(tx, session_id)

    def delete_session(self, session_id: str) -> bool:
        with self.transaction(session_id) as con:
            self._filters.touched(session_id, None)
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
        return self._file.uses_sqlite_vec

    def vectors_version(
        self, session_id: str, fields: str
    ) -> int | tuple[int, int | None] | tuple[int, int, int]:
        """Return the id and nonce of the session's newest row in the vector change log: every vector write, by anyone, logs a newer one.

        The nonce (random, written by the log's triggers) tells this row
        from another given the same id after the file was put back to an
        older copy and written again. 0 for a session no vector write was
        logged for. On a file of schema version 8 or 9 opened read-only (no
        nonces): the id alone. On a file of version 7 opened read-only (no
        log): the file's change stamp (:meth:`SQLiteFile.change_stamp`),
        which any commit to the file changes.
        """
        if not self._file.logs_vector_changes:
            return self._file.change_stamp()
        if self.no_tables:
            return 0
        return newest_change(self.query_rows, session_id, nonced=self._file.nonces_vector_changes)

    def ranks_vectors(self, session_id: str, fields: str) -> bool:
        """Return whether sqlite-vec ranks the session's vector rows (:attr:`uses_sqlite_vec`; see the base)."""
        return self._file.uses_sqlite_vec

    def nearest(
        self, session_id: str, fields: str, query: bytes, limit: int, among: Sequence[int]
    ) -> list[tuple[int, float | None, int]] | None:
        if not self._file.uses_sqlite_vec:
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
        with self._file.lock:
            self._file.follow_writers()
            con = self._file.connection
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

    def vector_changes(
        self, session_id: str, fields: str, since: Hashable, now: Hashable
    ) -> set[int] | None:
        """Return the seqs the vector change log holds for the session between two versions; ``None`` where it cannot tell.

        The log is written by trigger in every transaction that writes
        vector rows, whoever runs it, so the answer covers the writes of
        other handles and processes as well as this one's. ``None`` where
        the log was pruned past ``since``, where the row ``since`` names no
        longer holds its nonce (the file was put back to an older copy and
        its ids written again), for a version of another layout (an id
        alone, from before schema version 10), and on a file without the
        log (version 7 opened read-only).
        """
        if not self._file.logs_vector_changes:
            return None
        nonced = self._file.nonces_vector_changes
        return changes_between(self.query_rows, session_id, since, now, nonced=nonced)

    # -- keyword search --------------------------------------------------------------

    @property
    def keyword_index(self) -> bool:
        """Whether keyword searches are answered by the FTS5 index (``False`` for an older file opened read-only)."""
        return self._keywords.available

    def keyword_top(
        self, session_id: str, terms: Sequence[str], k: int
    ) -> list[tuple[float, int]] | None:
        """Score the session by BM25 from the FTS5 index (``None``: an older file read-only, scanned by the store)."""
        return self._keywords.top(session_id, terms, k)

    def keyword_among(
        self, session_id: str, terms: Sequence[str], seqs: Sequence[int]
    ) -> list[tuple[float, int]] | None:
        """Score some rows of the session by BM25 with the session's statistics (``None``: rows not folded yet, or an older file read-only)."""
        return self._keywords.among(session_id, terms, seqs)

    def keyword_held(
        self, session_id: str, terms: Sequence[str], seqs: Sequence[int]
    ) -> dict[int, set[str]] | None:
        """Tell which query terms each of some rows holds, in one statement, from the terms each row keeps (``None``: an older file read-only)."""
        return self._keywords.held(session_id, terms, seqs)

    def keyword_frequencies(self, session_id: str, terms: Sequence[str]) -> dict[str, int] | None:
        """Count each term's items in the session in one statement, from the FTS5 vocabulary and the rows not folded yet (``None``: an older file read-only)."""
        return self._keywords.frequencies(session_id, terms)

    def keyword_top_sessions(
        self, session_ids: Sequence[str], terms: Sequence[str], k: int
    ) -> list[tuple[float, str, int]] | None:
        """Score several sessions as one corpus by BM25 from the FTS5 index (``None``: an older file read-only)."""
        return self._keywords.top_sessions(session_ids, terms, k)

    def read_sessions(self, session_ids: Sequence[str]) -> dict[str, SessionRow]:
        """Read the rows of many sessions in one query."""
        if self.no_tables or not session_ids:
            return {}
        rows = self.query_rows(
            "SELECT session_id, step_key, created, metadata FROM kvmemory_sessions"
            " WHERE session_id IN (SELECT value FROM json_each(?))",
            (SQLITE.bind_list(list(session_ids)),),
        )
        return {str(row[0]): (row[1], row[2], row[3]) for row in rows}

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
            self._keywords.rebuild()
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
        keyword_fold: When rows appended a few at a time are added to the
            keyword index's FTS5 table: ``"batched"`` (default) by the write
            that finds 64 of them pending; ``"lazy"``: by this handle only,
            before it searches and as it closes, so that writes never pay for
            it (see :attr:`keyword_fold`). Searches rank the same either way.
        keyword_snapshot: ``"auto"`` (default): as the handle closes, save
            the keyword snapshot of each session of 1,000 rows or more it
            wrote to whose snapshot is missing or behind (see
            :meth:`save_keyword_snapshot`), on a thread of its own, so that a
            ``Memory`` read later (:meth:`read_memory`) answers its first
            keyword query from it; ``"off"``: never write one unasked.
        vector_snapshot: ``"auto"`` (default): a writable handle that codes
            a session's part vectors as int8 (they pass the kept-vector
            budget) saves the coded table in ``<file>.vectors/`` as it builds
            it, and as it closes codes and saves it for the sessions whose
            part vectors it wrote where it is missing or too stale for a
            reader to catch up (on a thread
            of its own that the process waits for: 7-8 s of CPU at 100,000
            steps), so that a fresh handle's first semantic or hybrid query
            loads it rather than read every vector; ``"off"``: never write
            one (a current one is still read).

    Raises:
        InvalidStoreURLError: if the path holds a NUL character, or is
            ``":memory:"`` (use ``memory://`` for a store without a file).
        StoreArgumentError: if ``keyword_fold`` is not ``"batched"`` or ``"lazy"``,
            or ``keyword_snapshot`` or ``vector_snapshot`` not ``"auto"`` or ``"off"``.
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
        keyword_fold: KeywordFold = "batched",
        keyword_snapshot: KeywordSnapshotMode = "auto",
        vector_snapshot: KeywordSnapshotMode = "auto",
    ) -> None:
        backend = SQLiteBackend(
            path,
            synchronous=synchronous,
            timeout=timeout,
            read_only=read_only,
            url=url,
            sqlite_vec=sqlite_vec,
            keyword_fold=keyword_fold,
            keyword_snapshot=keyword_snapshot,
            vector_snapshot=vector_snapshot,
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

    @property
    def keyword_snapshot(self) -> KeywordSnapshotMode:
        """Whether this handle saves the keyword snapshots of the sessions it wrote as it closes: ``"auto"`` or ``"off"`` (see the ``keyword_snapshot`` argument)."""
        return self.backend.snapshots_on_close.mode

    @property
    def vector_snapshot(self) -> KeywordSnapshotMode:
        """Whether this handle saves a session's coded part vectors beside the file as it codes them: ``"auto"`` or ``"off"`` (see the ``vector_snapshot`` argument)."""
        return self.backend.vector_snapshot

    @property
    def keyword_fold(self) -> KeywordFold:
        """When this handle's writes add pending rows to the FTS5 table: ``"batched"`` or ``"lazy"`` (see the ``keyword_fold`` argument).

        ``"lazy"`` moves that work out of the writes, not away: the handle
        does it before its next search and as it closes, and while rows are
        pending a search on another handle reads their terms from the rows
        (slower, same ranking).
        """
        return self.backend.keyword_fold

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


_ROWS_TERMS: Final = (
    "SELECT seq, data, coalesce(terms, '') FROM kvmemory_items WHERE session_id = ? ORDER BY seq"
)
"""A session's rows in seq order with the search terms each keeps (``Backend.read_rows_terms``)."""


def _rows_of(steps: Sequence[str] | None) -> str:
    """Return the table a read selects from: through the ``(session_id, step)`` index when steps filter it.

    Left to itself the planner walks the session's ``(session_id, seq)`` index
    to skip the sort and reads the whole session; a step filter names few
    steps as a rule, so their index answers it (sorting the rows it finds).
    """
    return "kvmemory_items" if steps is None else "kvmemory_items INDEXED BY kvmemory_items_step"


_SELECT_STEP_KEY: Final = "SELECT step_key FROM kvmemory_sessions WHERE session_id = ?"
_SELECT_SESSION: Final = (
    "SELECT step_key, created, metadata FROM kvmemory_sessions WHERE session_id = ?"
)


def _json_list(values: Sequence[object]) -> str:
    return _codec.dumps(list(values)).decode("utf-8")
