"""The vectors of a search index's items: one table per set of keys embedded.

:class:`Vectors` is one model's unit vectors of the items' parts;
:class:`ItemVectors` keeps a table per set of keys and, for each, the items
that wait for a vector, following the index's adds, changes and drops.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from agents.memory._item import MemoryItem
from agents.memory._vectors import Embedder, EmbedParts, checked_vectors, numpy, top_rows
from agents.memory.exceptions import EmbedderMismatchError

__all__ = ["ItemVectors", "Vectors"]

Progress = Callable[[int, int], object]


class Vectors:
    """One model's unit vectors of the items' parts, rows and slots reused as items come and go.

    An item holds a slot (``slot_of``) and one or more rows (its parts,
    see ``EmbedParts``); ``owner`` gives each row's slot (``-1`` for a free
    row). An item scores the best cosine among its rows.
    """

    def __init__(self, model: str, dimension: int, parts: EmbedParts) -> None:
        np = numpy()
        self.model = model
        self.parts = parts
        self.matrix = np.zeros((64, dimension), dtype=np.float32)
        self.owner = np.full(64, -1, dtype=np.int64)
        self.used = 0  # rows ever handed out: the rows past it are all free
        self.free: list[int] = []
        self.slot_of: dict[int, int] = {}
        self.key_at: list[int] = []  # the key of each slot, -1 for a free slot
        self.free_slots: list[int] = []
        self.rows_of: dict[int, list[int]] = {}

    def put(self, keys: Sequence[int], vectors: Sequence[Any]) -> None:
        """File each key's part vectors (a matrix, one row a part; a 1-D vector is one part)."""
        np = numpy()
        for key, block in zip(keys, vectors, strict=True):
            self.drop(key)  # a key embedded again keeps only its new parts
            matrix = np.asarray(block, dtype=np.float32)
            if matrix.ndim == 1:
                matrix = matrix[None, :]
            if not len(matrix):
                continue
            if self.free_slots:
                slot = self.free_slots.pop()
                self.key_at[slot] = key
            else:
                slot = len(self.key_at)
                self.key_at.append(key)
            rows: list[int] = []
            for vector in matrix:
                if self.free:
                    row = self.free.pop()
                else:
                    row = self.used
                    self.used += 1
                if row >= len(self.matrix):
                    self._grow()
                self.matrix[row] = vector
                self.owner[row] = slot
                rows.append(row)
            self.slot_of[key] = slot
            self.rows_of[key] = rows

    def _grow(self) -> None:
        np = numpy()
        grown = np.zeros((2 * len(self.matrix), self.matrix.shape[1]), dtype=np.float32)
        grown[: len(self.matrix)] = self.matrix
        self.matrix = grown
        owner = np.full(len(grown), -1, dtype=np.int64)
        owner[: len(self.owner)] = self.owner
        self.owner = owner

    def drop(self, key: int) -> None:
        rows = self.rows_of.pop(key, None)
        if rows is not None:
            self.owner[rows] = -1
            self.free.extend(reversed(rows))
            slot = self.slot_of.pop(key)
            self.key_at[slot] = -1
            self.free_slots.append(slot)

    def scores(
        self, query: Any, limit: int | None = None, among: Iterable[int] = ()
    ) -> dict[int, float]:
        """Return the best cosine of a part with the unit ``query`` of the best ``limit`` items and of ``among``, by key.

        Items tied with the ``limit``-th best are all returned, so that ties
        can keep session order; ``limit=None`` returns every item.
        """
        np = numpy()
        if not self.rows_of:
            return {}
        sims = self.matrix[: self.used] @ query
        owner = self.owner[: self.used]
        held = owner >= 0
        best = np.full(len(self.key_at), -np.inf, dtype=sims.dtype)  # free slots stay -inf
        np.maximum.at(best, owner[held], sims[held])
        key_at = self.key_at
        out = {key_at[slot]: float(best[slot]) for slot in top_rows(best, limit).tolist()}
        slot_of = self.slot_of
        for key in among:
            slot = slot_of.get(key)
            if slot is not None:
                out[key] = float(best[slot])
        return out


class ItemVectors:
    """The vector tables of an index, per set of keys embedded, and the items that wait for a vector.

    Args:
        parts: How items are cut into the texts that get embedded.
    """

    __slots__ = ("parts", "tables", "waiting")

    def __init__(self, parts: EmbedParts) -> None:
        self.parts = parts
        self.tables: dict[tuple[str, ...] | None, Vectors] = {}
        self.waiting: dict[tuple[str, ...] | None, dict[int, None]] = {}

    def reset(self) -> None:
        """Forget every vector."""
        self.tables = {}
        self.waiting = {}

    def added(self, added: Sequence[tuple[int, MemoryItem]]) -> None:
        """Mark added items as waiting for a vector in every table."""
        for waiting in self.waiting.values():
            waiting.update((key, None) for key, _ in added)

    def changed(self, key: int) -> None:
        """Drop the vectors of a changed item; it waits for new ones."""
        for keys_of, vectors in self.tables.items():
            vectors.drop(key)
            self.waiting[keys_of][key] = None

    def dropped(self, key: int) -> None:
        """Drop the vectors of an item that is gone."""
        for keys_of, vectors in self.tables.items():
            vectors.drop(key)
            self.waiting[keys_of].pop(key, None)

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
    ) -> int:
        """Take vectors made elsewhere for items that wait for one; return how many were taken.

        Raises:
            EmbedderMismatchError: if the table holds vectors of another dimension.
        """
        table = self.table(embedder, keys, items)
        waiting = self.waiting[keys]
        chosen = [key for key in vectors if key in waiting and key in items]
        if chosen:
            table.put(chosen, [vectors[key] for key in chosen])
            for key in chosen:
                del waiting[key]
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
        done = 0
        for start in range(0, len(todo), batch_size):
            chunk = todo[start : start + batch_size]
            unit = checked_vectors(embedder, [text for _, texts in chunk for text in texts])
            blocks = []
            row = 0
            for _, texts in chunk:
                blocks.append(unit[row : row + len(texts)])
                row += len(texts)
            chunk_keys = [key for key, _ in chunk]
            vectors.put(chunk_keys, blocks)
            for key in chunk_keys:
                del waiting[key]
            done += len(chunk)
            if progress is not None:
                progress(done, len(todo))
        return vectors
