"""A session's part vectors kept as int8 codes where their float32 table passes the budget: a bound for every item, exact floats read for the few that can rank.

A session of 100,000 UFO-shaped steps cut into parts (``EmbedParts()``)
stores 2.15 million part vectors, 1.06 million of them distinct: 256-wide,
1,036 MiB of float32 held once each, twice the kept-vector budget
(:data:`~agents.memory.stores._search.vector_cache.CACHE_BYTES`), so every
query read and scored every vector from the file (2.1 GiB). Held as one
int8 code a coordinate, with each row's scale (its largest coordinate
over 127), they take a quarter (276 MiB) and fit.

A code row ``c`` with scale ``s`` stands for ``s * c``; the stored row
``x`` lies within ``slack = |x - s * c|`` of it (plus what float32 sums
may round, see :func:`_quantized`), so for a unit query ``q``
(Cauchy-Schwarz) ``|q . x - s * (c . q)| <= slack``: every part's cosine
lies within its slack of the approximate one, and so does each item's best
part. A query takes the ``limit``-th highest lower bound of an item as the
cut; an item whose upper bound is below it cannot reach the ``limit``
best, and the others (with the items asked for) are scored exactly from
their stored vectors, read from the file (:class:`CompactVectors`'s
``cosines_of``): the same floats as scoring every stored vector.
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

from agents.memory._vectors import EmbedParts, numpy, top_rows

__all__ = ["CompactVectors", "coded_row_bytes", "compact_table"]

Pages = Iterable[tuple[Sequence[int], Any]]
"""``(keys, matrix)``: unit vectors of parts a block at a time, ``keys[i]`` owning row ``i``, an item's rows together."""

CosinesOf = Callable[[Any, Sequence[int]], dict[int, float]]
"""``cosines_of(query, keys)``: the best cosine of a stored part of each key that holds a vector, read from the file."""

_TAIL: Final = 8
"""Bytes after a row's codes: its scale and its slack (float32 each), so that equal rows are equal codes, scale and slack."""

_ROUNDING: Final = 4 * 2.0**-24
"""What float32 sums may round, per coordinate, relative to the product of the lengths (both products: the exact and the coded one)."""


Int8Dot = Callable[[Any, Any], Any]
"""``dot(rows, vectors)``: the product of each int8 row with each of two int8 vectors (a row of ``vectors`` each), integers (float64), a row's two read together."""

_KERNEL: list[tuple[Any, Int8Dot | None]] = []
"""The ``simsimd`` module last imported and its product (``None``: unusable), so that each import is checked once."""


def int8_dot() -> Int8Dot | None:
    """Return ``simsimd``'s int8 products of each row with two vectors where it imports (the ``simd`` extra) and gives exact integers, else ``None``: numpy bounds the coded rows.

    The one place that picks the kernel of :func:`coded_bounds` (asked at
    each query: a test that makes ``simsimd`` unimportable, a ``None`` in
    ``sys.modules``, gets numpy). The first use of a module checks its
    products on rows at the extremes of the codes (``127`` against
    ``-127``, 4,096 wide) and on mixed rows against numpy's integers: a
    build whose sums are not exact (saturated or narrowed) is not used.
    """
    try:
        module = importlib.import_module("simsimd")
    except ImportError:
        return None
    if _KERNEL and _KERNEL[0][0] is module:
        return _KERNEL[0][1]
    np = numpy()
    cdist = module.cdist

    def dot(rows: Any, vectors: Any) -> Any:
        # One pass over the rows for both vectors: the rows are read from memory once.
        return np.asarray(cdist(rows, vectors, metric="dot"), dtype=np.float64)

    kernel: Int8Dot | None = dot
    try:
        rows = np.full((4, 4096 + 8), 127, dtype=np.int8)[:, :4096]  # strided, as coded rows are
        rows[1] = -127
        rows[2, ::2] = -127
        rows[3] = np.arange(4096) % 255 - 127
        vectors = np.stack([rows[0], rows[1], rows[3][::-1]])
        for pair in (vectors[:2], vectors[1:]):
            want = rows.astype(np.int64) @ pair.astype(np.int64).T
            if not (dot(rows, np.ascontiguousarray(pair)) == want).all():
                kernel = None
    except Exception:  # any failure of an optional kernel: numpy bounds instead
        kernel = None
    _KERNEL[:] = [(module, kernel)]
    return kernel


def _coded_query(np: Any, query: Any) -> tuple[float, Any, float, Any, float]:
    """Return the unit ``query`` coded in two int8 passes, ``q = a * u + b * v + r``: ``a``, ``u``, ``b``, ``v``, and a bound of ``127 * sum(|r|)``.

    ``a`` is the query's largest coordinate over 127, ``u`` its codes;
    ``b`` and ``v`` code the remainder ``q - a * u`` the same way. Worked
    in float64 from the float32 query: ``a``, ``b``, ``u`` and ``v`` are
    what they are (exact numbers), and the remainder ``r`` they leave is
    computed in two roundings a coordinate, each within ``2**-53`` of
    ``|q_i| + |a * u_i| + |b * v_i| <= 3 * max|q|`` (``|a * u_i|`` is
    within half a code of ``|q_i|``): ``2**-44 * max|q|`` a coordinate
    covers them and the sum's own rounding many times over.
    """
    q = query.astype(np.float64)
    top = float(np.abs(q).max())
    a = top / 127
    u = np.clip(np.rint(q / a), -127, 127)
    rest = q - a * u
    second = float(np.abs(rest).max())
    b = second / 127 if second > 0 else 1.0
    v = np.clip(np.rint(rest / b), -127, 127)
    left = rest - b * v
    reach = (float(np.abs(left).sum()) + len(q) * 2.0**-44 * top) * (1 + 2.0**-40) * 127
    return a, u.astype(np.int8), b, v.astype(np.int8), reach


def coded_bounds(
    np: Any, blocks: Sequence[Any], width: int, scale: Any, slack: Any, query: Any
) -> tuple[Any, Any]:
    """Return the upper and lower bound of each coded row's stored cosine with the unit ``query`` (rows of ``blocks``, then their ``scale`` and ``slack``).

    By numpy, with no kernel (:func:`int8_dot`), or a query that is not
    finite or holds only zeros: ``s * (c . q) +- slack * grown`` in
    float32 (``grown``: the query's length, at least 1), ``einsum``
    converting every code (the slack covers float32's sums, see
    :func:`_quantized`).

    By ``simsimd``'s int8 product: the query coded in two passes
    (:func:`_coded_query`), ``q = a * u + b * v + r``, so that for a row's
    codes ``c`` (each within ``[-127, 127]``)
    ``c . q = a * (c . u) + b * (c . v) + c . r`` exactly, where
    ``|c . r| <= 127 * sum(|r|) <= reach``. The two products ``c . u`` and
    ``c . v`` are integers of at most ``width * 127**2`` (checked below
    ``2**31``, held exactly by an int32 sum and by float64), and
    :func:`int8_dot` took only a kernel whose integers are exact. The rest
    is float64: ``s * (a * (c . u) + b * (c . v))`` takes four roundings,
    each within ``2**-53`` of at most ``|s| * (|a * (c . u)| + |b * (c . v)|)``,
    which for a sound row (length at most 2, so ``|s * c|`` at most 2 plus
    its slack, and ``|a * u|``, ``|b * v|`` within a half-code of ``|q|``)
    is far below ``2**-30 * grown`` (a few units of ``2**-50`` times the
    query's length); so is the rounding of adding the slack terms. Hence
    ``|s * (c . q) - approx| <= s * reach + 2**-30 * (1 + grown)``, and
    with the row's slack (``|q . x - s * (c . q)| <= slack * grown`` for
    the stored row ``x`` and its float32 product, as the numpy path has
    it) the bounds ``approx +- (slack * grown + s * reach + 2**-30 * (1 + grown))``
    hold the stored cosine. A row not sound has an infinite slack: its
    bounds are infinite both ways, as by numpy.
    """
    # The query's length (1 within rounding) scales the slack: Cauchy-Schwarz.
    grown = max(1.0, float(np.sqrt(query @ query)) * (1 + 1e-6))
    dot = int8_dot()
    if dot is None or width * 127**2 >= 2**31 or not np.isfinite(query).all() or not query.any():
        coded = [np.einsum("ij,j->i", block[:, :width], query) for block in blocks]
        coded = (coded[0] if len(coded) == 1 else np.concatenate(coded)) * scale
        margin = slack * grown
        return coded + margin, coded - margin
    a, u, b, v, reach = _coded_query(np, query)
    both = np.stack([u, v])
    products = [dot(block[:, :width], both) for block in blocks if len(block)]
    pairs = (products[0] if len(products) == 1 else np.concatenate(products)) if products else None
    # Elementwise, not a matrix product: a row's float is the same wherever the row lies.
    product = pairs[:, 0] * a + pairs[:, 1] * b if pairs is not None else np.zeros(0)
    scale = scale.astype(np.float64)
    product *= scale
    margin = slack.astype(np.float64) * grown + scale * reach + 2.0**-30 * (1 + grown)
    return product + margin, product - margin


def coded_row_bytes(width: int) -> int:
    """Return the bytes of a coded row of ``width`` coordinates: its codes, scale and slack, padded to whole 8-byte words."""
    return -(-(width + _TAIL) // 8) * 8


def _quantized(np: Any, matrix: Any) -> tuple[Any, Any]:
    """Return ``matrix``'s rows as int8 codes followed by their scale and slack (float32 bytes), padded to whole 8-byte words, and the slacks.

    A row's slack bounds how far its coded cosine with any unit query may
    lie from its stored one, float32 rounding included: the length of the
    row's distance from its coded form, grown by what float32 may have
    rounded in computing it, and ``_ROUNDING`` per coordinate of the
    products' sums. A row that is not finite, or longer than 2, gets an
    infinite slack: it is always scored exactly. Coded 8,192 rows at a
    time, in float32, in place where it can (a session's 2 million rows
    are coded as they are read).
    """
    rows, width = matrix.shape
    out = np.zeros((rows, coded_row_bytes(width)), dtype=np.int8)
    slacks = np.zeros(rows, dtype=np.float32)
    grown = np.float32(1 + width * _ROUNDING)
    for begin in range(0, rows, 8192):
        block = np.ascontiguousarray(matrix[begin : begin + 8192], dtype=np.float32)
        largest = np.abs(block).max(axis=1) if width else np.zeros(len(block), np.float32)
        lengths = np.sqrt(np.einsum("ij,ij->i", block, block))
        sound = np.isfinite(largest) & np.isfinite(lengths) & (lengths <= 2)
        scale = np.where(sound & (largest > 0), largest / np.float32(127), np.float32(1))
        codes = block / scale[:, None]
        codes[~sound] = 0
        np.rint(codes, out=codes)
        np.minimum(codes, 127, out=codes)
        np.maximum(codes, -127, out=codes)
        here = out[begin : begin + 8192]
        here[:, :width] = codes
        codes *= scale[:, None]
        np.subtract(block, codes, out=codes)  # the row's distance from its coded form
        slack = np.sqrt(np.einsum("ij,ij->i", codes, codes)) * grown
        slack += width * _ROUNDING * (2 + np.where(sound, lengths, 0)) + np.float32(1e-6)
        slack[~sound] = np.inf
        # float32 rounds to the nearest: one step up keeps it a bound.
        slack = np.nextafter(slack.astype(np.float32), np.float32(np.inf))
        tail = np.stack([scale.astype(np.float32), slack], axis=1)
        here[:, width : width + _TAIL] = np.ascontiguousarray(tail).view(np.int8)
        slacks[begin : begin + 8192] = slack
    return out, slacks


class CompactVectors:
    """A session's stored part vectors as int8 codes, each distinct coded row held once: exact scores, reading the stored vectors of the items that can rank.

    Built by :func:`compact_table`; kept by the store handle's
    :class:`~agents.memory.stores._search.vector_cache.VectorCache` as a
    plain table is (``matrix``, ``used``, ``slot_of``, ``changed``,
    ``compacted``), and scored as one (``scores``, ``scores_of``,
    ``every_score``), with the floats of scoring every stored vector.
    """

    def __init__(
        self,
        model: str,
        parts: EmbedParts,
        width: int,
        coded: Any,
        slack: Any,
        cosines_of: CosinesOf,
        scale: Any = None,
    ) -> None:
        np = numpy()
        self.model = model
        self.parts = parts
        self.width = width
        self.matrix = coded  # codes, scale and slack of each distinct row (see _quantized)
        # Rows coded after the table was built or loaded (``changed``), after ``matrix``'s: a
        # loaded table's rows are the file's pages, mapped, never copied to add a few.
        self.more = np.zeros((0, coded.shape[1]), dtype=np.int8)
        if scale is None:  # else the rows' scales, read from their tails already
            scale = np.ascontiguousarray(coded[:, width : width + 4]).view(np.float32).ravel()
        self.scale = scale
        self.slack = slack
        self.used = len(coded)
        # The row of each part laid out, item after item (lay_out_items); the parts coded since
        # (``changed``) each hold a new row of their own, in order: not stored (see part_rows).
        self.ref_row = np.zeros(0, dtype=np.int64)
        self.refs = 0  # the parts: those laid out, then those coded since
        self._laid_rows = 0  # the rows in use as the items were laid out
        self._laid_slots = 0  # the slots laid out
        self._ascending = True  # the keys laid out ascend (all a built or loaded table's do)
        self.start = np.zeros(0, dtype=np.int64)  # each slot's first place in ref_row
        self.key_at = np.zeros(0, dtype=np.int64)
        self.alive = np.zeros(0, dtype=bool)
        # The slot of each live item by key, as made so far (slot_of); None: not made yet.
        self.slot_map: dict[int, int] | None = {}
        self.changes = 0  # the items changed (``changed``) since the table was built or loaded
        self.screens = True  # as a compacted table: nothing for VectorCache to compact
        self.screen = None
        self._cosines_of = cosines_of
        self.last_bounds: tuple[bytes, Any, Any] | None = None  # the last query's bounds (_bounds)

    def lay_out(self, keys: Any, ref_row: Any) -> None:
        """Lay out the items: ``keys`` the key of each stored part (an item's together), ``ref_row`` the coded row of each."""
        np = numpy()
        first = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if len(keys) else keys[:0]
        self.lay_out_items(first.astype(np.int64), keys[first].astype(np.int64), ref_row)

    def lay_out_items(self, start: Any, key_at: Any, ref_row: Any) -> None:
        """Lay out the items: ``start`` the first place in ``ref_row`` of each item's parts (ascending), ``key_at`` each item's key, ``ref_row`` the coded row of each part."""
        np = numpy()
        self.last_bounds = None
        self.ref_row, self.refs, self._laid_rows = ref_row, len(ref_row), self.used
        self._laid_slots = len(start)
        # Compared, not subtracted: a difference of two int64 may wrap.
        self._ascending = bool((key_at[1:] > key_at[:-1]).all())
        self.start, self.key_at = start, key_at
        self.alive = np.ones(len(start), dtype=bool)
        self.slot_map = None

    @property
    def slot_of(self) -> dict[int, int]:
        """The slot of each live item, by key: made when first asked for (a loaded table's first semantic query needs none: 100,000 items, 11-17 ms)."""
        if self.slot_map is None:
            slots = len(self.key_at)
            live = numpy().flatnonzero(self.alive[:slots])
            self.slot_map = dict(zip(self.key_at[live].tolist(), live.tolist(), strict=True))
        return self.slot_map

    def part_rows(self) -> Any:
        """Return the coded row of each part, item after item: those laid out, then the parts coded since (a new row each, in order)."""
        np = numpy()
        coded_since = np.arange(self._laid_rows, self.used, dtype=np.int64)
        return np.concatenate([self.ref_row, coded_since]) if len(coded_since) else self.ref_row

    def _best(self, np: Any, values: Any) -> Any:
        """Return each slot's highest of ``values`` (a value a row in use) over its parts: the slots laid out over their gathered rows, those coded since over their rows as they lie (no gather, no copy of the others')."""
        laid, slots = self._laid_slots, len(self.key_at)
        best = np.maximum.reduceat(values[self.ref_row], self.start[:laid]) if laid else values[:0]
        if slots == laid:
            return best
        # A slot coded since holds the new rows from its first place on (see part_rows).
        since = self.start[laid:slots] - len(self.ref_row)
        return np.concatenate(
            [best, np.maximum.reduceat(values[self._laid_rows : self.used], since)]
        )

    def _held(self, keys: Iterable[int]) -> list[int]:
        """Return those of ``keys`` a live item holds, in their order: found among the keys laid out (ascending) while the slot map is not made and no item changed since (a loaded table's first hybrid query: no map of 100,000 keys made for a few hundred), else in the map."""
        asked = list(keys)
        if not asked:
            return []
        if self.slot_map is None and len(self.key_at) == self._laid_slots and self._ascending:
            np = numpy()
            if all(type(key) is int and -(2**63) <= key < 2**63 for key in asked):
                laid = self.key_at
                want = np.asarray(asked, dtype=np.int64)
                at = np.minimum(np.searchsorted(laid, want), max(len(laid) - 1, 0))
                found = (laid[at] == want).tolist() if len(laid) else [False] * len(asked)
                return [key for key, hit in zip(asked, found, strict=True) if hit]
        slot_of = self.slot_of
        return [key for key in asked if key in slot_of]

    @property
    def items(self) -> int:
        """The live items (those :attr:`slot_of` holds), counted without it."""
        return int(self.alive[: len(self.key_at)].sum())

    @property
    def nbytes(self) -> int:
        """The bytes of the coded rows held (those built or loaded, and those coded since)."""
        return int(self.matrix.nbytes) + int(self.more.nbytes)

    def rows(self) -> list[Any]:
        """Return the coded rows in use, in order, as blocks: those built or loaded, then those coded since (no copy)."""
        base = len(self.matrix)
        return [self.matrix, self.more[: self.used - base]] if self.used > base else [self.matrix]

    def _bounds(self, np: Any, query: Any) -> tuple[Any, Any]:
        """Return each slot's upper and lower bound of its best cosine with the unit ``query`` (``-inf`` for a dead slot).

        The last query's are kept: a walk asks the same query ever deeper
        (a filter function asked of a ``StoredMemory``'s own items), and
        each product over every coded row cost 60 ms of its 80 at 50,000
        steps (the copy a change makes holds none).
        """
        tag = query.dtype.str.encode() + query.tobytes()
        last = self.last_bounds
        if last is not None and last[0] == tag:
            return last[1], last[2]
        used, slots = self.used, len(self.key_at)
        rows = self.rows()
        upper, lower = coded_bounds(
            np, rows, self.width, self.scale[:used], self.slack[:used], query
        )
        upper, lower = self._best(np, upper), self._best(np, lower)
        dead = ~self.alive[:slots]
        upper[dead] = lower[dead] = -np.inf
        self.last_bounds = (tag, upper, lower)
        return upper, lower

    def scores(
        self, query: Any, limit: int | None = None, among: Iterable[int] = ()
    ) -> dict[int, float]:
        """Return the best cosine of a part with the unit ``query`` of the best ``limit`` items (with ties) and of ``among``, by key: ``Vectors.scores``'s floats.

        Only the items whose upper bound reaches the ``limit``-th highest
        lower bound (and ``among``) are scored, exactly, from their stored
        vectors; every item among the best ``limit`` is one of them.
        """
        np = numpy()
        alive = self.items
        if not alive:
            return {}
        wanted = self._held(among)
        if not query.any():  # every cosine is known: none can be told apart by reading
            keys, every = self.every_score(query)
            picked = top_rows(every, limit)
            rows = {*picked.tolist(), *np.flatnonzero(np.isin(keys, wanted)).tolist()}
            return {int(keys[at]): float(every[at]) for at in sorted(rows)}
        upper, lower = self._bounds(np, query)
        if limit is None or limit >= alive:
            chosen = np.flatnonzero(upper > -np.inf)
        else:
            cut = np.partition(lower, len(lower) - limit)[len(lower) - limit]
            chosen = np.flatnonzero(upper >= cut)
        keys = sorted({*self.key_at[chosen].tolist(), *wanted})
        exact = self._cosines_of(query, keys)
        found = sorted(exact)
        sims = np.asarray([exact[key] for key in found], dtype=np.float32)
        picked = [found[row] for row in top_rows(sims, limit).tolist()]
        return {key: exact[key] for key in sorted({*picked, *(k for k in wanted if k in exact)})}

    def ceilings(self, query: Any, keys: Iterable[int]) -> dict[int, float]:
        """Return an upper bound of the best cosine of a part with the unit ``query`` of each of ``keys`` that holds a vector, by key, from the codes alone (nothing read).

        The bound :meth:`scores` rules items out by (the last query's are
        kept: ``scores`` of the same query computed them), for a filter's
        passing rows: thousands of items, none of them read.
        """
        np = numpy()
        slot_of = self.slot_of
        found = [(key, slot) for key in keys if (slot := slot_of.get(key)) is not None]
        if not found:
            return {}
        upper, _ = self._bounds(np, query)
        slots = np.asarray([slot for _, slot in found], dtype=np.int64)
        bounds = upper[slots].tolist()
        return {key: float(bound) for (key, _), bound in zip(found, bounds, strict=True)}

    def scores_of(self, query: Any, keys: Iterable[int]) -> dict[int, float]:
        """Return the best cosine of a part with the unit ``query`` of each of ``keys`` that holds a vector, by key (read exactly)."""
        wanted = sorted(set(self._held(keys)))
        if wanted and not query.any():  # every_score's floats, reading no sound row
            held, zeros = self._zero_scores(numpy(), query)
            every = dict(zip(held.tolist(), zeros.tolist(), strict=True))
            return {key: every[key] for key in wanted if key in every}
        return self._cosines_of(query, wanted) if wanted else {}

    def every_score(self, query: Any) -> tuple[Any, Any]:
        """Return every item's key and best cosine with the unit ``query``, every stored vector read and scored (as a session over the budget is)."""
        np = numpy()
        alive = self.key_at[: len(self.alive)][self.alive]
        if not query.any():
            return self._zero_scores(np, query)
        scored = self._cosines_of(query, sorted(alive.tolist()))
        keys = np.fromiter(scored, dtype=np.int64, count=len(scored))
        return keys, np.fromiter(scored.values(), dtype=np.float32, count=len(scored))

    def _zero_scores(self, np: Any, query: Any) -> tuple[Any, Any]:
        """Return every item's key (ascending) and best cosine with a zero ``query``, reading only the items with a row that is not finite.

        A stored row that is finite scores ``+0.0`` with a query of zeros
        (the sum of its products, each a signed zero, starts from ``+0.0``:
        :func:`~agents.memory._vectors.cosines`), and so does its item's
        best part: the floats of scoring every stored vector (a query
        holding no word, embedded by a hashing model, read and scored all
        2.1 million part vectors of 100,000 steps). An item with a row
        coded as not sound (infinite slack: not finite, or longer than 2)
        is read and scored exactly, as the bounds would have it.
        """
        slots = len(self.key_at)
        starts = self.start[:slots]
        refs = self.part_rows()
        unsound = np.zeros(slots, dtype=bool)
        if slots:
            unsound = np.maximum.reduceat(self.slack[refs], starts) == np.inf
        live = np.flatnonzero(self.alive[:slots])
        order = live[np.argsort(self.key_at[live], kind="stable")]
        keys = self.key_at[order].astype(np.int64)
        every = np.zeros(len(order), dtype=np.float32)
        odd = np.flatnonzero(unsound[order])
        if len(odd):
            exact = self._cosines_of(query, keys[odd].tolist())
            held = np.ones(len(order), dtype=bool)  # an item the file holds no vector of drops
            for at, key in zip(odd.tolist(), keys[odd].tolist(), strict=True):
                if key in exact:
                    every[at] = exact[key]
                else:
                    held[at] = False
            keys, every = keys[held], every[held]
        return keys, every

    def compacted(self) -> CompactVectors:
        """Return this table (held compact already)."""
        return self

    def _part_counts(self) -> Any:
        """Return each slot's number of parts (its places in :meth:`part_rows`), live or not."""
        np = numpy()
        slots = len(self.key_at)
        ends = np.append(self.start[1:slots], self.refs).astype(np.int64)
        return ends - self.start[:slots]

    @property
    def live_parts(self) -> int:
        """The part vectors the live items hold: as many as the session's vector rows hold, each ``width`` float32 (``Store.vectors_over_budget`` takes their bytes from a table kept at the current version)."""
        return int(self._part_counts()[self.alive[: len(self.key_at)]].sum())

    def live(self) -> CompactVectors:
        """Return a copy that holds the live items only, by key ascending, and the rows they use only (as :func:`compact_table` lays a table out: what a save takes); this table stays as it was."""
        np = numpy()
        slots = len(self.key_at)
        alive = np.flatnonzero(self.alive[:slots])
        order = alive[np.argsort(self.key_at[alive], kind="stable")]
        lengths = self._part_counts()[order]
        starts = np.zeros(len(order), dtype=np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        places = np.repeat(self.start[order] - starts, lengths) + np.arange(int(lengths.sum()))
        refs = self.part_rows()[places]
        marked = np.zeros(self.used, dtype=bool)
        marked[refs] = True  # the rows a live item uses (no sort: a mark a row)
        kept = np.flatnonzero(marked)
        ref_row = (np.cumsum(marked, dtype=np.int64) - 1)[refs]
        base = len(self.matrix)
        split = int(np.searchsorted(kept, base))
        matrix = np.empty((len(kept), self.matrix.shape[1]), dtype=np.int8)
        np.take(self.matrix, kept[:split], axis=0, out=matrix[:split])
        np.take(self.more, kept[split:] - base, axis=0, out=matrix[split:])
        table = CompactVectors(
            self.model,
            self.parts,
            self.width,
            matrix,
            self.slack[kept],
            self._cosines_of,
            self.scale[kept],
        )
        table.lay_out_items(starts, self.key_at[order].astype(np.int64), ref_row.astype(np.int64))
        return table

    def changed(self, keys: Sequence[int], vectors: Any) -> CompactVectors:
        """Return a copy where each of ``keys`` holds its part vectors in ``vectors`` (a key not there holds none); this table stays as it was.

        The new parts are coded into rows after the last this table uses,
        in :attr:`more` (the two share the arrays, grown by an eighth where
        full): the rows built or loaded (a loaded file's, mapped) are never
        copied. Each changed key's old slot is marked dead.
        """
        np = numpy()
        table = copy.copy(self)
        table.last_bounds = None
        table.changes = self.changes + len(keys)
        table.alive = self.alive.copy()
        slot_of = self.slot_map
        if slot_of is None:  # not made yet (a loaded table's catch-up): the slots found without it
            slots = len(self.key_at)
            gone = np.isin(self.key_at[:slots], np.asarray(list(keys), dtype=np.int64))
            table.alive[:slots] &= ~gone
        else:
            table.slot_map = slot_of = dict(slot_of)
            for key in keys:
                slot = slot_of.pop(key, None)
                if slot is not None:
                    table.alive[slot] = False
        blocks = [
            (key, np.asarray(vectors[key], dtype=np.float32)) for key in keys if key in vectors
        ]
        blocks = [(key, b.reshape(-1, self.width)) for key, b in blocks if b.size]
        if not blocks:
            return table
        matrix = np.concatenate([block for _, block in blocks])
        coded, slack = _quantized(np, matrix)
        rows = len(coded)
        scale = np.ascontiguousarray(coded[:, self.width : self.width + 4]).view(np.float32)
        table.more = _room(np, self.more, self.used - len(self.matrix), coded)
        table.slack = _room(np, self.slack, self.used, slack)
        table.scale = _room(np, self.scale, self.used, scale.ravel())
        table.used = self.used + rows
        sizes = [len(block) for _, block in blocks]
        table.refs = self.refs + rows  # each new part its new row, in order (part_rows)
        slots = len(self.key_at)
        firsts = self.refs + np.cumsum([0, *sizes[:-1]])
        table.start = np.concatenate([self.start[:slots], firsts.astype(np.int64)])
        new_keys = np.asarray([key for key, _ in blocks], dtype=np.int64)
        table.key_at = np.concatenate([self.key_at[:slots], new_keys])
        table.alive = np.concatenate([table.alive[:slots], np.ones(len(blocks), dtype=bool)])
        if slot_of is not None:
            slot_of.update((key, slots + at) for at, (key, _) in enumerate(blocks))
        return table


def _room(np: Any, array: Any, used: int, fill: Any) -> Any:
    """Return ``array`` with ``fill`` in its places from ``used`` on: the same array where it has room (a table using only its first ``used`` does not see them), else a copy grown by an eighth."""
    count = len(fill)
    if used + count > len(array):
        grown = np.zeros((used + count + used // 8 + 64, *array.shape[1:]), dtype=array.dtype)
        grown[:used] = array[:used]
        array = grown
    array[used : used + count] = fill
    return array


def _joined(np: Any, blocks: list[Any]) -> Any:
    """Return ``blocks`` (row blocks) as one matrix, each block let go once copied: the memory held grows by a block at a time, not by all of them."""
    out = np.empty((sum(len(block) for block in blocks), blocks[0].shape[1]), blocks[0].dtype)
    at = 0
    blocks.reverse()
    while blocks:
        block = blocks.pop()
        out[at : at + len(block)] = block
        at += len(block)
        del block
    return out


def _held_once(np: Any, matrix: Any, kept: Any) -> None:
    """Move the rows ``kept`` (ascending) of ``matrix`` to its first rows, in place, and cut it to them (no second copy of the rows held)."""
    for begin in range(0, len(kept), 65536):
        block = kept[begin : begin + 65536]
        # kept[i] >= i: a block's rows come from places no block before it wrote.
        matrix[begin : begin + len(block)] = matrix[block]
    matrix.resize((len(kept), matrix.shape[1]), refcheck=False)


def compact_table(
    pages: Pages,
    model: str,
    parts: EmbedParts,
    width: int,
    budget: int,
    cosines_of: CosinesOf,
) -> CompactVectors | None:
    """Return the vectors of ``pages`` coded as a :class:`CompactVectors`, each distinct coded row once; ``None`` where they pass ``budget`` bytes even so.

    Each page is coded as it comes (its float32 rows are not held), then
    equal coded rows (a part every step repeats) are found with numpy in
    one pass (``distinct_rows``) and held once.

    Args:
        cosines_of: Reads the stored vectors of some keys and returns the
            best cosine of each with a query (the exact floats).
    """
    from agents.memory.search._item_vectors import distinct_rows

    np = numpy()
    keys: list[Any] = []
    coded: list[Any] = []
    slacks: list[Any] = []
    size = 0
    for page_keys, matrix in pages:
        if not len(page_keys):
            continue
        rows, slack = _quantized(np, np.asarray(matrix, dtype=np.float32))
        keys.append(np.asarray(page_keys, dtype=np.int64))
        coded.append(rows)
        slacks.append(slack)
        size += int(rows.nbytes)
        if size > 2 * budget:
            return None  # even coded, more than the budget holds once equal rows are shared
    table = CompactVectors(
        model,
        parts,
        width,
        np.zeros((0, coded_row_bytes(width)), np.int8),
        np.zeros(0, np.float32),
        cosines_of,
    )
    if not coded:
        return table
    matrix = _joined(np, coded)
    kept, ref_row = distinct_rows(np, matrix)
    if len(kept) < len(matrix):
        _held_once(np, matrix, kept)
    if int(matrix.nbytes) > budget:
        return None
    table = CompactVectors(model, parts, width, matrix, np.concatenate(slacks)[kept], cosines_of)
    table.lay_out(np.concatenate(keys), ref_row.astype(np.int64))
    return table
