"""A store's filtered hybrid walk (walked_passing): the first k of the full blend that pass, the blend walked only as deep as they need."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from agents.memory._vectors import SHARED_TOP
from agents.memory.stores._search.hybrid import walked_passing


def walk(
    scores: list[float], passes: list[bool], k: int
) -> tuple[list[tuple[int, float]], list[int]]:
    """Return the walk's hits over a full blend of ``scores`` (by key) and the depths it asked, a filter passing the keys ``passes`` says."""
    full = sorted(enumerate(scores), key=lambda hit: (-hit[1], hit[0]))
    depths: list[int] = []

    def scored(
        depth: int, bounded: bool, among: Sequence[int] | None, pruning: Any
    ) -> tuple[dict[int, float], dict[int, Any]]:
        assert bounded
        assert among is None
        assert pruning is None
        depths.append(depth)
        # The bounded walk's candidates: the full blend's best `depth`, and a few more.
        return dict(full[: depth + SHARED_TOP]), {}

    def passing(ranked: Sequence[tuple[int, float]], found: dict[int, Any]) -> list[Any]:
        return [(key, score) for key, score in ranked if passes[key]][:k]

    return walked_passing(scored, k, True, passing), depths


@given(
    data=st.lists(
        st.tuples(st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.9]), st.booleans()),
        min_size=1,
        max_size=400,
    ),
    k=st.integers(1, 12),
)
def test_the_walk_gives_the_first_k_of_the_full_blend_that_pass(
    data: list[tuple[float, bool]], k: int
) -> None:
    """Any blend and filter: the first k that pass of the full ranking (ties by key), each depth asked once and deeper than the last."""
    scores, passes = [score for score, _ in data], [passed for _, passed in data]
    hits, depths = walk(scores, passes, k)
    full = sorted(enumerate(scores), key=lambda hit: (-hit[1], hit[0]))
    assert hits == [(key, score) for key, score in full if passes[key]][:k]
    assert depths == sorted(set(depths))


def test_a_filter_most_pass_walks_as_deep_as_its_first_k_passing_lie() -> None:
    """One of the blend's 5 best fails a filter 99% pass: the walk asks 10 deep, not 20 (where a query of common words whose blend is 0 past its best 15 walked every keyword hit); 7 of the 10 best failing, 20 deep next (as deep as that share needs, twice at least)."""
    scores = [1.0 - key / 1000 for key in range(1000)]
    passes = [key != 2 for key in range(1000)]
    hits, depths = walk(scores, passes, 5)
    assert hits == [(key, scores[key]) for key in (0, 1, 3, 4, 5)]
    assert depths == [10]
    passes = [key not in range(7) for key in range(1000)]
    hits, depths = walk(scores, passes, 5)
    assert hits == [(key, scores[key]) for key in range(7, 12)]
    assert depths == [10, 20]
