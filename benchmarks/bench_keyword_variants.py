"""Keyword weightings compared on the tuning corpora and the held-out families: a numpy model of the ranking.

Each variant is BM25 over kvmemory's terms (``Tokenizer``, every string of
an item), ranked best first with ties by item order (kvmemory's order),
changed in one way: the IDF (Lucene's, FTS5's floored one, rank_bm25's
``BM25Okapi`` one, or Lucene's times the share of items lacking the word),
``b``, BM25+'s ``delta`` (each held word adds ``delta * idf``), ties broken
newest first, or a repeated query word counted once. ``plain`` is plain
BM25 with Lucene's IDF (kvmemory before BM25+) and ``plus1`` BM25+ with
``delta = 1`` (kvmemory now): both equal ``Memory.search``'s recall on the
sets of ``bench_heldout.py --sections keyword``. Prints recall@5 per corpus
and query kind, the median over the seeds, and, for ``plain``, how many
misses have an item ranked above the fact that holds fewer of the query's
distinct words (the shape BM25+ mends).

Choose on the tuning corpora (``short-steps``, ``long-pages``); the held-out
families only judge a choice (docs/search.md, "Held-out corpora").

Run: .venv/bin/python benchmarks/bench_keyword_variants.py [--items 10000] [--facts 200]
     [--seeds 1,2,3] [--corpora short-steps,long-pages,agent-steps,chat,pages]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
from collections import Counter
from collections.abc import Sequence
from typing import Any

import _paired as paired
import numpy as np
from bench_heldout import corpus
from bench_search import term_docs

from agents.memory.search import Tokenizer

VARIANTS: dict[str, dict[str, Any]] = {
    "plain": {},
    "fts5-idf": {"idf": "fts5"},
    "okapi-idf": {"idf": "okapi"},
    "share-idf": {"idf": "share"},
    "b=0.6": {"b": 0.6},
    "b=0.5": {"b": 0.5},
    "newest": {"newest": True},
    "once": {"once": True},
    "plus0.5": {"delta": 0.5},
    "plus1": {"delta": 1.0},
    "plus2": {"delta": 2.0},
    "k1=0.9": {"delta": 1.0, "k1": 0.9},
    "k1=1.6": {"delta": 1.0, "k1": 1.6},
    "atire-idf": {"delta": 1.0, "idf": "atire"},
    "byte-len": {"delta": 1.0, "quantize": True},
    "once+1": {"delta": 1.0, "once": True},
    "newest+1": {"delta": 1.0, "newest": True},
    "floor0.3+1": {"delta": 1.0, "floor": 0.3},
    "floor0.5+1": {"delta": 1.0, "floor": 0.5},
    "floor0.7+1": {"delta": 1.0, "floor": 0.7},
    "floor1+1": {"delta": 1.0, "floor": 1.0},
    "okapi+1": {"delta": 1.0, "idf": "okapi"},
    "floor1.5+1": {"delta": 1.0, "floor": 1.5},
    "rfloor0.05+1": {"delta": 1.0, "rfloor": 0.05},
    "rfloor0.1+1": {"delta": 1.0, "rfloor": 0.1},
    "rfloor0.15+1": {"delta": 1.0, "rfloor": 0.15},
    "plus1.5": {"delta": 1.5},
    "qsat1+1": {"delta": 1.0, "k3": 1.0},
    "qsat3+1": {"delta": 1.0, "k3": 3.0},
}

Postings = dict[str, tuple[Any, Any]]


class Corpus:
    """One corpus's postings as arrays, item lengths and query sets ``{kind: [(terms, item)]}``."""

    def __init__(self, name: str, n_items: int, n_facts: int, seed: int) -> None:
        tokenize = Tokenizer()
        rows, sets = corpus(name, n_items, n_facts, seed)
        docs = term_docs(rows, tokenize)
        gathered: dict[str, tuple[list[int], list[int]]] = {}
        for i, terms in enumerate(docs):
            for term, tf in Counter(terms).items():
                rows_tf = gathered.setdefault(term, ([], []))
                rows_tf[0].append(i)
                rows_tf[1].append(tf)
        self.postings: Postings = {
            term: (np.array(at, dtype=np.int64), np.array(tf, dtype=np.float64))
            for term, (at, tf) in gathered.items()
        }
        self.lengths = np.array([len(terms) for terms in docs], dtype=np.float64)
        self.sets = {
            kind: [(tokenize(query), item) for query, item in queries]
            for kind, queries in sets.items()
            if kind in ("lexical", "mixed")  # no word of the fact: every weighting near 0
        }
        self.okapi = _okapi_idfs(self.postings, len(docs))
        self.stored_lengths = np.array(
            [lucene_length(len(terms)) for terms in docs], dtype=np.float64
        )

    def idf(self, kind: str, term: str, df: int) -> float:
        """Return the IDF of ``term`` held by ``df`` items, by the named formula."""
        n = len(self.lengths)
        if kind == "lucene":
            return math.log1p((n - df + 0.5) / (df + 0.5))
        if kind == "fts5":
            return max(math.log((n - df + 0.5) / (df + 0.5)), 1e-6)
        if kind == "okapi":
            return self.okapi[term]
        if kind == "atire":
            return math.log(n / df)
        return math.log1p((n - df + 0.5) / (df + 0.5)) * (n - df + 0.5) / (n + 0.5)

    def scores(self, terms: Sequence[str], variant: dict[str, Any]) -> Any:
        """Return every item's score for the query ``terms`` under ``variant``."""
        b, delta = variant.get("b", 0.75), variant.get("delta", 0.0)
        k1 = variant.get("k1", 1.2)
        if variant.get("once"):
            terms = list(dict.fromkeys(terms))
        repeats = Counter(terms)
        floor = variant.get("floor", 0.0)
        if "rfloor" in variant:  # a share of the IDF of a word one item holds
            floor = variant["rfloor"] * self.idf("lucene", "", 1)
        k3 = variant.get("k3")
        average = self.lengths.mean()
        lengths = self.stored_lengths if variant.get("quantize") else self.lengths
        scores = np.zeros(len(self.lengths))
        for term in dict.fromkeys(terms) if k3 is not None else terms:
            posting = self.postings.get(term)
            if posting is None:
                continue
            rows, tf = posting
            if k3 is not None:  # a repeated query word saturates as a repeated item word does
                qtf = repeats[term]
                idf_scale = (k3 + 1) * qtf / (k3 + qtf)
            else:
                idf_scale = 1.0
            idf = idf_scale * max(self.idf(variant.get("idf", "lucene"), term, len(rows)), floor)
            norm = k1 * (1 - b + b * lengths[rows] / average)
            scores[rows] += idf * ((k1 + 1) * tf / (tf + norm) + delta)
        return scores

    def top(self, scores: Any, newest: bool, k: int = 5) -> list[int]:
        """Return the best ``k`` items holding a query word, ties oldest first (or newest)."""
        order = np.arange(len(scores))
        ranked = np.lexsort((-order if newest else order, -scores))[:k]
        return [int(i) for i in ranked if scores[i] > 0]


def lucene_length(length: int) -> int:
    """Return ``length`` as Lucene's ``SmallFloat.intToByte4`` keeps it (tantivy's field norm, rounded down)."""
    rest = length - 24
    if rest < 8:
        return length
    shift = rest.bit_length() - 4
    return 24 + ((rest >> shift) << shift)


def _okapi_idfs(postings: Postings, n: int) -> dict[str, float]:
    """Return rank_bm25's BM25Okapi IDFs: negative ones replaced by a quarter of the mean."""
    idf = {
        t: math.log(n - len(p[0]) + 0.5) - math.log(len(p[0]) + 0.5) for t, p in postings.items()
    }
    floor = 0.25 * sum(idf.values()) / len(idf)
    return {term: floor if value < 0 else value for term, value in idf.items()}


def fewer_words_above(data: Corpus, terms: Sequence[str], item: int, top: list[int]) -> bool:
    """Return whether an item ranked above the fact holds fewer distinct query words than it."""
    held = Counter[int]()
    for term in dict.fromkeys(terms):
        posting = data.postings.get(term)
        if posting is not None:
            held.update(posting[0].tolist())
    return any(held[other] < held[item] for other in top)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10000)
    parser.add_argument("--facts", type=int, default=200)
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--corpora", default="short-steps,long-pages,agent-steps,chat,pages")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated")
    parser.add_argument("--against", default="plus1", help="the variant the paired counts face")
    args = parser.parse_args()
    chosen = {label: VARIANTS[label] for label in args.variants.split(",")}
    seeds = [int(seed) for seed in args.seeds.split(",")]
    one, five, fifteen = os.getloadavg()
    print(
        f"recall@5, {args.items} items, {args.facts} facts, median of seeds {seeds}; "
        f"load average {one:.2f}, {five:.2f}, {fifteen:.2f}"
    )
    print(f"{'corpus':<14}{'queries':<10}" + "".join(f"{v:>10}" for v in chosen) + "  shape")
    for name in args.corpora.split(","):
        got: dict[tuple[str, str], list[float]] = {}
        hits_of: dict[tuple[str, str], list[bool]] = {}
        shaped: dict[str, list[int]] = {}
        for seed in seeds:
            data = Corpus(name, args.items, args.facts, seed)
            for kind, queries in data.sets.items():
                for label, variant in chosen.items():
                    hits = 0
                    for terms, item in queries:
                        top = data.top(data.scores(terms, variant), variant.get("newest", False))
                        hits += item in top
                        hits_of.setdefault((kind, label), []).append(item in top)
                        if label == "plain" and item not in top:
                            counts = shaped.setdefault(kind, [0, 0])
                            counts[0] += 1
                            counts[1] += fewer_words_above(data, terms, item, top)
                    got.setdefault((kind, label), []).append(hits / len(queries))
        for kind in sorted({kind for kind, _ in got}):
            misses, shape = shaped.get(kind, [0, 0])
            print(
                f"{name:<14}{kind:<10}"
                + "".join(f"{statistics.median(got[kind, label]):>10.3f}" for label in chosen)
                + f"  {shape}/{misses}",
                flush=True,
            )
            if args.against in chosen:
                cells = []
                for label in chosen:
                    won, lost = paired.won_lost(hits_of[kind, label], hits_of[kind, args.against])
                    worse = lost > won and paired.sign_test(won, lost) < paired.SIGNIFICANT
                    cells.append(f"{won}/{lost}{'*' if worse else ''}")
                print(f"{'':<14}{'won/lost':<10}" + "".join(f"{cell:>10}" for cell in cells))
    print(
        "shape: plain BM25's misses with an item above holding fewer query words / all its misses;"
        " won/lost: facts of every seed each variant finds and --against misses, and the other"
        " way; * = loses significantly (sign test p < 0.05)"
    )


if __name__ == "__main__":
    main()
