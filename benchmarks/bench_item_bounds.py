"""An item-level box bound for the parts screen: what share of items it prunes at the exact cut, and what it costs.

The RAM screen over parts (``Screen`` in ``agents/memory/search/_item_vectors.py``)
bounds every distinct part vector (the first block's 32 coordinates in
the screen's basis, then the length of every other block: 39 floats)
and takes each item's best. This benchmark asks whether a bound per
item, read before any part, could spare most items' parts:

* ``box``: per item, the least and the greatest of each of the first
  block's 32 coordinates over its parts and, for every other block, the
  greatest length over its parts (71 floats an item). A part's product
  with the query is at most ``sum(max(q * lo, q * hi))`` over the 32
  coordinates plus ``|q_block| * maxlen`` over the other blocks; kept as
  a centre and a radius, that is one product of 71 floats an item
  (``centre . q + radius . |q| + maxlen . lengths``).
* ``own box + shared rows``: the rows that several items hold (a status,
  the application, the subtask repeated word for word) scored exactly
  once a query; the box over each item's own rows alone. An item is kept
  where its own box reaches the cut or one of its shared rows does.
* ``2 boxes`` / ``4 boxes``: each item's own rows split by the sign of
  their first (and second) coordinate in the screen's basis, a box each.
* ``box, head capped``: the box's head product also capped by the
  query's head length times the greatest head length of the item's parts
  (Cauchy-Schwarz, as for the other blocks).
* ``parts' bound`` (the screen as released): each item's best part bound,
  the least any bound built from these 39 floats a part can keep.

For each query, ``k = 5`` and a hybrid pool ``k = 100``, the cut is the
``k``-th best item cosine scored exactly (every part), and a bound prunes
an item whose bound is below it. The times (process CPU, ms, best of
``--repeat`` in a tight loop, medians over the queries) are the whole-item
product (the baseline), the parts' bound with each item's best of it, the
box bound alone, and the box bound then the parts' bound of the items
kept, their rows gathered (the oracle cut given: the least such a path
could cost before any exact score).

Queries: the five of ``bench_search_costs.py`` and the lexical and
paraphrased queries of ``--facts`` of its planted facts, on its ``parts``
section's steps (``steps(n)``); with ``--side tuning`` or ``held-out``,
the corpora of ``bench_parts_screen.py`` and their planted facts' queries.

Run: .venv/bin/python benchmarks/bench_item_bounds.py [--items 10000,20000]
     [--embedders hashing,wordllama] [--facts 10] [--repeat 5] [--side costs|tuning|held-out]
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

import numpy as np
from _search_corpus import SHAPES, make_corpus
from bench_search_costs import QUERIES, steps

from agents.memory import MemoryItem
from agents.memory._vectors import checked_vectors, cosines
from agents.memory.search import EmbedParts, HashingEmbedder
from agents.memory.search._item_vectors import SCREEN_MARGIN, ItemVectors, Vectors

KS = (5, 100)
"""The cuts measured: a top 5, and the hybrid blend's pool of 100."""


def load() -> str:
    """Return the load average (1, 5, 15 minutes)."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def cpu_ms(call: Callable[[], object], repeat: int) -> float:
    """Return the best process CPU time of ``repeat`` calls, in ms."""
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        call()
        best = min(best, time.process_time() - start)
    return 1000 * best


def table(rows: Sequence[dict[str, Any]], parts: EmbedParts, embedder: Any) -> Vectors:
    """Return the index's vector table of ``rows`` cut by ``parts``, screened."""
    items = {key: MemoryItem(**row) for key, row in enumerate(rows)}
    vectors = ItemVectors(parts).embed(embedder, None, items, batch_size=256, progress=None)
    vectors.prepare(screen=True)
    return vectors


class Boxes:
    """Each item's boxes in the screen's basis: centre and radius of the head, greatest length of each other block."""

    def __init__(self, head: Any, width: int, ref_row: Any, start: Any, groups: Any) -> None:
        # groups: for each reference, its box's number; boxes of an item are consecutive.
        self.width = width
        order = np.lexsort(
            (groups, np.repeat(np.arange(len(start)), np.diff(np.r_[start, len(ref_row)])))
        )
        rows = ref_row[order]
        box_of = groups[order]
        item_of = np.repeat(np.arange(len(start)), np.diff(np.r_[start, len(ref_row)]))[order]
        new = np.r_[True, (box_of[1:] != box_of[:-1]) | (item_of[1:] != item_of[:-1])]
        begins = np.flatnonzero(new)
        self.item = item_of[begins]  # the item of each box
        rowed = head[rows]
        lo = np.minimum.reduceat(rowed[:, :width], begins)
        hi = np.maximum.reduceat(rowed[:, :width], begins)
        longest = np.maximum.reduceat(rowed[:, width:], begins)
        # The head's greatest length too: its product is also at most |q_head| times that.
        self.head_longest = np.maximum.reduceat(np.linalg.norm(rowed[:, :width], axis=1), begins)
        self.packed = np.ascontiguousarray(
            np.concatenate([(lo + hi) / 2, (hi - lo) / 2, longest], axis=1), dtype=np.float32
        )
        self.items = len(start)

    def query(self, turned: Any) -> Any:
        """Return the packed query: the head's coordinates, their magnitudes, the other blocks' lengths."""
        head_query = turned[0]
        coords = head_query[: self.width]
        return np.concatenate([coords, np.abs(coords), head_query[self.width :]]).astype(np.float32)

    def bounds(self, packed_query: Any) -> Any:
        """Return each box's bound (one product of 71 floats a box)."""
        return cosines(self.packed, packed_query) + SCREEN_MARGIN

    def capped(self, packed_query: Any) -> Any:
        """Return each box's bound, its head's product also capped by the product of the two heads' lengths."""
        width = 2 * self.width
        head = cosines(self.packed[:, :width], packed_query[:width])
        head_length = float(np.linalg.norm(packed_query[: self.width]))
        rest = cosines(self.packed[:, width:], packed_query[width:])
        return np.minimum(head, head_length * self.head_longest) + rest + SCREEN_MARGIN

    def item_bounds(self, packed_query: Any, *, capped: bool = False) -> Any:
        """Return each item's best box bound (``-inf`` where it has none)."""
        bound = self.capped(packed_query) if capped else self.bounds(packed_query)
        if len(bound) == self.items and (self.item == np.arange(self.items)).all():
            return bound
        out = np.full(self.items, -np.inf, dtype=np.float32)
        np.maximum.at(out, self.item, bound)
        return out


def measure(vectors: Vectors, queries: Any, repeat: int) -> dict[str, list[float]]:
    """Return, per figure, its value for each query (shares of items pruned; CPU ms)."""
    screen = vectors._screen_now(np)
    slots = len(vectors.key_at)
    used = vectors.used
    refs = vectors.refs
    ref_row = vectors.ref_row[:refs]
    start = vectors.start[:slots]
    head = screen.head[:used]
    width = screen.edges[1]
    matrix = vectors.matrix[:used]
    holders = np.bincount(ref_row, minlength=used)  # items holding each row (once an item)
    shared = holders >= 2
    lengths = np.diff(np.r_[start, refs])
    item_of_ref = np.repeat(np.arange(slots), lengths)
    # Boxes over all of an item's rows; over its own rows only (shared rows scored apart);
    # own rows split in 2 and 4 by the signs of their first coordinates.
    own = ~shared[ref_row]
    boxes = {"box": Boxes(head, width, ref_row, start, np.zeros(refs, dtype=np.int64))}
    own_start = np.searchsorted(np.flatnonzero(own), start)  # each item's first own reference
    own_rows = ref_row[own]
    own_items = item_of_ref[own]
    present = np.unique(own_items)
    first_own = np.searchsorted(own_items, present)
    sign1 = (head[own_rows, 0] >= 0).astype(np.int64)
    sign2 = (head[own_rows, 1] >= 0).astype(np.int64)
    for label, groups in (
        ("own box", np.zeros(len(own_rows), dtype=np.int64)),
        ("own 2 boxes", sign1),
        ("own 4 boxes", 2 * sign1 + sign2),
    ):
        made = Boxes(head, width, own_rows, first_own, groups)
        made.item = present[made.item]
        made.items = slots
        boxes[label] = made
    del own_start
    shared_rows = np.flatnonzero(shared)
    # Items holding each shared row (CSR): the items a shared row above the cut keeps.
    shared_refs = np.flatnonzero(shared[ref_row])
    by_row = np.argsort(ref_row[shared_refs], kind="stable")
    holder_items = item_of_ref[shared_refs][by_row]
    holder_start = np.searchsorted(ref_row[shared_refs][by_row], shared_rows)
    holder_end = np.searchsorted(ref_row[shared_refs][by_row], shared_rows, side="right")
    shared_matrix = np.ascontiguousarray(matrix[shared_rows])
    whole_like = np.ascontiguousarray(
        matrix[ref_row[start]]
    )  # slots x 256: a whole-item product's size

    figures: dict[str, list[float]] = {}

    def put(label: str, value: float) -> None:
        figures.setdefault(label, []).append(value)

    for query in queries:
        turned = screen.turn(np, query)
        sims = cosines(matrix, query)
        best = np.maximum.reduceat(sims[ref_row], start)
        rows_bound = screen.bounds_turned(turned, used)
        parts_item = np.maximum.reduceat(rows_bound[ref_row], start)
        packed = {label: made.query(turned) for label, made in boxes.items()}
        item_box = {label: made.item_bounds(packed[label]) for label, made in boxes.items()}
        item_box["capped"] = boxes["box"].item_bounds(packed["box"], capped=True)
        shared_sims = cosines(shared_matrix, query)
        for k in KS:
            cut = np.partition(best, slots - k)[slots - k]
            put(f"k={k} parts' bound: items kept", float(np.mean(parts_item >= cut)))
            put(f"k={k} box: items kept", float(np.mean(item_box["box"] >= cut)))
            put(f"k={k} box, head capped: items kept", float(np.mean(item_box["capped"] >= cut)))
            high = np.flatnonzero(shared_sims >= cut)
            kept_by_shared = np.zeros(slots, dtype=bool)
            for place in high.tolist():
                kept_by_shared[holder_items[holder_start[place] : holder_end[place]]] = True
            reach = best >= cut
            # A true bound keeps every item whose exact best reaches the cut: checked, not assumed.
            missed = sum(
                int(np.count_nonzero(reach & ~(item_box[label] >= cut)))
                for label in ("box", "capped")
            )
            for label in ("own box", "own 2 boxes", "own 4 boxes"):
                kept = (item_box[label] >= cut) | kept_by_shared
                missed += int(np.count_nonzero(reach & ~kept))
                put(f"k={k} {label} + shared rows: items kept", float(np.mean(kept)))
            put(f"k={k} items a bound missed (must be 0)", float(missed))
            kept = item_box["box"] >= cut
            put(f"k={k} box: part refs kept", float(lengths[kept].sum() / refs))
            put(f"k={k} cut (k-th best item cosine)", float(cut))
        put("box bound of the median item", float(np.median(item_box["box"])))
        put("box bound of the 1st-percentile item", float(np.quantile(item_box["box"], 0.01)))
        put("box, head capped, of the median item", float(np.median(item_box["capped"])))
        put("parts' bound of the median item", float(np.median(parts_item)))
        # Times: CPU ms, tight loop.
        put("ms whole-item product", cpu_ms(lambda query=query: cosines(whole_like, query), repeat))
        put(
            "ms parts' bound + items' best",
            cpu_ms(
                lambda turned=turned: np.maximum.reduceat(
                    screen.bounds_turned(turned, used)[ref_row], start
                ),
                repeat,
            ),
        )
        put(
            "ms box bound (1 box an item)",
            cpu_ms(lambda packed=packed: boxes["box"].bounds(packed["box"]), repeat),
        )
        put(
            "ms shared rows scored exactly",
            cpu_ms(lambda query=query: cosines(shared_matrix, query), repeat),
        )
        cut5 = np.partition(best, slots - 5)[slots - 5]

        def box_then_parts(cut: float = cut5, packed: Any = packed, turned: Any = turned) -> Any:
            kept_items = np.flatnonzero(boxes["box"].bounds(packed["box"]) >= cut)
            places, offsets = vectors._places(np, kept_items)
            rows = ref_row[places]
            bound = cosines(head[rows], turned[0]) + SCREEN_MARGIN
            return np.maximum.reduceat(bound, offsets) if len(offsets) else bound

        put("ms box, then kept items' parts' bound (k=5)", cpu_ms(box_then_parts, repeat))
    return figures


def report(title: str, vectors: Vectors, queries: Any, repeat: int) -> None:
    """Print the figures of ``queries`` over ``vectors``: median, least and greatest over the queries."""
    figures = measure(vectors, queries, repeat)
    shared = int(np.count_nonzero(np.bincount(vectors.ref_row[: vectors.refs]) >= 2))
    print(
        f"\n== {title}: {vectors.used} distinct parts ({shared} held by 2 items or more), "
        f"{vectors.refs} part refs, {len(queries)} queries (load {load()})"
    )
    print(f"  {'':48} {'median':>8} {'min':>8} {'max':>8}")
    for label, values in figures.items():
        median = statistics.median(values)
        print(f"  {label:48} {median:8.3f} {min(values):8.3f} {max(values):8.3f}")
    sys.stdout.flush()


def embedder_named(name: str) -> Any:
    """Return a warm embedder, ``None`` where ``wordllama`` is not installed (said so)."""
    if name != "wordllama":
        return HashingEmbedder(256)
    try:
        from agents.memory.search import WordLlamaEmbedder

        embedder = WordLlamaEmbedder()
        embedder(["warm"])
    except Exception as exc:  # an optional model: say why and go on
        print(f"\n(wordllama skipped: {exc})")
        return None
    return embedder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--items", default="10000,20000")
    parser.add_argument("--embedders", default="hashing,wordllama")
    parser.add_argument(
        "--facts", type=int, default=10, help="planted facts asked (2 queries each)"
    )
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--side",
        default="costs",
        choices=("costs", "tuning", "held-out"),
        help="costs: bench_search_costs.py's steps; tuning, held-out: bench_parts_screen.py's corpora",
    )
    args = parser.parse_args()
    print(f"item-level box bound: load {load()}")
    for name in args.embedders.split(","):
        embedder = embedder_named(name)
        if embedder is None:
            continue
        for n in (int(text) for text in args.items.split(",")):
            if args.side != "costs":
                from bench_parts_screen import corpora

                held = args.side == "held-out"
                for side, corpus, rows, asked in corpora(n, args.facts, 1, held_out=held):
                    if side != args.side:
                        continue
                    vectors = table(rows, EmbedParts(), embedder)
                    queries = checked_vectors(embedder, [text for _, text, _ in asked])
                    report(f"{name}, {side} {corpus}, {n} items", vectors, queries, args.repeat)
                continue
            rows = steps(n)
            _, planted = make_corpus(SHAPES["short-steps"], n, min(240, n), seed=1)
            texts = [
                text for fact in planted[: args.facts] for text in (fact.lexical, fact.paraphrased)
            ]
            vectors = table(rows, EmbedParts(), embedder)
            fixed = checked_vectors(embedder, list(QUERIES))
            report(f"{name}, {n} steps, its {len(QUERIES)} queries", vectors, fixed, args.repeat)
            facts = checked_vectors(embedder, texts)
            report(f"{name}, {n} steps, planted facts' queries", vectors, facts, args.repeat)


if __name__ == "__main__":
    main()
