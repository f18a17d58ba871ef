"""The coded tables' bound by simsimd's int8 product (the ``simd`` extra): sound for every row, and numpy's where simsimd is missing or inexact."""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.memory._vectors import best_cosines
from agents.memory.search import EmbedParts
from agents.memory.stores._search import compact
from agents.memory.stores._search.compact import compact_table


def _pages(keys: list[int], matrix: Any) -> list[tuple[list[int], Any]]:
    """Return ``keys`` and ``matrix`` in pages of 16 rows."""
    return [(keys[at : at + 16], matrix[at : at + 16]) for at in range(0, len(keys), 16)]


def _kernel() -> Any:
    """Return simsimd's int8 product as the coded bound uses it (the test skips where simsimd is not installed)."""
    pytest.importorskip("simsimd")
    dot = compact.int8_dot()
    assert dot is not None, "simsimd imports but its int8 product is not used"
    return dot


def _hard_rows(rng: Any, width: int, kind: str, power: int) -> Any:
    """Return 48 float32 rows of ``kind``, scaled by ``10**power`` (unit or shorter: sound rows, or odd ones)."""
    rows = rng.standard_normal((48, width))
    if kind == "sparse":
        rows *= rng.random((48, width)) < 0.1
    elif kind == "halfway":  # every coordinate half a code off: the largest coding error a row
        codes = rng.integers(-126, 126, (48, width)) + 0.5
        rows = np.concatenate([np.full((48, 1), 127.0), codes[:, 1:]], axis=1)
    elif kind == "spike":
        rows = 1e-3 * rows
        rows[:, 0] = 1.0
    elif kind == "constant":
        rows = np.ones((48, width)) * np.sign(rows[:, :1] + 0.5)
    rows[np.abs(rows).sum(axis=1) == 0, 0] = 1.0
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    rows *= 10.0**power
    if kind == "long":
        rows *= 1.9999
    if kind == "odd":
        rows[0, 0], rows[1] = np.nan, 2.5 * rows[1] / np.linalg.norm(rows[1])
    return rows.astype(np.float32)


def _hard_queries(rng: Any, width: int, rows: Any, coded: Any, kind: str, power: int) -> Any:
    """Return float32 queries of ``kind``, scaled by ``10**power``: random, along the rows' coding errors, or leaving a second remainder of half a code along each row's codes."""
    codes = coded[:, :width].astype(np.float64)
    scale = np.ascontiguousarray(coded[:, width : width + 4]).view(np.float32).ravel()
    if kind == "errors":
        queries = np.nan_to_num(rows.astype(np.float64) - codes * scale[:, None])
    elif kind == "remainder":  # q = a * u + b * v + r with r at its largest, along the row's codes
        a = 1 / 127 / np.sqrt(width)
        u = rng.integers(-127, 128, (len(rows), width))
        u[:, 0] = 127
        v = rng.integers(-127, 128, (len(rows), width))
        v[:, 0] = 127
        b = a / 2 / 127
        queries = a * u + b * v + 0.4999 * b * np.sign(codes)
    elif kind == "spike":
        queries = 1e-20 * rng.standard_normal((16, width))
        queries[:, 0] = 1.0
    else:
        queries = rng.standard_normal((16, width))
    queries[np.abs(queries).sum(axis=1) == 0, 0] = 1.0
    if kind != "remainder":
        queries = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    return (queries * 10.0**power).astype(np.float32)


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    width=st.sampled_from([1, 3, 8, 64, 256, 1000]),
    rows_kind=st.sampled_from(["gauss", "sparse", "halfway", "spike", "constant", "long", "odd"]),
    row_power=st.sampled_from([-40, -30, -8, -1, 0]),
    query_kind=st.sampled_from(["gauss", "errors", "remainder", "spike"]),
    query_power=st.sampled_from([-40, -20, -3, 0, 3]),
)
def test_the_simsimd_bound_holds_every_rows_stored_cosine(
    seed: int, width: int, rows_kind: str, row_power: int, query_kind: str, query_power: int
) -> None:
    """simsimd's bound of a coded row (the query coded in two int8 passes) holds the row's float32 and exact products with any query: random and adversarial rows and queries, tiny to large."""
    _kernel()
    rng = np.random.default_rng(seed)
    rows = _hard_rows(rng, width, rows_kind, row_power)
    coded, slack = compact._quantized(np, rows)
    scale = np.ascontiguousarray(coded[:, width : width + 4]).view(np.float32).ravel()
    # Bounded as a table's two blocks are: those built or loaded, then those coded since.
    blocks = [coded[:20], coded[20:]]
    for query in _hard_queries(rng, width, rows, coded, query_kind, query_power):
        upper, lower = compact.coded_bounds(np, blocks, width, scale, slack, query)
        assert upper.dtype == np.float64  # the kernel's bound, not numpy's float32 one
        with np.errstate(invalid="ignore", over="ignore"):
            stored = np.einsum("ij,j->i", rows, query)
            exact = rows.astype(np.float64) @ query.astype(np.float64)
        finite = np.isfinite(stored)
        assert (lower[finite] <= stored[finite]).all()
        assert (stored[finite] <= upper[finite]).all()
        assert (lower[finite] <= exact[finite]).all()
        assert (exact[finite] <= upper[finite]).all()
        odd = np.isinf(slack)
        assert np.isposinf(upper[odd]).all()
        assert np.isneginf(lower[odd]).all()
        # Beyond the row's slack, the bound holds the coded product itself (summed exactly).
        grown = max(1.0, float(np.sqrt(query @ query)) * (1 + 1e-6))
        with np.errstate(invalid="ignore"):  # inf - inf: the rows not sound, not checked here
            reach = (upper - lower) / 2 - slack.astype(np.float64) * grown
            middle = (upper + lower) / 2
        for row in np.flatnonzero(~odd).tolist():
            terms = coded[row, :width].astype(np.float64) * query.astype(np.float64)
            assert abs(float(scale[row]) * math.fsum(terms.tolist()) - middle[row]) <= reach[row]


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), width=st.sampled_from([8, 64, 256, 1000]))
def test_the_simsimd_bound_is_within_five_percent_of_the_slack_of_numpys(
    seed: int, width: int
) -> None:
    """simsimd's bound of a unit row and query lies within 5% of the row's slack from numpy's float32 bound (what the query's second remainder adds: 1.5% to 2.8% at most over 300 draws)."""
    _kernel()
    rng = np.random.default_rng(seed)
    rows = _hard_rows(rng, width, "gauss", 0)
    coded, slack = compact._quantized(np, rows)
    scale = np.ascontiguousarray(coded[:, width : width + 4]).view(np.float32).ravel()
    query = _hard_queries(rng, width, rows, coded, "gauss", 0)[0]
    upper, lower = compact.coded_bounds(np, [coded], width, scale, slack, query)
    float_upper = np.einsum("ij,j->i", coded[:, :width], query) * scale + slack
    assert (np.abs(upper - float_upper) <= 0.05 * slack).all()
    assert (upper - lower >= 2 * slack).all()


def test_a_refused_or_inexact_simsimd_leaves_the_bound_to_numpy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without simsimd (unimportable), or with one whose int8 sums saturate or fail, the coded rows are bounded by numpy in float32; a new module is checked anew."""
    rows = _hard_rows(np.random.default_rng(3), 16, "gauss", 0)
    coded, slack = compact._quantized(np, rows)
    scale = np.ascontiguousarray(coded[:, 16:20]).view(np.float32).ravel()
    query = rows[0]
    monkeypatch.setitem(sys.modules, "simsimd", None)
    assert compact.int8_dot() is None
    upper, _ = compact.coded_bounds(np, [coded], 16, scale, slack, query)
    assert upper.dtype == np.float32

    def saturating(matrix: Any, vectors: Any, metric: str) -> Any:
        products = matrix.astype(np.int64) @ vectors.astype(np.int64).T
        return np.clip(products, -(2**15), 2**15 - 1).astype(np.float64)

    def failing(matrix: Any, vectors: Any, metric: str) -> Any:
        msg = "no strided rows"
        raise TypeError(msg)

    def exact(matrix: Any, vectors: Any, metric: str) -> Any:
        return (matrix.astype(np.int64) @ vectors.astype(np.int64).T).astype(np.float64)

    for cdist in (saturating, failing, exact):
        stand_in = type(sys)("simsimd")
        stand_in.cdist = cdist  # type: ignore[attr-defined]  # a stand-in module
        monkeypatch.setitem(sys.modules, "simsimd", stand_in)
        assert (compact.int8_dot() is None) == (cdist is not exact)
    upper, _ = compact.coded_bounds(np, [coded], 16, scale, slack, query)
    assert upper.dtype == np.float64


def test_a_coded_tables_query_is_bounded_by_simsimd_where_it_imports(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A coded table's query takes simsimd's int8 product (one pass over the rows for the query's two codings), and numpy's einsum with simsimd refused: the same scores."""
    _kernel()
    rng = np.random.default_rng(5)
    rows = _hard_rows(rng, 32, "gauss", 0)
    keys = sorted(rng.integers(0, 20, 48).tolist())

    def exact(q: Any, seqs: Any) -> dict[int, float]:
        wanted = set(seqs)
        picked = [at for at, key in enumerate(keys) if key in wanted]
        return best_cosines([([keys[at] for at in picked], rows[picked])], q, None)

    import simsimd

    calls: list[int] = []

    def counted(matrix: Any, vectors: Any, metric: str) -> Any:
        calls.append(len(matrix))
        return simsimd.cdist(matrix, vectors, metric=metric)

    module = type(sys)("simsimd")
    module.cdist = counted  # type: ignore[attr-defined]  # simsimd's, counted
    monkeypatch.setitem(sys.modules, "simsimd", module)
    table = compact_table(_pages(keys, rows), "m", EmbedParts(), 32, 1 << 30, exact)
    assert table is not None
    query = rows[7]
    by_simsimd = table.scores(query, 3)
    assert calls[-1:] == [len(table.matrix)]  # one pass over the rows
    monkeypatch.setitem(sys.modules, "simsimd", None)
    table.last_bounds = None
    assert table.scores(query, 3) == by_simsimd == best_cosines([(keys, rows)], query, 3)
