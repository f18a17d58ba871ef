"""Search benchmark: retrieval quality and query latency against the engines users pick, and upkeep.

Sections (``--sections``, comma-separated; default all):

quality
    Corpora of UFO-shaped agent steps (nested ``arguments`` dict, a
    ``controls`` list, a long ``page`` text; see benchmarks/_search_corpus.py),
    20,000 steps each, with 240 planted facts ("the car was moved to
    Lisbon"), each asked two ways: a *lexical* query whose content words all
    occur in the fact and a *paraphrased* one that shares no content word
    with it (the generator asserts both). Two corpus shapes vary the step
    length (20-60 or 150-300 page words), where a fact sits (a short field,
    a nested dict or list, the start, middle or end of the page) and the
    query wording (statements or questions holding words no step holds,
    such as "where"). Prints recall@5 and MRR@10 per engine, query kind and
    corpus, the median over the seeds (with recall's range), and recall@5
    by fact position. Engines: kvmemory ``Memory.search`` in keyword,
    semantic (wordllama, the offline default) and hybrid mode (defaults:
    items embedded in parts, ``EmbedParts()``), and semantic and hybrid over
    vectors of whole items (``EmbedParts.WHOLE``, rows marked "(whole)");
    rank_bm25 (``BM25Okapi``), bm25s (``method="lucene"``), tantivy and
    SQLite FTS5 ``bm25()`` queried directly. Every peer is given the terms
    kvmemory's ``Tokenizer`` makes of the step's strings and of the query
    (pre-tokenized: a whitespace tokenizer in tantivy and FTS5), the same
    BM25 k1 and b (kvmemory's ``BM25_K1``, ``BM25_B``: 1.2, 0.75; tantivy and
    FTS5 have them built in), query terms repeated as often as the query
    repeats them.
latency
    The same kind of corpus at 100,000 steps (``--items``): keyword query
    time of ``Memory.search(query, 5)`` (index built), median and p95 over
    many queries (the facts' lexical and paraphrased queries and queries of
    common words: "with", "to", "is"), each query the best of ``--repeat``
    runs (one for a query over 50 ms), engines interleaved per query, next to bm25s, tantivy (top 5 and
    their step numbers from a fast field) and FTS5 direct, as ratios. Then
    "add 1,000 items, then query": ``Memory.add_memory_items`` + a query
    against tantivy (add, commit, reload, query), FTS5 (insert, commit,
    query) and bm25s (which can only rebuild its index: rebuild, query).
upkeep
    Building a 100,000-item memory with a search index attached against
    one without (benchmarks/_common rows).
stored
    A 100,000-item session with 256-dimension vectors (one per item,
    ``EmbedParts.WHOLE``) in each store
    (in-process, SQLite, JSONL, PostgreSQL when a server can be started or
    ``--postgres URL`` is given): the time to embed and store the vectors,
    then a semantic query by ``Store.search`` (exact cosine over the
    stored vectors, read a page at a time; in SQLite also computed in SQL by
    the sqlite-vec extension on the same file, where this Python can load
    it) and by a reopened ``StoredMemory`` (the stored vectors loaded once,
    then searched in RAM), each as a ratio to a raw numpy cosine and top-5
    over the same unit matrix in this process. The vectors come from a
    stand-in embedder (hashed bytes of the text), since the cost measured is
    reading and scoring vectors, not computing them. On a busy machine, run
    it with ``OPENBLAS_NUM_THREADS=1``: threaded BLAS on page-sized products
    then waits for cores and the figures swing tenfold.
keyword-stores
    100,000 UFO-shaped items (nested dicts, a long page text) in SQLite:
    the time to append them (the keyword index is always on;
    benchmarks/bench_stores.py times it against raw SQL), and ``store.search`` against the same query written directly in FTS5 SQL
    (``bm25()``, the top 5 rows' data), with one session and with two; in
    PostgreSQL (``--postgres URL``, else a throwaway server started as
    tests/conftest.py does, when its binaries are installed),
    ``store.search`` against a direct ``tsvector`` query ranked by
    ``ts_rank``.

hybrid (not in the default run)
    recall@5 of keyword, semantic (whole items and ``EmbedParts()``) and
    hybrid search at several keyword weights, on corpora that vary step
    length, the fact's place and the query's wording; see
    benchmarks/_hybrid_quality.py (``--hybrid-steps``, ``--hybrid-facts``,
    ``--hybrid-corpora``, ``--hybrid-weights``).

The load average (as ``uptime`` prints it) is printed beside each section's
figures: the machine may be shared, and ratios measured in one run are the
figures to compare.

Run: .venv/bin/python benchmarks/bench_search.py [--quick] [--seeds 1,2,3] [--steps 20000]
     [--facts 240] [--shapes short-steps,long-pages] [--items 100000] [--queries 200]
     [--repeat 3] [--stored-items 100000] [--dimension 256]
     [--sections quality,latency,upkeep,stored,keyword-stores] [--postgres URL | --no-postgres]
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import logging
import os
import random
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from importlib.metadata import version
from typing import Any

import numpy as np
from _common import best, make_rows, make_ufo_rows
from _search_corpus import SHAPES, Fact, Shape, make_corpus, make_steps, step_texts

from agents.memory import Memory, MemoryItem
from agents.memory.search import (
    BM25_B,
    BM25_K1,
    EmbedParts,
    Tokenizer,
    WordLlamaEmbedder,
    search_index,
)
from agents.memory.stores import SQLiteStore, Store, StoredMemory, open_store

TOP = 10  # each engine returns its top 10: recall@5 reads 5 of them, MRR@10 all
KINDS = ("lexical", "paraphrased")
COMMON_QUERIES = [
    "with",
    "to",
    "is",
    "the",
    "what is the status",
    "click the button to save it",
    "open the file with the editor",
    "where is it",
    "is it ready to print",
    "was it sent to the printer",
    "the dialog is open",
    "send it to the team with the report",
]


def load() -> str:
    """Return the load average as ``uptime`` prints it."""
    one, five, fifteen = os.getloadavg()
    return f"load average: {one:.2f}, {five:.2f}, {fifteen:.2f} ({os.cpu_count()} CPUs)"


def term_docs(rows: Sequence[dict[str, Any]], tokenize: Tokenizer) -> list[list[str]]:
    """Return each step's terms as kvmemory's index counts them (one string object per distinct term)."""
    seen: dict[str, str] = {}
    share = seen.setdefault
    return [
        [share(term, term) for text in step_texts(row) for term in tokenize(text)] for row in rows
    ]


# -- the engines ---------------------------------------------------------------------------
# Each takes the pre-tokenized steps and answers query(terms, k) with step numbers, best first.


class Fts5:
    """SQLite FTS5 queried directly: one column of the terms, ``bm25()`` (k1=1.2, b=0.75 built in)."""

    name = "FTS5 direct"

    def __init__(self, docs: Sequence[list[str]]) -> None:
        self.db = sqlite3.connect(":memory:")
        # The terms are letter/digit runs, so unicode61 (without diacritic folding) splits
        # them back exactly; the corpus is ASCII.
        self.db.execute(
            "CREATE VIRTUAL TABLE docs USING fts5(body, tokenize='unicode61 remove_diacritics 0')"
        )
        self.add(docs, 0)

    def add(self, docs: Sequence[list[str]], start: int) -> None:
        self.db.executemany(
            "INSERT INTO docs(rowid, body) VALUES (?, ?)",
            ((start + i, " ".join(terms)) for i, terms in enumerate(docs)),
        )
        self.db.commit()

    def query(self, terms: Sequence[str], k: int) -> list[int]:
        match = " OR ".join(f'"{term}"' for term in terms)
        sql = "SELECT rowid FROM docs WHERE docs MATCH ? ORDER BY bm25(docs), rowid LIMIT ?"
        return [row[0] for row in self.db.execute(sql, (match, k))]


class Tantivy:
    """tantivy: a whitespace-tokenized field of the terms, BM25 (k1=1.2, b=0.75 built in)."""

    name = "tantivy"

    def __init__(self, docs: Sequence[list[str]]) -> None:
        import tantivy

        self.tantivy = tantivy
        builder = tantivy.SchemaBuilder()
        builder.add_text_field("body", tokenizer_name="whitespace", index_option="freq")
        builder.add_integer_field("step", stored=True, fast=True)
        self.schema = builder.build()
        self.index = tantivy.Index(self.schema)
        self.writer = self.index.writer(heap_size=200_000_000, num_threads=1)
        self.add(docs, 0)

    def add(self, docs: Sequence[list[str]], start: int) -> None:
        document = self.tantivy.Document
        for i, terms in enumerate(docs):
            self.writer.add_document(document(body=" ".join(terms), step=start + i))
        self.writer.commit()
        self.index.reload()
        self.searcher = self.index.searcher()

    def query(self, terms: Sequence[str], k: int) -> list[int]:
        tantivy = self.tantivy
        should = tantivy.Occur.Should
        query = tantivy.Query.boolean_query(
            [
                (should, tantivy.Query.term_query(self.schema, "body", term, index_option="freq"))
                for term in terms
            ]
        )
        hits = self.searcher.search(query, k, count=False).hits
        return self.searcher.fast_field_values("step", [address for _, address in hits])


class Bm25s:
    """bm25s (Lucene IDF, k1 and b as kvmemory's), numpy backend; adding items means rebuilding."""

    name = "bm25s"

    def __init__(self, docs: Sequence[list[str]]) -> None:
        self.docs = list(docs)
        self._build()

    def _build(self) -> None:
        import bm25s

        logging.getLogger("bm25s").setLevel(logging.WARNING)  # its import sets DEBUG
        self.retriever = bm25s.BM25(k1=BM25_K1, b=BM25_B, method="lucene")
        self.retriever.index(self.docs, show_progress=False)

    def add(self, docs: Sequence[list[str]], start: int) -> None:
        assert start == len(self.docs)
        self.docs.extend(docs)
        self._build()

    def query(self, terms: Sequence[str], k: int) -> list[int]:
        found, scores = self.retriever.retrieve(
            [list(terms)], k=min(k, len(self.docs)), show_progress=False
        )
        return [int(doc) for doc, score in zip(found[0], scores[0], strict=True) if score > 0]


class RankBm25:
    """rank_bm25's ``BM25Okapi`` (its own IDF, floored at 0.25 of the mean), k1 and b as kvmemory's.

    ``get_scores`` of one term is kept per term: a query's scores are those
    arrays summed from zero in query order, as ``get_scores`` sums them, so
    the floats are the same and the many queries sharing "the" or "was" do
    not recount them (quality only; its query time is not compared).
    """

    name = "rank_bm25"

    def __init__(self, docs: Sequence[list[str]]) -> None:
        from rank_bm25 import BM25Okapi

        self.model = BM25Okapi(docs, k1=BM25_K1, b=BM25_B)
        self.per_term: dict[str, Any] = {}

    def query(self, terms: Sequence[str], k: int) -> list[int]:
        scores = np.zeros(self.model.corpus_size)
        for term in terms:
            part = self.per_term.get(term)
            if part is None:
                part = self.per_term[term] = self.model.get_scores([term])
            scores += part
        # Ties oldest first, as FTS5's ``ORDER BY bm25(docs), rowid`` and kvmemory: an
        # ``argpartition`` first would keep an arbitrary few of the items tied at the k-th.
        order = np.lexsort((np.arange(len(scores)), -scores))[:k]
        return [int(doc) for doc in order if scores[doc] > 0]


def memory_of(rows: Sequence[dict[str, Any]]) -> Memory:
    memory = Memory()
    memory.add_memory_items([MemoryItem(**row) for row in rows])
    return memory


def kvmemory_query(memory: Memory, mode: str) -> Callable[[str, int], list[int]]:
    def query(text: str, k: int) -> list[int]:
        return [hit.item["step"] for hit in memory.search(text, k, mode=mode)]  # type: ignore[arg-type]

    return query


# -- quality -------------------------------------------------------------------------------


def scores_of(ranked: Sequence[list[int]], answers: Sequence[int]) -> tuple[float, float]:
    """Return recall@5 and MRR@10 of the ranked step lists against the answers."""
    found = reciprocal = 0.0
    for steps, answer in zip(ranked, answers, strict=True):
        if answer in steps[:5]:
            found += 1
        if answer in steps[:TOP]:
            reciprocal += 1.0 / (steps.index(answer) + 1)
    return found / len(answers), reciprocal / len(answers)


ENGINES = (
    "kvmemory keyword",
    "kvmemory semantic",
    "kvmemory hybrid",
    "kvmemory semantic (whole)",
    "kvmemory hybrid (whole)",
    "rank_bm25",
    "bm25s",
    "tantivy",
    "FTS5 direct",
)


def quality_run(
    shape: Shape, n_steps: int, n_facts: int, seed: int
) -> tuple[dict[tuple[str, str], list[list[int]]], list[Fact]]:
    """Return, per (engine, query kind), each fact's ranked steps on one corpus of ``shape``, and the facts."""
    rows, facts = make_corpus(shape, n_steps, n_facts, seed)
    tokenize = Tokenizer()
    docs = term_docs(rows, tokenize)
    took = time.perf_counter()
    memory = memory_of(rows)
    memory.search("warm up")  # tokenizes every item
    indexed = time.perf_counter() - took
    took = time.perf_counter()
    memory.index_embeddings(WordLlamaEmbedder())
    embedded = time.perf_counter() - took
    # The same steps embedded whole (EmbedParts.WHOLE: one vector a step, the default before parts).
    whole = memory_of(rows)
    search_index(whole, parts=EmbedParts.WHOLE)
    took = time.perf_counter()
    whole.index_embeddings(WordLlamaEmbedder())
    embedded_whole = time.perf_counter() - took
    peers: list[Fts5 | Tantivy | Bm25s | RankBm25] = []
    built = {}
    for make in (RankBm25, Bm25s, Tantivy, Fts5):
        took = time.perf_counter()
        peers.append(make(docs))
        built[make.name] = time.perf_counter() - took
    shares = ", ".join(
        f"{word!r} {100 * sum(word in doc for doc in docs) / len(docs):.0f}%"
        for word in ("is", "with", "to", "was")
    )
    print(
        f"  seed {seed}: {len(rows)} steps, {sum(map(len, docs)) / len(docs):.0f} terms a step, "
        f"held by: {shares}; "
        f"kvmemory indexed in {indexed:.1f} s, embedded in parts in {embedded:.1f} s "
        f"(whole {embedded_whole:.1f} s); "
        + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in built.items())
        + f"; {load()}",
        flush=True,
    )
    settle()
    check_same_terms(memory, docs, peers, facts[:10], tokenize)
    ranked: dict[tuple[str, str], list[list[int]]] = {}
    spent: dict[str, float] = {}
    for kind in KINDS:
        texts = [getattr(fact, kind) for fact in facts]
        for mode in ("keyword", "semantic", "hybrid"):
            query = kvmemory_query(memory, mode)
            took = time.perf_counter()
            ranked[f"kvmemory {mode}", kind] = [query(text, TOP) for text in texts]
            spent[f"kvmemory {mode}"] = (
                spent.get(f"kvmemory {mode}", 0.0) + time.perf_counter() - took
            )
        for mode in ("semantic", "hybrid"):
            query = kvmemory_query(whole, mode)
            took = time.perf_counter()
            ranked[f"kvmemory {mode} (whole)", kind] = [query(text, TOP) for text in texts]
            spent[f"kvmemory {mode} (whole)"] = (
                spent.get(f"kvmemory {mode} (whole)", 0.0) + time.perf_counter() - took
            )
        for peer in peers:
            took = time.perf_counter()
            ranked[peer.name, kind] = [peer.query(tokenize(text), TOP) for text in texts]
            spent[peer.name] = spent.get(peer.name, 0.0) + time.perf_counter() - took
    print(
        "    querying took: "
        + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in spent.items()),
        flush=True,
    )
    gc.unfreeze()
    return ranked, facts


def check_same_terms(
    memory: Memory,
    docs: Sequence[list[str]],
    peers: Sequence[Fts5 | Tantivy | Bm25s | RankBm25],
    facts: Sequence[Fact],
    tokenize: Tokenizer,
) -> None:
    """Assert that kvmemory, tantivy and FTS5 find each query term in as many steps as the terms say.

    Shows that every engine indexed the same terms (kvmemory counts a term's
    holders by a one-word query asking for every hit).
    """
    terms = {"is", "with"} | {
        term
        for fact in facts
        for text in (fact.lexical, fact.paraphrased)
        for term in tokenize(text)
    }
    held = dict.fromkeys(terms, 0)
    for doc in docs:
        for term in terms.intersection(doc):
            held[term] += 1
    for peer in peers:
        for term, count in held.items():
            if isinstance(peer, Tantivy):
                found = peer.searcher.doc_freq("body", term)
            elif isinstance(peer, Fts5):
                sql = "SELECT count(*) FROM docs WHERE docs MATCH ?"
                found = peer.db.execute(sql, (f'"{term}"',)).fetchone()[0]
            else:
                continue
            assert found == count, (peer.name, term, found, count)
    for term, count in held.items():
        if count:
            found = len(memory.search(term, len(docs)))
            assert found == count, ("kvmemory", term, found, count)


def _cell(values: Sequence[float], spread: bool) -> str:
    mid = statistics.median(values)
    if spread and len(values) > 1:
        return f"{mid:.3f} ({min(values):.2f}-{max(values):.2f})"
    return f"{mid:.3f}"


Recalls = dict[tuple[str, str], list[float]]  # (engine, kind) -> recall@5 per seed


def run_quality(
    shapes: Sequence[str], n_steps: int, n_facts: int, seeds: Sequence[int]
) -> dict[str, Recalls]:
    """Print the quality tables; return each corpus's recalls for the summary."""
    print(
        f"\n== quality: {n_steps} steps a corpus, {n_facts} facts, seeds {list(seeds)}; "
        f"BM25 k1={BM25_K1}, b={BM25_B}; rank_bm25 {version('rank-bm25')}, bm25s "
        f"{version('bm25s')}, tantivy {version('tantivy')}, SQLite {sqlite3.sqlite_version}"
    )
    out: dict[str, Recalls] = {}
    for name in shapes:
        shape = SHAPES[name]
        print(
            f"corpus {name}: page {shape.page_words[0]}-{shape.page_words[1]} words, facts in "
            f"{', '.join(shape.positions)}, {'question' if shape.questions else 'statement'} queries"
        )
        done = [quality_run(shape, n_steps, n_facts, seed) for seed in seeds]
        out[name] = _quality_table(name, [run for run, _ in done], [facts for _, facts in done])
    print(load())
    return out


def _quality_table(
    name: str, runs: Sequence[dict[tuple[str, str], list[list[int]]]], facts: Sequence[list[Fact]]
) -> Recalls:
    seeds = len(runs)
    recalls: Recalls = {}
    print(
        f"\n{name}: recall@5 and MRR@10, median over {seeds} seeds (recall's min-max)"
        f"\n{'engine':<27}" + "".join(f"{kind + ' R@5':>26}{'MRR':>7}" for kind in KINDS)
    )
    for engine in ENGINES:
        cells = []
        for kind in KINDS:
            pairs = [
                scores_of(run[engine, kind], [fact.step for fact in run_facts])
                for run, run_facts in zip(runs, facts, strict=True)
            ]
            recalls[engine, kind] = [r for r, _ in pairs]
            cells.append(
                f"{_cell([r for r, _ in pairs], True):>26}{_cell([m for _, m in pairs], False):>7}"
            )
        print(f"{engine:<27}" + "".join(cells))
    positions = sorted({fact.position for run_facts in facts for fact in run_facts})
    print("recall@5 by fact position (median over seeds), lexical | paraphrased")
    print(
        f"{'engine':<27}"
        + "".join(f"{p[:13]:>14}" for p in positions)
        + " |"
        + "".join(f"{p[:13]:>14}" for p in positions)
    )
    for engine in ENGINES:
        cells = []
        for kind in KINDS:
            for position in positions:
                values = []
                for run, run_facts in zip(runs, facts, strict=True):
                    picked = [
                        (steps, fact.step)
                        for steps, fact in zip(run[engine, kind], run_facts, strict=True)
                        if fact.position == position
                    ]
                    if picked:
                        values.append(scores_of([s for s, _ in picked], [a for _, a in picked])[0])
                cells.append(f"{statistics.median(values):>14.3f}" if values else f"{'-':>14}")
            cells.append(" |")
        print(f"{engine:<27}" + "".join(cells[:-1]))
    return recalls


# -- latency -------------------------------------------------------------------------------


def fastest(fn: Callable[[], object], repeat: int) -> float:
    """Return the best wall time of up to ``repeat`` calls of ``fn`` (one if it takes over 50 ms).

    The collector is off while ``fn`` runs. Unlike ``_common.best`` it runs no full collection before each call: with
    100,000 items held that takes longer than most queries (the heaps are
    frozen once built instead; see :func:`settle`).
    """
    times: list[float] = []
    for _ in range(repeat):
        gc.disable()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
        gc.enable()
        if times[-1] > 0.05:
            break  # a slow call is measured well enough once, and repeats cost the run minutes
    return min(times)


def settle() -> None:
    """Collect once and move what is built so far out of the collector's sight (``gc.freeze``)."""
    gc.collect()
    gc.freeze()


def _percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


Latency = dict[
    str, Any
]  # "n", "times" (engine -> per query), "common" (indexes), "add" (engine -> s)


def run_latency(shape_name: str, n_items: int, n_queries: int, repeat: int, rounds: int) -> Latency:
    """Print the latency tables; return the figures for the summary."""
    shape = SHAPES[shape_name]
    print(f"\n== latency: corpus {shape_name}, {n_items} steps; {load()}", flush=True)
    took = time.perf_counter()
    rows, facts = make_corpus(shape, n_items, min(240, n_items), seed=1)
    tokenize = Tokenizer()
    docs = term_docs(rows, tokenize)
    print(
        f"generated and tokenized in {time.perf_counter() - took:.1f} s, "
        f"{sum(map(len, docs)) / len(docs):.0f} terms a step"
    )
    took = time.perf_counter()
    memory = memory_of(rows)
    built = {"kvmemory": time.perf_counter() - took}
    took = time.perf_counter()
    memory.search("warm up")
    built["kvmemory first query"] = time.perf_counter() - took
    peers: list[Bm25s | Tantivy | Fts5] = []
    for make in (Bm25s, Tantivy, Fts5):
        took = time.perf_counter()
        peers.append(make(docs))
        built[make.name] = time.perf_counter() - took
    print("built: " + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in built.items()))
    rng = random.Random(5)
    picked = rng.sample(facts, min(len(facts), max(1, (n_queries - len(COMMON_QUERIES)) // 2)))
    queries = [(text, "common") for text in COMMON_QUERIES]
    queries += [(fact.lexical, "fact") for fact in picked]
    queries += [(fact.paraphrased, "fact") for fact in picked]
    share = _shares(memory, [text for text, _ in queries], tokenize, peers[-1])
    names = ["kvmemory", *(peer.name for peer in peers)]
    times: dict[str, list[float]] = {name: [] for name in names}
    keyword = kvmemory_query(memory, "keyword")
    settle()
    for text, _ in queries:
        terms = tokenize(text)
        times["kvmemory"].append(fastest(lambda text=text: keyword(text, 5), repeat))
        for peer in peers:
            times[peer.name].append(
                fastest(lambda peer=peer, terms=terms: peer.query(terms, 5), repeat)
            )
    common = [i for i, (_, group) in enumerate(queries) if group == "common"]
    print(
        f"keyword query, k=5, {len(queries)} queries ({len(common)} of common words, the rest "
        f"the facts' lexical and paraphrased ones), best of {repeat} each; ms; {load()}"
    )
    print(
        f"{'engine':<12}{'median':>9}{'p95':>9}{'max':>9}{'kv/peer med':>13}{'p95':>7}"
        f"{'common: median':>16}{'p95':>9}{'kv/peer med':>13}{'p95':>7}"
    )
    ours = times["kvmemory"]
    ours_common = [ours[i] for i in common]
    for name in names:
        mine = times[name]
        mine_common = [mine[i] for i in common]
        print(
            f"{name:<12}{1e3 * statistics.median(mine):>9.2f}{1e3 * _percentile(mine, 0.95):>9.2f}"
            f"{1e3 * max(mine):>9.2f}"
            f"{statistics.median(ours) / statistics.median(mine):>13.2f}"
            f"{_percentile(ours, 0.95) / _percentile(mine, 0.95):>7.2f}"
            f"{1e3 * statistics.median(mine_common):>16.2f}"
            f"{1e3 * _percentile(mine_common, 0.95):>9.2f}"
            f"{statistics.median(ours_common) / statistics.median(mine_common):>13.2f}"
            f"{_percentile(ours_common, 0.95) / _percentile(mine_common, 0.95):>7.2f}"
        )
    slowest = sorted(range(len(queries)), key=lambda i: -ours[i])[:6]
    print(
        "kvmemory's slowest: "
        + "; ".join(f"{queries[i][0]!r} ({share[i]}) {1e3 * ours[i]:.1f} ms" for i in slowest)
    )
    added = _add_then_query(shape, memory, peers, facts[0].lexical, tokenize, rounds)
    gc.unfreeze()
    print(load())
    return {"n": n_items, "times": times, "common": common, "add": added}


def _shares(memory: Memory, texts: Sequence[str], tokenize: Tokenizer, fts: Any) -> list[str]:
    """Return, per query, the share of the items holding one of its terms (as '12%')."""
    out = []
    total = len(memory)
    for text in texts:
        match = " OR ".join(f'"{term}"' for term in tokenize(text))
        (count,) = fts.db.execute(
            "SELECT count(*) FROM docs WHERE docs MATCH ?", (match,)
        ).fetchone()
        out.append(f"{100 * count / total:.0f}%")
    return out


def _add_then_query(
    shape: Shape,
    memory: Memory,
    peers: Sequence[Bm25s | Tantivy | Fts5],
    query: str,
    tokenize: Tokenizer,
    rounds: int,
) -> dict[str, float]:
    """Time adding 1,000 steps then one query, per engine; return the medians over ``rounds`` batches."""
    rng = random.Random(9)
    start = len(memory)
    times: dict[str, list[float]] = {"kvmemory": []}
    terms = tokenize(query)
    for round_ in range(rounds):
        rows = make_steps(shape, start + 1000 * round_, 1000, rng)
        docs = term_docs(rows, tokenize)
        items = [MemoryItem(**row) for row in rows]
        took = time.perf_counter()
        memory.add_memory_items(items)
        memory.search(query, 5)
        times["kvmemory"].append(time.perf_counter() - took)
        for peer in peers:
            if peer.name == "bm25s" and round_ >= 2:
                continue  # a rebuild takes long; two show its cost
            took = time.perf_counter()
            peer.add(docs, start + 1000 * round_)
            peer.query(terms, 5)
            times.setdefault(peer.name, []).append(time.perf_counter() - took)
    ours = statistics.median(times["kvmemory"])
    print(
        f"add 1,000 steps to {start}, then one query (median of {rounds} batches, bm25s "
        f"{min(rounds, 2)}; tantivy: add, commit, reload, query; FTS5: insert, commit, query; "
        "bm25s: rebuild, query; the peers get the terms, kvmemory's time includes tokenizing)"
    )
    medians = {name: statistics.median(values) for name, values in times.items()}
    for name, mid in medians.items():
        print(f"  {name:<12}{1e3 * mid:>10.1f} ms   kvmemory / {name}: {ours / mid:.2f}")
    return medians


PEERS = ("rank_bm25", "bm25s", "tantivy", "FTS5 direct")


def print_summary(quality: dict[str, Recalls], latency: Latency | None) -> None:
    """Print the issue's table: kvmemory against the best peer, from this run's figures."""

    def cell(values: Sequence[float]) -> str:
        mid = statistics.median(values)
        return f"{mid:.3f} ({min(values):.2f}-{max(values):.2f})"

    print("\n== summary: kvmemory against the best peer (recall@5: median over seeds, min-max)")
    print(f"{'':<52}{'kvmemory':<29}best peer")
    for corpus, recalls in quality.items():
        for kind in KINDS:
            top = max(PEERS, key=lambda peer: statistics.median(recalls[peer, kind]))
            modes = {mode: recalls[f"kvmemory {mode}", kind] for mode in ("keyword", "semantic")}
            better = max(modes, key=lambda mode: statistics.median(modes[mode]))
            print(
                f"{corpus + ', ' + kind + ' recall@5':<52}"
                f"{'keyword ' + cell(modes['keyword']):<29}{cell(recalls[top, kind])} {top}"
            )
            print(
                f"{'':<52}{'semantic ' + cell(modes['semantic']):<29}"
                f"hybrid {cell(recalls['kvmemory hybrid', kind])}, "
                f"{statistics.median(recalls['kvmemory hybrid', kind]) - statistics.median(modes[better]):+.3f}"
                f" against the better mode ({better})"
            )
            whole = {
                "keyword": modes["keyword"],
                "semantic": recalls["kvmemory semantic (whole)", kind],
            }
            best = max(whole, key=lambda mode: statistics.median(whole[mode]))
            print(
                f"{'':<52}{'semantic (whole) ' + cell(whole['semantic']):<29}"
                f"hybrid (whole) {cell(recalls['kvmemory hybrid (whole)', kind])}, "
                f"{statistics.median(recalls['kvmemory hybrid (whole)', kind]) - statistics.median(whole[best]):+.3f}"
                f" against the better mode ({best})"
            )
    if latency is None:
        return
    times, common = latency["times"], latency["common"]

    def figures(name: str, picked: Sequence[int] | None = None) -> str:
        values = times[name] if picked is None else [times[name][i] for i in picked]
        return f"{1e3 * statistics.median(values):.2f} / {1e3 * _percentile(values, 0.95):.2f} ms"

    for label, picked in (("", None), (", common words", common)):
        row = f"keyword query at {latency['n']}{label}, median / p95"
        peers = "; ".join(f"{name} {figures(name, picked)}" for name in times if name != "kvmemory")
        print(f"{row:<52}{figures('kvmemory', picked):<29}{peers}")
    added = latency["add"]
    ours = f"{1e3 * added['kvmemory']:.1f} ms"
    print(
        f"{'add 1,000 items, then query':<52}{ours:<29}"
        + "; ".join(
            f"{name} {1e3 * value:.1f} ms" for name, value in added.items() if name != "kvmemory"
        )
    )


# -- upkeep, stored vectors, keyword search in stores ---------------------------------------


def run_upkeep(n_items: int, repeat: int) -> None:
    rows = make_rows(n_items)
    items = [MemoryItem(**row) for row in rows]

    def add_items(indexed: bool) -> Memory:
        memory = Memory()
        if indexed:
            search_index(memory)
        for item in items:
            memory.add_memory_item(item)
        return memory

    def from_rows(indexed: bool) -> Memory:
        memory = Memory()
        if indexed:
            search_index(memory)
        for row in rows:
            memory.add_memory_item(MemoryItem(**row))
        return memory

    print()
    for label, build in (("adding made items", add_items), ("making and adding items", from_rows)):
        plain = best(lambda build=build: build(False), repeat)
        indexed = best(lambda build=build: build(True), repeat)
        print(
            f"building {n_items} items one by one, {label}: plain {plain:.3f} s, with index "
            f"{indexed:.3f} s, overhead {100 * (indexed / plain - 1):.0f}% (target <= 30%)"
        )
    memory = add_items(True)
    start = time.perf_counter()
    memory.search("press OK")
    print(
        f"first query after the build (tokenizes the {n_items} new items): {time.perf_counter() - start:.2f} s"
    )
    memory.add_memory_items([MemoryItem(step=-1, thought="one more step")])
    start = time.perf_counter()
    memory.search("zebra")
    print(
        f"query after one more add (tokenizes that item): {1e3 * (time.perf_counter() - start):.2f} ms"
    )


# -- stores ------------------------------------------------------------------------------

PAGE_WORDS = [
    "the",
    "dialog",
    "window",
    "report",
    "table",
    "cell",
    "value",
    "column",
    "row",
    "sheet",
    "chart",
    "export",
    "save",
    "print",
    "file",
    "folder",
    "document",
    "page",
    "title",
    "header",
    "footer",
    "button",
    "menu",
    "toolbar",
    "ribbon",
    "pane",
]


def ufo_items(n: int, seed: int = 11) -> list[MemoryItem]:
    """Return ``n`` UFO-shaped items: nested arguments and controls, and a long page text."""
    rng = random.Random(seed)
    items = []
    for row in make_ufo_rows(n):
        words = [rng.choice(PAGE_WORDS) for _ in range(120)]
        words[rng.randrange(120)] = f"ticket{rng.randrange(n)}"  # a rare word per item
        row["page"] = " ".join(words)
        items.append(MemoryItem(**row))
    return items


STORE_QUERIES = (
    "ticket4242",
    "WINWORD.EXE",
    "Report 42",
    "press OK to close the dialog",
    "chart export",
    "zebra",
    "10033 focused",  # a rare word and one every item holds once: thousands tie
    "92 66 71",  # numbers of a few hundred items each, tied
)


def run_stores(n_items: int, repeat: int, postgres: str | None) -> None:
    """Print keyword latency of SQLite and PostgreSQL stores next to their engines queried directly."""
    import tempfile

    from agents.memory.stores import PostgresStore, SQLiteStore

    items = ufo_items(n_items)
    tokenize = Tokenizer()
    with tempfile.TemporaryDirectory() as root:
        print(f"\nstores: {n_items} UFO-shaped items (nested dicts, a 120-word page each)")
        # A SQLite store always keeps its keyword index now; benchmarks/bench_stores.py
        # times the append against raw INSERTs plus an FTS5 insert of the same text.
        took = []
        for attempt in range(2):  # best of two: the machine's noise
            store = SQLiteStore(f"{root}/{attempt}.db", synchronous="normal")
            start = time.perf_counter()
            for i in range(0, n_items, 1000):
                store.append("run", items[i : i + 1000])
            took.append(time.perf_counter() - start)
            store.close()
        print(f"SQLite append in batches of 1000, keyword index on (best of 2): {min(took):.2f} s")
        indexed = SQLiteStore(f"{root}/1.db", synchronous="normal")
        con = sqlite3.connect(indexed.path)
        (key,) = con.execute("SELECT key FROM kvmemory_search WHERE session_id = 'run'").fetchone()

        def direct(query: str) -> list[tuple[int, bytes]]:
            match = " OR ".join(f'"{key}\u00b7{term}"' for term in tokenize(query))
            return con.execute(SQLITE_DIRECT, (match,)).fetchall()

        _latency_table("SQLite, one session (FTS5 bm25())", indexed, direct, repeat)
        indexed.append("other", items[:1000])
        _latency_table(
            "SQLite, two sessions (session BM25: FTS5 order or postings)", indexed, direct, repeat
        )
        indexed.close()
        con.close()
    if postgres is None:
        print("PostgreSQL: no server (pass --postgres URL, or install initdb/pg_ctl); skipped")
        return
    store = PostgresStore(postgres)
    start = time.perf_counter()
    for i in range(0, n_items, 1000):
        store.append("run", items[i : i + 1000])
    print(f"PostgreSQL append in batches of 1000: {time.perf_counter() - start:.2f} s")
    import psycopg

    pg = psycopg.connect(postgres, autocommit=True)
    pg.execute("VACUUM ANALYZE kvmemory_items")

    def direct_pg(query: str) -> list[tuple[int, bytes]]:
        lexemes = " | ".join(f"'run\u00b7{term}'" for term in tokenize(query))
        return pg.execute(POSTGRES_DIRECT, {"q": lexemes}).fetchall()

    _latency_table("PostgreSQL (tsvector, GIN)", store, direct_pg, repeat)
    store.close()
    pg.close()


SQLITE_DIRECT = (
    "SELECT i.seq, i.data FROM (SELECT rowid, bm25(kvmemory_fts) AS score FROM kvmemory_fts"
    " WHERE kvmemory_fts MATCH ? ORDER BY score, rowid LIMIT 5) AS f"
    " JOIN kvmemory_items AS i ON i.seq = f.rowid ORDER BY f.score, f.rowid"
)
POSTGRES_DIRECT = (
    "SELECT seq, data FROM kvmemory_items WHERE session_id = 'run' AND terms @@ %(q)s::tsquery"
    " ORDER BY ts_rank(terms, %(q)s::tsquery) DESC, seq LIMIT 5"
)


def _latency_table(label: str, store: object, direct: Callable[[str], object], repeat: int) -> None:
    print(f"{label}: store.search(k=5) against the engine queried directly (best of {repeat})")
    print(f"{'query':<32}{'store ms':>10}{'direct ms':>11}{'ratio':>8}{'target':>8}")
    for query in STORE_QUERIES:
        ours = best(lambda query=query: store.search("run", query, 5), repeat)  # type: ignore[attr-defined]
        raw = best(lambda query=query: direct(query), repeat)
        print(f"{query:<32}{ours * 1e3:>10.2f}{raw * 1e3:>11.2f}{ours / raw:>8.2f}{'<= 3':>8}")


class BytesEmbedder:
    """A stand-in embedder: each text's vector is its SHAKE-128 digest read as signed bytes."""

    def __init__(self, dimension: int) -> None:
        self.name = f"shake-bytes-{dimension}"
        self.dimension = dimension

    def __call__(self, texts: Sequence[str]) -> Any:
        raw = b"".join(
            hashlib.shake_128(text.encode("utf-8")).digest(self.dimension) for text in texts
        )
        return (
            np.frombuffer(raw, dtype=np.int8).astype(np.float32).reshape(len(texts), self.dimension)
        )


# The stored section measures reading and scoring vectors, one per item (sqlite-vec and
# pgvector rank only those); parts, the default, would multiply the rows.
WHOLE = EmbedParts.WHOLE
STORED_QUERIES = ["close the dialog and save as PDF", "Report 42.docx is focused", "zebra"]


def raw_cosine(matrix: Any, embedder: BytesEmbedder, query: str) -> Any:
    """The raw limit: embed the query, scale it, one matrix product, the top 5."""
    vector = embedder([query])[0]
    vector = vector / np.linalg.norm(vector)
    sims = matrix @ vector
    top = np.argpartition(sims, len(sims) - 5)[-5:]
    return top[np.argsort(-sims[top])]


def bench_stored(
    label: str, opener: Callable[[], Store], n_items: int, dimension: int, repeat: int
) -> None:
    """Time embedding a stored session, then semantic queries against raw numpy over the same matrix."""
    embedder = BytesEmbedder(dimension)
    items = [MemoryItem(**row) for row in make_rows(n_items)]
    with opener() as store:
        for start in range(0, n_items, 10_000):
            store.append("vectors", items[start : start + 10_000])
        took = time.perf_counter()
        store.index_embeddings("vectors", embedder, batch_size=1024, parts=WHOLE)
        took = time.perf_counter() - took
        stored = store.read_vectors("vectors", embedder, parts=WHOLE)
        matrix = np.stack(list(stored.values()))
        print(
            f"\n{label}: embedding and storing {n_items} vectors of {dimension} float32: "
            f"{took:.2f} s ({matrix.nbytes / 2**20:.0f} MiB of vectors)"
        )
        query_table(store, list(stored), matrix, embedder, repeat)
        took = time.perf_counter()
        memory = StoredMemory(store, "vectors")
        search_index(memory, parts=WHOLE)
        opened = time.perf_counter() - took
        took = time.perf_counter()
        memory.search(STORED_QUERIES[0], 5, mode="semantic", embedder=embedder)
        first = time.perf_counter() - took
        ours = best(
            lambda: memory.search(STORED_QUERIES[0], 5, mode="semantic", embedder=embedder),
            repeat,
        )
        raw = best(lambda: raw_cosine(matrix, embedder, STORED_QUERIES[0]), repeat)
        print(
            f"StoredMemory reopened ({opened:.2f} s to load the items): first semantic query "
            f"{first:.2f} s (reads the stored vectors, embeds none), then {ours * 1e3:.1f} ms, "
            f"{ours / raw:.1f}x raw"
        )


def query_table(
    store: Any, seqs: list[int], matrix: Any, embedder: BytesEmbedder, repeat: int
) -> None:
    """Time semantic store queries against raw numpy over the stored matrix; check the hits are raw's."""
    print(f"{'query':<36}{'store ms':>10}{'raw ms':>9}{'ratio':>8}")
    for query in STORED_QUERIES:
        ours = best(
            lambda query=query: store.search(
                "vectors", query, 5, mode="semantic", embedder=embedder, parts=WHOLE
            ),
            repeat,
        )
        raw = best(lambda query=query: raw_cosine(matrix, embedder, query), repeat)
        print(f"{query:<36}{ours * 1e3:>10.1f}{raw * 1e3:>9.2f}{ours / raw:>8.1f}")
    hits = store.search(
        "vectors", STORED_QUERIES[0], 5, mode="semantic", embedder=embedder, parts=WHOLE
    )
    want = [seqs[row] for row in raw_cosine(matrix, embedder, STORED_QUERIES[0])]
    assert [hit.seq for hit in hits] == want, (hits, want)


def bench_sqlite_vec(path: str, dimension: int, repeat: int) -> None:
    """Time semantic queries on the SQLite file bench_stored embedded, computed in SQL by sqlite-vec."""
    with SQLiteStore(path) as store:
        if not store.uses_sqlite_vec:
            print(
                "\nSQLite with sqlite-vec: not measured; it needs the sqlite-vec extra and a "
                "Python whose sqlite3 can load extensions (see docs/search.md)"
            )
            return
        embedder = BytesEmbedder(dimension)
        stored = store.read_vectors("vectors", embedder, parts=WHOLE)
        print("\nSQLite with sqlite-vec (cosines computed in SQL), the same file:")
        query_table(store, list(stored), np.stack(list(stored.values())), embedder, repeat)


def run_stored(n_items: int, dimension: int, repeat: int, postgres: str | None) -> None:
    with tempfile.TemporaryDirectory() as folder:

        def opener(url: str) -> Callable[[], Store]:
            return lambda: open_store(url)

        bench_stored(
            "in-process store", opener("memory://bench-vectors"), n_items, dimension, repeat
        )
        url = f"sqlite:///{folder}/v.db?sqlite_vec=off"
        label = "SQLite (numpy over the vectors read)"
        bench_stored(label, opener(url), n_items, dimension, repeat)
        bench_sqlite_vec(f"{folder}/v.db", dimension, repeat)
        bench_stored("JSONL", opener(f"jsonl:///{folder}/logs"), n_items, dimension, repeat)
    if postgres == "none":
        return
    from bench_stores import postgres_url

    from agents.memory.stores import PostgresStore

    # Two databases' worth: a fresh schema each, one ranking in Python, one with pgvector.
    for pgvector in (False, True):
        with postgres_url(postgres) as url:
            if url is None:
                return
            with PostgresStore(url, pgvector=pgvector) as probe:
                how = "pgvector in the server" if probe.uses_pgvector else "numpy over the rows"
            if pgvector and how != "pgvector in the server":
                print("\nPostgreSQL with pgvector: the server does not offer it; skipped")
                return
            bench_stored(
                f"PostgreSQL, {how}",
                lambda url=url, pgvector=pgvector: PostgresStore(url, pgvector=pgvector),
                n_items,
                dimension,
                repeat,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="small corpora, one seed: a fast check"
    )
    parser.add_argument(
        "--seeds", default=None, help="comma-separated corpus seeds (default 1,2,3)"
    )
    parser.add_argument("--steps", type=int, default=None, help="steps a quality corpus (20000)")
    parser.add_argument("--facts", type=int, default=240)
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--latency-shape", default="short-steps", choices=sorted(SHAPES))
    parser.add_argument("--items", type=int, default=None, help="steps for latency (100000)")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3, help="add-1,000 batches timed")
    parser.add_argument("--stored-items", type=int, default=None)
    parser.add_argument("--dimension", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=None)
    parser.add_argument("--sections", default="quality,latency,upkeep,stored,keyword-stores")
    parser.add_argument("--postgres", default=os.environ.get("KVMEMORY_BENCH_POSTGRES_URL"))
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--hybrid-steps", type=int, default=4000)
    parser.add_argument("--hybrid-facts", type=int, default=160)
    parser.add_argument("--hybrid-corpora", default="short,thought,page-mid,mixed")
    parser.add_argument("--hybrid-weights", default="0.6")
    args = parser.parse_args()
    quick = args.quick
    seeds = [int(s) for s in (args.seeds or ("1" if quick else "1,2,3")).split(",")]
    steps = args.steps or (3000 if quick else 20_000)
    items = args.items or (10_000 if quick else 100_000)
    stored_items = args.stored_items or (10_000 if quick else 100_000)
    repeat = args.repeat or (2 if quick else 3)
    sections = set(args.sections.split(","))
    unknown = sections - {"quality", "hybrid", "latency", "upkeep", "stored", "keyword-stores"}
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}")
    print(f"bench_search: {load()}")
    started = time.perf_counter()
    quality = latency = None
    if "quality" in sections:
        quality = run_quality(args.shapes.split(","), steps, args.facts, seeds)
    if "hybrid" in sections:
        from _hybrid_quality import run_hybrid

        run_hybrid(
            args.hybrid_steps,
            args.hybrid_facts,
            args.hybrid_corpora.split(","),
            [float(w) for w in args.hybrid_weights.split(",")],
        )
    if "latency" in sections:
        latency = run_latency(args.latency_shape, items, args.queries, repeat, args.rounds)
    if "upkeep" in sections:
        run_upkeep(items, repeat)
    if "stored" in sections:
        postgres = "none" if args.no_postgres else args.postgres
        run_stored(stored_items, args.dimension, repeat, postgres)
    if "keyword-stores" in sections:
        from bench_stores import postgres_url

        if args.no_postgres:
            run_stores(items, repeat, None)
        else:
            with postgres_url(args.postgres) as url:
                run_stores(items, repeat, url)
    if quality is not None:
        print_summary(quality, latency)
    print(f"\nbench_search done in {time.perf_counter() - started:.0f} s; {load()}")


if __name__ == "__main__":
    main()
