"""Held-out search quality: keyword ranking against the peers, and the hybrid rule, per corpus family.

Tuning corpora (what the term weighting and the blend were chosen on):
benchmarks/_search_corpus.py (``short-steps``, ``long-pages``),
benchmarks/_hybrid_quality.py (``short``, ``thought``, ``page-mid``,
``mixed``) and benchmarks/_crowded_corpus.py (``crowded``). Held-out
families (never used to choose): benchmarks/corpora_heldout.py
(``agent-steps``, ``chat``, ``pages``, ``crowded-steps``), asked lexically,
paraphrased and mixed.

Sections (``--sections``, comma-separated; default both):

keyword
    recall@5 of ``Memory.search`` (keyword) next to rank_bm25 (``BM25Okapi``),
    bm25s (``method="lucene"``), tantivy and SQLite FTS5 ``bm25()``, every
    engine given the same terms (kvmemory's ``Tokenizer``), k1 1.2, b 0.75;
    each engine's mean over the keyword seeds (``--keyword-seeds``, five by
    default), on the keyword tuning corpora (``short-steps``,
    ``long-pages`` and ``crowded``, the held-out ``crowded-steps``'s tuning
    counterpart) and the held-out families. Queries with a word of the
    fact: lexical (and mixed on ``crowded`` and the held-out families). Each set is judged against the best peer (highest
    mean) fact by fact (benchmarks/_paired.py): ``med3`` the 3-seed median
    gap the issue names, ``gap`` the mean gap, the facts won and lost over
    every seed, the sign test's p, and the verdict: "within 0.01", "behind,
    significant" (p < 0.05) or "behind, seed noise".
rule
    recall@5 of keyword, semantic and hybrid search (wordllama, the offline
    default; items embedded in parts, the default), median over the seeds;
    ``!`` marks a hybrid median more than 0.02 below the better median of
    the other two. The rule holds seed by seed too: ``worst`` is the largest
    shortfall of one seed (the better mode's recall minus the hybrid's, on
    that seed's corpus), ``seeds`` how many seeds pass 0.02 (a median of
    each mode apart can hide a break every seed shows).

Run: .venv/bin/python benchmarks/bench_heldout.py [--seeds 1,2,3] [--items 10000] [--facts 200]
     [--keyword-items 20000] [--keyword-seeds 1,2,3,4,5] [--sections keyword,rule] [--families agent-steps,chat,pages]
     [--per-seed] [--chunk-words 8|16|field]

``--chunk-words`` cuts the rule's items otherwise than the default
(``EmbedParts(chunk_words=N)``, ``field`` for fields whole): what fewer
rows a query would cost in recall (see benchmarks/bench_parts_rows.py).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Sequence
from typing import Any

import _paired as paired
import corpora_heldout as heldout
from _search_corpus import SHAPES
from _search_corpus import make_corpus as make_tuning
from bench_search import Bm25s, Fts5, RankBm25, Tantivy, term_docs

from agents.memory import Memory, MemoryItem
from agents.memory.search import EmbedParts, Tokenizer, WordLlamaEmbedder, search_index

TUNING_KEYWORD = ("short-steps", "long-pages", "crowded")
TUNING_RULE = ("short", "thought", "page-mid", "mixed", "crowded")
PEERS = (RankBm25, Bm25s, Tantivy, Fts5)
MODES = ("keyword", "semantic", "hybrid")

Sets = dict[str, list[tuple[str, int]]]


def load() -> str:
    """Return the load average as ``uptime`` prints it."""
    one, five, fifteen = os.getloadavg()
    return f"load average: {one:.2f}, {five:.2f}, {fifteen:.2f} ({os.cpu_count()} CPUs)"


def corpus(name: str, n_items: int, n_facts: int, seed: int) -> tuple[list[dict[str, Any]], Sets]:
    """Return the items of a tuning corpus or held-out family and its query sets ``(query, item)``."""
    if name in heldout.FAMILIES:
        made = heldout.make_family(name, n_items, n_facts, seed)
        return made.items, {kind: made.queries(kind) for kind in heldout.KINDS}
    if name == "crowded":
        from _crowded_corpus import make_corpus as make_crowded

        rows, crowded = make_crowded(n_items, n_facts, seed)
        return rows, dict(crowded)
    if name in SHAPES:
        rows, facts = make_tuning(SHAPES[name], n_items, n_facts, seed)
        return rows, {
            "lexical": [(fact.lexical, fact.step) for fact in facts],
            "paraphrased": [(fact.paraphrased, fact.step) for fact in facts],
        }
    from _hybrid_quality import make_corpus as make_hybrid

    memory, sets = make_hybrid(name, n_items, min(n_facts, 200), seed)
    return [item.to_dict() for item in memory], dict(sets)


def number(hits: Sequence[Any]) -> list[int]:
    """Return the item numbers of hits (``item`` in the held-out families, ``step`` in the tuning corpora)."""
    out = []
    for hit in hits:
        fields = hit.item.to_dict()
        out.append(fields["item"] if "item" in fields else fields["step"])
    return out


def found(ranked: Sequence[list[int]], answers: Sequence[int]) -> list[bool]:
    """Return, for each answer, whether it is among the first five of its ranking."""
    return [a in r[:5] for r, a in zip(ranked, answers, strict=True)]


def recall(ranked: Sequence[list[int]], answers: Sequence[int]) -> float:
    """Return the share of answers among the first five of their ranking."""
    hits = found(ranked, answers)
    return sum(hits) / len(hits)


def run_keyword(
    names: Sequence[str], n_items: int, n_facts: int, seeds: Sequence[int], per_seed: bool = False
) -> None:
    """Print keyword recall@5 of kvmemory and the peers per corpus and query kind, with the verdict.

    Each engine's column is its mean over the seeds. ``med3`` is the gap
    the issue names: the best peer's median over the first three seeds
    minus kvmemory's. ``gap`` is the best peer's mean minus kvmemory's
    (the best peer: highest mean); ``won``/``lost`` count the facts of
    every seed that kvmemory finds and that peer misses, and the other
    way; ``p`` is the sign test of that split; the verdict follows
    ``_paired.verdict``.
    """
    tokenize = Tokenizer()
    engines = ["kvmemory", *(peer.name for peer in PEERS)]
    print(
        f"\n== keyword: recall@5, {n_items} items, {n_facts} facts, seeds {list(seeds)}; {load()}"
    )
    print(
        f"{'corpus':<24}{'queries':<9}"
        + "".join(f"{name:>12}" for name in engines)
        + f"{'med3':>7}{'gap':>7}  {'best':<10}{'won/lost':>9}{'p':>7}  verdict"
    )
    verdicts: list[tuple[str, str, str]] = []
    for name in names:
        got: dict[tuple[str, str], list[list[bool]]] = {}
        for seed in seeds:
            rows, sets = corpus(name, n_items, n_facts, seed)
            docs = term_docs(rows, tokenize)
            memory = Memory([MemoryItem(**row) for row in rows])
            peers = [make(docs) for make in PEERS]
            for kind, queries in sets.items():
                if kind not in ("lexical", "mixed"):
                    continue  # no word of the fact: every engine near 0
                answers = [item for _, item in queries]
                ranked = [number(memory.search(query, 5)) for query, _ in queries]
                got.setdefault((kind, "kvmemory"), []).append(found(ranked, answers))
                for peer in peers:
                    ranked = [peer.query(tokenize(query), 5) for query, _ in queries]
                    got.setdefault((kind, peer.name), []).append(found(ranked, answers))
        tag = "held-out " if name in heldout.FAMILIES else "tuning "
        for kind in sorted({kind for kind, _ in got}):
            runs = {e: [sum(hits) / len(hits) for hits in got[kind, e]] for e in engines}
            mean = {e: statistics.fmean(runs[e]) for e in engines}
            med3 = {e: statistics.median(runs[e][:3]) for e in engines}
            best = max((peer.name for peer in PEERS), key=lambda peer: mean[peer])
            ours = [hit for hits in got[kind, "kvmemory"] for hit in hits]
            theirs = [hit for hits in got[kind, best] for hit in hits]
            won, lost = paired.won_lost(ours, theirs)
            gap = mean[best] - mean["kvmemory"]
            said = paired.verdict(gap, won, lost)
            if name in heldout.FAMILIES:
                verdicts.append((name, kind, said))
            print(
                f"{tag + name:<24}{kind:<9}"
                + "".join(f"{mean[engine]:>12.3f}" for engine in engines)
                + f"{max(med3[p.name] for p in PEERS) - med3['kvmemory']:>+7.3f}{gap:>+7.3f}"
                + f"  {best:<10}{f'{won}/{lost}':>9}{paired.sign_test(won, lost):>7.3f}  {said}",
                flush=True,
            )
            if per_seed:
                for engine in engines:
                    each = " ".join(f"{value:.3f}" for value in runs[engine])
                    print(f"{'':<24}{'':<9}each seed of {engine}: {each}")
    print(
        "columns: each engine's mean over the seeds; med3 = best peer's median over the first three"
        " seeds minus kvmemory's; gap = best peer's mean minus kvmemory's; won/lost = facts only"
        " kvmemory / only the best peer finds, every seed; p = sign test"
    )
    behind = [f"{n} {k}" for n, k, said in verdicts if said.startswith("behind, significant")]
    print(f"held-out sets behind, significant: {', '.join(behind) if behind else 'none'}")


def run_rule(
    names: Sequence[str],
    n_items: int,
    n_facts: int,
    seeds: Sequence[int],
    parts: EmbedParts | None = None,
) -> None:
    """Print keyword, semantic and hybrid recall@5 per corpus and query kind, flagging breaks of the rule.

    ``parts``: how items are cut for embedding (``None``: the default, ``EmbedParts()``).
    """
    embedder = WordLlamaEmbedder()
    cut = (parts or EmbedParts()).label()
    print(
        f"\n== rule: recall@5, {n_items} items, {n_facts} facts, seeds {list(seeds)}, "
        f"semantic by {embedder.name} over parts cut {cut}; {load()}"
    )
    print(
        f"{'corpus':<24}{'queries':<22}"
        + "".join(f"{mode:>10}" for mode in MODES)
        + f" {'worst':>10}{'seeds':>6}"
    )
    for name in names:
        got: dict[tuple[str, str], list[float]] = {}
        for seed in seeds:
            took = time.perf_counter()
            rows, sets = corpus(name, n_items, n_facts, seed)
            memory = Memory([MemoryItem(**row) for row in rows])
            if parts is not None:
                search_index(memory, parts=parts)
            memory.index_embeddings(embedder)
            for kind, queries in sets.items():
                answers = [item for _, item in queries]
                for mode in MODES:
                    ranked = [
                        number(memory.search(query, 5, mode=mode))  # type: ignore[arg-type]
                        for query, _ in queries
                    ]
                    got.setdefault((kind, mode), []).append(recall(ranked, answers))
            print(f"  ({name} seed {seed}: {time.perf_counter() - took:.0f} s)", flush=True)
        tag = "held-out " if name in heldout.FAMILIES else "tuning "
        for kind in dict.fromkeys(kind for kind, _ in got):
            med = {mode: statistics.median(got[kind, mode]) for mode in MODES}
            broken = med["hybrid"] < max(med["keyword"], med["semantic"]) - 0.02 - 1e-9
            short = [
                max(kw, sem) - hyb
                for kw, sem, hyb in zip(*(got[kind, mode] for mode in MODES), strict=True)
            ]
            seeds_broken = sum(gap > 0.02 + 1e-9 for gap in short)
            print(
                f"{tag + name:<24}{kind:<22}"
                + "".join(f"{med[mode]:>10.3f}" for mode in MODES)
                + ("!" if broken else " ")
                + f"{max(short):>10.3f}{seeds_broken:>4}/{len(short)}",
                flush=True,
            )
    print(
        "! marks a hybrid median more than 0.02 below the better median of keyword and semantic;"
        " then the worst seed's shortfall (the better mode's recall minus the hybrid's, that seed)"
        " and the seeds where it passes 0.02"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--items", type=int, default=3000, help="items a corpus (rule)")
    parser.add_argument("--facts", type=int, default=120)
    parser.add_argument("--keyword-items", type=int, default=20000)
    parser.add_argument("--keyword-facts", type=int, default=240)
    parser.add_argument("--keyword-seeds", default="1,2,3,4,5", help="seeds of the keyword table")
    parser.add_argument("--families", default=",".join(heldout.FAMILIES))
    parser.add_argument("--tuning", default="yes", choices=["yes", "no"])
    parser.add_argument("--sections", default="keyword,rule")
    parser.add_argument("--per-seed", action="store_true", help="print each seed's keyword recall")
    parser.add_argument(
        "--chunk-words",
        default="8",
        help="rule: words a window of a long field (EmbedParts(chunk_words=N)); 'field': fields whole",
    )
    args = parser.parse_args()
    seeds = [int(seed) for seed in args.seeds.split(",")]
    families = args.families.split(",")
    tuning = args.tuning == "yes"
    sections = set(args.sections.split(","))
    started = time.perf_counter()
    if "keyword" in sections:
        names = [*(TUNING_KEYWORD if tuning else ()), *families]
        keyword_seeds = [int(seed) for seed in args.keyword_seeds.split(",")]
        run_keyword(names, args.keyword_items, args.keyword_facts, keyword_seeds, args.per_seed)
    if "rule" in sections:
        names = [*(dict.fromkeys((*TUNING_KEYWORD, *TUNING_RULE)) if tuning else ()), *families]
        chunk = None if args.chunk_words == "field" else int(args.chunk_words)
        parts = None if chunk == EmbedParts().chunk_words else EmbedParts(chunk_words=chunk)
        run_rule(names, args.items, args.facts, seeds, parts)
    print(f"\nbench_heldout done in {time.perf_counter() - started:.0f} s; {load()}")


if __name__ == "__main__":
    main()
