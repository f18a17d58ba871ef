"""A crowded tuning corpus: agent steps so alike that a hundred or more lie close to any query.

Tuning data, next to benchmarks/_search_corpus.py and _hybrid_quality.py
(whose subjects, relations and objects it uses): the hybrid blend may be
chosen on it. Its held-out counterpart is the ``crowded-steps`` family of
benchmarks/corpora_heldout.py, which shares none of its templates,
subjects, relations or paraphrases.

Steps are a planner and a worker agent filing a household errand list in
a browser: every step records one or two errand notes shaped like a fact
("the couch is owned by Quentin", "the parcel got relocated to Oslo"),
each pairing a subject or relation of the facts (said or paraphrased)
with other words, so that the query's 100th best cosine is high (the
failure the issue reports: the blend's discount then silences the
semantic side). Only the planted fact holds its subject and relation
together, in any wording. Queries: *lexical* ("the car was moved to"),
*paraphrased* ("the automobile got relocated to") and *mixed* (one of the
two said, the other paraphrased).
"""

from __future__ import annotations

import random
from typing import Any

from _search_corpus import OBJECTS, RELATIONS, STOP_WORDS, SUBJECTS

from agents.memory.search import Tokenizer

__all__ = ["make_corpus"]

_OTHER = ["shoebox", "coat hanger", "door mat", "bus pass", "lunch tin", "charger"]
_SITES = ["errands.example", "notes.example", "tasks.example"]
_GOALS = [
    "file the errand notes of the week on {site}",
    "copy the errand list into the shared notes on {site}",
    "tick off the errands that are done on {site}",
]
_PLANNER = [
    "Next the worker files the open errand notes on {site}.",
    "The errand list is long; the worker should go on filing.",
]
_WORKER = [
    "Typing the errand note into the {element} box.",
    "The note is filed; pressing {element} to go on.",
    "Reading the errand note back before {element}.",
]
_ELEMENTS = ["Submit", "Next", "Title", "Body", "Add note", "Done", "Tag", "Menu", "Back"]
_RESULTS = ["Note {n} filed:", "The list now holds note {n}:", "Saved note {n} on {site}:"]


_NOTE_SAID = 0.93  # the share of entries with the words as said; the rest paraphrased


def _note(rng: random.Random, taken: set[tuple[str, str]]) -> str:
    while True:
        subject = rng.choice(SUBJECTS)
        relation = rng.choice(RELATIONS)
        if (subject[0], relation[0]) not in taken:
            break
    said = rng.random() < _NOTE_SAID
    noun = (subject[0] if said else subject[1]) if rng.random() < 0.5 else rng.choice(_OTHER)
    verb = relation[0] if said else relation[2]
    return f"the {noun} {verb} {rng.choice(OBJECTS)}"


def _step(rng: random.Random, i: int, taken: set[tuple[str, str]]) -> dict[str, Any]:
    planner = i % 4 == 0
    site = _SITES[(i // 30) % len(_SITES)]
    element = rng.choice(_ELEMENTS)
    notes = [_note(rng, taken) for _ in range(rng.choice((1, 2, 2)))]
    return {
        "step": i,
        "role": "planner" if planner else "worker",
        "goal": rng.choice(_GOALS).format(site=site),
        "tool": "delegate" if planner else rng.choice(["type", "click", "scroll", "read"]),
        "tool_input": {"element": element, "text": ""},
        "reflection": rng.choice(_PLANNER if planner else _WORKER).format(
            site=site, element=element
        ),
        "elements": [
            {"id": str(k), "name": rng.choice(_ELEMENTS), "role": "button"}
            for k in range(rng.randint(2, 7))
        ],
        "result": rng.choice(_RESULTS).format(n=rng.randrange(1, 500), site=site)
        + " "
        + "; ".join(notes)
        + ".",
        "site": site,
    }


def _content(terms: list[str]) -> set[str]:
    return {term for term in terms if term not in STOP_WORDS}


def make_corpus(
    n_steps: int, n_facts: int, seed: int
) -> tuple[list[dict[str, Any]], dict[str, list[tuple[str, int]]]]:
    """Return ``n_steps`` crowded steps with ``n_facts`` planted facts and the query sets ``(query, step)``.

    Raises:
        ValueError: if more facts are asked for than steps or (subject, relation) pairs.
        AssertionError: if a query breaks its kind's word-sharing rule.
    """
    pairs = [(s, r) for s in SUBJECTS for r in RELATIONS]
    if n_facts > min(len(pairs), n_steps):
        msg = f"make_corpus() plants at most {min(len(pairs), n_steps)} facts, got {n_facts}"
        raise ValueError(msg)
    rng = random.Random(f"crowded/{seed}")
    rng.shuffle(pairs)
    pairs = pairs[:n_facts]
    taken = {(subject[0], relation[0]) for subject, relation in pairs}
    rows = [_step(rng, i, taken) for i in range(n_steps)]
    tokenize = Tokenizer()
    sets: dict[str, list[tuple[str, int]]] = {"lexical": [], "paraphrased": [], "mixed": []}
    for step, ((subject, alt), (relation, _, alt_relation, _)) in zip(
        sorted(rng.sample(range(n_steps), n_facts)), pairs, strict=True
    ):
        sentence = f"the {subject} {relation} {rng.choice(OBJECTS)}"
        row = rows[step]
        where = rng.choice(("reflection", "result", "elements"))
        if where == "reflection":
            row["reflection"] = f"{sentence}. {row['reflection']}"
        elif where == "result":
            row["result"] = f"{row['result']} {sentence}."
        else:
            row["elements"][-1]["name"] = sentence
        lexical = f"the {subject} {relation}"
        paraphrased = f"the {alt} {alt_relation}"
        mixed = f"the {subject} {alt_relation}" if rng.random() < 0.5 else f"the {alt} {relation}"
        said = set(tokenize(sentence))
        assert _content(tokenize(lexical)) <= said, (lexical, sentence)
        assert not _content(tokenize(paraphrased)) & said, (paraphrased, sentence)
        mixed_words = _content(tokenize(mixed))
        assert mixed_words & said, (mixed, sentence)
        assert mixed_words - said, (mixed, sentence)
        sets["lexical"].append((lexical, step))
        sets["paraphrased"].append((paraphrased, step))
        sets["mixed"].append((mixed, step))
    return rows, sets
