"""Embedding at whole-item cost: wordllama's vectors from tokens remembered per piece (search/_pooling.py), float for float, and each distinct text embedded once (vectors_once)."""

from __future__ import annotations

import functools
import importlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.memory import Memory, MemoryItem, _vectors
from agents.memory._vectors import TEXTS_KEPT, checked_vectors, vectors_once
from agents.memory.search import (
    EmbedParts,
    HashingEmbedder,
    WordLlamaEmbedder,
    _item_vectors,
    search_index,
)
from agents.memory.search._item_vectors import ItemVectors, Vectors
from agents.memory.search._pooling import MARK, TokenPooling, splits_at_spaces

# Words and separators that reach every branch of the tokenizer: plain words,
# byte fallback (emoji, rare scripts), digits and punctuation, the word-start
# mark itself, special tokens, and white space of every kind.
WORDS = [
    "a",
    "report",
    "Report.pdf",
    "click_input",
    "(menú)",
    "Ярлык",
    "\U0001f600",
    "3.14",
    "42x,",
    "été",
    "'s",
    MARK,
    "<s>",
    "</s>",
    "<unk>",
    "<",
    "s>",
    "\u3000",
]
SEPARATORS = [" ", " ", " ", "  ", "\n", "\t", "", " \n "]

texts = st.lists(
    st.tuples(st.sampled_from(SEPARATORS), st.sampled_from(WORDS)).map("".join), max_size=12
).map("".join)


def wordllama_model(dimension: int = 256) -> Any:
    """Load wordllama's default model from its wheel, as WordLlamaEmbedder does."""
    wordllama = importlib.import_module("wordllama")
    package = Path(str(wordllama.__file__)).parent
    return wordllama.WordLlama.load(
        "l2_supercat", cache_dir=package, dim=256, trunc_dim=dimension, disable_download=True
    )


MODEL = wordllama_model()
POOLING = TokenPooling.of(MODEL, 256)


def pooling() -> TokenPooling:
    assert POOLING is not None
    return POOLING


def wordllama_vectors(model: Any, texts: Sequence[str]) -> Any:
    return np.asarray(model.embed(list(texts)), dtype=np.float32)


@settings(max_examples=200, deadline=None)
@given(st.lists(texts, min_size=1, max_size=6))
def test_pooling_gives_wordllama_vectors_for_any_text(batch: list[str]) -> None:
    """For texts of any words and white space, pooled vectors equal wordllama's embed float for float."""
    assert np.array_equal(pooling()(batch), wordllama_vectors(MODEL, batch))


@settings(max_examples=200, deadline=None)
@given(st.lists(texts, min_size=1, max_size=6))
def test_pooling_tokens_are_the_tokenizers_for_the_whole_text(batch: list[str]) -> None:
    """A text's tokens assembled from its pieces are the tokenizer's tokens of the whole text."""
    encodings = MODEL.tokenizer.encode_batch(batch, add_special_tokens=False)
    wanted = [[t for t, m in zip(e.ids, e.attention_mask, strict=True) if m] for e in encodings]
    assert pooling().token_ids(batch) == wanted


def test_pooling_gives_wordllama_vectors_of_the_parts_of_agent_steps() -> None:
    """The parts of agent steps (EmbedParts()) and the steps whole get wordllama's vectors exactly."""
    steps = [
        {
            "step": n,
            "thought": f"I should open the export dialog of report {n} and save it as PDF",
            "status": "CONTINUE",
            "application": "WINWORD.EXE",
            "controls": [{"name": "File", "type": "MenuItem"}, {"name": f"Page {n}"}],
            "page": "Noted for later: the car was moved to Lisbon.\n" * (1 + n % 3),
        }
        for n in range(40)
    ]
    for parts in (EmbedParts(), EmbedParts.WHOLE, EmbedParts(chunk_words=3, overlap=1)):
        batch = [text for step in steps for text in parts.texts(step, None)]
        assert np.array_equal(pooling()(batch), wordllama_vectors(MODEL, batch))


def test_pooling_keeps_wordllamas_vectors_at_a_smaller_dimension() -> None:
    """At 64 dimensions (Matryoshka truncation) pooling is used and equals wordllama's embed."""
    model = wordllama_model(64)
    small = TokenPooling.of(model, 64)
    assert small is not None
    batch = ["the report dialog was closed", "press OK to save the file", "a"]
    assert np.array_equal(small(batch), wordllama_vectors(model, batch))


def test_pooling_remembers_at_most_the_pieces_it_may_keep() -> None:
    """With room for 5 pieces, many distinct words keep at most 5 remembered and vectors stay exact."""
    small = TokenPooling.of(MODEL, 256, kept=5)
    assert small is not None
    batch = [f"word{n} and report{n} were saved" for n in range(30)]
    assert np.array_equal(small(batch), wordllama_vectors(MODEL, batch))
    assert 0 < small.remembered <= 5


def test_pooling_refuses_a_tokenizer_whose_tokens_may_span_a_space() -> None:
    """A tokenizer with a pre-tokenizer, or a token with a word mark inside, is not split at spaces."""
    spec = json.loads(MODEL.tokenizer.to_str())
    assert splits_at_spaces(spec)
    assert not splits_at_spaces({**spec, "pre_tokenizer": {"type": "Whitespace"}})
    joined = {**spec["model"], "vocab": {**spec["model"]["vocab"], f"a{MARK}b": 32000}}
    assert not splits_at_spaces({**spec, "model": joined})
    runs = {**spec["model"], "vocab": {**spec["model"]["vocab"], MARK * 3: 32000}}
    assert splits_at_spaces({**spec, "model": runs})


class PlainWordLlama:
    """wordllama's own embed under the default embedder's name: what WordLlamaEmbedder called before pooling."""

    name = "wordllama-l2_supercat-256"
    dimension = 256

    def __call__(self, texts: Sequence[str], /) -> Any:
        """Return wordllama's vectors of ``texts``."""
        return wordllama_vectors(MODEL, texts)


def test_wordllama_embedder_ranks_as_wordllamas_own_embed() -> None:
    """Memory.search over parts gives the same hits and scores with WordLlamaEmbedder as with wordllama's embed."""
    items = [
        MemoryItem(step=n, thought=text, status="CONTINUE" if n % 2 else "FINISH")
        for n, text in enumerate(
            [
                "The physician prescribed medicine for the fever",
                "The stock market fell sharply on Monday",
                "We parked the automobile in the garage",
                "open the file menu and click export",
                "the export dialog shows a PDF option",
                "close Word and tell the host agent the task is done",
            ]
        )
    ]
    queries = ["where did we leave the car", "doctor", "export the report as pdf", "finished"]
    ranked = []
    for embedder in (WordLlamaEmbedder(), PlainWordLlama()):
        memory = Memory(items)
        search_index(memory, parts=EmbedParts())
        ranked.append(
            [
                [
                    (hit.item["step"], hit.score)
                    for hit in memory.search(q, 6, mode=mode, embedder=embedder)
                ]
                for q in queries
                for mode in ("semantic", "hybrid")
            ]
        )
    assert ranked[0] == ranked[1]


def test_vectors_once_embeds_each_distinct_text_once_and_keeps_a_bounded_number() -> None:
    """vectors_once gives checked_vectors' vectors, embeds a repeated or known text once, and keeps at most TEXTS_KEPT."""
    embedder = CountingHashing()
    known: dict[str, Any] = {}
    batch = ["status CONTINUE", "app WINWORD", "status CONTINUE", "step 1"]
    got = vectors_once(embedder, batch, known)
    assert np.array_equal(got, checked_vectors(HashingEmbedder(64), batch))
    assert embedder.texts == 3
    vectors_once(embedder, ["app WINWORD", "step 2"], known)
    assert embedder.texts == 4
    many = [f"word{n}" for n in range(TEXTS_KEPT + 10)]
    assert np.array_equal(
        vectors_once(embedder, many, known), checked_vectors(HashingEmbedder(64), many)
    )
    assert 0 < len(known) <= TEXTS_KEPT


class CountingHashing:
    """A HashingEmbedder(64) that counts the texts it embeds."""

    name = "hashing-3gram-64"
    dimension = 64

    def __init__(self) -> None:
        self.inner = HashingEmbedder(64)
        self.texts = 0

    def __call__(self, texts: Sequence[str], /) -> Any:
        """Embed ``texts`` and count them."""
        self.texts += len(texts)
        return self.inner(texts)


PART_TEXTS = ["status CONTINUE", "app WINWORD", "open the file", "save as PDF", "a", "b c"]

# Batches of items: each a key (a few, so later batches file some keys again) and its part texts.
batches = st.lists(
    st.dictionaries(
        st.integers(0, 9), st.lists(st.sampled_from(PART_TEXTS), max_size=4), max_size=6
    ),
    max_size=5,
)


@settings(max_examples=150, deadline=None)
@given(batches, st.booleans())
def test_put_texts_files_each_key_as_its_parts_one_by_one(
    filed: list[dict[int, list[str]]], screened: bool
) -> None:
    """Vectors.put_texts gives each key the vectors of its distinct part texts, embeds only texts no row holds (each once), counts each row's holders, and scores as the plain model, keys filed again and freed rows reused included."""
    inner = functools.partial(checked_vectors, HashingEmbedder(64))
    calls: list[list[str]] = []

    def embed(texts: list[str]) -> Any:
        calls.append(texts)
        return inner(texts)

    model: dict[int, list[str]] = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_item_vectors, "SCREEN_ROWS", 2)
        table = Vectors("m", 64, EmbedParts())
        for batch in filed:
            held = {text for texts in model.values() for text in texts}
            calls.clear()
            table.put_texts(list(batch), list(batch.values()), embed)
            wanted = list(dict.fromkeys(t for texts in batch.values() for t in texts))
            assert calls == ([[t for t in wanted if t not in held]] if set(wanted) - held else [])
            model.update(batch)
            model = {key: texts for key, texts in model.items() if texts}
            if screened:
                table.prepare(screen=True)
        assert set(table.rows_of) == set(model)
        assert table.used <= len(PART_TEXTS)  # a freed row is filled before a new one is taken
        holders = np.zeros(table.used, dtype=np.int64)
        for key, texts in model.items():
            rows = table.rows_of[key]
            holders[rows] += 1
            assert np.array_equal(table.matrix[rows], inner(list(dict.fromkeys(texts))))
        assert np.array_equal(table.uses[: table.used], holders)
        query = inner(["open the PDF file"])[0]
        best = {key: float(inner(texts).dot(query).max()) for key, texts in model.items()}
        every = table.scores(query, None)
        assert every == pytest.approx(best, abs=1e-6)
        top = max(every.values(), default=0.0)
        assert table.scores(query, 1) == {
            key: score for key, score in every.items() if score >= top
        }


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.lists(st.sampled_from([*PART_TEXTS, "x y z w v u t s"]), max_size=5), max_size=12),
    st.integers(1, 5),
)
def test_embedding_in_batches_gives_the_vectors_of_embedding_item_by_item(
    steps: list[list[str]], batch_size: int
) -> None:
    """ItemVectors.embed in batches of any size files, for each item, the part vectors of embedding one item a batch, float for float."""
    items = {
        n: MemoryItem(step=n, **{f"f{i}": text for i, text in enumerate(texts)})
        for n, texts in enumerate(steps)
    }
    parts = EmbedParts(chunk_words=3, overlap=1, whole=True)
    batched, one_by_one = (
        ItemVectors(parts).embed(HashingEmbedder(64), None, items, batch_size=size, progress=None)
        for size in (batch_size, 1)
    )
    assert batched.rows_of.keys() == one_by_one.rows_of.keys()
    for key, rows in batched.rows_of.items():
        assert np.array_equal(batched.matrix[rows], one_by_one.matrix[one_by_one.rows_of[key]])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.sampled_from(PART_TEXTS), max_size=8), max_size=6))
def test_vectors_once_over_batches_keeps_what_a_text_by_text_filling_keeps(
    batches: list[list[str]],
) -> None:
    """vectors_once gives each text its own vector, embeds only texts ``known`` lacks, and leaves in ``known`` what filling it a text at a time (emptied when full) leaves."""
    embedder = CountingHashing()
    known: dict[str, Any] = {}
    model: dict[str, None] = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_vectors, "TEXTS_KEPT", 3)
        for batch in batches:
            before = embedder.texts
            fresh = [text for text in dict.fromkeys(batch) if text not in model]
            got = _vectors.vectors_once(embedder, batch, known)
            assert np.array_equal(got, checked_vectors(HashingEmbedder(64), batch).reshape(-1, 64))
            assert embedder.texts - before == len(fresh)
            for text in fresh:
                if len(model) >= 3:
                    model.clear()
                model[text] = None
            assert list(known) == list(model)


STEP_WORDS = ["open", "the", "file", "Ярлык", "(menú)", "été", "\U0001f600", "3.14", "OK", "a"]

# A field's text: 0 to 18 words (8 and 9 among them: one window, two windows), any white space.
field_texts = st.lists(
    st.tuples(st.sampled_from(STEP_WORDS), st.sampled_from([" ", " ", "\n", "  ", "\t"])),
    max_size=18,
).map(lambda pairs: "".join(word + space for word, space in pairs))
field_values = st.recursive(
    field_texts | st.integers(0, 3) | st.none(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("xyz"), inner),
    max_leaves=6,
)
step_fields = st.dictionaries(
    st.sampled_from(["thought", "action", "page", "status"]), field_values
)
cuts = st.builds(
    lambda size, overlap, whole: EmbedParts(
        chunk_words=size, overlap=0 if size is None else overlap % size, whole=whole
    ),
    st.sampled_from([None, 1, 2, 3, 8]),
    st.integers(0, 7),
    st.booleans(),
) | st.just(EmbedParts.WHOLE)
EMBEDDERS = {"hashing": HashingEmbedder(64), "wordllama": WordLlamaEmbedder()}


@settings(max_examples=150, deadline=None)
@given(
    st.lists(step_fields, max_size=12),
    st.lists(st.tuples(st.integers(0, 11), step_fields), max_size=4),
    cuts,
    st.integers(1, 5),
    st.sampled_from(sorted(EMBEDDERS)),
)
def test_each_part_holds_the_vector_of_its_text_embedded_alone(
    steps: list[dict[str, Any]],
    changes: list[tuple[int, dict[str, Any]]],
    parts: EmbedParts,
    batch_size: int,
    name: str,
) -> None:
    """ItemVectors.embed gives each item, over nested, empty, unicode and 8 or 9 word fields, the vectors of its distinct part texts each embedded alone, float for float; after changes too."""
    embedder = EMBEDDERS[name]
    items = {n: MemoryItem(step=n, **fields) for n, fields in enumerate(steps)}
    table = ItemVectors(parts)
    made = table.table(embedder, None, items)
    made.matrix, made.uses = made.matrix[:1].copy(), made.uses[:1].copy()  # every embed grows it
    table.embed(embedder, None, items, batch_size=batch_size, progress=None)
    for key, fields in changes:  # a changed item waits for new vectors; its rows may be freed
        if key in items:
            items[key] = MemoryItem(step=key, **fields)
            table.changed(key)
    vectors = table.embed(embedder, None, items, batch_size=batch_size, progress=None)
    holders = np.zeros(vectors.used, dtype=np.int64)
    for key, item in items.items():
        wanted = list(dict.fromkeys(parts.texts(item.to_dict(), None)))
        rows = vectors.rows_of.get(key, [])
        # One row a distinct text, in the order the item's parts first name them.
        alone = [checked_vectors(embedder, [text]) for text in wanted]
        width = embedder.dimension
        assert np.array_equal(vectors.matrix[rows], np.concatenate([np.zeros((0, width)), *alone]))
        holders[rows] += 1
    assert np.array_equal(vectors.uses[: vectors.used], holders)
    assert vectors.used <= len(vectors.matrix)
