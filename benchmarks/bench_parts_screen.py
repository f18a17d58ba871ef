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

``--section binary`` measures binary-code screens instead (:data:`CODES`):
each part's sign bits, the Hamming distance to the query's, each item's
lowest distance, the ``M`` items of lowest distance (with ties) scored
exactly; judged by the share of queries whose top 5 is the exact top 5
(same keys, same order), recall@5 of the planted facts, and the least
``M`` each query needs. ``--section steps`` times each numpy step of a
binary or a float16 screen over the distinct parts, and of the exact
block screen (the bound of 39 floats a part, through ``einsum`` and
through a BLAS product over a column-major copy).

``--section ivf`` measures a partitioned index instead (:class:`Partitioned`):
the distinct parts in k-means clusters (about the square root of their
number), a query scoring exactly the parts of the clusters whose centroid
is nearest (``--probes``, a share of the clusters), each item's best
scored part, then the best ``M`` items scored exactly over all their
parts; judged by the share of queries whose top 5, and whose top 100 (the
hybrid blend's discount reads the 100th best cosine), are the exact ones,
recall@5 against the exact top 5 and of the planted facts, and the share
of the parts scored.

Tuning corpora (short-steps, long-pages of benchmarks/_search_corpus.py,
crowded of benchmarks/_crowded_corpus.py) and held-out families
(benchmarks/corpora_heldout.py, ``--side held-out``) are reported apart;
choose on the tuning ones. Times are medians over the queries (ms), each
the best of ``--repeat`` calls, on whatever load the machine has (printed).

Run: .venv/bin/python benchmarks/bench_parts_screen.py [--items N] [--facts F] [--m 32,128]
     [--section screens|binary|steps|ivf] [--side tuning|held-out|both] [--probes 0.05,0.1,0.2]
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

import _crowded_corpus as crowded
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
    n: int, facts: int, seed: int, *, held_out: bool = True
) -> list[tuple[str, str, list[dict[str, Any]], list[tuple[str, str, int]]]]:
    """Return ``(side, name, rows, queries)`` of every tuning (and held-out) corpus, a query ``(kind, text, answer)``."""
    out = []
    for name in ("short-steps", "long-pages"):
        rows, planted = make_corpus(SHAPES[name], n, facts, seed=seed)
        queries = [
            (kind, text, fact.step)
            for fact in planted
            for kind, text in (("lexical", fact.lexical), ("paraphrased", fact.paraphrased))
        ]
        out.append(("tuning", name, rows, queries))
    rows, sets = crowded.make_corpus(n, facts, seed)
    out.append(
        ("tuning", "crowded", rows, [(kind, q, step) for kind in sets for q, step in sets[kind]])
    )
    if held_out:
        for family in heldout.FAMILIES:
            made = heldout.make_family(family, n, facts, seed)
            queries = [(kind, q, at) for kind in heldout.KINDS for q, at in made.queries(kind)]
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


CODES = ("sign", "centred", "centred-float")
"""The binary screens of ``--section binary``.

``sign``: each part's sign bits (256 dims: 4 uint64 words), the query's
too, Hamming distance (XOR and ``np.bitwise_count``); ``centred``: the
same bits of each part minus the mean of the table's parts (a table
statistic: RAM, which holds equal parts once, and a store, which holds
them as read, would differ); ``centred-float``: the centred query's floats
against the centred parts' signs (asymmetric; as costly as the exact
product in numpy, quality only).
"""


class Binary:
    """One binary screen of a part table: the codes of every distinct row and how an item's best code is taken."""

    def __init__(self, parts: Vectors, how: str) -> None:
        slots = len(parts.key_at)
        matrix = parts.matrix[: parts.used]
        self.how = how
        self.parts = parts
        self.ref_row = parts.ref_row[: parts.refs]
        self.start = parts.start[:slots]
        self.keys = np.asarray(parts.key_at, dtype=np.int64)
        self.center = (
            np.zeros(matrix.shape[1], dtype=np.float32)
            if how == "sign"
            else matrix.mean(axis=0).astype(np.float32)
        )
        bits = (matrix - self.center) > 0
        self.codes = np.packbits(bits, axis=1).view(np.uint64)  # (rows, 4) for 256 dims
        self.signs = (
            np.where(bits, 1.0, -1.0).astype(np.float32) if how == "centred-float" else None
        )

    def distance(self, query: Any) -> Any:
        """Return each item's best (lowest) distance of a part to ``query``: Hamming, or minus the asymmetric product."""
        if self.signs is not None:
            rows = -cosines(self.signs, (query - self.center).astype(np.float32))
        else:
            code = np.packbits((query - self.center) > 0).view(np.uint64)
            rows = np.bitwise_count(self.codes ^ code).sum(axis=1, dtype=np.int32)
        return np.minimum.reduceat(rows[self.ref_row], self.start)

    def screened(self, query: Any, m: int, k: int, distance: Any | None = None) -> list[int]:
        """Return the best ``k`` keys among the ``m`` items of lowest distance (with ties), scored exactly."""
        best = self.distance(query) if distance is None else distance
        cut = np.partition(best, min(m, len(best)) - 1)[min(m, len(best)) - 1]
        return top(self.parts.scores_of(query, self.keys[best <= cut].tolist()), k)


def binary(
    parts: Vectors, queries: Any, answers: Sequence[int], ms: Sequence[int], repeat: int, k: int = 5
) -> dict[str, float]:
    """Return one corpus's figures of each binary screen: top-k agreement, recall@k, the M each query needs, times."""
    out: dict[str, list[float]] = {}

    def put(label: str, value: float) -> None:
        out.setdefault(label, []).append(value)

    screens = {how: Binary(parts, how) for how in CODES}
    for query, answer in zip(queries, answers, strict=True):
        exact = top(parts.scores(query, k), k)
        put("r@5 exact", float(answer in exact))
        put("ms exact", best_ms(lambda query=query: parts.scores(query, k), repeat))
        for how, screen in screens.items():
            put(f"ms {how} distances", best_ms(lambda s=screen, q=query: s.distance(q), repeat))
            distance = screen.distance(query)
            slots = [parts.slot_of[key] for key in exact]
            # The least M that takes in every exact top-k item (the items tied at the cut come along).
            put(
                f"{how} M needed", max(int((distance < distance[slot]).sum()) + 1 for slot in slots)
            )
            for m in ms:
                got = screen.screened(query, m, k, distance)
                put(f"{how} M={m} agree", float(got == exact))
                put(f"{how} M={m} r@5", float(answer in got))
                if how == "sign":
                    put(
                        f"ms sign M={m}",
                        best_ms(lambda s=screen, q=query, m=m: s.screened(q, m, k), repeat),
                    )
    figures: dict[str, float] = {}
    for label, values in out.items():
        if label.endswith("M needed"):
            for share in (50, 90, 99, 100):
                figures[f"{label} p{share}"] = float(np.percentile(values, share))
        elif label.startswith("ms"):
            figures[label] = statistics.median(values)
        else:
            figures[label] = statistics.mean(values)
    return figures


def head_query(screen: Any, query: Any) -> Any:
    """Return the query's side of the block bound: its first block's coordinates in the screen's basis, then each other block's length."""
    return screen.turn(np, query)[0]


def steps(parts: Vectors, queries: Any, repeat: int) -> dict[str, float]:
    """Return the cost of each numpy step of the binary and float16 screens over every distinct part (median ms over the queries).

    ``f32 product``: the exact product (``cosines``); ``f16 product``: the
    same over float16 parts (numpy has no half-precision kernel: it
    converts each element); ``f16 to f32``: the conversion alone; the
    binary distance with row-major codes ``(rows, 4)`` (XOR,
    ``bitwise_count``, a sum along the rows) and with column-major codes
    ``(4, rows)`` (four XORs and counts, added); ``best per item``: each
    item's lowest distance (``minimum.reduceat`` over the items' rows);
    ``block bound``: the exact screen's bound of every part (39 floats a
    part, see ``Screen``) through ``einsum`` over the row-major head, as
    released, and through one BLAS product over a column-major copy, timed
    alone (best of the calls) and right after a query's other numpy work
    (``parts.scores``), where OpenBLAS's threads must wake again.
    """
    matrix = parts.matrix[: parts.used]
    half = matrix.astype(np.float16)
    codes = np.packbits(matrix > 0, axis=1).view(np.uint64)
    columns = np.ascontiguousarray(codes.T)
    ref_row = parts.ref_row[: parts.refs]
    start = parts.start[: len(parts.key_at)]
    screen = parts._screen_now(np)
    head = screen.head[: parts.used]
    columns_head = np.ascontiguousarray(head.T)
    out: dict[str, list[float]] = {}
    error = 0.0
    for query in queries[:8]:  # the slow float16 products: a few queries are enough
        code = np.packbits(query > 0).view(np.uint64)
        half_query = query.astype(np.float16)

        def by_columns(code: Any = code) -> Any:
            total = np.bitwise_count(columns[0] ^ code[0]).astype(np.uint16)
            for word in range(1, len(columns)):
                total += np.bitwise_count(columns[word] ^ code[word])
            return total

        distance = by_columns()
        turned_query = head_query(screen, query)
        calls: dict[str, Callable[[], object]] = {
            "f32 product": lambda q=query: cosines(matrix, q),
            "f16 product": lambda q=half_query: cosines(half, q),
            "f16 to f32": lambda: half.astype(np.float32),
            "binary rows: xor": lambda c=code: codes ^ c,
            "binary rows: xor+count+sum": lambda c=code: np.bitwise_count(codes ^ c).sum(
                axis=1, dtype=np.int32
            ),
            "binary columns: xor+count+add": by_columns,
            "best per item": lambda d=distance: np.minimum.reduceat(d[ref_row], start),
            "block bound: einsum, row-major": lambda q=query: screen.bounds(np, q, parts.used),
            "block bound: BLAS, column-major": lambda h=turned_query: h @ columns_head,
        }
        for label, call in calls.items():
            out.setdefault(f"ms {label}", []).append(best_ms(call, repeat))
        after = []
        for _ in range(repeat):
            parts.scores(query, 5)  # a query's numpy work first, as in a search
            began = time.perf_counter()
            head_query(screen, query) @ columns_head
            after.append(1000 * (time.perf_counter() - began))
        out.setdefault("ms block bound: BLAS, after a query", []).append(statistics.median(after))
        exact = cosines(matrix, query)
        error = max(error, float(np.abs(cosines(half.astype(np.float32), query) - exact).max()))
    figures = {label: statistics.median(values) for label, values in out.items()}
    figures["f16 largest cosine error, 1e-6"] = 1e6 * error
    return figures


class Partitioned:
    """A partitioned (IVF) index of a part table: k-means clusters of the distinct parts, probed nearest first.

    Approximate: an item whose best part lies in a cluster not probed is
    ranked by its best part among the probed ones, or not at all; the best
    ``M`` items so found are then scored exactly over all their parts.
    """

    def __init__(self, parts: Vectors) -> None:
        slots = len(parts.key_at)
        self.parts = parts
        self.matrix = parts.matrix[: parts.used]
        self.ref_row = parts.ref_row[: parts.refs]
        self.start = parts.start[:slots]
        self.keys = np.asarray(parts.key_at, dtype=np.int64)
        self.centroids, cluster_of, _ = kmeans(self.matrix, max(1, int(len(self.matrix) ** 0.5)))
        self.order = np.argsort(cluster_of, kind="stable")  # the rows, cluster after cluster
        self.bounds = np.searchsorted(cluster_of[self.order], np.arange(len(self.centroids) + 1))

    def probed(self, query: Any, probes: float) -> Any:
        """Return the rows of the clusters nearest ``query`` (a ``probes`` share of them)."""
        count = max(1, round(probes * len(self.centroids)))
        nearest = np.argpartition(-cosines(self.centroids, query), count - 1)[:count]
        return np.concatenate([self.order[self.bounds[c] : self.bounds[c + 1]] for c in nearest])

    def screened(self, query: Any, probes: float, m: int, k: int) -> tuple[list[int], int]:
        """Return the best ``k`` keys among the ``m`` best items of the probed parts, scored exactly, and how many parts were probed."""
        rows = self.probed(query, probes)
        scored = np.full(len(self.matrix), -np.inf, dtype=np.float32)
        scored[rows] = cosines(self.matrix[rows], query)
        best = np.maximum.reduceat(scored[self.ref_row], self.start)
        found = np.flatnonzero(best > -np.inf)
        chosen = found[np.argsort(-best[found], kind="stable")[:m]]
        return top(self.parts.scores_of(query, self.keys[chosen].tolist()), k), len(rows)


def partitioned(
    parts: Vectors, queries: Any, answers: Sequence[int], probes: Sequence[float], repeat: int
) -> dict[str, float]:
    """Return one corpus's figures of the partitioned index: top-5 and top-100 agreement, recall@5, parts probed, times."""
    out: dict[str, list[float]] = {}

    def put(label: str, value: float) -> None:
        out.setdefault(label, []).append(value)

    took = time.perf_counter()
    index = Partitioned(parts)
    build_s = time.perf_counter() - took
    for query, answer in zip(queries, answers, strict=True):
        exact = {k: top(parts.scores(query, k), k) for k in (5, 100)}
        put("r@5 exact", float(answer in exact[5]))
        put("ms exact", best_ms(lambda query=query: parts.scores(query, 5), repeat))
        for share in probes:
            for k, m in ((5, 4 * 5 + 32), (100, 2 * 100 + 32)):
                got, rows = index.screened(query, share, m, k)
                put(f"probe {share:.0%} top{k} agree", float(got == exact[k]))
                if k == 5:
                    put(f"probe {share:.0%} r@5 vs exact", len(set(got) & set(exact[5])) / 5)
                    put(f"probe {share:.0%} r@5 facts", float(answer in got))
                    put(f"probe {share:.0%} parts probed", rows / len(index.matrix))
                    put(
                        f"ms probe {share:.0%}",
                        best_ms(
                            lambda q=query, s=share: index.screened(q, s, 4 * 5 + 32, 5), repeat
                        ),
                    )
    figures = {
        label: statistics.median(values) if label.startswith("ms") else statistics.mean(values)
        for label, values in out.items()
    }
    figures["clusters"] = float(len(index.centroids))
    figures["build s"] = build_s
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--facts", type=int, default=40)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--m", default="32,128")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--corpora", default="", help="only these (comma-separated names)")
    parser.add_argument("--clusters", type=int, default=1024, help="k-means cones of the parts")
    parser.add_argument(
        "--section",
        default="screens",
        choices=("screens", "binary", "steps", "ivf"),
        help="screens: bounds and approximate screens; binary: the binary-code screens (CODES); steps: what each numpy step of the binary, float16 and block screens costs; ivf: a partitioned index (Partitioned)",
    )
    parser.add_argument("--probes", default="0.05,0.1,0.2", help="ivf: shares of clusters probed")
    parser.add_argument(
        "--side", default="tuning", choices=("tuning", "held-out", "both"), help="which corpora"
    )
    args = parser.parse_args()
    ms = [int(m) for m in args.m.split(",")]
    embedder = WordLlamaEmbedder()
    print(
        f"parts {args.section}: {args.items} items, {args.facts} facts, seed {args.seed}; load {load()}"
    )
    held = args.side != "tuning"
    for side, name, rows, texts in corpora(args.items, args.facts, args.seed, held_out=held):
        if (args.corpora and name not in args.corpora.split(",")) or (
            args.side == "held-out" and side == "tuning"
        ):
            continue
        parts = table(rows, EmbedParts(), embedder)
        queries = checked_vectors(embedder, [text for _, text, _ in texts])  # unit, as a query is
        if args.section == "steps":
            figures = steps(parts, queries, args.repeat)
        elif args.section == "ivf":
            probes = [float(share) for share in args.probes.split(",")]
            answers = [at for _, _, at in texts]
            figures = partitioned(parts, queries, answers, probes, args.repeat)
        elif args.section == "binary":
            figures = binary(parts, queries, [at for _, _, at in texts], ms, args.repeat)
        else:
            whole = table(rows, EmbedParts.WHOLE, embedder)
            figures = measure(Layout(parts, whole, args.clusters), whole, queries, ms, args.repeat)
        print(
            f"\n== {side} {name}: {len(rows)} items, {parts.used} distinct parts, {parts.refs} part refs, {len(queries)} queries (load {load()})"
        )
        for label, value in figures.items():
            print(f"  {label:28} {value:9.3f}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
