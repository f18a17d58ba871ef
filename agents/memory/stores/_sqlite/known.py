"""What keyword searches of one SQLite handle read of the file's statistics, kept until the file changes.

A search ranks with the session's counts (``kvmemory_search``) and each
query term's document frequency (the FTS5 vocabulary, ``kvmemory_fts_row``),
and first checks that no row waits to be folded into the FTS table. Those
reads cost a rare word's query more than its postings (a word no item holds
reads nothing else). :class:`KnownStatistics` keeps their answers under the
file's change stamp (:meth:`~agents.memory.stores._sqlite.file.SQLiteFile.change_stamp`:
connections opened, ``PRAGMA data_version`` and the connection's own
``total_changes``), so that any commit, by this connection or by another in
any process, forgets them all; :class:`LazyRead` begins the read
transaction only when a statement is needed.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Hashable, Iterable, Sequence
from typing import Any

__all__ = ["KnownStatistics", "LazyRead"]

Statistics = tuple[str, int, int, int, int]
"""A session's key, item count and term count, then the FTS5 table's row and token counts."""


class KnownStatistics:
    """Session counts and term document frequencies a handle read, kept while the file's change stamp stays the same.

    Answers are kept only under the stamp read before they were read, and
    only once the caller confirmed the stamp unchanged after (:meth:`keep`):
    an answer is never older than its stamp. A new stamp forgets every
    answer. Not locked: the caller holds the file's lock.

    Args:
        size: The most term frequencies kept (all are forgotten past it).
    """

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._stamp: Hashable = None
        self._sessions: dict[str, Statistics] = {}
        self._terms: dict[str, tuple[int, int] | None] = {}

    def settled(self, stamp: Hashable) -> bool:
        """Whether, at ``stamp``, every row of the file was known to be in the FTS table (no pending row); forget everything kept under another stamp."""
        if stamp != self._stamp:
            self._stamp = None
            self._sessions.clear()
            self._terms.clear()
        return stamp == self._stamp

    def session(self, sid: str) -> Statistics | None:
        """Return the statistics kept for session ``sid``, or ``None``."""
        return self._sessions.get(sid)

    def terms(self, names: Iterable[str]) -> tuple[dict[str, tuple[int, int]], list[str]]:
        """Return ``({name: (documents, occurrences)}, [names not kept])`` for FTS5 term ``names`` (names kept as held by no row are in neither)."""
        held: dict[str, tuple[int, int]] = {}
        missing = []
        for name in names:
            if name not in self._terms:
                missing.append(name)
                continue
            found = self._terms[name]
            if found is not None:
                held[name] = found
        return held, missing

    def keep(
        self,
        stamp: Hashable,
        sessions: dict[str, Statistics],
        terms: dict[str, tuple[int, int] | None],
    ) -> None:
        """Keep what one search read at ``stamp`` (checked unchanged after it read): the file is then settled at ``stamp``."""
        if stamp != self._stamp:
            self.settled(stamp)
            self._stamp = stamp
        self._sessions.update(sessions)
        if len(self._terms) + len(terms) > self._size:
            self._terms.clear()
        self._terms.update(terms)

    def forget(self) -> None:
        """Forget everything (the stamp a search read turned out to have changed)."""
        self.settled(None)


class LazyRead:
    """One read transaction on ``con``, begun at the first statement, ended by :meth:`close` if begun.

    A search whose answers are all kept (:class:`KnownStatistics`) then runs
    no statement at all. What the search read of the statistics is noted in
    :attr:`sessions` and :attr:`terms`, to be kept once checked.

    Attributes:
        ran: Whether any statement ran.
        sessions: The session statistics read, by session id.
        terms: The FTS5 terms' ``(documents, occurrences)`` read, by name
            (``None`` for a name no row holds).
    """

    def __init__(self, con: sqlite3.Connection) -> None:
        self.con = con
        self.ran = False
        self.sessions: dict[str, Statistics] = {}
        self.terms: dict[str, tuple[int, int] | None] = {}
        self._open = False

    def begin(self) -> None:
        """Begin the transaction, unless it was begun."""
        if not self._open:
            self.con.execute("BEGIN")
            self._open = self.ran = True

    def execute(self, sql: str, params: Sequence[object] = ()) -> Any:
        """Run ``sql`` inside the transaction (beginning it first if needed); return the cursor."""
        self.begin()
        return self.con.execute(sql, params)

    def close(self) -> None:
        """End the transaction, if one was begun."""
        if self._open:
            self._open = False
            self.con.execute("COMMIT")
