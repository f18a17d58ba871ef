"""The posting blocks of a PostgreSQL store: each term's items in a few rows, kept by triggers, and BM25 over them.

Schema version 9 adds ``kvmemory_postings``: for each (session, term) a few
blocks, each one row holding the term's postings as three arrays in the
same order, the items' seqs (``bigint[]``), the term's count in each
(``tf``) and each item's length (``n_terms``), with their number ``n`` and
lowest and highest seq (``lo``, ``hi``). A term longer than
:data:`_LONGEST_TERM` bytes is filed under ``"#"`` and its SHA-256 digest
(``"#"`` is never part of a term), as the ``tsvector`` files it.

Statement triggers on ``kvmemory_items`` keep the blocks, in the writing
statement, so in its transaction and under the session's lock every writer
takes first (see ``backend``), whatever the statement and whichever
kvmemory wrote it. They keep them in bulk: a session's blocks hold its rows
up to a mark (``kvmemory_postings_folded``), and the rows above it (the
newest ones: seqs grow) are *unfolded*, read from the rows by a ranking:

* an insert files nothing (a one-step append wrote ~100 block rows of
  kilobytes, one per distinct term, ~10 ms of server time);
* a delete of a row at or below the mark, or an update that changes its
  counts, logs it in ``kvmemory_postings_stale`` with the counts the blocks
  hold for it (the first version logged): its postings in the blocks no
  longer count, and the row, if still there, is read as unfolded; a delete
  or update above the mark needs nothing; a session left without rows
  loses its blocks and stale rows at once;
* the statement that leaves a session more than ``kvmemory.fold_rows``
  (a server setting, :data:`FOLD_ROWS` where unset) unfolded rows (seqs
  reserved above the mark, plus stale rows) *folds* them: the stale rows'
  postings leave the blocks, the unfolded rows' postings join each term's
  newest block while it keeps at most :data:`BLOCK_ROOM` postings, else a
  new block (a batch's common terms: one block each), and the mark moves
  up to the session's ``next_seq``. One write per term per fold, instead
  of one per append.

A keyword ranking then reads the query terms' blocks, the unfolded rows'
counts of them, the stale seqs and the session's counts in one statement
(one snapshot), never the folded rows: at 100,000 steps a
word in every step is ~200 blocks of postings, where the rows' ranking read
every row holding it. BM25+ is summed per seq in query order, as
``bm25_score`` sums it (numpy where installed, else Python: the same
floats), so hits, scores and ties are ``Memory.search``'s.
"""

from __future__ import annotations

import hashlib
import heapq
import struct
from collections.abc import Callable, Sequence
from typing import Any, Final, NamedTuple, Protocol, TypeVar

from agents.memory._text import BM25_B, BM25_FLOOR, BM25_K1, bm25_average_length, bm25_term_score
from agents.memory.stores._core.terms import bm25_score, query_weights

__all__ = [
    "BLOCK_ROOM",
    "FOLD_ROWS",
    "DamagedBlockError",
    "PostingBlocks",
    "build_postings",
    "drop_posting_triggers",
    "pack_blocks",
    "posting_key",
]

BLOCK_ROOM: Final = 512
"""The most postings a write adds to a term's newest block; more go to a new block."""

_LONGEST_TERM: Final = 1000
"""Bytes of a term kept as its key; a longer one is filed under its digest (a btree key holds ~2.7 kB)."""

_KEY_FUNCTION: Final = f"""CREATE OR REPLACE FUNCTION kvmemory_posting_key(term text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN octet_length(term) <= {_LONGEST_TERM} THEN term
        ELSE '#' || encode(sha256(convert_to(term, 'UTF8')), 'hex') END
$$"""


def posting_key(term: str) -> str:
    """Return the key a term's blocks are filed under (as ``kvmemory_posting_key`` computes it)."""
    if len(term.encode("utf-8")) <= _LONGEST_TERM:
        return term
    return "#" + hashlib.sha256(term.encode("utf-8")).hexdigest()


def _key_sql(term: str) -> str:
    """Return the SQL expression of a term's key: the term itself, or (rarely) ``kvmemory_posting_key``'s digest.

    The function is called only for long terms: a call per posting (it is
    not inlined, as ``convert_to`` is not immutable) was a third of a
    batch's filing.
    """
    return f"CASE WHEN octet_length({term}) <= {_LONGEST_TERM} THEN {term} ELSE kvmemory_posting_key({term}) END"


def _add_sql(rows: str) -> str:
    """Return the statement that files the postings of ``rows`` (a relation of item rows: session_id, seq, tf, n_terms).

    The three arrays of a block are aggregated from the same rows in one
    pass, so they agree position by position; their order is not the
    seqs' (no ranking needs it, and sorting was most of a batch's filing).
    """
    return f"""
WITH n AS MATERIALIZED (
    SELECT r.session_id, {_key_sql("e.key")} AS term, count(*)::int AS k,
        min(r.seq) AS lo, max(r.seq) AS hi, array_agg(r.seq) AS seqs,
        array_agg(e.value::int) AS tfs, array_agg(r.n_terms) AS lens
    FROM {rows} AS r CROSS JOIN LATERAL jsonb_each_text(r.tf) AS e
    GROUP BY 1, 2
),
t AS MATERIALIZED (
    SELECT n.*, b.block FROM n LEFT JOIN LATERAL (
        SELECT p.block, p.n FROM kvmemory_postings AS p
        WHERE p.session_id = n.session_id AND p.term = n.term
        ORDER BY p.block DESC LIMIT 1
    ) AS b ON b.n + n.k <= {BLOCK_ROOM}
),
grown AS (
    UPDATE kvmemory_postings AS p SET n = p.n + t.k, lo = least(p.lo, t.lo),
        hi = greatest(p.hi, t.hi), seqs = p.seqs || t.seqs, tfs = p.tfs || t.tfs,
        lens = p.lens || t.lens
    FROM t
    WHERE t.block IS NOT NULL AND p.session_id = t.session_id AND p.term = t.term
        AND p.block = t.block
)
INSERT INTO kvmemory_postings (session_id, term, n, lo, hi, seqs, tfs, lens)
SELECT t.session_id, t.term, t.k, t.lo, t.hi, t.seqs, t.tfs, t.lens FROM t WHERE t.block IS NULL"""


# The fold's removal: the postings the session's stale rows left in the blocks (their counts
# as the blocks hold them), taken out of every block that may hold one, by grouping the
# block's postings with the dead ones (never a join that could turn into a scan per posting).
_REMOVE_STALE: Final = f"""
WITH o AS MATERIALIZED (
    SELECT {_key_sql("e.key")} AS term, g.seq
    FROM kvmemory_postings_stale AS g CROSS JOIN LATERAL jsonb_object_keys(g.tf) AS e(key)
    WHERE g.session_id = fold_sid
),
r AS MATERIALIZED (SELECT term, min(seq) AS lo, max(seq) AS hi FROM o GROUP BY term),
c AS MATERIALIZED (
    SELECT p.term, p.block, u.s, u.f, u.l
    FROM r JOIN kvmemory_postings AS p ON p.session_id = fold_sid AND p.term = r.term
        AND p.lo <= r.hi AND p.hi >= r.lo
    CROSS JOIN LATERAL unnest(p.seqs, p.tfs, p.lens) AS u(s, f, l)
),
x AS (
    SELECT term, s, max(block) AS block, max(f) AS f, max(l) AS l, bool_or(dead) AS dead
    FROM (
        SELECT term, s, block, f, l, false AS dead FROM c
        UNION ALL SELECT term, seq, NULL, NULL, NULL, true FROM o
    ) AS both_sides
    GROUP BY term, s
),
k AS MATERIALIZED (
    SELECT term, block, count(*) FILTER (WHERE NOT dead)::int AS n,
        min(s) FILTER (WHERE NOT dead) AS lo, max(s) FILTER (WHERE NOT dead) AS hi,
        array_agg(s) FILTER (WHERE NOT dead) AS seqs, array_agg(f) FILTER (WHERE NOT dead) AS tfs,
        array_agg(l) FILTER (WHERE NOT dead) AS lens
    FROM x WHERE block IS NOT NULL GROUP BY term, block HAVING bool_or(dead)
),
gone AS (
    DELETE FROM kvmemory_postings AS p USING k
    WHERE k.n = 0 AND p.session_id = fold_sid AND p.term = k.term AND p.block = k.block
)
UPDATE kvmemory_postings AS p SET n = k.n, lo = k.lo, hi = k.hi, seqs = k.seqs, tfs = k.tfs,
    lens = k.lens
FROM k
WHERE k.n > 0 AND p.session_id = fold_sid AND p.term = k.term AND p.block = k.block"""

# The rows a fold files: those above the mark, and the stale rows still there (updated),
# each looked up by key (LIMIT 1 keeps the lookup per stale row: a join was planned as a
# read of the session's rows to find the stale ones).
_UNFOLDED: Final = """(
    SELECT i.session_id, i.seq, i.tf, i.n_terms FROM kvmemory_items AS i
    WHERE i.session_id = fold_sid AND i.seq > fold_mark AND i.seq <= fold_top
    UNION ALL
    SELECT i.* FROM kvmemory_postings_stale AS g CROSS JOIN LATERAL (
        SELECT i.session_id, i.seq, i.tf, i.n_terms FROM kvmemory_items AS i
        WHERE i.session_id = g.session_id AND i.seq = g.seq LIMIT 1
    ) AS i
    WHERE g.session_id = fold_sid
)"""

FOLD_ROWS: Final = 512
"""Rows a session leaves out of its blocks at most (above the mark, or stale) unless ``kvmemory.fold_rows`` says otherwise."""

# Whether a session's unfolded rows (reserved seqs above its mark, a bound on the rows there,
# and its stale rows) pass the limit: the statement that makes them do folds them.
_DUE: Final = """(SELECT x.next_seq - coalesce(f.seq, 0)
        + (SELECT count(*) FROM kvmemory_postings_stale AS g WHERE g.session_id = x.session_id)
    FROM kvmemory_sessions AS x LEFT JOIN kvmemory_postings_folded AS f ON f.session_id = x.session_id
    WHERE x.session_id = {sid}) > kvmemory_postings_fold_rows()"""

# The stale rows a statement makes: rows at or below their session's mark deleted, or updated
# with other counts. The first version logged is the blocks' (a row updated twice keeps it).
_LOG_STALE: Final = """
        INSERT INTO kvmemory_postings_stale (session_id, seq, tf)
        SELECT o.session_id, o.seq, o.tf FROM {rows} AS o
        JOIN kvmemory_postings_folded AS f ON f.session_id = o.session_id AND o.seq <= f.seq
        ON CONFLICT (session_id, seq) DO NOTHING;
        IF FOUND THEN
            FOR due IN SELECT DISTINCT session_id FROM {rows} AS d LOOP
                IF {due} THEN
                    PERFORM kvmemory_postings_fold(due.session_id);
                END IF;
            END LOOP;
        END IF;"""

# The sessions a delete emptied (deleted or cleared): they lose their blocks and stale rows
# at once, unread, and are folded up to their next_seq (nothing is above it).
_EMPTIED: Final = """ARRAY(SELECT o.session_id FROM (SELECT DISTINCT session_id FROM old_rows) AS o
    WHERE NOT EXISTS (SELECT 1 FROM kvmemory_items AS i WHERE i.session_id = o.session_id))"""
# The rows of a delete whose session still has rows.
_STILL_HELD: Final = "(SELECT * FROM old_rows WHERE NOT (session_id = ANY(emptied)))"
# The rows of an update whose counts changed, before the update.
_CHANGED_OLD: Final = """(SELECT o.* FROM old_rows AS o JOIN new_rows AS w USING (session_id, seq)
    WHERE o.tf IS DISTINCT FROM w.tf OR o.n_terms IS DISTINCT FROM w.n_terms)"""

_FUNCTIONS: Final = (
    _KEY_FUNCTION,
    f"""CREATE OR REPLACE FUNCTION kvmemory_postings_fold_rows() RETURNS bigint LANGUAGE sql STABLE AS $$
    SELECT coalesce(nullif(current_setting('kvmemory.fold_rows', true), '')::bigint, {FOLD_ROWS})
$$""",
    # Under the session's lock (taken here if the writer has not): every row at or below the
    # session's next_seq is then committed or the writer's own, so the mark moves up to it.
    # The plan is small and known: no JIT compiling (it took 0.4-0.7 s of a batch's filing),
    # and postings grouped by hashing: the rows' estimate (a range of seqs the planner does
    # not know) is a few, and it sorted a 10,000-row batch's 800,000 postings on disk (2 s).
    f"""CREATE OR REPLACE FUNCTION kvmemory_postings_fold(fold_sid text) RETURNS void
    LANGUAGE plpgsql SET jit = off SET enable_sort = off AS $$
    DECLARE
        fold_mark bigint;
        fold_top bigint;
    BEGIN
        SELECT next_seq INTO fold_top FROM kvmemory_sessions WHERE session_id = fold_sid FOR UPDATE;
        fold_mark := coalesce(
            (SELECT seq FROM kvmemory_postings_folded WHERE session_id = fold_sid), 0);
        {_REMOVE_STALE};
        {_add_sql(_UNFOLDED)};
        DELETE FROM kvmemory_postings_stale WHERE session_id = fold_sid;
        INSERT INTO kvmemory_postings_folded (session_id, seq) VALUES (fold_sid, fold_top)
        ON CONFLICT (session_id) DO UPDATE SET seq = excluded.seq;
    END $$""",
    # An insert files nothing: its rows are above the mark (seqs grow), read from the rows
    # until a fold. A row inserted at or below the mark (not by kvmemory) is logged stale.
    # The blocks' table is named (never read), so that an insert with it dropped fails and
    # the store names the repair, as one with the other tables dropped does.
    f"""CREATE OR REPLACE FUNCTION kvmemory_postings_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        due record;
    BEGIN
        FOR due IN
            SELECT n.session_id, n.lo <= coalesce(f.seq, 0) AS below
            FROM (SELECT session_id, min(seq) AS lo FROM new_rows GROUP BY session_id) AS n
            LEFT JOIN kvmemory_postings_folded AS f ON f.session_id = n.session_id
            WHERE (n.lo <= coalesce(f.seq, 0) OR {_DUE.format(sid="n.session_id")})
                AND NOT EXISTS (SELECT FROM kvmemory_postings WHERE false)
        LOOP
            IF due.below THEN
                INSERT INTO kvmemory_postings_stale (session_id, seq, tf)
                SELECT r.session_id, r.seq, '{{}}' FROM new_rows AS r
                JOIN kvmemory_postings_folded AS f ON f.session_id = r.session_id AND r.seq <= f.seq
                WHERE r.session_id = due.session_id
                ON CONFLICT (session_id, seq) DO NOTHING;
            END IF;
            IF {_DUE.format(sid="due.session_id")} THEN
                PERFORM kvmemory_postings_fold(due.session_id);
            END IF;
        END LOOP;
        RETURN NULL;
    END $$""",
    f"""CREATE OR REPLACE FUNCTION kvmemory_postings_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        due record;
        emptied text[] := {_EMPTIED};
    BEGIN
        IF cardinality(emptied) > 0 THEN
            DELETE FROM kvmemory_postings WHERE session_id = ANY(emptied);
            DELETE FROM kvmemory_postings_stale WHERE session_id = ANY(emptied);
            DELETE FROM kvmemory_postings_folded WHERE session_id = ANY(emptied);
            INSERT INTO kvmemory_postings_folded (session_id, seq)
            SELECT session_id, next_seq FROM kvmemory_sessions WHERE session_id = ANY(emptied);
        END IF;
        {_LOG_STALE.format(rows=_STILL_HELD, due=_DUE.format(sid="due.session_id"))}
        RETURN NULL;
    END $$""",
    f"""CREATE OR REPLACE FUNCTION kvmemory_postings_updated() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        due record;
    BEGIN
        {_LOG_STALE.format(rows=_CHANGED_OLD, due=_DUE.format(sid="due.session_id"))}
        RETURN NULL;
    END $$""",
)

_TRIGGERS: Final = (
    "CREATE TRIGGER kvmemory_items_postings_insert AFTER INSERT ON kvmemory_items"
    " REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION kvmemory_postings_inserted()",
    "CREATE TRIGGER kvmemory_items_postings_delete AFTER DELETE ON kvmemory_items"
    " REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION kvmemory_postings_deleted()",
    "CREATE TRIGGER kvmemory_items_postings_update AFTER UPDATE ON kvmemory_items"
    " REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows"
    " FOR EACH STATEMENT EXECUTE FUNCTION kvmemory_postings_updated()",
)


def drop_posting_triggers(con: Any) -> None:
    """Drop the triggers that keep the blocks (before the rows' counts are all written again)."""
    for name in ("insert", "delete", "update"):
        con.execute(f"DROP TRIGGER IF EXISTS kvmemory_items_postings_{name} ON kvmemory_items")


def build_postings(con: Any) -> None:
    """(Re)create the posting blocks from the rows' counts (``tf``), and the triggers that keep them.

    The migration to schema version 9 and ``rebuild_keyword_index`` run
    it, under the schema lock: every session's blocks, one per term, and
    every session folded up to its ``next_seq``.
    """
    drop_posting_triggers(con)
    con.execute(
        """CREATE TABLE IF NOT EXISTS kvmemory_postings (
        session_id text NOT NULL,
        term text NOT NULL,
        block bigint GENERATED ALWAYS AS IDENTITY,
        n integer NOT NULL,
        lo bigint NOT NULL,
        hi bigint NOT NULL,
        seqs bigint[] NOT NULL,
        tfs integer[] NOT NULL,
        lens integer[] NOT NULL,
        PRIMARY KEY (session_id, term, block)
    )"""
    )
    # Read whole by every query of the term: stored out of line uncompressed, never decompressed.
    for column in ("seqs", "tfs", "lens"):
        con.execute(f"ALTER TABLE kvmemory_postings ALTER COLUMN {column} SET STORAGE EXTERNAL")
    pack_blocks(con)
    con.execute(
        """CREATE TABLE IF NOT EXISTS kvmemory_postings_folded (
        session_id text PRIMARY KEY,
        seq bigint NOT NULL
    )"""
    )
    con.execute(
        """CREATE TABLE IF NOT EXISTS kvmemory_postings_stale (
        session_id text NOT NULL,
        seq bigint NOT NULL,
        tf jsonb NOT NULL,
        PRIMARY KEY (session_id, seq)
    )"""
    )
    for statement in _FUNCTIONS:
        con.execute(statement)
    con.execute("TRUNCATE kvmemory_postings, kvmemory_postings_folded, kvmemory_postings_stale")
    con.execute("SET LOCAL jit = off")
    con.execute(
        f"INSERT INTO kvmemory_postings (session_id, term, n, lo, hi, seqs, tfs, lens) {_BACKFILL}"
    )
    con.execute(
        "INSERT INTO kvmemory_postings_folded (session_id, seq)"
        " SELECT session_id, next_seq FROM kvmemory_sessions"
    )
    for statement in _TRIGGERS:
        con.execute(statement)


# Schema version 12: each block's arrays also as bytea packed by the server from them whenever a
# block is written (generated columns, so every statement and trigger writing a block keeps
# them): each element's big-endian bytes, nothing between them (8 a seq, 4 a count or a length),
# which a ranking sends as they lie. ``array_send`` converted each element in every query and
# framed each with its length (28 bytes a posting against 16): at 100,000 steps the six common
# words of "press OK to save the file" (~320,000 postings) were 8.9 MB sent in 46-103 ms, against
# 5.1 MB in 10-20 ms (load 3.6-4). Packing costs the write: ~0.85 us an element, 7x array_send.
_PACKED_FUNCTIONS: Final = tuple(
    f"""CREATE OR REPLACE FUNCTION kvmemory_{name}_packed(a {kind}[]) RETURNS bytea
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT coalesce(string_agg({send}(x), ''::bytea ORDER BY o), ''::bytea)
    FROM unnest(a) WITH ORDINALITY AS u(x, o)
$$"""
    for name, kind, send in (("bigints", "bigint", "int8send"), ("ints", "integer", "int4send"))
)
_PACKED_COLUMNS: Final = (("seqs", "bigints"), ("tfs", "ints"), ("lens", "ints"))


def pack_blocks(con: Any) -> None:
    """Add each block's arrays packed (``seqs_packed``, ``tfs_packed``, ``lens_packed``), computed by the server from the arrays (schema version 12).

    The migration to version 12 and :func:`build_postings` run it; adding
    the columns writes every block again (~15-25 s at 100,000 steps).
    """
    for statement in _PACKED_FUNCTIONS:
        con.execute(statement)
    added = ", ".join(
        f"ADD COLUMN IF NOT EXISTS {column}_packed bytea"
        f" GENERATED ALWAYS AS (kvmemory_{name}_packed({column})) STORED"
        for column, name in _PACKED_COLUMNS
    )
    con.execute(f"ALTER TABLE kvmemory_postings {added}")
    # Read whole by the queries of the term: out of line, uncompressed, as the arrays.
    for column, _ in _PACKED_COLUMNS:
        con.execute(
            f"ALTER TABLE kvmemory_postings ALTER COLUMN {column}_packed SET STORAGE EXTERNAL"
        )


def _block_columns(packed: bool) -> dict[str, str]:
    """Return the SQL of a block's three arrays as a ranking reads them: packed (schema version 12), or ``array_send`` of the arrays (older tables)."""
    if packed:
        return {column: f"p.{column}_packed" for column, _ in _PACKED_COLUMNS}
    return {column: f"array_send(p.{column})" for column, _ in _PACKED_COLUMNS}


_BACKFILL: Final = f"""
SELECT i.session_id, {_key_sql("e.key")}, count(*), min(i.seq), max(i.seq),
    array_agg(i.seq), array_agg(e.value::int), array_agg(i.n_terms)
FROM kvmemory_items AS i CROSS JOIN LATERAL jsonb_each_text(i.tf) AS e
GROUP BY 1, 2"""

# The rows the blocks of each session of ``sids`` do not hold as they are: above its mark (0
# before its first fold), and its stale rows still there (updated). Bounded above by next_seq
# (which every seq is at most) so that the planner, not knowing the mark, takes the rows for
# a range of the key (an open bound is a third of the table to it: a scan of the table).
_UNFOLDED_READ: Final = """
tail AS MATERIALIZED (
    SELECT x.session_id, i.seq, i.n_terms, i.tf
    FROM unnest(%(sids)s::text[]) AS x(session_id) CROSS JOIN LATERAL (
        SELECT i.seq, i.n_terms, i.tf FROM kvmemory_items AS i
        WHERE i.session_id = x.session_id
            AND i.seq > coalesce(
                (SELECT seq FROM kvmemory_postings_folded WHERE session_id = x.session_id), 0)
            AND i.seq <= (SELECT next_seq FROM kvmemory_sessions WHERE session_id = x.session_id)
        UNION ALL
        SELECT i.* FROM kvmemory_postings_stale AS g CROSS JOIN LATERAL (
            SELECT i.seq, i.n_terms, i.tf FROM kvmemory_items AS i
            WHERE i.session_id = g.session_id AND i.seq = g.seq LIMIT 1
        ) AS i
        WHERE g.session_id = x.session_id
    ) AS i
)"""

# For each session of ``sids``: its counts; the blocks of the query's terms ('b'), each row
# with its number of postings (n, last) and its arrays only where the term's blocks hold at
# most ``budget`` postings over the sessions read, or no term's do (a query of common words
# alone is read whole at once; the rest stay in the table, out of line, never fetched);
# each term's postings in the unfolded rows, as a block ('t'); the stale rows' seqs, whose
# postings in the blocks are not counted ('s', the row always there for a live session);
# and each term's stale rows ('g'), which its document frequency leaves out of its blocks'
# sizes: one statement (one snapshot). The blocks' arrays come packed (schema version 12; older
# tables: array_send, PostgreSQL's binary form, as the unfolded rows' and the stale seqs always
# do), read by numpy or struct unpacked.
_READ_PLAN: Final = f"""
WITH s AS (
    SELECT session_id, n_items, n_terms FROM kvmemory_sessions
    WHERE session_id = ANY(%(sids)s::text[]) AND NOT deleted AND n_items > 0
),
{_UNFOLDED_READ},
held AS (
    SELECT t.session_id, q.key, t.seq, t.n_terms, (t.tf ->> q.name)::int AS tf
    FROM tail AS t CROSS JOIN unnest(%(keys)s::text[], %(names)s::text[]) AS q(key, name)
),
z AS MATERIALIZED (
    SELECT b.term, sum(b.n) AS size
    FROM s JOIN kvmemory_postings AS b ON b.session_id = s.session_id
        AND b.term = ANY(%(keys)s::text[])
    GROUP BY b.term
),
r AS MATERIALIZED (
    SELECT z.term, z.size <= %(budget)s OR NOT bool_or(z.size <= %(budget)s) OVER () AS sent
    FROM z
)
SELECT s.session_id, s.n_items, s.n_terms, 'b', p.term,
    CASE WHEN r.sent THEN {{seqs}} END, CASE WHEN r.sent THEN {{tfs}} END,
    CASE WHEN r.sent THEN {{lens}} END, p.n::bigint
FROM s JOIN kvmemory_postings AS p ON p.session_id = s.session_id
    AND p.term = ANY(%(keys)s::text[])
JOIN r ON r.term = p.term
UNION ALL
SELECT s.session_id, s.n_items, s.n_terms, 't', h.key, array_send(array_agg(h.seq)),
    array_send(array_agg(h.tf)), array_send(array_agg(h.n_terms)), NULL::bigint
FROM s JOIN held AS h ON h.session_id = s.session_id
WHERE h.tf IS NOT NULL GROUP BY s.session_id, s.n_items, s.n_terms, h.key
UNION ALL
SELECT s.session_id, s.n_items, s.n_terms, 's', NULL,
    (SELECT array_send(array_agg(g.seq)) FROM kvmemory_postings_stale AS g
     WHERE g.session_id = s.session_id), NULL, NULL, NULL::bigint
FROM s
UNION ALL
SELECT s.session_id, s.n_items, s.n_terms, 'g', q.key, NULL, NULL, NULL, count(*)
FROM s JOIN kvmemory_postings_stale AS g ON g.session_id = s.session_id
JOIN unnest(%(keys)s::text[], %(names)s::text[]) AS q(key, name) ON g.tf ? q.name
GROUP BY s.session_id, s.n_items, s.n_terms, q.key
"""

# The blocks of some terms (``keys``) of some sessions, packed (or array_send's): those _READ_PLAN left.
_READ_TERMS: Final = """
SELECT p.session_id, p.term, {seqs}, {tfs}, {lens}
FROM kvmemory_postings AS p
WHERE p.session_id = ANY(%(sids)s::text[]) AND p.term = ANY(%(keys)s::text[])
"""

# Some rows' counts of some terms (``names``, in order; NULL where a row holds none), each
# row looked up by its key (``sids`` and ``seqs``, pairwise).
_ROW_COUNTS: Final = """
SELECT k.sid, i.seq, i.n_terms,
    ARRAY(SELECT (i.tf ->> q.t)::int FROM unnest(%(names)s::text[]) WITH ORDINALITY AS q(t, o) ORDER BY q.o)
FROM unnest(%(sids)s::text[], %(seqs)s::bigint[]) AS k(sid, seq) CROSS JOIN LATERAL (
    SELECT i.seq, i.n_terms, i.tf FROM kvmemory_items AS i
    WHERE i.session_id = k.sid AND i.seq = k.seq LIMIT 1
) AS i
"""

# Each query term's document frequency: the blocks' sizes, less the stale rows' postings
# there (each stale row logs the counts the blocks hold for it), plus the unfolded rows
# holding it.
_DFS: Final = """
    SELECT ARRAY(
        SELECT (SELECT coalesce(sum(p.n), 0) FROM kvmemory_postings AS p
                WHERE p.session_id = %(sid)s AND p.term = q.key)
            - (SELECT count(*) FROM kvmemory_postings_stale AS g
               WHERE g.session_id = %(sid)s AND g.tf ? q.name)
            + (SELECT count(*) FROM tail AS t WHERE t.tf ? q.name)
        FROM unnest(%(keys)s::text[], %(names)s::text[]) WITH ORDINALITY AS q(key, name, o)
        ORDER BY q.o
    ) AS dfs"""

# The session's counts, each query term's document frequency and the counts of the rows
# ``seqs`` (NULL where one holds none), in one statement. Each row is looked up by its key,
# the session id kept from the planner (OFFSET 0): a planner whose statistics predate the
# session read all its rows through another index to find them.
_AMONG: Final = f"""
WITH s AS (
    SELECT session_id, n_items, n_terms FROM kvmemory_sessions
    WHERE session_id = %(sid)s AND NOT deleted AND n_items > 0
),
{_UNFOLDED_READ},
d AS MATERIALIZED ({_DFS}
)
SELECT s.n_items, s.n_terms, d.dfs, i.seq, i.n_terms,
    ARRAY(SELECT (i.tf ->> q.t)::bigint FROM unnest(%(names)s::text[]) WITH ORDINALITY AS q(t, o) ORDER BY q.o)
FROM s CROSS JOIN d LEFT JOIN (
    SELECT i.* FROM (SELECT %(sid)s::text AS sid OFFSET 0) AS x
    CROSS JOIN (SELECT DISTINCT unnest(%(seqs)s::bigint[]) AS wanted) AS k
    CROSS JOIN LATERAL (
        SELECT i.seq, i.n_terms, i.tf FROM kvmemory_items AS i
        WHERE i.session_id = x.sid AND i.seq = k.wanted LIMIT 1
    ) AS i
) AS i ON true
"""

_FREQUENCIES: Final = f"""
WITH {_UNFOLDED_READ}
{_DFS}
"""

_HEADER: Final = 20
"""Bytes before the first element of a one-dimensional array in PostgreSQL's binary form."""


_T = TypeVar("_T")

Reader = Callable[[str, Any], list[Any]]
"""Runs one statement and returns its rows, read in binary."""


class BinaryReads(Protocol):
    """Runs statements whose rows are read in binary: one alone, or several in one snapshot (``PostgresConnections``)."""

    def query_vectors(self, sql: str, params: Any) -> list[Any]:
        """Run one statement and return its rows, read in binary."""

    def read_snapshot(self, work: Callable[[Reader], _T]) -> _T:
        """Return what ``work`` returns, given a reader whose statements all see one snapshot."""


_FIRST_READ: Final = 8192
"""Postings a term's blocks hold at most (over the sessions ranked) to be read first; a commoner term's blocks are read only where the ranking needs them."""
_LOOKED_UP: Final = 1024
"""The most rows a ranking looks up by key to count the common terms it left unread; past it, it reads their blocks."""
_LOOKED_UP_FIRST: Final = 16
"""Rows past the ``k`` best (by their rarer terms) looked up first, to find the score to beat."""
_ROUNDING: Final = 1.0 + 1e-9
"""How far above a bound a sum of shares may land by float rounding, as a ratio (far more than it can)."""


def _prune(
    read: Reader,
    sids: Sequence[str],
    reads: dict[int, Read],
    unread: dict[str, int],
    terms: Sequence[str],
    counts: tuple[int, int],
    k: int,
) -> tuple[list[tuple[float, int, int]], dict[str, int]] | None:
    """Return the ``k`` best ``(score, place, seq)`` and each term's document frequency without the blocks of the common terms (``unread``), or ``None`` where they are needed.

    MaxScore (Turtle and Flood, 1995): an unread term adds at most its
    weight times ``1 + BM25_FLOOR`` to a score (its share's fraction is
    below 1), so an item holding only unread terms scores at most their
    sum (``reach``). The items holding a read term (the candidates) are
    ranked by their read terms (``partial``, the blocks' own sums); the
    best ``k`` and a few more are looked up by key and scored whole from
    their counts (``bm25_score``: ``Memory.search``'s float), which gives a
    score to beat, the ``k``-th. Where ``reach`` is below it, no item
    outside the candidates can reach the ``k`` best (nor tie), and a
    candidate only where ``partial + reach`` reaches it: those are looked
    up too. ``None`` where fewer than ``k`` items hold a read term, where
    ``reach`` is not below the score to beat, or where more than
    :data:`_LOOKED_UP` candidates would be looked up: the caller reads the
    unread blocks and ranks as before.

    ``unread`` maps each unread term to its postings in the blocks less
    its stale rows; the unfolded rows holding it (``reads``' tails) add to
    its document frequency.
    """
    if k + _LOOKED_UP_FIRST > _LOOKED_UP:
        return None
    n_items, total = counts
    dfs = {
        term: n + sum(_count(part) for r in reads.values() for part in r.tail.get(term, []))
        for term, n in unread.items()
    }
    rare = {
        at: Read(
            {t: b for t, b in r.blocks.items() if t not in unread},
            {t: b for t, b in r.tail.items() if t not in unread},
            r.stale,
        )
        for at, r in reads.items()
    }
    np = _numpy()
    found = sum(len(r.blocks) + len(r.tail) for r in rare.values())
    if not found:
        return None
    # Every candidate, best first by its read terms (the weights depend on each term's own df).
    if np is not None:
        partial, read_dfs = _top_numpy(np, rare, terms, n_items, total, n_items)
    else:
        partial, read_dfs = _top_python(rare, terms, n_items, total, n_items)
    if len(partial) < k:
        return None
    dfs.update(read_dfs)
    weighted = query_weights(terms, {t: n for t, n in dfs.items() if n}, n_items)
    average = bm25_average_length(total, n_items)
    reach = sum(w for t, w in weighted if t in unread) * (1.0 + BM25_FLOOR) * _ROUNDING
    names = list(dict.fromkeys(terms))
    scored: dict[tuple[int, int], float] = {}

    def look_up(items: list[tuple[int, int]]) -> None:
        params = {"sids": [sids[at] for at, _ in items], "seqs": [seq for _, seq in items]}
        place = {sid: j for j, sid in enumerate(sids)}
        for sid, seq, length, tfs in read(_ROW_COUNTS, {**params, "names": names}):
            held = {term: int(tf) for term, tf in zip(names, tfs, strict=True) if tf}
            scored[(place[sid], int(seq))] = bm25_score(held, int(length), weighted, average)

    look_up([(at, seq) for _, at, seq in partial[: k + _LOOKED_UP_FIRST]])
    if len(scored) < k:
        return None
    beat = heapq.nlargest(k, scored.values())[-1]
    if reach >= beat:
        return None
    rest = []
    for share, at, seq in partial[k + _LOOKED_UP_FIRST :]:
        if (share + reach) * _ROUNDING < beat:
            break  # best first: the rest fall short too
        rest.append((at, seq))
    if len(rest) + k + _LOOKED_UP_FIRST > _LOOKED_UP:
        return None
    if rest:
        look_up(rest)
    if len(scored) < min(len(partial), k + _LOOKED_UP_FIRST) + len(rest):
        return None  # a row the blocks hold was not found (not in one snapshot): read them all
    best = heapq.nsmallest(k, scored.items(), key=lambda hit: (-hit[1], hit[0]))
    return [(score, at, seq) for (at, seq), score in best], dfs


def _checked_block(term: str, seqs: Any, tfs: Any, lens: Any) -> tuple[bytes, bytes, bytes]:
    """Return a block read back (binary form) as bytes, or raise :class:`DamagedBlockError` where its arrays disagree."""
    block = (bytes(seqs), bytes(tfs), bytes(lens))
    if not _whole(block):
        msg = f"a block of term {term!r} holds arrays of other lengths or shapes"
        raise DamagedBlockError(msg)
    return block


def _count(block: tuple[bytes, bytes, bytes]) -> int:
    """Return how many postings a block (packed) holds."""
    return len(block[0]) // 8


def _packed(data: bytes, size: int) -> bytes:
    """Return a one-dimensional integer array in PostgreSQL's binary form (checked by :func:`_whole`) packed: each element's ``size`` big-endian bytes, without the frame."""
    step = size + 4
    count = (len(data) - _HEADER) // step
    np = _numpy()
    if np is not None:
        framed = np.dtype([("n", ">i4"), ("v", ">i8" if size == 8 else ">i4")])
        return bytes(np.frombuffer(data, framed, count, _HEADER)["v"].tobytes())
    code = "q" if size == 8 else "i"
    values = struct.unpack_from(">" + ("i" + code) * count, data, _HEADER)[1::2]
    return struct.pack(f">{count}{code}", *values)


class DamagedBlockError(Exception):
    """A posting block read back is not three one-dimensional arrays of one length (altered outside kvmemory)."""


def _whole(block: tuple[bytes, bytes, bytes], *, seqs_only: bool = False) -> bool:
    """Return whether a block's arrays (binary form) are one-dimensional, of the element sizes written, and of one length (or only its seqs, ``seqs_only``)."""
    seqs, tfs, lens = block
    counts: list[int] = []
    arrays = ((seqs, 12, 8), (tfs, 8, 4), (lens, 8, 4))
    for data, size, element in arrays[:1] if seqs_only else arrays:
        if len(data) < _HEADER or (len(data) - _HEADER) % size:
            return False
        ndim, _, _, length, _, first = struct.unpack_from(">iiIiii", data.ljust(_HEADER + 4, b"\0"))
        if ndim != 1 or (length and first != element):
            return False
        counts.append(int(length))
    if seqs_only:
        return counts[0] == (len(seqs) - _HEADER) // 12
    return counts[0] == counts[1] == counts[2] == (len(seqs) - _HEADER) // 12


class Read(NamedTuple):
    """What a ranking read, packed (see :func:`_packed`): each term's blocks, its postings in the unfolded rows (as blocks), and the stale rows' seqs (or empty)."""

    blocks: dict[str, list[tuple[bytes, bytes, bytes]]]
    tail: dict[str, list[tuple[bytes, bytes, bytes]]]
    stale: bytes


class Ranked(NamedTuple):
    """A ranking from the blocks and the statistics it read: the session's counts and each term's document frequency."""

    best: list[Any]
    """``(score, seq)`` from :meth:`PostingBlocks.top`, ``(score, place, seq)`` from its ``_rank``."""
    n_items: int
    total: int
    dfs: dict[str, int]


class PostingBlocks:
    """BM25 over a PostgreSQL store's posting blocks: the ranking, the document frequencies, some rows' scores.

    Args:
        binary: Runs statements whose rows are read in binary (a ``bytea``
            as its bytes): one alone (``query_vectors``), or several that
            see one snapshot (``read_snapshot``: a ranking that leaves
            common terms' blocks unread, :func:`_prune`, reads the rest or
            looks rows up in its first statement's snapshot).
        read_rows: Runs one statement looked up by key and returns its rows.
        packed: The blocks keep their arrays packed too (schema version
            12, :func:`pack_blocks`), which a ranking reads as they lie;
            ``False`` (older tables opened read-only): the server sends the
            arrays (``array_send``) and they are packed here.
    """

    def __init__(
        self,
        binary: BinaryReads,
        read_rows: Callable[[str, Any], list[Any]],
        *,
        packed: bool = True,
    ) -> None:
        self._read_binary = binary.query_vectors
        self._read_rows = read_rows
        self._read_snapshot = binary.read_snapshot
        self._packed = packed
        columns = _block_columns(packed)
        self._read_plan = _READ_PLAN.format(**columns)
        self._read_terms = _READ_TERMS.format(**columns)
        # Every ranking sums its blocks with numpy where it is installed (and semantic queries
        # need it): imported as the store opens, once a process (~110 ms of CPU), rather than
        # inside the first query, which then cost 3-4x a warm one (100,000 steps).
        _numpy()

    def top(self, session_id: str, terms: Sequence[str], k: int) -> Ranked:
        """Return the session's ``k`` best ``(score, seq)`` by BM25 from its blocks and unfolded rows, ties by seq, and the statistics read (see :meth:`_rank`)."""
        ranked = self._rank([session_id], terms, k)
        return ranked._replace(best=[(score, seq) for score, _, seq in ranked.best])

    def top_sessions(
        self, session_ids: Sequence[str], terms: Sequence[str], k: int
    ) -> list[tuple[float, str, int]]:
        """Return the ``k`` best ``(score, session_id, seq)`` by BM25 over several sessions as one corpus, ties by session id (by code point), then seq.

        :meth:`_rank` over the sessions: their counts summed, a term's
        document frequency the sum of its sessions', so the scores are
        those of ``Memory.search`` over the sessions' union.
        """
        order = sorted(set(session_ids))
        ranked = self._rank(order, terms, k)
        return [(score, order[place], seq) for score, place, seq in ranked.best]

    def _rank(self, sids: Sequence[str], terms: Sequence[str], k: int) -> Ranked:
        """Return the ``k`` best ``(score, place, seq)`` of the sessions ``sids`` (``place``: the session's index there) as one corpus, ties by place then seq, and the statistics read.

        One statement (:data:`_READ_PLAN`) reads each session's query
        term blocks, their postings in the rows not folded yet, the stale
        rows' seqs and the session's counts; each item's shares are summed
        in query order (as ``bm25_score`` sums them: the same floats), with
        numpy where it is installed, else in Python.
        """
        # Alone first (one statement, no transaction: each round trip more cost a third of a
        # 2,000-step query's wall time under load); in a snapshot only where it left blocks.
        alone = self._rank_read(self._read_binary, sids, terms, k, alone=True)
        if alone is not None:
            return alone
        ranked = self._read_snapshot(lambda read: self._rank_read(read, sids, terms, k))
        if ranked is None:  # pragma: no cover - only a ranking read alone gives up
            msg = "a ranking in one snapshot gave up"
            raise RuntimeError(msg)
        return ranked

    def _rank_read(
        self,
        read: Reader,
        sids: Sequence[str],
        terms: Sequence[str],
        k: int,
        *,
        alone: bool = False,
    ) -> Ranked | None:
        """Return :meth:`_rank`'s ranking, its statements run by ``read``; ``alone``: ``None`` where its first statement left some common terms' blocks unread (the rest must see its snapshot)."""
        names = list(dict.fromkeys(terms))
        keys = {posting_key(term): term for term in names}
        params = {"sids": list(sids), "keys": list(keys), "names": list(keys.values())}
        rows = read(self._read_plan, {**params, "budget": _FIRST_READ})
        place = {sid: j for j, sid in enumerate(sids)}
        reads: dict[int, Read] = {}
        counts: dict[int, tuple[int, int]] = {}
        # The terms whose blocks were left unread, and their postings there less stale ones.
        skipped: set[str] = set()
        left: dict[str, int] = {}
        for sid, n_items, total, kind, key, seqs, tfs, lens, n in rows:
            at = place[sid]
            counts[at] = (int(n_items), int(total))
            read_of = reads.setdefault(at, Read({}, {}, b""))
            if kind == "s":
                stale = bytes(seqs) if seqs is not None else b""
                if seqs is not None and not _whole((stale, b"", b""), seqs_only=True):
                    msg = f"the stale rows' seqs of session {sid!r} are not a one-dimensional array of bigint"
                    raise DamagedBlockError(msg)
                reads[at] = read_of._replace(stale=_packed(stale, 8) if stale else b"")
                continue
            if kind == "b" and seqs is None:
                skipped.add(keys[key])
            if kind == "g" or (kind == "b" and seqs is None):
                # A stale row holding the term is counted in its blocks' sizes, not its frequency.
                left[keys[key]] = left.get(keys[key], 0) + (-int(n) if kind == "g" else int(n))
                continue
            found = read_of.blocks if kind == "b" else read_of.tail
            # The unfolded rows' postings come as array_send's, as do the blocks of older tables.
            block = self._block(keys[key], seqs, tfs, lens, sent=kind == "t")
            found.setdefault(keys[key], []).append(block)
        n_items = sum(n for n, _ in counts.values())
        total = sum(t for _, t in counts.values())
        if not n_items:
            return Ranked([], 0, 0, dict.fromkeys(names, 0))
        unread = [term for term in names if term in skipped]
        if unread and alone:
            return None
        if unread:
            sids_read = [sids[at] for at in sorted(reads)]
            pruned = _prune(
                read, sids, reads, {t: left[t] for t in unread}, terms, (n_items, total), k
            )
            if pruned is not None:
                best, dfs = pruned
                return Ranked(best, n_items, total, {term: dfs.get(term, 0) for term in names})
            more = read(
                self._read_terms, {"sids": sids_read, "keys": [posting_key(t) for t in unread]}
            )
            for sid, key, seqs, tfs, lens in more:
                block = self._block(keys[key], seqs, tfs, lens)
                reads[place[sid]].blocks.setdefault(keys[key], []).append(block)
        np = _numpy()
        if np is not None:
            best, dfs = _top_numpy(np, reads, terms, n_items, total, k)
        else:
            best, dfs = _top_python(reads, terms, n_items, total, k)
        return Ranked(best, n_items, total, {term: dfs.get(term, 0) for term in names})

    def _block(
        self, term: str, seqs: Any, tfs: Any, lens: Any, *, sent: bool = False
    ) -> tuple[bytes, bytes, bytes]:
        """Return a block read back, packed, checked (:class:`DamagedBlockError` where its arrays disagree); ``sent``: it came as ``array_send``'s, as every block of older tables does."""
        if self._packed and not sent:
            block = (bytes(seqs), bytes(tfs), bytes(lens))
            count = len(block[0]) // 8
            if len(block[0]) % 8 or len(block[1]) != 4 * count or len(block[2]) != 4 * count:
                msg = f"a block of term {term!r} holds arrays of other lengths"
                raise DamagedBlockError(msg)
            return block
        found = _checked_block(term, seqs, tfs, lens)
        return (_packed(found[0], 8), _packed(found[1], 4), _packed(found[2], 4))

    def frequencies(self, session_id: str, terms: Sequence[str]) -> dict[str, int]:
        """Return how many of the session's items hold each of ``terms`` (0 where none): the blocks' sizes less the stale postings, plus the unfolded rows holding it, in one statement."""
        names = list(dict.fromkeys(terms))
        params = {
            "sid": session_id,
            "sids": [session_id],
            "names": names,
            "keys": [posting_key(t) for t in names],
        }
        rows = self._read_rows(_FREQUENCIES, params)
        counts = rows[0][0] if rows else [0] * len(names)
        return {term: int(count) for term, count in zip(names, counts, strict=True)}

    def among(
        self, session_id: str, terms: Sequence[str], seqs: Sequence[int]
    ) -> list[tuple[float, int]]:
        """Return ``(score, seq)`` by BM25 of the rows among ``seqs`` holding a query term, best first (ties by seq).

        One statement reads the session's counts, each term's document
        frequency (as :meth:`frequencies` counts it) and the rows' counts by
        key.
        """
        names = list(dict.fromkeys(terms))
        params = {
            "sid": session_id,
            "sids": [session_id],
            "names": names,
            "keys": [posting_key(term) for term in names],
            "seqs": list(seqs),
        }
        rows = self._read_rows(_AMONG, params)
        if not rows:
            return []
        n_items, total, frequencies = int(rows[0][0]), int(rows[0][1]), rows[0][2]
        df = {term: int(count) for term, count in zip(names, frequencies, strict=True) if count}
        weighted = query_weights(terms, df, n_items)
        average = bm25_average_length(total, n_items)
        scored = []
        for _, _, _, seq, length, tfs in rows:
            if seq is None:
                continue
            counts = {term: int(tf) for term, tf in zip(names, tfs, strict=True) if tf}
            if counts:
                scored.append((bm25_score(counts, int(length), weighted, average), int(seq)))
        return sorted(scored, key=lambda hit: (-hit[0], hit[1]))


def _numpy() -> Any:
    """Return numpy, or ``None`` where it is not installed (the blocks are then summed in Python)."""
    try:
        import numpy  # optional: without it, the postings are summed one by one
    except ImportError:
        return None
    return numpy


def _top_numpy(
    np: Any, reads: dict[int, Read], terms: Sequence[str], n_items: int, total: int, k: int
) -> tuple[list[tuple[float, int, int]], dict[str, int]]:
    """Return the ``k`` best ``(score, place, seq)`` of the sessions read (by place) and each term's document frequency, summed with numpy in query order."""
    wide = np.dtype(">i8")
    narrow = np.dtype(">i4")

    def joined(parts: list[tuple[bytes, bytes, bytes]]) -> tuple[Any, Any, Any]:
        if not parts:
            return np.zeros(0, np.int64), np.zeros(0), np.zeros(0)
        seqs = np.concatenate([np.frombuffer(s, wide) for s, _, _ in parts])
        tfs = np.concatenate([np.frombuffer(f, narrow) for _, f, _ in parts])
        lens = np.concatenate([np.frombuffer(n, narrow) for _, _, n in parts])
        return seqs.astype(np.int64), tfs.astype(np.float64), lens.astype(np.float64)

    found: dict[str, list[tuple[int, Any, Any, Any]]] = {}
    for at, read in sorted(reads.items()):
        stale = np.frombuffer(read.stale, wide) if read.stale else None
        for term in dict.fromkeys([*read.blocks, *read.tail]):
            seqs, tfs, lens = joined(read.blocks.get(term, []))
            if stale is not None and len(stale):
                live = ~np.isin(seqs, stale)  # a stale row's postings in the blocks do not count
                seqs, tfs, lens = seqs[live], tfs[live], lens[live]
            more = read.tail.get(term)
            if more:
                extra = joined(more)
                seqs, tfs, lens = (
                    np.concatenate(pair) for pair in zip((seqs, tfs, lens), extra, strict=True)
                )
            found.setdefault(term, []).append((at, seqs, tfs, lens))
    dfs = {term: sum(len(part[1]) for part in parts) for term, parts in found.items()}
    weighted = query_weights(terms, {t: n for t, n in dfs.items() if n}, n_items)
    if not weighted:
        return [], dfs
    highest = max(int(part[1].max()) for parts in found.values() for part in parts if len(part[1]))
    stride = highest + 1
    if max(reads) * stride >= 2**62:  # pragma: no cover - seqs past 2**62 / sessions: in Python
        return _top_python(reads, terms, n_items, total, k)
    # Each posting's item as one number, place * stride + seq: ordered as (place, seq).
    arrays = {
        term: tuple(
            np.concatenate(column)
            for column in zip(
                *((at * stride + seqs, tfs, lens) for at, seqs, tfs, lens in parts), strict=True
            )
        )
        for term, parts in found.items()
    }
    average = bm25_average_length(total, n_items)
    postings = sum(dfs.values())
    last = max(int(items.max()) for items, _, _ in arrays.values() if len(items))
    where: dict[str, Any] = {}
    if last < 4 * postings + 65536:
        # Items as positions in a dense array (a session's seqs are mostly live): no sort.
        every = np.arange(last + 1)
        where = {term: items for term, (items, _, _) in arrays.items()}
    else:
        every, at = np.unique(np.concatenate([a[0] for a in arrays.values()]), return_inverse=True)
        start = 0
        for term, (items, _, _) in arrays.items():
            where[term] = at[start : start + len(items)]
            start += len(items)
    score = np.zeros(len(every))
    flat = BM25_K1 * (1.0 - BM25_B)
    slope = BM25_K1 * BM25_B / average  # as bm25_term_score: (k1 * b / average) * length
    for term, weight in weighted:
        _, tf, length = arrays[term]
        # bm25_term_score's operations in its order, elementwise: the same floats.
        score[where[term]] += weight * (tf / (tf + flat + slope * length) + BM25_FLOOR)
    held = np.flatnonzero(score)  # every item holding a query term scores above 0
    if len(held) > k:
        kth = np.partition(score[held], len(held) - k)[len(held) - k]
        held = held[score[held] >= kth]
    best = held[np.lexsort((every[held], -score[held]))][:k]
    # tolist: the same floats and ints as float() and int() of each, in one call
    items = every[best]
    return list(
        zip(
            score[best].tolist(), (items // stride).tolist(), (items % stride).tolist(), strict=True
        )
    ), dfs


def _unpack(data: bytes, wide: bool) -> list[int]:
    """Return the elements of a packed integer array (8 bytes each where ``wide``, else 4)."""
    size = 8 if wide else 4
    return list(struct.unpack(f">{len(data) // size}{'q' if wide else 'i'}", data))


def _top_python(
    reads: dict[int, Read], terms: Sequence[str], n_items: int, total: int, k: int
) -> tuple[list[tuple[float, int, int]], dict[str, int]]:
    """Return the ``k`` best ``(score, place, seq)`` of the sessions read and each term's document frequency, summed in Python in query order."""
    postings: dict[str, list[tuple[tuple[int, int], int, int]]] = {}
    for at, read in sorted(reads.items()):
        stale = set(_unpack(read.stale, True)) if read.stale else set()
        for kept, parts_of in ((False, read.blocks), (True, read.tail)):
            for term, parts in parts_of.items():
                found = postings.setdefault(term, [])
                for seqs, tfs, lens in parts:
                    triples = zip(
                        _unpack(seqs, True), _unpack(tfs, False), _unpack(lens, False), strict=True
                    )
                    found.extend(
                        ((at, seq), tf, length)
                        for seq, tf, length in triples
                        if kept or seq not in stale
                    )
    dfs = {term: len(found) for term, found in postings.items()}
    weighted = query_weights(terms, {t: n for t, n in dfs.items() if n}, n_items)
    average = bm25_average_length(total, n_items)
    score: dict[tuple[int, int], float] = {}
    for term, weight in weighted:
        for item, tf, length in postings[term]:
            score[item] = score.get(item, 0.0) + bm25_term_score(weight, tf, length, average)
    best = heapq.nsmallest(k, score.items(), key=lambda hit: (-hit[1], hit[0]))
    return [(value, at, seq) for (at, seq), value in best], dfs
