"""The terms a store indexes are the terms Memory.search counts, taken in one pass over the values."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from agents.memory import MemoryItem
from agents.memory._item import item_fields
from agents.memory._text import Tokenizer, item_texts
from agents.memory.stores._keyword import item_terms, texts_of

TOKENIZER = Tokenizer()

text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30)
ascii_text = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=127), max_size=30)
leaf = st.one_of(
    text, ascii_text, st.integers(), st.floats(allow_nan=False), st.booleans(), st.none()
)
values = st.recursive(
    leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(st.text(max_size=5), inner, max_size=4),
    ),
    max_leaves=20,
)


@given(st.dictionaries(st.from_regex(r"[a-z]{1,6}", fullmatch=True), values, max_size=6))
def test_item_terms_are_the_tokenizer_terms_of_every_string(fields: dict[str, Any]) -> None:
    """item_terms gives the default tokenizer's terms of every string of every field, in order."""
    item = MemoryItem(**fields)
    texts = [t for _, t in item_texts(item_fields(item), None)]
    assert texts_of(item_fields(item)) == texts
    terms = [term for t in texts for term in TOKENIZER(t)]
    assert item_terms(item) == (" ".join(terms), len(terms))


def test_item_terms_of_unicode_and_subclassed_values() -> None:
    """Non-ASCII text is normalized and case-folded; str subclasses, sets and frozensets count."""

    class Label(str):
        pass

    item = MemoryItem(a="STRASSE Straße ﬁle", b=Label("Café_Bar"), c={"x", "y"}, d=frozenset({"z"}))
    text, n = item_terms(item)
    assert text.split(" ")[:4] == ["strasse", "strasse", "file", "café"]
    assert sorted(text.split(" ")[5:]) == ["x", "y", "z"]
    assert n == 8
