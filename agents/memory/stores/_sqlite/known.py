"""What keyword searches of one SQLite handle read of the file's statistics, kept until the file changes.

A search ranks with the session's counts (``kvmemory_search``) and each
query term's document frequency (the FTS5 vocabulary, ``kvmemory_fts_row``),
and first checks that no row waits to be folded into the FTS table. Those
reads cost a rare word's query more than its postings (a word no item holds
reads nothing else). :class:`KnownStatistics` reads them and keeps their
answers under the file's change stamp
(:meth:`~agents.memory.stores._sqlite.file.SQLiteFile.change_stamp`:
connections opened, ``PRAGMA data_version`` and the connection's own
``total_changes``), so that any commit, by this connection or by another in
any process, forgets them all. A search reads in one read transaction
(:class:`SnapshotRead`) whose first statement reads the stamp: the stamp of
the snapshot every statement of it reads. One statement reads the sessions'
counts and whether any row is pending (:data:`_SESSIONS`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Hashable, Sequence
from typing import Any, Final

from agents.memory.stores._sql.dialect import SQLITE
from agents.memory.stores._sqlite.schema import MARK

__all__ = ["KnownStatistics", "RowsPending", "SnapshotRead"]

Statistics = tuple[str, int, int, int, int]
"""A session's key, item count and term count, then the FTS5 table's row and token counts."""


class RowsPending(Exception):
    """Rows of the file wait to be folded into the FTS table (a signal inside the keyword index; it never reaches a caller of the store)."""


class SnapshotRead:
    """One read transaction on ``con`` (:meth:`begin`, :meth:`close`), and what a search read in it of the statistics.

    What the search read of the statistics is noted in :attr:`sessions`
    and :attr:`terms`, to be kept (:meth:`KnownStatistics.keep`).

    Args:
        con: The connection.

    Attributes:
        check: Whether the file is not known to hold no pending row: the
            first read of the statistics then checks (and raises
            :class:`RowsPending` if one is). ``False`` unless set.
        checked: Whether a statement checked that no row is pending.
        sessions: The session statistics read, by session id (``None``
            for a session the file does not hold).
        terms: The FTS5 terms' ``(documents, occurrences)`` read, by name
            (``None`` for a name no row holds).
    """

    def __init__(self, con: sqlite3.Connection) -> None:
        self.con = con
        self.check = False
        self.checked = False
        self.sessions: dict[str, Statistics | None] = {}
        self.terms: dict[str, tuple[int, int] | None] = {}
        self._open = False

    def begin(self) -> None:
        """Begin the transaction, unless it was begun."""
        if not self._open:
            self.con.execute("BEGIN")
            self._open = True

    def execute(self, sql: str, params: Sequence[object] = ()) -> Any:
        """Run ``sql`` inside the transaction (beginning it first if needed); return the cursor."""
        self.begin()
        return self.con.execute(sql, params)

    def close(self) -> None:
        """End the transaction, if one was begun."""
        if self._open:
            self._open = False
            self.con.execute("COMMIT")


class KnownStatistics:
    """Session counts and term document frequencies a handle read, kept while the file's change stamp stays the same.

    The searches of a handle read the statistics through :meth:`sessions`
    and :meth:`vocabulary`, which answer from what is kept and read the
    rest (noting it in the :class:`SnapshotRead`). Answers are kept only under
    the stamp read before they were read, and only once the caller
    confirmed the stamp unchanged after (:meth:`keep`): an answer is never
    older than its stamp. A search at another stamp first calls
    :meth:`forget`. Not locked: the caller holds the file's lock.

    Args:
        size: The most sessions, and the most term frequencies, kept (all
            of them are forgotten past it).
    """

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._stamp: Hashable = None
        self._sessions: dict[str, Statistics | None] = {}
        self._terms: dict[str, tuple[int, int] | None] = {}

    def settled(self, stamp: Hashable) -> bool:
        """Return whether the statistics kept were read at ``stamp``: the file then holds no pending row (a search at it was checked)."""
        return stamp is not None and stamp == self._stamp

    def forget(self) -> None:
        """Forget everything kept (the file changed, or what a search read may be of another stamp)."""
        self._stamp = None
        self._sessions.clear()
        self._terms.clear()

    def keep(self, stamp: Hashable, reads: SnapshotRead) -> None:
        """Keep what one search read at ``stamp`` (checked unchanged after it read, with no row pending): the file is then settled at ``stamp``."""
        if stamp != self._stamp:
            self.forget()
            self._stamp = stamp
        if len(self._sessions) + len(reads.sessions) > self._size:
            self._sessions.clear()
        self._sessions.update(reads.sessions)
        if len(self._terms) + len(reads.terms) > self._size:
            self._terms.clear()
        self._terms.update(reads.terms)

    def sessions(self, reads: SnapshotRead, sids: Sequence[str]) -> dict[str, Statistics]:
        """Return the statistics of the sessions ``sids`` the file holds, by id: those kept, the others read in one statement.

        Raises:
            RowsPending: if the statement checked (``reads.check``) and
                found a row not yet folded into the FTS table.
        """
        found: dict[str, Statistics] = {}
        missing = []
        for sid in dict.fromkeys(sids):
            if sid not in self._sessions:
                missing.append(sid)
            elif (stats := self._sessions[sid]) is not None:
                found[sid] = stats
        if not missing:
            return found
        sql = _SESSIONS.format(pending=_ANY_PENDING if reads.check else "0")
        pending = False
        for sid, key, items, terms, rows, tokens, waiting in reads.execute(
            sql, (SQLITE.bind_list(missing),)
        ):
            pending = pending or bool(waiting)
            stats = None if key is None else (key, int(items), int(terms), int(rows), int(tokens))
            reads.sessions[str(sid)] = stats
            if stats is not None:
                found[str(sid)] = stats
        reads.checked = reads.checked or reads.check
        if pending:
            raise RowsPending
        return found

    def frequencies(self, sid: str, terms: Sequence[str]) -> dict[str, int] | None:
        """Return how many of session ``sid``'s items hold each of ``terms`` (the FTS5 vocabulary's document counts of its terms), or ``None`` unless the session and every term are kept."""
        if sid not in self._sessions:
            return None
        stats = self._sessions[sid]
        if stats is None:
            return dict.fromkeys(terms, 0)
        counted = {}
        for term in terms:
            name = f"{stats[0]}{MARK}{term}"
            if name not in self._terms:
                return None
            counts = self._terms[name]
            counted[term] = 0 if counts is None else counts[0]
        return counted

    def vocabulary(self, reads: SnapshotRead, names: Sequence[str]) -> dict[str, tuple[int, int]]:
        """Return ``{name: (documents, occurrences)}`` of the FTS5 terms ``names`` some row holds: those kept, the others read in one statement."""
        held: dict[str, tuple[int, int]] = {}
        missing = []
        for name in dict.fromkeys(names):
            if name not in self._terms:
                missing.append(name)
            elif (counts := self._terms[name]) is not None:
                held[name] = counts
        if missing:
            reads.terms.update(dict.fromkeys(missing))
            for name, docs, count in reads.execute(_VOCABULARY, (SQLITE.bind_list(missing),)):
                held[name] = reads.terms[name] = (int(docs), int(count))
        return held


_ANY_PENDING: Final = (
    "EXISTS (SELECT 1 FROM kvmemory_items WHERE seq > (SELECT through FROM kvmemory_fts_mark))"
)
"""Whether any row of the file waits to be folded into the FTS table."""
_SESSIONS: Final = (
    "SELECT q.value, s.key, s.items, s.terms, (SELECT sum(items) FROM kvmemory_search),"
    " (SELECT sum(terms) FROM kvmemory_search), {pending}"
    " FROM json_each(?) AS q LEFT JOIN kvmemory_search AS s ON s.session_id = q.value"
)
"""Each session's key, item count and term count (``NULL`` for a session the file does not hold), the FTS5 table's row and token counts, and whether a row is pending (``{pending}``: :data:`_ANY_PENDING`, or ``0`` unchecked)."""
_VOCABULARY: Final = (
    "SELECT term, doc, cnt FROM kvmemory_fts_row WHERE term IN (SELECT value FROM json_each(?))"
)
"""Each of some FTS5 terms' document count and occurrences (terms no row holds are left out)."""
