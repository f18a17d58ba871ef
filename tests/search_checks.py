"""What the keyword search tests share: hypothesis strategies for items and queries drawn from one small alphabet (so that they share words), and the model they are judged against.

The alphabet holds upper case, digits, punctuation the tokenizer splits
on, a NUL, non-ASCII letters (one that lower-cases to two, a full-width
one) and CJK, so that every way a text is cut into words is drawn.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import strategies as st

from agents.memory import Memory, MemoryItem
from agents.memory.search import search_index
from agents.memory.stores._search import snapshot as snapshot_module
from agents.memory.stores._search.snapshot import KeywordSnapshot

TEXT = st.text(alphabet="ab cAB1_-.\n\x00éß\uff21中 ", max_size=30)
FIELDS = st.sampled_from(["a", "b", "page"])
# Words the items hold, parts and runs of them, and words none holds.
QUERY_WORDS = st.lists(
    st.sampled_from(["a", "b", "ab", "ba", "1", "a1", "é", "ss", "中", "中中", "zz", "b1a"]),
    min_size=1,
    max_size=5,
)
QUERY = QUERY_WORDS.map(" ".join)


def nested(leaf: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Return values that are ``leaf`` or lists and dicts of them, a few levels deep."""
    return st.recursive(
        leaf,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3), st.dictionaries(st.sampled_from("xyz"), inner, max_size=3)
        ),
        max_leaves=6,
    )


def item_dicts(values: st.SearchStrategy[Any], **sizes: int) -> st.SearchStrategy[Any]:
    """Return lists (sized by ``sizes``, as ``st.lists`` takes them) of items' fields: up to three of ``FIELDS``, each holding ``values``."""
    return st.lists(st.dictionaries(FIELDS, values, max_size=3), **sizes)


VALUE = nested(st.one_of(TEXT, st.integers(), st.none()))
ITEMS = item_dicts(VALUE, min_size=1, max_size=30)


def hits(memory: Memory, query: str, k: int = 5) -> list[tuple[Any, float, tuple[str, ...]]]:
    """Return the query's hits as ``(step, score, fields)``."""
    return [(hit.item.get_value("step"), hit.score, hit.fields) for hit in memory.search(query, k)]


def built(rows: list[dict[str, Any]]) -> Memory:
    """Return a memory of ``rows`` whose index is filed (the model)."""
    memory = Memory([MemoryItem(**row) for row in rows])
    search_index(memory).build_ahead(wait=True)
    return memory


def snapshot_reads(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Record, for each ``read_snapshot`` of ``Store.read_memory`` from now on, whether it gave a snapshot."""
    answers: list[bool] = []
    read = snapshot_module.read_snapshot

    def recorded(*args: Any) -> KeywordSnapshot | None:
        found = read(*args)
        answers.append(found is not None)
        return found

    monkeypatch.setattr("agents.memory.stores._search.calls.read_snapshot", recorded)
    return answers
