"""The keyword index of a PostgreSQL store: the columns each write fills, and BM25 over them.

Each row keeps its search terms (the library tokenizer's) three ways: n_terms, their
number; tf, a JSONB object of each distinct term's count; and terms, a tsvector of the
distinct terms, each prefixed with the session id and "·" (never part of a term or
a session id), built from the lexemes as they are (no text search parser, no
folding), under a GIN index. The prefix makes a term's postings the session's own, so
its document frequency is counted within the session. kvmemory_sessions keeps each
session's item and term counts (BM25's statistics), kept by statement triggers on
every insert, update and delete of rows, whatever the statement (schema version 4).

:class:`PostgresKeywordIndex` fills the columns and ranks;
:func:`build_keyword_index` (re)creates the index from the stored rows.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import heapq
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final, NamedTuple

import orjson

from agents.memory._filter import FilterNode
from agents.memory._text import (
    BM25_B,
    BM25_FLOOR,
    BM25_K1,
    BM25_SCALE,
    IDF_FLOOR_SHARE,
    bm25_average_length,
)
from agents.memory.exceptions import CorruptSessionError, CorruptStoreError
from agents.memory.stores._core.encoding import Row, decode_pairs
from agents.memory.stores._core.terms import Terms, bm25_score, item_terms, query_weights
from agents.memory.stores._postgres.postings import DamagedBlockError, PostingBlocks
from agents.memory.stores._sql.filters import POSTGRES_FIELDS, postgres_condition

__all__ = ["Judge", "PostgresKeywordIndex", "build_keyword_index", "count_every_update"]

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
        WHERE s.session_id = d.session_id;
        RETURN NULL;
    END $$""",
)
"""The functions of the count triggers. An update touches its session's row even when its terms
keep their number: the row's ``xmin`` then changes with every write of the session's rows
(``PostgresBackend.keyword_version``, schema version 10)."""

_COUNT_TRIGGERS: Final = (
    "CREATE TRIGGER kvmemory_items_count_insert AFTER INSERT ON kvmemory_items"
    " REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION kvmemory_count_inserted()",
    "CREATE TRIGGER kvmemory_items_count_delete AFTER DELETE ON kvmemory_items"
    " REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION kvmemory_count_deleted()",
    "CREATE TRIGGER kvmemory_items_count_update AFTER UPDATE ON kvmemory_items"
    " REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows"
    " FOR EACH STATEMENT EXECUTE FUNCTION kvmemory_count_updated()",
)


def build_keyword_index(con: Any) -> None:
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


def count_every_update(con: Any) -> None:
    """Have every update of a session's rows touch its session's row (schema version 10; see ``_COUNT_FUNCTIONS``)."""
    con.execute(_COUNT_FUNCTIONS[2])


def _terms_of_data(data: bytes) -> Terms:
    """Return the search terms of a stored row; a row that cannot be decoded has none."""
    try:
        pairs = decode_pairs([(0, data)], "a row being indexed", "base")
    except (CorruptStoreError, CorruptSessionError):
        return "", 0  # searched as an item without text
    return item_terms(pairs[0][1])


def _ranking(k: int) -> dict[str, Any]:
    """Return the parameters of BM25+ and of the ranking's length every scoring statement takes."""
    return {
        "scale": BM25_SCALE,
        "idf_floor": IDF_FLOOR_SHARE,
        "floor": BM25_FLOOR,
        "flat": BM25_K1 * (1.0 - BM25_B),
        "k1b": BM25_K1 * BM25_B,
        "k": k + _SPARE,
        "cut": None,
    }


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


# What the server's message names when a part of the index was dropped or altered.
_INDEX_NAMES: Final = (
    "kvmemory_items_terms",
    "n_terms",
    "kvmemory_count_",
    '"tf"',
    '"terms"',
    "kvmemory_postings",
    "kvmemory_posting_key",
)


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


def _score_sql(n_terms: int) -> str:
    """Return the query for BM25 over a session's items holding one of ``n_terms`` query terms.

    One pass over the session's rows that the tsvector matches (through the
    GIN index; each lexeme is the session's own) reads each query term's
    count from the row's JSONB counts once (decompressed once per row:
    ``tf || '{}'`` in a subquery kept apart by ``OFFSET 0`` yields them
    plain, where each ``->>`` on the column decompresses it anew, a third of
    the time of a six-word query); a term's document frequency in the
    session is the number of those rows holding it. With the session's
    counts that gives the IDFs (as ``keyword_idf`` computes them, times
    ``BM25_SCALE`` and the term's repeats in the query) and BM25+ of each row,
    best first. A matched row whose counts hold no query term is damaged: it
    sorts first, flagged. The one-row CTEs ``d`` and ``l`` are MATERIALIZED:
    inlined, a planner that guesses the session has one row (statistics
    gathered before it was written) joins them per matched row, counting the
    document frequencies over every matched row again for each (quadratic).
    """
    terms = range(n_terms)
    counts = ", ".join(f"(c.tf ->> %(t{j})s)::float8 AS f{j}" for j in terms)
    frequencies = ", ".join(f"count(m.f{j}) AS d{j}" for j in terms)
    lifts = ", ".join(
        f"%(w{j})s * greatest(ln(1.0 + (s.n - d.d{j} + 0.5) / (d.d{j} + 0.5)),"
        f" %(idf_floor)s * ln(1.0 + (s.n - 0.5) / 1.5)) * %(scale)s AS l{j}"
        for j in terms
    )
    score = " + ".join(
        f"coalesce(l.l{j} * (m.f{j} / (m.f{j} + %(flat)s + l.slope * m.n_terms) + %(floor)s), 0.0)"
        for j in terms
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
d AS MATERIALIZED (SELECT {frequencies} FROM m),
l AS MATERIALIZED (
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


_ORDERED: Final = "SELECT * FROM (\n    SELECT m.seq,"
_COLUMNS: Final = "r.seq, r.score, r.damaged, r.n_terms, r.tfs, r.n, r.total, r.dfs"
# Each matched row carries where it lies (its ctid, within the one statement's snapshot), so
# the filter reads its JSONB copy with no index lookup.
_AT_ROW: Final = (
    (
        "SELECT i.seq, i.n_terms, f.* FROM kvmemory_items AS i",
        "SELECT i.seq, i.ctid AS at, i.n_terms, f.* FROM kvmemory_items AS i",
    ),
    ("l.n, l.total, l.dfs\n", "l.n, l.total, l.dfs, m.at\n"),
)


def _score_where_sql(n_terms: int, condition: str) -> str:
    """Return :func:`_score_sql`'s query with only the rows that may pass a filter ranked (``condition``, over ``f`` and ``opaque``).

    The statistics are still the whole session's (every matched row counts
    in the document frequencies); the matched rows are scored and sorted
    first, then the filter is judged on each, best first, until ``k`` pass
    (the subquery kept apart by ``OFFSET 0`` is read in its order, so a row's
    JSONB copy is read only when it is next in line: a filter most rows pass
    reads a few, a rare one each row of the band once).
    """
    sql = _score_sql(n_terms)
    body, band = sql.rsplit(") AS r\n", 1)
    if body.count(_ORDERED) != 1 or band.strip() != _BAND.strip():  # pragma: no cover
        msg = "the filtered keyword query cannot be made from the session's: its shape changed"
        raise RuntimeError(msg)
    order = "r.damaged DESC, r.score DESC, r.seq"
    fields = POSTGRES_FIELDS.format(doc="o.doc")
    for one, other in _AT_ROW:
        if body.count(one) != 1:  # pragma: no cover
            msg = f"the filtered keyword query cannot be made from the session's: {one!r} is gone"
            raise RuntimeError(msg)
        body = body.replace(one, other)
    return (
        body.replace(_ORDERED, f"SELECT {_COLUMNS} FROM (SELECT * FROM (\n    SELECT m.seq,")
        + f""") AS r
WHERE r.damaged OR %(cut)s::float8 IS NULL OR r.score >= %(cut)s
ORDER BY {order} OFFSET 0
) AS r
WHERE EXISTS (
    SELECT 1 FROM kvmemory_items AS o CROSS JOIN LATERAL ({fields}) AS w
    WHERE o.ctid = r.at AND {condition}
)
ORDER BY {order}
LIMIT %(k)s
"""
    )


def _named(condition: str, params: Sequence[Any]) -> tuple[str, dict[str, Any]]:
    """Return a condition written with ``%s`` parameters as one with named ones (``f0``, ``f1``, ...)."""
    parts = condition.split("%s")
    if len(parts) != len(params) + 1:  # pragma: no cover - guards the writer's spelling
        msg = f"a filter condition has {len(parts) - 1} placeholders for {len(params)} parameters"
        raise RuntimeError(msg)
    named = parts[0] + "".join(f"%(f{j})s{part}" for j, part in enumerate(parts[1:]))
    return named, {f"f{j}": value for j, value in enumerate(params)}


def _score_many_sql(n_terms: int) -> str:
    """Return the query for BM25 over several sessions ranked as one corpus (a store-wide search).

    :func:`_score_sql` over the rows of every session in ``sids`` that the
    tsvector matches (each session's rows with its own lexemes), with the
    sessions' counts summed: a term's document frequency is the number of
    those rows holding it. The rows carry their session id last; ties go by
    session id (by code point), then seq.
    """
    sql = _score_sql(n_terms)
    for one, many in _MANY_SESSIONS:
        if one not in sql:  # pragma: no cover - guards the two queries drifting apart
            msg = f"the store-wide keyword query cannot be made from the session's: {one!r} is gone"
            raise RuntimeError(msg)
        sql = sql.replace(one, many)
    return sql


_MANY_SESSIONS: Final = (
    (
        "SELECT n_items::float8 AS n, n_terms::float8 AS total FROM kvmemory_sessions\n"
        "    WHERE session_id = %(sid)s AND NOT deleted AND n_items > 0",
        "SELECT sum(n_items)::float8 AS n, sum(n_terms)::float8 AS total FROM kvmemory_sessions\n"
        "    WHERE session_id = ANY(%(sids)s) AND NOT deleted HAVING sum(n_items) > 0",
    ),
    # Each session's rows are matched with its own lexemes (a query the size of one
    # session's, not one OR of every session's, which each row would be tested against).
    (
        "SELECT i.seq, i.n_terms, f.* FROM kvmemory_items AS i CROSS JOIN LATERAL (",
        "SELECT i.session_id, i.seq, i.n_terms, f.*"
        " FROM unnest(%(sids)s::text[], %(queries)s::text[]) AS q(sid, query)"
        " CROSS JOIN LATERAL (SELECT * FROM kvmemory_items AS o"
        " WHERE o.session_id = q.sid AND o.terms @@ q.query::tsquery) AS i CROSS JOIN LATERAL (",
    ),
    ("WHERE i.session_id = %(sid)s AND i.terms @@ %(query)s::tsquery", "WHERE true"),
    ("o.session_id = %(sid)s AND", "o.session_id = m.session_id AND"),
    ("l.n, l.total, l.dfs\n", "l.n, l.total, l.dfs, m.session_id\n"),
    ("r.score DESC, r.seq", 'r.score DESC, r.session_id COLLATE "C", r.seq'),
)
"""What :func:`_score_many_sql` changes in :func:`_score_sql`'s query: ``(text, replacement)``."""


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
d AS MATERIALIZED (SELECT t, count(*)::float8 AS d FROM f GROUP BY t),
l AS MATERIALIZED (
    SELECT d.t, q.w * greatest(ln(1.0 + (s.n - d.d + 0.5) / (d.d + 0.5)),
        %(idf_floor)s * ln(1.0 + (s.n - 0.5) / 1.5)) * %(scale)s AS lift
    FROM d JOIN q USING (t) CROSS JOIN s
),
slope AS MATERIALIZED (
    SELECT %(k1b)s / (CASE WHEN s.total > 0 THEN s.total / s.n ELSE 1.0 END) AS slope FROM s
),
scored AS (
    SELECT m.seq,
        coalesce(sum(l.lift * (f.f / (f.f + %(flat)s + slope.slope * m.n_terms) + %(floor)s)), 0.0)
            AS score,
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


# The rows a rare filter may keep, with what BM25 needs to score them as _score_sql does:
# the session's counts and each query term's document frequency over the rows the
# tsvector matches (a row matched only by its overflow lexeme counts if its tf holds
# the term, as count(m.f) counts it there), in one pass, each row's counts read once
# (see _score_sql).
def _among_sql(n_terms: int) -> str:
    """Return the query for the rows ``seqs`` with the session's counts and each of ``n_terms`` terms' document frequency."""
    frequencies = ", ".join(f"count(*) FILTER (WHERE c.tf ? %(t{j})s)" for j in range(n_terms))
    return f"""
WITH s AS (
    SELECT n_items, n_terms FROM kvmemory_sessions
    WHERE session_id = %(sid)s AND NOT deleted AND n_items > 0
),
d AS MATERIALIZED (
    SELECT ARRAY[{frequencies}]::bigint[] AS dfs
    FROM kvmemory_items AS i CROSS JOIN LATERAL (SELECT i.tf || '{{}}'::jsonb AS tf OFFSET 0) AS c
    WHERE i.session_id = %(sid)s AND i.terms @@ %(query)s::tsquery
)
SELECT i.seq, i.n_terms, i.tf, s.n_items, s.n_terms, d.dfs
FROM kvmemory_items AS i CROSS JOIN s CROSS JOIN d
WHERE i.session_id = %(sid)s AND i.seq = ANY(%(seqs)s::bigint[])
"""


_HELD: Final = """
SELECT i.seq, ARRAY(SELECT t FROM unnest(%(names)s::text[]) AS t WHERE i.tf ? t)
FROM kvmemory_items AS i
WHERE i.session_id = %(sid)s AND i.seq = ANY(%(seqs)s::bigint[])
"""
"""The query terms (``names``) each of some rows (``seqs``) of a session holds, from its counts."""


# Each query term's document frequency in the session, as _score_sql counts it: the rows the
# tsvector matches (a term's lexeme or the overflow one) whose counts hold the term, each
# row's counts read once (see _score_sql). A column per term (a third faster than joining
# the terms as rows, 3,000 crowded steps), and the terms as rows past _COLUMN_TERMS.
def _frequencies_sql(n_terms: int) -> str:
    """Return the query for each of ``n_terms`` terms' document frequency in the session, one column each."""
    frequencies = ", ".join(f"count(*) FILTER (WHERE c.tf ? %(t{j})s)" for j in range(n_terms))
    return f"""
SELECT ARRAY[{frequencies}]::bigint[] AS dfs
FROM kvmemory_items AS i CROSS JOIN LATERAL (SELECT i.tf || '{{}}'::jsonb AS tf OFFSET 0) AS c
WHERE i.session_id = %(sid)s AND i.terms @@ %(query)s::tsquery
"""


_FREQUENCIES_OF_MANY: Final = """
WITH m AS MATERIALIZED (
    SELECT i.tf || '{}'::jsonb AS tf FROM kvmemory_items AS i
    WHERE i.session_id = %(sid)s AND i.terms @@ %(query)s::tsquery
)
SELECT q.t, count(*) FROM m JOIN unnest(%(names)s::text[]) AS q(t) ON m.tf ? q.t GROUP BY q.t
"""


# The rows ``seqs`` of a session with their length and each query term's count (``names``, in
# order; NULL where the row holds none): what among() scores when the session's statistics
# are kept from the same query's ranking (a lookup by key, no pass over the matched rows).
_ROWS_COUNTS: Final = """
SELECT i.seq, i.n_terms,
    ARRAY(SELECT (i.tf ->> q.t)::bigint FROM unnest(%(names)s::text[]) WITH ORDINALITY AS q(t, o) ORDER BY q.o)
FROM kvmemory_items AS i
WHERE i.session_id = %(sid)s AND i.seq = ANY(%(seqs)s::bigint[])
"""


class Judge(NamedTuple):
    """A filter as the store judges it in SQL (sound, never exact): which rows may pass, among some seqs or of the whole session."""

    among: Callable[[Sequence[int]], set[int] | None]
    """The seqs among some that may pass (``None``: SQL cannot judge the filter)."""
    candidates: Callable[[], set[int] | None]
    """The seqs of every row of the session that may pass (``None`` likewise)."""
    named: bool = True
    """Whether an index names those rows (``False``: :attr:`candidates` reads every row's JSONB copy)."""


_RANKED_FIRST: Final = 1024
"""Rows a filtered ranking from the blocks ranks first, and has SQL judge by key (a few ms)."""
_JUDGED_FIRST: Final = 64
"""Rows of that ranking SQL judges first (or ``4 * k``): the rest only when too few of them may pass."""
_SCORED_ALONE: Final = 4096
"""The most rows that may pass a filter that are scored alone (by key); more are found down longer rankings."""
_RANKED_DEEP: Final = 16384
"""Rows a filtered ranking ranks first where no index names the rows that may pass (see ``_walk``)."""
_WALKED_SHARE: Final = 0.1
"""The share of a session's rows a filtered ranking walks and judges by key, deeper than :data:`_RANKED_FIRST`,
before it has every row's JSONB copy read instead (a filter no index names: a range, ``$ne``)."""
_WALK_GROWTH: Final = 1.5
"""How much further each slice of that walk judges (rows judged so far times this): a slice judged past the
``k``-th passing row is time lost, and each slice costs a statement (1-2 ms)."""


class Statistics(NamedTuple):
    """A session's BM25 statistics as one ranking statement read them: items, terms, each query term's document frequency."""

    n_items: int
    total: int
    dfs: dict[str, int]


# What the ranking statements of the search under way (PostgresKeywordIndex.scope) read, by
# (index, session id); None outside a search. A context variable, so that threads (and the
# async store's calls) searching one store at once each keep their own.
_KEPT: contextvars.ContextVar[dict[tuple[object, str], Statistics] | None] = contextvars.ContextVar(
    "kvmemory_postgres_search_statistics", default=None
)


class PostgresKeywordIndex:
    """The keyword index of a PostgreSQL store's rows: what each write fills in, and BM25 over it.

    Args:
        query_rows: Runs one ranking statement (rows the GIN index matches)
            and returns its rows.
        url: Names the store in messages.
        lookup_rows: Runs one statement that looks rows up by key and
            returns its rows (``query_rows`` where not given).
    """

    def __init__(
        self,
        query_rows: Callable[[str, Any], list[Any]],
        *,
        url: str,
        lookup_rows: Callable[[str, Any], list[Any]] | None = None,
    ) -> None:
        self._query_rows = query_rows
        self._lookup_rows = lookup_rows or query_rows
        self._url = url
        self._blocks: PostingBlocks | None = None

    def rank_from(self, blocks: PostingBlocks | None) -> None:
        """Rank, count and score from the posting blocks (schema version 9), or from the rows (``None``: older tables opened read-only).

        From the blocks: :meth:`top`, :meth:`top_sessions`, :meth:`frequencies`
        and :meth:`among`, and :meth:`top_where`'s ranking (the filter judged
        on the rows). From the rows always: :meth:`held`.
        """
        self._blocks = blocks

    @staticmethod
    def columns(
        session_id: str, rows: Sequence[Row], terms: Sequence[Terms] | None
    ) -> dict[str, list[Any]]:
        """Return the index columns of rows as arrays, for the insert and update statements.

        Args:
            session_id: The rows' session (its id prefixes every lexeme).
            rows: The rows, whose data is decoded for its terms when ``terms`` is ``None``.
            terms: Each row's search terms, as the store computed them.

        Returns:
            ``{"terms": tsvector literals, "n_terms": counts, "tfs": JSON objects}``, one per row.
        """
        if terms is None:
            terms = [_terms_of_data(data) for _, _, data in rows]
        columns = [_index_columns(session_id, row_terms) for row_terms in terms]
        return {
            "terms": [vector for vector, _, _ in columns],
            "n_terms": [n for _, n, _ in columns],
            "tfs": [tf for _, _, tf in columns],
        }

    def top(self, session_id: str, terms: Sequence[str], k: int) -> list[tuple[float, int]]:
        """Return the session's ``k`` best ``(score, seq)`` by BM25, as ``Memory.search`` scores them.

        One statement over the ``tsvector`` index scores the rows in SQL; the
        rows near the ``k``-th are scored again in Python from the counts it
        returns, so the scores are RAM's to the bit.

        Args:
            session_id: The session searched.
            terms: The query's terms, with repeats.
            k: How many rows to return at most (> 0).

        Raises:
            CorruptStoreError: if a row the index matches holds no query term in its counts.
        """
        sid = session_id
        if self._blocks is not None:
            try:
                ranked = self._blocks.top(sid, terms, k)
            except DamagedBlockError as exc:
                raise self.damaged("search", f" session {sid!r} of", str(exc)) from exc
            self._keep_statistics(sid, Statistics(ranked.n_items, ranked.total, ranked.dfs))
            return ranked.best
        weights = Counter(terms)
        names = list(weights)
        params = self._params(sid, names, k)
        if len(names) > _COLUMN_TERMS:
            # A column per term would pass PostgreSQL's 1,664 columns and 65,535 parameters.
            params["weights"] = [float(weights[term]) for term in names]
            sql = _SCORE_ARRAYS
        else:
            params.update((f"t{j}", term) for j, term in enumerate(names))
            params.update((f"w{j}", float(weights[term])) for j, term in enumerate(names))
            sql = _score_sql(len(names))
        # One statement, so one snapshot: the counts, the IDFs and the scores agree.
        rows = self._top_rows(sql, params, k)
        if rows and rows[0][2]:
            reason = f"row {rows[0][0]} matches a query term its counts do not hold"
            raise self.damaged("search", f" session {sid!r} of", reason)
        self._keep(sid, names, rows)
        return _exact_top(rows, terms, names, k)

    def top_where(
        self,
        session_id: str,
        terms: Sequence[str],
        k: int,
        tree: FilterNode,
        judge: Judge | None = None,
    ) -> list[tuple[float, int]] | None:
        """Return the ``k`` best ``(score, seq)`` by BM25 among the rows that may pass a filter, as :meth:`top` scores them.

        From the blocks (:meth:`rank_from`), with ``judge`` (the store's
        SQL judgement of the filter): see :meth:`_top_passing`. From the
        rows, one statement: :meth:`top`'s, the rows that SQL finds cannot pass
        ``tree`` (``_sql.filters``: sound, never exact) left out of the
        ranking, not out of the statistics. The rows returned are still to be
        tested with the filter. ``None`` when SQL cannot narrow the filter,
        or (from the rows) the query has more distinct terms than :data:`_COLUMN_TERMS`.

        Raises:
            CorruptStoreError: if a row the index matches, that may pass, holds no query term in its counts.
        """
        written = postgres_condition(tree)
        if written is None:
            return None
        if self._blocks is not None and judge is not None:
            return self._top_passing(session_id, terms, k, judge)
        weights = Counter(terms)
        if len(weights) > _COLUMN_TERMS:
            return None
        condition, bound = _named(*written)
        sid = session_id
        names = list(weights)
        params = self._params(sid, names, k)
        params.update(bound)
        params.update((f"t{j}", term) for j, term in enumerate(names))
        params.update((f"w{j}", float(weights[term])) for j, term in enumerate(names))
        rows = self._top_rows(_score_where_sql(len(names), condition), params, k)
        if rows and rows[0][2]:
            reason = f"row {rows[0][0]} matches a query term its counts do not hold"
            raise self.damaged("search", f" session {sid!r} of", reason)
        self._keep(sid, names, rows)
        return _exact_top(rows, terms, names, k)

    def _top_passing(
        self, sid: str, terms: Sequence[str], k: int, judge: Judge
    ) -> list[tuple[float, int]] | None:
        """Return :meth:`top_where`'s answer from the blocks: the best of the ranking that may pass, or the few rows that may pass scored alone.

        The blocks rank :data:`_RANKED_FIRST` rows (or ``4 * k``) as
        :meth:`top` ranks them, and SQL judges those rows by key
        (``judge.among``: the first :data:`_JUDGED_FIRST`, then the rest):
        a filter that keeps many rows leaves ``k`` of them there. Otherwise
        SQL names every row that may pass (``judge.candidates``, from an
        index): up to :data:`_SCORED_ALONE` are scored alone (:meth:`among`,
        the statistics of the ranking's snapshot); more are found down
        longer rankings. A filter no index names (``judge.named`` false: a
        range, ``$ne``) is walked instead (:func:`_walk`), and its candidates
        read from every row's JSONB copy only past :data:`_WALKED_SHARE` of
        the session. The scores are :meth:`top`'s either way: ``Memory.search``'s.
        """
        if not judge.named:
            return _walk(self, sid, terms, k, judge)
        limit = max(4 * k, _RANKED_FIRST)
        ranked = self.top(sid, terms, limit)
        if not ranked:
            return []
        best: list[tuple[float, int]] = []
        for part in (ranked[: max(4 * k, _JUDGED_FIRST)], ranked[max(4 * k, _JUDGED_FIRST) :]):
            may_pass = judge.among([seq for _, seq in part]) if part else set()
            if may_pass is None:
                return None
            best += [hit for hit in part if hit[1] in may_pass]
            if len(best) >= k:
                return best[:k]
        if len(ranked) < limit:
            return best
        return _among_candidates(self, sid, terms, k, judge, ranked, limit)

    @staticmethod
    def _params(sid: str, names: Sequence[str], k: int) -> dict[str, Any]:
        """Return the parameters every scoring statement of one session takes."""
        queries = [f"'{_lexeme(sid, term)}'" for term in names]
        overflow = f"'{_overflow(sid)}'"
        return {
            "sid": sid,
            "query": " | ".join([*queries, overflow]),
            "overflow": overflow,
            "names": list(names),
            **_ranking(k),
        }

    def _top_rows(self, sql: str, params: dict[str, Any], k: int) -> list[Any]:
        """Run a scoring statement for ``k`` rows and its spares, and again for every row that ties past them."""
        rows = self._query_rows(sql, params)
        if len(rows) == k + _SPARE and rows[-1][1] >= rows[k - 1][1] / _MARGIN**2:
            # Items tie with the k-th to rounding past the spare rows: take every one.
            rows = self._query_rows(sql, {**params, "k": None, "cut": rows[k - 1][1] / _MARGIN**2})
        return rows

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        """Keep, for the block (one search), the statistics each ranking statement reads, for the search's later calls.

        Inside it :meth:`frequencies`, :meth:`among` and :meth:`counted` of a
        session answer from the statistics a :meth:`top` or
        :meth:`top_where` of the same block read (its snapshot) instead of
        counting the matched rows again. Nothing is kept past the block;
        nested, the outer block's statistics are used.
        """
        if _KEPT.get() is not None:
            yield
            return
        token = _KEPT.set({})
        try:
            yield
        finally:
            _KEPT.reset(token)

    @staticmethod
    def forget() -> None:
        """Drop the statistics kept in the search under way (this handle wrote: they may be out of date)."""
        kept = _KEPT.get()
        if kept:
            kept.clear()

    def _keep(self, sid: str, names: Sequence[str], rows: Sequence[Any]) -> None:
        """Keep the statistics a ranking statement returned with its rows, where a search is under way (:meth:`scope`).

        The first statement's are kept; a later one's add the terms it
        counted only where the session's counts read the same (else it saw
        another snapshot, and the first stays whole).
        """
        if not rows:
            return
        _, _, _, _, _, n_items, total, dfs = rows[0][:8]
        counted = {term: int(df or 0) for term, df in zip(names, dfs, strict=True)}
        self._keep_statistics(sid, Statistics(int(n_items), int(total), counted))

    def _keep_statistics(self, sid: str, found: Statistics) -> None:
        """Keep a ranking's statistics where a search is under way (see :meth:`_keep`); none for an empty session."""
        kept = _KEPT.get()
        if kept is None or not found.n_items:
            return
        counted = found.dfs
        before = kept.get((self, sid))
        if before is None:
            kept[(self, sid)] = found
        elif before[:2] == found[:2]:
            before.dfs.update((t, df) for t, df in counted.items() if t not in before.dfs)

    def _kept(self, sid: str, names: Sequence[str]) -> Statistics | None:
        """Return the session's statistics kept in the search under way, where they count every term of ``names``."""
        kept = _KEPT.get()
        found = None if kept is None else kept.get((self, sid))
        if found is None or any(term not in found.dfs for term in names):
            return None
        return found

    def counted(self, session_id: str) -> int | None:
        """Return the session's item count as a ranking of the search under way read it, or ``None`` (none kept)."""
        found = self._kept(session_id, ())
        return None if found is None else found.n_items

    def among(
        self, session_id: str, terms: Sequence[str], seqs: Sequence[int]
    ) -> list[tuple[float, int]] | None:
        """Return ``(score, seq)`` by BM25 of the rows among ``seqs`` holding a query term, best first (ties by seq).

        One statement (one snapshot) counts each query term's document
        frequency over the session's rows the ``tsvector`` index matches, as
        :meth:`top` counts it, and reads the counts of the rows ``seqs``
        only; they are scored in Python as :meth:`top` scores its rows, so
        a row's score is the same float either way. ``None`` for a query of
        more distinct terms than :data:`_COLUMN_TERMS` (the store then ranks
        with :meth:`top`). Inside a search (:meth:`scope`) whose ranking
        counted every query term, its statistics are used and only the rows
        ``seqs`` are looked up, by key: the scores :meth:`top` gave them.
        """
        sid = session_id
        names = list(dict.fromkeys(terms))
        kept = self._kept(sid, names)
        if kept is not None:
            return self._among_kept(sid, terms, names, seqs, kept)
        if self._blocks is not None:
            return self._blocks.among(sid, terms, seqs)
        if len(names) > _COLUMN_TERMS:
            return None  # a column per term would pass PostgreSQL's limits: top ranks
        query = " | ".join([*(f"'{_lexeme(sid, term)}'" for term in names), f"'{_overflow(sid)}'"])
        params: dict[str, Any] = {"sid": sid, "query": query, "seqs": list(seqs)}
        params.update((f"t{j}", term) for j, term in enumerate(names))
        rows = self._query_rows(_among_sql(len(names)), params)
        if not rows:
            return []
        _, _, _, n_items, total, frequencies = rows[0]
        df = {term: int(count) for term, count in zip(names, frequencies, strict=True) if count}
        weighted = query_weights(terms, df, int(n_items))
        average = bm25_average_length(int(total), int(n_items))
        scored = []
        for seq, length, held, _, _, _ in rows:
            tf = held or {}
            counts = {term: int(tf[term]) for term in names if tf.get(term)}
            if counts:
                scored.append((bm25_score(counts, int(length), weighted, average), int(seq)))
        return sorted(scored, key=lambda hit: (-hit[0], hit[1]))

    def _among_kept(
        self,
        sid: str,
        terms: Sequence[str],
        names: list[str],
        seqs: Sequence[int],
        kept: Statistics,
    ) -> list[tuple[float, int]]:
        """Return :meth:`among`'s scores with the statistics the search's ranking read: only the rows ``seqs`` are looked up."""
        rows = self._lookup_rows(_ROWS_COUNTS, {"sid": sid, "names": names, "seqs": list(seqs)})
        weighted = query_weights(terms, {t: df for t, df in kept.dfs.items() if df}, kept.n_items)
        average = bm25_average_length(kept.total, kept.n_items)
        scored = []
        for seq, length, tfs in rows:
            counts = {term: int(tf) for term, tf in zip(names, tfs, strict=True) if tf}
            if counts:
                scored.append((bm25_score(counts, int(length), weighted, average), int(seq)))
        return sorted(scored, key=lambda hit: (-hit[0], hit[1]))

    def held(
        self, session_id: str, terms: Sequence[str], seqs: Sequence[int]
    ) -> dict[int, set[str]]:
        """Return the terms among ``terms`` each row among ``seqs`` holds, by seq, from the rows' counts (``tf``, which hold every term), in one statement; rows holding none are left out."""
        names = list(dict.fromkeys(terms))
        if not names or not seqs:
            return {}
        params = {"sid": session_id, "names": names, "seqs": list(seqs)}
        rows = self._lookup_rows(_HELD, params)
        return {int(seq): set(holding) for seq, holding in rows if holding}

    def frequencies(self, session_id: str, terms: Sequence[str]) -> dict[str, int]:
        """Return how many of the session's items hold each of ``terms``: the document frequencies BM25 counts.

        One statement over the rows the ``tsvector`` index matches (a term's
        lexeme, or the overflow one), each row's counts read once: a term's
        frequency is the number of those rows whose counts hold it, as
        :meth:`top` counts it. Every distinct term is a key (0 where no item
        holds it). Inside a search (:meth:`scope`) whose ranking counted
        every term, no statement: its counts are returned.
        """
        sid = session_id
        names = list(dict.fromkeys(terms))
        if not names:
            return {}
        kept = self._kept(sid, names)
        if kept is not None:  # the search's ranking counted them, in its snapshot
            return {term: kept.dfs[term] for term in names}
        if self._blocks is not None:
            return self._blocks.frequencies(sid, names)
        query = " | ".join([*(f"'{_lexeme(sid, term)}'" for term in names), f"'{_overflow(sid)}'"])
        params: dict[str, Any] = {"sid": sid, "query": query}
        if len(names) > _COLUMN_TERMS:
            # A column per term would pass PostgreSQL's 1,664 columns and 65,535 parameters.
            rows = self._query_rows(_FREQUENCIES_OF_MANY, {**params, "names": names})
            counted = {str(term): int(count) for term, count in rows}
            return {term: counted.get(term, 0) for term in names}
        params.update((f"t{j}", term) for j, term in enumerate(names))
        rows = self._query_rows(_frequencies_sql(len(names)), params)
        counts = rows[0][0] if rows else [0] * len(names)
        return {term: int(count) for term, count in zip(names, counts, strict=True)}

    def top_sessions(
        self, session_ids: Sequence[str], terms: Sequence[str], k: int
    ) -> list[tuple[float, str, int]] | None:
        """Return the ``k`` best ``(score, session_id, seq)`` by BM25 over several sessions as one corpus.

        From the blocks (:meth:`rank_from`): ``PostingBlocks.top_sessions``,
        one statement, as :meth:`top` reads one session. From the rows, one
        statement over the ``tsvector`` index scores the rows of all the
        sessions with their counts summed (:func:`_score_many_sql`); the rows
        near the ``k``-th are scored again in Python, so the scores are those
        of ``Memory.search`` over the sessions' union, to the bit. ``None``
        for a query of more distinct terms than :data:`_COLUMN_TERMS` (the
        store then reads the sessions and scores them).

        Raises:
            CorruptStoreError: if a row the index matches holds no query term in its counts.
        """
        if self._blocks is not None and session_ids:
            try:
                return self._blocks.top_sessions(session_ids, terms, k)
            except DamagedBlockError as exc:
                raise self.damaged("search", "", str(exc)) from exc
        weights = Counter(terms)
        names = list(weights)
        if len(names) > _COLUMN_TERMS or not session_ids:
            return None if session_ids else []
        queries = [
            " | ".join([*(f"'{_lexeme(sid, term)}'" for term in names), f"'{_overflow(sid)}'"])
            for sid in session_ids
        ]
        overflow = " | ".join(f"'{_overflow(sid)}'" for sid in session_ids)
        params: dict[str, Any] = {
            "sids": list(session_ids),
            "queries": queries,
            "overflow": overflow,
            "names": names,
            **_ranking(k),
        }
        params.update((f"t{j}", term) for j, term in enumerate(names))
        params.update((f"w{j}", float(weights[term])) for j, term in enumerate(names))
        sql = _score_many_sql(len(names))
        rows = self._top_rows(sql, params, k)
        if rows and rows[0][2]:
            reason = f"row {rows[0][0]} of session {rows[0][8]!r} matches a query term its counts do not hold"
            raise self.damaged("search", "", reason)
        if not rows:
            return []
        if len(rows) > k:
            cut = rows[k - 1][1] / _MARGIN**2
            rows = [row for row in rows if row[1] >= cut]
        _, _, _, _, _, n_items, total, dfs, _ = rows[0]
        df = {term: int(count) for term, count in zip(names, dfs, strict=True) if count}
        weighted = query_weights(terms, df, int(n_items))
        average = bm25_average_length(int(total), int(n_items))
        scored = []
        for seq, _, _, length, tfs, _, _, _, sid in rows:
            counts = {term: int(tf) for term, tf in zip(names, tfs, strict=True) if tf}
            scored.append((bm25_score(counts, int(length), weighted, average), str(sid), int(seq)))
        return heapq.nsmallest(k, scored, key=lambda hit: (-hit[0], hit[1], hit[2]))

    @staticmethod
    def names_damage(message: str) -> bool:
        """Return whether a server error message names a part of the index (dropped or altered outside kvmemory)."""
        return any(name in message for name in _INDEX_NAMES)

    def damaged(self, action: str, where: str, reason: str) -> CorruptStoreError:
        """Return the error for a damaged or missing index, pointing at ``rebuild_keyword_index``.

        Args:
            action: What the call did, as in ``"Cannot {action}..."``.
            where: ``" session 'id' of"``, or ``""`` for a call on the whole store.
            reason: What was found wrong.
        """
        msg = (
            f"Cannot {action}{where} PostgreSQL store {self._url}: its keyword index is damaged or "
            f"missing ({reason}); nothing was changed. Rebuild the index from the stored items "
            "with store.rebuild_keyword_index()."
        )
        return CorruptStoreError(msg)


def _among_candidates(
    index: PostgresKeywordIndex,
    sid: str,
    terms: Sequence[str],
    k: int,
    judge: Judge,
    ranked: list[tuple[float, int]],
    limit: int,
) -> list[tuple[float, int]] | None:
    """Return :meth:`PostgresKeywordIndex._top_passing`'s answer from every row that may pass (``judge.candidates``), past a ranking ``limit`` deep (``ranked``) that held too few."""
    allowed = judge.candidates()
    if allowed is None:
        return None
    if len(allowed) <= _SCORED_ALONE:
        scored = index.among(sid, terms, sorted(allowed))
        return None if scored is None else scored[:k]
    best = [hit for hit in ranked if hit[1] in allowed]
    while len(best) < k and len(ranked) == limit:
        limit *= 8
        ranked = index.top(sid, terms, limit)
        best = [hit for hit in ranked if hit[1] in allowed]
    return best[:k]


def _walk(
    index: PostgresKeywordIndex, sid: str, terms: Sequence[str], k: int, judge: Judge
) -> list[tuple[float, int]] | None:
    """Return :meth:`PostgresKeywordIndex._top_passing`'s answer for a filter no index names: rankings judged by key in growing slices, up to :data:`_WALKED_SHARE` of the session.

    A ranking costs about the same at any depth (every matched row is
    scored: 100,000 steps, 100-130 ms at 1,024 rows or 25,000), judging
    a row by key costs each row (its JSONB copy read, about 20 us): so
    the session is ranked :data:`_RANKED_DEEP` rows deep (then, if need
    be, to the share) and judged in slices, the first
    :data:`_JUDGED_FIRST` (or ``4 * k``), each next one to
    :data:`_WALK_GROWTH` times the rows judged, until ``k`` may pass or
    the ranking holds no more rows (the answer either way: a row no
    query term matches is no hit). Past the share, every row's copy is
    read in one pass, which costs less per row than by key
    (:func:`_among_candidates`). ``None`` where SQL cannot judge the filter.
    """
    limit = max(4 * k, _RANKED_DEEP)
    ranked = index.top(sid, terms, limit)
    n_items = index.counted(sid)
    budget = max(_RANKED_FIRST, int((n_items or 0) * _WALKED_SHARE))
    found: list[tuple[float, int]] = []
    judged = 0
    while True:
        while judged < min(len(ranked), budget):
            upto = min(budget, max(4 * k, _JUDGED_FIRST, int(judged * _WALK_GROWTH)))
            part = ranked[judged:upto]
            may_pass = judge.among([seq for _, seq in part])
            if may_pass is None:
                return None
            found += [hit for hit in part if hit[1] in may_pass]
            judged += len(part)
            if len(found) >= k:
                return found[:k]
        whole = len(ranked) < limit or (n_items is not None and len(ranked) >= n_items)
        if whole and judged == len(ranked):
            return found  # every row the query matches was judged
        if judged >= budget:
            return _among_candidates(index, sid, terms, k, judge, ranked, limit)
        limit = budget
        ranked = index.top(sid, terms, limit)
