"""The values of the rows a JSONL handle read by their offsets, kept so that its filtered keyword queries skip the rows known to fail.

A handle that has not read a session's log ranks keyword queries from the
keyword file and reads the hits by their record offsets
(:func:`~agents.memory.stores._jsonl.keywords.rows_at`). A filtered query
walks that ranking, reading rows and testing each with the filter: at
100,000 steps a filter that keeps 1% of the items reads some 900 rows a
query, every query (19-20 ms, against 2.7 ms unfiltered). :class:`OffsetValues`
files each row read by offset in a
:class:`~agents.memory.stores._core.value_index.ValueIndex`, for the log's
version it was read at (its header and length: any write, by any handle or
process, appends to the log or writes it anew, and the rows kept are then
forgotten). The rows read that the index names as unable to pass a filter
are then left out of the next ranking (:func:`top_passing`): the next query
of that filter reads only the rows that pass, or that it has not read yet.
"""

from __future__ import annotations

from collections.abc import Sequence

from agents.memory._filter import FilterNode
from agents.memory.stores._core.value_index import ValueIndex
from agents.memory.stores._jsonl.keyword_index import KeywordIndex
from agents.memory.stores._jsonl.keyword_ranking import top

__all__ = ["OffsetValues", "top_passing"]

Version = tuple[bytes, int]


class _Read:
    """The rows of one session read by offset at one version of its log, filed by value."""

    __slots__ = ("index", "judged", "seqs", "spent", "version")

    def __init__(self, version: Version) -> None:
        self.version = version
        self.seqs: set[int] = set()
        self.index = ValueIndex()
        self.spent = 0  # rows read by offset at this version, each read counted
        self.judged = 0  # rows walks asked about at this version, each ask counted


class OffsetValues:
    """The rows each session's log holds at one version, as read by their offsets, filed by the values of their items.

    The caller holds the store's lock. A version is a log's header and
    length as a keyword index or vector file current with it gives them;
    rows read at another version than the one kept replace what was kept.
    """

    def __init__(self) -> None:
        self._sessions: dict[str, _Read] = {}

    def read(
        self,
        session_id: str,
        version: Version,
        rows: Sequence[tuple[int, bytes]],
        *,
        file: bool = True,
    ) -> None:
        """File ``rows`` (live rows read by their offsets from the log at ``version``); without ``file``, only count them (:meth:`spent`)."""
        kept = self._sessions.get(session_id)
        if kept is None or kept.version != version:
            kept = self._sessions[session_id] = _Read(version)
        kept.spent += len(rows)
        if not file:
            return
        for seq, data in rows:
            if seq not in kept.seqs:
                kept.seqs.add(seq)
                kept.index.add(seq, data)

    def read_all(self, session_id: str, version: Version, count: int) -> bool:
        """Return whether as many rows as the session holds (``count``) have been read at ``version``: reading the log whole costs about that, and its values judge every row."""
        kept = self._sessions.get(session_id)
        return kept is not None and kept.version == version and len(kept.seqs) >= count

    def failing(
        self, session_id: str, version: Version, tree: FilterNode, *, unread: bool
    ) -> set[int] | None:
        """Return the rows read at ``version`` whose items cannot pass ``tree``.

        ``None`` where the index cannot judge ``tree``, and, unless
        ``unread``, where no row has been read at ``version``.
        """
        kept = self._sessions.get(session_id)
        if kept is None or kept.version != version:
            kept = self._sessions[session_id] = _Read(version)
        if not (unread or kept.seqs):
            return None
        may = kept.index.candidates(tree)
        if may is None:
            return None
        return kept.seqs - may

    def unread(self, session_id: str, version: Version, seqs: Sequence[int]) -> list[int]:
        """Return the seqs among ``seqs`` not read at ``version``, sorted."""
        kept = self._sessions.get(session_id)
        if kept is None or kept.version != version:
            return sorted(set(seqs))
        return sorted({seq for seq in seqs if seq not in kept.seqs})

    def spent(self, session_id: str, version: Version) -> int:
        """Return how many rows have been read at ``version``, each read counted (a row read twice, twice)."""
        kept = self._sessions.get(session_id)
        return kept.spent if kept is not None and kept.version == version else 0

    def judge(self, session_id: str, version: Version, count: int) -> None:
        """Count ``count`` rows a walk asked which may pass a filter, at ``version`` (:meth:`judged`)."""
        kept = self._sessions.get(session_id)
        if kept is None or kept.version != version:
            kept = self._sessions[session_id] = _Read(version)
        kept.judged += count

    def judged(self, session_id: str, version: Version) -> int:
        """Return how many rows walks asked about at ``version``, each ask counted (a row asked about twice, twice)."""
        kept = self._sessions.get(session_id)
        return kept.judged if kept is not None and kept.version == version else 0

    def may_pass(
        self, session_id: str, version: Version, tree: FilterNode, seqs: Sequence[int]
    ) -> set[int]:
        """Return the seqs among ``seqs`` read at ``version`` whose items may pass ``tree`` (every one read, where the index cannot judge ``tree``)."""
        kept = self._sessions.get(session_id)
        if kept is None or kept.version != version:
            return set()
        read = kept.seqs.intersection(seqs)
        may = kept.index.candidates(tree) if read else set()
        return read if may is None else read & may

    def forget(self, session_id: str) -> None:
        """Drop what is kept of a session."""
        self._sessions.pop(session_id, None)

    def clear(self) -> None:
        """Drop what is kept of every session."""
        self._sessions.clear()


def top_passing(
    terms: Sequence[str], k: int, failing: set[int], index: KeywordIndex
) -> list[tuple[float, int]]:
    """Return the ``k`` best ``(score, seq)`` by BM25 (:func:`top`) among the rows not in ``failing``.

    The ranking is ``len(failing)`` deeper than ``k``, so it holds ``k``
    others where the session has them; shorter than ``k``, it holds every
    other row that holds a term.
    """
    ranked = top(index, terms, k + len(failing)) if failing else top(index, terms, k)
    return [hit for hit in ranked if hit[1] not in failing][:k]
