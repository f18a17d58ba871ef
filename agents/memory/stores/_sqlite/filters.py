"""A SQLite handle's answers to search filters: judged in SQL over every row's JSON once, then kept and brought up to date over its own writes.

Judging a filter reads the JSON of every row of a session (57-145 ms at
10,000 steps under load): most of a rare filter's query. The answers are
kept (:class:`~agents.memory.stores._core.filter_values.JudgedFilters`)
until another connection or process commits to the file; this handle's
own appends, updates and deletes are noted as they are written, and only
the rows they wrote are judged again (``SQLRows.filter_among``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from agents.memory._filter import FilterNode
from agents.memory.stores._core.filter_values import FEW, JudgedFilters
from agents.memory.stores._sql.dialect import SQLRows
from agents.memory.stores._sqlite.file import SQLiteFile
from agents.memory.stores._sqlite.keyword import SQLiteKeywordIndex

__all__ = ["SQLiteFilters"]


class SQLiteFilters:
    """The filters one SQLite handle judged, kept across its own writes (the backend's ``filter_candidates``, ``filter_few`` and ``keyword_top_where``).

    Args:
        file: The handle's file (its lock and change stamp).
        rows: The backend, whose SQL (``SQLRows``) judges the filters.
        keywords: The handle's keyword index (scores the rows that may pass).
        count: The number of rows of a session.
    """

    def __init__(
        self,
        file: SQLiteFile,
        rows: SQLRows,
        keywords: SQLiteKeywordIndex,
        count: Callable[[str], int],
    ) -> None:
        self._file = file
        self._rows = rows
        self._keywords = keywords
        self._count = count
        self._judged = JudgedFilters()

    def touched(self, session_id: str, seqs: Sequence[int] | None, *, grown: bool = False) -> None:
        """Note rows this handle writes, inside the write's transaction (:meth:`JudgedFilters.touched`)."""
        self._judged.touched(session_id, seqs, grown=grown)

    def candidates(self, session_id: str, tree: FilterNode) -> set[int] | None:
        """Return the rows that may pass ``tree`` (``SQLRows.filter_candidates``), judged once while no other connection writes."""
        rows = self._rows
        with self._file.lock:  # no write of this handle between the stamp and the answer
            return self._judged.judged(
                session_id,
                tree,
                self._carried(),
                lambda: SQLRows.filter_candidates(rows, session_id, tree),
            )

    def few(self, session_id: str, tree: FilterNode, most: int) -> set[int] | None:
        """Return the rows that may pass ``tree`` where ``most`` at most may (``SQLRows.filter_few``), from the answers kept where they tell."""
        rows = self._rows
        with self._file.lock:
            return self._judged.few(
                session_id,
                tree,
                self._carried(),
                most,
                lambda: SQLRows.filter_few(rows, session_id, tree, most),
            )

    def kept_few(self, session_id: str, tree: FilterNode, most: int) -> set[int] | None:
        """Return :meth:`few`'s answer where ``tree`` is asked again since the writes of others (``Backend.filter_few_kept``), else ``None`` without judging a row.

        The first ask of a filter is only noted (:meth:`JudgedFilters.asked_again`):
        judging every row's JSON costs more than the walk of a ranking a
        filter asked once needs. The second judges it and keeps the answer;
        the later ones take it.
        """
        with self._file.lock:
            if not self._judged.asked_again(session_id, tree, self._carried()):
                return None
            return self.few(session_id, tree, most)

    def top_where(
        self, session_id: str, terms: Sequence[str], k: int, tree: FilterNode
    ) -> list[tuple[float, int]] | None:
        """Return the ``k`` best ``(score, seq)`` of the rows that may pass ``tree`` where at most one row in :data:`FEW` may, else ``None`` (``Backend.keyword_top_where``).

        The rows are judged by :meth:`few` and scored alone
        (:meth:`SQLiteKeywordIndex.among`, with the session's statistics):
        a rare filter asked again, or after a one-step append, costs a
        fraction of the unfiltered query, where walking the session's
        ranking 1,024 deep took 2-4x it (10,000 steps). ``None`` (the store
        walks the ranking) the first time a filter is asked since the
        handle opened or another connection wrote
        (:meth:`JudgedFilters.asked_again`: judging every row's JSON costs
        2-5x a walk, which a filter asked once between two writes of
        others never repays), for a filter more rows pass, one SQL cannot
        judge, or while the rows cannot be scored from the index.
        """
        with self._file.lock:  # the rows judged, counted and scored from one state of the file
            allowed = self.kept_few(session_id, tree, self._count(session_id) // FEW)
            if allowed is None:
                return None
            if not allowed:
                return []
            scored = self._keywords.among(session_id, terms, sorted(allowed))
        return None if scored is None else scored[:k]

    def _carried(self) -> tuple[int, int, int]:
        """Return the file's change stamp, the answers kept brought up to it over this handle's own writes (under the file's lock)."""
        stamp = self._file.change_stamp()
        among = functools.partial(SQLRows.filter_among, self._rows)
        # The connections opened and the commits of others (PRAGMA data_version): what others move.
        self._judged.carried(stamp, stamp[:2], among)
        return stamp
