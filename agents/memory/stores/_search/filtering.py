"""A store's side of ``where=``: the best ``k`` of a ranking whose items pass a filter.

A store ranks a session without the filter (the scores, and the statistics
behind them, are those of the whole session, as in ``Memory.search``) and
then walks the ranking best first, decoding the items it has not read yet
and testing them with the one compiled :class:`~agents.memory.search.Filter`
that ``Memory.search`` uses, until ``k`` pass. When the ranking it was given
runs out before ``k`` pass, it asks for a longer one (four times as long),
until the ranking holds every candidate. So the hits are always those of
``Memory.search`` on the same items with the same filter.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Final

from agents.memory._filter import Filter
from agents.memory._item import MemoryItem, OnUnknownClass
from agents.memory.stores._core.encoding import decode_pairs

if TYPE_CHECKING:
    from agents.memory.stores._core.engine import Engine

__all__ = [
    "ALL",
    "FEW",
    "HYBRID_FEW",
    "NARROW_AT",
    "Passing",
    "Screen",
    "Screener",
    "first_passing",
    "narrower",
    "next_slice",
    "reader",
    "widening",
]

ALL: Final = 2**62
"""A ranking length that holds every candidate of any session (for rankings scored in Python)."""

Passing = list[tuple[int, float, MemoryItem]]
"""``(seq, score, item)`` of the items that pass, best first."""

Screen = Callable[[Sequence[int]], set[int] | None]
"""Returns the seqs among some that may pass a filter (``None``: it cannot tell)."""

_CHUNK: Final = 64

NARROW_AT: Final = 1024
"""Ask which rows may pass before asking for a ranking this long: reading the candidates
one by one costs more than one pass of SQL over the session from about here on."""

FEW: Final = 16
"""A filter that at most one row in this many may pass ranks only those rows."""
HYBRID_FEW: Final = 2
"""A filtered hybrid query whose walk falls short at its first depth blends only the rows that may pass where at most one in this many may.

The walk (:func:`~agents.memory.stores._search.hybrid.walked_passing`)
ranks ``4 * k`` deep first; falling short, it went on deeper, each deeper
blend ranking the keyword side and scoring the cosines ``DEEPER`` times
deeper again, to every keyword hit (a filter one step in ten passes:
1.2 s of CPU against 0.05 s unfiltered, SQLite, 10,000 steps, coded
vectors; 30% of 30,000: 2.2 s against 0.11 s). Blending the rows that
pass beside the query's own walk took 0.11 s and 0.62 s.
"""


def first_passing(
    ranked: Sequence[tuple[int, float]],
    k: int,
    keep: Filter,
    found: dict[int, MemoryItem],
    read: Callable[[Sequence[int]], Mapping[int, MemoryItem]],
    allowed: set[int] | None = None,
    screen: Screen | None = None,
) -> Passing:
    """Return the first ``k`` of ``ranked`` (``(seq, score)``, best first) whose items pass ``keep``.

    Args:
        ranked: The ranking, best first.
        k: How many at most.
        keep: The filter.
        found: Items already decoded, by seq; the items read are added to it.
        read: Reads and decodes the items of some seqs (a seq deleted since
            it was ranked is absent from the answer and left out).
        allowed: When given, the only seqs that may pass (the others are
            skipped unread).
        screen: When given, asked which unread seqs of each slice of
            ``ranked`` may pass before they are read (the others are
            skipped unread). The first slice holds ``max(64, 2 * k)``; each
            next one as many as the items still missing need at the pass
            rate seen so far, twice over (see :func:`next_slice`). ``None``
            from it: every seq is read.

    Returns:
        ``(seq, score, item)`` of up to ``k`` items, in the order of ``ranked``.
    """
    if allowed is not None:
        ranked = [hit for hit in ranked if hit[0] in allowed]
    out: Passing = []
    span = max(_CHUNK, 2 * k)
    start = 0
    while screen is not None and start < len(ranked) and len(out) < k:
        piece = ranked[start : start + span]
        may = screen([seq for seq, _ in piece if seq not in found])
        if may is None:
            break
        start += len(piece)
        _walk([hit for hit in piece if hit[0] in found or hit[0] in may], k, keep, found, read, out)
        span = next_slice(k - len(out), start, len(out))
    _walk(ranked[start:], k, keep, found, read, out)
    return out


def next_slice(missing: int, walked: int, passed: int) -> int:
    """Return how many rows of a ranking to screen next: as many as ``missing`` passing items need at the pass rate seen, twice over.

    A filter 1% of the items pass finds none or one in the first 64 rows
    of a ranking; the next slice then reaches about as deep as its ``k``
    passing items lie, so that the walk settles in one or two statements
    (slices growing four times over took three or four, each judging more
    rows than the walk needed). With none passing yet, the rate is taken
    as one in ``walked``.

    Args:
        missing: How many passing items the walk still lacks.
        walked: How many rows of the ranking it has walked.
        passed: How many of them passed.

    Returns:
        At least ``_CHUNK`` rows.
    """
    return max(_CHUNK, 2 * missing * walked // max(passed, 1))


def _walk(
    ranked: Sequence[tuple[int, float]],
    k: int,
    keep: Filter,
    found: dict[int, MemoryItem],
    read: Callable[[Sequence[int]], Mapping[int, MemoryItem]],
    out: Passing,
) -> None:
    """Append to ``out`` the items of ``ranked`` that pass ``keep``, in order, until it holds ``k``."""
    start = 0
    while start < len(ranked) and len(out) < k:
        chunk = ranked[start : start + max(_CHUNK, 2 * (k - len(out)))]
        start += len(chunk)
        missing = [seq for seq, _ in chunk if seq not in found]
        if missing:
            found.update(read(missing))
        for seq, score in chunk:
            item = found.get(seq)
            if item is not None and keep(item):
                out.append((seq, score, item))
                if len(out) == k:
                    break


def widening(
    rank: Callable[[int], Sequence[tuple[int, float]]],
    k: int,
    keep: Filter,
    found: dict[int, MemoryItem],
    read: Callable[[Sequence[int]], Mapping[int, MemoryItem]],
    *,
    first: int | None = None,
    narrow: Callable[[], tuple[set[int], int] | None] | None = None,
    among: Callable[[set[int]], Sequence[tuple[int, float]] | None] | None = None,
    screen: Screener | None = None,
) -> Passing:
    """Return the best ``k`` items that pass ``keep``, asking ``rank(limit)`` for longer rankings until they are found.

    Args:
        rank: Returns the best ``limit`` ``(seq, score)``, best first, ties in
            seq order; a ranking shorter than ``limit`` holds every candidate.
            Each ranking asked for is at least four times as long as the last,
            and as long as the pass rate seen so far says ``k`` passing items
            need, twice over.
        k: How many at most.
        keep: The filter.
        found: Items already decoded, by seq (``rank`` may add to it).
        read: Reads and decodes the items of some seqs.
        first: The length of the first ranking asked for (default ``k``).
        narrow: Returns the seqs that may pass and the session's number of
            items (``None``: it cannot tell), asked once the ranking would
            need :data:`NARROW_AT` items: the others are then skipped unread,
            and the next ranking is as long as ``k`` of them need if they
            lie evenly in it, twice over (unless the ranking in hand holds
            them all).
        among: Ranks only some seqs (``(seq, score)`` of those holding a
            candidate's score, best first; ``None``: it cannot), with the
            scores ``rank`` gives them. When given, ``narrow`` is asked as
            soon as a ranking falls short with at most one in :data:`FEW` of
            its items passing, and if at most one row in :data:`FEW` may
            pass, only those are ranked and tested.
        screen: Asked which unread seqs of each slice of a ranking may
            pass before they are read (see :func:`first_passing`). While
            it answers, ``narrow`` is not asked: a longer ranking screens
            only its new rows, less than judging every row of the session.

    Returns:
        ``(seq, score, item)`` of up to ``k`` items, best first.
    """
    limit = k if first is None else first
    allowed: set[int] | None = None
    asked = False
    while True:
        ranked = rank(limit)
        out = first_passing(ranked, k, keep, found, read, allowed, screen)
        if len(out) == k or len(ranked) < limit or limit >= ALL:
            return out
        if allowed is not None and sum(seq in allowed for seq, _ in ranked) == len(allowed):
            return out  # every item that may pass has been ranked and tested
        # The ranking that k passing items need at the pass rate seen so far, twice over.
        need = 2 * k * len(ranked) // max(len(out), 1) if out else 4 * k * len(ranked)
        # With ``among``, a pass rate of one in FEW or less is rare enough to ask at once.
        rare = among is not None and FEW * len(out) <= len(ranked)
        screening = screen is not None and screen.answering
        if narrow is not None and not asked and not screening and (need >= NARROW_AT or rare):
            asked = True
            narrowed = narrow()
            if narrowed is not None:
                allowed, n_items = narrowed
                if sum(seq in allowed for seq, _ in ranked) == len(allowed):
                    return first_passing(ranked, k, keep, found, read, allowed, screen)
                if among is not None and FEW * len(allowed) <= n_items:
                    few = among(allowed)
                    if few is not None:  # every row that may pass, ranked: no deeper ranking
                        return first_passing(few, k, keep, found, read, allowed, screen)
                need = max(need, 2 * k * n_items // len(allowed))
        limit = min(max(4 * limit, need), ALL)


def reader(
    engine: Engine, sid: str, on_unknown_class: OnUnknownClass
) -> Callable[[Sequence[int]], dict[int, MemoryItem]]:
    """Return a function that reads and decodes the items of some seqs of a session (those that exist)."""
    return lambda seqs: engine.read_items(sid, sorted(seqs), on_unknown_class)


def narrower(engine: Engine, sid: str, keep: Filter) -> Callable[[], tuple[set[int], int] | None]:
    """Return a function asking the backend which rows may pass ``keep`` (``Backend.filter_candidates``), and how many rows there are."""

    def narrow() -> tuple[set[int], int] | None:
        with engine.errors("search", sid):
            allowed = engine.backend.filter_candidates(sid, keep.tree)
            return None if allowed is None else (allowed, engine.backend.count(sid))

    return narrow


class Screener:
    """Asks the backend which of some rows may pass a filter (``Backend.filter_among``), each seq once.

    The answers are kept for the rankings after. Once the backend answers
    ``None`` (it cannot judge the filter), it is not asked again. Given
    ``found``, it asks ``Backend.filter_among_rows`` first: the rows that
    may pass come with their data, decoded into ``found``, so the walk reads
    none of them again (one round trip a slice, not two); where that
    answers ``None``, ``filter_among``.
    """

    def __init__(
        self,
        engine: Engine,
        sid: str,
        keep: Filter,
        found: dict[int, MemoryItem] | None = None,
        on_unknown_class: OnUnknownClass = "error",
    ) -> None:
        self._engine = engine
        self._sid = sid
        self._keep = keep
        self._found = found
        self._on_unknown_class = on_unknown_class
        self._judged: dict[int, bool] = {}
        self._unable = False

    @property
    def answering(self) -> bool:
        """Whether the backend has judged rows (and never answered ``None``)."""
        return bool(self._judged) and not self._unable

    def __call__(self, seqs: Sequence[int]) -> set[int] | None:
        """Return the seqs among ``seqs`` that may pass (``None``: the backend cannot tell)."""
        judged = self._judged
        unknown = sorted({seq for seq in seqs if seq not in judged})
        if unknown and not self._unable:
            may = self._ask(unknown)
            if may is None:
                self._unable = True
            else:
                judged.update((seq, seq in may) for seq in unknown)
        return None if self._unable else {seq for seq in seqs if judged[seq]}

    def _ask(self, unknown: list[int]) -> set[int] | None:
        """Return the seqs among ``unknown`` that may pass, their items decoded into ``found`` when it was given."""
        engine = self._engine
        found = self._found
        tree = self._keep.tree
        with engine.errors("search", self._sid):
            rows = None
            if found is not None:
                rows = engine.backend.filter_among_rows(self._sid, tree, unknown)
            if found is None or rows is None:  # the items are read as the walk goes
                return engine.backend.filter_among(self._sid, tree, unknown)
        items = decode_pairs(rows, engine.source(self._sid), self._on_unknown_class)
        found.update(items)
        return {seq for seq, _ in items}
