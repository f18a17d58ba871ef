"""The vectors of a search index's items: one table per set of keys embedded.

:class:`Vectors` is one model's unit vectors of the items' parts;
:class:`ItemVectors` keeps a table per set of keys and, for each, the items
that wait for a vector, following the index's adds, changes and drops.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from agents.memory._codec import collector_paused
from agents.memory._item import MemoryItem
from agents.memory._vectors import Embedder, EmbedParts, checked_vectors, cosines, numpy, top_rows
from agents.memory.exceptions import EmbedderMismatchError

__all__ = ["ItemVectors", "Vectors"]

Progress = Callable[[int, int], object]


class Vectors:
    """One model's unit vectors of the items' parts: each distinct vector held once, items laid out for a fast best-of-parts.

    An item holds a slot (``slot_of``) and the rows of its distinct part
    vectors (``rows_of``, see ``EmbedParts``). A part vector that several
    items share (a field every step repeats: a status, an application, a
    subtask) is one row of :attr:`matrix`, scored once per query. The rows
    of the items are laid out slot after slot (``ref_row``, each slot's
    first at ``start``), so an item's best cosine is one ``maximum.reduceat``
    over the scored rows: a query costs one product over the distinct rows
    and one pass over the items' row numbers. A dropped item's slot is only
    marked dead; the layout is compacted once dead slots hold half of it.
    """

    def __init__(self, model: str, dimension: int, parts: EmbedParts) -> None:
        np = numpy()
        self.model = model
        self.parts = parts
        self.matrix = np.zeros((64, dimension), dtype=np.float32)
        self.uses = np.zeros(64, dtype=np.int64)  # how many items hold each row
        self.used = 0  # rows ever handed out: the rows past it are all free
        self.free: list[int] = []
        self.row_of: dict[bytes, int] = {}  # a vector's digest -> its row
        self.digest_at: dict[int, bytes] = {}
        self.texts = TextRows()  # the texts embedded here and the rows of their vectors
        self._rows_of: dict[int, list[int]] | None = {}  # key -> its distinct rows (see rows_of)
        self.slot_of: dict[int, int] = {}
        self.key_at: list[int] = []  # the key of each slot, -1 for a dead one
        self.alive = np.zeros(64, dtype=bool)
        self.start = np.zeros(64, dtype=np.int64)  # each slot's first place in ref_row
        self.ref_row = np.zeros(256, dtype=np.int64)
        self.refs = 0  # places of ref_row in use
        self.dead = 0  # places held by dead slots
        self.screen: Screen | None = None  # made by the first query of a large table
        self.screens = True  # whether a large table is screened (see of_rows)

    @classmethod
    def of_rows(
        cls, model: str, parts: EmbedParts, keys: Any, matrix: Any, *, distinct: bool = False
    ) -> Vectors:
        """Return a table of the unit vectors in ``matrix``, row ``i`` a part of key ``keys[i]`` (an item's rows together).

        The bulk form of :meth:`put` for vectors read from a store; the
        table scores as the index's own does, float for float. With
        ``distinct``, equal rows (a part every step repeats) are held once,
        found with numpy in one pass (:func:`distinct_rows`). The table is
        not screened until :meth:`prepare` is called with ``screen=True``
        (see :meth:`compacted`).
        """
        np = numpy()
        table = cls(model, matrix.shape[1], parts)
        table.screens = False
        if not len(keys):
            return table
        matrix = np.ascontiguousarray(matrix, dtype=np.float32)
        if distinct:
            kept, ref_row = distinct_rows(np, matrix)
            table.matrix = matrix[kept] if len(kept) < len(matrix) else matrix
        else:
            ref_row = np.arange(len(matrix), dtype=np.int64)
            table.matrix = matrix
        used = len(table.matrix)
        table.used = used
        key_array = np.asarray(keys, dtype=np.int64)
        # Row i is the i-th reference: an item's rows lie together, slot after slot.
        first = np.flatnonzero(np.r_[True, key_array[1:] != key_array[:-1]])
        table.ref_row = ref_row
        table.refs = len(ref_row)
        table.start = first.astype(np.int64)
        table.alive = np.ones(len(first), dtype=bool)
        table.uses = np.bincount(ref_row, minlength=used).astype(np.int64)
        table.key_at = key_array[first].tolist()
        table.slot_of = {key: slot for slot, key in enumerate(table.key_at)}
        table._rows_of = (
            None  # made from the layout if a put or a drop needs it (a list a key is slow)
        )
        return table

    @property
    def rows_of(self) -> dict[int, list[int]]:
        """Each key's rows, by key (in a table of :meth:`of_rows`, made from the layout when first asked for)."""
        if self._rows_of is None:
            slots = len(self.key_at)
            ends = [*self.start[1:slots].tolist(), self.refs]
            refs = self.ref_row[: self.refs].tolist()  # one list sliced: not an array a key
            self._rows_of = {
                key: refs[start:end]
                for key, start, end in zip(
                    self.key_at, self.start[:slots].tolist(), ends, strict=True
                )
            }
        return self._rows_of

    def compacted(self) -> Vectors:
        """Return this table with equal rows held once, no dead slot and, if large, screened: the same scores, float for float.

        Worth its cost (a digest and a comparison of every row, and the
        screen's turn of every distinct row) for a table queried again and
        again.
        """
        np = numpy()
        slots = len(self.key_at)
        lengths = np.diff(np.r_[self.start[:slots], self.refs])
        refs = self.ref_row[: self.refs]
        if self.dead:  # the living slots only (a table brought up to date by changed)
            alive = np.flatnonzero(self.alive[:slots])
            refs = refs[self._places(np, alive)[0]] if len(alive) else refs[:0]
            lengths, key_at = lengths[alive], np.asarray(self.key_at, dtype=np.int64)[alive]
        else:
            key_at = np.asarray(self.key_at, dtype=np.int64)
        keys = np.repeat(key_at, lengths)
        if self.used == len(refs) and (refs == np.arange(len(refs))).all():
            matrix = self.matrix[: self.used]  # a row per reference, in order: no copy
        else:
            matrix = self.matrix[refs]
        table = Vectors.of_rows(self.model, self.parts, keys, matrix, distinct=True)
        table._reserve(1)  # room for the rows of the writes after (see changed)
        table.prepare(screen=True)
        table.rows_of  # noqa: B018 (made now, on the compacting thread, not by the next write's query)
        return table

    def changed(self, keys: Sequence[int], vectors: Mapping[int, Any]) -> Vectors:
        """Return a copy of this table where each of ``keys`` holds its part vectors in ``vectors`` (a key not there holds none): the same scores as a table read anew.

        What a kept table takes after a write: the work follows the keys
        changed and the layout (copied), not the vectors. This table stays
        as it was (a query may still score it): the two share the matrix,
        and the copy files its new vectors in rows this table does not use
        (a row freed by a drop is not filled again: it waits for a table
        compacted anew).
        """
        np = numpy()
        table = copy.copy(self)
        table.uses = self.uses.copy()
        table.row_of, table.digest_at = dict(self.row_of), dict(self.digest_at)
        table.texts = self.texts.copy()
        table._rows_of = dict(self.rows_of)
        table.slot_of, table.key_at = dict(self.slot_of), list(self.key_at)
        table.alive, table.start = self.alive.copy(), self.start.copy()
        table.ref_row = self.ref_row.copy()
        table.screen = copy.copy(self.screen)
        table.free = []
        for key in keys:
            table.drop(key)
        table.free = []  # rows this table may still hold for a query in flight
        blocks = [
            (key, np.asarray(vectors[key], dtype=np.float32)) for key in keys if key in vectors
        ]
        blocks = [(key, block[None, :] if block.ndim == 1 else block) for key, block in blocks]
        table._reserve(sum(len(block) for _, block in blocks))
        table.put([key for key, _ in blocks], [block for _, block in blocks])
        table.free = []
        table.prepare()
        return table

    def _reserve(self, rows: int) -> None:
        """Make room for ``rows`` more rows after the last in use, with an eighth more (a kept table is large: not doubled)."""
        np = numpy()
        needed = self.used + rows
        if needed <= len(self.matrix):
            return
        grown = np.zeros((needed + self.used // 8 + 64, self.matrix.shape[1]), dtype=np.float32)
        grown[: self.used] = self.matrix[: self.used]
        self.matrix = grown
        uses = np.zeros(len(grown), dtype=np.int64)
        uses[: self.used] = self.uses[: self.used]
        self.uses = uses

    def put(self, keys: Sequence[int], vectors: Sequence[Any]) -> None:
        """File each key's part vectors (a matrix, one row a part; a 1-D vector is one part): the same vector shares a row."""
        np = numpy()
        laid: list[tuple[int, list[int]]] = []  # keys and rows to lay out, in order, at once
        for key, block in zip(keys, vectors, strict=True):
            if key in self.rows_of:
                self._lay_out_many(np, laid)  # the order of a put one key at a time
                laid = []
                self.drop(key)  # a key embedded again keeps only its new parts
            matrix = np.asarray(block, dtype=np.float32)
            rows: list[int] = []
            for vector in matrix[None, :] if matrix.ndim == 1 else matrix:
                row = self._row(np.ascontiguousarray(vector))
                if row not in rows:
                    rows.append(row)
                    self.uses[row] += 1
            if rows:
                laid.append((key, rows))
        self._lay_out_many(np, laid)

    def put_texts(
        self, keys: Sequence[int], texts: Sequence[Sequence[str]], embed: Callable[[list[str]], Any]
    ) -> None:
        """File each key's parts by their ``texts``: a text embedded here before shares its row; the others are embedded by one call of ``embed``.

        ``embed`` gets the distinct texts that no row holds, in the order
        they first come, and returns their unit vectors, one row a text.
        Each new text takes a row (a freed one first, then the one after
        the last in use) and each key the distinct rows of its parts, in
        order: the layout a part-by-part filing gives, its vectors copied
        in a batch at a time.
        """
        np = numpy()
        distinct = list(dict.fromkeys(itertools.chain.from_iterable(texts)))
        fresh = [text for text in distinct if text not in self.texts]
        unit = embed(fresh) if fresh else self.matrix[:0]
        vector_of = dict(zip(fresh, range(len(fresh)), strict=True))
        begin = 0
        for at, key in enumerate(keys):
            if key in self.rows_of:  # embedded again: it keeps only its new parts
                self._file_texts(np, keys[begin:at], texts[begin:at], unit, vector_of)
                begin = at
                if len(vector_of) < len(distinct):  # a drop may free a row the parts after hold
                    held = [text for text in distinct if text not in vector_of]
                    vector_of.update(
                        zip(held, range(len(unit), len(unit) + len(held)), strict=True)
                    )
                    unit = np.concatenate([unit, self.matrix[self.texts.rows(held)]])
                self.drop(key)
        self._file_texts(np, keys[begin:], texts[begin:], unit, vector_of)

    def _file_texts(
        self,
        np: Any,
        keys: Sequence[int],
        texts: Sequence[Sequence[str]],
        unit: Any,
        vector_of: Mapping[str, int],
    ) -> None:
        """File the parts of ``keys`` (none of them held here): a new text takes a row and its vector ``unit[vector_of[text]]``."""
        filed = self.texts.file(np, texts, unit, vector_of, self._file_rows)
        laid = [(key, rows) for key, rows in zip(keys, filed, strict=True) if rows]
        held = np.fromiter(itertools.chain.from_iterable(rows for _, rows in laid), np.int64)
        self.uses[: self.used] += np.bincount(held, minlength=self.used)
        self._lay_out_many(np, laid)

    def _file_rows(self, vectors: Any) -> list[int]:
        """File ``vectors`` (a matrix, one row a vector) in free rows, rows freed by a drop first, and return their rows."""
        taken = [self.free.pop() for _ in range(min(len(vectors), len(self.free)))]
        first = self.used
        self.used += len(vectors) - len(taken)
        while self.used > len(self.matrix):
            self._grow_rows()
        rows = [*taken, *range(first, self.used)]
        if not taken:
            self.matrix[first : self.used] = vectors
            return rows
        self.matrix[rows] = vectors
        for row in taken:  # a freed row the screen had turned: turned again
            if self.screen is not None and row < self.screen.done:
                self.screen.refresh(numpy(), self.matrix, [row])
        return rows

    def _row(self, vector: Any) -> int:
        """Return the row holding ``vector``, filed now if no row holds it."""
        digest = hashlib.blake2b(vector.tobytes(), digest_size=16).digest()
        row = self.row_of.get(digest)
        if row is not None and (self.matrix[row] == vector).all():
            return row
        row = self._new_row(vector)
        if digest not in self.row_of:  # a digest shared by two vectors files only the first
            self.row_of[digest] = row
            self.digest_at[row] = digest
        return row

    def _new_row(self, vector: Any) -> int:
        """File ``vector`` in a free row and return it."""
        if self.free:
            row = self.free.pop()
        else:
            row = self.used
            self.used += 1
            if row >= len(self.matrix):
                self._grow_rows()
        self.matrix[row] = vector
        if self.screen is not None and row < self.screen.done:
            self.screen.refresh(numpy(), self.matrix, [row])
        return row

    def _lay_out_many(self, np: Any, laid: Sequence[tuple[int, list[int]]]) -> None:
        """Lay out each key's rows in a slot of its own, in order: ``_lay_out`` for many keys at once."""
        if not laid:
            return
        first = len(self.key_at)
        count = len(laid)
        while first + count > len(self.start):
            self.start = _grown(np, self.start, 0)
            self.alive = _grown(np, self.alive, False)
        flat = [row for _, rows in laid for row in rows]
        end = self.refs + len(flat)
        while end > len(self.ref_row):
            self.ref_row = _grown(np, self.ref_row, 0)
        self.ref_row[self.refs : end] = flat
        sizes = np.fromiter((len(rows) for _, rows in laid), np.int64, count)
        self.start[first : first + count] = self.refs + np.cumsum(sizes) - sizes
        self.alive[first : first + count] = True
        self.refs = end
        key_at, slot_of, rows_of = self.key_at, self.slot_of, self.rows_of
        for slot, (key, rows) in enumerate(laid, first):
            key_at.append(key)
            slot_of[key] = slot
            rows_of[key] = rows

    def _grow_rows(self) -> None:
        np = numpy()
        grown = np.zeros((2 * len(self.matrix), self.matrix.shape[1]), dtype=np.float32)
        grown[: len(self.matrix)] = self.matrix
        self.matrix = grown
        self.uses = _grown(np, self.uses, 0)

    def drop(self, key: int) -> None:
        rows = self.rows_of.pop(key, None)
        if rows is None:
            return
        for row in rows:
            self.uses[row] -= 1
            if not self.uses[row]:
                digest = self.digest_at.pop(row, None)
                if digest is not None:
                    del self.row_of[digest]
                self.texts.forget(row)
                self.free.append(row)
        slot = self.slot_of.pop(key)
        self.key_at[slot] = -1
        self.alive[slot] = False
        self.dead += len(rows)
        if self.dead > max(self.refs // 2, 4096):
            self._compact()

    def _compact(self) -> None:
        """Lay the living items out again, slot after slot, without the dead ones."""
        np = numpy()
        keys = list(self.rows_of)
        self.key_at = []
        self.slot_of = {}
        self.refs = 0
        self.dead = 0
        self.alive = np.zeros(max(64, len(keys)), dtype=bool)
        self.start = np.zeros(max(64, len(keys)), dtype=np.int64)
        self._lay_out_many(np, [(key, self.rows_of[key]) for key in keys])

    def scores(
        self, query: Any, limit: int | None = None, among: Iterable[int] = ()
    ) -> dict[int, float]:
        """Return the best cosine of a part with the unit ``query`` of the best ``limit`` items and of ``among``, by key.

        Items tied with the ``limit``-th best are all returned, so that ties
        can keep session order; ``limit=None`` returns every item. A large
        table is screened first (see :class:`Screen`): only the items whose
        bound reaches the ``limit``-th best cosine are scored, and they are
        scored exactly, so the answer is the same float for float.
        """
        np = numpy()
        if not self.slot_of:
            return {}
        slot_of = self.slot_of
        wanted = [slot for key in among if (slot := slot_of.get(key)) is not None]
        best = None
        if (
            limit is not None
            and self.screens
            and self.used >= SCREEN_ROWS
            and self.matrix.shape[1] >= 4 * SCREEN_LEAST
            and 4 * (limit + len(wanted)) < len(self.slot_of)
        ):
            best = self._screened(np, query, limit, wanted)
        if best is None:
            best = self._every_best(np, query)
        key_at = self.key_at
        out = {key_at[slot]: float(best[slot]) for slot in top_rows(best, limit).tolist()}
        for slot in wanted:
            out[key_at[slot]] = float(best[slot])
        return out

    def every_score(self, query: Any) -> tuple[Any, Any]:
        """Return the key of each slot and its item's best cosine of a part with the unit ``query``, every item scored.

        The floats of :meth:`scores`; a dead slot (key ``-1``) holds ``-inf``.
        One product over every distinct row, no screen: what a ranking many
        items deep costs least (a filtered walk, see :func:`ranked_top`).

        Returns:
            ``(keys, cosines)``: two numpy arrays, one entry a slot.
        """
        np = numpy()
        if not self.slot_of:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        return np.asarray(self.key_at, dtype=np.int64), self._every_best(np, query)

    def _every_best(self, np: Any, query: Any) -> Any:
        """Return each slot's best cosine with ``query`` (``-inf`` for a dead slot), scoring every row."""
        slots = len(self.key_at)
        sims = cosines(self.matrix[: self.used], query)[self.ref_row[: self.refs]]
        # A row a slot (whole items): each slot's best is its row's.
        best = sims if self.refs == slots else np.maximum.reduceat(sims, self.start[:slots])
        if self.dead:
            best[~self.alive[:slots]] = -np.inf
        return best

    def scores_of(self, query: Any, keys: Iterable[int]) -> dict[int, float]:
        """Return the best cosine of a part with the unit ``query`` of each of ``keys`` that holds a vector, by key."""
        np = numpy()
        slot_of = self.slot_of
        slots = sorted(slot for key in keys if (slot := slot_of.get(key)) is not None)
        if not slots:
            return {}
        best = self._exact(np, query, np.asarray(slots, dtype=np.int64))
        key_at = self.key_at
        return {
            key_at[slot]: float(score) for slot, score in zip(slots, best.tolist(), strict=True)
        }

    def _screened(self, np: Any, query: Any, limit: int, wanted: list[int]) -> Any | None:
        """Return each slot's best cosine where it can be among the best ``limit`` or is ``wanted``, ``-inf`` elsewhere.

        ``None`` (score every row) where a sample of the rows says the bound
        would keep too many of them (:meth:`Screen.pays`), or where the
        cut found keeps more than half. Else the screen bounds every
        row's cosine (:meth:`Screen.bounds`), and so every item's; the items with the highest bounds (and the ``wanted``
        ones) are scored exactly, and the ``limit``-th best of them is the
        cut. A row whose bound is below the cut cannot give an item a cosine
        that reaches it: the rows that can are bounded again, closer
        (:meth:`Screen.closer`), and those still reaching the cut are scored
        exactly. An item's best cosine is then exact wherever it reaches the
        cut (ties included), which every item among the best ``limit`` does;
        the others stay below the cut (or ``-inf``).
        """
        slots = len(self.key_at)
        screen = self._screen_now(np)
        used = self.used
        turned = screen.turn(np, query)
        first = min(slots - 1, 2 * limit + 32)  # the items scored first, for a cut
        per_slot = self.refs / slots
        # Their rows, gathered, cost about twice as many rows read in turn: less room to pay.
        keeps = SCREEN_KEEPS - 2 * first * per_slot / used
        if not screen.pays(np, self.matrix, used, query, turned, limit, keeps):
            return None  # the bound would keep too many rows: score every row, and no bound
        ref_row = self.ref_row[: self.refs]
        start = self.start[:slots]
        rows_bound = screen.bounds_turned(turned, used)
        if self.refs == slots:  # a row a slot (whole items): no slot holds two
            bound = rows_bound[ref_row]
        else:
            bound = np.maximum.reduceat(rows_bound[ref_row], start)
        if self.dead:
            bound[~self.alive[:slots]] = -np.inf
        best = np.full(slots, -np.inf, dtype=np.float32)
        chosen = _highest(np, bound, first)
        chosen = _union(np, chosen[bound[chosen] > -np.inf], np.asarray(wanted, dtype=np.int64))
        best[chosen] = self._exact(np, query, chosen)
        cut = np.partition(best[chosen], len(chosen) - limit)[len(chosen) - limit]
        rest = np.flatnonzero((bound >= cut) & (best == -np.inf))
        if not len(rest):
            return best
        rows = np.flatnonzero(rows_bound >= cut)
        if 2 * len(rows) > used:
            return None  # the bound keeps most rows: score every row
        rows = rows[screen.closer(np, turned, rows, rows_bound[rows]) >= cut]
        exact = np.full(used, -np.inf, dtype=np.float32)
        exact[rows] = cosines(self.matrix[rows], query)
        places, offsets = self._places(np, rest)
        best[rest] = np.maximum.reduceat(exact[ref_row[places]], offsets)
        return best

    def _places(self, np: Any, slots: Any) -> tuple[Any, Any]:
        """Return the places in ``ref_row`` of the rows of ``slots`` (living ones, at least one row each), slot after slot, and where each slot's begin."""
        starts = self.start[slots]
        after = (
            slots + 1
        )  # the next slot's first row ends a slot's rows, the last one's end at refs
        ends = self.start[np.minimum(after, len(self.key_at) - 1)]
        ends[after >= len(self.key_at)] = self.refs
        lengths = ends - starts
        offsets = np.cumsum(lengths) - lengths
        places = np.arange(int(lengths.sum())) + np.repeat(starts - offsets, lengths)
        return places, offsets

    def _exact(self, np: Any, query: Any, slots: Any) -> Any:
        """Return the best cosine of each of ``slots`` (living ones, at least one row each)."""
        places, offsets = self._places(np, slots)
        sims = cosines(self.matrix[self.ref_row[places]], query)
        return np.maximum.reduceat(sims, offsets)

    def _screen_now(self, np: Any) -> Screen:
        """Return the screen, made (again) once the rows have doubled since it was made."""
        screen = self.screen
        if screen is None or self.used >= 2 * screen.made_at:
            screen = self.screen = Screen(np, self.matrix, self.used)
        else:
            screen.follow(np, self.matrix, self.used)
        return screen

    def prepare(self, *, screen: bool = False) -> None:
        """Make or follow the screen now, where embedding already takes time, rather than in the next query.

        ``screen=True`` screens a table made by :meth:`of_rows` from now on.
        """
        if screen:
            self.screens = True
        if self.screens and self.used >= SCREEN_ROWS and self.matrix.shape[1] >= 4 * SCREEN_LEAST:
            self._screen_now(numpy())


SCREEN_ROWS = 65536
"""Distinct part vectors from which a table is screened before it is scored.

Below it a query gains nothing from the screen that pays for making it:
over 2,000, 3,000 and 5,000 UFO-shaped steps of parts (26,112 to 63,168
distinct vectors), a semantic query scoring every row cost 0.95-1.01
times the screened one with ``WordLlamaEmbedder`` and 0.86-1.11 with
``HashingEmbedder(256)`` (medians of 10 queries, two runs, load 2 to 6),
while making the screen (a sample's Gram matrix, its eigenvectors, every
row turned) took 0.12-0.26 s at load 3 (the eigenvectors alone up to 2.4 s
at load 7) of an embedding of 0.5 to 2 s at 2,000 steps. At 10,000 steps
(123,429 vectors) it saves 1.00-1.21 and 1.22-1.62 (see docs/search.md).
"""

SCREEN_WIDTH = 32
"""The directions of each block of a screen (the first block's coordinates bound every row; the second's, the rows kept)."""

SCREEN_LEAST = 16
"""Vectors shorter than four times this are not screened: the bound would save little."""

SCREEN_MARGIN = 1e-3
"""What a bound adds for rounding: the rotated coordinates and the exact cosine round apart by far less."""

SCREEN_SAMPLE = 32
"""A query screens a table only where every this-many-th row says the bound will pay (:meth:`Screen.pays`)."""

SCREEN_KEEPS = 0.1
"""The share of the sampled rows whose bound reaches the guessed cut past which a query scores every row instead (:meth:`Screen.pays`).

Measured at 100,000 whole vectors and at 10,000 steps of part vectors
(``HashingEmbedder(256)``, 60 queries drawn from the steps' own text, each
forced through the screen and scored whole): the screen paid where it
kept up to about 10% of whole-item rows, and less of part rows, the
fewer the more items it scores first (a limit of 100: about 3%).
"""


class Screen:
    """A cheap upper bound of every row's cosine with a query, made closer for the rows that matter.

    The rows are turned into an orthonormal basis of their main directions
    (eigenvectors of a sample's Gram matrix, largest first), cut into
    blocks of :data:`SCREEN_WIDTH` directions. A row's cosine with a
    query is the sum over the blocks of their products, and each block's
    product is at most the product of the two blocks' lengths
    (Cauchy-Schwarz). So the first block's coordinates and the lengths of
    the others bound the cosine, reading ``32 + 7`` floats of a
    256-float row (:meth:`bounds`); for the rows whose bound reaches the
    cut, the second block's coordinates replace its length
    (:meth:`closer`). The main directions hold most of a row, so the
    bounds are close where the parts lie near a few directions (the steps
    of one agent resemble each other); where they do not, more rows are
    scored, never fewer than needed.
    """

    def __init__(self, np: Any, matrix: Any, used: int) -> None:
        rows = matrix[:used]
        sample = rows[:: max(1, used // 8192)]
        dimension = matrix.shape[1]
        # Any orthonormal basis gives a true bound; the main directions give a close one.
        # In float32: a fifth of the float64 product with its copies (the eigenvectors are
        # taken in float64, orthonormal either way).
        gram = (sample.T @ sample).astype(np.float64)
        self.basis = np.ascontiguousarray(np.linalg.eigh(gram)[1][:, ::-1]).astype(np.float32)
        self.edges = [*range(0, dimension, SCREEN_WIDTH), dimension]
        if self.edges[-1] - self.edges[-2] < SCREEN_WIDTH // 2 and len(self.edges) > 3:
            del self.edges[-2]  # a short last block joins the one before
        blocks = len(self.edges) - 1
        width = self.edges[1]
        # head: the first block's coordinates, then the length of every other block.
        self.head = np.zeros((len(matrix), width + blocks - 1), dtype=np.float32)
        self.second = np.zeros((len(matrix), self.edges[2] - width), dtype=np.float32)
        # The head of every SCREEN_SAMPLE-th row, held together: read for each query (see pays).
        self.sampled = np.zeros((-(-len(matrix) // SCREEN_SAMPLE), self.head.shape[1]), np.float32)
        self.made_at = used
        self.done = 0
        self.follow(np, matrix, used)

    def follow(self, np: Any, matrix: Any, used: int) -> None:
        """Turn the rows filed since the last call (a row reused is turned again by ``refresh``)."""
        if len(self.head) < len(matrix):
            head = np.zeros((len(matrix), self.head.shape[1]), dtype=np.float32)
            head[: len(self.head)] = self.head
            second = np.zeros((len(matrix), self.second.shape[1]), dtype=np.float32)
            second[: len(self.second)] = self.second
            self.head, self.second = head, second
            sampled = np.zeros((-(-len(matrix) // SCREEN_SAMPLE), head.shape[1]), np.float32)
            sampled[: len(self.sampled)] = self.sampled
            self.sampled = sampled
        step = 16384  # a block of rows at a time: the turned rows are not all held at once
        for begin in range(self.done, used, step):
            self.refresh(np, matrix, slice(begin, min(used, begin + step)))
        self.done = max(self.done, used)

    def refresh(self, np: Any, matrix: Any, rows: Any) -> None:
        """Turn ``rows`` of ``matrix`` again (their vectors changed): row numbers, or a slice of them (read in place)."""
        if not isinstance(rows, slice):
            rows = np.asarray(rows, dtype=np.int64)
        turned = matrix[rows] @ self.basis
        edges = self.edges
        width = edges[1]
        self.head[rows, :width] = turned[:, :width]
        self.second[rows] = turned[:, width : edges[2]]
        blocks = len(edges) - 2  # the blocks after the first
        if edges[-1] - width == blocks * width:  # blocks of one width: their lengths at once
            part = turned[:, width:].reshape(len(turned), blocks, width)
            self.head[rows, width:] = np.sqrt(np.einsum("ijk,ijk->ij", part, part))
        else:
            for block in range(1, len(edges) - 1):
                part = turned[:, edges[block] : edges[block + 1]]
                self.head[rows, width + block - 1] = np.sqrt(np.einsum("ij,ij->i", part, part))
        if isinstance(rows, slice):
            rows = np.arange(rows.start, rows.stop)
        picked = rows[rows % SCREEN_SAMPLE == 0]
        self.sampled[picked // SCREEN_SAMPLE] = self.head[picked]

    def turn(self, np: Any, query: Any) -> tuple[Any, Any, Any]:
        """Return what bounds the rows' cosines with the unit ``query``: the first block's coordinates and the other blocks' lengths, the turned query, and those lengths."""
        turned = query @ self.basis
        edges = self.edges
        lengths = np.sqrt(np.add.reduceat(turned * turned, edges[1:-1]))  # blocks 1 to the last
        head_query = np.concatenate([turned[: edges[1]], lengths]).astype(np.float32)
        return head_query, turned, lengths

    def bounds(self, np: Any, query: Any, used: int) -> tuple[Any, Any]:
        """Return an upper bound of each of the first ``used`` rows' cosine with the unit ``query``, and the turned query (for :meth:`closer`)."""
        turned = self.turn(np, query)
        return self.bounds_turned(turned, used), turned

    def bounds_turned(self, turned: Any, used: int) -> Any:
        """Return an upper bound of each of the first ``used`` rows' cosine with a query turned by :meth:`turn`."""
        return cosines(self.head[:used], turned[0]) + SCREEN_MARGIN

    def pays(
        self, np: Any, matrix: Any, used: int, query: Any, turned: Any, rank: float, keeps: float
    ) -> bool:
        """Return whether bounding the first ``used`` rows of ``matrix`` can pay for a query whose cut is about its ``rank``-th best row, guessed from every :data:`SCREEN_SAMPLE`-th row.

        The sampled rows are bounded, and those with the highest bounds
        scored exactly: the cosine among them at the rank's place in
        proportion (at least the best of them) guesses the cut the screen
        will find, and the share of the sample whose bound reaches it
        guesses the share of rows the screen keeps. Where that is more
        than ``keeps``, bounding every row and then scoring many of them
        costs more than scoring every row. A bound that
        says little about the cosine ranks the sampled rows at random,
        so their best scored ones guess a low cut, and every row is
        scored. Only the cost depends on the guess: either way every
        item that can be among the best is scored exactly.

        Args:
            rank: The query's ``limit``: items of several rows put more
                rows above the cut, but a query close to a few parts far
                above the rest has a cut far above the sample's rows, and
                the lower rank guessed better on both (measured with
                ``HashingEmbedder`` and ``WordLlamaEmbedder``).
            keeps: The largest share of rows the screen may keep and
                still pay (:data:`SCREEN_KEEPS`, less the cost of the
                items the screen scores first).
        """
        count = -(-used // SCREEN_SAMPLE)
        bound = cosines(self.sampled[:count], turned[0]) + SCREEN_MARGIN
        place = min(count, max(1, math.ceil(rank * count / used)))
        scored = min(count, max(32, 4 * place))
        top = np.argpartition(-bound, scored - 1)[:scored] if scored < count else np.arange(count)
        exact = cosines(matrix[top * SCREEN_SAMPLE], query)
        guess = np.partition(exact, scored - place)[scored - place]
        return int(np.count_nonzero(bound >= guess)) <= keeps * count

    def closer(self, np: Any, turned_query: Any, rows: Any, bounds: Any) -> Any:
        """Return a closer bound of ``rows`` (whose bounds were ``bounds``): the second block's product for the product of its lengths."""
        _, turned, lengths = turned_query
        width = self.edges[1]
        loose = self.head[rows, width] * lengths[0]
        return bounds - loose + cosines(self.second[rows], turned[width : self.edges[2]])


def distinct_rows(np: Any, matrix: Any) -> tuple[Any, Any]:
    """Return the first row of each distinct row of ``matrix`` (ascending) and, for every row, the place of its own among them.

    Rows are told apart by a 64-bit digest (their products with two fixed
    vectors, each the same float for equal rows) and then compared bit for
    bit, so two rows are held as one only when they are equal.
    """
    count, width = matrix.shape
    if not count:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    fixed = np.random.default_rng(20261202).standard_normal((2, width)).astype(np.float32)
    high, low = (cosines(matrix, vector).view(np.uint32).astype(np.uint64) for vector in fixed)
    digest = (high << np.uint64(32)) | low
    order = np.argsort(digest, kind="stable")
    ordered = digest[order]
    runs = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])  # each digest's first place
    first_of = np.empty(count, dtype=np.int64)
    first_of[order] = order[np.repeat(runs, np.diff(np.r_[runs, count]))]
    # Compared as 64-bit words where a row holds whole ones: half the elements of 32-bit ones.
    bits = matrix.view(np.uint64 if width % 2 == 0 else np.uint32)
    itself = np.arange(count)
    again = np.flatnonzero(first_of != itself)  # the rows said to repeat one before
    differ = []
    for begin in range(0, len(again), 16384):  # compared a block at a time: no copy of them all
        rows = again[begin : begin + 16384]
        differ.append(rows[(bits[rows] != bits[first_of[rows]]).any(axis=1)])
    apart = np.concatenate(differ) if differ else again
    if len(apart):  # a digest shared by rows that differ (0.0 and -0.0): those rows by their bytes
        whole = np.dtype((np.void, bits.shape[1] * bits.itemsize))
        _, first, inverse = np.unique(
            np.ascontiguousarray(bits[apart]).view(whole).reshape(-1),
            return_index=True,
            return_inverse=True,
        )
        first_of[apart] = apart[first[inverse.reshape(-1)]]
    # Each row's first equal is at or before it, so a distinct row is its own first; a row's
    # place is the count of those before its first (no sort or search of first_of).
    held = first_of == itself
    return np.flatnonzero(held), (np.cumsum(held) - 1)[first_of]


class TextRows:
    """The texts embedded into a table and the row that holds each one's vector, both ways.

    A text embedded before shares its row (:meth:`file`); a row freed by a
    drop forgets its text (:meth:`forget`), which is then embedded again.
    """

    __slots__ = ("row_of", "text_at")

    def __init__(self) -> None:
        self.row_of: dict[str, int] = {}  # a text embedded here -> the row of its vector
        self.text_at: dict[int, str] = {}  # a row -> the text embedded as it

    def __contains__(self, text: object) -> bool:
        return text in self.row_of

    def copy(self) -> TextRows:
        """Return a copy that files apart from this one."""
        copied = TextRows()
        copied.row_of, copied.text_at = dict(self.row_of), dict(self.text_at)
        return copied

    def rows(self, texts: Iterable[str]) -> list[int]:
        """Return the row of each of ``texts`` (each one held)."""
        return list(map(self.row_of.__getitem__, texts))

    def forget(self, row: int) -> None:
        """Forget the text whose vector ``row`` held (the row is freed), if it held one."""
        text = self.text_at.pop(row, None)
        if text is not None:
            del self.row_of[text]

    def file(
        self,
        np: Any,
        texts: Sequence[Sequence[str]],
        unit: Any,
        vector_of: Mapping[str, int],
        place: Callable[[Any], list[int]],
    ) -> list[list[int]]:
        """Return the distinct rows of each item's part ``texts``, in order, the texts no row holds filed first.

        Those take the rows ``place`` gives their vectors (a matrix, one row
        a text: ``unit[vector_of[text]]``), in the order they first come.
        """
        row_of = self.row_of
        flat = list(itertools.chain.from_iterable(texts))
        new = [text for text in dict.fromkeys(flat) if text not in row_of]
        if new:
            picked = np.fromiter(map(vector_of.__getitem__, new), np.int64, len(new))
            if len(new) == len(unit) and (picked == np.arange(len(unit))).all():
                picked = slice(None)  # the embedded texts, in order (the usual batch): no copy
            rows = place(unit[picked])
            row_of.update(zip(new, rows, strict=True))
            self.text_at.update(zip(rows, new, strict=True))
        flat_rows = self.rows(flat)
        filed: list[list[int]] = []
        at = 0
        for item_texts in texts:
            filed.append(list(dict.fromkeys(flat_rows[at : at + len(item_texts)])))
            at += len(item_texts)
        return filed


ScreensDue = tuple[int, "list[tuple[Vectors, Any, int, Screen | None]]"]
"""The screens a build ahead makes off the index's lock: the tables' version and, per table, its matrix, rows in use and screen (``ItemVectors.screens_due``)."""


def made_screens(due: ScreensDue) -> list[Screen]:
    """Return the screen of each table of ``due`` from the rows read (off the index's lock: the slow part of ``ItemVectors.screen``)."""
    if not due[1]:
        return []  # nothing to screen (no vectors): numpy, an optional extra, is not needed
    np = numpy()
    return [Screen(np, matrix, used) for _, matrix, used, _ in due[1]]


def bulk_table(empty: Vectors, keys: Sequence[int], blocks: Sequence[Any]) -> Vectors:
    """Return the table ``empty.put(keys, blocks)`` then ``prepare()`` would make, from one matrix: the same scores, float for float.

    ``keys`` ascending, each with its part vectors (a matrix, one row a
    part; a 1-D vector is one part; none: the item holds no vector). Equal
    rows are held once (:func:`distinct_rows`, one numpy pass) where
    ``put`` finds them by a digest of each vector in Python: 10 times
    slower for a session of 100,000 items. The table is not screened
    (every row is scored, exactly) until :meth:`ItemVectors.screen` is
    called: a session just opened is queried at once, and the screen turns
    every row.
    """
    np = numpy()
    width = empty.matrix.shape[1]
    if all(getattr(block, "ndim", 0) == 1 for block in blocks):  # one vector an item
        matrix = np.stack(blocks).astype(np.float32, copy=False) if blocks else None
        row_keys: Any = np.asarray(keys, dtype=np.int64)
    else:
        shaped = [np.asarray(block, dtype=np.float32).reshape(-1, width) for block in blocks]
        sizes = np.fromiter((len(block) for block in shaped), np.int64, len(shaped))
        matrix = np.concatenate(shaped) if len(shaped) else None
        row_keys = np.repeat(np.asarray(keys, dtype=np.int64), sizes)
    if matrix is None or not len(matrix):
        return empty
    if matrix.shape[1] != width:
        msg = f"Vectors of {matrix.shape[1]} dimensions cannot join a table of {width}; embed with one model."
        raise EmbedderMismatchError(msg)
    return Vectors.of_rows(empty.model, empty.parts, row_keys, matrix, distinct=True)


def _highest(np: Any, values: Any, count: int) -> Any:
    """Return the places of the ``count`` highest ``values`` (with ties, or just ``count`` where ties are many), ascending."""
    places = top_rows(values, count)
    if len(places) > 4 * count:  # many equal to the last: not all of them
        places = np.sort(np.argpartition(-values, count)[:count])
    return places


def _grown(np: Any, array: Any, fill: object) -> Any:
    """Return ``array`` twice as long, the new places set to ``fill``."""
    grown = np.full(2 * len(array), fill, dtype=array.dtype)
    grown[: len(array)] = array
    return grown


class ItemVectors:
    """The vector tables of an index, per set of keys embedded, and the items that wait for a vector.

    Args:
        parts: How items are cut into the texts that get embedded.
    """

    __slots__ = ("parts", "tables", "version", "waiting")

    def __init__(self, parts: EmbedParts) -> None:
        self.parts = parts
        self.tables: dict[tuple[str, ...] | None, Vectors] = {}
        self.waiting: dict[tuple[str, ...] | None, dict[int, None]] = {}
        self.version = 0  # bumped by each change of a table's rows (see screens_due)

    def reset(self) -> None:
        """Forget every vector."""
        self.tables = {}
        self.waiting = {}
        self.version += 1

    def added(self, added: Sequence[tuple[int, MemoryItem]]) -> None:
        """Mark added items as waiting for a vector in every table."""
        for waiting in self.waiting.values():
            waiting.update((key, None) for key, _ in added)

    def changed(self, key: int) -> None:
        """Drop the vectors of a changed item; it waits for new ones."""
        self.version += 1
        for keys_of, vectors in self.tables.items():
            vectors.drop(key)
            self.waiting[keys_of][key] = None

    def dropped(self, key: int) -> None:
        """Drop the vectors of an item that is gone."""
        self.version += 1
        for keys_of, vectors in self.tables.items():
            vectors.drop(key)
            self.waiting[keys_of].pop(key, None)

    def screen(self) -> None:
        """Screen every large table, as a table filled by embedding is (one taken in bulk is not: see :func:`bulk_table`)."""
        for vectors in self.tables.values():
            vectors.prepare(screen=True)

    def screens_due(self) -> ScreensDue:
        """Return what :meth:`screen` would make anew now (each table, its matrix, its rows in use, its screen), for :func:`made_screens` to make off the index's lock.

        Read under the index's lock; the rest of :meth:`screen` (following
        a screen made already) is cheap and is done by :meth:`screen` itself.
        """
        due = [
            (table, table.matrix, table.used, table.screen)
            for table in self.tables.values()
            if table.used >= SCREEN_ROWS
            and table.matrix.shape[1] >= 4 * SCREEN_LEAST
            and (table.screen is None or table.used >= 2 * table.screen.made_at)
        ]
        return self.version, due

    def take_screens(self, due: ScreensDue, made: Sequence[Screen]) -> bool:
        """Give each table of ``due`` its screen ``made`` (then :meth:`screen` the rest), unless a table's rows changed since ``due`` was read; return whether they were taken.

        A screen made from the rows read is the one :meth:`screen` would
        make now, so the scores are those of :meth:`screen`, float for float.
        """
        version, tables = due
        if version != self.version or any(
            table.matrix is not matrix or table.used != used or table.screen is not screen
            for table, matrix, used, screen in tables
        ):
            return False
        for (table, _, _, _), screen in zip(tables, made, strict=True):
            table.screen = screen
        self.screen()
        return True

    def model(self) -> str | None:
        """Return the name of the model the vectors came from, or ``None``."""
        for vectors in self.tables.values():
            return vectors.model
        return None

    def missing(self, keys: tuple[str, ...] | None, items: Mapping[int, MemoryItem]) -> list[int]:
        """Return the keys of the ``items`` that wait for a vector over ``keys`` (all before the first embedding)."""
        waiting = self.waiting.get(keys)
        if waiting is None:
            return list(items)
        return [key for key in waiting if key in items]

    def adopt(
        self,
        embedder: Embedder,
        keys: tuple[str, ...] | None,
        vectors: Mapping[int, Any],
        items: Mapping[int, MemoryItem],
        *,
        screen: bool = True,
    ) -> int:
        """Take vectors made elsewhere for items that wait for one; return how many were taken.

        Into an empty table they are taken in bulk (:func:`bulk_table`), and
        screened only with ``screen`` (else by :meth:`screen`, later).

        Raises:
            EmbedderMismatchError: if the table holds vectors of another dimension.
        """
        table = self.table(embedder, keys, items)
        waiting = self.waiting[keys]
        chosen = [key for key in vectors if key in waiting and key in items]
        if chosen:
            self.version += 1
        # Each item's rows are kept (a session's vectors read from a store): not walked young.
        with collector_paused(len(chosen)):
            if chosen and not table.slot_of and not table.used:
                # An empty table (a session just opened): made from one matrix, its equal rows
                # found with numpy, not a digest a vector (see Vectors.of_rows).
                chosen.sort()
                table = self.tables[keys] = bulk_table(
                    table, chosen, [vectors[key] for key in chosen]
                )
                for key in chosen:
                    del waiting[key]
                if screen:
                    table.prepare(screen=True)
            elif chosen:
                table.put(chosen, [vectors[key] for key in chosen])
                for key in chosen:
                    del waiting[key]
                table.prepare()
        return len(chosen)

    def table(
        self, embedder: Embedder, keys: tuple[str, ...] | None, items: Mapping[int, MemoryItem]
    ) -> Vectors:
        """Return the vectors over ``keys``, created for ``embedder`` on first use; refuse another dimension.

        Raises:
            EmbedderMismatchError: if the table holds vectors of another dimension.
        """
        vectors = self.tables.get(keys)
        if vectors is None:
            vectors = self.tables[keys] = Vectors(embedder.name, embedder.dimension, self.parts)
            self.waiting[keys] = dict.fromkeys(items)
        if vectors.matrix.shape[1] != embedder.dimension:
            msg = (
                f"The memory's vectors from model {vectors.model!r} have {vectors.matrix.shape[1]} "
                f"dimensions; embedder {embedder.name!r} gives {embedder.dimension}. Embed again "
                "with memory.index_embeddings(embedder) under a name of its own."
            )
            raise EmbedderMismatchError(msg)
        return vectors

    def embed(
        self,
        embedder: Embedder,
        keys: tuple[str, ...] | None,
        items: Mapping[int, MemoryItem],
        *,
        batch_size: int,
        progress: Progress | None,
    ) -> Vectors:
        """Embed the ``items`` that wait for a vector over ``keys``, in batches; return the table.

        Raises:
            EmbedderMismatchError: if the table holds vectors of another dimension.
            EmbeddingError: if the embedder returns the wrong shape or NaN.
        """
        vectors = self.table(embedder, keys, items)
        waiting = self.waiting[keys]
        todo: list[tuple[int, list[str]]] = []
        for key in list(waiting):
            item = items.get(key)
            if item is None:
                del waiting[key]
                continue
            texts = self.parts.texts(item.to_dict(), keys)
            if texts:
                todo.append((key, texts))
            else:
                del waiting[key]  # no text, no vector: never a semantic hit
        if todo:
            self.version += 1
        done = 0
        embed = functools.partial(checked_vectors, embedder)
        for start in range(0, len(todo), batch_size):
            chunk = todo[start : start + batch_size]
            chunk_keys = [key for key, _ in chunk]
            vectors.put_texts(chunk_keys, [texts for _, texts in chunk], embed)
            for key in chunk_keys:
                del waiting[key]
            done += len(chunk)
            if progress is not None:
                progress(done, len(todo))
        if todo:
            vectors.prepare()
        return vectors


def _union(np: Any, one: Any, other: Any) -> Any:
    """Return the sorted distinct values of two integer arrays (``np.union1d``'s answer).

    Not ``np.union1d``: it calls ``np.unique``, whose first call in a
    process imports ``numpy.ma`` (13-25 ms): the first semantic query on
    a screened table took 13.6 ms against 3.9 ms warm at 100,000 steps.
    """
    values = np.concatenate((one, other))
    values.sort()
    if len(values) < 2:
        return values
    keep = np.empty(len(values), dtype=bool)
    keep[0] = True
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]
