"""Ways to rank items by their best part: time and recall against the exact ranking, tuning and held-out corpora.

The issue asks semantic queries over part vectors to cost within 2x of
whole-item vectors. The exact block screen (``Vectors.scores``) already
reads 39 of 256 floats of every distinct part vector; this benchmark
measures what an item-level bound or an approximate screen would give:

* ``exact``: ``Vectors.scores`` as released (the block screen, exact);
* ``whole``: one whole-item vector a step, the product only (the baseline);
* bounds (exact, counted, not timed): the share of items whose **item cone**
  (the unit mean of its parts and the widest angle of a part from it) or
  whose **cluster cone** (k-means of the distinct parts, ``--clusters`` cones)
  reaches the query's 5th best cosine: what an exact per-item or
  per-cluster bound would still have to read;
* approximate screens (candidates, then the candidates' parts scored
  exactly): the best ``M`` items by the mean of their parts (``mean``), by
  their whole-item vector (``whole``), or by the first 16 rotated
  coordinates of their parts (``head16``), judged by recall@5 and @10
  against the exact part ranking.

Tuning corpora (short-steps, long-pages of benchmarks/_search_corpus.py)
and held-out families (benchmarks/corpora_heldout.py) are reported apart;
choose on the tuning ones. Times are medians over the queries (ms), each
the best of ``--repeat`` calls, on whatever load the machine has (printed).

Run: .venv/bin/python benchmarks/bench_parts_screen.py [--items N] [--facts F] [--m 32,128]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpora_heldout as heldout
import numpy as np
from _search_corpus import SHAPES, make_corpus

from agents.memory import MemoryItem
from agents.memory._vectors import checked_vectors, cosines
from agents.memory.search import EmbedParts, WordLlamaEmbedder
from agents.memory.search._item_vectors import ItemVectors, Vectors


def load() -> str:
    """Return the load average (1, 5, 15 minutes)."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def corpora(
    n: int, facts: int, seed: int
) -> list[tuple[str, str, list[dict[str, Any]], list[str]]]:
    """Return ``(side, name, rows, queries)`` of every tuning and held-out corpus."""
    out = []
    for name in ("short-steps", "long-pages"):
        rows, planted = make_corpus(SHAPES[name], n, facts, seed=seed)
        queries = [q for fact in planted for q in (fact.lexical, fact.paraphrased)]
        out.append(("tuning", name, rows, queries))
    for family in heldout.FAMILIES:
        made = heldout.make_family(family, n, facts, seed)
        queries = [q for kind in heldout.KINDS for q, _ in made.queries(kind)]
        out.append(("held-out", family, made.items, queries))
    return out


def table(rows: Sequence[dict[str, Any]], parts: EmbedParts, embedder: Any) -> Vectors:
    """Return the index's vector table of ``rows`` cut by ``parts`` (screened where large)."""
    items = {key: MemoryItem(**row) for key, row in enumerate(rows)}
    return ItemVectors(parts).embed(embedder, None, items, batch_size=256, progress=None)


def top(scores: dict[int, float], k: int) -> list[int]:
    """Return the keys of the ``k`` best scores (ties by key)."""
    return [key for key, _ in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:k]]


def best_ms(call: Callable[[], object], repeat: int) -> float:
    """Return the best wall time of ``repeat`` calls, in ms."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return 1000 * min(times)


class Layout:
    """The part table's rows per item, and what each screen reads."""

    def __init__(self, parts: Vectors, whole: Vectors, clusters: int) -> None:
        slots = len(parts.key_at)
        self.parts = parts
        self.used = parts.used
        self.ref_row = parts.ref_row[: parts.refs]
        self.start = parts.start[:slots]
        self.keys = np.asarray(parts.key_at, dtype=np.int64)
        lengths = np.diff(np.r_[self.start, parts.refs])
        owner = np.repeat(np.arange(slots), lengths)
        matrix = parts.matrix[: parts.used]
        total = np.zeros((slots, matrix.shape[1]), dtype=np.float64)
        np.add.at(total, owner, matrix[self.ref_row])
        self.mean = (total / np.linalg.norm(total, axis=1, keepdims=True)).astype(np.float32)
        # The widest angle of an item's part from the item's mean (the item cone).
        self.cone = np.minimum.reduceat(
            np.einsum("ij,ij->i", matrix[self.ref_row], self.mean[owner]), self.start
        )
        # An item's whole vector is the one row of its slot (equal vectors share a row).
        whole_slots = [whole.slot_of[int(key)] for key in self.keys]
        self.whole = whole.matrix[whole.ref_row[whole.start[whole_slots]]]
        screen = parts._screen_now(np)
        self.basis16 = np.ascontiguousarray(screen.basis[:, :16])
        self.head16 = np.ascontiguousarray(matrix @ self.basis16)
        self.clusters, self.cluster_of, self.cluster_cone = kmeans(matrix, clusters)

    def exact_top(self, query: Any, k: int) -> list[int]:
        return top(self.parts.scores(query, k), k)

    def candidates(self, how: str, query: Any, m: int) -> Any:
        """Return the keys of the best ``m`` items by the screen ``how``."""
        if how == "mean":
            approx = cosines(self.mean, query)
        elif how == "whole":
            approx = cosines(self.whole, query)
        else:
            rows = cosines(self.head16, query @ self.basis16)
            approx = np.maximum.reduceat(rows[self.ref_row], self.start)
        return self.keys[np.argpartition(-approx, m)[:m]]

    def screened(self, how: str, query: Any, m: int, k: int) -> list[int]:
        return top(self.parts.scores_of(query, self.candidates(how, query, m).tolist()), k)


def kmeans(matrix: Any, k: int, rounds: int = 5) -> tuple[Any, Any, Any]:
    """Return ``k`` unit centroids of the rows (spherical k-means), each row's centroid, and each cone's cosine."""
    rng = np.random.default_rng(0)
    centroids = matrix[rng.choice(len(matrix), min(k, len(matrix)), replace=False)].copy()

    def nearest() -> Any:
        step = 8192  # a block of rows at a time: the products of all rows are not held at once
        return np.concatenate(
            [
                np.argmax(matrix[at : at + step] @ centroids.T, axis=1)
                for at in range(0, len(matrix), step)
            ]
        )

    for _ in range(rounds):
        of = nearest()
        total = np.zeros(centroids.shape, dtype=np.float64)
        np.add.at(total, of, matrix)
        norms = np.linalg.norm(total, axis=1, keepdims=True)
        norms[norms == 0] = 1
        centroids = (total / norms).astype(np.float32)
    of = nearest()
    cone = np.ones(len(centroids))
    np.minimum.at(cone, of, np.einsum("ij,ij->i", matrix, centroids[of]))
    return centroids, of, cone


def cone_bound(cosine: Any, widest: Any) -> Any:
    """Return the highest cosine a query at ``cosine`` to a cone's axis can have with a vector in the cone."""
    return np.cos(
        np.maximum(0, np.arccos(np.clip(cosine, -1, 1)) - np.arccos(np.clip(widest, -1, 1)))
    )


def measure(
    layout: Layout, whole: Vectors, queries: Any, ms: Sequence[int], repeat: int
) -> dict[str, float]:
    """Return the figures of one corpus: times (ms), recall@5/@10 of each screen, what the exact bounds keep."""
    out: dict[str, list[float]] = {}

    def put(label: str, value: float) -> None:
        out.setdefault(label, []).append(value)

    for query in queries:
        put("ms exact", best_ms(lambda query=query: layout.parts.scores(query, 5), repeat))
        put("ms whole", best_ms(lambda query=query: whole.scores(query, 5), repeat))
        exact = {k: layout.exact_top(query, k) for k in (5, 10)}
        scores = layout.parts.scores(query, 5)
        cut = min(scores.values())
        put(
            "item cone keeps",
            float((cone_bound(cosines(layout.mean, query), layout.cone) >= cut).mean()),
        )
        kept = cone_bound(cosines(layout.clusters, query), layout.cluster_cone) >= cut
        put("cluster cone keeps", float(kept[layout.cluster_of].mean()))
        for how in ("mean", "whole", "head16"):
            for m in ms:
                label = f"{how} M={m}"
                put(
                    f"ms {label}",
                    best_ms(
                        lambda how=how, m=m, query=query: layout.screened(how, query, m, 5), repeat
                    ),
                )
                for k in (5, 10):
                    got = layout.screened(how, query, m, k)
                    put(f"r@{k} {label}", len(set(got) & set(exact[k])) / k)
    return {
        label: statistics.mean(values)
        if label.startswith(("r@", "item", "cluster"))
        else statistics.median(values)
        for label, values in out.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--facts", type=int, default=40)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--m", default="32,128")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--corpora", default="", help="only these (comma-separated names)")
    parser.add_argument("--clusters", type=int, default=1024, help="k-means cones of the parts")
    args = parser.parse_args()
    ms = [int(m) for m in args.m.split(",")]
    embedder = WordLlamaEmbedder()
    print(f"parts screens: {args.items} items, {args.facts} facts, seed {args.seed}; load {load()}")
    for side, name, rows, texts in corpora(args.items, args.facts, args.seed):
        if args.corpora and name not in args.corpora.split(","):
            continue
        parts = table(rows, EmbedParts(), embedder)
        whole = table(rows, EmbedParts.WHOLE, embedder)
        queries = checked_vectors(embedder, texts)  # unit vectors, as a query is
        layout = Layout(parts, whole, args.clusters)
        figures = measure(layout, whole, queries, ms, args.repeat)
        print(
            f"\n== {side} {name}: {parts.used} distinct parts, {parts.refs} part refs, {len(queries)} queries (load {load()})"
        )
        for label, value in figures.items():
            print(f"  {label:24} {value:8.3f}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
