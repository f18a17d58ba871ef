"""A session whose part vectors pass the kept-vector budget even held once each is kept coded (int8): hits and floats stay Memory.search's."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from coded_sessions import (
    EMBEDDER,
    QUERIES,
    coded_handle,
    coded_up,
    expected,
    found,
    kept_tables,
    kept_types,
    steps,
    written,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.memory import MemoryItem
from agents.memory._vectors import best_cosines
from agents.memory.search import EmbedParts
from agents.memory.stores import open_store
from agents.memory.stores._search import compact
from agents.memory.stores._search.compact import CompactVectors, compact_table

# Each test twice: the coded rows bounded by simsimd, then by numpy (simsimd refused).
pytestmark = pytest.mark.usefixtures("int8_kernel")


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    n=st.integers(1, 120),
    seed=st.integers(0, 1000),
    k=st.integers(1, 40),
    query=st.sampled_from(QUERIES),
    mode=st.sampled_from(["semantic", "hybrid"]),
    where=st.sampled_from([None, {"team": "red"}, {"team": {"$ne": "red"}}]),
)
def test_a_coded_session_ranks_as_memory_search(
    n: int, seed: int, k: int, query: str, mode: str, where: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every k, filter and mode over a coded session gives Memory.search's hits and floats."""
    items = steps(n, seed)
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite://{Path(folder) / 'store.db'}"
        written(url, items)
        with coded_handle(url, items, monkeypatch) as store:
            want = expected(items, query, k, mode, where)
            assert coded_up(store, query, k, mode, where) == [want] * 3
            assert kept_types(store) == [CompactVectors]


@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
def test_a_coded_table_follows_a_write_by_another_handle(
    kind: str, durable_url: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """After another handle updates and appends steps, the coded table is brought up to date and ranks as Memory.search over the new steps."""
    url = durable_url(kind)
    items = steps(90)
    seqs = written(url, items)
    with coded_handle(url, items, monkeypatch) as store:
        coded_up(store, QUERIES[0], 10, "semantic")
        before = kept_tables(store)
        assert [type(table) for table in before] == [CompactVectors]
        changed = MemoryItem(step=5, thought="pay the invoice for March now", team="blue")
        added = MemoryItem(step=500, thought="pay the invoice for March", team="red")
        with open_store(url) as other:
            with other.batch("s") as batch:
                batch.update({seqs[5]: changed})
                batch.append([added])
            other.index_embeddings("s", EMBEDDER)
        now = [*items[:5], changed, *items[6:], added]
        for k in (1, 5, 40):
            for mode in ("semantic", "hybrid"):
                assert found(store, QUERIES[0], k, mode) == expected(now, QUERIES[0], k, mode, None)
        after = kept_tables(store)
        assert [type(table) for table in after] == [CompactVectors]
        assert after[0] is not before[0]  # followed, not kept stale


def test_a_coded_table_follows_a_write_by_another_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step appended by another process is ranked by the handle's next search as Memory.search ranks it."""
    url = f"sqlite://{tmp_path / 'store.db'}"
    items = steps(80)
    written(url, items)
    added = MemoryItem(step=900, thought="close the report window", team="red")
    script = textwrap.dedent(f"""
        from agents.memory import MemoryItem
        from agents.memory.search import HashingEmbedder
        from agents.memory.stores import open_store
        with open_store({url!r}) as store:
            store.append("s", [MemoryItem(step=900, thought="close the report window", team="red")])
            store.index_embeddings("s", HashingEmbedder(64))
    """)
    with coded_handle(url, items, monkeypatch) as store:
        coded_up(store, QUERIES[1], 8, "semantic")
        subprocess.run([sys.executable, "-c", script], check=True)
        for mode in ("semantic", "hybrid"):
            assert found(store, QUERIES[1], 8, mode) == expected(
                [*items, added], QUERIES[1], 8, mode, None
            )
        assert kept_types(store) == [CompactVectors]


def test_a_coded_session_ranks_the_same_after_close_and_reopen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A handle opened again codes the session again and ranks as before."""
    url = f"sqlite://{tmp_path / 'store.db'}"
    items = steps(70, seed=3)
    written(url, items)
    want = expected(items, QUERIES[2], 12, "hybrid", None)
    for _ in range(2):
        with coded_handle(url, items, monkeypatch) as store:
            assert coded_up(store, QUERIES[2], 12, "hybrid") == [want] * 3
            assert kept_types(store) == [CompactVectors]


def _pages(keys: list[int], matrix: Any) -> list[tuple[list[int], Any]]:
    """Return ``keys`` and ``matrix`` in pages of 50 rows."""
    return [(keys[at : at + 50], matrix[at : at + 50]) for at in range(0, len(keys), 50)]


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    limit=st.integers(1, 40),
    spread=st.sampled_from([1e-4, 1e-3, 1e-2]),
)
def test_the_coded_bound_keeps_every_item_that_can_rank(
    seed: int, limit: int, spread: float
) -> None:
    """Parts closer together than the codes' error still rank exactly: the scores are those of scoring every vector."""
    rng = np.random.default_rng(seed)
    width = 32
    base = rng.standard_normal(width)
    rows = base + spread * rng.standard_normal((400, width))
    rows = (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)
    keys = sorted(rng.integers(0, 120, 400).tolist())
    query = (base + 0.5 * rng.standard_normal(width)).astype(np.float32)
    query /= np.linalg.norm(query)

    def exact(q: Any, seqs: Any) -> dict[int, float]:
        wanted = set(seqs)
        picked = [at for at, key in enumerate(keys) if key in wanted]
        return best_cosines([([keys[at] for at in picked], rows[picked])], q, None)

    table = compact_table(_pages(keys, rows), "m", EmbedParts(), width, 1 << 30, exact)
    assert table is not None
    want = best_cosines([(keys, rows)], query, limit, [keys[0]])
    assert table.scores(query, limit, [keys[0]]) == want
    every = best_cosines([(keys, rows)], query, None)
    got_keys, got = table.every_score(query)
    assert dict(zip(got_keys.tolist(), got.tolist(), strict=True)) == every


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    limit=st.integers(1, 40),
    odd=st.sampled_from([None, np.nan, 3.0]),
    sign=st.sampled_from([1.0, -1.0]),
)
def test_a_zero_query_is_scored_without_reading_the_finite_vectors(
    seed: int, limit: int, odd: float | None, sign: float
) -> None:
    """A query of zeros (no word to hash) gets the floats of scoring every vector, reading only the items with a row that is not finite."""
    rng = np.random.default_rng(seed)
    width = 16
    rows = rng.standard_normal((300, width))
    rows[::7] = -np.abs(rows[::7])  # rows whose every product with a zero is -0.0
    rows = (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)
    if odd is not None:
        rows[5, 0] = odd  # not sound: coded with an infinite slack
    keys = sorted(rng.integers(0, 90, 300).tolist())
    read: list[int] = []

    def exact(q: Any, seqs: Any) -> dict[int, float]:
        read.extend(seqs)
        wanted = set(seqs)
        picked = [at for at, key in enumerate(keys) if key in wanted]
        with np.errstate(invalid="ignore"):  # a NaN part: its item's best is NaN, left out
            return best_cosines([([keys[at] for at in picked], rows[picked])], q, None)

    table = compact_table(_pages(keys, rows), "m", EmbedParts(), width, 1 << 30, exact)
    assert table is not None
    query = sign * np.zeros(width, dtype=np.float32)  # -0.0 coordinates too
    with np.errstate(invalid="ignore"):
        want = best_cosines([(keys, rows)], query, limit, [keys[-1]])
        every_want = best_cosines([(keys, rows)], query, None)
    got = table.scores(query, limit, [keys[-1]])
    assert got == want
    assert [np.copysign(1.0, score) for score in got.values()] == [
        np.copysign(1.0, score) for score in want.values()
    ]
    got_keys, every = table.every_score(query)
    assert dict(zip(got_keys.tolist(), every.tolist(), strict=True)) == every_want
    assert set(read) <= ({keys[5]} if odd is not None else set())


def _stored(parts: dict[int, Any]) -> tuple[list[int], Any]:
    """Return ``(keys, matrix)`` of each key's part vectors, by key."""
    keys = [key for key in sorted(parts) for _ in parts[key]]
    return keys, np.concatenate([parts[key] for key in sorted(parts)])


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), limits=st.lists(st.integers(1, 60), min_size=2, max_size=4))
def test_a_walk_asking_one_query_deeper_bounds_the_coded_rows_once(
    seed: int, limits: list[int]
) -> None:
    """The same query asked ever deeper (a walk for a filter function) takes the product over every coded row once; a changed copy bounds its own rows."""
    rng = np.random.default_rng(seed)
    width = 16
    rows = rng.standard_normal((240, width))
    rows = (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)
    owners = np.asarray(sorted(rng.integers(0, 80, 240).tolist()))
    parts = {int(key): rows[owners == key] for key in np.unique(owners)}

    def exact(q: Any, seqs: Any) -> dict[int, float]:
        wanted = {key: parts[key] for key in seqs if key in parts}
        return best_cosines([_stored(wanted)], q, None) if wanted else {}

    table = compact_table([_stored(parts)], "m", EmbedParts(), width, 1 << 30, exact)
    assert table is not None
    products: list[int] = []
    every_row = table.rows
    table.rows = lambda: products.append(1) or every_row()  # type: ignore[method-assign]  # counted, then as before
    query = rng.standard_normal(width).astype(np.float32)
    query /= np.linalg.norm(query)
    for limit in limits:
        assert table.scores(query, limit) == best_cosines([_stored(parts)], query, limit)
    assert products == [1]
    del table.rows  # as built: a copy of the table takes the class's
    first = next(iter(parts))
    changed = table.changed([first], {first: -rows[:2]})
    parts[first] = -rows[:2]
    assert changed.scores(query, limits[0]) == best_cosines([_stored(parts)], query, limits[0])


def test_a_row_that_is_not_finite_is_always_scored_exactly() -> None:
    """A stored row with a NaN or too long gets an unbounded slack."""
    matrix = np.array([[np.nan, 0.0], [3.0, 0.0], [0.6, 0.8]], dtype=np.float32)
    _, slack = compact._quantized(np, matrix)
    assert np.isinf(slack[:2]).all()
    assert np.isfinite(slack[2])


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), width=st.sampled_from([8, 64, 256]))
def test_a_rows_coded_cosine_lies_within_its_slack_even_along_its_own_error(
    seed: int, width: int
) -> None:
    """The slack bounds the coded cosine's distance from the stored one for any unit query, the worst (along the row's own coding error) included."""
    rng = np.random.default_rng(seed)
    rows = rng.standard_normal((64, width))
    rows[::3] *= rng.random((22, width)) < 0.2  # sparse rows too: a few large coordinates
    rows[np.abs(rows).sum(axis=1) == 0, 0] = 1.0
    rows = (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)
    coded, slack = compact._quantized(np, rows)
    codes = coded[:, :width].astype(np.float32)
    scale = np.ascontiguousarray(coded[:, width : width + 4]).view(np.float32).ravel()
    error = rows.astype(np.float64) - codes.astype(np.float64) * scale[:, None]
    queries = error[:16] / np.linalg.norm(error[:16], axis=1, keepdims=True)
    queries = np.concatenate([queries, rng.standard_normal((16, width))])
    for query in (queries / np.linalg.norm(queries, axis=1, keepdims=True)).astype(np.float32):
        exact = np.einsum("ij,j->i", rows, query)
        approx = np.einsum("ij,j->i", codes, query) * scale
        assert (np.abs(exact - approx) <= slack).all()
