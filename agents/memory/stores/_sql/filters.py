"""A search filter as SQL: the rows of a session that may pass, so the others are never decoded.

The stores filter a ranking with the one compiled
:class:`~agents.memory.search.Filter`, in Python, on decoded items (see
``_search.filtering``); that is what makes every store keep exactly what
``Memory.search`` keeps. SQLite and PostgreSQL can also tell, in SQL over
the stored JSON, which rows *may* pass: :func:`candidates_sql` writes that
condition. It is sound, never exact by design: a row it leaves out cannot
pass the filter; a row it keeps is still tested in Python. Whatever SQL
cannot judge exactly is kept:

* a value stored as a JSON object or array (dicts, lists, and every value
  the codec tags: dates, tuples, enums, ``Decimal``, NaN, infinities, big
  ints), a PostgreSQL row without its JSONB copy, a function filter;
* a dotted field name (a path into nested dicts, ``"value.color"``) in a row
  that holds a field of that whole name (Python reads that field first) or
  whose path passes through a type-tagged object (a dict the codec wrapped:
  non-string keys, a ``"$kv"`` key); otherwise SQL follows the path one
  object key at a time, so that, as in Python, a list or scalar on the way
  leaves the value missing;
* numbers within a relative 1e-9 of the operand (SQL engines parse and
  compare JSON numbers in their own arithmetic; Python decides the rest),
  and ints beyond 2**53 as operands.

Strings compare exactly: SQLite's BINARY collation and PostgreSQL's
``COLLATE "C"`` order UTF-8 by code point, as Python does.
"""

from __future__ import annotations

import math
from typing import Any, Final

import attrs

from agents.memory._codec import TAG
from agents.memory._filter import AllOf, AnyOf, Condition, FilterNode
from agents.memory.stores._sql.probes import RowProbe

__all__ = ["POSTGRES_FIELDS", "candidates_query", "postgres_condition"]

# SQLite's JSON functions cut a string at an escaped NUL character: rows holding one are
# judged in Python, as PostgreSQL's rows without a JSONB copy are. A row whose text holds
# no "$kv" (nor a backslash, which could spell it) is no item wrapper: it is not parsed to
# find out. "LIMIT -1 OFFSET 0" keeps SQLite from flattening the subquery, which would
# unwrap ``f`` again (parsing the row's JSON once more) in every JSON function reading it.
_SQLITE_ROWS: Final = (
    "SELECT seq{data} FROM (SELECT seq{data}, d, instr(d, '\\u0000') > 0 AS opaque,"
    " CASE WHEN instr(d, '\"$kv\"') = 0 AND instr(d, char(92)) = 0"
    " OR json_type(d, '$.\"$kv\"') IS NULL THEN d"
    " ELSE json_extract(d, '$.fields') END AS f FROM (SELECT seq{data}, CAST(data AS TEXT) AS d"
    " FROM kvmemory_items WHERE session_id = ?{among}{guard}) LIMIT -1 OFFSET 0) WHERE "
)
# A row that holds a string equal to a filter's operand (one without a quote, backslash
# or control character) holds it quoted as it reads, unless a writer spelled one of its
# characters with "\u" (or "/" as "\/"), or the value is one the codec tagged (the row
# then holds "$kv"): such rows are judged as before; the others are not parsed at all.
# Bytes are searched in the stored bytes, with no cast.
_GUARDED: Final = (
    " AND (instr(data, X'5C75') > 0 OR instr(data, X'22246B7622') > 0{slash} OR {texts})"
)
_SLASH: Final = " OR instr(data, X'5C2F') > 0"
_PLAIN: Final = frozenset(map(chr, range(0x20))) | {'"', "\\"}
# PostgreSQL decompresses a stored JSONB value anew at each operator that reads it:
# "doc || '{}'" in a subquery kept apart by OFFSET 0 reads each row's copy once.
# ``{data}`` (", data" or nothing): the rows that may pass are read by the same statement.
_POSTGRES_ROWS: Final = (
    "SELECT seq{data} FROM (SELECT seq{data}, doc IS NULL AS opaque, CASE WHEN doc ? '$kv'"
    " THEN doc -> 'fields' ELSE doc END AS f FROM (SELECT seq{data}, doc || '{{}}'::jsonb AS doc"
    " FROM {rows} OFFSET 0) AS plain OFFSET 0) AS r WHERE "
)
_POSTGRES_SESSION: Final = "kvmemory_items WHERE session_id = %s"
# The rows the GIN index over the JSONB copy or the leaf table names (see _sql.probes), and the rows without
# a copy (a partial index holds them): a bitmap of each, read instead of the whole session. The
# session is matched as an expression no index answers: a planner whose statistics predate the
# session takes it for a few rows and reads every one by session_id (2,000 rows: 41 ms, against
# under 1 ms from the bitmaps). Run with sequential scans off (the predicate's estimate is a guess).
_POSTGRES_PROBED: Final = "kvmemory_items WHERE ({probe} OR doc IS NULL) AND session_id || '' = %s"
# A probe of the leaf table that every condition went into (see _sql.probes) names the rows the
# condition keeps but for its widening, from the indexes alone: its seqs and the rows without a
# copy are the answer, without reading and judging each row's JSONB copy (9,100 rows of 30,000:
# 6 ms against 61 ms), a superset the filter judges in Python as it judges every answer.
_POSTGRES_LEAVES: Final = (
    "SELECT seq FROM ({named}) AS named"
    " UNION SELECT seq FROM kvmemory_items WHERE session_id = {session} AND doc IS NULL"
)
# Only the rows among some seqs (bound as a JSON array in SQLite, an array in PostgreSQL).
_SQLITE_AMONG: Final = " AND seq IN (SELECT value FROM json_each(?))"
# Each looked up by its key, the session id kept from the planner (OFFSET 0): a planner whose
# statistics predate the session takes it for a row or two and reads it by session_id, in
# another index, to find the seqs (every row of a new session of 300 per seq, with LIMIT 1).
_POSTGRES_AMONG: Final = (
    "(SELECT %s::text AS sid OFFSET 0) AS x"
    " CROSS JOIN (SELECT DISTINCT unnest(%s::bigint[]) AS wanted) AS k"
    " CROSS JOIN LATERAL (SELECT i.seq, i.doc{data} FROM kvmemory_items AS i"
    " WHERE i.session_id = x.sid AND i.seq = k.wanted{probe} LIMIT 1) AS kvmemory_items"
)

POSTGRES_FIELDS: Final = (
    "SELECT doc IS NULL AS opaque, CASE WHEN doc ? '$kv' THEN doc -> 'fields' ELSE doc END AS f"
    " FROM (SELECT {doc} || '{{}}'::jsonb AS doc OFFSET 0) AS plain OFFSET 0"
)
"""PostgreSQL's ``opaque`` and ``f`` of one row, from the JSONB ``{doc}`` (read once), for
the condition :func:`postgres_condition` writes."""

_SAFE_INT: Final = 2**53
_SLACK: Final = 1e-9


@attrs.define
class _Writer:
    """Writes the condition for one dialect, collecting its parameters in order."""

    postgres: bool
    params: list[Any] = attrs.Factory(list)

    @property
    def true(self) -> str:
        return "TRUE" if self.postgres else "1"

    @property
    def false(self) -> str:
        return "FALSE" if self.postgres else "0"

    def p(self, value: Any, cast: str = "") -> str:
        self.params.append(value)
        return f"%s::{cast}" if self.postgres and cast else ("%s" if self.postgres else "?")

    def key(self, name: str) -> str:
        """SQLite's JSON path of a field: one quoted object key per dotted part."""
        return "$" + "".join(f'."{part}"' for part in name.split("."))

    def at(self, name: str, *, text: bool = False) -> str:
        """PostgreSQL's value of a field, one object key per dotted part (``->`` on a list gives NULL)."""
        parts = name.split(".")
        path = "".join(f" -> {self.p(part, 'text')}" for part in parts[:-1])
        last = "->>" if text else "->"
        return f"(f{path} {last} {self.p(parts[-1], 'text')})"

    def type_of(self, name: str) -> str:
        if self.postgres:
            return f"jsonb_typeof({self.at(name)})"
        return f"json_type(f, {self.p(self.key(name))})"

    def present(self, name: str) -> str:
        """The field (or path) holds a value, any JSON value."""
        if self.postgres:
            return f"{self.at(name)} IS NOT NULL"
        return f"json_type(f, {self.p(self.key(name))}) IS NOT NULL"

    def path_opaque(self, name: str) -> str:
        """SQL cannot follow the dotted ``name`` as Python does: see the module's notes."""
        parts = name.split(".")
        if self.postgres:
            whole = f"(f -> {self.p(name, 'text')}) IS NOT NULL"
            inside = [self.present(".".join([*parts[:end], TAG])) for end in range(1, len(parts))]
            return "(" + " OR ".join(["opaque", whole, *inside]) + ")"
        # SQLite parses the row's JSON in every JSON function: a key that is not in the row's
        # text, quoted as JSON writes it unescaped, is not in the row (a row holding a
        # backslash may spell it with escapes: it is parsed).
        whole = f"{self.in_text(name)} AND json_type(f, {self.p('$.' + _quoted(name))}) IS NOT NULL"
        checks = ["opaque", whole]
        for end in range(1, len(parts)):
            guard = self.in_text(TAG)  # parameters bind in the order written
            tagged = self.p(self.key(".".join([*parts[:end], TAG])))
            checks.append(f"{guard} AND json_type(f, {tagged}) IS NOT NULL")
        return "(" + " OR ".join(checks) + ")"

    def in_text(self, key: str) -> str:
        """SQLite: the row's text may hold ``key`` as an object key (or spells something with escapes)."""
        return f"(instr(d, {self.p(_quoted(key))}) > 0 OR instr(d, {self.p(chr(92))}) > 0)"

    def opaque(self, name: str) -> str:
        """The value is a JSON object or array, or the row is one SQL cannot read exactly: SQL cannot judge it."""
        return f"(opaque OR {self.type_of(name)} IN ('object', 'array'))"

    def is_number(self, name: str) -> str:
        if self.postgres:
            return f"{self.type_of(name)} = 'number'"
        return f"{self.type_of(name)} IN ('integer', 'real')"

    def number(self, name: str) -> str:
        if self.postgres:
            return f"(CASE WHEN {self.is_number(name)} THEN {self.at(name)}::numeric::float8 END)"
        return (
            f"(CASE WHEN {self.is_number(name)} THEN json_extract(f, {self.p(self.key(name))}) END)"
        )

    def text(self, name: str) -> str:
        if self.postgres:
            return f"(CASE WHEN {self.type_of(name)} = 'string' THEN {self.at(name, text=True)} END) COLLATE \"C\""
        return f"(CASE WHEN {self.type_of(name)} = 'text' THEN json_extract(f, {self.p(self.key(name))}) END)"

    def sure(self, condition: str) -> str:
        """A condition that is false, not NULL, where it cannot be evaluated."""
        return f"COALESCE({condition}, {self.false})"


def candidates_query(
    tree: FilterNode,
    session_id: str,
    *,
    postgres: bool,
    among: object = None,
    data: bool = False,
    probe: RowProbe | None = None,
) -> tuple[str, list[Any]] | None:
    """Return the query for the seqs of a session's rows that may pass ``tree``, with its parameters.

    With ``among`` (some seqs, bound as the dialect binds a list: a JSON
    array in SQLite, a list in PostgreSQL), only the rows among them. With
    ``data``, each row's stored ``data`` beside its seq. With ``probe``
    (PostgreSQL with the GIN index over the JSONB copy:
    :func:`~agents.memory.stores._sql.doc_index.index_predicate`'s
    answer for ``tree``), only the rows the predicate holds for (or
    without a copy) are judged: of a whole session, the rows the index
    names; among seqs, each row looked up is tested, so that both answer
    alike.

    The condition reads ``f``, the item's fields (unwrapped from the
    codec's item wrapper) as JSON text in SQLite and JSONB in PostgreSQL,
    beside ``opaque``: the row holds a NUL character (SQLite's JSON
    functions cut strings there) or has no JSONB copy (PostgreSQL). ``None``
    when the condition would keep every row (nothing to gain from asking).
    """
    writer = _Writer(postgres, [session_id] if among is None else [session_id, among])
    probed = None
    if postgres and probe is not None:
        if among is None:
            # Parameters bind in the order written: the probe's, the session's, the condition's.
            writer.params.clear()
            probed = probe.sql(writer.p, session_id)
            writer.params.append(session_id)
        else:  # after the session's and the seqs'
            probed = probe.sql(writer.p, session_id, "i.")
    guard = None if postgres else _texts(writer, tree)
    sql = _maybe(writer, tree)
    if sql is None:
        return None
    if postgres and probe is not None and probe.whole and among is None and not data:
        leaves = _Writer(postgres)
        named = probe.seqs_sql(leaves.p, session_id)
        return _POSTGRES_LEAVES.format(
            named=named, session=leaves.p(session_id, "text")
        ), leaves.params
    if postgres:
        column = ", data" if data else ""
        if among is not None:
            narrowed = "" if probed is None else f" AND ({probed} OR i.doc IS NULL)"
            source = _POSTGRES_AMONG.format(data=column, probe=narrowed)
        elif probed is not None:
            source = _POSTGRES_PROBED.format(probe=probed)
        else:
            source = _POSTGRES_SESSION
        rows = _POSTGRES_ROWS.format(rows=source, data=column)
        return rows + f"({sql})", writer.params
    if guard is not None:
        slash = (
            _SLASH
            if any(b"/" in value for value in writer.params if isinstance(value, bytes))
            else ""
        )
        guard = _GUARDED.format(slash=slash, texts=guard)
    rows = _SQLITE_ROWS.format(
        among="" if among is None else _SQLITE_AMONG,
        guard=guard or "",
        data=", data" if data else "",
    )
    return rows + f"({sql})", writer.params


def postgres_condition(tree: FilterNode) -> tuple[str, list[Any]] | None:
    """Return the PostgreSQL condition under which a row may pass ``tree``, with its parameters in order.

    The condition is :func:`candidates_query`'s, over ``f`` and ``opaque``
    (:data:`POSTGRES_FIELDS` gives them), each parameter written ``%s``.
    ``None`` when it would hold for every row.
    """
    writer = _Writer(True, [])
    sql = _maybe(writer, tree)
    return None if sql is None else (f"({sql})", writer.params)


def _texts(w: _Writer, node: FilterNode) -> str | None:
    """SQLite: a condition on the stored bytes that every row where ``node`` holds meets, unless it holds a backslash or ``"$kv"``.

    ``None`` when there is none (a filter that does not ask a field for a
    string, or for one of some strings, on every branch).
    """
    if isinstance(node, AllOf):
        parts = [sql for sql in (_texts(w, part) for part in node.parts) if sql is not None]
        return " AND ".join(f"({sql})" for sql in parts) if parts else None
    if isinstance(node, AnyOf):
        mark = len(w.params)
        parts = []
        for part in node.parts:
            sql = _texts(w, part)
            if sql is None:
                del w.params[mark:]
                return None
            parts.append(sql)
        return " OR ".join(f"({sql})" for sql in parts)
    if not isinstance(node, Condition):
        return None
    wanted = [node.operand] if node.op == "$eq" else node.operand if node.op == "$in" else None
    if not wanted or not all(type(x) is str and _PLAIN.isdisjoint(x) for x in wanted):
        return None
    return " OR ".join(f"instr(data, {w.p(_quoted(x).encode())}) > 0" for x in wanted)


def _maybe(w: _Writer, node: FilterNode) -> str | None:
    """SQL that holds for every row where ``node`` may hold; ``None`` for "every row"."""
    mark = len(w.params)
    sql = _node_maybe(w, node)
    if sql is None:
        del w.params[mark:]  # the parameters of parts written before SQL gave up
    return sql


def _node_maybe(w: _Writer, node: FilterNode) -> str | None:
    if isinstance(node, AllOf):
        parts = [sql for sql in (_maybe(w, part) for part in node.parts) if sql is not None]
        return " AND ".join(f"({sql})" for sql in parts) if parts else None
    if isinstance(node, AnyOf):
        parts = []
        for part in node.parts:
            sql = _maybe(w, part)
            if sql is None:
                return None
            parts.append(sql)
        return " OR ".join(f"({sql})" for sql in parts)
    if not isinstance(node, Condition) or not _addressable(node.field):
        return None
    sql = _condition(w, node)
    if sql is None or "." not in node.field:
        return sql
    return f"({sql}) OR {w.path_opaque(node.field)}"


def _addressable(name: str) -> bool:
    """Whether SQL can address the field: no quotes, backslashes or NULs, no empty dotted part."""
    return all(name.split(".")) and not any(c in name for c in '"\\\x00')


def _condition(w: _Writer, node: Condition) -> str | None:
    name, op, x = node.field, node.op, node.operand
    if op == "$eq":
        return _equal_maybe(w, name, x)
    if op == "$in":
        parts = [_equal_maybe(w, name, element) for element in x]
        if any(part is None for part in parts):
            return None
        return " OR ".join(f"({part})" for part in parts) if parts else w.false
    if op == "$ne":
        sure = _equal_sure(w, name, x)
        return None if sure is None else f"NOT {w.sure(sure)}"
    if op == "$nin":
        sures = [_equal_sure(w, name, element) for element in x]
        known = [sure for sure in sures if sure is not None]
        if not known:
            return None
        return f"NOT {w.sure(' OR '.join(f'({sure})' for sure in known))}"
    if op == "range":
        if not x:
            return w.false
        low, high = min(x[0], x[-1]), max(x[0], x[-1])  # a range's ends, without walking it
        if max(abs(low), abs(high)) >= _SAFE_INT:
            return None
        # Each fragment binds its own parameters, in the order written: never reuse one.
        above = f"{w.number(name)} >= {w.p(low - 0.5, 'float8')}"
        inside = w.sure(f"{above} AND {w.number(name)} <= {w.p(high + 0.5, 'float8')}")
        return f"{inside} OR {w.opaque(name)}"
    return _ordered_maybe(w, name, op, x)


def _number_operand(x: Any) -> float | None:
    """The operand as a float SQL can compare with a slack, or ``None`` if it is too large to."""
    value = float(x) if abs(x) < _SAFE_INT or isinstance(x, float) else math.inf
    return value if math.isfinite(value) and abs(value) < 1e300 else None


def _quoted(key: str) -> str:
    return '"' + key + '"'


def _equal_maybe(w: _Writer, name: str, x: Any) -> str | None:
    if not w.postgres and (isinstance(x, bool) or x is None):
        # One parse of the row's JSON: the value's type says it all.
        word = "null" if x is None else ("true" if x else "false")
        return (
            f"CASE json_type(f, {w.p(w.key(name))}) WHEN '{word}' THEN 1 WHEN 'object' THEN 1"
            " WHEN 'array' THEN 1 ELSE opaque END"
        )
    if not w.postgres and isinstance(x, str) and "\x00" not in x:
        kind = f"json_type(f, {w.p(w.key(name))})"
        equal = f"COALESCE(json_extract(f, {w.p(w.key(name))}) = {w.p(x)}, 0)"
        return (
            f"CASE {kind} WHEN 'text' THEN {equal} OR opaque WHEN 'object' THEN 1"
            " WHEN 'array' THEN 1 ELSE opaque END"
        )
    if isinstance(x, (bool, str)) or x is None:
        sure = _equal_sure(w, name, x)
        return f"{w.sure(sure or w.false)} OR {w.opaque(name)}"
    if isinstance(x, (int, float)):
        value = _number_operand(x)
        if value is None:
            return None
        slack = abs(value) * _SLACK
        near = w.sure(f"abs({w.number(name)} - {w.p(value, 'float8')}) <= {w.p(slack, 'float8')}")
        return f"{near} OR {w.opaque(name)}"
    return w.opaque(name)  # lists, dicts, tagged values: stored as objects and arrays


def _equal_sure(w: _Writer, name: str, x: Any) -> str | None:
    """SQL that holds only where the field is equal to ``x`` (``None``: SQL cannot be sure of any row)."""
    if x is None:
        return f"{w.type_of(name)} = 'null'"
    if isinstance(x, bool):
        word = "true" if x else "false"
        if w.postgres:
            return f"{w.at(name)} = '{word}'::jsonb"
        return f"{w.type_of(name)} = '{word}'"
    if isinstance(x, str):
        if "\x00" in x:
            return w.false  # no string SQL reads holds NUL (rows holding one are opaque)
        return f"{w.text(name)} = {w.p(str(x), 'text')}"
    return None


def _ordered_maybe(w: _Writer, name: str, op: str, x: Any) -> str | None:
    sign = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}[op]
    if isinstance(x, str):
        if "\x00" in x:
            return None  # PostgreSQL cannot take it as text; Python judges
        compare = w.sure(f"{w.text(name)} {sign} {w.p(str(x), 'text')}")
        return f"{compare} OR {w.opaque(name)}"
    value = _number_operand(x)
    if value is None:
        return None
    slack = abs(value) * _SLACK
    bound = value - slack if op in ("$gt", "$gte") else value + slack
    wide = ">=" if op in ("$gt", "$gte") else "<="
    compare = w.sure(f"{w.number(name)} {wide} {w.p(bound, 'float8')}")
    return f"{compare} OR {w.opaque(name)}"
