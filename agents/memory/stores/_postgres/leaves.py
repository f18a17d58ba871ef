"""The leaf table: each row's scalar values by field path, under btree indexes, so a range names its rows.

Schema version 13. ``kvmemory_leaves(session_id, seq, path, num, txt)`` holds,
for each row's JSONB copy (the codec's item wrapper unwrapped, as
``_sql.filters`` reads it), one row per value a filter may order:

* a number: ``num`` (its ``float8``), ``txt`` NULL;
* a string: ``txt``, its first ``TEXT_KEPT`` characters (``_sql.probes``) (``COLLATE "C"``,
  code point order), ``num`` NULL;
* a value SQL cannot order exactly, ``num`` and ``txt`` both NULL: an object
  the codec tagged (``{"$kv": ...}``: NaN, infinities, big ints, numpy
  scalars, a dict with non-string keys, which Python follows on a dotted
  path), and a number no ``float8`` holds.

``path`` is the keys from the item's fields down to the value, joined by
dots, through plain objects (never into arrays: the filter language does not
look inside lists). A dotted field name and a nested path are thus one path,
and a row holding either is named: the set named is a superset, judged after
by the SQL condition over the JSONB copy and by the filter in Python.

Statement triggers on ``kvmemory_items`` keep the table: an insert adds the
new rows' leaves, an update whose JSONB copy changed replaces them, a delete
(a session's rows deleted with it too) removes them, in the writing statement's
transaction. :func:`build_leaves` makes the table and fills it from the stored
rows; ``_sql.probes`` writes the subqueries that read it.
"""

from __future__ import annotations

from typing import Any, Final

from agents.memory.stores._sql.probes import TEXT_KEPT

__all__ = ["build_leaves"]

# A number is kept as a float8 where one holds it (with room for the filters' relative slack of
# 1e-9 in SQL: see _sql.filters); numeric -> float8 raises beyond, which would fail the write.
_LEAVES_OF: Final = f"""CREATE OR REPLACE FUNCTION kvmemory_leaves_of(doc jsonb)
    RETURNS TABLE (path text, num float8, txt text) LANGUAGE sql IMMUTABLE AS $$
    WITH RECURSIVE f AS (
        SELECT CASE WHEN doc ? '$kv' THEN doc -> 'fields' ELSE doc END AS fields
    ), walk (path, value) AS (
        SELECT e.key, e.value FROM f, jsonb_each(f.fields) AS e
        WHERE jsonb_typeof(f.fields) = 'object'
        UNION ALL
        SELECT w.path || '.' || e.key, e.value FROM walk AS w, jsonb_each(w.value) AS e
        WHERE jsonb_typeof(w.value) = 'object' AND NOT w.value ? '$kv'
    )
    SELECT path,
        CASE WHEN jsonb_typeof(value) = 'number' AND (value::numeric = 0
            OR abs(value::numeric) BETWEEN 1e-300 AND 1e300) THEN value::numeric::float8 END,
        CASE WHEN jsonb_typeof(value) = 'string' THEN left(value #>> '{{}}', {TEXT_KEPT}) END
    FROM walk
    WHERE jsonb_typeof(value) IN ('number', 'string')
        OR jsonb_typeof(value) = 'object' AND value ? '$kv'
    $$"""

_WRITTEN: Final = """CREATE OR REPLACE FUNCTION kvmemory_leaves_written()
    RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP = 'INSERT' THEN
            INSERT INTO kvmemory_leaves (session_id, seq, path, num, txt)
            SELECT n.session_id, n.seq, l.path, l.num, l.txt
            FROM new_rows AS n CROSS JOIN LATERAL kvmemory_leaves_of(n.doc) AS l
            WHERE n.doc IS NOT NULL;
        ELSIF TG_OP = 'DELETE' THEN
            DELETE FROM kvmemory_leaves AS l USING old_rows AS o
            WHERE l.session_id = o.session_id AND l.seq = o.seq;
        ELSE
            DELETE FROM kvmemory_leaves AS l USING old_rows AS o, new_rows AS n
            WHERE o.session_id = n.session_id AND o.seq = n.seq
                AND o.doc IS DISTINCT FROM n.doc
                AND l.session_id = o.session_id AND l.seq = o.seq;
            INSERT INTO kvmemory_leaves (session_id, seq, path, num, txt)
            SELECT n.session_id, n.seq, l.path, l.num, l.txt
            FROM new_rows AS n JOIN old_rows AS o ON o.session_id = n.session_id AND o.seq = n.seq
                CROSS JOIN LATERAL kvmemory_leaves_of(n.doc) AS l
            WHERE n.doc IS NOT NULL AND o.doc IS DISTINCT FROM n.doc;
        END IF;
        RETURN NULL;
    END $$"""

_TRIGGERS: Final = tuple(
    f"CREATE TRIGGER kvmemory_leaves_{event.lower()} AFTER {event} ON kvmemory_items"
    f" REFERENCING {rows} FOR EACH STATEMENT EXECUTE FUNCTION kvmemory_leaves_written()"
    for event, rows in (
        ("INSERT", "NEW TABLE AS new_rows"),
        ("UPDATE", "OLD TABLE AS old_rows NEW TABLE AS new_rows"),
        ("DELETE", "OLD TABLE AS old_rows"),
    )
)


def build_leaves(con: Any) -> None:
    """Create the leaf table, its indexes and triggers, and fill it from the stored rows (one transaction, under the schema lock)."""
    con.execute(
        """CREATE TABLE IF NOT EXISTS kvmemory_leaves (
        session_id text NOT NULL,
        seq bigint NOT NULL,
        path text NOT NULL,
        num double precision,
        txt text COLLATE "C"
    )"""
    )
    con.execute(_LEAVES_OF)
    con.execute(_WRITTEN)
    for event in ("insert", "update", "delete"):
        con.execute(f"DROP TRIGGER IF EXISTS kvmemory_leaves_{event} ON kvmemory_items")
    con.execute("TRUNCATE kvmemory_leaves")
    con.execute(
        "INSERT INTO kvmemory_leaves (session_id, seq, path, num, txt)"
        " SELECT i.session_id, i.seq, l.path, l.num, l.txt FROM kvmemory_items AS i"
        " CROSS JOIN LATERAL kvmemory_leaves_of(i.doc) AS l WHERE i.doc IS NOT NULL"
    )
    # Each leaf sits in one of the two: numbers and the unordered markers, or strings.
    con.execute(
        "CREATE INDEX IF NOT EXISTS kvmemory_leaves_num ON kvmemory_leaves"
        " (session_id, path, num) INCLUDE (seq) WHERE txt IS NULL"
    )
    con.execute(
        "CREATE INDEX IF NOT EXISTS kvmemory_leaves_txt ON kvmemory_leaves"
        " (session_id, path, txt) INCLUDE (seq) WHERE txt IS NOT NULL"
    )
    con.execute(
        "CREATE INDEX IF NOT EXISTS kvmemory_leaves_row ON kvmemory_leaves (session_id, seq)"
    )
    for statement in _TRIGGERS:
        con.execute(statement)
