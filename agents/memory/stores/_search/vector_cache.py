"""The vectors of the sessions a store handle searched last, kept in memory while their backend vouches for them.

A semantic query that scores with numpy (vectors cut into parts, or a
backend that computes no cosine itself) would read and decode every vector
of the session each time. :class:`VectorCache` keeps what the last queries
read as a table that scores as ``Memory``'s index does (``Vectors`` of
``agents.memory.search``), under the value :meth:`Backend.vectors_version`
gave before the read. A query whose value is the same scores from the
table. After a write the backend can name the items of
(:meth:`Backend.vector_changes`: SQLite and PostgreSQL log every vector
write, whoever makes it; JSONL reads them from the log), the table is
brought up to date with those items' vectors only (``Vectors.changed``);
after a write it cannot name, the vectors are read again (into a new
table at once where the kept one answered several queries). A backend
whose version is ``None`` keeps nothing. The first query of a session
reads page by page as before; the second reads the vectors into a plain
table and keeps it; the 32nd
(:data:`SCREEN_QUERY`) starts a thread that holds its equal part vectors
once and screens it, as ``Memory``'s index does, while queries go on with
the plain table. A session written between every two queries
never pays for a table.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Final

# The index's own table, so that a stored session scores as Memory.search does, float for float.
from agents.memory.search._item_vectors import Vectors
from agents.memory.stores._search.compact import CompactVectors

__all__ = [
    "CACHE_BYTES",
    "COMPACT_THREAD",
    "REREAD",
    "SCREEN_QUERY",
    "Table",
    "VectorCache",
    "Vectors",
    "follows",
]

Table = Vectors | CompactVectors
"""A kept table: the vectors as float32 (:class:`Vectors`), or coded where those pass the budget (:class:`CompactVectors`)."""

CACHE_BYTES: Final = 512 * 1024 * 1024
"""The vectors a store handle keeps, at most, over the sessions it searched last (bytes of float32).

A session of 20,000 UFO-shaped steps cut into parts reads about 380 MB of
part vectors, kept as read. A session whose vectors pass it is kept with
each distinct part vector once where that fits (30,000 such steps: 631 MB
read, 348 MB kept), else read page by page at each query.
"""


COMPACT_THREAD: Final = "kvmemory-compact-vectors"
"""The name of the thread that compacts a kept table (:data:`SCREEN_QUERY`)."""

SCREEN_QUERY: Final = 32
"""The query at one version from which a kept table is compacted (``Vectors.compacted``).

The second query at a version reads the table as stored (a row per part
vector); this one holds its equal rows once and, past 16,384 distinct
rows, makes its screen, as ``Memory``'s index does, on a thread of its
own while the queries go on with the plain table (the new table is taken
only if the session is unchanged). That turns every distinct row once
(on 10,000 stored steps cut into parts, 2.5 to 3 seconds at load 4 on two
cores) and saves 5 to 30 ms a query after it there, so it waits until a
session is queried again and again without a change: a session written
every few queries never pays it.
"""


REREAD: Final = 4
"""A kept table (or a stale coded file) is read again, not brought up to date, once more than one item in this many changed."""


def follows(changed: set[int] | None, items: int) -> bool:
    """Return whether a table of ``items`` items is brought up to date with the ``changed`` seqs (:meth:`Backend.vector_changes`) rather than read again: the backend could tell (not ``None``), and at most one item in :data:`REREAD` changed."""
    return changed is not None and REREAD * len(changed) <= items


def _nbytes(table: Table) -> int:
    """Return the bytes of a kept table's rows."""
    return table.nbytes if isinstance(table, CompactVectors) else int(table.matrix.nbytes)


def _grown(table: Table | None, budget: int) -> bool:
    """Return whether ``table`` is a coded table whose rows built or loaded fit ``budget`` and that the writes it followed grew by at most a quarter of it (:data:`REREAD`): kept alone past the budget, rather than loaded and caught up again at each query."""
    return (
        isinstance(table, CompactVectors)
        and int(table.matrix.nbytes) <= budget
        and table.nbytes <= budget + budget // REREAD
    )


_COUNTS_KEPT: Final = 1024
"""The sessions (and fields) whose vector row count a handle keeps (:meth:`VectorCache.counted`)."""


class VectorCache:
    """The vector tables of the sessions a store handle searched last, each under the version it was read at.

    Args:
        budget: The bytes of vectors kept at most; the tables searched
            longest ago go first, and a table larger than this is not kept.
    """

    def __init__(self, budget: int = CACHE_BYTES) -> None:
        self._budget = budget
        # (session, fields) -> (version, table, queries asked of it, rows when read or compacted)
        self._tables: OrderedDict[tuple[str, str], tuple[Hashable, Table | None, int, int]] = (
            OrderedDict()
        )
        self._lock = threading.Lock()
        self._compacting: set[threading.Thread] = set()
        # (session, fields) -> (version, vector rows counted at it), the sessions asked last
        self._counts: OrderedDict[tuple[str, str], tuple[Hashable, int]] = OrderedDict()

    @property
    def budget(self) -> int:
        """The bytes of vectors kept at most."""
        return self._budget

    def table(
        self,
        session_id: str,
        fields: str,
        version: Hashable,
        load: Callable[[int], Table | None],
        update: Callable[[Hashable, Table], Table | None] | None = None,
        saved: Callable[[int], Table | None] | None = None,
    ) -> Table | None:
        """Return the session's table kept under ``version``, else the one ``update`` or ``load`` makes now; ``None`` to read the session page by page.

        ``None`` the first time a session is asked for with no table kept
        (a session queried once is read as before, never copied into a
        table) and for a session over the budget. A table kept under
        another version is brought to this one by ``update`` where it can
        tell what changed (a write by any handle the backend logged): the
        work of a write follows the items it changed; where it cannot,
        ``load`` reads the session into the new table at once if the kept
        one answered several queries (else page by page, as a first query).

        Args:
            session_id: The session.
            fields: The fields (and parts) the vectors were computed over.
            version: What the backend vouches for now, with the model the
                vectors come from: a table kept under another value is read again.
            load: Reads the session's vectors into a table, or gives
                ``None`` once they pass the bytes it is given (remembered
                under ``version``: the session is then read page by page).
            update: Given the version a table was kept under and the table,
                returns it at ``version`` (:meth:`Vectors.changed`), or
                ``None`` when it cannot tell what changed.
            saved: Where no table is kept (or one of another version that
                ``update`` cannot follow), gives the table saved beside the
                store at ``version`` (given the bytes it may keep), or
                ``None``: a table it gives answers this first query.
        """
        key = (session_id, fields)
        with self._lock:
            kept = self._tables.get(key)
            stale = kept is not None and kept[0] != version
            follows = stale and kept is not None and kept[1] is not None and update is not None
            if follows:
                # Taken out while it is brought up to date: no other query updates it too.
                del self._tables[key]
            elif kept is None or stale:
                self._tables.pop(key, None)
                if saved is None:
                    # First asked at this version: read page by page as before (the next
                    # write may come before the next query); kept from the next query on.
                    self._tables[key] = (version, None, 1, 0)
                    return None
        if follows and kept is not None and update is not None:
            return self._updated(key, version, kept, update, load)
        if (kept is None or stale) and saved is not None:
            return self._saved(key, version, saved)
        assert kept is not None
        if kept[1] is not None or kept[2] > 1:
            with self._lock:
                if self._tables.get(key) is kept:
                    self._tables.move_to_end(key)
                    self._tables[key] = (version, kept[1], kept[2] + 1, kept[3])
            table = kept[1]
            if table is not None and kept[2] + 1 == SCREEN_QUERY:
                # Asked again and again at this version: equal rows once, and the screen, made
                # on a thread while the queries go on with the plain table.
                self._compact_later(key, version, table)
            return table
        table = load(self._budget)
        self._keep(key, (version, table, 2, 0 if table is None else table.used))
        return table

    def _saved(
        self, key: tuple[str, str], version: Hashable, saved: Callable[[int], Table | None]
    ) -> Table | None:
        """Return the table ``saved`` gives, kept as read at ``version``; else note the first query at it (``None``: read page by page)."""
        table = saved(self._budget)
        if table is None:
            self._keep(key, (version, None, 1, 0))
            return None
        self._keep(key, (version, table, 2, table.used))
        return table

    def offer(
        self,
        session_id: str,
        fields: str,
        version: Hashable,
        make: Callable[[int], Table | None],
    ) -> None:
        """Keep the table ``make`` gives of a session's vectors just read whole, under ``version``, unless one is kept at it.

        A caller that read every vector of a session (``Store.read_vectors``,
        as a ``StoredMemory`` does as it opens) hands them over, so that the
        next query at that version scores from them rather than reading the
        session again (100,000 items: 0.44 s). ``make`` is given the bytes it
        may keep, as ``load`` is (see :meth:`table`). Vectors the backend
        ranks itself (:meth:`Backend.ranks_vectors`) are not offered: no
        query scores from them.
        """
        key = (session_id, fields)
        with self._lock:
            kept = self._tables.get(key)
            if kept is not None and kept[0] == version and kept[1] is not None:
                return
        table = make(self._budget)
        if table is not None:
            self._keep(key, (version, table, 1, table.used))

    def _updated(
        self,
        key: tuple[str, str],
        version: Hashable,
        kept: tuple[Hashable, Table | None, int, int],
        update: Callable[[Hashable, Table], Table | None],
        load: Callable[[int], Table | None],
    ) -> Table | None:
        """Return the kept table brought to ``version`` by ``update``, kept; where it cannot be, the table ``load`` reads now, or ``None`` (page by page).

        Where the backend cannot tell what changed, a session the kept
        table answered two queries or more at its version (queried again
        and again) is read once, into the new table, rather than page by
        page now and into a table at the next query; one written between
        every two queries is read page by page, as before (a table read
        at each query would cost more).
        """
        old = kept[1]
        assert old is not None
        table = update(kept[0], old)
        if table is None:
            if kept[2] < 3:
                self._keep(key, (version, None, 1, 0))
                return None
            table = load(self._budget)
            self._keep(key, (version, table, 2, 0 if table is None else table.used))
            return table
        queries = kept[2] + 1
        if not table.screens or table.used > kept[3] + kept[3] // 4:
            # Not compacted yet (a compaction under way is not taken after a write), or a
            # quarter more rows since it was: compacted again after SCREEN_QUERY quiet queries.
            queries = min(queries, 2)
        self._keep(key, (version, table, queries, kept[3]))
        return table

    def _keep(self, key: tuple[str, str], entry: tuple[Hashable, Table | None, int, int]) -> None:
        with self._lock:
            self._tables.pop(key, None)
            self._tables[key] = entry
            while self._bytes() > self._budget:
                if next(iter(self._tables)) == key and _grown(entry[1], self._budget):
                    break  # alone, a coded table that writes grew a little past the budget
                self._tables.popitem(last=False)

    def _compact_later(self, key: tuple[str, str], version: Hashable, table: Table) -> None:
        thread = threading.Thread(
            target=self._compact, args=(key, version, table), name=COMPACT_THREAD, daemon=True
        )
        with self._lock:
            self._compacting.add(thread)
        thread.start()

    def _compact(self, key: tuple[str, str], version: Hashable, table: Table) -> None:
        try:
            compact: Table | None = table.compacted()
        except Exception:  # the plain table stays: it ranks the same
            compact = None
        with self._lock:
            self._compacting.discard(threading.current_thread())
            now = self._tables.get(key)
            # Swapped in only for the table it was made from (not after a write or a drop).
            if compact is not None and now is not None and now[0] == version and now[1] is table:
                self._tables[key] = (version, compact, now[2], compact.used)

    def settle(self) -> None:
        """Return once no kept table is being compacted (for tests and benchmarks)."""
        while True:
            with self._lock:
                running = list(self._compacting)
            if not running:
                return
            for thread in running:
                thread.join()

    def _bytes(self) -> int:
        return sum(_nbytes(table) for _, table, _, _ in self._tables.values() if table is not None)

    def kept(self, session_id: str, fields: str, version: Hashable) -> Table | None:
        """Return the session's table kept under ``version``, or ``None`` (none kept, or under another version); the cache is left as it was."""
        with self._lock:
            kept = self._tables.get((session_id, fields))
        return kept[1] if kept is not None and kept[0] == version else None

    def counted(
        self, session_id: str, fields: str, version: Hashable | None, count: Callable[[], int]
    ) -> int:
        """Return the session's vector rows over ``fields``: ``count()`` once per ``version``, then the number kept.

        A query on a writable handle first asks whether every item holds a
        vector (``Backend.vector_count``, a scan of the session's vector
        rows: 18-43 ms at 100,000 PostgreSQL rows); the rows change only
        with the version (:meth:`Backend.vectors_version` changes at every
        write to them), so the count read under one version is the count
        while it holds. ``version`` is read before ``count`` runs; ``None``
        (a backend that cannot vouch) counts every time.
        """
        if version is None:
            return count()
        key = (session_id, fields)
        with self._lock:
            kept = self._counts.get(key)
            if kept is not None and kept[0] == version:
                self._counts.move_to_end(key)
                return kept[1]
        counted = count()
        with self._lock:
            self._counts[key] = (version, counted)
            self._counts.move_to_end(key)
            while len(self._counts) > _COUNTS_KEPT:
                self._counts.popitem(last=False)
        return counted

    def forget(self, session_id: str) -> None:
        """Drop every table and count of a session (its vectors were dropped or the session deleted)."""
        with self._lock:
            for key in [key for key in self._tables if key[0] == session_id]:
                del self._tables[key]
            for key in [key for key in self._counts if key[0] == session_id]:
                del self._counts[key]

    def sizes(self) -> dict[tuple[str, str], int]:
        """Return the rows of each table kept, by ``(session_id, fields)`` (for tests and benchmarks)."""
        with self._lock:
            return {
                key: table.used
                for key, (_, table, _, _) in self._tables.items()
                if table is not None
            }

    def screened(self) -> list[tuple[str, str]]:
        """Return the ``(session_id, fields)`` of each table kept that is screened (for tests and benchmarks)."""
        with self._lock:
            return [
                key
                for key, (_, table, _, _) in self._tables.items()
                if table is not None and table.screen is not None
            ]
