"""The value index of a session's rows: every row a filter keeps is among its candidates, on every write, in every store."""

from __future__ import annotations

import enum
import importlib
import importlib.util
import shutil
import subprocess
import sys
import tempfile
import uuid
from typing import Any, Final

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from agents.memory import Memory, MemoryItem
from agents.memory.exceptions import InvalidQueryError
from agents.memory.search import Filter
from agents.memory.stores import JSONLStore, open_store
from agents.memory.stores._core import value_index
from agents.memory.stores._core.encoding import decode_pairs, encode_rows
from agents.memory.stores._core.rows import RowTable
from agents.memory.stores._core.value_index import SHORT, ValueIndex


class Colour(str, enum.Enum):
    """A string enum: tagged by the codec, equal to its value when decoded."""

    RED = "a"


LONG = "z" * (SHORT + 1)
SCALARS = (None, True, False, 0, 1, 1.0, 2, 2.5, -3, "a", "b", "1", "", "é", 'q"t', LONG)
VALUES = (*SCALARS, [1], {"k": 1}, Colour.RED)
FIELDS = ("agent", "x", "meta.owner", "a.b", "step")
WORDS = ("cat", "dog", "red")


def values() -> st.SearchStrategy[Any]:
    """A field's value: a scalar, a list, a dict, an enum, or a dict of such values."""
    plain = st.sampled_from(VALUES)
    return st.one_of(
        plain, st.dictionaries(st.sampled_from(("owner", "b", "k")), plain, max_size=2)
    )


@st.composite
def items(draw: st.DrawFn, *, enums: bool = True) -> MemoryItem:
    """An item holding some of the filtered fields, a dict under ``meta`` and ``a``, and a field named ``a.b``."""
    fields: dict[str, Any] = {"text": " ".join(draw(st.lists(st.sampled_from(WORDS), max_size=3)))}
    for name in ("agent", "x", "meta", "a", "a.b", "step"):
        if draw(st.booleans()):
            value = draw(values())
            if not enums and (value is Colour.RED or isinstance(value, dict)):
                value = {"owner": "a"} if name == "meta" else "a"
            fields[name] = value
    return MemoryItem(**fields)


OPERATORS = ("$eq", "$in", "$gt", "$gte", "$lt", "$lte", "$ne", "$nin")


@st.composite
def conditions(draw: st.DrawFn) -> dict[str, Any]:
    """A filter on one field, compiled or dropped (an ordering of ``None`` is refused)."""
    field = draw(st.sampled_from(FIELDS))
    kind = draw(st.sampled_from(("plain", "op", "range", "bounds")))
    if kind == "plain":
        return {field: draw(st.sampled_from(SCALARS))}
    if kind == "range":
        start = draw(st.integers(-4, 4))
        return {
            field: range(start, start + draw(st.integers(-1, 4)), draw(st.sampled_from((1, 2))))
        }
    if kind == "bounds":
        low, high = (
            draw(st.sampled_from((-3, 0, 1, 1.5, 2))),
            draw(st.sampled_from((0, 1, 2, 2.5, 9))),
        )
        return {
            field: {
                draw(st.sampled_from(("$gt", "$gte"))): low,
                draw(st.sampled_from(("$lt", "$lte"))): high,
            }
        }
    op = draw(st.sampled_from(OPERATORS))
    if op in ("$in", "$nin"):
        return {field: {op: draw(st.lists(st.sampled_from(SCALARS), min_size=1, max_size=3))}}
    return {field: {op: draw(st.sampled_from(SCALARS))}}


def wheres() -> st.SearchStrategy[dict[str, Any]]:
    """A filter: one condition, or two under ``$and`` or ``$or``; only those that compile."""
    one = conditions()
    two = st.tuples(one, one)
    combined = st.one_of(
        one,
        two.map(lambda pair: {"$and": list(pair)}),
        two.map(lambda pair: {"$or": list(pair)}),
    )
    return combined.filter(_compiles)


def _compiles(where: dict[str, Any]) -> bool:
    try:
        Filter(where)
    except InvalidQueryError:
        return False
    return True


def encoded(item: MemoryItem) -> bytes:
    """Return the row bytes a store writes for ``item``."""
    return encode_rows([item], "step", "error")[0][2]


class ValueIndexMachine(RuleBasedStateMachine):
    """A RowTable's value index against a plain model of items: every item a filter keeps is a candidate, and the index is the one its rows would build afresh."""

    def __init__(self) -> None:
        super().__init__()
        self.table = RowTable()
        self.model: dict[int, MemoryItem] = {}
        self.next = 1

    @rule(new=st.lists(items(), min_size=1, max_size=3))
    def append(self, new: list[MemoryItem]) -> None:
        for item in new:
            self.table[self.next] = (None, 0.0, encoded(item))
            self.model[self.next] = item
            self.next += 1

    @rule(pick=st.integers(0, 100), item=items())
    def update(self, pick: int, item: MemoryItem) -> None:
        if self.model:
            seq = sorted(self.model)[pick % len(self.model)]
            self.table[seq] = (None, 0.0, encoded(item))
            self.model[seq] = item

    @rule(pick=st.integers(0, 100))
    def delete(self, pick: int) -> None:
        if self.model:
            seq = sorted(self.model)[pick % len(self.model)]
            self.table.discard(seq)
            del self.model[seq]

    @rule()
    def clear(self) -> None:
        self.table.clear()
        self.model.clear()

    @rule(where=wheres())
    def candidates_hold_every_passing_item(self, where: dict[str, Any]) -> None:
        keep = Filter(where)
        found = self.table.value_index.candidates(keep.tree)
        if found is not None:
            assert {seq for seq, item in self.model.items() if keep(item)} <= found

    @rule(where=wheres())
    def candidates_are_those_of_the_rows_filed_afresh(self, where: dict[str, Any]) -> None:
        fresh = ValueIndex()
        for seq, row in self.table.items():
            fresh.add(seq, row[2])
        tree = Filter(where).tree
        assert self.table.value_index.candidates(tree) == fresh.candidates(tree)

    @invariant()
    def index_names_live_rows_only(self) -> None:
        found = self.table.value_index.candidates(Filter({"x": {"$gte": -10}}).tree)
        assert found is not None
        assert found <= set(self.table)


ValueIndexMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=30, deadline=None
)
TestValueIndex = ValueIndexMachine.TestCase


def test_short_equal_to_a_long_string_is_left_to_screens() -> None:
    """A string longer than SHORT is not filed, so an equality to one is not answered."""
    index = ValueIndex()
    index.add(1, encoded(MemoryItem(x=LONG)))
    assert index.candidates(Filter({"x": LONG}).tree) is None


def test_row_orjson_cannot_read_is_a_candidate_of_every_filter() -> None:
    """A row whose bytes are not an item's JSON (NaN from another writer) is named, so decoding it reports or reads it."""
    index = ValueIndex()
    index.add(1, b'{"x": NaN}')
    index.add(2, encoded(MemoryItem(x=2)))
    assert index.candidates(Filter({"x": 5}).tree) == {1}


def test_tagged_dict_above_a_dotted_path_is_a_candidate() -> None:
    """A dict the codec tags (keys other than strings) under ``meta`` may hold ``owner``: named for ``meta.owner``."""
    index = ValueIndex()
    index.add(1, encoded(MemoryItem(meta={1: "x", "owner": "a"})))
    assert index.candidates(Filter({"meta.owner": "a"}).tree) == {1}


def test_range_bounds_on_one_field_are_looked_up_together() -> None:
    """``$gte`` and ``$lt`` on one field name the numbers between them only."""
    index = ValueIndex()
    for seq in range(1, 101):
        index.add(seq, encoded(MemoryItem(weight=seq / 100)))
    found = index.candidates(Filter({"weight": {"$gte": 0.25, "$lt": 0.27}}).tree)
    assert found == {25, 26}


def hits(found: Any) -> list[tuple[float, dict[str, Any]]]:
    """Return the (score, fields) of search hits."""
    return [(hit.score, hit.item.to_dict()) for hit in found]


@pytest.mark.parametrize("kind", ["memory", "sqlite", "jsonl"])
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rows=st.lists(items(enums=False), min_size=1, max_size=12),
    where=wheres(),
    query=st.sampled_from(WORDS),
)
def test_filtered_search_equals_memory_search_in_every_store(
    kind: str,
    tmp_path_factory: pytest.TempPathFactory,
    rows: list[MemoryItem],
    where: dict[str, Any],
    query: str,
) -> None:
    """A store's filtered keyword search, its first on the field after opening, keeps and ranks what Memory.search does."""
    folder = tmp_path_factory.mktemp("index")
    url = {
        "memory": f"memory://{uuid.uuid4().hex}",
        "sqlite": f"sqlite://{folder / 'store.db'}",
        "jsonl": f"jsonl://{folder / 'logs'}",
    }[kind]
    expect = hits(Memory(rows).search(query, 4, mode="keyword", where=where))
    with open_store(url) as store:
        store.append("s", rows)
    with open_store(url) as store:
        assert hits(store.search("s", query, 4, mode="keyword", where=where)) == expect
        store.delete_session("s")


def test_filtered_search_equals_memory_search_in_postgres(postgres_url: str) -> None:
    """PostgreSQL's filtered keyword search keeps and ranks what Memory.search does, on the filters of the other stores' test."""
    rows = [
        MemoryItem(text="cat dog", agent="a", x=1, meta={"owner": "a"}, step=1),
        MemoryItem(text="cat", agent="b", x=2.5, meta={"owner": "b"}, step=2),
        MemoryItem(text="cat red", agent="a", x="a", **{"a.b": 2}),
        MemoryItem(text="dog cat", x=True, a={"b": 1}),
    ]
    with open_store(postgres_url) as store:
        store.append("s", rows)
        for where in (
            {"agent": "a"},
            {"meta.owner": {"$in": ["a", "b"]}},
            {"x": {"$gte": 1, "$lt": 2.5}},
            {"a.b": range(1, 3)},
            {"$or": [{"x": "a"}, {"step": {"$gt": 1}}]},
        ):
            expect = hits(Memory(rows).search("cat", 4, mode="keyword", where=where))
            assert hits(store.search("s", "cat", 4, mode="keyword", where=where)) == expect


class JSONLIndexMachine(RuleBasedStateMachine):
    """Two JSONL handles on one log, one reopened, against a plain model: each handle's first filter after a write keeps what Filter keeps."""

    def __init__(self) -> None:
        super().__init__()
        self.folder = tempfile.mkdtemp(prefix="kvmemory-index-")
        self.handles = [JSONLStore(self.folder), JSONLStore(self.folder)]
        self.model: dict[int, MemoryItem] = {}

    @rule(which=st.integers(0, 1), new=st.lists(items(enums=False), min_size=1, max_size=3))
    def append(self, which: int, new: list[MemoryItem]) -> None:
        seqs = self.handles[which].append("s", new)
        self.model.update(zip(seqs, new, strict=True))

    @rule(which=st.integers(0, 1), pick=st.integers(0, 100))
    def delete(self, which: int, pick: int) -> None:
        if self.model:
            seq = sorted(self.model)[pick % len(self.model)]
            self.handles[which].delete_seqs("s", [seq])
            del self.model[seq]

    @rule()
    def reopen(self) -> None:
        self.handles[0].close()
        self.handles[0] = JSONLStore(self.folder)

    @rule(which=st.integers(0, 1), where=wheres())
    def filter_keeps_what_filter_keeps(self, which: int, where: dict[str, Any]) -> None:
        if not self.model:
            return
        keep = Filter(where)
        found = self.handles[which].backend.filter_candidates("s", keep.tree)
        if found is not None:
            assert found == {seq for seq, item in self.model.items() if keep(item)}

    def teardown(self) -> None:
        for handle in self.handles:
            handle.close()
        shutil.rmtree(self.folder)


JSONLIndexMachine.TestCase.settings = settings(
    max_examples=30, stateful_step_count=25, deadline=None
)
TestJSONLIndex = JSONLIndexMachine.TestCase


def test_a_row_moved_into_a_value_later_rows_hold_is_unfiled_from_it() -> None:
    """A row updated to a value rows of higher seqs share, then updated away and deleted, leaves only those rows filed under it."""
    table = RowTable()
    for seq, agent in ((1, "b"), (2, "a"), (3, "a"), (4, "a")):
        table[seq] = (None, 0.0, encoded(MemoryItem(agent=agent, x=seq)))
    table[1] = (None, 0.0, encoded(MemoryItem(agent="a", x=4)))
    table[2] = (None, 0.0, encoded(MemoryItem(agent="b", x=4)))
    table.discard(1)
    fresh = ValueIndex()
    for seq, row in table.items():
        fresh.add(seq, row[2])
    for where in ({"agent": "a"}, {"x": 4}):
        tree = Filter(where).tree
        assert table.value_index.candidates(tree) == fresh.candidates(tree)


def test_numbers_filed_before_and_after_the_first_range_are_all_found() -> None:
    """A range asked before some rows are filed, again after, and a third time after more, finds the numbers of each."""
    index = ValueIndex()
    tree = Filter({"weight": {"$gte": 2, "$lt": 5}}).tree
    for seq in (1, 2, 3):
        index.add(seq, encoded(MemoryItem(weight=seq * 2)))
    assert index.candidates(tree) == {1, 2}
    index.add(4, encoded(MemoryItem(weight=3)))
    index.remove(1, encoded(MemoryItem(weight=2)))
    assert index.candidates(tree) == {2, 4}
    index.add(5, encoded(MemoryItem(weight=2.5)))
    index.remove(4, encoded(MemoryItem(weight=3)))
    assert index.candidates(tree) == {2, 5}


# -- answered exactly ------------------------------------------------------------------------


class Shade(str, enum.Enum):
    """A string enum whose ``str()`` holds no query word: tagged by the codec, equal to ``"a"`` decoded."""

    A = "a"


EXACT: Final = (None, True, False, 0, 1, 1.0, 2, 2.5, "a", "b", "", Shade.A, [1], {1: "a"})
"""Few values, so that rows share them, with the ones the index reads loosely: a tagged enum and dict, a list."""


@st.composite
def exact_items(draw: st.DrawFn) -> MemoryItem:
    """An item holding some of the filtered fields from :data:`EXACT`, dicts under ``a`` and ``meta`` (some holding ``b``), and often a field named ``a.b``."""
    plain = st.sampled_from(EXACT)
    value = st.one_of(plain, st.dictionaries(st.sampled_from(("b", "owner")), plain, max_size=2))
    fields: dict[str, Any] = {"text": " ".join(draw(st.lists(st.sampled_from(WORDS), max_size=3)))}
    for name in ("agent", "x", "a", "a.b", "meta"):
        if draw(st.booleans()):
            fields[name] = draw(value)
    return MemoryItem(**fields)


EXACT_OPERANDS: Final = (None, True, False, 0, 1, 2, 2.5, "a", "b")


@st.composite
def exact_conditions(draw: st.DrawFn) -> dict[str, Any]:
    """A condition on a field :func:`exact_items` fills, naming values its rows often hold (``$ne``: one the index cannot answer)."""
    field = draw(st.sampled_from(("agent", "x", "a.b", "meta.owner")))
    operand = st.sampled_from(EXACT_OPERANDS)
    kind = draw(st.sampled_from(("plain", "in", "bounds", "range", "ne")))
    if kind == "plain":
        return {field: draw(operand)}
    if kind == "in":
        return {field: {"$in": draw(st.lists(operand, min_size=1, max_size=3))}}
    if kind == "bounds":
        low, high = draw(st.sampled_from((0, 0.5, 1))), draw(st.sampled_from((1, 2, 3)))
        return {field: {"$gte": low, "$lt": high}}
    if kind == "range":
        return {field: range(draw(st.integers(1, 3)))}
    return {field: {"$ne": draw(operand)}}


def exact_wheres() -> st.SearchStrategy[dict[str, Any]]:
    """A filter of :func:`exact_conditions`: one, or two under ``$and`` or ``$or``."""
    one = exact_conditions()
    two = st.tuples(one, one)
    return st.one_of(
        one,
        two.map(lambda pair: {"$and": list(pair)}),
        two.map(lambda pair: {"$or": list(pair)}),
    ).filter(_compiles)


def decoded(data: bytes) -> MemoryItem:
    """Return the item a store decodes from a row's bytes to judge a filter."""
    return decode_pairs([(0, data)], "a test row", "base")[0][1]


class ExactIndexMachine(RuleBasedStateMachine):
    """A RowTable's value index against its rows decoded: the rows it says pass a filter pass, and every row that passes is among those or the unsure."""

    def __init__(self) -> None:
        super().__init__()
        self.table = RowTable()
        self.next = 1

    @rule(new=st.lists(exact_items(), min_size=1, max_size=3))
    def append(self, new: list[MemoryItem]) -> None:
        for item in new:
            self.table[self.next] = (None, 0.0, encoded(item))
            self.next += 1

    @rule(pick=st.integers(0, 100), item=exact_items())
    def update(self, pick: int, item: MemoryItem) -> None:
        if self.table:
            seq = sorted(self.table)[pick % len(self.table)]
            self.table[seq] = (None, 0.0, encoded(item))

    @rule(pick=st.integers(0, 100))
    def delete(self, pick: int) -> None:
        if self.table:
            self.table.discard(sorted(self.table)[pick % len(self.table)])

    @rule(where=exact_wheres())
    def judged_rows_pass_and_no_passing_row_is_left_out(self, where: dict[str, Any]) -> None:
        keep = Filter(where)
        found = self.table.value_index.judged(keep.tree)
        if found is None:
            return
        passing, unsure = found
        truly = {seq for seq, row in self.table.items() if keep(decoded(row[2]))}
        assert passing <= truly
        assert truly <= passing | unsure
        assert not passing & unsure


ExactIndexMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=30, deadline=None
)
TestExactIndex = ExactIndexMachine.TestCase


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"x": True}, {"x": 1}),  # no bool equals a number
        ({"x": 1}, {"x": True}),
        ({"x": False}, {"x": {"$lt": 1}}),  # nor is ordered with one
        ({"x": 2.0}, {"x": range(1, 4)}),  # a range keeps ints only
    ],
)
def test_a_bool_or_a_float_named_by_a_number_filter_is_known_to_fail(
    fields: dict[str, Any], where: dict[str, Any]
) -> None:
    """Bools are filed apart from numbers, and a range is exact only where no float is filed: such a row is neither passing nor unsure, or it is unsure."""
    index = ValueIndex()
    index.add(1, encoded(MemoryItem(**fields)))
    found = index.judged(Filter(where).tree)
    assert found is not None
    assert 1 not in found[0]


def test_equal_strings_are_answered_without_decoding() -> None:
    """An equality to a short string names exactly the rows holding it, known to pass."""
    index = ValueIndex()
    for seq, agent in enumerate(("host", "reviewer", "host", "reviewer"), 1):
        index.add(seq, encoded(MemoryItem(agent=agent, meta={"owner": agent})))
    assert index.judged(Filter({"agent": "reviewer"}).tree) == ({2, 4}, set())
    assert index.judged(Filter({"meta.owner": {"$in": ["host"]}}).tree) == ({1, 3}, set())


def test_rows_read_loosely_are_unsure() -> None:
    """A row with a dotted key under a dotted filter, a tagged value, or a typed item is decoded to be told."""
    index = ValueIndex()
    index.add(1, encoded(MemoryItem(**{"a.b": [1], "a": {"b": "v"}})))  # value_at reads [1]
    index.add(2, encoded(MemoryItem(agent=Colour.RED)))
    index.add(3, b'{"$kv":"item","class":"pkg.mod:Step","fields":{"agent":"a"}}')
    index.add(4, encoded(MemoryItem(a={"b": "v"}, agent="a")))
    assert index.judged(Filter({"a.b": "v"}).tree) == ({4}, {1})
    assert index.judged(Filter({"agent": "a"}).tree) == ({4}, {2, 3})


PAD: Final = 40
"""Rows holding no filtered field written first, so that a filter few generated rows pass is rare (one row in FEW): only its rows are scored."""


class FilteredSearchMachine(RuleBasedStateMachine):
    """Two handles on one store (memory:// or JSONL), one reopened, written by both: each filtered keyword search is Memory.search's over the same items."""

    url = ""

    def __init__(self) -> None:
        super().__init__()
        self.folder = tempfile.mkdtemp(prefix="kvmemory-exact-")
        url = self.url or f"jsonl://{self.folder}/logs"
        self.handles = [open_store(url), open_store(url)]
        self.open = url
        padding = [MemoryItem(text=WORDS[i % len(WORDS)]) for i in range(PAD)]
        self.model = dict(zip(self.handles[0].append("s", padding), padding, strict=True))

    @rule(which=st.integers(0, 1), new=st.lists(exact_items(), min_size=1, max_size=3))
    def append(self, which: int, new: list[MemoryItem]) -> None:
        self.model.update(zip(self.handles[which].append("s", new), new, strict=True))

    @rule(which=st.integers(0, 1), pick=st.integers(0, 100), item=exact_items())
    def update(self, which: int, pick: int, item: MemoryItem) -> None:
        seq = sorted(self.model)[pick % len(self.model)]
        with self.handles[which].batch("s") as batch:
            batch.update({seq: item})
        self.model[seq] = item

    @rule(which=st.integers(0, 1), pick=st.integers(0, 100))
    def delete(self, which: int, pick: int) -> None:
        if len(self.model) > 1:
            seq = sorted(self.model)[pick % len(self.model)]
            self.handles[which].delete_seqs("s", [seq])
            del self.model[seq]

    @rule()
    def reopen(self) -> None:
        self.handles[0].close()
        self.handles[0] = open_store(self.open)

    @rule(which=st.integers(0, 1), where=exact_wheres(), query=st.sampled_from(WORDS))
    def filtered_search_is_memory_search(
        self, which: int, where: dict[str, Any], query: str
    ) -> None:
        memory = Memory([self.model[seq] for seq in sorted(self.model)])
        expect = hits(memory.search(query, 4, mode="keyword", where=where))
        assert hits(self.handles[which].search("s", query, 4, where=where)) == expect

    def teardown(self) -> None:
        for handle in self.handles:
            handle.close()
        shutil.rmtree(self.folder)


class MemoryFilteredSearchMachine(FilteredSearchMachine):
    """:class:`FilteredSearchMachine` on a memory:// store."""

    def __init__(self) -> None:
        self.url = f"memory://{uuid.uuid4().hex}"
        super().__init__()

    def teardown(self) -> None:
        self.handles[0].delete_session("s")
        super().teardown()


for machine in (FilteredSearchMachine, MemoryFilteredSearchMachine):
    machine.TestCase.settings = settings(max_examples=25, stateful_step_count=20, deadline=None)
TestFilteredSearchJSONL = FilteredSearchMachine.TestCase
TestFilteredSearchMemory = MemoryFilteredSearchMachine.TestCase


# -- ranges compared by NumPy ----------------------------------------------------------------

needs_numpy = pytest.mark.skipif(
    importlib.util.find_spec("numpy") is None, reason="ranges are compared by NumPy, an extra"
)


def load_numpy() -> None:
    """Load NumPy: the index compares arrays only where the process has it loaded."""
    importlib.import_module("numpy")


NUMBERS: Final = (
    0,
    1,
    -1,
    2.5,
    -0.0,
    0.1,
    1e300,
    -1e-300,
    2**53,
    2**53 - 1,
    -(2**53),
    float(2**53),
)
"""Numbers a float holds exactly (some equal, some at its exact ints' ends): kept in the array, stale, rebuilt."""

WIDE: Final = (2**53 + 1, -(2**60))
"""Ints no float holds: a path filing one keeps no array (drawn rarely, as it drops the array for good)."""

BOUNDS: Final = (0, 1, 0.1, 2.5, -0.0, 1e300, 2**53, 2**53 - 1, -(2**53), 1.5)
"""Bounds a float holds exactly (compared by NumPy)."""

WIDE_BOUNDS: Final = (2**53 + 1, -(2**60), 10**400)
"""Bounds it does not (looked through in Python)."""


@st.composite
def numbered_items(draw: st.DrawFn) -> MemoryItem:
    """An item holding, most often, a number under ``w``: one of :data:`NUMBERS`, seldom one of :data:`WIDE`."""
    fields: dict[str, Any] = {"text": draw(st.sampled_from(WORDS))}
    kind = draw(st.integers(0, 49))
    if kind:
        fields["w"] = draw(st.sampled_from(WIDE if kind == 1 else NUMBERS))
    return MemoryItem(**fields)


@st.composite
def number_ranges(draw: st.DrawFn) -> dict[str, Any]:
    """A filter on ``w``: one or two bounds (seldom one no float holds), or a ``range`` of ints."""
    if not draw(st.integers(0, 3)):
        start = draw(st.sampled_from((-2, 0, 1, 2**53 - 1)))
        return {"w": range(start, start + draw(st.integers(0, 3)))}
    ops = draw(st.lists(st.sampled_from(("$gt", "$gte", "$lt", "$lte")), min_size=1, max_size=2))
    bound = (
        st.one_of(st.sampled_from(BOUNDS), st.sampled_from(WIDE_BOUNDS))
        if draw(st.integers(0, 9)) == 0
        else st.sampled_from(BOUNDS)
    )
    return {"w": {op: draw(bound) for op in ops}}


class ArrayedRangeMachine(ExactIndexMachine):
    """:class:`ExactIndexMachine` with rows holding many numbers, its value index answering ranges by NumPy from its kept arrays (stale numbers, rebuilt, dropped): the answer of an index filed afresh and looked through in Python, and right."""

    def __init__(self) -> None:
        super().__init__()
        load_numpy()
        self.arrayed = value_index.ARRAYED
        value_index.ARRAYED = 0  # every path's array is compared, and rebuilt at each stale number

    @rule(new=st.lists(numbered_items(), min_size=1, max_size=4))
    def append_numbered(self, new: list[MemoryItem]) -> None:
        self.append(new)

    @rule(pick=st.integers(0, 100), item=numbered_items())
    def update_numbered(self, pick: int, item: MemoryItem) -> None:
        self.update(pick, item)

    @rule(where=st.one_of(number_ranges(), number_ranges(), exact_wheres()))
    def compared_range_is_the_range_looked_through(self, where: dict[str, Any]) -> None:
        keep = Filter(where)
        found = self.table.value_index.judged(keep.tree)
        value_index.ARRAYED = sys.maxsize  # no path holds so many: the fresh index looks through
        try:
            fresh = ValueIndex()
            for seq, row in self.table.items():
                fresh.add(seq, row[2])
            assert found == fresh.judged(keep.tree)
        finally:
            value_index.ARRAYED = 0
        if found is not None:
            passing, unsure = found
            truly = {seq for seq, row in self.table.items() if keep(decoded(row[2]))}
            assert passing <= truly <= passing | unsure

    def teardown(self) -> None:
        value_index.ARRAYED = self.arrayed


ArrayedRangeMachine.TestCase.settings = settings(
    max_examples=80, stateful_step_count=30, deadline=None
)
TestArrayedRange = needs_numpy(ArrayedRangeMachine.TestCase)


class ArrayedMemoryFilteredSearchMachine(MemoryFilteredSearchMachine):
    """:class:`MemoryFilteredSearchMachine` with every range compared by NumPy (no path too small)."""

    def __init__(self) -> None:
        load_numpy()
        self.arrayed = value_index.ARRAYED
        value_index.ARRAYED = 0
        super().__init__()

    def teardown(self) -> None:
        value_index.ARRAYED = self.arrayed
        super().teardown()


ArrayedMemoryFilteredSearchMachine.TestCase.settings = settings(
    max_examples=25, stateful_step_count=20, deadline=None
)
TestArrayedFilteredSearchMemory = needs_numpy(ArrayedMemoryFilteredSearchMachine.TestCase)


@needs_numpy
def test_a_range_on_many_numbers_is_compared_by_numpy_and_never_sorted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With NumPy loaded, ranges on a path of ARRAYED numbers and more are compared on its array: its numbers are never sorted (no insort on each new number after), and the answer is the look's."""
    load_numpy()
    index = ValueIndex()
    count = 2 * value_index.ARRAYED
    for seq in range(count):
        index.add(seq, encoded(MemoryItem(weight=(seq * 7919 % count) / count)))
    tree = Filter({"weight": {"$gte": 0.25, "$lt": 0.26}}).tree
    expect = {seq for seq in range(count) if 0.25 <= (seq * 7919 % count) / count < 0.26}
    for _ in range(2 * value_index.SCANS):
        assert index.judged(tree) == (expect, set())

    def sorted_in(*args: object) -> None:
        raise AssertionError("a new number was sorted in: the path's numbers were kept in order")

    monkeypatch.setattr(value_index, "insort", sorted_in)
    index.add(
        count, encoded(MemoryItem(weight=0.2555))
    )  # a number no row held: filed, never sorted in
    assert index.judged(tree) == (expect | {count}, set())


def test_index_never_imports_numpy() -> None:
    """A range filter on many numbers in a process that has not loaded NumPy looks through them in Python and leaves NumPy unloaded (its import costs more than the look)."""
    code = (
        "import sys\n"
        "from agents.memory import MemoryItem\n"
        "from agents.memory.search import Filter\n"
        "from agents.memory.stores._core.encoding import encode_rows\n"
        "from agents.memory.stores._core.value_index import ARRAYED, ValueIndex\n"
        "index = ValueIndex()\n"
        "for seq in range(2 * ARRAYED):\n"
        "    index.add(seq, encode_rows([MemoryItem(w=seq)], 'step', 'error')[0][2])\n"
        "found = index.judged(Filter({'w': {'$gte': 10, '$lt': 20}}).tree)\n"
        "assert found == (set(range(10, 20)), set()), found\n"
        "assert 'numpy' not in sys.modules, 'numpy was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


@pytest.fixture(params=["numpy", "python"])
def ranged_by(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Ranges compared by NumPy on every path (no path too small), or looked through in Python."""
    if request.param == "numpy":
        if importlib.util.find_spec("numpy") is None:
            pytest.skip("ranges are compared by NumPy, an extra")
        load_numpy()
        monkeypatch.setattr(value_index, "ARRAYED", 0)
    else:
        monkeypatch.setattr(value_index, "_numpy", lambda: None)
    return str(request.param)


def test_numbers_unfiled_and_filed_again_are_ranged_as_held(ranged_by: str) -> None:
    """A number no row holds any longer is named by no range; one filed again, once; before and after the array is rebuilt."""
    index = ValueIndex()
    for seq, weight in enumerate((1, 2.5, 3, 4, 5), 1):
        index.add(seq, encoded(MemoryItem(weight=weight)))
    index.remove(2, encoded(MemoryItem(weight=2.5)))  # 2.5 held by no row
    index.remove(3, encoded(MemoryItem(weight=3)))
    index.add(6, encoded(MemoryItem(weight=3.0)))  # 3 filed again, as a float
    tree = Filter({"weight": {"$gte": 2, "$lte": 4}}).tree
    assert index.judged(tree) == ({4, 6}, set())
    for seq, weight in ((5, 5), (1, 1)):  # more unfiled than filed: rebuilt of 4 and 3.0
        index.remove(seq, encoded(MemoryItem(weight=weight)))
    index.add(7, encoded(MemoryItem(weight=2)))
    assert index.judged(tree) == ({4, 6, 7}, set())
    assert index.judged(Filter({"weight": {"$lt": 10}}).tree) == ({4, 6, 7}, set())


@pytest.mark.parametrize(
    ("weights", "where", "expect"),
    [
        ((2**53, 2**53 + 1), {"$gt": 2**53}, {2}),  # a float holds 2**53 + 1 as 2**53
        ((2**53, 2**53 + 1), {"$lte": 2**53}, {1}),
        ((2**53, 2.0**53), {"$lt": 2**53 + 1}, {1, 2}),  # a bound no float holds
        ((2**53, 2.0**53), {"$gte": 2**53 + 1}, set()),
        ((-(2**60), 0.5), {"$lt": 0}, {1}),
        ((-(2**53), 1e300), {"$gte": -(2**53), "$lt": 10**400}, {1, 2}),
    ],
)
def test_ints_no_float_holds_are_ranged_exactly(
    ranged_by: str, weights: tuple[Any, ...], where: dict[str, Any], expect: set[int]
) -> None:
    """A filed int or a bound no float holds exactly is compared as Python compares it, not as its float."""
    index = ValueIndex()
    for seq, weight in enumerate(weights, 1):
        index.add(seq, encoded(MemoryItem(weight=weight)))
    assert index.judged(Filter({"weight": where}).tree) == (expect, set())
