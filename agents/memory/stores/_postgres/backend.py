"""The PostgreSQL store: sessions shared by processes on many machines.

Needs the ``postgres`` extra (psycopg 3 and psycopg_pool), imported only
when a ``postgresql://`` URL is opened. Layout (schema version 9, recorded in
``kvmemory_schema``)::

    kvmemory_sessions(session_id text PRIMARY KEY, step_key text, next_seq bigint,
                      created float8, metadata bytea, deleted boolean,   -- metadata, deleted: v2
                      n_items bigint, n_terms bigint,                    -- n_items, n_terms: v4
                      vectors_version bigint)                            -- v6
    kvmemory_items(session_id text, seq bigint, step text, created float8,
                   data bytea, doc jsonb, PRIMARY KEY (session_id, seq),
                   terms tsvector, n_terms integer, tf jsonb,        -- terms, n_terms, tf: v4
                   key text COLLATE "C")                              -- key: v5
    index (session_id, step), index (session_id, created), GIN index (terms): v4
    unique index (session_id, key) WHERE key IS NOT NULL: v5
    kvmemory_embedders(session_id text PRIMARY KEY, model text, dimension integer)  -- v3
    kvmemory_vectors(session_id text, seq bigint, fields text, vector bytea,
                     PRIMARY KEY (session_id, seq, fields))                      -- v3
    sequence kvmemory_vectors_versions, and statement triggers on kvmemory_vectors
    giving a written session's vectors_version its next number: v6
    kvmemory_vector_changes(session_id text, version bigint, seq bigint),
    index (session_id, version): the seqs each vector write touched, logged
    by the same triggers under the session's new number (pruned): v7
    tf compressed with lz4 where the server offers it: v8
    kvmemory_postings(session_id text, term text, block bigint, n integer,
                      lo bigint, hi bigint, seqs bigint[], tfs integer[], lens integer[],
                      PRIMARY KEY (session_id, term, block)),
    kvmemory_postings_folded(session_id text PRIMARY KEY, seq bigint),
    kvmemory_postings_stale(session_id text, seq bigint, tf jsonb,
                            PRIMARY KEY (session_id, seq)), and statement
    triggers on kvmemory_items keeping them, folded in bulk: v9 (see ``postings``)
    GIN index (doc jsonb_path_ops), index (session_id) WHERE doc IS NULL: v11
    kvmemory_leaves(session_id text, seq bigint, path text, num float8,
                    txt text COLLATE "C"), indexes (session_id, path, num) and
    (session_id, path, txt), and statement triggers on kvmemory_items keeping
    each row's numbers and strings by path: v13 (see ``leaves``)
    kvmemory_sessions.vectors_nonce bigint and kvmemory_vector_changes.nonce
    bigint, a random number the same triggers give beside each new number: v14

``vector`` holds an item's unit vector as little-endian float32 (empty for
an item without text), embedded over the fields ``fields`` names by the
model ``kvmemory_embedders`` records. Where the database has the pgvector
extension, ``kvmemory_vectors`` also has a column ``embedding`` of its type
``vector`` holding the same floats (added and filled from ``vector`` when a
writable store first opens with pgvector there; not a schema version, since
it depends on the server), and semantic search ranks in the server with
pgvector's inner product, exactly, over every row. Without it, semantic
search reads the vectors a page at a time and computes exact cosines with
numpy. Either way ``vector`` stays the record, so the tables read the same
with and without the extension.

``data`` holds the codec's bytes for the item (exact, with its field order);
``doc`` the same item as JSONB for queries in SQL (``NULL`` for the rare item
whose text holds a NUL character, which JSONB cannot store, and for an item
of more than 4 kB holding a float JSONB would change, such as ``1e16`` or
``-0.0``);
``key`` the key a record is filed under (``NULL`` for an item appended as an
item), so a record is found by the ``(session_id, key)`` index;
``metadata`` the codec's bytes for the session's metadata. A deleted session
keeps its row, marked ``deleted``, so that its ``next_seq`` survives: a
session created again under the same id continues above the old seqs.

Order for concurrent writers: a plain append is one statement that creates
or updates the session's row (holding its lock until commit), bumping its
``next_seq``, and inserts the rows with the seqs it reserved; every other
write is one transaction that first locks the session's row
(``SELECT ... FOR UPDATE``). Writers of one session queue on that lock. Seqs therefore follow commit
order, and a reader that has seen seq ``n`` never misses a row committed
later with a smaller seq.

A read-only store (``read_only=True``) runs every statement in a read-only
transaction and never creates or migrates tables.

The backend is composed of parts with one job each: the connections, the
tables and their migrations (``pool``, ``schema``), the
keyword index (``keyword``) and pgvector (``vectors``);
this module holds the row statements and the backend's operations over them.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Hashable, Iterator, Sequence
from typing import Any, Final

from agents.memory._filter import FilterNode
from agents.memory.exceptions import (
    CorruptStoreError,
    StoreConnectionLostError,
    StoreError,
    StoreUnreachableError,
)
from agents.memory.stores._core.backend import Backend
from agents.memory.stores._core.checks import redact_url
from agents.memory.stores._core.encoding import Row, RowUpdate, SessionRow
from agents.memory.stores._core.terms import Terms
from agents.memory.stores._postgres.coded_folder import (
    CodedFolder,
    cache_bytes,
    vector_cache_folder,
)
from agents.memory.stores._postgres.filter_asks import IndexedFilterAsks
from agents.memory.stores._postgres.keyword import (
    Judge,
    PostgresKeywordIndex,
    build_keyword_index,
)
from agents.memory.stores._postgres.pool import CommitUnconfirmed, PostgresConnections, check_pool
from agents.memory.stores._postgres.postings import (
    PostingBlocks,
    build_postings,
    drop_posting_triggers,
)
from agents.memory.stores._postgres.schema import (
    CUT_ROWS_OVER,
    SCHEMA_VERSION,
    jsonb_copy,
    lock_schema,
)
from agents.memory.stores._postgres.vectors import PostgresVectors
from agents.memory.stores._postgres.version import SessionVersions
from agents.memory.stores._sql.dialect import POSTGRES, SQLRows
from agents.memory.stores._store import Store

__all__ = ["PostgresBackend", "PostgresStore"]

_INSERT: Final = """
WITH s AS (
    UPDATE kvmemory_sessions SET next_seq = next_seq + %(n)s
    WHERE session_id = %(sid)s
    RETURNING next_seq
)
INSERT INTO kvmemory_items (session_id, seq, step, created, data, doc, terms, n_terms, tf)
SELECT %(sid)s, s.next_seq - %(n)s + r.ord, r.step, r.created, r.data, r.doc::jsonb,
    r.terms::tsvector, r.n_terms, r.tf::jsonb
FROM s, unnest(%(steps)s::text[], %(created)s::float8[], %(datas)s::bytea[], %(docs)s::text[],
    %(terms)s::text[], %(n_terms)s::int[], %(tfs)s::text[])
    WITH ORDINALITY AS r(step, created, data, doc, terms, n_terms, tf, ord)
RETURNING seq
"""

# The same, each row filed under its record key.
_INSERT_KEYED: Final = """
WITH s AS (
    UPDATE kvmemory_sessions SET next_seq = next_seq + %(n)s
    WHERE session_id = %(sid)s
    RETURNING next_seq
)
INSERT INTO kvmemory_items (session_id, seq, step, created, data, doc, terms, n_terms, tf, key)
SELECT %(sid)s, s.next_seq - %(n)s + r.ord, r.step, r.created, r.data, r.doc::jsonb,
    r.terms::tsvector, r.n_terms, r.tf::jsonb, r.key
FROM s, unnest(%(steps)s::text[], %(created)s::float8[], %(datas)s::bytea[], %(docs)s::text[],
    %(terms)s::text[], %(n_terms)s::int[], %(tfs)s::text[], %(keys)s::text[])
    WITH ORDINALITY AS r(step, created, data, doc, terms, n_terms, tf, key, ord)
RETURNING seq
"""

# An append to a live session with the same step key, or to a new session, in
# one statement (so one round trip in autocommit mode): the upsert takes the
# session row's lock until commit and reserves the seqs. Anything else (another
# step key, a deleted session's row) inserts nothing, and the store then runs
# the general transaction, which raises or recreates.
_APPEND: Final = """
WITH s AS (
    INSERT INTO kvmemory_sessions AS s (session_id, step_key, next_seq, created)
    VALUES (%(sid)s, %(key)s, %(n)s, %(now)s)
    ON CONFLICT (session_id) DO UPDATE SET next_seq = s.next_seq + %(n)s
    WHERE s.step_key = %(key)s AND NOT s.deleted
    RETURNING s.next_seq
)
INSERT INTO kvmemory_items (session_id, seq, step, created, data, doc, terms, n_terms, tf)
SELECT %(sid)s, s.next_seq - %(n)s + r.ord, r.step, r.created, r.data, r.doc::jsonb,
    r.terms::tsvector, r.n_terms, r.tf::jsonb
FROM s, unnest(%(steps)s::text[], %(created)s::float8[], %(datas)s::bytea[], %(docs)s::text[],
    %(terms)s::text[], %(n_terms)s::int[], %(tfs)s::text[])
    WITH ORDINALITY AS r(step, created, data, doc, terms, n_terms, tf, ord)
RETURNING seq
"""

_UPDATE: Final = """
UPDATE kvmemory_items AS i SET step = u.step, data = u.data, doc = u.doc::jsonb,
    terms = u.terms::tsvector, n_terms = u.n_terms, tf = u.tf::jsonb
FROM unnest(%(seqs)s::bigint[], %(steps)s::text[], %(datas)s::bytea[], %(docs)s::text[],
    %(terms)s::text[], %(n_terms)s::int[], %(tfs)s::text[])
    AS u(seq, step, data, doc, terms, n_terms, tf)
WHERE i.session_id = %(sid)s AND i.seq = u.seq
RETURNING i.seq
"""

_LOCK_SESSION: Final = (
    "SELECT step_key, created, metadata, deleted FROM kvmemory_sessions"
    " WHERE session_id = %s FOR UPDATE"
)

# Rows larger than a few kB (a screenshot, a long page) are cut down to the
# asked keys on the server from the JSONB copy, so the rest is never sent;
# smaller rows come back whole, which benchmarks/bench_stores.py measured to
# be faster than cutting them. JSONB keeps numbers as decimals, which prints
# a float such as 1e16 as an integer and loses the sign of -0.0; a large row
# holding such a float gets no JSONB copy (see jsonb_copy) and so comes back whole,
# like the rows whose text holds a NUL character.
_PICK: Final = (
    "COALESCE((SELECT jsonb_object_agg(key, value) FROM jsonb_each({source})"
    " WHERE key = ANY(%(keys)s)), '{{}}'::jsonb)"
)
_PROJECT: Final = (
    f"SELECT seq, CASE WHEN doc IS NULL OR octet_length(data) <= {CUT_ROWS_OVER} THEN data"
    " WHEN doc ? '$kv' THEN convert_to(jsonb_build_object('$kv', 'item', 'fields', "
    + _PICK.format(source="doc->'fields'")
    + ")::text, 'UTF8')"
    " ELSE convert_to(" + _PICK.format(source="doc") + "::text, 'UTF8') END"
    " FROM kvmemory_items WHERE session_id = %(session)s"
)
_SELECT_ROWS: Final = "SELECT seq, data FROM kvmemory_items WHERE session_id = %(session)s"


def rows_query(
    select: str,
    session_id: str,
    *,
    steps: Sequence[str] | None = None,
    after: int | None = None,
    last: int | None = None,
) -> tuple[str, dict[str, Any]]:
    """Return the SQL and parameters that read a session's rows, in seq order (the ``last`` n, newest first).

    A step filter is answered by the ``(session_id, step)`` index: ordering
    by ``seq + 0`` keeps the planner from walking the session's ``(session_id,
    seq)`` key backwards to skip a sort, which reads the whole session when
    the wanted steps are old ones.
    """
    sql = select
    params: dict[str, Any] = {"session": session_id}
    if after is not None:
        sql += " AND seq > %(after)s"
        params["after"] = after
    if steps is not None:
        sql += " AND step = ANY(%(steps)s)"
        params["steps"] = list(steps)
    order = "seq" if steps is None else "seq + 0"
    if last is None:
        return f"{sql} ORDER BY {order}", params
    params["last"] = last
    return f"{sql} ORDER BY {order} DESC LIMIT %(last)s", params


class PostgresBackend(SQLRows, SessionVersions, CodedFolder, IndexedFilterAsks, Backend):
    """The rows of a PostgreSQL store, through a connection pool (see :class:`PostgresStore` for the arguments).

    Opening connects, then (unless ``read_only``) creates or migrates the tables;
    :class:`PostgresStore` is the store over this backend. The backend answers the row
    operations itself and hands the rest to its parts: the connections and tables
    (:class:`PostgresConnections`), the keyword index (:class:`PostgresKeywordIndex`) and
    the vector rows with pgvector (:class:`PostgresVectors`).
    """

    dialect = POSTGRES
    keeps_vectors = True

    def __init__(
        self,
        conninfo: str,
        *,
        min_size: int = 1,
        max_size: int = 4,
        timeout: float = 30.0,
        read_only: bool = False,
        pgvector: bool = True,
    ) -> None:
        check_pool(min_size, max_size, timeout)
        self.url = redact_url(conninfo)
        self.read_only = read_only
        # Rows looked up by key need no plan forced (a transaction of its own: 3 more round trips).
        self._keyword = PostgresKeywordIndex(
            self.query_indexed, url=self.url, lookup_rows=self.query_rows
        )
        self._connections = PostgresConnections(
            conninfo,
            url=self.url,
            min_size=min_size,
            max_size=max_size,
            timeout=timeout,
            read_only=read_only,
            pgvector=pgvector,
        )
        self._connections.open(store_error=self.store_error)
        self.driver_errors = self._connections.driver_errors
        tables = self._connections.tables
        self._no_tables = tables.no_tables
        self._indexed = tables.keyword_index
        self._keyed = tables.record_keys
        self.doc_index, self.leaf_index = tables.doc_index, tables.leaves  # False: older, read-only
        if tables.postings:
            blocks = PostingBlocks(self._connections, self.query_rows, packed=tables.packed_blocks)
            self._keyword.rank_from(blocks)
        self._vectors = PostgresVectors(
            self.query_rows,
            schema=self._connections.vector_schema,
            ranks=pgvector,
            numbered=tables.vectors_version,
            logged=tables.change_log,
            nonced=tables.vectors_nonce,
        )

    @property
    def pool(self) -> Any:
        """The ``psycopg_pool.ConnectionPool`` every call takes a connection from, to inspect the server's settings (never leave a transaction open on it)."""
        return self._connections.pool

    @property
    def uses_pgvector(self) -> bool:
        """Whether semantic queries are ranked in the server by pgvector."""
        return self._vectors.ranks

    def store_error(self, action: str, where: str, exc: BaseException) -> StoreError:
        """Return the store's error for a driver error: a lost connection, a pool timeout, damage, or else :class:`StoreError`."""
        text = str(exc)
        if self._connections.lost(exc):
            return self._lost(action, where, exc)
        if isinstance(exc, self._connections.pool_timeout):
            msg = (
                f"Cannot {action}{where} PostgreSQL store {self.url}: no connection within "
                f"{self._connections.timeout:g} s ({text}); the server does not answer, or all "
                f"{self._connections.max_size} of the pool's connections are in use (raise "
                "?pool_max= or ?pool_timeout= in the URL). Nothing was changed; calling again is safe."
            )
            return StoreUnreachableError(msg)
        # Damage is a statement refused for a missing or altered part of the index
        # (SQLSTATE class 42: undefined column, function, table; a type mismatch).
        state = getattr(exc, "sqlstate", None) or ""
        if state.startswith("42") and self._keyword.names_damage(text):
            return self._keyword.damaged(action, where, text)
        if "different vector dimensions" in text:  # pgvector's words for a copy of another size
            msg = (
                f"Cannot {action}{where} PostgreSQL store {self.url}: a stored vector's pgvector "
                f"copy has another dimension than the query ({text.strip()}); the store is damaged "
                "and nothing was changed. Drop the session's vectors with "
                "store.drop_vectors(session_id) and index them again."
            )
            return CorruptStoreError(msg)
        msg = f"Cannot {action}{where} PostgreSQL store {self.url}: {exc}; nothing was changed."
        return StoreError(msg)

    def _lost(self, action: str, where: str, exc: BaseException) -> StoreConnectionLostError:
        """Return the error for a call whose connection was lost (retryable unless a commit was under way)."""
        lines = str(exc).strip().splitlines()
        reason = lines[0].strip() if lines else type(exc).__name__
        if isinstance(exc, CommitUnconfirmed):
            msg = (
                f"Cannot {action}{where} PostgreSQL store {self.url}: the connection to the server "
                f"was lost before it confirmed the write ({reason}). The server applied the write "
                "wholly or not at all; read the session to see which before writing it again. "
                "The store is not damaged, and the next call takes a new connection."
            )
            return StoreConnectionLostError(msg, retryable=False)
        msg = (
            f"Cannot {action}{where} PostgreSQL store {self.url}: the connection to the server "
            f"was lost ({reason}); nothing was changed, and calling again is safe (it takes a "
            "new connection). The store is not damaged."
        )
        return StoreConnectionLostError(msg, retryable=True)

    # -- reading ---------------------------------------------------------------------

    @property
    def no_tables(self) -> bool:
        """Whether the database held no kvmemory tables when this handle opened (read as empty)."""
        return self._no_tables

    def query_rows(self, sql: str, params: Any = (), *, indexed: bool = False) -> list[Any]:
        """Run one read statement on a pooled connection and return its rows.

        Args:
            sql: The statement.
            params: Its parameters.
            indexed: Run it with sequential scans off (``SET LOCAL
                enable_seqscan = off``, in a transaction of its own).
        """
        return self._connections.query_rows(sql, params, indexed=indexed)

    def query_indexed(self, sql: str, params: Any) -> list[Any]:
        """Run one read statement with sequential scans off: the rows a GIN index names."""
        # A sequential scan (the planner's pick for a word most rows hold) reads each row's
        # out-of-line tsvector to test it: 1.4-1.7x the bitmap scan's time at 100,000 rows.
        return self.query_rows(sql, params, indexed=True)

    def read_session(self, session_id: str) -> SessionRow | None:
        if self.no_tables:
            return None
        rows = self.query_rows(
            "SELECT step_key, created, metadata FROM kvmemory_sessions"
            " WHERE session_id = %s AND NOT deleted",
            (session_id,),
        )
        return (rows[0][0], rows[0][1], bytes(rows[0][2])) if rows else None

    def read_rows(
        self, session_id: str, *, steps: Sequence[str] | None = None, after: int | None = None
    ) -> list[tuple[int, bytes]]:
        if self.no_tables:
            return []
        sql, params = rows_query(_SELECT_ROWS, session_id, steps=steps, after=after)
        rows = self.query_rows(sql, params)
        return [(int(seq), bytes(data)) for seq, data in rows]

    def read_last(
        self, session_id: str, n: int, *, steps: Sequence[str] | None = None
    ) -> list[tuple[int, bytes]]:
        if self.no_tables:
            return []
        sql, params = rows_query(_SELECT_ROWS, session_id, steps=steps, last=n)
        rows = self.query_rows(sql, params)
        return [(int(seq), bytes(data)) for seq, data in reversed(rows)]

    def read_pages(self, session_id: str, size: int) -> Iterator[list[tuple[int, bytes]]]:
        if self.no_tables:
            return
        # One short query per page: no connection is held between pages.
        first = "SELECT seq, data FROM kvmemory_items WHERE session_id = %s ORDER BY seq LIMIT %s"
        rows = self.query_rows(first, (session_id, size))
        later = (
            "SELECT seq, data FROM kvmemory_items WHERE session_id = %s AND seq > %s"
            " ORDER BY seq LIMIT %s"
        )
        while rows:
            page = [(int(seq), bytes(data)) for seq, data in rows]
            yield page
            rows = self.query_rows(later, (session_id, page[-1][0], size))

    def read_keys(
        self, session_id: str, keys: Sequence[str], *, steps: Sequence[str] | None = None
    ) -> list[tuple[int, bytes]]:
        if self.no_tables:
            return []
        sql, params = rows_query(_PROJECT, session_id, steps=steps)
        rows = self.query_rows(sql, {**params, "keys": list(keys)})
        return [(int(seq), bytes(data)) for seq, data in rows]

    def count(self, session_id: str) -> int:
        if self.no_tables:
            return 0
        counted = self._keyword.counted(session_id)
        if counted is not None:  # the search under way ranked the session: its count, no statement
            return counted
        if self._indexed:
            # The session's row keeps its item count (the keyword index's statistics,
            # kept by the same statements as the rows): no scan of the items.
            rows = self.query_rows(
                "SELECT n_items FROM kvmemory_sessions WHERE session_id = %s", (session_id,)
            )
            return int(rows[0][0]) if rows else 0
        rows = self.query_rows(
            "SELECT count(*) FROM kvmemory_items WHERE session_id = %s", (session_id,)
        )
        return int(rows[0][0])

    def sessions(self) -> list[str]:
        if self.no_tables:
            return []
        rows = self.query_rows(
            "SELECT session_id FROM kvmemory_sessions WHERE NOT deleted"
            ' ORDER BY session_id COLLATE "C"'
        )
        return [str(r[0]) for r in rows]

    # -- writing ---------------------------------------------------------------------

    def transaction(self, session_id: str) -> contextlib.AbstractContextManager[Any]:
        self._keyword.forget()  # a search writing (its vectors) counts its items afresh after
        return self._connections.transaction()

    def append_rows(
        self, session_id: str, step_key: str, rows: Sequence[Row], terms: Sequence[Terms] | None
    ) -> list[int] | None:
        params = {
            "sid": session_id,
            "key": step_key,
            "n": len(rows),
            "now": time.time(),
            "steps": [row[0] for row in rows],
            "created": [row[1] for row in rows],
            "datas": [row[2] for row in rows],
            "docs": [jsonb_copy(row[2]) for row in rows],
            **self._keyword.columns(session_id, rows, terms),
        }
        self._keyword.forget()
        # One statement committed on its own: lost before the server's answer, it may have committed.
        seqs = sorted(int(r[0]) for r in self._connections.write_one(_APPEND, params))
        return seqs or None

    def lock_session(self, tx: Any, session_id: str) -> SessionRow | None:
        row = tx.execute(_LOCK_SESSION, (session_id,)).fetchone()
        if row is None:
            # No row to lock yet: insert a deleted placeholder, which locks it. A writer
            # that created the session meanwhile makes the insert do nothing; then its
            # committed row is locked and read by a fresh statement.
            placed = tx.execute(
                "INSERT INTO kvmemory_sessions (session_id, step_key, created, deleted)"
                " VALUES (%s, '', 0, true) ON CONFLICT (session_id) DO NOTHING RETURNING 1",
                (session_id,),
            ).fetchone()
            if placed is not None:
                return None
            row = tx.execute(_LOCK_SESSION, (session_id,)).fetchone()
        step_key, created, metadata, deleted = row
        return None if deleted else (step_key, created, bytes(metadata))

    def create_session(self, tx: Any, session_id: str, step_key: str, created: float) -> None:
        # The row exists (locked by lock_session), possibly holding a deleted session's next_seq.
        tx.execute(
            "UPDATE kvmemory_sessions SET step_key = %s, created = %s,"
            " metadata = '\\x7b7d'::bytea, deleted = false WHERE session_id = %s",
            (step_key, created, session_id),
        )

    def set_metadata(self, tx: Any, session_id: str, metadata: bytes) -> None:
        tx.execute(
            "UPDATE kvmemory_sessions SET metadata = %s WHERE session_id = %s",
            (metadata, session_id),
        )

    def insert_rows(
        self, tx: Any, session_id: str, rows: Sequence[Row], terms: Sequence[Terms] | None
    ) -> list[int]:
        params = self._insert_params(session_id, rows, terms)
        return sorted(int(r[0]) for r in tx.execute(_INSERT, params).fetchall())

    def insert_keyed(
        self,
        tx: Any,
        session_id: str,
        rows: Sequence[Row],
        keys: Sequence[str],
        terms: Sequence[Terms],
    ) -> list[int]:
        params = {**self._insert_params(session_id, rows, terms), "keys": list(keys)}
        return sorted(int(r[0]) for r in tx.execute(_INSERT_KEYED, params).fetchall())

    @property
    def keyed_rows(self) -> bool:
        """Whether the rows have the record key column (``False`` for older tables opened read-only: no records)."""
        return self._keyed

    def _insert_params(
        self, session_id: str, rows: Sequence[Row], terms: Sequence[Terms] | None
    ) -> dict[str, Any]:
        return {
            "sid": session_id,
            "n": len(rows),
            "steps": [row[0] for row in rows],
            "created": [row[1] for row in rows],
            "datas": [row[2] for row in rows],
            "docs": [jsonb_copy(row[2]) for row in rows],
            **self._keyword.columns(session_id, rows, terms),
        }

    def update_rows(
        self, tx: Any, session_id: str, rows: Sequence[RowUpdate], terms: Sequence[Terms] | None
    ) -> list[int]:
        params = {
            "sid": session_id,
            "seqs": [row[0] for row in rows],
            "steps": [row[1] for row in rows],
            "datas": [row[2] for row in rows],
            "docs": [jsonb_copy(row[2]) for row in rows],
            **self._keyword.columns(session_id, [(None, 0.0, data) for _, _, data in rows], terms),
        }
        return sorted(int(r[0]) for r in tx.execute(_UPDATE, params).fetchall())

    def delete_session(self, session_id: str) -> bool:
        with self.transaction(session_id) as tx:
            row = tx.execute(_LOCK_SESSION, (session_id,)).fetchone()
            if row is None or row[3]:
                return False
            self.drop_vectors(tx, session_id)
            tx.execute("DELETE FROM kvmemory_items WHERE session_id = %s", (session_id,))
            # The row stays, marked deleted, so that its next_seq is never given again.
            tx.execute(
                "UPDATE kvmemory_sessions SET deleted = true, metadata = '\\x7b7d'::bytea"
                " WHERE session_id = %s",
                (session_id,),
            )
        return True

    # -- vectors ---------------------------------------------------------------------

    def query_vectors(self, sql: str, params: Any) -> list[Any]:
        """Run one statement that reads vectors and return its rows."""
        return self._connections.query_vectors(sql, params)

    def put_vectors(
        self, tx: Any, session_id: str, fields: str, rows: Sequence[tuple[int, bytes, bytes]]
    ) -> int:
        return self._vectors.put(tx, session_id, fields, rows)

    def vectors_version(self, session_id: str, fields: str) -> Hashable | None:
        """Return the number and random nonce a trigger gives the session's row at every write to its vector rows, by any handle or process (see the base).

        One lookup by key. Opened read-only on older tables: the number alone
        (v13), or the vector rows' count and digest of their seq and ``xmin`` (v5).
        """
        if self.no_tables:
            return None
        return self._vectors.version(session_id, fields)

    def vector_changes(
        self, session_id: str, fields: str, since: Hashable, now: Hashable
    ) -> set[int] | None:
        """Return the seqs the trigger logged for the session's vector writes between two versions, by any handle or process; ``None`` where it was pruned in between (see the base).

        ``None`` on v6 tables or older opened read-only (no log), or where ``since``'s nonce is lost.
        """
        if self.no_tables:
            return None
        return self._vectors.changes(session_id, since, now)

    def nearest(
        self, session_id: str, fields: str, query: bytes, limit: int, among: Sequence[int]
    ) -> list[tuple[int, float | None, int]] | None:
        """Rank by pgvector's inner product in the server where the database has it (see the base).

        ``None`` (numpy over the vectors read) without pgvector, and while
        some stored vector has no pgvector copy (written by a handle opened
        before the column existed), so that every row is scored one way.
        A damaged row, if any, comes first.
        """
        if self.no_tables:
            return None
        return self._vectors.nearest(session_id, fields, query, limit, among)

    def ranks_vectors(self, session_id: str, fields: str) -> bool:
        """Return whether pgvector ranks the session's vector rows over ``fields`` now: the database has it and every stored vector has its copy (see the base)."""
        if self.no_tables:
            return False
        return self._vectors.ranks_rows(session_id, fields)

    def close(self) -> None:
        self._connections.close()

    # -- keyword search --------------------------------------------------------------

    def search_scope(self, session_id: str) -> contextlib.AbstractContextManager[None]:
        """Keep, for one search, the statistics its keyword ranking read (item count, each word's document frequency): the search's later calls answer from them (see the base).

        A hybrid query then counts the matched rows once, in its ranking,
        where it counted them three times (the ranking, the words'
        frequencies for the proximity evidence, the scores of chosen rows).
        """
        return self._keyword.scope()

    @property
    def keyword_index(self) -> bool:
        """Whether keyword searches are answered by the ``tsvector`` index (``False`` for older tables opened read-only)."""
        return self._indexed

    def keyword_top(
        self, session_id: str, terms: Sequence[str], k: int
    ) -> list[tuple[float, int]] | None:
        """Score the session by BM25 in one statement over the ``tsvector`` index (``None``: older tables read-only)."""
        if not self._indexed:
            return None
        if self.no_tables:
            return []
        return self._keyword.top(session_id, terms, k)

    def keyword_among(
        self, session_id: str, terms: Sequence[str], seqs: Sequence[int]
    ) -> list[tuple[float, int]] | None:
        """Score some rows of the session by BM25 with the session's statistics, in one statement (``None``: older tables read-only)."""
        if not self._indexed:
            return None
        if self.no_tables:
            return []
        return self._keyword.among(session_id, terms, seqs)

    def keyword_held(
        self, session_id: str, terms: Sequence[str], seqs: Sequence[int]
    ) -> dict[int, set[str]] | None:
        """Tell which query terms each of some rows holds, in one statement, from the rows' counts (``None``: older tables read-only)."""
        if not self._indexed:
            return None
        if self.no_tables:
            return {}
        return self._keyword.held(session_id, terms, seqs)

    def keyword_frequencies(self, session_id: str, terms: Sequence[str]) -> dict[str, int] | None:
        """Count each term's items in the session in one statement (``None``: older tables read-only)."""
        if not self._indexed:
            return None
        if self.no_tables:
            return {}
        return self._keyword.frequencies(session_id, terms)

    def keyword_top_where(
        self, session_id: str, terms: Sequence[str], k: int, tree: FilterNode
    ) -> list[tuple[float, int]] | None:
        """Score the session by BM25 and rank the rows that may pass a filter, in one statement (``None``: SQL cannot judge it, or older tables read-only)."""
        if not self._indexed or self.no_tables:
            return [] if self._indexed else None
        judge = Judge(
            lambda seqs: self.filter_among(session_id, tree, seqs),
            lambda: self.filter_candidates(session_id, tree),
            self.filter_named(tree),
        )
        return self._keyword.top_where(session_id, terms, k, tree, judge)

    def keyword_top_sessions(
        self, session_ids: Sequence[str], terms: Sequence[str], k: int
    ) -> list[tuple[float, str, int]] | None:
        """Score several sessions as one corpus by BM25 in one statement over the ``tsvector`` index."""
        if not self._indexed:
            return None
        if self.no_tables:
            return []
        return self._keyword.top_sessions(session_ids, terms, k)

    def read_sessions(self, session_ids: Sequence[str]) -> dict[str, SessionRow]:
        """Read the rows of many sessions in one query."""
        if self.no_tables or not session_ids:
            return {}
        rows = self.query_rows(
            "SELECT session_id, step_key, created, metadata FROM kvmemory_sessions"
            " WHERE session_id = ANY(%s) AND NOT deleted",
            (list(session_ids),),
        )
        return {str(row[0]): (row[1], row[2], bytes(row[3])) for row in rows}

    def rebuild_keyword_index(self) -> None:
        """Rebuild the keyword index (terms, counts, GIN index, posting blocks, triggers) from the stored items, in one transaction.

        The index follows every write on its own; this is the repair for an
        index that was damaged or dropped outside kvmemory, which searches
        and writes report with :class:`CorruptStoreError`. It reads and
        tokenizes every item of every session.

        Raises:
            StoreError: if the store is read-only or cannot be written; nothing is changed.
        """
        try:
            with self._connections.transaction() as con:
                lock_schema(con)
                drop_posting_triggers(con)  # the rows' counts are all written again first
                build_keyword_index(con)
                build_postings(con)
        except self.driver_errors as exc:
            raise self.store_error("rebuild the keyword index of", "", exc) from exc


class PostgresStore(Store):
    """Sessions in a PostgreSQL database, through a connection pool: a :class:`Store` over :class:`PostgresBackend`.

    Args:
        conninfo: A libpq URL or connection string (``postgresql://user@host/db``).
        min_size: Connections the pool keeps open.
        max_size: Connections the pool opens at most (one per concurrent call).
        timeout: Seconds to wait for the server, and for a connection from the pool.
        read_only: Run every statement read-only; never create or migrate tables.
        pgvector: Rank semantic queries in the server with the pgvector
            extension where the database has it (a writable store creates
            the extension when the server offers it and the login may).
            ``False`` ranks them in Python; the stored vectors are the same.
        vector_cache: The local folder where the handle saves the coded
            part vectors of a session too large to keep as float32 (as it
            builds them, and as a writer closes), so that a fresh handle's
            first semantic or hybrid query on this machine loads them
            instead of reading every vector from the server (checked
            against the session; see docs/stores.md). ``"auto"``
            (default): ``postgres`` in this user's cache folder
            (``$KVMEMORY_CACHE_DIR``, else ``$XDG_CACHE_HOME/kvmemory`` or
            ``~/.cache/kvmemory``; ``%LOCALAPPDATA%\\kvmemory\\cache`` on
            Windows, ``~/Library/Caches/kvmemory`` on macOS), made
            owner-only; ``None`` or ``"off"``: none is kept; any other
            text: that folder. A folder that cannot be made or written
            leaves the handle without one (queries read the server, as
            with none) and is told once per folder and process with a
            :class:`VectorCacheWarning` naming it and the fix.
        vector_cache_max_bytes: The bytes the folder's files are kept
            within (those used least recently removed first after each
            save; 0 keeps none). ``None`` (default):
            ``$KVMEMORY_CACHE_MAX_BYTES``, else 4 GiB.

    A connection the server drops (``pg_terminate_backend``, a restart) is
    no damage: the call it served raises :class:`StoreConnectionLostError`
    (``retryable`` unless the server may have been committing the write),
    and a dropped connection waiting in the pool is replaced before a call
    uses it. A call that gets no connection within ``timeout`` raises
    :class:`StoreUnreachableError`.

    Raises:
        StoreArgumentError: if ``min_size`` is not an integer >= 0, ``max_size``
            not one >= 1 and >= ``min_size``, ``timeout`` not finite and > 0,
            ``vector_cache`` not ``None`` nor a non-empty string,
            ``vector_cache_max_bytes`` not ``None`` nor an integer >= 0, or
            ``$KVMEMORY_CACHE_MAX_BYTES`` set but not a whole number.
        MissingDependencyError: if psycopg or psycopg_pool is not installed.
        StoreUnreachableError: if the server cannot be reached (its host name
            does not resolve, nothing listens, the login is refused); raised at once.
        SchemaVersionError: if a newer kvmemory created the tables, or
            ``read_only`` meets older tables that need a migration.
        StoreError: if the tables cannot be created.
    """

    schema_version = SCHEMA_VERSION

    def __init__(
        self,
        conninfo: str,
        *,
        min_size: int = 1,
        max_size: int = 4,
        timeout: float = 30.0,
        read_only: bool = False,
        pgvector: bool = True,
        vector_cache: str | None = "auto",
        vector_cache_max_bytes: int | None = None,
    ) -> None:
        folder = vector_cache_folder(vector_cache)  # checked before connecting
        most = cache_bytes(vector_cache_max_bytes)
        backend = PostgresBackend(
            conninfo,
            min_size=min_size,
            max_size=max_size,
            timeout=timeout,
            read_only=read_only,
            pgvector=pgvector,
        )
        backend.vector_cache, backend.vector_cache_bytes = folder, most
        super().__init__(backend, read_only=read_only)
        self.backend: PostgresBackend = backend

    @property
    def uses_pgvector(self) -> bool:
        """Whether semantic queries are ranked in the server by pgvector."""
        return self.backend.uses_pgvector

    @property
    def vector_cache(self) -> str | None:
        """The local folder of the coded part vectors this handle saves and loads (absolute; ``"auto"`` resolved), or ``None`` (see the ``vector_cache`` argument)."""
        return self.backend.vector_cache

    def rebuild_keyword_index(self) -> None:
        """Rebuild the keyword index (terms, counts, GIN index, posting blocks, triggers) from the stored items, in one transaction.

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
