"""Keyword misses against each peer, fact by fact: a paired comparison on the numpy model of the ranking.

For each corpus and query kind, every planted fact is ranked by kvmemory
(BM25+ over Lucene's IDF, ``delta = 1``, ties oldest first) and by models of
the peers of ``bench_heldout.py --sections keyword``, every one given the
same terms:

- ``rank_bm25``: ``BM25Okapi``'s IDF (negative ones raised to a quarter of
  the mean IDF), plain BM25;
- ``FTS5``: FTS5's IDF (floored at 1e-6), plain BM25;
- ``bm25s``: Lucene's IDF, plain BM25 (kvmemory before BM25+);
- ``tantivy``: Lucene's IDF, plain BM25, each item's length stored in one
  byte as Lucene's ``SmallFloat.intToByte4`` does (exact below 24, then four
  significant bits, rounded down: a page of 300 terms counts 280), scores
  in float32.

It prints, per corpus and kind, recall@5 of each engine (median over the
seeds), and for each peer the paired counts over every fact of every seed:
``won`` (kvmemory finds it, the peer does not), ``lost`` (the other way)
and the two-sided sign-test p-value of that split, and the verdict against
the best peer by mean over the seeds (benchmarks/_paired.py). Then the shape of
kvmemory's misses that the best peer finds: the fact's length against the
average, its depth, how many of the query's distinct words it holds against
the items above it, and how close its score is to the fifth item's.

Choose on the tuning corpora (``short-steps``, ``long-pages``, ``crowded``);
the held-out families only judge a choice (docs/search.md, "Held-out corpora").

Run: .venv/bin/python benchmarks/bench_keyword_misses.py [--items 20000] [--facts 240]
     [--seeds 1,2,3,4,5] [--corpora agent-steps,pages] [--variant plus1] [--show 10]
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections import Counter
from collections.abc import Sequence
from typing import Any

import _paired as paired
import corpora_heldout as heldout
import numpy as np
from bench_heldout import corpus
from bench_keyword_variants import VARIANTS, Corpus

PEERS: dict[str, dict[str, Any]] = {
    "rank_bm25": {"idf": "okapi"},
    "FTS5": {"idf": "fts5"},
    "bm25s": {},
    "tantivy": {"quantize": True, "float32": True},
}


def lucene_length(length: int) -> int:
    """Return ``length`` as Lucene's ``SmallFloat.intToByte4`` stores it (tantivy's field norm)."""
    if length < 24:
        return length
    rest = length - 24
    if rest < 8:
        return length
    shift = rest.bit_length() - 4
    return 24 + ((rest >> shift) << shift)


def scores(data: Corpus, terms: Sequence[str], variant: dict[str, Any]) -> Any:
    """Return every item's score for ``terms`` under ``variant`` (``Corpus.scores`` plus tantivy's norms)."""
    if not variant.get("quantize"):
        return data.scores(terms, variant)
    lengths = getattr(data, "_quantized", None)
    if lengths is None:
        lengths = np.array([lucene_length(int(n)) for n in data.lengths], dtype=np.float32)
        data._quantized = lengths  # type: ignore[attr-defined]
    average = np.float32(data.lengths.mean())
    out = np.zeros(len(lengths), dtype=np.float32)
    for term in terms:
        posting = data.postings.get(term)
        if posting is None:
            continue
        rows, tf = posting
        idf = np.float32(data.idf("lucene", term, len(rows)))
        norm = np.float32(1.2) * (np.float32(0.25) + np.float32(0.75) * lengths[rows] / average)
        out[rows] += idf * np.float32(2.2) * tf.astype(np.float32) / (tf.astype(np.float32) + norm)
    return out.astype(np.float64)


def held_words(data: Corpus, terms: Sequence[str]) -> Counter[int]:
    """Return how many of the query's distinct words each item holds."""
    held = Counter[int]()
    for term in dict.fromkeys(terms):
        posting = data.postings.get(term)
        if posting is not None:
            held.update(posting[0].tolist())
    return held


def show_miss(
    data: Corpus, terms: Sequence[str], item: int, ours: Any, peer: str, query: str
) -> None:
    """Print one fact kvmemory misses and ``peer`` finds: the words, their IDFs, the ranks, the items above."""
    theirs = scores(data, terms, PEERS[peer])
    n, average = len(data.lengths), float(data.lengths.mean())
    order = np.arange(n)
    rank = {
        name: int(np.flatnonzero(np.lexsort((order, -got)) == item)[0]) + 1
        for name, got in (("kvmemory", ours), (peer, theirs))
    }
    print(
        f"    {query!r}: fact {item} ({data.lengths[item] / average:.2f}x the average length) "
        f"ranked {rank['kvmemory']} by kvmemory, {rank[peer]} by {peer}"
    )
    kind = PEERS[peer].get("idf", "lucene")
    for term in dict.fromkeys(terms):
        posting = data.postings.get(term)
        df = 0 if posting is None else len(posting[0])
        mine = data.idf("lucene", term, df) if df else 0.0
        other = data.idf(kind, term, df) if df else 0.0
        held = posting is not None and item in set(posting[0].tolist())
        print(
            f"      {term!r:<16} in {df / n:6.1%} of items, IDF {mine:.3f} (kvmemory) "
            f"{other:.3f} ({peer}); the fact {'holds' if held else 'lacks'} it"
        )
    held = {
        term: set(data.postings[term][0].tolist())
        for term in dict.fromkeys(terms)
        if term in data.postings
    }
    for name, got in (("kvmemory", ours), (peer, theirs)):
        firsts = data.top(got, False)
        words = ["+".join(t for t in held if i in held[t]) or "-" for i in firsts]
        print(f"      {name}'s first five hold: {', '.join(words)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=20000)
    parser.add_argument("--facts", type=int, default=240)
    parser.add_argument("--seeds", default="1,2,3,4,5")
    parser.add_argument("--corpora", default="agent-steps,pages")
    parser.add_argument("--variant", default="plus1", choices=list(VARIANTS))
    parser.add_argument(
        "--show", type=int, default=0, help="print this many misses the best peer finds in full"
    )
    args = parser.parse_args()
    seeds = [int(seed) for seed in args.seeds.split(",")]
    one, five, fifteen = os.getloadavg()
    print(
        f"paired keyword misses, {args.items} items, {args.facts} facts, seeds {seeds}, "
        f"kvmemory = {args.variant}; load average {one:.2f}, {five:.2f}, {fifteen:.2f}"
    )
    engines = {"kvmemory": VARIANTS[args.variant], **PEERS}
    for name in args.corpora.split(","):
        hits: dict[tuple[str, str], list[list[bool]]] = {}
        shapes: dict[str, list[dict[str, Any]]] = {}
        shown: Counter[str] = Counter()
        for seed in seeds:
            data = Corpus(name, args.items, args.facts, seed)
            said = corpus(name, args.items, args.facts, seed)[1] if args.show else {}
            depths = None
            if name in heldout.FAMILIES:
                made = heldout.make_family(name, args.items, args.facts, seed)
                depths = [fact.depth for fact in made.facts]
            average = float(data.lengths.mean())
            for kind, queries in data.sets.items():
                per_engine: dict[str, list[bool]] = {}
                ranked: dict[str, Any] = {}
                for engine, variant in engines.items():
                    found = []
                    for terms, item in queries:
                        got = scores(data, terms, variant)
                        top = data.top(got, variant.get("newest", False))
                        found.append(item in top)
                        if engine == "kvmemory":
                            ranked[item] = (got, top)
                    per_engine[engine] = found
                    hits.setdefault((kind, engine), []).append(found)
                best = max(PEERS, key=lambda peer: sum(per_engine[peer]))
                for f, (terms, item) in enumerate(queries):
                    if per_engine["kvmemory"][f] or not per_engine[best][f]:
                        continue
                    got, top = ranked[item]
                    if shown[kind] < args.show:
                        shown[kind] += 1
                        print(f"\n  {name} {kind}, seed {seed}: kvmemory misses, {best} finds")
                        show_miss(data, terms, item, got, best, said[kind][f][0])
                    held = held_words(data, terms)
                    fifth = got[top[-1]] if top else 0.0
                    shapes.setdefault(kind, []).append(
                        {
                            "length": data.lengths[item] / average,
                            "above": statistics.median(data.lengths[i] / average for i in top),
                            "depth": depths[f] if depths else "-",
                            "held": held[item],
                            "held_above": statistics.median(held[i] for i in top),
                            "rivals": sum(count >= held[item] for count in held.values()),
                            "close": got[item] >= 0.98 * fifth,
                            "tied": got[item] == fifth,
                            "best": best,
                        }
                    )
        for kind in sorted({kind for kind, _ in hits}):
            rows = {engine: hits[kind, engine] for engine in engines}
            med = {e: statistics.median(sum(r) / len(r) for r in rows[e]) for e in engines}
            print(f"\n{name} {kind}: recall@5, median (per seed)")
            for engine in engines:
                runs = " ".join(f"{sum(r) / len(r):.3f}" for r in rows[engine])
                print(f"  {engine:<10} {med[engine]:.3f} ({runs})")
            ours = [hit for run in rows["kvmemory"] for hit in run]
            mean = {e: statistics.fmean(sum(r) / len(r) for r in rows[e]) for e in engines}
            for peer in PEERS:
                theirs = [hit for run in rows[peer] for hit in run]
                won, lost = paired.won_lost(ours, theirs)
                print(
                    f"  vs {peer:<10} won {won:>3}  lost {lost:>3}  sign test p = "
                    f"{paired.sign_test(won, lost):.3f}  (facts {len(ours)})"
                )
            best = max(PEERS, key=lambda peer: mean[peer])
            theirs = [hit for run in rows[best] for hit in run]
            won, lost = paired.won_lost(ours, theirs)
            gap = mean[best] - mean["kvmemory"]
            print(
                f"  verdict against the best peer by mean ({best}): mean gap {gap:+.3f}, "
                f"{paired.verdict(gap, won, lost)}"
            )
            shaped = shapes.get(kind, [])
            if shaped:
                depth = Counter(s["depth"] for s in shaped)
                print(
                    f"  kvmemory's misses the best peer ({shaped[0]['best']}, per seed) finds: "
                    f"{len(shaped)}; fact length / average median "
                    f"{statistics.median(s['length'] for s in shaped):.2f}, items above "
                    f"{statistics.median(s['above'] for s in shaped):.2f}; "
                    f"query words held {statistics.median(s['held'] for s in shaped):.1f}, above "
                    f"{statistics.median(s['held_above'] for s in shaped):.1f}; items holding as many "
                    f"{statistics.median(s['rivals'] for s in shaped):.0f}; within 2% of the "
                    f"fifth {sum(s['close'] for s in shaped)}, tied with it "
                    f"{sum(s['tied'] for s in shaped)}; depth "
                    + ", ".join(f"{d} {n}" for d, n in sorted(depth.items()))
                )


if __name__ == "__main__":
    main()
