"""What ``Memory`` offers from the rooms above it, reached without importing them.

``Memory.search``, ``Memory.recall`` and ``Memory.index_embeddings`` are the
search room's functions. The memory room sits below the search room and may
not import it, not even inside a function: the package ``agents.memory``,
which stands above both, binds a loader here when it is imported (always
before ``agents.memory.memory`` is), and the search room is imported on the
first call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol, cast

from agents.memory.exceptions import MissingDependencyError

if TYPE_CHECKING:
    from agents.memory._item import MemoryItem
    from agents.memory.memory import Memory
    from agents.memory.prompt import Window
    from agents.memory.search import Embedder, Hit, SearchMode, Where

__all__ = ["SearchFront", "SearchRoom", "bind_search_room", "search_room"]


class SearchRoom(Protocol):
    """The functions of ``agents.memory.search`` that ``Memory`` calls."""

    def search(
        self,
        memory: Memory,
        query: str,
        k: int = ...,
        *,
        keys: Iterable[str] | None = ...,
        mode: SearchMode = ...,
        where: Where | None = ...,
        embedder: Embedder | None = ...,
    ) -> list[Hit]:
        """Return the ``k`` items of ``memory`` that best match ``query``."""

    def recall(
        self,
        memory: Memory,
        query: str,
        k: int = ...,
        *,
        recent: Window | None = ...,
        keys: Iterable[str] | None = ...,
        mode: SearchMode = ...,
        where: Where | None = ...,
        embedder: Embedder | None = ...,
    ) -> list[MemoryItem]:
        """Return the top hits for ``query`` and the ``recent`` window's items, in session order."""

    def index_embeddings(
        self,
        memory: Memory,
        embedder: Embedder | None = ...,
        *,
        keys: Iterable[str] | None = ...,
        batch_size: int = ...,
        progress: bool | Callable[[int, int], object] = ...,
    ) -> int:
        """Embed every item of ``memory`` without a vector; return how many hold one."""


_loader: Callable[[], SearchRoom] | None = None


def bind_search_room(loader: Callable[[], SearchRoom]) -> None:
    """Make ``loader`` the way ``Memory`` reaches the search room (it is called on each search)."""
    global _loader  # the one binding, made once at package import
    _loader = loader


def search_room() -> SearchRoom:
    """Return the search room.

    Raises:
        MissingDependencyError: if no loader was bound (the ``agents.memory`` package was not imported).
    """
    if _loader is None:
        msg = (
            "Memory.search needs the search room, which the package agents.memory binds when it "
            "is imported; import agents.memory (or agents.memory.memory) the normal way, not by file path."
        )
        raise MissingDependencyError(msg)
    return _loader()


class SearchFront:
    """The search methods of ``Memory``: each one calls the search room's function of the same name."""

    def search(
        self,
        query: str,
        k: int = 5,
        *,
        keys: Iterable[str] | None = None,
        mode: SearchMode = "keyword",
        where: Where | None = None,
        embedder: Embedder | None = None,
    ) -> list[Hit]:
        """Return the ``k`` items that best match ``query``, best first, as hits.

        Keyword mode ranks by BM25; the index is built on the first search
        and then follows every change. See :func:`agents.memory.search.search`.

        Args:
            query: The text to look for.
            k: How many hits at most.
            keys: Search only these fields (default: every string field, nested strings included).
            mode: ``"keyword"``, ``"semantic"`` or ``"hybrid"``.
            where: ``{field: value}`` (a ``range`` for step ranges) or a predicate, applied before ranking.
            embedder: The model for semantic and hybrid modes.

        Raises:
            InvalidQueryError: for an empty query, ``k`` outside 1 to 2**63 - 1, an unknown mode or a bad filter.
            EmbeddingError: if the embedder returns the wrong shape or NaN.
            EmbedderMismatchError: if the memory was embedded with another model.
        """
        return search_room().search(
            cast("Memory", self), query, k, keys=keys, mode=mode, where=where, embedder=embedder
        )

    def recall(
        self,
        query: str,
        k: int = 3,
        *,
        recent: Window | None = None,
        keys: Iterable[str] | None = None,
        mode: SearchMode = "keyword",
        where: Where | None = None,
        embedder: Embedder | None = None,
    ) -> list[MemoryItem]:
        """Return the top ``k`` hits for ``query`` and the ``recent`` window's items, once each, in session order.

        See :func:`agents.memory.search.recall`.

        Raises:
            InvalidQueryError: as :meth:`search`.
            BudgetExceededError: if the window's pinned items alone break its bounds.
        """
        return search_room().recall(
            cast("Memory", self),
            query,
            k,
            recent=recent,
            keys=keys,
            mode=mode,
            where=where,
            embedder=embedder,
        )

    def index_embeddings(
        self,
        embedder: Embedder | None = None,
        *,
        keys: Iterable[str] | None = None,
        batch_size: int = 256,
        progress: bool | Callable[[int, int], object] = False,
    ) -> int:
        """Embed every item without a vector, in batches; return how many items hold one.

        See :func:`agents.memory.search.index_embeddings`.

        Raises:
            EmbeddingError: if the embedder returns the wrong shape or NaN.
        """
        return search_room().index_embeddings(
            cast("Memory", self), embedder, keys=keys, batch_size=batch_size, progress=progress
        )
