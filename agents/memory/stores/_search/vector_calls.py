"""The cosine call of a store: a session's best cosines with a query vector the caller embedded.

:class:`VectorCalls` is the part of :class:`~agents.memory.stores.Store`
that hands a caller the semantic side of a query whose other side it ranks
itself (a ``StoredMemory``'s hybrid query over some fields: the keyword
side from the memory's own index, which holds each field's statistics).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agents.memory._text import checked_keys
from agents.memory._vectors import Embedder, EmbedParts, numpy
from agents.memory.exceptions import StoreArgumentError
from agents.memory.stores._core.engine import Engine
from agents.memory.stores._search.arguments import checked_parts
from agents.memory.stores._search.coded_saves import Written
from agents.memory.stores._search.vectors import VectorSearch, check_embedder

__all__ = ["VectorCalls"]


class VectorCalls:
    """A store's cosine call (a base of :class:`~agents.memory.stores.Store`, over the vectors of its :class:`SearchCalls`)."""

    _search_engine: Engine
    _vectors: VectorSearch

    def cosines(
        self,
        session_id: str,
        vector: Any,
        limit: int,
        *,
        embedder: Embedder,
        keys: Iterable[str] | None = None,
        among: Iterable[int] = (),
        parts: EmbedParts | None = None,
    ) -> dict[int, float]:
        """Return a session's best cosines with the unit query ``vector``: the best ``limit`` items (with ties) and those of ``among``, by seq.

        The semantic side of ``search(mode="hybrid", keys=...)``, for a
        caller that ranks the keyword side itself: the floats that
        ``Memory.search`` computes for the same items with the same
        embedder (an item's best part over ``keys``, cut as ``parts``).
        The items the store holds no vector for are embedded and stored
        first (unless the handle is read-only), as :meth:`search` does;
        a session over the handle's budget is scored from its coded table.

        Args:
            session_id: The session to score.
            vector: The query's unit vector (``embedder``'s, normalized:
                one row of ``checked_vectors``), of ``embedder.dimension`` floats.
            limit: How many of the best at most, with every item tied with the last.
            embedder: The model of the session's vectors (it embeds the
                items that hold none yet).
            keys: The fields the vectors are embedded over.
            among: Seqs whose cosines are wanted whatever their rank.
            parts: How the vectors are cut (see :meth:`search`).

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreArgumentError: if ``vector`` is not ``embedder.dimension``
                finite numbers, ``limit`` not an int >= 1, or
                ``embedder`` not an embedder.
            EmbedderMismatchError: if the session holds vectors of another model.
            StoreError: if the store cannot be read or written.
        """
        sid = self._search_engine.check(session_id)
        check_embedder(embedder)
        if type(limit) is not int or limit < 1:
            msg = f"cosines() takes limit as an int >= 1, got {limit!r}."
            raise StoreArgumentError(msg)
        query = _query_vector(vector, embedder, "cosines")
        wanted = list(among)
        return self._vectors.cosines(
            sid, embedder, checked_keys(keys), query, limit, wanted, checked_parts(parts)
        )

    def cosine_ceilings(
        self,
        session_id: str,
        vector: Any,
        among: Iterable[int],
        *,
        embedder: Embedder,
        keys: Iterable[str] | None = None,
        parts: EmbedParts | None = None,
    ) -> dict[int, float] | None:
        """Return an upper bound of the cosine :meth:`cosines` gives each of ``among`` with the unit query ``vector``, by seq, read from nothing; ``None`` where the store cannot bound them.

        A session over the handle's budget is kept as a coded table whose
        codes bound each item's cosine without reading its vector: a
        caller blending a filtered hybrid query reads the exact cosines
        (:meth:`cosines`) of only the items whose bound can still rank.
        An item left out holds no vector. ``None`` where the session is
        not kept coded (under the budget, or not kept yet: ask
        :meth:`cosines` first).

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreArgumentError: if ``vector`` is not ``embedder.dimension``
                finite numbers, or ``embedder`` not an embedder.
            EmbedderMismatchError: if the session holds vectors of another model.
            StoreError: if the store cannot be read.
        """
        sid = self._search_engine.check(session_id)
        check_embedder(embedder)
        query = _query_vector(vector, embedder, "cosine_ceilings")
        at = Written(sid, checked_keys(keys), checked_parts(parts), embedder)
        return self._vectors.ceilings(at, query, list(among))


def _query_vector(vector: Any, embedder: Embedder, call: str) -> Any:
    """Return ``vector`` as ``embedder.dimension`` finite float32, or raise StoreArgumentError naming ``call``."""
    np = numpy()
    try:
        query = np.asarray(vector, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        msg = f"{call}() takes the query's unit vector as {embedder.dimension} numbers, got {type(vector).__name__}: {exc}."
        raise StoreArgumentError(msg) from exc
    if query.shape != (embedder.dimension,) or not np.isfinite(query).all():
        msg = (
            f"{call}() takes the query's unit vector of embedder {embedder.name!r}: "
            f"{embedder.dimension} finite numbers, got shape {query.shape}."
        )
        raise StoreArgumentError(msg)
    return query
