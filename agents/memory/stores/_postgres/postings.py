"""The posting blocks of a PostgreSQL store: each term's items in a few rows, kept by triggers, and BM25 over them.

Schema version 9 adds ``kvmemory_postings``: for each (session, term) a few
blocks, each one row holding the term's postings as three arrays in the
same order, the items' seqs (``bigint[]``), the term's count in each
(``tf``) and each item's length (``n_terms``), with their number ``n`` and
lowest and highest seq (``lo``, ``hi``). A term longer than
:data:`_LONGEST_TERM` bytes is filed under ``"#"`` and its SHA-256 digest
(``"#"`` is never part of a term), as the ``tsvector`` files it.

Statement triggers on ``kvmemory_items`` keep the blocks equal to the rows'
counts (``tf``), in the writing statement, so in its transaction and under
the session's lock every writer takes first (see ``backend``), whatever
the statement and whichever kvmemory wrote it:

* an insert adds each term's new postings to the term's newest block when
  it keeps at most :data:`BLOCK_ROOM` postings with them (one-step appends
  fill a small tail block, rewritten each time), else as a new block (a
  batch's common terms: one block each);
* a delete removes the deleted rows' postings from the blocks that hold
  them (a block left empty goes); a session left without rows loses its
  blocks at once;
* an update whose counts changed removes the row's old postings and adds
  its new ones.

A keyword ranking then reads the query terms' blocks and the session's
counts in one statement (one snapshot), never the rows: at 100,000 steps a
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
from typing import Any, Final, NamedTuple

from agents.memory._text import BM25_B, BM25_FLOOR, BM25_K1, bm25_average_length, bm25_term_score
from agents.memory.stores._core.terms import bm25_score, query_weights

__all__ = [
    "BLOCK_ROOM",
    "DamagedBlockError",
    "PostingBlocks",
    "build_postings",
    "drop_posting_triggers",
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


def _add_sql(rows: str) -> str:
    """Return the statement that files the postings of ``rows`` (a relation of item rows)."""
    return f"""
WITH n AS MATERIALIZED (
    SELECT r.session_id, kvmemory_posting_key(e.key) AS term, count(*)::int AS k,
        min(r.seq) AS lo, max(r.seq) AS hi, array_agg(r.seq ORDER BY r.seq) AS seqs,
        array_agg(e.value::int ORDER BY r.seq) AS tfs, array_agg(r.n_terms ORDER BY r.seq) AS lens
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


def _remove_sql(rows: str) -> str:
    """Return the statement that takes the postings of ``rows`` (a relation of item rows) out of their blocks."""
    return f"""
WITH o AS MATERIALIZED (
    SELECT r.session_id, kvmemory_posting_key(e.key) AS term, array_agg(r.seq) AS seqs,
        min(r.seq) AS lo, max(r.seq) AS hi
    FROM {rows} AS r CROSS JOIN LATERAL jsonb_object_keys(r.tf) AS e(key)
    GROUP BY 1, 2
),
c AS MATERIALIZED (
    SELECT p.session_id, p.term, p.block, x.*
    FROM o JOIN kvmemory_postings AS p ON p.session_id = o.session_id AND p.term = o.term
        AND p.lo <= o.hi AND p.hi >= o.lo AND p.seqs && o.seqs
    CROSS JOIN LATERAL (
        SELECT count(*)::int AS n, min(u.s) AS lo, max(u.s) AS hi,
            array_agg(u.s ORDER BY u.i) AS seqs, array_agg(u.f ORDER BY u.i) AS tfs,
            array_agg(u.l ORDER BY u.i) AS lens
        FROM unnest(p.seqs, p.tfs, p.lens) WITH ORDINALITY AS u(s, f, l, i)
        WHERE NOT EXISTS (SELECT 1 FROM unnest(o.seqs) AS d(s) WHERE d.s = u.s)
    ) AS x
),
gone AS (
    DELETE FROM kvmemory_postings AS p USING c
    WHERE c.n = 0 AND p.session_id = c.session_id AND p.term = c.term AND p.block = c.block
)
UPDATE kvmemory_postings AS p SET n = c.n, lo = c.lo, hi = c.hi, seqs = c.seqs, tfs = c.tfs,
    lens = c.lens
FROM c
WHERE c.n > 0 AND p.session_id = c.session_id AND p.term = c.term AND p.block = c.block"""


# The rows of a delete whose session still has rows (and so blocks): a session the statement
# emptied (a session deleted or cleared) loses its blocks in one statement, unread.
_EMPTIED: Final = """(SELECT o.session_id FROM (SELECT DISTINCT session_id FROM old_rows) AS o
    WHERE NOT EXISTS (SELECT 1 FROM kvmemory_items AS i WHERE i.session_id = o.session_id))"""
_STILL_HELD: Final = f"(SELECT * FROM old_rows WHERE session_id NOT IN {_EMPTIED})"
# The rows of an update whose counts changed, before and after.
_CHANGED_OLD: Final = """(SELECT o.* FROM old_rows AS o JOIN new_rows AS w USING (session_id, seq)
    WHERE o.tf IS DISTINCT FROM w.tf OR o.n_terms IS DISTINCT FROM w.n_terms)"""
_CHANGED_NEW: Final = """(SELECT w.* FROM new_rows AS w JOIN old_rows AS o USING (session_id, seq)
    WHERE o.tf IS DISTINCT FROM w.tf OR o.n_terms IS DISTINCT FROM w.n_terms)"""

_FUNCTIONS: Final = (
    _KEY_FUNCTION,
    f"""CREATE OR REPLACE FUNCTION kvmemory_postings_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        {_add_sql("new_rows")};
        RETURN NULL;
    END $$""",
    f"""CREATE OR REPLACE FUNCTION kvmemory_postings_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        DELETE FROM kvmemory_postings WHERE session_id IN {_EMPTIED};
        {_remove_sql(_STILL_HELD)};
        RETURN NULL;
    END $$""",
    f"""CREATE OR REPLACE FUNCTION kvmemory_postings_updated() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        {_remove_sql(_CHANGED_OLD)};
        {_add_sql(_CHANGED_NEW)};
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
    it, under the schema lock: every session's blocks, one per term.
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
    for statement in _FUNCTIONS:
        con.execute(statement)
    con.execute("TRUNCATE kvmemory_postings")
    con.execute(
        f"INSERT INTO kvmemory_postings (session_id, term, n, lo, hi, seqs, tfs, lens) {_BACKFILL}"
    )
    for statement in _TRIGGERS:
        con.execute(statement)


_BACKFILL: Final = """
SELECT i.session_id, kvmemory_posting_key(e.key), count(*), min(i.seq), max(i.seq),
    array_agg(i.seq ORDER BY i.seq), array_agg(e.value::int ORDER BY i.seq),
    array_agg(i.n_terms ORDER BY i.seq)
FROM kvmemory_items AS i CROSS JOIN LATERAL jsonb_each_text(i.tf) AS e
GROUP BY 1, 2"""

# The session's counts and the blocks of the query's terms, in one statement (one snapshot);
# the arrays in PostgreSQL's binary form (array_send), read by numpy or struct unpacked.
_READ_BLOCKS: Final = """
SELECT s.n_items, s.n_terms, p.term, array_send(p.seqs), array_send(p.tfs), array_send(p.lens)
FROM kvmemory_sessions AS s
LEFT JOIN kvmemory_postings AS p ON p.session_id = s.session_id AND p.term = ANY(%(keys)s::text[])
WHERE s.session_id = %(sid)s AND NOT s.deleted AND s.n_items > 0
"""

# The session's counts, each query term's document frequency (the blocks' sizes) and the
# counts of the rows ``seqs`` (NULL where one holds none), in one statement.
_AMONG: Final = """
WITH s AS (
    SELECT session_id, n_items, n_terms FROM kvmemory_sessions
    WHERE session_id = %(sid)s AND NOT deleted AND n_items > 0
),
d AS MATERIALIZED (
    SELECT ARRAY(
        SELECT coalesce(sum(p.n), 0)::bigint
        FROM unnest(%(keys)s::text[]) WITH ORDINALITY AS q(t, o)
        LEFT JOIN kvmemory_postings AS p ON p.session_id = %(sid)s AND p.term = q.t
        GROUP BY q.o ORDER BY q.o
    ) AS dfs
)
SELECT s.n_items, s.n_terms, d.dfs, i.seq, i.n_terms,
    ARRAY(SELECT (i.tf ->> q.t)::bigint FROM unnest(%(names)s::text[]) WITH ORDINALITY AS q(t, o) ORDER BY q.o)
FROM s CROSS JOIN d LEFT JOIN kvmemory_items AS i
    ON i.session_id = s.session_id AND i.seq = ANY(%(seqs)s::bigint[])
"""

_FREQUENCIES: Final = """
SELECT term, sum(n)::bigint FROM kvmemory_postings
WHERE session_id = %(sid)s AND term = ANY(%(keys)s::text[]) GROUP BY term
"""

_HEADER: Final = 20
"""Bytes before the first element of a one-dimensional array in PostgreSQL's binary form."""


class DamagedBlockError(Exception):
    """A posting block read back is not three one-dimensional arrays of one length (altered outside kvmemory)."""


def _whole(block: tuple[bytes, bytes, bytes]) -> bool:
    """Return whether a block's arrays (binary form) are one-dimensional, of the element sizes written, and of one length."""
    seqs, tfs, lens = block
    counts: list[int] = []
    for data, size, element in ((seqs, 12, 8), (tfs, 8, 4), (lens, 8, 4)):
        if len(data) < _HEADER or (len(data) - _HEADER) % size:
            return False
        ndim, _, _, length, _, first = struct.unpack_from(">iiIiii", data.ljust(_HEADER + 4, b"\0"))
        if ndim != 1 or (length and first != element):
            return False
        counts.append(int(length))
    return counts[0] == counts[1] == counts[2] == (len(seqs) - _HEADER) // 12


class Ranked(NamedTuple):
    """A ranking from the blocks and the statistics it read: the session's counts and each term's document frequency."""

    best: list[tuple[float, int]]
    n_items: int
    total: int
    dfs: dict[str, int]


class PostingBlocks:
    """BM25 over a PostgreSQL store's posting blocks: the ranking, the document frequencies, some rows' scores.

    Args:
        read_binary: Runs one statement and returns its rows, read in binary
            (a ``bytea`` as its bytes).
        read_rows: Runs one statement looked up by key and returns its rows.
    """

    def __init__(
        self,
        read_binary: Callable[[str, Any], list[Any]],
        read_rows: Callable[[str, Any], list[Any]],
    ) -> None:
        self._read_binary = read_binary
        self._read_rows = read_rows

    def top(self, session_id: str, terms: Sequence[str], k: int) -> Ranked:
        """Return the session's ``k`` best ``(score, seq)`` by BM25 from its blocks, ties by seq, and the statistics read.

        One statement reads the query terms' blocks and the session's
        counts; each item's shares are summed in query order (as
        ``bm25_score`` sums them: the same floats), with numpy where it is
        installed, else in Python.
        """
        names = list(dict.fromkeys(terms))
        keys = {posting_key(term): term for term in names}
        rows = self._read_binary(_READ_BLOCKS, {"sid": session_id, "keys": list(keys)})
        if not rows:
            return Ranked([], 0, 0, dict.fromkeys(names, 0))
        n_items, total = int(rows[0][0]), int(rows[0][1])
        blocks: dict[str, list[tuple[bytes, bytes, bytes]]] = {}
        for _, _, key, seqs, tfs, lens in rows:
            if key is None:
                continue
            block = (bytes(seqs), bytes(tfs), bytes(lens))
            if not _whole(block):
                msg = f"a block of term {keys[key]!r} holds arrays of other lengths or shapes"
                raise DamagedBlockError(msg)
            blocks.setdefault(keys[key], []).append(block)
        np = _numpy()
        if np is not None:
            best, dfs = _top_numpy(np, blocks, terms, n_items, total, k)
        else:
            best, dfs = _top_python(blocks, terms, n_items, total, k)
        return Ranked(best, n_items, total, {term: dfs.get(term, 0) for term in names})

    def frequencies(self, session_id: str, terms: Sequence[str]) -> dict[str, int]:
        """Return how many of the session's items hold each of ``terms`` (0 where none): the blocks' sizes, in one statement."""
        names = list(dict.fromkeys(terms))
        keys = {posting_key(term): term for term in names}
        rows = self._read_rows(_FREQUENCIES, {"sid": session_id, "keys": list(keys)})
        counted = {keys[str(key)]: int(count) for key, count in rows}
        return {term: counted.get(term, 0) for term in names}

    def among(
        self, session_id: str, terms: Sequence[str], seqs: Sequence[int]
    ) -> list[tuple[float, int]]:
        """Return ``(score, seq)`` by BM25 of the rows among ``seqs`` holding a query term, best first (ties by seq).

        One statement reads the session's counts, each term's document
        frequency (its blocks' sizes) and the rows' counts by key.
        """
        names = list(dict.fromkeys(terms))
        params = {
            "sid": session_id,
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
    np: Any,
    blocks: dict[str, list[tuple[bytes, bytes, bytes]]],
    terms: Sequence[str],
    n_items: int,
    total: int,
    k: int,
) -> tuple[list[tuple[float, int]], dict[str, int]]:
    """Return the ``k`` best ``(score, seq)`` and each term's document frequency, summed with numpy in query order."""
    wide = np.dtype([("n", ">i4"), ("v", ">i8")])
    narrow = np.dtype([("n", ">i4"), ("v", ">i4")])
    arrays = {}
    for term, parts in blocks.items():
        seqs = np.concatenate([np.frombuffer(s, wide, offset=_HEADER)["v"] for s, _, _ in parts])
        tfs = np.concatenate([np.frombuffer(f, narrow, offset=_HEADER)["v"] for _, f, _ in parts])
        lens = np.concatenate([np.frombuffer(n, narrow, offset=_HEADER)["v"] for _, _, n in parts])
        arrays[term] = (seqs.astype(np.int64), tfs.astype(np.float64), lens.astype(np.float64))
    dfs = {term: len(seqs) for term, (seqs, _, _) in arrays.items()}
    weighted = query_weights(terms, {t: n for t, n in dfs.items() if n}, n_items)
    if not weighted:
        return [], dfs
    average = bm25_average_length(total, n_items)
    postings = sum(dfs.values())
    highest = max(int(seqs.max()) for seqs, _, _ in arrays.values() if len(seqs))
    where: dict[str, Any] = {}
    if highest < 4 * postings + 65536:
        # Seqs as positions in a dense array (a session's seqs are mostly live): no sort.
        every = np.arange(highest + 1)
        where = {term: seqs for term, (seqs, _, _) in arrays.items()}
    else:
        every, at = np.unique(np.concatenate([a[0] for a in arrays.values()]), return_inverse=True)
        start = 0
        for term, (seqs, _, _) in arrays.items():
            where[term] = at[start : start + len(seqs)]
            start += len(seqs)
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
    return list(zip(score[best].tolist(), every[best].tolist(), strict=True)), dfs


def _unpack(data: bytes, wide: bool) -> list[int]:
    """Return the elements of a one-dimensional integer array in PostgreSQL's binary form."""
    size = 12 if wide else 8
    count = (len(data) - _HEADER) // size
    pairs = struct.unpack_from(">" + ("iq" if wide else "ii") * count, data, _HEADER)
    return list(pairs[1::2])


def _top_python(
    blocks: dict[str, list[tuple[bytes, bytes, bytes]]],
    terms: Sequence[str],
    n_items: int,
    total: int,
    k: int,
) -> tuple[list[tuple[float, int]], dict[str, int]]:
    """Return the ``k`` best ``(score, seq)`` and each term's document frequency, summed in Python in query order."""
    postings: dict[str, list[tuple[int, int, int]]] = {}
    for term, parts in blocks.items():
        found = postings.setdefault(term, [])
        for seqs, tfs, lens in parts:
            found.extend(
                zip(_unpack(seqs, True), _unpack(tfs, False), _unpack(lens, False), strict=True)
            )
    dfs = {term: len(found) for term, found in postings.items()}
    weighted = query_weights(terms, {t: n for t, n in dfs.items() if n}, n_items)
    average = bm25_average_length(total, n_items)
    score: dict[int, float] = {}
    for term, weight in weighted:
        for seq, tf, length in postings[term]:
            score[seq] = score.get(seq, 0.0) + bm25_term_score(weight, tf, length, average)
    best = heapq.nsmallest(k, score.items(), key=lambda hit: (-hit[1], hit[0]))
    return [(value, seq) for seq, value in best], dfs
