"""The in-process store (``memory://``): the contract without a disk.

``memory://`` opens a fresh private store. ``memory://NAME`` opens a store
shared by every ``memory://NAME`` opened in the same process until the
process ends, so a session can be closed and reopened (tests, notebooks).
Items are kept as encoded bytes, exactly as the durable stores keep them, so
reading gives fresh items decoded through the codec. Each session keeps its
rows' search terms, and from its first keyword query the postings that rank
them as ``Memory.search`` does (see ``_ram_keywords``).
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Final

import attrs

from agents.memory._filter import FilterNode
from agents.memory.stores._core.backend import Backend
from agents.memory.stores._core.encoding import IndexEntry, KeyedRow, Row, RowUpdate, SessionRow
from agents.memory.stores._core.filter_values import FilterValues, ranked_where
from agents.memory.stores._core.rows import RowTable
from agents.memory.stores._core.terms import Terms
from agents.memory.stores._ram_keywords import SessionKeywords, rank_sessions
from agents.memory.stores._store import Store

__all__ = ["InMemoryStore", "SpaceBackend"]


@attrs.define
class _Session:
    step_key: str
    created: float
    metadata: bytes = b"{}"
    rows: RowTable = attrs.Factory(RowTable)
    keywords: SessionKeywords = attrs.Factory(SessionKeywords)
    model: tuple[str, int] | None = None
    # fields -> seq -> the vector's bytes (empty for an item without text)
    vectors: dict[str, dict[int, bytes]] = attrs.Factory(dict)


@attrs.define
class _Space:
    lock: threading.RLock = attrs.Factory(threading.RLock)
    sessions: dict[str, _Session] = attrs.Factory(dict)
    # One counter for every session of the space, so a recreated session never reuses a seq.
    next_seq: int = 1
    # Bumped by every write transaction and session deletion: what vectors_version answers.
    writes: int = 0
    # The values of filtered fields (see FilterValues), kept once for every handle of the
    # space: a filter is judged without decoding the items, and a field's values are
    # decoded once in the process, not once by each handle (1.5-3.3 s at 10,000 steps
    # under load, each). Every row is written here by the codec: screens trust its spelling.
    values: FilterValues = attrs.Factory(lambda: FilterValues(canonical=True))


_NAMED: Final[dict[str, _Space]] = {}
_NAMED_LOCK: Final = threading.Lock()


class InMemoryStore(Store):
    """Sessions in this process's memory; lost when the process ends.

    A :class:`~agents.memory.stores.Store` over the backend below: the
    in-process store is written against the public :class:`Backend`
    interface, as a third-party backend is.

    Args:
        name: Share the store with every ``InMemoryStore(name)`` of this process;
            ``""`` makes a private store.
        read_only: Refuse every write call.
    """

    def __init__(self, name: str = "", *, read_only: bool = False) -> None:
        super().__init__(SpaceBackend(name), read_only=read_only)


class SpaceBackend(Backend):
    """The rows of ``memory://NAME`` stores: dicts in this process, shared by name.

    Args:
        name: Share the rows with every backend of that name in this process;
            ``""`` makes private ones.
    """

    keeps_vectors = True

    def __init__(self, name: str = "") -> None:
        self.url = f"memory://{name}"
        if name:
            with _NAMED_LOCK:
                space = _NAMED.setdefault(name, _Space())
        else:
            space = _Space()
        self._space = space

    # -- reading ---------------------------------------------------------------------

    def read_session(self, session_id: str) -> SessionRow | None:
        with self._space.lock:
            session = self._space.sessions.get(session_id)
            return None if session is None else _session_row(session)

    def read_rows(
        self, session_id: str, *, steps: Sequence[str] | None = None, after: int | None = None
    ) -> list[tuple[int, bytes]]:
        with self._space.lock:
            session = self._space.sessions.get(session_id)
            if session is None:
                return []
            if steps is not None:
                return session.rows.of_steps(steps, after=after)
            low = -1 if after is None else after
            return [(seq, data) for seq, (_, _, data) in session.rows.items() if seq > low]

    def read_seqs(self, session_id: str, seqs: Sequence[int]) -> list[tuple[int, bytes]]:
        with self._space.lock:
            session = self._space.sessions.get(session_id)
            rows = session.rows if session is not None else {}
            return [(seq, rows[seq][2]) for seq in sorted(set(seqs)) if seq in rows]

    def count(self, session_id: str) -> int:
        with self._space.lock:
            session = self._space.sessions.get(session_id)
            return 0 if session is None else len(session.rows)

    def sessions(self) -> list[str]:
        with self._space.lock:
            return sorted(self._space.sessions)

    # -- writing ---------------------------------------------------------------------

    @contextlib.contextmanager
    def transaction(self, session_id: str) -> Iterator[_Tx]:
        # Each change records how to undo it: a transaction left by an exception
        # (a KeyboardInterrupt between two changes) is rolled back, not half applied.
        with self._space.lock:
            tx = _Tx(self._space)
            try:
                yield tx
            except BaseException:
                for undo in reversed(tx.undo):
                    undo()
                raise
            finally:
                if tx.undo:  # something was written (and kept, or undone)
                    self._space.writes += 1

    def lock_session(self, tx: _Tx, session_id: str) -> SessionRow | None:
        session = tx.space.sessions.get(session_id)
        return None if session is None else _session_row(session)

    def create_session(self, tx: _Tx, session_id: str, step_key: str, created: float) -> None:
        sessions = tx.space.sessions
        sessions[session_id] = _Session(step_key, created)
        tx.undo.append(lambda: sessions.pop(session_id, None))

    def set_metadata(self, tx: _Tx, session_id: str, metadata: bytes) -> None:
        session = tx.space.sessions[session_id]
        old = session.metadata
        session.metadata = metadata
        tx.undo.append(lambda: setattr(session, "metadata", old))

    def insert_rows(
        self, tx: _Tx, session_id: str, rows: Sequence[Row], terms: Sequence[Terms]
    ) -> list[int]:
        space = tx.space
        table = space.sessions[session_id].rows
        start = space.next_seq
        seqs = list(range(start, start + len(rows)))

        def undo() -> None:
            for seq in seqs:
                table.discard(seq)
            # Seqs are never given twice: next_seq stays where it went.

        tx.undo.append(undo)
        for seq, row in zip(seqs, rows, strict=True):
            table[seq] = row
        space.next_seq = start + len(rows)
        tx.undo.append(space.sessions[session_id].keywords.inserted(seqs, terms))
        return seqs

    def update_rows(
        self, tx: _Tx, session_id: str, rows: Sequence[RowUpdate], terms: Sequence[Terms]
    ) -> list[int]:
        session = tx.space.sessions[session_id]
        table = session.rows
        done = []
        for (seq, step, data), row_terms in zip(rows, terms, strict=True):
            old = table.get(seq)
            if old is not None:
                tx.undo.append(functools.partial(table.__setitem__, seq, old))
                table[seq] = (step, old[1], data)
                done.append((seq, row_terms))
        tx.undo.append(session.keywords.updated(done))
        return [seq for seq, _ in done]

    def delete_rows(self, tx: _Tx, session_id: str, seqs: Sequence[int]) -> list[int]:
        session = tx.space.sessions[session_id]
        table = session.rows
        gone = {seq: table[seq] for seq in seqs if seq in table}
        keys = table.keys_by_seq
        tx.undo.append(lambda: _restore(table, gone, keys))
        tx.undo.append(session.keywords.deleted(list(gone)))
        return [seq for seq in seqs if table.discard(seq)]

    def clear_rows(self, tx: _Tx, session_id: str) -> int:
        session = tx.space.sessions[session_id]
        table = session.rows
        gone = dict(table)
        keys = table.keys_by_seq
        tx.undo.append(lambda: _restore(table, gone, keys))
        tx.undo.append(session.keywords.cleared())
        table.clear()
        return len(gone)

    # -- keyword search: the postings each session keeps ---------------------------------

    def keyword_top(
        self, session_id: str, terms: Sequence[str], k: int
    ) -> list[tuple[float, int]] | None:
        with self._space.lock:
            session = self._space.sessions.get(session_id)
            return [] if session is None else session.keywords.top(terms, k)

    def keyword_among(
        self, session_id: str, terms: Sequence[str], seqs: Sequence[int]
    ) -> list[tuple[float, int]] | None:
        with self._space.lock:
            session = self._space.sessions.get(session_id)
            return [] if session is None else session.keywords.among(terms, seqs)

    def keyword_held(
        self, session_id: str, terms: Sequence[str], seqs: Sequence[int]
    ) -> dict[int, set[str]] | None:
        with self._space.lock:
            session = self._space.sessions.get(session_id)
            return {} if session is None else session.keywords.held(terms, seqs)

    def keyword_frequencies(self, session_id: str, terms: Sequence[str]) -> dict[str, int] | None:
        with self._space.lock:
            session = self._space.sessions.get(session_id)
            if session is None:
                return dict.fromkeys(terms, 0)
            return session.keywords.frequencies(terms)

    def keyword_top_sessions(
        self, session_ids: Sequence[str], terms: Sequence[str], k: int
    ) -> list[tuple[float, str, int]] | None:
        with self._space.lock:
            held = self._space.sessions
            found = [sid for sid in session_ids if sid in held]
            best = rank_sessions([held[sid].keywords for sid in found], terms, k)
        return [(score, found[number], seq) for score, number, seq in best]

    def keyword_top_where(
        self, session_id: str, terms: Sequence[str], k: int, tree: FilterNode
    ) -> list[tuple[float, int]] | None:
        """Rank only the rows that pass ``tree``, judged from the values of its fields the space keeps (:func:`ranked_where`)."""
        with self._space.lock:
            session = self._space.sessions.get(session_id)
            if session is None:
                return []
            allowed = self._passing(session_id, session, tree)
            if allowed is None:
                return None
            keywords = session.keywords
            return ranked_where(
                allowed,
                len(session.rows),
                k,
                lambda seqs: keywords.among(terms, seqs),
                lambda depth: keywords.top(terms, depth),
            )

    # -- filters: judged from the values of the filtered fields the space keeps ----------

    def filter_candidates(self, session_id: str, tree: FilterNode) -> set[int] | None:
        with self._space.lock:
            session = self._space.sessions.get(session_id)
            if session is None:
                return set()
            found = self._passing(session_id, session, tree)
            return None if found is None else set(found)  # the kept set stays as it is

    def filter_few_kept(self, session_id: str, tree: FilterNode, most: int) -> set[int] | None:
        """Judge the filter where no item need be decoded for it (:meth:`FilterValues.answers_cheaply`: the rows' value index, or the values kept), at most ``most`` rows; else ``None``."""
        with self._space.lock:
            session = self._space.sessions.get(session_id)
            if session is None:
                return set()
            if not self._space.values.answers_cheaply(session_id, session.rows, tree):
                return None  # the walk judges only the slices of its ranking
            found = self._passing(session_id, session, tree)
        return None if found is None or len(found) > most else set(found)

    def filter_among(
        self, session_id: str, tree: FilterNode, seqs: Sequence[int]
    ) -> set[int] | None:
        with self._space.lock:
            session = self._space.sessions.get(session_id)
            if session is None:
                return set()
            return self._passing(session_id, session, tree, seqs)

    def filter_among_rows(
        self, session_id: str, tree: FilterNode, seqs: Sequence[int]
    ) -> list[tuple[int, bytes]] | None:
        with self._space.lock:
            session = self._space.sessions.get(session_id)
            if session is None:
                return []
            may = self._passing(session_id, session, tree, seqs)
            if may is None:
                return None
            return [(seq, session.rows[seq][2]) for seq in sorted(may)]

    def _passing(
        self,
        session_id: str,
        session: _Session,
        tree: FilterNode,
        seqs: Sequence[int] | None = None,
    ) -> set[int] | None:
        """Return the seqs (among ``seqs``) whose items pass ``tree`` (:meth:`FilterValues.passing`); the caller holds the lock."""
        source = f"session {session_id!r} of {self.url}"
        view = (session.rows, self._space.writes)
        return self._space.values.passing(session_id, view, tree, source, seqs)

    # -- keyed rows ------------------------------------------------------------------------

    def read_keyed(
        self, session_id: str, keys: Sequence[str] | None = None, *, prefix: str | None = None
    ) -> list[KeyedRow]:
        with self._space.lock:
            session = self._space.sessions.get(session_id)
            return [] if session is None else session.rows.keyed(keys, prefix)

    def record_keys(self, session_id: str, prefix: str | None = None) -> list[str]:
        with self._space.lock:
            session = self._space.sessions.get(session_id)
            return [] if session is None else session.rows.record_keys(prefix)

    def keyed_seqs(self, tx: _Tx, session_id: str, keys: Sequence[str]) -> dict[str, int]:
        return tx.space.sessions[session_id].rows.key_seqs(keys)

    def read_keyed_in(self, tx: _Tx, session_id: str, keys: Sequence[str]) -> list[KeyedRow]:
        return tx.space.sessions[session_id].rows.keyed(keys, None)

    def insert_keyed(
        self,
        tx: _Tx,
        session_id: str,
        rows: Sequence[Row],
        keys: Sequence[str],
        terms: Sequence[Terms],
    ) -> list[int]:
        seqs = self.insert_rows(tx, session_id, rows, terms)
        table = tx.space.sessions[session_id].rows
        for seq, key in zip(seqs, keys, strict=True):
            table.file_key(seq, key)  # the undo of insert_rows discards the row, and its key
        return seqs

    def row_index(self, tx: _Tx, session_id: str) -> list[IndexEntry]:
        table = tx.space.sessions[session_id].rows
        return [(seq, step, created) for seq, (step, created, _) in table.items()]

    def delete_session(self, session_id: str) -> bool:
        with self._space.lock:
            self._space.writes += 1
            self._space.values.forget(session_id)
            return self._space.sessions.pop(session_id, None) is not None

    # -- vectors -------------------------------------------------------------------------

    def vector_model(self, session_id: str) -> tuple[str, int] | None:
        with self._space.lock:
            session = self._space.sessions.get(session_id)
            return None if session is None else session.model

    def vector_pages(
        self, session_id: str, fields: str, size: int
    ) -> Iterator[list[tuple[int, bytes]]]:
        with self._space.lock:
            session = self._space.sessions.get(session_id)
            rows = sorted((session.vectors.get(fields) or {}).items()) if session else []
        for start in range(0, len(rows), size):
            yield rows[start : start + size]

    def keyword_version(self, session_id: str) -> int:
        """Return the count of the space's writes, as :meth:`vectors_version` does."""
        with self._space.lock:
            return self._space.writes

    def vectors_version(self, session_id: str, fields: str) -> int:
        """Return the count of the space's writes: every write to any session of this name changes it (more often than needed, never too seldom)."""
        with self._space.lock:
            return self._space.writes

    def vector_count(self, session_id: str, fields: str) -> int:
        with self._space.lock:
            session = self._space.sessions.get(session_id)
            return len(session.vectors.get(fields) or {}) if session else 0

    def claim_vector_model(
        self, tx: _Tx, session_id: str, model: str, dimension: int
    ) -> tuple[str, int]:
        session = tx.space.sessions[session_id]
        if session.model is None:
            tx.undo.append(lambda: setattr(session, "model", None))
            session.model = (model, dimension)
        return session.model

    def put_vectors(
        self, tx: _Tx, session_id: str, fields: str, rows: Sequence[tuple[int, bytes, bytes]]
    ) -> int:
        session = tx.space.sessions[session_id]
        self._keep_vectors(tx, session)
        table = session.vectors.setdefault(fields, {})
        written = 0
        for seq, data, vector in rows:
            row = session.rows.get(seq)
            if row is not None and row[2] == data:
                table[seq] = vector
                written += 1
        return written

    def delete_vectors(self, tx: _Tx, session_id: str, seqs: Sequence[int]) -> None:
        session = tx.space.sessions[session_id]
        self._keep_vectors(tx, session)
        for table in session.vectors.values():
            for seq in seqs:
                table.pop(seq, None)

    def drop_vectors(self, tx: _Tx, session_id: str) -> int:
        session = tx.space.sessions[session_id]
        self._keep_vectors(tx, session)
        count = sum(map(len, session.vectors.values()))
        session.vectors = {}
        session.model = None
        return count

    @staticmethod
    def _keep_vectors(tx: _Tx, session: _Session) -> None:
        """Record the session's vectors as they are, to put back if the transaction fails."""
        vectors = {fields: dict(table) for fields, table in session.vectors.items()}
        model = session.model

        def undo() -> None:
            session.vectors = vectors
            session.model = model

        tx.undo.append(undo)

    def close(self) -> None:
        """Do nothing: the rows, and the values of filtered fields kept beside them, live as long as the name's space."""


@attrs.define
class _Tx:
    """A write transaction on a space: the changes made, each with its undo."""

    space: _Space
    undo: list[Callable[[], object]] = attrs.Factory(list)


def _restore(
    table: RowTable, rows: dict[int, tuple[str | None, float, bytes]], keys: dict[int, str]
) -> None:
    """Put deleted rows back, with the record keys they were filed under, in seq order (the table keeps insertion order)."""
    kept = dict(table)
    keys = {**keys, **table.keys_by_seq}
    table.clear()
    for seq, row in sorted({**kept, **rows}.items()):
        table[seq] = row
    for seq, key in keys.items():
        if seq in table:
            table.file_key(seq, key)


def _session_row(session: _Session) -> SessionRow:
    return (session.step_key, session.created, session.metadata)
