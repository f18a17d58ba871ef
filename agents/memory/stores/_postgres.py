"""The PostgreSQL store: sessions shared by processes on many machines.

Needs the ``postgres`` extra (psycopg 3 and psycopg_pool), imported only
when a ``postgresql://`` URL is opened. Layout (schema version 4, recorded in
``kvmemory_schema``)::

    kvmemory_sessions(session_id text PRIMARY KEY, step_key text, next_seq bigint,
                      created float8, metadata bytea, deleted boolean,   -- metadata, deleted: v2
                      n_items bigint, n_terms bigint)                    -- n_items, n_terms: v4
    kvmemory_items(session_id text, seq bigint, step text, created float8,
                   data bytea, doc jsonb, PRIMARY KEY (session_id, seq),
                   terms tsvector, n_terms integer, tf jsonb)        -- terms, n_terms, tf: v4
    index (session_id, step), index (session_id, created), GIN index (terms): v4
    kvmemory_embedders(session_id text PRIMARY KEY, model text, dimension integer)  -- v3
    kvmemory_vectors(session_id text, seq bigint, fields text, vector bytea,
                     PRIMARY KEY (session_id, seq, fields))                      -- v3

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
"""

from __future__ import annotations

import array
import contextlib
import contextvars
import hashlib
import heapq
import math
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final, NamedTuple

import orjson

from agents.memory._text import BM25_B, BM25_K1, bm25_average_length
from agents.memory.exceptions import (
    CorruptSessionError,
    CorruptStoreError,
    SchemaVersionError,
    StoreError,
    StoreUnreachableError,
    missing_dependency,
)
from agents.memory.stores._backend import Backend
from agents.memory.stores._checks import redact_url
from agents.memory.stores._encoding import Row, RowUpdate, SessionRow, decode_pairs
from agents.memory.stores._keyword import Terms, bm25_score, item_terms, query_weights
from agents.memory.stores._migrations import check_schema_version, migrate
from agents.memory.stores._sql import POSTGRES, SQLRows
from agents.memory.stores._store import Store

__all__ = ["PostgresBackend", "PostgresStore"]

_SCHEMA_LOCK: Final = 0x6B766D656D  # "kvmem": serializes schema setup across processes


def _create_v1(con: Any) -> None:
    con.execute(
        """CREATE TABLE IF NOT EXISTS kvmemory_sessions (
        session_id text PRIMARY KEY,
        step_key text NOT NULL,
        next_seq bigint NOT NULL DEFAULT 0,
        created double precision NOT NULL
    )"""
    )
    con.execute(
        """CREATE TABLE IF NOT EXISTS kvmemory_items (
        session_id text NOT NULL REFERENCES kvmemory_sessions ON DELETE CASCADE,
        seq bigint NOT NULL,
        step text,
        created double precision NOT NULL,
        data bytea NOT NULL,
        doc jsonb,
        PRIMARY KEY (session_id, seq)
    )"""
    )
    con.execute(
        "CREATE INDEX IF NOT EXISTS kvmemory_items_step ON kvmemory_items (session_id, step)"
    )
    con.execute(
        "CREATE INDEX IF NOT EXISTS kvmemory_items_created ON kvmemory_items (session_id, created)"
    )


def _add_metadata_and_tombstones(con: Any) -> None:
    # '\x7b7d' is the codec's bytes for an empty dict: sessions of v1 had no metadata.
    con.execute(
        "ALTER TABLE kvmemory_sessions ADD COLUMN metadata bytea NOT NULL DEFAULT '\\x7b7d'::bytea"
    )
    con.execute("ALTER TABLE kvmemory_sessions ADD COLUMN deleted boolean NOT NULL DEFAULT false")
    _drop_inexact_docs(con)


def _add_vectors(con: Any) -> None:
    con.execute(
        """CREATE TABLE IF NOT EXISTS kvmemory_embedders (
        session_id text PRIMARY KEY REFERENCES kvmemory_sessions ON DELETE CASCADE,
        model text NOT NULL,
        dimension integer NOT NULL
    )"""
    )
    con.execute(
        """CREATE TABLE IF NOT EXISTS kvmemory_vectors (
        session_id text NOT NULL,
        seq bigint NOT NULL,
        fields text NOT NULL,
        vector bytea NOT NULL,
        PRIMARY KEY (session_id, seq, fields),
        FOREIGN KEY (session_id, seq) REFERENCES kvmemory_items ON DELETE CASCADE
    )"""
    )


# -- the keyword index (schema version 4) ----------------------------------------------
#
# Each row keeps its search terms (the library tokenizer's) three ways: n_terms, their
# number; tf, a JSONB object of each distinct term's count; and terms, a tsvector of the
# distinct terms, each prefixed with the session id and "·" (never part of a term or
# a session id), built from the lexemes as they are (no text search parser, no
# folding), under a GIN index. The prefix makes a term's postings the session's own, so
# its document frequency is counted within the session. kvmemory_sessions keeps each
# session's item and term counts (BM25's statistics), kept by statement triggers on
# every insert, update and delete of rows, whatever the statement.

_MARK: Final = "·"
_LONGEST_LEXEME: Final = 2000  # bytes; PostgreSQL refuses lexemes of 2 kB and more

_COUNT_FUNCTIONS: Final = (
    """CREATE OR REPLACE FUNCTION kvmemory_count_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE kvmemory_sessions AS s SET n_items = s.n_items + d.n, n_terms = s.n_terms + d.t
        FROM (SELECT session_id, count(*) AS n, sum(n_terms) AS t FROM new_rows GROUP BY session_id) AS d
        WHERE s.session_id = d.session_id;
        RETURN NULL;
    END $$""",
    """CREATE OR REPLACE FUNCTION kvmemory_count_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE kvmemory_sessions AS s SET n_items = s.n_items - d.n, n_terms = s.n_terms - d.t
        FROM (SELECT session_id, count(*) AS n, sum(n_terms) AS t FROM old_rows GROUP BY session_id) AS d
        WHERE s.session_id = d.session_id;
        RETURN NULL;
    END $$""",
    """CREATE OR REPLACE FUNCTION kvmemory_count_updated() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE kvmemory_sessions AS s SET n_terms = s.n_terms + d.t
        FROM (
            SELECT session_id, sum(t) AS t FROM (
                SELECT session_id, n_terms AS t FROM new_rows
                UNION ALL SELECT session_id, -n_terms FROM old_rows
            ) AS both_rows GROUP BY session_id
        ) AS d
        WHERE s.session_id = d.session_id AND d.t <> 0;
        RETURN NULL;
    END $$""",
)

_COUNT_TRIGGERS: Final = (
    "CREATE TRIGGER kvmemory_items_count_insert AFTER INSERT ON kvmemory_items"
    " REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION kvmemory_count_inserted()",
    "CREATE TRIGGER kvmemory_items_count_delete AFTER DELETE ON kvmemory_items"
    " REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION kvmemory_count_deleted()",
    "CREATE TRIGGER kvmemory_items_count_update AFTER UPDATE ON kvmemory_items"
    " REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows"
    " FOR EACH STATEMENT EXECUTE FUNCTION kvmemory_count_updated()",
)


def _build_keyword_index(con: Any) -> None:
    """(Re)create the keyword index from the rows' data: terms, counts, GIN index, triggers."""
    for name in ("insert", "delete", "update"):
        con.execute(f"DROP TRIGGER IF EXISTS kvmemory_items_count_{name} ON kvmemory_items")
    con.execute(
        "ALTER TABLE kvmemory_items ADD COLUMN IF NOT EXISTS n_terms integer NOT NULL DEFAULT 0"
    )
    con.execute(
        "ALTER TABLE kvmemory_items ADD COLUMN IF NOT EXISTS tf jsonb NOT NULL DEFAULT '{}'"
    )
    con.execute(
        "ALTER TABLE kvmemory_items ADD COLUMN IF NOT EXISTS terms tsvector NOT NULL DEFAULT ''"
    )
    con.execute(
        "ALTER TABLE kvmemory_sessions ADD COLUMN IF NOT EXISTS n_items bigint NOT NULL DEFAULT 0"
    )
    con.execute(
        "ALTER TABLE kvmemory_sessions ADD COLUMN IF NOT EXISTS n_terms bigint NOT NULL DEFAULT 0"
    )
    con.execute("DROP INDEX IF EXISTS kvmemory_items_terms")
    rows: list[tuple[Any, ...]] = []
    with con.cursor(name="kvmemory_index_terms") as cur:
        cur.execute("SELECT session_id, seq, data FROM kvmemory_items")
        for session_id, seq, data in cur:
            text, n, tf = _index_columns(session_id, _terms_of_data(bytes(data)))
            rows.append((text, n, tf, session_id, seq))
    with con.cursor() as cur:
        cur.executemany(
            "UPDATE kvmemory_items SET terms = %s::tsvector, n_terms = %s, tf = %s::jsonb"
            " WHERE session_id = %s AND seq = %s",
            rows,
        )
    con.execute("UPDATE kvmemory_sessions SET n_items = 0, n_terms = 0")
    con.execute(
        "UPDATE kvmemory_sessions AS s SET n_items = c.n, n_terms = c.t FROM (SELECT session_id,"
        " count(*) AS n, sum(n_terms) AS t FROM kvmemory_items GROUP BY session_id) AS c"
        " WHERE c.session_id = s.session_id"
    )
    con.execute("CREATE INDEX kvmemory_items_terms ON kvmemory_items USING gin (terms)")
    for statement in (*_COUNT_FUNCTIONS, *_COUNT_TRIGGERS):
        con.execute(statement)


def _terms_of_data(data: bytes) -> Terms:
    """Return the search terms of a stored row; a row that cannot be decoded has none."""
    try:
        pairs = decode_pairs([(0, data)], "a row being indexed", "base")
    except (CorruptStoreError, CorruptSessionError):
        return "", 0  # searched as an item without text
    return item_terms(pairs[0][1])


def _lexeme(session_id: str, term: str) -> str:
    lexeme = f"{session_id}{_MARK}{term}"
    if len(lexeme.encode("utf-8")) <= _LONGEST_LEXEME:
        return lexeme
    # "#" is never part of a term: a long term is filed under its digest.
    return f"{session_id}{_MARK}#{hashlib.sha256(term.encode('utf-8')).hexdigest()}"


def _overflow(session_id: str) -> str:
    """Return the lexeme that marks a row whose distinct terms do not all fit in its tsvector."""
    # "#" is never part of a term, and "overflow" is no digest: no term is filed under it.
    return f"{session_id}{_MARK}#overflow"


def _index_columns(session_id: str, terms: Terms) -> tuple[str, int, str]:
    """Return a row's ``(tsvector literal, n_terms, tf JSON)`` for its search terms.

    A tsvector holds at most 1 MB, so the distinct terms go into it until
    :data:`_TSVECTOR_BUDGET` bytes; a row with more gets the overflow
    lexeme instead of the rest, which every query also matches: such a row
    is then scored from its ``tf`` counts, which hold every term.
    """
    text, n = terms
    if not n:
        return "", 0, "{}"
    counts = Counter(text.split(" "))
    lexemes = []
    size = 0
    for term in counts:
        lexeme = _lexeme(session_id, term)
        size += len(lexeme.encode("utf-8")) + _LEXEME_OVERHEAD
        if size > _TSVECTOR_BUDGET:
            lexemes.append(_overflow(session_id))
            break
        lexemes.append(lexeme)
    # Lexemes hold no quote or backslash: session ids and terms never do.
    vector = " ".join(f"'{lexeme}'" for lexeme in lexemes)
    return vector, n, orjson.dumps(counts).decode("utf-8")


_TSVECTOR_BUDGET: Final = 900_000
"""Bytes of lexemes a row's tsvector holds at most (PostgreSQL refuses one over 1 MB)."""
_LEXEME_OVERHEAD: Final = 8
"""Bytes a tsvector spends on each lexeme besides its text (its entry, with alignment)."""
_COLUMN_TERMS: Final = 256
"""The most distinct query terms scored with a column each; more are scored from arrays."""
_MARGIN: Final = 1.0 + 1e-9
"""How far SQL's sums may be from the exact ones, as a ratio (they differ by float rounding)."""
_SPARE: Final = 64
"""Rows past the ``k``-th a search reads, to catch the items that tie with it to rounding."""


def _exact_top(
    rows: Sequence[tuple[Any, ...]], terms: Sequence[str], names: Sequence[str], k: int
) -> list[tuple[float, int]]:
    """Return the ``k`` best ``(score, seq)`` of the rows SQL ranked, scored again as ``Memory.search`` sums them.

    SQL sums a row's shares by distinct term and computes the IDF with
    ``ln(1 + x)``, equal to the in-RAM floats to rounding only; the rows
    whose SQL score is within :data:`_MARGIN` squared of the ``k``-th are
    scored again from their counts (``tfs``, in the order of ``names``)
    with the session's statistics (``dfs`` likewise).
    """
    if not rows:
        return []
    if len(rows) > k:
        cut = rows[k - 1][1] / _MARGIN**2
        rows = [row for row in rows if row[1] >= cut]
    _, _, _, _, _, n_items, total, dfs = rows[0]
    df = {term: int(count) for term, count in zip(names, dfs, strict=True) if count}
    weighted = query_weights(terms, df, int(n_items))
    average = bm25_average_length(int(total), int(n_items))
    scored = []
    for seq, _, _, length, tfs, _, _, _ in rows:
        counts = {term: int(tf) for term, tf in zip(names, tfs, strict=True) if tf}
        scored.append((bm25_score(counts, int(length), weighted, average), int(seq)))
    return heapq.nsmallest(k, scored, key=lambda hit: (-hit[0], hit[1]))


def _add_keyword_index(con: Any) -> None:
    _build_keyword_index(con)


MIGRATIONS: Final = (
    _create_v1,
    _add_metadata_and_tombstones,
    _add_vectors,
    _add_keyword_index,
)
"""Step ``i`` brings the tables from schema version ``i`` to ``i + 1`` (see :func:`migrate`)."""

SCHEMA_VERSION: Final = len(MIGRATIONS)
_SEARCHED_BY_SCAN: Final = (
    3  # the layout before the keyword index: read-only opens search by scanning
)

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

# Only where the item still holds the data the vector was computed from.
_PUT_VECTORS: Final = """
INSERT INTO kvmemory_vectors (session_id, seq, fields, vector)
SELECT %(sid)s, u.seq, %(fields)s, u.vector
FROM unnest(%(seqs)s::bigint[], %(datas)s::bytea[], %(vectors)s::bytea[]) AS u(seq, data, vector)
JOIN kvmemory_items AS i ON i.session_id = %(sid)s AND i.seq = u.seq AND i.data = u.data
ON CONFLICT (session_id, seq, fields) DO UPDATE SET vector = EXCLUDED.vector
"""

_PUT_EMBEDDED_VECTORS: Final = """
INSERT INTO kvmemory_vectors (session_id, seq, fields, vector, embedding)
SELECT %(sid)s, u.seq, %(fields)s, u.vector, u.embedding::{schema}.vector
FROM unnest(%(seqs)s::bigint[], %(datas)s::bytea[], %(vectors)s::bytea[], %(embeddings)s::text[])
    AS u(seq, data, vector, embedding)
JOIN kvmemory_items AS i ON i.session_id = %(sid)s AND i.seq = u.seq AND i.data = u.data
ON CONFLICT (session_id, seq, fields) DO UPDATE
    SET vector = EXCLUDED.vector, embedding = EXCLUDED.embedding
"""

# The cosines of a session's vectors (unit length: the inner product), best first,
# ties in session order, a row whose stored vector has the wrong size (damage)
# before all: the first LIMIT rows, or (_COSINE_AT_LEAST) every row from a cut
# down, or (_COSINES_OF) those of some seqs. pgvector's inner product sums
# float32 products, as numpy's does, in another order: scores agree to float32
# rounding.
_COSINE: Final = "{schema}.inner_product(embedding, %(query)s::{schema}.vector)"
_RANKED: Final = (
    "SELECT seq, CASE WHEN length(vector) = %(size)s THEN " + _COSINE + " END AS cos,"
    " length(vector) FROM kvmemory_vectors WHERE session_id = %(sid)s AND fields = %(fields)s"
    " AND embedding IS NOT NULL AND length(vector) > 0"
)
_NEAREST: Final = _RANKED + " ORDER BY cos DESC NULLS FIRST, seq LIMIT %(limit)s"
_COSINE_AT_LEAST: Final = _RANKED + " AND " + _COSINE + " >= %(cut)s ORDER BY cos DESC, seq"
_COSINES_OF: Final = _RANKED + " AND seq = ANY(%(among)s)"

# Is there a stored vector without its pgvector copy? (Found through a partial index.)
_UNRANKED: Final = (
    "SELECT 1 FROM kvmemory_vectors WHERE session_id = %s AND fields = %s"
    " AND embedding IS NULL AND length(vector) > 0 LIMIT 1"
)

_LOCK_SESSION: Final = (
    "SELECT step_key, created, metadata, deleted FROM kvmemory_sessions"
    " WHERE session_id = %s FOR UPDATE"
)

# Rows larger than a few kB (a screenshot, a long page) are cut down to the
# asked keys on the server from the JSONB copy, so the rest is never sent;
# smaller rows come back whole, which benchmarks/bench_stores.py measured to
# be faster than cutting them. JSONB keeps numbers as decimals, which prints
# a float such as 1e16 as an integer and loses the sign of -0.0; a large row
# holding such a float gets no JSONB copy (see _doc) and so comes back whole,
# like the rows whose text holds a NUL character.
_CUT_ROWS_OVER: Final = 4096
_PICK: Final = (
    "COALESCE((SELECT jsonb_object_agg(key, value) FROM jsonb_each({source})"
    " WHERE key = ANY(%(keys)s)), '{{}}'::jsonb)"
)
_PROJECT: Final = (
    f"SELECT seq, CASE WHEN doc IS NULL OR octet_length(data) <= {_CUT_ROWS_OVER} THEN data"
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


# -- pgvector (where the database has it) -----------------------------------------------


def _quoted(name: str) -> str:
    """Return ``name`` as an SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def _vector_literal(blob: bytes) -> str | None:
    """Return pgvector's text for a stored little-endian float32 vector (``None`` for an empty one)."""
    if not blob:
        return None
    floats = array.array("f", blob)
    if sys.byteorder == "big":
        floats.byteswap()
    # repr of each float32 value read back as float32 (pgvector parses with strtof) is exact.
    return str(floats.tolist())


class Drivers(NamedTuple):
    """Where a PostgreSQL store gets its connections: ``connect(conninfo, **options)`` and ``pool(conninfo, **options)``.

    Both take psycopg's sync signatures (``psycopg.connect``,
    ``psycopg_pool.ConnectionPool``). The async store opens its PostgreSQL
    store with :data:`DRIVERS` set to the asyncio bridge's, so the same
    store code runs on psycopg's async connections and pool.
    """

    connect: Callable[..., Any]
    pool: Callable[..., Any]


# The drivers of the PostgreSQL stores opened in this context; None: psycopg's sync ones.
DRIVERS: contextvars.ContextVar[Drivers | None] = contextvars.ContextVar(
    "kvmemory_postgres_drivers", default=None
)


_PGVECTOR_ROWS: Final = 1000  # rows per statement when filling the embedding column


class PostgresBackend(SQLRows, Backend):
    """The rows of a PostgreSQL store, through a connection pool (see :class:`PostgresStore` for the arguments).

    Opening connects, then (unless ``read_only``) creates or migrates the
    tables; :class:`PostgresStore` is the store over this backend.
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
        try:
            import psycopg
            import psycopg_pool
        except ImportError as exc:
            raise missing_dependency(exc.name or "psycopg", "postgres") from exc
        self.url = redact_url(conninfo)
        self.read_only = read_only
        self.driver_errors = (psycopg.Error, psycopg_pool.PoolTimeout)
        self._no_tables = False
        self._indexed = True
        # The schema of the pgvector extension once kvmemory_vectors has its embedding
        # column (every write then fills it); search uses it when _pgvector is set.
        self._vector_schema: str | None = None
        self._pgvector = False
        try:
            # One plain connection first: a host that does not resolve or a refused
            # login fails here at once, with the driver's reason, instead of after
            # the pool's timeout of retrying in the background.
            drivers = DRIVERS.get() or Drivers(psycopg.connect, psycopg_pool.ConnectionPool)
            first = drivers.connect(conninfo, autocommit=True, connect_timeout=max(int(timeout), 1))
        except psycopg.Error as exc:
            msg = f"Cannot connect to PostgreSQL store {self.url}: {exc}; check that the server is running and the URL's host, port, user, password and database are right."
            raise StoreUnreachableError(msg) from exc
        with first, self._opening():
            self._setup(first)
            if not self.no_tables:
                self._vector_schema = self._embedding_column(first, create=pgvector)
            self._pgvector = pgvector and self._vector_schema is not None
        self._pool = drivers.pool(
            conninfo,
            min_size=min_size,
            max_size=max_size,
            timeout=timeout,
            kwargs={"autocommit": True},
            configure=self._configure,
            open=False,
        )
        try:
            with self._opening():
                self._pool.open(wait=True, timeout=timeout)
        except BaseException:
            self._pool.close()
            raise

    @contextlib.contextmanager
    def _opening(self) -> Iterator[None]:
        """Report the driver's errors while the store is opened as :meth:`store_error` names them."""
        try:
            yield
        except StoreError:
            raise
        except self.driver_errors as exc:
            raise self.store_error("open", "", exc) from exc

    @property
    def pool(self) -> Any:
        """The ``psycopg_pool.ConnectionPool`` every call takes a connection from, to inspect the server's settings (never leave a transaction open on it)."""
        return self._pool

    def _configure(self, con: Any) -> None:
        if self.read_only:
            con.execute("SET default_transaction_read_only = on")

    def _setup(self, con: Any) -> None:
        store = f"PostgreSQL store {self.url}"
        if self.read_only:
            with con.transaction():
                con.execute("SET TRANSACTION READ ONLY")
                if con.execute("SELECT to_regclass('kvmemory_schema')").fetchone()[0] is None:
                    self._no_tables = True
                    return
                version = check_schema_version(self._version(con), SCHEMA_VERSION, store=store)
            if version == _SEARCHED_BY_SCAN:
                self._indexed = False  # the layout before the keyword index reads the same
                return
            if version < SCHEMA_VERSION:
                msg = f"{store} has schema version {version}; opened read-only it cannot be migrated to {SCHEMA_VERSION}. Open it once writable to migrate it."
                raise SchemaVersionError(msg)
            self._no_tables = version == 0
            return
        with con.transaction():
            con.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            con.execute("CREATE TABLE IF NOT EXISTS kvmemory_schema (version integer NOT NULL)")
            found = self._version(con)
            if found != SCHEMA_VERSION:
                reached = migrate(MIGRATIONS, found, con, store=store)
                con.execute("DELETE FROM kvmemory_schema")
                con.execute("INSERT INTO kvmemory_schema (version) VALUES (%s)", (reached,))

    def _embedding_column(self, con: Any, *, create: bool) -> str | None:
        """Return the schema of pgvector if ``kvmemory_vectors`` has its ``embedding`` column.

        With ``create`` on a writable store, first create the extension (when
        the server offers it and the login may) and the column, filled from
        the stored vectors, under the schema lock.
        """
        has_column = (
            "SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('kvmemory_vectors')"
            " AND attname = 'embedding' AND NOT attisdropped"
        )
        if con.execute(has_column).fetchone():
            return self._pgvector_schema(con)
        if create and not self.read_only:
            with con.transaction():
                con.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                try:
                    with con.transaction():  # a savepoint: a refusal leaves everything as it was
                        return self._add_embedding_column(con, has_column)
                except self.driver_errors[0]:
                    # Not allowed to (create the extension, use its type): rank in Python.
                    return None
        return None

    def _add_embedding_column(self, con: Any, has_column: str) -> str | None:
        """Create pgvector where offered and add the ``embedding`` column, filled; return pgvector's schema."""
        schema = self._pgvector_schema(con)
        if schema is None:
            if not con.execute(
                "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'"
            ).fetchone():
                return None
            con.execute("CREATE EXTENSION IF NOT EXISTS vector")
            schema = self._pgvector_schema(con)
        if schema is not None and not con.execute(has_column).fetchone():
            con.execute(
                f"ALTER TABLE kvmemory_vectors ADD COLUMN embedding {_quoted(schema)}.vector"
            )
            # A row holds each vector twice (2 kB at 256 dimensions), over the size
            # at which PostgreSQL moves a value out of the row. Keep the embedding
            # in the row and move the bytea copy out, so the ranking scan reads
            # one page per few rows instead of a TOAST lookup per row (34 ms
            # instead of 170 ms over 100,000 rows).
            con.execute("ALTER TABLE kvmemory_vectors ALTER COLUMN embedding SET STORAGE MAIN")
            con.execute("ALTER TABLE kvmemory_vectors ALTER COLUMN vector SET STORAGE EXTERNAL")
            # Rows written without the column (by a handle opened before it
            # existed) are found by this index and scored in Python.
            con.execute(
                "CREATE INDEX IF NOT EXISTS kvmemory_vectors_unranked ON kvmemory_vectors"
                " (session_id, fields, seq) WHERE embedding IS NULL AND length(vector) > 0"
            )
            self._fill_embeddings(con, schema)
        return schema

    @staticmethod
    def _pgvector_schema(con: Any) -> str | None:
        row = con.execute(
            "SELECT n.nspname FROM pg_extension AS e JOIN pg_namespace AS n"
            " ON n.oid = e.extnamespace WHERE e.extname = 'vector'"
        ).fetchone()
        return str(row[0]) if row else None

    @staticmethod
    def _fill_embeddings(con: Any, schema: str) -> None:
        """Fill the ``embedding`` of every row that lacks it from its stored ``vector``.

        Rows are read in key order, once each: a damaged vector (a byte length
        that is no whole number of float32) keeps no copy, so its session is
        ranked with numpy, which names the damage.
        """
        update = (
            f"UPDATE kvmemory_vectors AS v SET embedding = u.embedding::{_quoted(schema)}.vector"
            " FROM unnest(%s::text[], %s::bigint[], %s::text[], %s::text[])"
            " AS u(session_id, seq, fields, embedding)"
            " WHERE v.session_id = u.session_id AND v.seq = u.seq AND v.fields = u.fields"
        )
        after: tuple[str, int, str] = ("", -1, "")
        while True:
            rows = con.execute(
                "SELECT session_id, seq, fields, vector FROM kvmemory_vectors"
                " WHERE (session_id, seq, fields) > (%s, %s, %s) AND embedding IS NULL"
                " AND length(vector) > 0 ORDER BY session_id, seq, fields LIMIT %s",
                (*after, _PGVECTOR_ROWS),
                binary=True,
            ).fetchall()
            if not rows:
                return
            after = tuple(rows[-1][:3])
            rows = [row for row in rows if len(row[3]) % 4 == 0 and "|" not in row[2]]
            if rows:
                columns = list(zip(*rows, strict=True))
                literals = [_vector_literal(bytes(blob)) for blob in columns[3]]
                con.execute(
                    update, (list(columns[0]), list(columns[1]), list(columns[2]), literals)
                )

    @property
    def uses_pgvector(self) -> bool:
        """Whether semantic queries are ranked in the server by pgvector."""
        return self._pgvector

    @staticmethod
    def _version(con: Any) -> int:
        row = con.execute("SELECT max(version) FROM kvmemory_schema").fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    def store_error(self, action: str, where: str, exc: BaseException) -> StoreError:
        text = str(exc)
        if any(name in text for name in _INDEX_NAMES):
            return self._index_damaged(action, where, text)
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

    def _index_damaged(self, action: str, where: str, reason: str) -> CorruptStoreError:
        msg = (
            f"Cannot {action}{where} PostgreSQL store {self.url}: its keyword index is damaged or "
            f"missing ({reason}); nothing was changed. Rebuild the index from the stored items "
            "with store.rebuild_keyword_index()."
        )
        return CorruptStoreError(msg)

    # -- reading ---------------------------------------------------------------------

    @property
    def no_tables(self) -> bool:
        """Whether the database held no kvmemory tables when this handle opened (read as empty)."""
        return self._no_tables

    def query_rows(self, sql: str, params: Any = ()) -> list[Any]:
        """Run one read statement on a pooled connection and return its rows."""
        with self._pool.connection() as con:
            return list(con.execute(sql, params).fetchall())

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

    @contextlib.contextmanager
    def transaction(self, session_id: str) -> Iterator[Any]:
        with self._pool.connection() as con, con.transaction():
            yield con

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
            "docs": [_doc(row[2]) for row in rows],
            **_index_params(session_id, rows, terms),
        }
        with self._pool.connection() as con:
            seqs = sorted(int(r[0]) for r in con.execute(_APPEND, params).fetchall())
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
        # The row exists (locked by _lock_session), possibly holding a deleted session's next_seq.
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
        params = {
            "sid": session_id,
            "n": len(rows),
            "steps": [row[0] for row in rows],
            "created": [row[1] for row in rows],
            "datas": [row[2] for row in rows],
            "docs": [_doc(row[2]) for row in rows],
            **_index_params(session_id, rows, terms),
        }
        return sorted(int(r[0]) for r in tx.execute(_INSERT, params).fetchall())

    def update_rows(
        self, tx: Any, session_id: str, rows: Sequence[RowUpdate], terms: Sequence[Terms] | None
    ) -> list[int]:
        params = {
            "sid": session_id,
            "seqs": [row[0] for row in rows],
            "steps": [row[1] for row in rows],
            "datas": [row[2] for row in rows],
            "docs": [_doc(row[2]) for row in rows],
            **_index_params(session_id, [(None, 0.0, data) for _, _, data in rows], terms),
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
        # Binary results: a bytea arrives as its bytes, not as hex text twice its size.
        with self._pool.connection() as con:
            return list(con.execute(sql, params, binary=True).fetchall())

    def put_vectors(
        self, tx: Any, session_id: str, fields: str, rows: Sequence[tuple[int, bytes, bytes]]
    ) -> int:
        params = {
            "sid": session_id,
            "fields": fields,
            "seqs": [row[0] for row in rows],
            "datas": [row[1] for row in rows],
            "vectors": [row[2] for row in rows],
        }
        schema = self._vector_schema
        if schema is None:
            cur = tx.execute(_PUT_VECTORS, params)
        else:
            # Rows of vectors cut into parts hold several vectors each ("|" in their
            # fields, see fields_text): ranked with numpy, they keep no pgvector copy.
            parted = "|" in fields
            params["embeddings"] = [None if parted else _vector_literal(row[2]) for row in rows]
            cur = tx.execute(_PUT_EMBEDDED_VECTORS.format(schema=_quoted(schema)), params)
        return int(cur.rowcount)

    def nearest(
        self, session_id: str, fields: str, query: bytes, limit: int, among: Sequence[int]
    ) -> list[tuple[int, float | None, int]] | None:
        """Rank by pgvector's inner product in the server where the database has it (see the base).

        ``None`` (numpy over the vectors read) without pgvector, and while
        some stored vector has no pgvector copy (written by a handle opened
        before the column existed), so that every row is scored one way.
        A damaged row, if any, comes first.
        """
        schema = self._vector_schema
        if not self._pgvector or schema is None or self.no_tables:
            return None
        if self.query_rows(_UNRANKED, (session_id, fields)):
            return None
        name = _quoted(schema)
        params: dict[str, Any] = {
            "sid": session_id,
            "fields": fields,
            "query": _vector_literal(query),
            "size": len(query),
            "limit": limit + 1,  # one more: are there ties past the limit?
        }
        ranked: list[tuple[int, float | None, int]] = self.query_rows(
            _NEAREST.format(schema=name), params
        )
        if ranked and ranked[0][1] is None:
            return ranked[:1]  # damage: reported by the base
        if len(ranked) > limit and ranked[limit][1] == ranked[limit - 1][1]:
            params["cut"] = ranked[limit - 1][1]
            ranked = self.query_rows(_COSINE_AT_LEAST.format(schema=name), params)
        params["among"] = list(set(among) - {seq for seq, _, _ in ranked})
        if params["among"]:
            ranked += self.query_rows(_COSINES_OF.format(schema=name), params)
        return ranked

    def close(self) -> None:
        self._pool.close()

    # -- keyword search --------------------------------------------------------------

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
        sid = session_id
        weights = Counter(terms)
        names = list(weights)
        queries = [f"'{_lexeme(sid, term)}'" for term in names]
        overflow = f"'{_overflow(sid)}'"
        params: dict[str, Any] = {
            "sid": sid,
            "query": " | ".join([*queries, overflow]),
            "overflow": overflow,
            "names": names,
            "k1p1": BM25_K1 + 1.0,
            "flat": BM25_K1 * (1.0 - BM25_B),
            "k1b": BM25_K1 * BM25_B,
            "k": k + _SPARE,
            "cut": None,
        }
        if len(names) > _COLUMN_TERMS:
            # A column per term would pass PostgreSQL's 1,664 columns and 65,535 parameters.
            params["weights"] = [float(weights[term]) for term in names]
            sql = _SCORE_ARRAYS
        else:
            params.update((f"t{j}", term) for j, term in enumerate(names))
            params.update((f"w{j}", float(weights[term])) for j, term in enumerate(names))
            sql = _score_sql(len(names))
        # One statement, so one snapshot: the counts, the IDFs and the scores agree.
        rows = self.query_rows(sql, params)
        if len(rows) == k + _SPARE and rows[-1][1] >= rows[k - 1][1] / _MARGIN**2:
            # Items tie with the k-th to rounding past the spare rows: take every one.
            rows = self.query_rows(sql, {**params, "k": None, "cut": rows[k - 1][1] / _MARGIN**2})
        if rows and rows[0][2]:
            reason = f"row {rows[0][0]} matches a query term its counts do not hold"
            raise self._index_damaged("search", f" session {sid!r} of", reason)
        return _exact_top(rows, terms, names, k)

    def rebuild_keyword_index(self) -> None:
        """Rebuild the keyword index (terms, counts, GIN index, triggers) from the stored items, in one transaction.

        The index follows every write on its own; this is the repair for an
        index that was damaged or dropped outside kvmemory, which searches
        and writes report with :class:`CorruptStoreError`. It reads and
        tokenizes every item of every session.

        Raises:
            StoreError: if the store is read-only or cannot be written; nothing is changed.
        """
        try:
            with self._pool.connection() as con, con.transaction():
                con.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                _build_keyword_index(con)
        except self.driver_errors as exc:
            msg = f"Cannot rebuild the keyword index of PostgreSQL store {self.url}: {exc}; nothing was changed."
            raise StoreError(msg) from exc


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

    Raises:
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
    ) -> None:
        backend = PostgresBackend(
            conninfo,
            min_size=min_size,
            max_size=max_size,
            timeout=timeout,
            read_only=read_only,
            pgvector=pgvector,
        )
        super().__init__(backend, read_only=read_only)
        self.backend: PostgresBackend = backend

    @property
    def uses_pgvector(self) -> bool:
        """Whether semantic queries are ranked in the server by pgvector."""
        return self.backend.uses_pgvector

    def rebuild_keyword_index(self) -> None:
        """Rebuild the keyword index (terms, counts, GIN index, triggers) from the stored items, in one transaction.

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


_INDEX_NAMES: Final = ("kvmemory_items_terms", "n_terms", "kvmemory_count_", '"tf"', '"terms"')


def _score_sql(n_terms: int) -> str:
    """Return the query for BM25 over a session's items holding one of ``n_terms`` query terms.

    One pass over the session's rows that the tsvector matches (through the
    GIN index; each lexeme is the session's own) reads each query term's
    count from the row's JSONB counts once (decompressed once per row:
    ``tf || '{}'`` in a subquery kept apart by ``OFFSET 0`` yields them
    plain, where each ``->>`` on the column decompresses it anew, a third of
    the time of a six-word query); a term's document frequency in the
    session is the number of those rows holding it. With the session's
    counts that gives the IDFs (as ``bm25_idf`` computes them, times
    ``k1 + 1`` and the term's repeats in the query) and BM25 of each row,
    best first. A matched row whose counts hold no query term is damaged: it
    sorts first, flagged.
    """
    terms = range(n_terms)
    counts = ", ".join(f"(c.tf ->> %(t{j})s)::float8 AS f{j}" for j in terms)
    frequencies = ", ".join(f"count(m.f{j}) AS d{j}" for j in terms)
    lifts = ", ".join(
        f"%(w{j})s * ln(1.0 + (s.n - d.d{j} + 0.5) / (d.d{j} + 0.5)) * %(k1p1)s AS l{j}"
        for j in terms
    )
    score = " + ".join(
        f"coalesce(l.l{j} * m.f{j} / (m.f{j} + %(flat)s + l.slope * m.n_terms), 0.0)" for j in terms
    )
    held = ", ".join(f"m.f{j}" for j in terms)
    dfs = ", ".join(f"d.d{j}" for j in terms)
    return f"""
WITH s AS (
    SELECT n_items::float8 AS n, n_terms::float8 AS total FROM kvmemory_sessions
    WHERE session_id = %(sid)s AND NOT deleted AND n_items > 0
),
m AS MATERIALIZED (
    SELECT i.seq, i.n_terms, f.* FROM kvmemory_items AS i CROSS JOIN LATERAL (
        SELECT {counts} FROM (SELECT i.tf || '{{}}'::jsonb AS tf OFFSET 0) AS c
    ) AS f
    WHERE i.session_id = %(sid)s AND i.terms @@ %(query)s::tsquery
),
d AS (SELECT {frequencies} FROM m),
l AS (
    SELECT {lifts},
        %(k1b)s / (CASE WHEN s.total > 0 THEN s.total / s.n ELSE 1.0 END) AS slope,
        s.n, s.total, ARRAY[{dfs}]::float8[] AS dfs
    FROM s, d
)
SELECT * FROM (
    SELECT m.seq, {score} AS score, coalesce({held}) IS NULL AS damaged, m.n_terms,
        ARRAY[{held}]::float8[] AS tfs, l.n, l.total, l.dfs
    FROM m, l
    WHERE CASE WHEN coalesce({held}) IS NULL THEN NOT EXISTS (
        SELECT 1 FROM kvmemory_items AS o WHERE o.session_id = %(sid)s AND o.seq = m.seq
            AND o.terms @@ %(overflow)s::tsquery
    ) ELSE true END
) AS r
{_BAND}
"""


# A row matched only by its overflow lexeme (see _index_columns) counts if its tf holds a
# query term. (_score_sql asks the tsvector only of rows whose counts hold no query term:
# asking every matched row cost a sixth of a query's time.)
_HOLDS_A_TERM: Final = " AND (NOT i.terms @@ %(overflow)s::tsquery OR i.tf ?| %(names)s::text[])"

# BM25 as _score_sql computes it, for any number of query terms: the terms and their
# repeats come as two arrays, each (row, term) held is one row of f, and a row's score
# is the sum over its terms (in another order than the columns' sum: equal to rounding).
# The best rows of r, a damaged row first (to be named): the best k plus spare rows
# (cut NULL), or every row scoring at least the cut (k NULL), which the search asks
# for when the spare rows tie with the k-th to rounding (_exact_top then scores
# those again exactly).
_BAND: Final = """WHERE r.damaged OR %(cut)s::float8 IS NULL OR r.score >= %(cut)s
ORDER BY r.damaged DESC, r.score DESC, r.seq
LIMIT %(k)s"""

_SCORE_ARRAYS: Final = f"""
WITH s AS (
    SELECT n_items::float8 AS n, n_terms::float8 AS total FROM kvmemory_sessions
    WHERE session_id = %(sid)s AND NOT deleted AND n_items > 0
),
q AS (SELECT t, w, i FROM unnest(%(names)s::text[], %(weights)s::float8[]) WITH ORDINALITY AS q(t, w, i)),
m AS MATERIALIZED (
    SELECT i.seq, i.n_terms, i.tf || '{{}}'::jsonb AS tf FROM kvmemory_items AS i
    WHERE i.session_id = %(sid)s AND i.terms @@ %(query)s::tsquery{_HOLDS_A_TERM}
),
f AS MATERIALIZED (
    SELECT m.seq, m.n_terms, q.t, (m.tf ->> q.t)::float8 AS f FROM m JOIN q ON m.tf ? q.t
),
d AS (SELECT t, count(*)::float8 AS d FROM f GROUP BY t),
l AS (
    SELECT d.t, q.w * ln(1.0 + (s.n - d.d + 0.5) / (d.d + 0.5)) * %(k1p1)s AS lift
    FROM d JOIN q USING (t) CROSS JOIN s
),
slope AS (
    SELECT %(k1b)s / (CASE WHEN s.total > 0 THEN s.total / s.n ELSE 1.0 END) AS slope FROM s
),
scored AS (
    SELECT m.seq,
        coalesce(sum(l.lift * f.f / (f.f + %(flat)s + slope.slope * m.n_terms)), 0.0) AS score,
        count(f.t) = 0 AS damaged
    FROM m CROSS JOIN slope LEFT JOIN f ON f.seq = m.seq LEFT JOIN l ON l.t = f.t
    GROUP BY m.seq
)
SELECT * FROM (
    SELECT scored.seq, score, damaged, m.n_terms,
        ARRAY(SELECT (m.tf ->> q.t)::float8 FROM q ORDER BY q.i) AS tfs, s.n, s.total,
        ARRAY(SELECT d.d FROM q LEFT JOIN d USING (t) ORDER BY q.i) AS dfs
    FROM scored JOIN m USING (seq) CROSS JOIN s
) AS r
{_BAND}
"""


def _index_params(
    session_id: str, rows: Sequence[Row], terms: Sequence[Terms] | None
) -> dict[str, list[Any]]:
    """Return the keyword index columns of rows as arrays for the insert and update statements."""
    if terms is None:
        terms = [_terms_of_data(data) for _, _, data in rows]
    columns = [_index_columns(session_id, row_terms) for row_terms in terms]
    return {
        "terms": [vector for vector, _, _ in columns],
        "n_terms": [n for _, n, _ in columns],
        "tfs": [tf for _, _, tf in columns],
    }


def _doc(data: bytes) -> str | None:
    """Return the JSONB copy of a row's data, or ``None`` where JSONB cannot hold it exactly."""
    # JSONB cannot hold the NUL character; such items are kept in ``data`` only.
    if b"\\u0000" in data:
        return None
    if len(data) > _CUT_ROWS_OVER and _jsonb_alters(orjson.loads(data)):
        return None
    return data.decode("utf-8")


def _jsonb_alters(value: Any) -> bool:
    """Return whether JSONB would give back some float of ``value`` as another value or type."""
    stack = [value]
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind is float:
            if node == 0.0 and math.copysign(1.0, node) < 0:
                return True  # -0.0 comes back as 0
            text = orjson.dumps(node)
            if b"e" in text and b"e-" not in text:
                return True  # 1e16 comes back as the integer 10000000000000000
        elif kind is dict:
            stack.extend(node.values())
        elif kind is list:
            stack.extend(node)
    return False


def _drop_inexact_docs(con: Any) -> None:
    # v1 gave every row a JSONB copy; large rows whose floats it alters lose it (see _doc).
    changed: list[tuple[str, int]] = []
    with con.cursor(name="kvmemory_migrate_docs") as cur:
        cur.execute(
            "SELECT session_id, seq, data FROM kvmemory_items"
            f" WHERE doc IS NOT NULL AND octet_length(data) > {_CUT_ROWS_OVER}"
        )
        for session_id, seq, data in cur:
            if _doc(bytes(data)) is None:
                changed.append((session_id, seq))
    for session_id, seq in changed:
        con.execute(
            "UPDATE kvmemory_items SET doc = NULL WHERE session_id = %s AND seq = %s",
            (session_id, seq),
        )
