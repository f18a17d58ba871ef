"""The keyword index of an SQLite store file: FTS5 postings kept with every write, BM25 searches over them.

Every write keeps each row's search terms, and the session counts in
``kvmemory_search``, up to date in its own transaction; the FTS5 table is
filled in batches (schema version 6, see
:mod:`~agents.memory.stores._sqlite.schema`): rows committed a few at a
time stay *pending* until :data:`~agents.memory.stores._sqlite.schema.FOLD_AT`
of them wait, a writable handle folds them before it searches and as it
closes, and a search that meets pending rows ranks them from the terms they
keep. :class:`SQLiteKeywordIndex` does all of this over the connection of an
:class:`~agents.memory.stores._sqlite.file.SQLiteFile`, reached through its
public members; :class:`~agents.memory.stores._sqlite.scorer.FTSScorer`
ranks when no row is pending.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from typing import Final, Literal, TypeVar

from agents.memory.stores._core.terms import KeywordMatch, Terms, rank_matches
from agents.memory.stores._sql.dialect import SQLITE
from agents.memory.stores._sqlite.file import SQLiteFile
from agents.memory.stores._sqlite.known import KnownStatistics, RowsPending, SnapshotRead
from agents.memory.stores._sqlite.schema import (
    COUNT_INSERTED,
    FOLD,
    FOLD_AT,
    MARK,
    THROUGH,
    build_keyword_index,
)
from agents.memory.stores._sqlite.scorer import FTSScorer, score_rows

__all__ = ["KeywordFold", "SQLiteKeywordIndex"]

_T = TypeVar("_T")

KeywordFold = Literal["batched", "lazy"]
"""When writes add pending rows to the FTS table: ``"batched"`` (once :data:`FOLD_AT` wait) or ``"lazy"`` (never; searches and closes do)."""


class SQLiteKeywordIndex:
    """Keep and search the keyword index of one open SQLite store file.

    Args:
        file: The open file; every statement runs on its connection, under its lock.
        fold: ``"batched"``: a write folds the pending rows once
            :data:`FOLD_AT` wait; ``"lazy"``: writes never fold, this
            handle folds before it searches and as it closes.
    """

    def __init__(self, file: SQLiteFile, fold: KeywordFold = "batched") -> None:
        self.file = file
        self.fold = fold
        self._known = KnownStatistics()

    @property
    def available(self) -> bool:
        """Whether the file's layout has the index (``False`` for an older file opened read-only: the store scans)."""
        return self.file.keyword_indexed

    def index_inserted(
        self, tx: sqlite3.Connection, session_id: str, terms: Sequence[Terms], last: int
    ) -> None:
        """Count rows just inserted into the session and fold the pending rows once :data:`FOLD_AT` wait.

        Args:
            tx: The connection, inside the write transaction that inserted the rows.
            session_id: The session the rows belong to.
            terms: The rows' terms, one per row.
            last: The seq of the last row inserted.
        """
        if self.fold == "lazy":
            tx.execute(COUNT_INSERTED, (session_id, len(terms), sum(n for _, n in terms)))
            tx.execute(FOLD, (last, last))  # nothing to fold; checks the FTS table is there
            return
        # The counts and the fold mark in one statement (its RETURNING reads the mark).
        (through,) = tx.execute(
            _COUNT_INSERTED_THROUGH, (session_id, len(terms), sum(n for _, n in terms))
        ).fetchone()
        if last - through >= FOLD_AT:
            tx.execute(FOLD, (through, last))
            tx.execute("UPDATE kvmemory_fts_mark SET through = ?", (last,))
        else:
            tx.execute(FOLD, (last, last))  # nothing to fold; checks the FTS table is there

    def fold_pending(self) -> None:
        """Fold the store's pending rows into the FTS table, if it can without waiting.

        A writable handle does this as it closes (readers of the closed file
        then search by the index alone) and before it searches (the FTS
        table then answers: scoring pending rows reads every posting of the
        query terms, 6x slower for common words). Best effort: while another
        process writes, or if the index is damaged, the rows stay pending
        (searches read them, the next write folds them, and a damaged index
        is reported by the search or write that meets it). Does nothing on
        a read-only handle, or on a file of a layout that indexed every row
        as it was inserted.
        """
        if self.file.read_only or not self.file.folds:
            return
        con = self.file.connection
        with contextlib.suppress(sqlite3.Error):
            if not con.execute(_ANY_PENDING).fetchone()[0]:
                return
            con.execute("PRAGMA busy_timeout = 0")
            try:
                with self.file.transaction():
                    (through,) = con.execute(THROUGH).fetchone()
                    (last,) = con.execute(
                        "SELECT coalesce(max(seq), 0) FROM kvmemory_items"
                    ).fetchone()
                    con.execute(FOLD, (through, last))
                    con.execute("UPDATE kvmemory_fts_mark SET through = ?", (last,))
            finally:
                con.execute(f"PRAGMA busy_timeout = {int(self.file.timeout * 1000)}")

    @contextlib.contextmanager
    def _reading(self, what: str) -> Iterator[None]:
        """Hold the file's lock, following other writers, and report a damaged index as such (``what`` names the sessions)."""
        try:
            with self.file.lock:
                self.file.follow_writers()
                yield
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise
            raise self.file.index_damaged("search", what, str(exc)) from exc
        except sqlite3.DatabaseError as exc:
            raise self.file.index_damaged("search", what, str(exc)) from exc

    def top(self, session_id: str, terms: Sequence[str], k: int) -> list[tuple[float, int]] | None:
        """Return the session's ``k`` best ``(score, seq)`` by BM25, ties by seq, from the FTS5 index.

        ``None`` for an older file opened read-only, which has no index (the
        store then scans the session).

        Raises:
            CorruptStoreError: if the index is damaged or missing (see
                :meth:`SQLiteFile.index_damaged`).
            sqlite3.OperationalError: if the file is locked or busy.
        """
        if not self.file.keyword_indexed:
            return None
        if self.file.no_tables:
            return []
        with self._reading(f" session {session_id!r} of"):
            return self._snapshot_top([session_id], terms, k)

    def among(
        self, session_id: str, terms: Sequence[str], seqs: Sequence[int]
    ) -> list[tuple[float, int]] | None:
        """Return ``(score, seq)`` by BM25 of the rows among ``seqs`` holding a query term, best first (ties by seq).

        Scored from the terms each row keeps, with the session's counts and
        each term's document frequency from the FTS5 postings, as
        :meth:`top` scores them. ``None`` while some rows of the store are
        not folded into the FTS table (their terms are in no posting; the
        store then ranks with :meth:`top`), and for an older file opened
        read-only.

        Raises:
            CorruptStoreError: if the index is damaged or missing.
            sqlite3.OperationalError: if the file is locked or busy.
        """
        if not self.file.keyword_indexed:
            return None
        if self.file.no_tables:
            return []
        with self._reading(f" session {session_id!r} of"):
            found = self._settled(
                lambda reads: self._indexed_among(reads, session_id, terms, seqs), fold=True
            )
        return None if found is None else found[0]

    def _indexed_among(
        self, reads: SnapshotRead, sid: str, terms: Sequence[str], seqs: Sequence[int]
    ) -> list[tuple[float, int]]:
        """Score the rows ``seqs`` of a session from the terms they keep, with the statistics kept or read in ``reads`` (every row folded)."""
        stats = self._known.sessions(reads, [sid]).get(sid)
        if stats is None or stats[1] <= 0:
            return []
        key, n_items, total, _, _ = stats
        names = {f"{key}{MARK}{term}": term for term in dict.fromkeys(terms)}
        held = self._known.vocabulary(reads, list(names))
        if not held:
            return []
        df = {names[name]: docs for name, (docs, _) in held.items()}
        rows = reads.execute(
            "SELECT seq, n_terms, terms FROM kvmemory_items WHERE session_id = ?"
            " AND seq IN (SELECT value FROM json_each(?))",
            (sid, SQLITE.bind_list(list(seqs))),
        ).fetchall()
        return score_rows(rows, terms, df, n_items, total)

    def held(
        self, session_id: str, terms: Sequence[str], seqs: Sequence[int]
    ) -> dict[int, set[str]] | None:
        """Return the terms among ``terms`` each row among ``seqs`` holds, by seq, from the terms each row keeps (folded or pending).

        One statement; rows holding none are left out. ``None`` for an older
        file opened read-only.

        Raises:
            CorruptStoreError: if the index is damaged or missing.
            sqlite3.OperationalError: if the file is locked or busy.
        """
        if not self.file.keyword_indexed:
            return None
        wanted = set(terms)
        if self.file.no_tables or not wanted or not seqs:
            return {}
        with self._reading(f" session {session_id!r} of"):
            rows = self.file.connection.execute(
                _ROW_TERMS, (session_id, SQLITE.bind_list(list(seqs)))
            ).fetchall()
        out: dict[int, set[str]] = {}
        for seq, spaced in rows:
            holding = wanted.intersection(spaced.split(" "))
            if holding:
                out[int(seq)] = holding
        return out

    def frequencies(self, session_id: str, terms: Sequence[str]) -> dict[str, int] | None:
        """Return how many of the session's items hold each of ``terms``: the document frequencies BM25 counts.

        One statement (one snapshot): each term's FTS5 postings in the
        session (``kvmemory_fts_row``, by the session's prefix), plus the
        session's pending rows whose terms hold it, the numbers :meth:`top`
        scores with; none where the statistics a search read are kept at
        the file's change stamp (:class:`KnownStatistics`: ranking the
        query read them). Every distinct term is a key (0 where no item holds
        it). ``None`` for an older file opened read-only.

        Raises:
            CorruptStoreError: if the index is damaged or missing.
            sqlite3.OperationalError: if the file is locked or busy.
        """
        if not self.file.keyword_indexed:
            return None
        wanted = list(dict.fromkeys(terms))
        if self.file.no_tables or not wanted:
            return dict.fromkeys(wanted, 0)
        with self._reading(f" session {session_id!r} of"):
            if self._known.settled(self.file.change_stamp()):
                kept = self._known.frequencies(session_id, wanted)
                if kept is not None:
                    return kept
            # One statement: the postings, and any pending rows' terms.
            sql = _FREQUENCIES + (_PENDING_FREQUENCIES if self.file.folds else "")
            counted = dict(
                self.file.connection.execute(
                    sql + _FREQUENCIES_OF, (SQLITE.bind_list(wanted), session_id)
                ).fetchall()
            )
        return {term: int(counted.get(term, 0)) for term in wanted}

    def top_sessions(
        self, session_ids: Sequence[str], terms: Sequence[str], k: int
    ) -> list[tuple[float, str, int]] | None:
        """Return the ``k`` best ``(score, session_id, seq)`` by BM25 over several sessions as one corpus, ties by session id and seq.

        The statistics are the sessions' counts summed, each term's document
        frequency the sum of its postings' in each session (every session's
        postings are its own, by their prefix): the ranking of
        ``Memory.search`` over their union, scored as :meth:`top` scores one
        session, reading the postings of the query terms of those sessions
        only. ``None`` for an older file opened read-only.

        Raises:
            CorruptStoreError: if the index is damaged or missing.
            sqlite3.OperationalError: if the file is locked or busy.
        """
        if not self.file.keyword_indexed:
            return None
        if self.file.no_tables or not session_ids:
            return []
        with self._reading(""):
            best = self._snapshot_top(session_ids, terms, k)
            if not best:
                return []
            owner = dict(
                self.file.connection.execute(
                    "SELECT seq, session_id FROM kvmemory_items"
                    " WHERE seq IN (SELECT value FROM json_each(?))",
                    (SQLITE.bind_list([seq for _, seq in best]),),
                ).fetchall()
            )
        # Seqs are the store's (one AUTOINCREMENT), so the key is (session, seq) in seq's order.
        ranked = [(score, str(owner[seq]), seq) for score, seq in best if seq in owner]
        return sorted(ranked, key=lambda hit: (-hit[0], hit[1], hit[2]))[:k]

    def _snapshot_top(
        self, sids: Sequence[str], terms: Sequence[str], k: int
    ) -> list[tuple[float, int]]:
        """Score the sessions' items holding a query term, from one snapshot of the file.

        From the FTS table alone where no row is pending (:meth:`_settled`,
        which folds them first on a writable handle); otherwise
        :meth:`_pending_top` scores, in one read transaction.
        """
        found = self._settled(lambda reads: self._indexed_top(reads, sids, terms, k), fold=True)
        return self._pending_top(sids, terms, k) if found is None else found[0]

    def _settled(self, indexed: Callable[[SnapshotRead], _T], *, fold: bool) -> tuple[_T] | None:
        """Return ``(indexed(reads),)`` read in one snapshot of the file in which no row is pending, or ``None`` if rows stay pending.

        One read transaction: its first statement reads the file's change
        stamp (:meth:`SQLiteFile.snapshot_stamp`), which names the snapshot
        every later statement reads. ``indexed`` reads the statistics
        through :attr:`_known`, which answers from what it kept at that
        stamp (:class:`KnownStatistics`), and its other statements through
        ``reads``. Unless the file is known settled at the stamp, the
        statement that reads the sessions' counts also checks that no row
        is pending (:class:`RowsPending`: with ``fold``, a writable handle
        folds them, :meth:`fold_pending`, and tries once more). What was
        read is then kept under the stamp.
        """
        con = self.file.connection
        folded = not fold or not self.file.folds
        while True:
            reads = SnapshotRead(con)
            reads.begin()  # the stamp read next is this transaction's snapshot's
            try:
                stamp = self.file.snapshot_stamp()
                settled = self._known.settled(stamp)
                if not settled:
                    self._known.forget()  # kept in another snapshot
                reads.check = self.file.folds and not settled
                result = indexed(reads)
                if reads.check and not reads.checked and con.execute(_ANY_PENDING).fetchone()[0]:
                    raise RowsPending  # (a search that read no counts: none does today)
                self._known.keep(stamp, reads)
                return (result,)
            except RowsPending:
                if folded:
                    return None
            finally:
                reads.close()
            self.fold_pending()
            folded = True

    def _pending_top(
        self, sids: Sequence[str], terms: Sequence[str], k: int
    ) -> list[tuple[float, int]]:
        """Score the session's items by BM25 while some rows of the store are not yet in the FTS table.

        The one place that reads pending rows: the folded items holding a
        query term are counted from the FTS postings (the session's own, by
        their prefix), the session's pending rows from the terms they keep,
        and all of them ranked by :func:`rank_matches` with the session's
        counts (which include the pending rows): the ranking of
        ``Memory.search``, as every other path gives it. FTS5's table-wide
        statistics, which lack the pending rows, are not used.
        """
        con = self.file.connection
        sid = ", ".join(sids)
        bound = SQLITE.bind_list(list(sids))
        # One read transaction: counts, postings and pending rows from one snapshot.
        con.execute("BEGIN")
        try:
            stats = con.execute(_SESSIONS_COUNTS, (bound,)).fetchall()
            n_items = sum(int(row[1]) for row in stats)
            total = sum(int(row[2]) for row in stats)
            if n_items <= 0:
                return []
            (through,) = con.execute(THROUGH).fetchone()
            wanted = set(terms)
            names = {f"{row[0]}{MARK}{term}": term for row in stats for term in wanted}
            held: dict[int, dict[str, int]] = {}
            for doc, name, tf in con.execute(
                "SELECT doc, term, count(*) FROM kvmemory_fts_instance"
                " WHERE term IN (SELECT value FROM json_each(?)) GROUP BY doc, term",
                (SQLITE.bind_list(list(names)),),
            ):
                held.setdefault(int(doc), {})[names[name]] = int(tf)
            lengths = dict(
                con.execute(
                    "SELECT seq, n_terms FROM kvmemory_items WHERE seq <= ?"
                    " AND seq IN (SELECT value FROM json_each(?))"
                    " AND session_id IN (SELECT value FROM json_each(?))",
                    (through, SQLITE.bind_list(list(held)), bound),
                ).fetchall()
            )
            matches: list[KeywordMatch] = []
            for seq, counts in held.items():
                length = lengths.get(seq)
                if length is None or length < sum(counts.values()):
                    msg = f"the index holds item {seq}, which session {sid!r} does not hold with those terms"
                    raise sqlite3.DatabaseError(msg)
                matches.append((seq, int(length), counts))
            for seq, length, text in con.execute(_PENDING_ROWS, (bound, through)):
                counts = {}
                for word in text.split(" "):
                    if word in wanted:
                        counts[word] = counts.get(word, 0) + 1
                if counts:
                    matches.append((int(seq), int(length), counts))
            # Over several sessions ties go by session id, not seq: every match is kept to sort.
            return rank_matches(
                n_items, total, matches, terms, k if len(sids) == 1 else len(matches)
            )
        finally:
            con.execute("COMMIT")

    def _indexed_top(
        self, reads: SnapshotRead, sids: Sequence[str], terms: Sequence[str], k: int
    ) -> list[tuple[float, int]]:
        """Return the sessions' ``k`` best ``(score, seq)`` by BM25, from the FTS5 postings (see :class:`FTSScorer`).

        The statistics are those kept (:class:`KnownStatistics`) or read in
        ``reads``; the postings are read in its transaction. Over several
        sessions, their counts and each term's postings statistics are
        summed (an upper bound on a term's count in one item stays one).
        """
        stats = self._known.sessions(reads, sids)
        n_items = sum(row[1] for row in stats.values())
        if n_items <= 0:
            return []
        prefixes = [f"{row[0]}{MARK}" for row in stats.values()]
        wanted = list(dict.fromkeys(terms))
        # Each term's postings are each session's own (by their prefix): doc is its
        # document frequency in the session, cnt its number of occurrences.
        names = {prefix + term: term for prefix in prefixes for term in wanted}
        vocab: dict[str, tuple[int, int]] = {}
        for name, (docs, count) in self._known.vocabulary(reads, list(names)).items():
            held, seen = vocab.get(names[name], (0, 0))
            vocab[names[name]] = (held + docs, seen + count)
        if not vocab:
            return []
        reads.begin()
        total = sum(row[2] for row in stats.values())
        scorer = FTSScorer(reads.con, list(stats), prefixes, terms, vocab, n_items, total)
        if len(stats) == 1:
            (_, _, _, n_rows, n_tokens) = next(iter(stats.values()))
            # Every FTS row is this session's: FTS5's statistics are the session's own.
            scorer.alone = n_rows == n_items
            scorer.table = (n_rows, n_tokens)
            scorer.lengths_indexed = self.file.lengths_indexed
        return scorer.best(k)

    def rebuild(self) -> None:
        """Rebuild the index (FTS5 table, terms, counts) from the stored items, in one write transaction.

        Raises:
            sqlite3.Error: if the file is read-only or cannot be written; nothing is changed.
        """
        with self.file.transaction() as con:
            build_keyword_index(con)


_ROW_TERMS: Final = (
    "SELECT seq, terms FROM kvmemory_items WHERE session_id = ? AND seq" + SQLITE.members
)
"""The search terms (spaced) each of some rows of a session keeps."""

_COUNT_INSERTED_THROUGH: Final = COUNT_INSERTED + " RETURNING (" + THROUGH + ")"
""":data:`~agents.memory.stores._sqlite.schema.COUNT_INSERTED`, returning :data:`THROUGH` (one statement per commit fewer than both)."""
_ANY_PENDING: Final = "SELECT EXISTS (SELECT 1 FROM kvmemory_items WHERE seq > (SELECT through FROM kvmemory_fts_mark))"
_PENDING_ROWS: Final = (
    "SELECT seq, n_terms, terms FROM kvmemory_items"
    " WHERE session_id IN (SELECT value FROM json_each(?)) AND seq > ? ORDER BY seq"
)
_SESSIONS_COUNTS: Final = (
    "SELECT key, items, terms, session_id FROM kvmemory_search"
    " WHERE session_id IN (SELECT value FROM json_each(?))"
)
"""Each session's key, item count and term count (BM25's statistics summed over the sessions), and id."""
_FREQUENCIES: Final = (
    "SELECT q.value, coalesce((SELECT v.doc FROM kvmemory_fts_row AS v"
    f" WHERE v.term = s.key || '{MARK}' || q.value), 0)"
)
"""Each query term's postings in the session: the FTS5 vocabulary's document count of its prefixed term."""
_PENDING_FREQUENCIES: Final = (
    " + (SELECT count(*) FROM kvmemory_items AS i WHERE i.session_id = s.session_id"
    " AND i.seq > (SELECT through FROM kvmemory_fts_mark)"
    " AND instr(' ' || i.terms || ' ', ' ' || q.value || ' ') > 0)"
)
"""Each query term's pending rows in the session (their terms are in their rows, not yet in the FTS table)."""
_FREQUENCIES_OF: Final = " FROM json_each(?1) AS q, kvmemory_search AS s WHERE s.session_id = ?2"
