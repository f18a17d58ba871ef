"""Screens of a row's record bytes (stores._core.screens): every item a filter keeps passes its screen."""

from __future__ import annotations

import enum
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from agents.memory import MemoryItem
from agents.memory.search import Filter
from agents.memory.stores._core.encoding import encode_rows
from agents.memory.stores._core.screens import row_screen


class Role(str, enum.Enum):
    """A string enum whose name is not its value."""

    R = "reviewer"


SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from([0.0, -0.0, 1.0, 1.5, 2.5, 1e16, -2.25]),
    st.sampled_from(["a", "b", "reviewer", 'q"t', "é", "a/b", "x\ny", "", "1", "\x01"]),
    st.just(Role.R),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner),
        st.dictionaries(st.sampled_from(["owner", "x", "k"]), inner, max_size=3),
        st.dictionaries(st.integers(0, 2), inner, max_size=2),  # written as [key, value] pairs
    ),
    max_leaves=6,
)
ITEMS = st.dictionaries(st.sampled_from(["x", "agent", "meta", "meta.owner", "text"]), VALUES)
WHERES: tuple[dict[str, Any], ...] = (
    {"agent": "reviewer"},
    {"x": "a"},
    {"x": 'q"t'},
    {"x": {"$in": ["é", "a/b", "x\ny"]}},
    {"x": {"$in": ["a", "reviewer"]}},
    {"x": ""},
    {"x": "\x01"},
    {"x": 1},
    {"x": 1.0},
    {"x": True},
    {"x": None},
    {"x": {"$in": [1, None, 2.5]}},
    {"x": {"$gte": 1, "$lt": 2.5}},
    {"x": {"$gt": -1}},
    {"x": {"$lte": 0}},
    {"x": range(3)},
    {"meta.owner": "reviewer"},
    {"meta.owner": {"$gte": 1}},
    {"meta.owner": 2},
    {"$or": [{"agent": "a"}, {"x": {"$lt": 0}}]},
    {"agent": "b", "x": {"$ne": 1}},
    {"x": {"$ne": 1}, "agent": "b"},
)


def spaced(data: bytes) -> bytes:
    """Return the same JSON as another writer may spell it: ASCII only, spaces after colons and commas."""
    return json.dumps(json.loads(data), ensure_ascii=True).encode()


@given(ITEMS, st.sampled_from(WHERES))
def test_every_item_a_filter_keeps_passes_its_screen(
    fields: dict[str, Any], where: dict[str, Any]
) -> None:
    """An item the filter keeps passes the screen of its codec bytes, and of the same JSON spelled otherwise when the spelling is not known."""
    item = MemoryItem(**fields)
    screen = row_screen(Filter(where).tree, canonical=True)
    if screen is None or not Filter(where)(item):
        return
    ((_, _, data),) = encode_rows([item], "step", "error")
    assert screen.select([(1, (None, 0.0, data))]) == [(1, data)]
    other = row_screen(Filter(where).tree, canonical=False)
    assert other is not None
    assert other.test(data)
    assert other.test(spaced(data))


def test_a_screen_leaves_out_rows_that_cannot_pass() -> None:
    """Rows whose bytes hold no passing value are left out: the screen narrows, not only keeps."""
    rows = [MemoryItem(x=n / 10, agent="host", text="reviewer x") for n in range(20)]
    encoded = [(seq, row) for seq, row in enumerate(encode_rows(rows, "step", "error"))]
    range_screen = row_screen(Filter({"x": {"$gte": 0.5, "$lt": 0.7}}).tree, canonical=True)
    string_screen = row_screen(Filter({"agent": "reviewer"}).tree, canonical=True)
    assert range_screen is not None
    assert string_screen is not None
    assert [seq for seq, _ in range_screen.select(encoded)] == [5, 6]
    assert string_screen.select(encoded) == []


def test_filters_a_missing_field_passes_have_no_screen() -> None:
    """A condition that a missing field passes ($ne, $nin) has no screen: every row may pass."""
    for where in ({"x": {"$ne": 1}}, {"x": {"$nin": [1]}}, {"x": {"$ne": "a"}}):
        assert row_screen(Filter(where).tree, canonical=True) is None


@given(st.lists(st.tuples(ITEMS, st.booleans()), max_size=12), st.sampled_from(WHERES))
def test_a_screen_keeps_the_same_rows_looked_through_at_once_as_one_by_one(
    rows: list[tuple[dict[str, Any], bool]], where: dict[str, Any]
) -> None:
    """Rows looked through joined (one pass for all) are the rows each one's bytes pass, spelled by the codec or by another writer."""
    items = [MemoryItem(**fields) for fields, _ in rows]
    encoded = [data for _, _, data in encode_rows(items, "step", "error")]
    for canonical in (True, False):
        screen = row_screen(Filter(where).tree, canonical=canonical)
        if screen is None:
            continue
        spelled = [
            data if canonical or not other else spaced(data)
            for data, (_, other) in zip(encoded, rows, strict=True)
        ]
        table = [(seq, (None, 0.0, data)) for seq, data in enumerate(spelled)]
        kept = [(seq, data) for seq, data in enumerate(spelled) if screen.test(data)]
        assert screen.select(table) == kept


def test_a_range_is_screened_on_each_value_against_both_bounds() -> None:
    """A row whose values under the key each pass one bound of a range but none both is left out (a low and a high value, none between)."""
    rows = [MemoryItem(x=0.1, meta={"x": 0.9}), MemoryItem(x=0.6, meta={"x": 0.9})]
    encoded = list(enumerate(encode_rows(rows, "step", "error")))
    screen = row_screen(Filter({"x": {"$gte": 0.5, "$lt": 0.7}}).tree, canonical=True)
    assert screen is not None
    assert [seq for seq, _ in screen.select(encoded)] == [1]
