"""Hybrid quality: recall@5 of keyword, semantic and hybrid search over several corpora.

Each corpus is an agent session with planted facts ("the car was moved to
Lisbon"), each asked four ways: *lexical* (the fact's words), *lexical
question* (the same inside a question whose other words no item holds),
*paraphrased* (no content word shared: "the automobile got relocated to")
and *paraphrased question*. Corpora vary the step length and where the fact
lies: ``short`` (one-line steps, the fact is the thought), ``thought``,
``page-start``, ``page-mid``, ``page-end`` (UFO-shaped steps with nested
fields and a 60-200 word page; the fact in the thought, or at the start,
middle or end of the page) and ``mixed`` (each fact placed at random).
Semantic search uses wordllama, the offline default, with vectors of whole
items and of parts (``EmbedParts()``); hybrid blends keyword with each.
Used by ``bench_search.py --sections hybrid``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence

from agents.memory import Memory, MemoryItem
from agents.memory.search import EmbedParts, WordLlamaEmbedder, search, search_index

SUBJECTS = [
    ("car", "automobile"),
    ("doctor", "physician"),
    ("lawyer", "attorney"),
    ("movie", "film"),
    ("sofa", "couch"),
    ("invoice", "bill"),
    ("password", "passcode"),
    ("laptop", "notebook computer"),
    ("children", "kids"),
    ("boss", "manager"),
    ("meeting", "appointment"),
    ("gift", "present"),
    ("luggage", "baggage"),
    ("shop", "store"),
    ("medicine", "medication"),
    ("trash", "garbage"),
    ("photo", "picture"),
    ("telephone", "mobile phone"),
    ("teacher", "instructor"),
    ("road", "street"),
]
RELATIONS = [
    ("was moved to", "got relocated to"),
    ("costs", "is priced at"),
    ("was repaired by", "got fixed by"),
    ("belongs to", "is owned by"),
    ("was bought in", "was purchased in"),
    ("was hidden under", "got concealed beneath"),
    ("was delivered on", "arrived on"),
    ("was borrowed by", "got lent to"),
    ("was cleaned with", "got washed using"),
    ("was photographed at", "got pictured at"),
]
OBJECTS = ["Lisbon", "Marta", "Tuesday", "the red box", "Olsen", "March", "vinegar", "Kyoto"]
FILLER = [
    "click the {n} button in the toolbar",
    "scroll down the settings page to row {n}",
    "type the search text into field {n}",
    "the dialog {n} is open, press OK to close it",
    "wait for the progress bar to reach {n} percent",
    "select tab {n} and read the status line",
    "the window title shows Report {n}.docx",
]
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
QUESTIONS = [
    "what about {q}?",
    "which step said {q}",
    "do you remember when {q}?",
    "where did I note that {q}",
]
CORPORA = ("short", "thought", "page-start", "page-mid", "page-end", "mixed")
QUERY_SETS = ("lexical", "lexical question", "paraphrased", "paraphrased question")

Queries = dict[str, list[tuple[str, int]]]


def make_corpus(kind: str, n_steps: int, n_facts: int, seed: int = 7) -> tuple[Memory, Queries]:
    """Return a session of ``kind`` and its query sets ``(query, step)``.

    ``kind`` is one of :data:`CORPORA`, or ``short-steps`` / ``long-pages``:
    the quality section's corpora (benchmarks/_search_corpus.py, whose
    queries are statements or questions by shape), asked lexically and
    paraphrased.
    """
    if kind in ("short-steps", "long-pages"):
        from _search_corpus import SHAPES
        from _search_corpus import make_corpus as make_shaped

        rows, planted = make_shaped(SHAPES[kind], n_steps, n_facts, seed)
        shaped = Memory([MemoryItem(**row) for row in rows])
        return shaped, {
            "lexical": [(fact.lexical, fact.step) for fact in planted],
            "paraphrased": [(fact.paraphrased, fact.step) for fact in planted],
        }
    rng = random.Random(seed)
    pairs = [(s, r) for s in SUBJECTS for r in RELATIONS]
    rng.shuffle(pairs)
    pairs = pairs[:n_facts]
    planted = dict(zip(sorted(rng.sample(range(n_steps), len(pairs))), pairs, strict=True))
    apps = ["WINWORD.EXE", "EXCEL.EXE", "explorer.exe"]
    actions = ["click_input", "set_edit_text", "wheel_mouse_input", "select", "wait"]
    memory = Memory()
    facts: list[tuple[str, str, int]] = []
    for step in range(n_steps):
        fact = None
        if step in planted:
            (subject, subject_alt), (relation, relation_alt) = planted[step]
            fact = f"the {subject} {relation} {rng.choice(OBJECTS)}"
            facts.append((f"the {subject} {relation}", f"the {subject_alt} {relation_alt}", step))
        thought = rng.choice(FILLER).format(n=rng.randrange(1000))
        if kind == "short":
            text = f"Noted for later: {fact}." if fact else thought
            memory.add_memory_item(MemoryItem(step=step, thought=text, action="note"))
            continue
        page = [rng.choice(PAGE_WORDS) for _ in range(rng.randrange(60, 200))]
        where = rng.choice(CORPORA[1:5]) if kind == "mixed" else kind
        if fact is not None:
            if where == "thought":
                thought = f"{thought}; also noted: {fact}."
            else:
                at = {"page-start": 0, "page-mid": len(page) // 2, "page-end": len(page)}[where]
                page[at:at] = fact.split()
        memory.add_memory_item(
            MemoryItem(
                step=step,
                subtask=f"Save the report {step % 97} as PDF",
                action=actions[step % 5],
                arguments={"x": 100 + step % 800, "y": 40 + step % 600, "button": "left"},
                observation=f"window 'Report {step % 97}.docx' is focused; 3 controls visible",
                thought=thought,
                status="CONTINUE",
                application=apps[step % 3],
                controls=[
                    {"label": str(k), "control_text": f"Button {k}", "control_type": "Button"}
                    for k in range(3)
                ],
                page=" ".join(page),
            )
        )
    ask = random.Random(seed + 1)

    def question(text: str) -> str:
        return ask.choice(QUESTIONS).format(q=text)

    sets: Queries = {
        "lexical": [(lexical, step) for lexical, _, step in facts],
        "lexical question": [(question(lexical), step) for lexical, _, step in facts],
        "paraphrased": [(para, step) for _, para, step in facts],
        "paraphrased question": [(question(para), step) for _, para, step in facts],
    }
    return memory, sets


Ranker = Callable[[str], list[int]]


def recall_at_5(rank: Ranker, queries: Sequence[tuple[str, int]]) -> float:
    """Return the share of queries whose step is among ``rank``'s first five."""
    return sum(step in rank(query)[:5] for query, step in queries) / len(queries)


def run_hybrid(
    n_steps: int, n_facts: int, corpora: Sequence[str], weights: Sequence[float]
) -> None:
    """Print recall@5 per mode, per corpus and query set; flag a hybrid 0.02 or more below the better mode."""
    embedder = WordLlamaEmbedder()
    print(
        f"\nhybrid quality: recall@5, {n_steps} steps and {n_facts} facts per corpus, "
        f"semantic by {embedder.name}; whole = one vector per item, parts = EmbedParts()"
    )
    header = f"{'corpus':<11}{'queries':<22}{'keyword':>8}{'sem whole':>10}{'sem parts':>10}"
    header += "".join(
        f"{'hyb ' + kind + ' ' + str(w):>18}" for kind in ("whole", "parts") for w in weights
    )
    print(header)
    for kind in corpora:
        memory, sets = make_corpus(kind, n_steps, n_facts)
        columns: dict[str, dict[str, float]] = {name: {} for name in sets}
        for parts_name, parts in (("whole", EmbedParts.WHOLE), ("parts", EmbedParts())):
            search_index(memory, parts=parts)
            start = time.perf_counter()
            memory.index_embeddings(embedder)
            took = time.perf_counter() - start
            print(f"  ({kind}: embedded {parts_name} in {took:.1f} s)")
            for name, queries in sets.items():
                if parts_name == "whole":
                    columns[name]["keyword"] = recall_at_5(
                        _ranker(memory, "keyword", None), queries
                    )
                columns[name][f"sem {parts_name}"] = recall_at_5(
                    _ranker(memory, "semantic", None), queries
                )
                for w in weights:
                    columns[name][f"hyb {parts_name} {w}"] = recall_at_5(
                        _ranker(memory, "hybrid", w), queries
                    )
        for name, row in columns.items():
            cells = f"{kind:<11}{name:<22}{row['keyword']:>8.3f}{row['sem whole']:>10.3f}{row['sem parts']:>10.3f}"
            for parts_name in ("whole", "parts"):
                better = max(row["keyword"], row[f"sem {parts_name}"])
                for w in weights:
                    got = row[f"hyb {parts_name} {w}"]
                    mark = " " if got >= better - 0.02 else "!"
                    cells += f"{got:>17.3f}{mark}"
            print(cells)
    print("! marks a hybrid more than 0.02 below the better of keyword and its semantic mode")


def _ranker(memory: Memory, mode: str, weight: float | None) -> Ranker:
    def rank(query: str) -> list[int]:
        hits = search(memory, query, 5, mode=mode, hybrid_weight=weight)  # type: ignore[arg-type]
        return [hit.item["step"] for hit in hits]

    return rank
