"""The values of filtered fields of each session held in RAM as encoded rows, kept by one handle so that a filter is judged without decoding items.

A JSONL log (and the in-process store, ``memory://``) keeps no column of
any field, so telling which items pass a search filter
(``where={"agent": "reviewer"}``) means decoding them. A filtered keyword
query used to walk its ranking and decode its candidates one by one until
``k`` passed: about 600 items for a filter that 1% pass, six to eight times
the unfiltered query (20-30x on ``memory://``). :class:`FilterValues`
decodes every live item once for the fields a filter reads, keeps each
item's values of them (``value_at``'s, ``NOTHING`` where it holds none),
and from then on judges any filter over those fields from the kept values,
with the comparisons :class:`~agents.memory.search.Filter` compiles
(:func:`~agents.memory._filter.node_test`): the same items pass.

The values are this handle's memory only, never written: each is kept with
the record bytes it was read from, the very object the rows (``seq ->
(step, created, data)``) hold. An item appended, changed or deleted (by
this handle, another handle or another process), a log cleared, compacted
or written again, each leaves the rows holding other objects (or none) for
those seqs, and only those items are decoded again when the view (the rows
object and its stamp) has moved since the values were last brought up to
date; the rest are known unchanged, object for object.

The first filter on a field had every item decoded (about 11 us an item
of 1 kB: 110 ms at 10,000 steps unloaded, 1.5-3.3 s under load), where
the query itself takes a millisecond. A filter on fields not kept is
*screened* instead: only the rows that may pass are decoded and tested,
the answer kept and brought up to date as the rows change, as the values
are. The rows that may pass are named by the rows' value index
(:class:`~agents.memory.stores._core.value_index.ValueIndex`, kept by a
:class:`~agents.memory.stores._core.rows.RowTable` as rows are written:
a set lookup, about 0.1 ms) where it can tell (``$eq``, ``$in`` and
orderings of strings up to 64 characters and numbers, ``$and``,
``$or``), else by :func:`~agents.memory.stores._core.screens.row_screen`
from the record bytes (about 10-30 ms to look through 10,000 rows of 1
kB, against 110 to decode them). Where only screened filters are kept
over a ``RowTable``, no copy of the rows is kept: the table's change log
names the rows to judge again. (The search terms a keyword index keeps
are no screen: they are taken from ``str()`` of a value, which for a
string enum is not its value.)
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, Final

from agents.memory._filter import (
    AllOf,
    AnyOf,
    Condition,
    FilterNode,
    node_fields,
    node_test,
    value_at,
)
from agents.memory.stores._core.encoding import decode_pairs
from agents.memory.stores._core.rows import RowTable
from agents.memory.stores._core.screens import row_screen

__all__ = ["FEW", "CommonFilters", "FilterValues", "JudgedFilters", "ranked_where"]

Rows = Mapping[int, tuple[Any, Any, bytes]]
"""A session's live rows: ``seq -> (step, created, data)``."""


class _Column:
    """One field's kept values: each seq's, and the seqs of each distinct value (so that a condition tests each value once)."""

    def __init__(self) -> None:
        self.values: dict[int, Any] = {}
        self.groups: dict[tuple[type, Any], tuple[Any, set[int]]] = {}
        self.unhashable: set[int] = set()

    def put(self, seq: int, value: Any) -> None:
        """Keep ``value`` for ``seq`` (in place of the one kept before, if any)."""
        self.drop(seq)
        self.values[seq] = value
        try:
            key = (type(value), value)  # 1, 1.0 and True stay apart: filters tell their kinds apart
            group = self.groups.get(key)
        except TypeError:  # a list, a dict: tested one by one
            self.unhashable.add(seq)
            return
        if group is None:
            self.groups[key] = (value, {seq})
        else:
            group[1].add(seq)

    def drop(self, seq: int) -> None:
        """Forget the value kept for ``seq``, if any."""
        value = self.values.pop(seq, _MISSING)
        if value is _MISSING:
            return
        if seq in self.unhashable:
            self.unhashable.discard(seq)
            return
        key = (type(value), value)
        group = self.groups.get(key)
        if group is not None:
            group[1].discard(seq)
            if not group[1]:
                del self.groups[key]

    def passing(self, test: Callable[[Any], bool]) -> set[int]:
        """Return the seqs whose value passes ``test``."""
        out: set[int] = set()
        for value, seqs in self.groups.values():
            if test(value):
                out |= seqs
        values = self.values
        out.update(seq for seq in self.unhashable if test(values[seq]))
        return out


_MISSING: Final = object()


class _Screened:
    """The live seqs whose items pass one filter, found by screening the record bytes (see the module docstring), with what keeps them current."""

    def __init__(self, tree: FilterNode) -> None:
        test = node_test(tree)
        assert test is not None  # a function of the item is never screened
        self.test = test
        self.fields = sorted(node_fields(tree) or ())
        self.found: set[int] = set()

    def judge(self, seq: int, item: Any) -> None:
        """Keep ``seq`` among the passing if its (new) item passes, else drop it."""
        if self.test({field: value_at(item, field) for field in self.fields}):
            self.found.add(seq)
        else:
            self.found.discard(seq)


class _Values:
    """One session's kept values: the rows and stamp they match, each seq's record bytes, the columns, the screened filters, and the filters judged since the values last changed."""

    def __init__(self, rows: Rows) -> None:
        self.rows = rows
        self.offset = -1
        self.size = -1
        self.data: dict[int, bytes] = {}
        self.fields: dict[str, _Column] = {}
        self.judged: dict[Hashable, set[int]] = {}
        self.screened: OrderedDict[Hashable, _Screened] = OrderedDict()
        self.mark = -1  # the rows' RowTable.mark when last brought up to date

    def passing(self, node: FilterNode) -> set[int]:
        """Return the live seqs whose items pass ``node`` (a tree of conditions on kept fields), kept until a value changes."""
        key = _node_key(node)
        try:
            found = self.judged.get(key)
        except TypeError:  # an operand that cannot be hashed (a dict to be equal to): judged again
            return self._judge(node)
        if found is None:
            found = self.judged[key] = self._judge(node)
        return found

    def _judge(self, node: FilterNode) -> set[int]:
        if isinstance(node, Condition):
            test = node_test(node)
            assert test is not None  # a condition is no function of the item
            field = node.field
            return self.fields[field].passing(lambda value: test({field: value}))
        assert isinstance(node, (AllOf, AnyOf))  # a function of the item is never kept
        if not node.parts:
            return set(self.rows)
        parts = [self.passing(part) for part in node.parts]
        if isinstance(node, AllOf):
            return set.intersection(*sorted(parts, key=len))
        return set.union(*parts)

    def screen(
        self,
        node: FilterNode,
        select: Callable[[Rows, FilterNode], tuple[set[int], list[tuple[int, bytes]]] | None],
        source: str,
    ) -> set[int] | None:
        """Return the live seqs whose items pass ``node``, decoding only the rows ``select`` leaves unsure; kept, and brought up to date as rows change. ``None`` where ``select`` cannot tell.

        ``select`` gives the seqs known to pass and ``(seq, data)`` of those
        that may (decoded and tested here).
        """
        key = _node_key(node)
        try:
            kept = self.screened.get(key)
        except TypeError:  # a part's operand cannot be hashed (a list to be equal to): judged again
            key, kept = None, None
        if kept is not None:
            self.screened.move_to_end(key)
            return kept.found
        selected = select(self.rows, node)
        if selected is None:
            return None
        kept = _Screened(node)
        kept.found, may = selected
        for seq, item in decode_pairs(may, source, "base"):
            kept.judge(seq, item)
        if key is None:
            return kept.found
        self.screened[key] = kept
        if len(self.screened) > SCREENED_KEPT:
            self.screened.popitem(last=False)
        return kept.found

    def forget_seqs(self, seqs: Sequence[int]) -> None:
        """Forget rows that are gone: their bytes, values and places among the screened."""
        data = self.data
        for seq in seqs:
            data.pop(seq, None)  # absent where only screened filters are kept
            for column in self.fields.values():
                column.drop(seq)
            for screened in self.screened.values():
                screened.found.discard(seq)


SCREENED_KEPT: Final = 32
"""The screened filters a session keeps current at most (the least recently asked forgotten first)."""


class FilterValues:
    """The values of filtered fields, per session, each kept current with the session's log view.

    Every method expects the caller to hold the store's lock (shared at
    least) and the log view to be current; the values have a lock of
    their own besides, so that readers holding a shared lock take turns.

    Args:
        canonical: Whether every row's bytes are the codec's own encoding
            (written in this process through it): a screened filter then
            need not decode the rows holding a ``\\u`` or ``\\/`` escape.
    """

    def __init__(self, *, canonical: bool = False) -> None:
        self._sessions: dict[str, _Values] = {}
        self._canonical = canonical
        self._lock = threading.Lock()

    def passing(
        self,
        session_id: str,
        view: tuple[Rows, int],
        tree: FilterNode,
        source: str,
        seqs: Sequence[int] | None = None,
    ) -> set[int] | None:
        """Return the live seqs (among ``seqs``, if given) whose items pass ``tree``; ``None`` if only the item can tell (a function of it).

        ``view`` is the session's rows now with a stamp that changes with
        them whenever the same rows object is changed in place (a JSONL
        view's offset, a count of writes). A filter on fields not kept yet
        whose candidates the rows' value index names, or that
        :func:`~agents.memory.stores._core.screens.row_screen` can screen,
        is answered by decoding only those rows; any other has its fields'
        values kept (every item decoded once).

        The set returned for all seqs is the one kept: the caller does not change it.

        Raises:
            CorruptStoreError: if an item of the log cannot be decoded.
        """
        fields = node_fields(tree)
        if fields is None:
            return None
        with self._lock:
            kept = self._sessions.get(session_id)
            if kept is None:
                kept = _Values(view[0])
                self._sessions[session_id] = kept
            found = None
            if not fields <= kept.fields.keys():
                self._current(kept, view, (), source)
                found = kept.screen(tree, self._may_pass, source)
            if found is None:
                self._current(kept, view, sorted(fields), source)
                found = kept.passing(tree)
            if seqs is None:
                return found
            return {seq for seq in seqs if seq in found}

    def answers_cheaply(self, session_id: str, rows: Rows, tree: FilterNode) -> bool:
        """Return whether :meth:`passing` can judge ``tree`` over the session without decoding every item: the values of its fields are kept, or the rows' value index names its rows."""
        fields = node_fields(tree)
        if fields is None:
            return False
        with self._lock:
            kept = self._sessions.get(session_id)
            if kept is not None and fields <= kept.fields.keys():
                return True
        return isinstance(rows, RowTable) and rows.value_index.judged(tree) is not None

    def _may_pass(
        self, rows: Rows, tree: FilterNode
    ) -> tuple[set[int], list[tuple[int, bytes]]] | None:
        """Return the seqs of the rows known to pass ``tree``, and ``(seq, data)`` of those that may, in seq order: as the rows' value index tells where it can (the rows it answers exactly are not decoded), else the rows whose bytes pass a screen; ``None`` where neither can tell."""
        found = rows.value_index.judged(tree) if isinstance(rows, RowTable) else None
        if found is not None:
            passing, unsure = found
            return passing, [(seq, rows[seq][2]) for seq in sorted(unsure) if seq in rows]
        screen = row_screen(tree, canonical=self._canonical)
        return None if screen is None else (set(), screen.select(rows.items()))

    @staticmethod
    def _current(kept: _Values, view: tuple[Rows, int], fields: Sequence[str], source: str) -> None:
        """Bring the session's kept values up to date, ``fields`` kept for every live item, decoding only the items not known unchanged."""
        rows, stamp = view
        new = [field for field in fields if field not in kept.fields]
        # Rows read afresh (another log, or the same one read again) hold other objects.
        moved = kept.rows is not rows or kept.offset != stamp or kept.size != len(rows)
        if new:  # every item read again, for every field kept
            kept.forget_seqs([seq for seq in kept.data if seq not in rows])  # and the screened
            kept.fields = {field: _Column() for field in [*kept.fields, *new]}
            if not kept.data:  # only screened filters were kept, of rows no copy names
                kept.screened.clear()
            kept.data.clear()
        elif not moved:
            return
        data = kept.data
        changed = None
        if kept.rows is rows and not new and isinstance(rows, RowTable):
            changed = rows.changed_since(kept.mark)
        if not kept.fields and isinstance(rows, RowTable):
            # Only screened filters kept: the table tells which rows changed, so no copy of
            # the rows is kept (10,000 rows: 2-8 ms at the first filter). Where it cannot
            # tell (another table, cleared), they are screened again when asked.
            kept.judged.clear()  # a filter of no field (``{}``): every live row
            if changed is None:
                kept.screened.clear()
                stale = []
            else:
                seen = set(changed)
                stale = [(seq, rows[seq][2]) for seq in seen if seq in rows]
                kept.forget_seqs([seq for seq in seen if seq not in rows])
        elif not data and not kept.fields and not kept.screened:  # nothing to decode for
            stale = []
            data.update({seq: row[2] for seq, row in rows.items()})
        elif not data:
            stale = [(seq, row[2]) for seq, row in rows.items()]
        elif changed is not None:  # the rows the table says changed, and only those
            seen = set(changed)
            stale = [(seq, rows[seq][2]) for seq in seen if seq in rows]
            stale = [(seq, now) for seq, now in stale if data.get(seq) is not now]
            gone = [seq for seq in seen if seq not in rows and seq in data]
            if gone:
                kept.judged.clear()
                kept.forget_seqs(gone)
        else:
            stale = [(seq, row[2]) for seq, row in rows.items() if data.get(seq) is not row[2]]
            if len(data) + len(stale) != len(rows):  # some seqs deleted (or changed): forget them
                kept.judged.clear()
                kept.forget_seqs([seq for seq in data if seq not in rows])
        if stale:
            kept.judged.clear()
            columns = list(kept.fields.items())
            screened = list(kept.screened.values())
            if columns or screened:
                for seq, item in decode_pairs(stale, source, "base"):
                    for field, column in columns:
                        column.put(seq, value_at(item, field))
                    for one in screened:
                        one.judge(seq, item)
            if columns or not isinstance(rows, RowTable):
                data.update(stale)
        kept.rows, kept.offset, kept.size = rows, stamp, len(rows)
        kept.mark = rows.mark if isinstance(rows, RowTable) else -1

    def forget(self, session_id: str) -> None:
        """Drop the kept values of a session."""
        with self._lock:
            self._sessions.pop(session_id, None)

    def clear(self) -> None:
        """Drop every session's kept values."""
        with self._lock:
            self._sessions.clear()


class _Touched:
    """The rows of one session a handle wrote since its answers were last brought up to date (:meth:`JudgedFilters.touched`)."""

    def __init__(self) -> None:
        self.seqs: set[int] | None = set()  # None: any row
        self.grown = True  # rows were only added


_NOTED_MOST: Final = 4096
"""The rows of a session noted as written at most: past them, its answers are judged again whole (a bulk load between two queries keeps no long list)."""

_Key = tuple[str, Hashable]
"""What :class:`JudgedFilters` keeps an answer under: the session and the filter (:func:`_node_key`)."""


class JudgedFilters:
    """The rows that may pass each filter a handle judged, kept while its store's change stamp stays the same.

    For a backend that judges a filter by reading every row (SQLite's
    ``json_extract`` over the session: most of a rare filter's hybrid
    query) and can tell when any row may have changed
    (``SQLiteFile.change_stamp``). A filter asked again before any commit
    is answered from memory; any commit (by any connection or process)
    forgets every answer. Filters with a function of the item, or an
    operand that cannot be hashed, are judged every time.

    Args:
        size: The answers kept at most (the oldest forgotten first).
    """

    def __init__(self, size: int = 64) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._stamp: Hashable = None
        self._found: OrderedDict[_Key, frozenset[int] | None] = OrderedDict()
        # Filters a capped judgement found more than this many rows may pass (or none it can narrow).
        self._over: OrderedDict[_Key, int] = OrderedDict()
        # Carrying answers over this handle's own writes (see :meth:`touched` and :meth:`carried`).
        self._trees: dict[_Key, FilterNode] = {}
        self._outside: Hashable = None
        self._touched: dict[str, _Touched] = {}
        # The filters asked once since the writes of others last moved (:meth:`asked_again`).
        self._asked: OrderedDict[_Key, None] = OrderedDict()

    def asked_again(self, session_id: str, tree: FilterNode, stamp: Hashable) -> bool:
        """Return whether ``tree`` was asked of the session before under the writes of others ``stamp`` follows (an answer kept counts), noting this ask.

        A backend that judges a filter by reading every row answers the
        first ask without judging it (the store walks its ranking, reading
        a few hundred rows), and judges it on the next: a filter asked once
        between two writes of others (another process appending between
        each query) never pays for reading them all. A filter that cannot be
        kept is never asked again. ``stamp`` as for :meth:`judged` (read
        after :meth:`carried`).
        """
        key = _judged_key(session_id, tree)
        if key is None:
            return False
        with self._lock:
            if self._fresh(stamp) and (key in self._found or key in self._over):
                return True
            if key in self._asked:
                self._asked.move_to_end(key)
                return True
            self._asked[key] = None
            while len(self._asked) > self._size:
                self._asked.popitem(last=False)
            return False

    def touched(self, session_id: str, seqs: Sequence[int] | None, *, grown: bool = False) -> None:
        """Note rows of a session this handle wrote (``None``: any of them may have changed).

        Called by the writer inside its write transaction, holding the lock
        every query of the store's file takes, so that the next stamp a
        query reads names a state these notes cover. ``grown``: the rows
        were only added (a filter passing more than some number of rows
        still does).
        """
        with self._lock:
            if not self._found and not self._over:
                return  # nothing kept to bring up to date
            noted = self._touched.get(session_id)
            if noted is None:
                noted = self._touched[session_id] = _Touched()
            if seqs is None or len(seqs) > _NOTED_MOST:
                noted.seqs = None
            elif noted.seqs is not None:
                noted.seqs.update(seqs)
                if len(noted.seqs) > _NOTED_MOST:
                    noted.seqs = None  # more rows than judging the session again reads
            noted.grown = noted.grown and grown

    def carried(
        self,
        stamp: Hashable,
        outside: Hashable,
        among: Callable[[str, FilterNode, list[int]], set[int] | None],
    ) -> None:
        """Bring the answers kept up to ``stamp`` where only this handle's own writes (:meth:`touched`) came since, judging only the rows they wrote.

        ``outside`` is the part of the stamp that writes by others move (the
        file opened again, another connection's commit): where it moved,
        or any write was not noted row by row, the session's answers are
        forgotten (:meth:`judged` judges them again). ``among(session_id,
        tree, seqs)`` judges the rows that may pass among ``seqs`` (``None``:
        it cannot). The caller holds the lock its writers write under, from
        reading ``stamp`` until the answer is given, so no write falls
        between.
        """
        with self._lock:
            if stamp == self._stamp:
                return
            if outside != self._outside or self._stamp is None:
                self._forget(stamp, outside)
                return
            touched, self._touched = self._touched, {}
            kept = [
                (key, self._trees.get(key), found)
                for key, found in self._found.items()
                if key[0] in touched
            ]
            for key in [key for key in self._over if key[0] in touched]:
                if not touched[key[0]].grown:
                    del self._over[key]
            self._stamp = stamp
        for key, tree, found in kept:
            noted = touched[key[0]]
            again = None
            if tree is not None and found is not None and noted.seqs is not None:
                wrote = sorted(noted.seqs)
                may = among(key[0], tree, wrote) if wrote else set()
                if may is not None:
                    again = frozenset((found - noted.seqs) | may)
            with self._lock:
                if self._stamp != stamp:
                    return
                if again is None:
                    self._found.pop(key, None)
                    self._trees.pop(key, None)
                else:
                    self._found[key] = again

    def judged(
        self,
        session_id: str,
        tree: FilterNode,
        stamp: Hashable,
        judge: Callable[[], set[int] | None],
    ) -> set[int] | None:
        """Return ``judge()`` for ``tree`` (a fresh set), from memory where it was judged under ``stamp``.

        ``stamp`` must be read before ``judge`` runs: a commit between the
        two then leaves an answer newer than its stamp, never older.
        """
        key = _judged_key(session_id, tree)
        if key is None:
            return judge()
        with self._lock:
            if self._fresh(stamp) and key in self._found:
                self._found.move_to_end(key)
                kept = self._found[key]
                return None if kept is None else set(kept)
        found = judge()
        self._keep(key, tree, stamp, found)
        return found

    def few(
        self,
        session_id: str,
        tree: FilterNode,
        stamp: Hashable,
        most: int,
        judge: Callable[[], set[int] | None],
    ) -> set[int] | None:
        """Return ``judge()``: the rows that may pass ``tree`` where ``most`` at most may, else ``None`` (``Backend.filter_few``), from memory where it can tell.

        A whole answer kept by :meth:`judged` answers any ``most``; an
        answer of ``judge`` is whole, and kept as one; its ``None`` is kept
        as "more than ``most``", which answers ``None`` for any ``most`` up
        to it. ``stamp`` as for :meth:`judged`.
        """
        key = _judged_key(session_id, tree)
        if key is None:
            return judge()
        with self._lock:
            if self._fresh(stamp):
                if key in self._found:
                    self._found.move_to_end(key)
                    kept = self._found[key]
                    return None if kept is None or len(kept) > most else set(kept)
                if self._over.get(key, -1) >= most:
                    self._over.move_to_end(key)
                    return None
        found = judge()
        if found is not None:
            self._keep(key, tree, stamp, found)
            return found
        with self._lock:
            if stamp == self._stamp:
                self._over[key] = max(most, self._over.get(key, most))
                self._over.move_to_end(key)
                while len(self._over) > self._size:
                    self._over.popitem(last=False)
        return None

    def _fresh(self, stamp: Hashable) -> bool:
        """Forget every answer unless judged under ``stamp``; return whether any may be kept (under the lock)."""
        if stamp != self._stamp:
            self._forget(stamp, self._outside)
            return False
        return True

    def _forget(self, stamp: Hashable, outside: Hashable) -> None:
        """Forget every answer and every write noted; from now on answers are judged under ``stamp`` (under the lock)."""
        self._found.clear()
        self._over.clear()
        self._trees.clear()
        self._touched.clear()
        self._asked.clear()
        self._stamp = stamp
        self._outside = outside

    def _keep(self, key: _Key, tree: FilterNode, stamp: Hashable, found: set[int] | None) -> None:
        """Keep ``found`` for ``key`` where no commit came since ``stamp``."""
        with self._lock:
            if stamp == self._stamp:
                self._found[key] = None if found is None else frozenset(found)
                self._trees[key] = tree
                self._found.move_to_end(key)
                self._over.pop(key, None)
                while len(self._found) > self._size:
                    self._trees.pop(self._found.popitem(last=False)[0], None)


class CommonFilters:
    """The filters a handle found more rows pass than a rare filter's path takes, by session (the latest ``size``).

    For a backend whose index names a filter's rows (PostgreSQL's GIN
    index): a semantic query asks it first which rows may pass
    (``Backend.filter_few_kept``), and a filter most rows pass costs that
    ask as many rows as the cap (7 ms at 10,000 steps, 2.2 to 3.7 times the
    unfiltered query); found so once, the handle asks no more and walks the
    ranking, whose first slice settles such a filter. Kept for the handle's
    life: a filter that turns rare afterwards is walked, as it was before
    the ask, with the same hits.

    Args:
        size: The filters kept at most (the oldest forgotten first).
    """

    def __init__(self, size: int = 64) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._found: OrderedDict[_Key, None] = OrderedDict()

    def known(self, session_id: str, tree: FilterNode) -> bool:
        """Return whether ``tree`` was found common in the session."""
        key = _judged_key(session_id, tree)
        with self._lock:
            return key is not None and key in self._found

    def found(self, session_id: str, tree: FilterNode) -> None:
        """Note that more rows of the session may pass ``tree`` than the rare path takes."""
        key = _judged_key(session_id, tree)
        if key is None:
            return
        with self._lock:
            self._found[key] = None
            self._found.move_to_end(key)
            while len(self._found) > self._size:
                self._found.popitem(last=False)


def _judged_key(session_id: str, tree: FilterNode) -> _Key | None:
    """Return what :class:`JudgedFilters` keeps a filter's answer under, or ``None`` where it is judged every time."""
    if node_fields(tree) is None:
        return None
    try:
        key = (session_id, _node_key(tree))
        hash(key)
    except TypeError:  # an operand that cannot be hashed (a dict to be equal to)
        return None
    return key


def ranked_where(
    allowed: set[int],
    size: int,
    k: int,
    among: Callable[[list[int]], list[tuple[float, int]]],
    top: Callable[[int], list[tuple[float, int]]],
) -> list[tuple[float, int]]:
    """Return the ``k`` best ``(score, seq)`` of the rows ``allowed`` (those that pass a filter): ``Backend.keyword_top_where``.

    A filter that at most one row in :data:`FEW` of the session's ``size``
    passes has only those rows scored (``among``, best first); a wider one
    takes the session's ranking (``top`` of a depth) ever deeper, four
    times over, until ``k`` of its rows pass.
    """
    if not allowed:
        return []
    if FEW * len(allowed) <= size:
        return among(sorted(allowed))[:k]
    depth = 4 * k
    while True:
        ranked = top(depth)
        kept = [hit for hit in ranked if hit[1] in allowed]
        if len(kept) >= k or len(ranked) < depth:
            return kept[:k]
        depth *= 4


FEW: Final = 16
"""A filter that at most one row in this many passes has only those rows scored (:func:`ranked_where`)."""


def _node_key(node: FilterNode) -> Hashable:
    """Return what tells one filter from another: its operands with their types (``1``, ``1.0`` and ``True`` filter apart)."""
    if isinstance(node, Condition):
        operand = node.operand
        if node.op in ("$in", "$nin"):
            return (node.field, node.op, tuple((type(one), one) for one in operand))
        return (node.field, node.op, type(operand), operand)
    assert isinstance(node, (AllOf, AnyOf))  # a function of the item is never kept
    return (type(node).__name__, tuple(_node_key(part) for part in node.parts))
