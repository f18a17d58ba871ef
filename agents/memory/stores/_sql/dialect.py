"""The SQL that SQLite and PostgreSQL share: statements written once, spelled by a dialect.

The two stores keep the same tables (``kvmemory_items``, ``kvmemory_vectors``,
``kvmemory_embedders``) and answer most primitives with the same statements;
they differ in a few spellings: the parameter mark (``?`` or ``%s``), how a
list of values is bound (a JSON array read with ``json_each``, or an array
compared with ``= ANY``), and PostgreSQL's ``OFFSET 0`` that keeps a
subquery a per-row probe. :class:`Dialect` holds those spellings, and
:class:`SQLRows` implements the shared primitives once on top of a store's
``_query`` (and, inside a transaction, the driver's ``execute``, which
sqlite3 and psycopg connections both have).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar, Final

import attrs

from agents.memory import _codec
from agents.memory._filter import FilterNode
from agents.memory.stores._core.encoding import IndexEntry, KeyedRow
from agents.memory.stores._sql.filters import candidates_query
from agents.memory.stores._sql.probes import RowProbe, row_probe

__all__ = ["POSTGRES", "SQLITE", "Dialect", "SQLRows", "prefix_range"]


@attrs.frozen
class Dialect:
    """How one SQL engine spells what the shared statements leave open.

    Attributes:
        name: The engine, for messages.
        param: The parameter mark.
        members: ``column`` + this is true when the column's value is in a bound list.
        bind_list: Turns a list of values into the one parameter ``members`` reads.
        fence: What keeps a correlated subquery from being turned into a join.
    """

    name: str
    param: str
    members: str
    bind_list: Callable[[Sequence[object]], object]
    fence: str = ""

    def spell(self, template: str) -> str:
        """Return ``template`` in this dialect: ``{p}`` is a parameter, ``{in}`` a list membership, ``{fence}`` the fence."""
        return _spelled(self, template)


@functools.cache
def _spelled(dialect: Dialect, template: str) -> str:
    return (
        template.replace("{in}", dialect.members)
        .replace("{fence}", dialect.fence)
        .replace("{p}", dialect.param)
    )


def _json_list(values: Sequence[object]) -> str:
    return _codec.dumps(list(values)).decode("utf-8")


SQLITE: Final = Dialect(
    name="SQLite", param="?", members=" IN (SELECT value FROM json_each(?))", bind_list=_json_list
)
POSTGRES: Final = Dialect(
    name="PostgreSQL", param="%s", members=" = ANY(%s)", bind_list=list, fence=" OFFSET 0"
)

_AMONG_CHUNK: Final = 4096
"""The most seqs :meth:`SQLRows.filter_among` binds to one statement."""

_ROWS_OF_SEQS: Final = (
    "SELECT seq, data FROM kvmemory_items WHERE session_id = {p} AND seq{in} ORDER BY seq"
)
_VECTOR_MODEL: Final = "SELECT model, dimension FROM kvmemory_embedders WHERE session_id = {p}"
_VECTOR_COUNT: Final = (
    "SELECT count(*) FROM kvmemory_vectors WHERE session_id = {p} AND fields = {p}"
)
_VECTOR_COUNTS: Final = (
    "SELECT count(*), coalesce(sum(CASE WHEN length(vector) > 0 THEN 1 ELSE 0 END), 0)"
    " FROM kvmemory_vectors WHERE session_id = {p} AND fields = {p}"
)
_VECTOR_BYTES: Final = (
    "SELECT coalesce(sum(length(vector)), 0) FROM kvmemory_vectors"
    " WHERE session_id = {p} AND fields = {p}"
)
_VECTOR_PAGE: Final = (
    "SELECT seq, vector FROM kvmemory_vectors WHERE session_id = {p} AND fields = {p}"
    " AND seq > {p} ORDER BY seq LIMIT {p}"
)
_VECTORS_OF_SEQS: Final = (
    "SELECT seq, vector FROM kvmemory_vectors WHERE session_id = {p} AND fields = {p}"
    " AND seq{in} ORDER BY seq"
)
# The fence keeps the subquery a per-row primary-key probe in PostgreSQL: as an
# anti-join the planner hashed every vector of the session for each page
# (quadratic in the session: 60 s instead of 12 s to embed 100,000 items).
_UNEMBEDDED_PAGE: Final = (
    "SELECT seq, data FROM kvmemory_items AS i WHERE session_id = {p} AND seq > {p}"
    " AND NOT EXISTS (SELECT 1 FROM kvmemory_vectors AS v"
    " WHERE v.session_id = i.session_id AND v.seq = i.seq AND v.fields = {p}{fence})"
    " ORDER BY seq LIMIT {p}"
)
_CLAIM_MODEL: Final = (
    "INSERT INTO kvmemory_embedders (session_id, model, dimension) VALUES ({p}, {p}, {p})"
    " ON CONFLICT (session_id) DO NOTHING"
)
_DELETE_VECTORS_OF: Final = "DELETE FROM kvmemory_vectors WHERE session_id = {p} AND seq{in}"
_DELETE_VECTORS: Final = "DELETE FROM kvmemory_vectors WHERE session_id = {p}"
_DELETE_MODEL: Final = "DELETE FROM kvmemory_embedders WHERE session_id = {p}"
_DELETE_ROWS: Final = "DELETE FROM kvmemory_items WHERE session_id = {p} AND seq{in} RETURNING seq"
_CLEAR_ROWS: Final = "DELETE FROM kvmemory_items WHERE session_id = {p}"
_ROW_INDEX: Final = (
    "SELECT seq, step, created FROM kvmemory_items WHERE session_id = {p} ORDER BY seq"
)

_LAST_STEP: Final = (
    "SELECT count(*), (SELECT step FROM kvmemory_items WHERE session_id = {p}"
    " ORDER BY seq DESC LIMIT 1) FROM kvmemory_items WHERE session_id = {p}"
)


# Keyed rows (records), read through the unique (session_id, key) index. A prefix
# is a range of keys (both engines compare keys by code point: SQLite's BINARY
# collation over UTF-8, PostgreSQL's "C" collation of the column).
# Both engines find rows by key through the partial index WHERE key IS NOT NULL: a
# query that lists every record (or a prefix's) says "key IS NOT NULL"; one by keys
# must not (SQLite would then walk every keyed row of the session as a range and
# test the list on each, instead of probing the index once per key).
_KEYED: Final = "SELECT key, seq, created, data FROM kvmemory_items WHERE session_id = {p}"
_KEYED_ALL: Final = _KEYED + " AND key IS NOT NULL"
_KEYED_OF: Final = _KEYED + " AND key{in}"
_KEYS: Final = "SELECT key FROM kvmemory_items WHERE session_id = {p} AND key IS NOT NULL"
_KEYED_SEQS: Final = "SELECT key, seq FROM kvmemory_items WHERE session_id = {p} AND key{in}"
# One key (a get, a put): an equality, which the engine answers without building a JSON list.
_KEYED_ONE: Final = _KEYED + " AND key = {p}"
_KEYED_SEQ_ONE: Final = "SELECT key, seq FROM kvmemory_items WHERE session_id = {p} AND key = {p}"
_FROM_KEY: Final = " AND key >= {p}"
_BELOW_KEY: Final = " AND key < {p}"


def prefix_range(prefix: str) -> tuple[str, str | None]:
    """Return the keys ``(low, high)`` such that a key starts with ``prefix`` iff ``low <= key < high`` (``high`` ``None``: no bound)."""
    chars = list(prefix)
    while chars:
        last = ord(chars.pop())
        if last < 0x10FFFF:
            following = last + 1 if last + 1 != 0xD800 else 0xE000  # surrogates are never in a key
            return prefix, "".join(chars) + chr(following)
    return prefix, None


def _pairs(rows: Sequence[Any]) -> list[tuple[int, bytes]]:
    """Return ``(seq, data)`` rows as ints and bytes: a driver's memoryview becomes bytes.

    Rows that are already pairs of an int and bytes (SQLite's) are passed
    through: checking each costs a tenth of making each pair again, which
    was a fifth of reading a session's 100,000 vectors.
    """
    if all(type(row) is tuple and type(row[0]) is int and type(row[1]) is bytes for row in rows):
        return rows if type(rows) is list else list(rows)
    return [(int(seq), bytes(data)) for seq, data in rows]


def _with_prefix(sql: str, params: list[object], prefix: str | None) -> tuple[str, list[object]]:
    """Add a key prefix to a keyed-row query, as a range the ``(session_id, key)`` index answers."""
    if not prefix:
        return sql, params
    low, high = prefix_range(prefix)
    sql, params = sql + _FROM_KEY, [*params, low]
    if high is not None:
        sql, params = sql + _BELOW_KEY, [*params, high]
    return sql, params


class SQLRows:
    """The row and vector operations of :class:`~agents.memory.stores.Backend`, in SQL both engines speak.

    A backend mixes this in before ``Backend`` and provides three public
    members these operations are written over: :attr:`dialect`,
    :attr:`no_tables` (true while the database has no kvmemory tables yet, so
    every read is empty) and :meth:`query_rows` (one read statement on the
    backend's own connection).
    """

    dialect: ClassVar[Dialect]
    driver_errors: tuple[type[BaseException], ...]
    doc_index: bool = False
    """Whether a GIN index over the rows' JSONB copy names the rows a filter may pass (PostgreSQL, schema version 11)."""
    leaf_index: bool = False
    """Whether the leaf table's btree indexes name the rows a range may pass (PostgreSQL, schema version 13)."""

    def _probe(self, tree: FilterNode, *, leaves: bool = True) -> RowProbe | None:
        """The condition naming the rows that may pass ``tree`` from the indexes at hand (PostgreSQL), or ``None``."""
        if self.dialect is not POSTGRES:
            return None
        return row_probe(tree, gin=self.doc_index, leaves=leaves and self.leaf_index)

    @property
    def no_tables(self) -> bool:
        """Whether the database has no kvmemory tables yet: every read is empty."""
        raise NotImplementedError

    def query_rows(self, sql: str, params: Any = ()) -> list[Any]:
        """Run one read statement and return its rows (the store's own connection handling)."""
        raise NotImplementedError

    def query_indexed(self, sql: str, params: Any) -> list[Any]:
        """Run one read statement meant to read rows through an index (PostgreSQL: with sequential scans off)."""
        return self.query_rows(sql, params)

    def query_vectors(self, sql: str, params: Any) -> list[Any]:
        """Run a statement that reads vectors (PostgreSQL reads them in binary)."""
        return self.query_rows(sql, params)

    # -- reading ---------------------------------------------------------------------------

    def read_seqs(self, session_id: str, seqs: Sequence[int]) -> list[tuple[int, bytes]]:
        if self.no_tables:
            return []
        d = self.dialect
        return _pairs(self.query_rows(d.spell(_ROWS_OF_SEQS), (session_id, d.bind_list(seqs))))

    def filter_candidates(self, session_id: str, tree: FilterNode) -> set[int] | None:
        """Return the seqs of the session's rows that may pass a filter, judged in SQL over the stored JSON.

        Sound, not exact (see ``_sql.filters``): the rows left out cannot
        pass; the others are still tested in Python. ``None`` when SQL
        cannot narrow the filter, or the engine cannot read the rows as
        JSON (an SQLite without JSON functions, a damaged row: decoding
        then reports it).
        """
        return self._candidates(session_id, tree, None)

    def filter_few(self, session_id: str, tree: FilterNode, most: int) -> set[int] | None:
        """Return :meth:`filter_candidates`'s answer where it holds ``most`` seqs at most, else ``None``, reading ``most + 1`` rows at most.

        The statement stops at the row past ``most`` (``LIMIT``): a filter
        most rows pass costs that many rows, not the session's (PostgreSQL:
        the heap rows the GIN index names, read and judged in the order of
        the bitmap, then left).
        """
        return self._candidates(session_id, tree, max(most, 0) + 1)

    def _candidates(self, session_id: str, tree: FilterNode, limit: int | None) -> set[int] | None:
        """Return the seqs that may pass (see :meth:`filter_candidates`); with ``limit``, ``None`` where that many may."""
        if self.no_tables:
            return set()
        postgres = self.dialect is POSTGRES
        probe = self._probe(tree)
        query = candidates_query(tree, session_id, postgres=postgres, probe=probe)
        if query is None:
            return None
        sql, params = query
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        try:
            rows = (
                self.query_indexed(sql, params)
                if probe is not None
                else self.query_rows(sql, params)
            )
            if limit is not None and len(rows) >= limit:
                return None
            return {int(seq) for (seq,) in rows}
        except self.driver_errors as exc:
            if "json" not in str(exc).lower():
                raise
            # No JSON functions, or a row that is not JSON: filtering in Python alone still
            # gives the exact answer, and decoding the rows reports the damage.
            return None

    def filter_named(self, tree: FilterNode) -> bool:
        """Return whether an index names the rows :meth:`filter_candidates` answers for a filter (PostgreSQL's GIN index over the JSONB copies, or its leaf table for ranges), where else it reads every row."""
        return self._probe(tree) is not None

    def filter_among(
        self, session_id: str, tree: FilterNode, seqs: Sequence[int]
    ) -> set[int] | None:
        """Return the seqs among ``seqs`` of the rows that may pass a filter, judged in SQL as :meth:`filter_candidates` judges them.

        Long lists are asked :data:`_AMONG_CHUNK` seqs at a time. ``None``
        when :meth:`filter_candidates` would answer ``None``, but the empty
        set for no ``seqs`` (none of them can pass).
        """
        rows = self._among(session_id, tree, seqs, data=False)
        return None if rows is None else {int(row[0]) for row in rows}

    def filter_among_rows(
        self, session_id: str, tree: FilterNode, seqs: Sequence[int]
    ) -> list[tuple[int, bytes]] | None:
        """Return ``(seq, data)`` of the rows :meth:`filter_among` answers, read by the statement that judges them (``None`` with it)."""
        rows = self._among(session_id, tree, seqs, data=True)
        return None if rows is None else _pairs(rows)

    def _among(
        self, session_id: str, tree: FilterNode, seqs: Sequence[int], *, data: bool
    ) -> list[Any] | None:
        """Return the rows (``seq``, and ``data`` with it) among ``seqs`` that may pass, or ``None`` (see :meth:`filter_among`)."""
        if self.no_tables or not seqs:
            return []
        out: list[Any] = []
        postgres = self.dialect is POSTGRES
        # Each row looked up is judged on its JSONB copy by the SQL condition, which is sound on its
        # own: no index narrows a lookup by key. The leaf table would add a scan of the range's
        # leaves per chunk, and the GIN probe's JSON path, tested on the copy alone, cost more
        # than the condition (it spells every codec tag at every path: 114 alternatives for one
        # dotted `$eq`, twice the statement's time over a ranking's 960 rows).
        for start in range(0, len(seqs), _AMONG_CHUNK):
            chunk = self.dialect.bind_list(list(seqs[start : start + _AMONG_CHUNK]))
            query = candidates_query(tree, session_id, postgres=postgres, among=chunk, data=data)
            if query is None:
                return None
            try:
                out += self.query_rows(*query)
            except self.driver_errors as exc:
                if "json" not in str(exc).lower():
                    raise
                return None  # as filter_candidates: Python alone gives the exact answer
        return out

    def vector_model(self, session_id: str) -> tuple[str, int] | None:
        if self.no_tables:
            return None
        rows = self.query_rows(self.dialect.spell(_VECTOR_MODEL), (session_id,))
        return (str(rows[0][0]), int(rows[0][1])) if rows else None

    def vector_count(self, session_id: str, fields: str) -> int:
        if self.no_tables:
            return 0
        rows = self.query_rows(self.dialect.spell(_VECTOR_COUNT), (session_id, fields))
        return int(rows[0][0])

    def vector_bytes(self, session_id: str, fields: str) -> int:
        if self.no_tables:
            return 0
        rows = self.query_rows(self.dialect.spell(_VECTOR_BYTES), (session_id, fields))
        return int(rows[0][0])

    def vector_counts(self, session_id: str, fields: str) -> tuple[int, int]:
        if self.no_tables:
            return 0, 0
        rows = self.query_rows(self.dialect.spell(_VECTOR_COUNTS), (session_id, fields))
        return int(rows[0][0]), int(rows[0][1])

    def vector_pages(
        self, session_id: str, fields: str, size: int
    ) -> Iterator[list[tuple[int, bytes]]]:
        if self.no_tables:
            return
        sql = self.dialect.spell(_VECTOR_PAGE)
        rows = _pairs(self.query_vectors(sql, (session_id, fields, -1, size)))
        while rows:
            yield rows
            rows = _pairs(self.query_vectors(sql, (session_id, fields, rows[-1][0], size)))

    def vectors_of(
        self, session_id: str, fields: str, seqs: Sequence[int]
    ) -> list[tuple[int, bytes]]:
        if self.no_tables:
            return []
        d = self.dialect
        params = (session_id, fields, d.bind_list(seqs))
        return _pairs(self.query_vectors(d.spell(_VECTORS_OF_SEQS), params))

    def unembedded_pages(
        self, session_id: str, fields: str, size: int
    ) -> Iterator[list[tuple[int, bytes]]]:
        if self.no_tables:
            return
        sql = self.dialect.spell(_UNEMBEDDED_PAGE)
        rows = _pairs(self.query_rows(sql, (session_id, -1, fields, size)))
        while rows:
            yield rows
            rows = _pairs(self.query_rows(sql, (session_id, rows[-1][0], fields, size)))

    # -- keyed rows --------------------------------------------------------------------------

    @property
    def keyed_rows(self) -> bool:
        """Whether the rows have the record key column (``False`` for an older layout opened read-only)."""
        return True

    def read_keyed(
        self, session_id: str, keys: Sequence[str] | None = None, *, prefix: str | None = None
    ) -> list[KeyedRow]:
        if self.no_tables or not self.keyed_rows:
            return []
        d = self.dialect
        params: list[object]
        if keys is not None and len(keys) == 1:
            sql, params = _KEYED_ONE, [session_id, keys[0]]
        elif keys is not None:
            sql, params = _KEYED_OF, [session_id, d.bind_list(keys)]
        else:
            sql, params = _KEYED_ALL, [session_id]
        sql, params = _with_prefix(sql, params, prefix)
        return [
            (str(key), int(seq), float(created), bytes(data))
            for key, seq, created, data in self.query_rows(d.spell(sql), params)
        ]

    def record_keys(self, session_id: str, prefix: str | None = None) -> list[str]:
        if self.no_tables or not self.keyed_rows:
            return []
        sql, params = _with_prefix(_KEYS, [session_id], prefix)
        return [str(row[0]) for row in self.query_rows(self.dialect.spell(sql), params)]

    def keyed_seqs(self, tx: Any, session_id: str, keys: Sequence[str]) -> dict[str, int]:
        d = self.dialect
        if len(keys) == 1:
            rows = tx.execute(d.spell(_KEYED_SEQ_ONE), (session_id, keys[0])).fetchall()
        else:
            rows = tx.execute(d.spell(_KEYED_SEQS), (session_id, d.bind_list(keys))).fetchall()
        return {str(key): int(seq) for key, seq in rows}

    def read_keyed_in(self, tx: Any, session_id: str, keys: Sequence[str]) -> list[KeyedRow]:
        d = self.dialect
        if len(keys) == 1:
            rows = tx.execute(d.spell(_KEYED_ONE), (session_id, keys[0])).fetchall()
        else:
            rows = tx.execute(d.spell(_KEYED_OF), (session_id, d.bind_list(keys))).fetchall()
        return [
            (str(key), int(seq), float(created), bytes(data)) for key, seq, created, data in rows
        ]

    # -- writing, inside a transaction (``tx`` is the driver's connection) -------------------

    def claim_vector_model(
        self, tx: Any, session_id: str, model: str, dimension: int
    ) -> tuple[str, int]:
        d = self.dialect
        tx.execute(d.spell(_CLAIM_MODEL), (session_id, model, dimension))
        row = tx.execute(d.spell(_VECTOR_MODEL), (session_id,)).fetchone()
        return str(row[0]), int(row[1])

    def delete_vectors(self, tx: Any, session_id: str, seqs: Sequence[int]) -> None:
        d = self.dialect
        tx.execute(d.spell(_DELETE_VECTORS_OF), (session_id, d.bind_list(seqs)))

    def drop_vectors(self, tx: Any, session_id: str) -> int:
        d = self.dialect
        gone = tx.execute(d.spell(_DELETE_VECTORS), (session_id,)).rowcount
        tx.execute(d.spell(_DELETE_MODEL), (session_id,))
        return int(gone)

    def delete_rows(self, tx: Any, session_id: str, seqs: Sequence[int]) -> list[int]:
        d = self.dialect
        rows = tx.execute(d.spell(_DELETE_ROWS), (session_id, d.bind_list(seqs))).fetchall()
        return sorted(int(row[0]) for row in rows)

    def clear_rows(self, tx: Any, session_id: str) -> int:
        return int(tx.execute(self.dialect.spell(_CLEAR_ROWS), (session_id,)).rowcount)

    def row_index(self, tx: Any, session_id: str) -> list[IndexEntry]:
        rows = tx.execute(self.dialect.spell(_ROW_INDEX), (session_id,)).fetchall()
        return [(int(seq), step, float(created)) for seq, step, created in rows]

    def last_step(self, tx: Any, session_id: str) -> tuple[int, str | None]:
        count, step = tx.execute(
            self.dialect.spell(_LAST_STEP), (session_id, session_id)
        ).fetchone()
        return int(count), step
