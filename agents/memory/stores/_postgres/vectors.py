"""pgvector in a PostgreSQL store: the ``embedding`` column, filled on every write, and cosines ranked in the server.

Where the database has the pgvector extension, ``kvmemory_vectors`` has a
column ``embedding`` of its type ``vector`` holding the same floats as the
``vector`` bytes (see :mod:`agents.memory.stores._postgres.backend`).
:func:`find_pgvector` finds or adds that column when a store opens;
:class:`PostgresVectors` writes the vector rows and ranks with it.
"""

from __future__ import annotations

import array
import sys
from collections.abc import Callable, Sequence
from typing import Any, Final

from agents.memory.stores._core.change_log import logged_changes
from agents.memory.stores._postgres.schema import lock_schema

__all__ = ["PostgresVectors", "find_pgvector"]

_PGVECTOR_ROWS: Final = 1000  # rows per statement when filling the embedding column

# Only where the item still holds the data the vector was computed from. The arrays
# go in binary (%b): as text, psycopg escapes every byte of every bytea with a regular
# expression, a quarter of the time of embedding a session into PostgreSQL.
_PUT_VECTORS: Final = """
INSERT INTO kvmemory_vectors (session_id, seq, fields, vector)
SELECT %(sid)s, u.seq, %(fields)s, u.vector
FROM unnest(%(seqs)b::bigint[], %(datas)b::bytea[], %(vectors)b::bytea[]) AS u(seq, data, vector)
JOIN kvmemory_items AS i ON i.session_id = %(sid)s AND i.seq = u.seq AND i.data = u.data
ON CONFLICT (session_id, seq, fields) DO UPDATE SET vector = EXCLUDED.vector
"""

_PUT_EMBEDDED_VECTORS: Final = """
INSERT INTO kvmemory_vectors (session_id, seq, fields, vector, embedding)
SELECT %(sid)s, u.seq, %(fields)s, u.vector, u.embedding::{schema}.vector
FROM unnest(%(seqs)b::bigint[], %(datas)b::bytea[], %(vectors)b::bytea[], %(embeddings)b::text[])
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

# What changes with every write to a session's vector rows: the number a trigger gives the
# session's row at each write (see schema.py), one lookup by key.
_VERSION: Final = "SELECT vectors_version FROM kvmemory_sessions WHERE session_id = %s"
# From schema version 14 with the random nonce the same write gave it (see schema.py).
_NONCED_VERSION: Final = (
    "SELECT vectors_version, vectors_nonce FROM kvmemory_sessions WHERE session_id = %s"
)
# Whether the change rows at a kept version's number still hold its nonce (the database was
# not put back to a copy and written again to that number since).
_NONCE_HELD: Final = (
    "SELECT 1 FROM kvmemory_vector_changes"
    " WHERE session_id = %s AND version = %s AND nonce = %s LIMIT 1"
)

# The seqs the trigger logged for the session between two versions (a NULL seq: pruned).
_CHANGES: Final = (
    "SELECT DISTINCT seq FROM kvmemory_vector_changes"
    " WHERE session_id = %s AND version > %s AND version <= %s"
)

# The same on tables before that number (opened read-only): each row written (inserted,
# or updated in place) is a new tuple whose xmin is the writing transaction's id, and a
# row deleted leaves the list. The digest of the (seq, xmin) list in seq order tells
# one list from another; it reads the rows' headers, not their vectors (5-9 ms a query
# at 10,000 rows).
_DIGEST: Final = (
    "SELECT count(*), md5(coalesce(string_agg(seq::text || ':' || xmin::text, ','"
    " ORDER BY seq), '')) FROM kvmemory_vectors WHERE session_id = %s AND fields = %s"
)

# Is there a stored vector without its pgvector copy? (Found through a partial index.)
_UNRANKED: Final = (
    "SELECT 1 FROM kvmemory_vectors WHERE session_id = %s AND fields = %s"
    " AND embedding IS NULL AND length(vector) > 0 LIMIT 1"
)


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


def find_pgvector(con: Any, *, create: bool, refused: type[BaseException]) -> str | None:
    """Return the schema of pgvector if ``kvmemory_vectors`` has its ``embedding`` column.

    With ``create`` (a writable store that may use pgvector), first create
    the extension (when the server offers it and the login may) and the
    column, filled from the stored vectors, under the schema lock.

    Args:
        con: An autocommit connection, outside any transaction.
        create: Add the extension and the column where they are missing.
        refused: The driver's error type: a statement refused while adding
            them leaves everything as it was, and pgvector is then not used.
    """
    has_column = (
        "SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('kvmemory_vectors')"
        " AND attname = 'embedding' AND NOT attisdropped"
    )
    if con.execute(has_column).fetchone():
        return _pgvector_schema(con)
    if create:
        with con.transaction():
            lock_schema(con)
            try:
                with con.transaction():  # a savepoint: a refusal leaves everything as it was
                    return _add_embedding_column(con, has_column)
            except refused:
                # Not allowed to (create the extension, use its type): rank in Python.
                return None
    return None


def _add_embedding_column(con: Any, has_column: str) -> str | None:
    """Create pgvector where offered and add the ``embedding`` column, filled; return pgvector's schema."""
    schema = _pgvector_schema(con)
    if schema is None:
        if not con.execute(
            "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'"
        ).fetchone():
            return None
        con.execute("CREATE EXTENSION IF NOT EXISTS vector")
        schema = _pgvector_schema(con)
    if schema is not None and not con.execute(has_column).fetchone():
        con.execute(f"ALTER TABLE kvmemory_vectors ADD COLUMN embedding {_quoted(schema)}.vector")
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
        _fill_embeddings(con, schema)
    return schema


def _pgvector_schema(con: Any) -> str | None:
    row = con.execute(
        "SELECT n.nspname FROM pg_extension AS e JOIN pg_namespace AS n"
        " ON n.oid = e.extnamespace WHERE e.extname = 'vector'"
    ).fetchone()
    return str(row[0]) if row else None


def _fill_embeddings(con: Any, schema: str) -> None:
    """Fill the ``embedding`` of every row that lacks it from its stored ``vector``.

    Rows are read in key order, once each: a damaged vector (a byte length
    that is no whole number of float32) keeps no copy, so its session is
    ranked with numpy, which names the damage.
    """
    update = (
        f"UPDATE kvmemory_vectors AS v SET embedding = u.embedding::{_quoted(schema)}.vector"
        " FROM unnest(%b::text[], %b::bigint[], %b::text[], %b::text[])"
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
            con.execute(update, (list(columns[0]), list(columns[1]), list(columns[2]), literals))


class PostgresVectors:
    """The vector rows of a PostgreSQL store: written with their pgvector copy where there is one, ranked by it.

    Args:
        query_rows: Runs one read statement and returns its rows (the
            backend's :meth:`~PostgresBackend.query_rows`).
        schema: pgvector's schema once ``kvmemory_vectors`` has its
            ``embedding`` column (every write then fills it), else ``None``.
        ranks: Rank semantic queries with pgvector (the store's ``pgvector``
            option, where the column exists).
        numbered: The sessions' rows keep the version of their vector rows
            (``False`` on older tables opened read-only).
        logged: Every vector write is logged with its seq (``False`` on
            older tables opened read-only).
        nonced: The sessions' rows and change rows hold a random nonce
            beside each number (``False`` on older tables opened read-only).
    """

    def __init__(
        self,
        query_rows: Callable[[str, Any], list[Any]],
        *,
        schema: str | None,
        ranks: bool,
        numbered: bool = True,
        logged: bool = True,
        nonced: bool = True,
    ) -> None:
        self._query_rows = query_rows
        self._schema = schema
        self._ranks = ranks and schema is not None
        self._numbered = numbered
        self._logged = logged and numbered
        self._nonced = nonced and self._logged

    @property
    def ranks(self) -> bool:
        """Whether semantic queries are ranked in the server by pgvector."""
        return self._ranks

    def ranks_rows(self, session_id: str, fields: str) -> bool:
        """Return whether :meth:`nearest` ranks the session's vector rows over ``fields`` now: pgvector, and a copy of every stored vector (one lookup)."""
        if not self._ranks or self._schema is None:
            return False
        return not self._query_rows(_UNRANKED, (session_id, fields))

    def put(
        self, tx: Any, session_id: str, fields: str, rows: Sequence[tuple[int, bytes, bytes]]
    ) -> int:
        """Write ``(seq, data, vector)`` rows over ``fields`` where item ``seq`` still holds ``data``; return how many.

        Args:
            tx: The transaction's connection.
            session_id: The session of the items.
            fields: The fields the vectors were computed over.
            rows: The vectors and the data each was computed from.
        """
        params = {
            "sid": session_id,
            "fields": fields,
            "seqs": [row[0] for row in rows],
            "datas": [row[1] for row in rows],
            "vectors": [row[2] for row in rows],
        }
        schema = self._schema
        if schema is None:
            cur = tx.execute(_PUT_VECTORS, params)
        else:
            # Rows of vectors cut into parts hold several vectors each ("|" in their
            # fields, see fields_text): ranked with numpy, they keep no pgvector copy.
            parted = "|" in fields
            params["embeddings"] = [None if parted else _vector_literal(row[2]) for row in rows]
            cur = tx.execute(_PUT_EMBEDDED_VECTORS.format(schema=_quoted(schema)), params)
        return int(cur.rowcount)

    def version(self, session_id: str, fields: str) -> int | tuple[int, int] | tuple[int, str]:
        """Return what changes with every write to the session's vector rows over ``fields`` (see :meth:`Backend.vectors_version`).

        The number and random nonce the session's row holds (any write to
        its vector rows, over any fields, gives it new ones; ``0`` for a
        session not made yet), on tables before the nonce the number alone,
        and on tables before the number a digest of the rows.
        """
        if not self._numbered:
            ((count, digest),) = self._query_rows(_DIGEST, (session_id, fields))
            return int(count), str(digest)
        if not self._nonced:
            found = self._query_rows(_VERSION, (session_id,))
            return int(found[0][0]) if found else 0
        found = self._query_rows(_NONCED_VERSION, (session_id,))
        return (int(found[0][0]), int(found[0][1])) if found else 0

    def changes(self, session_id: str, since: object, now: object) -> set[int] | None:
        """Return the seqs logged for the session's vector writes between two versions (see :meth:`Backend.vector_changes`); ``None`` where it cannot tell.

        ``None`` on tables without the log, for versions that are not two
        of its versions in order, where the log was pruned past ``since``,
        and (tables of schema version 14) where the change rows at
        ``since``'s number no longer hold its nonce (pruned, or the
        database was put back to a copy of itself and written again to
        that number; also a session's first version, which no vector write
        logged). On tables of version 13 opened read-only, whose versions
        are numbers alone, the rows between two numbers are taken as they
        are, also once another handle migrated the tables.
        """
        if not self._logged:
            return None
        return logged_changes(
            since,
            now,
            nonced=self._nonced,
            # Tables before the nonce (version 13 opened read-only) have no column to check.
            nonce_held=lambda start, nonce: (
                not self._nonced or bool(self._query_rows(_NONCE_HELD, (session_id, start, nonce)))
            ),
            logged_seqs=lambda start, end: [
                seq for (seq,) in self._query_rows(_CHANGES, (session_id, start, end))
            ],
        )

    def nearest(
        self, session_id: str, fields: str, query: bytes, limit: int, among: Sequence[int]
    ) -> list[tuple[int, float | None, int]] | None:
        """Rank by pgvector's inner product in the server (see :meth:`Backend.nearest`).

        ``None`` (numpy over the vectors read) without pgvector, and while
        some stored vector has no pgvector copy (written by a handle opened
        before the column existed), so that every row is scored one way.
        A damaged row, if any, comes first.
        """
        schema = self._schema
        if schema is None or not self.ranks_rows(session_id, fields):
            return None
        name = _quoted(schema)
        params: dict[str, Any] = {
            "sid": session_id,
            "fields": fields,
            "query": _vector_literal(query),
            "size": len(query),
            "limit": limit + 1,  # one more: are there ties past the limit?
        }
        ranked: list[tuple[int, float | None, int]] = self._query_rows(
            _NEAREST.format(schema=name), params
        )
        if ranked and ranked[0][1] is None:
            return ranked[:1]  # damage: reported by the base
        if len(ranked) > limit and ranked[limit][1] == ranked[limit - 1][1]:
            params["cut"] = ranked[limit - 1][1]
            ranked = self._query_rows(_COSINE_AT_LEAST.format(schema=name), params)
        params["among"] = list(set(among) - {seq for seq, _, _ in ranked})
        if params["among"]:
            ranked += self._query_rows(_COSINES_OF.format(schema=name), params)
        return ranked
