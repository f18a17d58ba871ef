"""The values of filtered fields a JSONL handle keeps: filters judged from them keep what Memory.search keeps."""

from __future__ import annotations

import enum
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import rule
from two_handles import TwoHandleSession

from agents.memory import Memory, MemoryItem
from agents.memory.search import Filter
from agents.memory.stores import InMemoryStore, JSONLStore
from agents.memory.stores._core import filter_values
from agents.memory.stores._jsonl.log import item_record

WORDS = ("cat", "dog", "red", "blue", "open", "save")
VALUES = (None, True, False, 0, 1, 1.0, 2, 2.5, "a", "b", "1", "cat", "é", 'q"t', "", [1], {"k": 1})
WHERES: tuple[dict[str, Any], ...] = (
    {"agent": "a"},
    {"agent": {"$in": ["a", "b"]}},
    {"agent": {"$ne": "a"}},
    {"x": 1},
    {"x": True},
    {"x": 1.0},
    {"x": {"$gte": 1, "$lt": 2.5}},
    {"x": {"$nin": [None, "a"]}},
    {"x": [1]},
    {"meta.owner": "a"},
    {"$or": [{"agent": "b"}, {"x": {"$gt": 1}}]},
    {"agent": "a", "x": {"$lte": 2}},
    {},
    # Screened while the field is not kept: by postings and bytes, by bytes alone (no
    # letter or digit), a string that the items' texts hold too, escapes.
    {"x": "cat"},
    {"x": ""},
    {"x": {"$in": ["é", 'q"t']}},
    {"$or": [{"agent": "b"}, {"x": "cat"}]},
    {"x": "a", "agent": {"$ne": "b"}},
    {"agent": "a", "x": [1]},  # screened by one part, a list to be equal to in the other
)


def step(n: int, agent: Any, x: Any, owner: Any, words: list[str]) -> MemoryItem:
    """Return a step whose filtered fields hold the values given (``NOTHING`` left out as None -> missing x)."""
    fields: dict[str, Any] = {"step": n, "agent": agent, "text": " ".join(words)}
    if x != "missing":
        fields["x"] = x
    if owner is not None:
        fields["meta"] = {"owner": owner}
    return MemoryItem(**fields)


def passing(items: dict[int, MemoryItem], where: dict[str, Any]) -> set[int]:
    """Return the seqs of the model's items that the compiled filter keeps."""
    keep = Filter(where)
    return {seq for seq, one in items.items() if keep(one)}


def hits(
    store: JSONLStore, query: str, where: dict[str, Any]
) -> list[tuple[float, dict[str, Any]]]:
    """Return a filtered keyword search's (score, fields) through the store."""
    found = store.search("s", query, 4, mode="keyword", where=where)
    return [(hit.score, hit.item.to_dict()) for hit in found]


def expected(
    items: list[MemoryItem], query: str, where: dict[str, Any]
) -> list[tuple[float, dict[str, Any]]]:
    """Return Memory.search's (score, fields) with the same filter."""
    found = Memory(items).search(query, 4, mode="keyword", where=where)
    return [(hit.score, hit.item.to_dict()) for hit in found]


def test_kinds_stay_apart_across_filters_judged_one_after_another(tmp_path: Path) -> None:
    """1, 1.0 and True are told apart by filters judged from the same kept values, each after the other."""
    items = [step(i, "a", x, None, ["cat"]) for i, x in enumerate((1, 1.0, True, "1"))]
    with JSONLStore(tmp_path) as store:
        store.append("s", items)
        backend = store.backend
        model = dict(enumerate(items, start=1))
        for where in (
            {"x": True},
            {"x": 1},
            {"x": 1.0},
            {"x": {"$in": [True]}},
            {"x": {"$in": [1]}},
        ):
            assert backend.filter_candidates("s", Filter(where).tree) == passing(model, where)


def test_a_function_of_the_item_is_left_to_python(tmp_path: Path) -> None:
    """A filter that is a function of the item is not judged from kept values, and the search still keeps what it keeps."""
    items = [
        step(i, "a" if i % 3 else "b", i, None, ["cat", "dog"][: 1 + i % 2]) for i in range(30)
    ]
    with JSONLStore(tmp_path) as store:
        store.append("s", items)
        keep = Filter(lambda one: one.get_value("x") % 7 == 0)
        assert store.backend.filter_candidates("s", keep.tree) is None
        found = store.search("s", "cat dog", 4, mode="keyword", where=keep.where)
        memory = Memory(items).search("cat dog", 4, mode="keyword", where=keep.where)
        assert [(h.score, h.item.to_dict()) for h in found] == [
            (h.score, h.item.to_dict()) for h in memory
        ]


def test_a_read_only_handle_judges_filters_and_writes_nothing(tmp_path: Path) -> None:
    """A read-only handle's filtered searches leave every file of the store as it was."""
    items = [step(i, "ab"[i % 2], i % 4, "ab"[i % 3 % 2], ["cat", "red"]) for i in range(40)]
    with JSONLStore(tmp_path) as store:
        store.append("s", items)
        hits(store, "cat", {"agent": "a"})  # the keyword index file is written here, not later
    before = {path.name: path.read_bytes() for path in tmp_path.iterdir()}
    with JSONLStore(tmp_path, read_only=True) as store:
        for where in WHERES:
            assert hits(store, "cat red", where) == expected(items, "cat red", where)
    assert {path.name: path.read_bytes() for path in tmp_path.iterdir()} == before


def decoded_rows(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the rows the kept filter values decode from now on: the list holds one count per decode."""
    counts: list[int] = []
    decode = filter_values.decode_pairs

    def counting(rows: Any, *args: Any) -> Any:
        rows = list(rows)
        counts.append(len(rows))
        return decode(rows, *args)

    monkeypatch.setattr(filter_values, "decode_pairs", counting)
    return counts


def test_handles_of_one_space_decode_a_field_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A second memory:// handle of the same name judges a filter from the values the first decoded."""
    name = f"share-{uuid.uuid4().hex}"
    items = [step(i, "a", i % 5, None, ["cat"]) for i in range(50)]
    first, second = InMemoryStore(name), InMemoryStore(name)
    try:
        first.append("s", items)
        tree = Filter({"x": {"$ne": 3}}).tree
        counts = decoded_rows(monkeypatch)
        assert first.backend.filter_candidates("s", tree) == passing(
            dict(enumerate(items, 1)), {"x": {"$ne": 3}}
        )
        assert sum(counts) == 50
        assert second.backend.filter_candidates("s", tree) == first.backend.filter_candidates(
            "s", tree
        )
        assert sum(counts) == 50
    finally:
        first.delete_session("s")
        first.close()
        second.close()


def test_a_string_filter_decodes_no_row_to_judge_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first filter that a field equal a string is answered by the value index, which keeps the strings: no row is decoded to judge it (the hits alone are read)."""
    items = [step(i, "reviewer" if i % 50 == 0 else "host", i, None, ["cat"]) for i in range(200)]
    with JSONLStore(tmp_path) as store:
        store.append("s", items)
        hits(store, "cat", {})  # the keyword index, read as a keyword query reads it
        counts = decoded_rows(monkeypatch)
        where = {"agent": "reviewer"}
        assert hits(store, "cat", where) == expected(items, "cat", where)
        assert sum(counts) == 0


def test_a_range_filter_decodes_no_row_to_judge_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first range filter on a field is answered by the value index, which files no bool among the numbers: no row is decoded to judge it."""
    items = [step(i, "host", i / 100, None, ["cat"]) for i in range(200)]
    with JSONLStore(tmp_path) as store:
        store.append("s", items)
        counts = decoded_rows(monkeypatch)
        where = {"x": {"$gte": 0.5, "$lt": 0.53}}
        assert hits(store, "cat", where) == expected(items, "cat", where)
        assert sum(counts) == 0


def test_a_write_by_another_handle_reaches_a_screened_filter(tmp_path: Path) -> None:
    """An append, an update and a delete by another handle between two queries are judged by the handle that screened a filter before."""
    items = [step(i, "a" if i % 3 else "b", i, None, ["cat"]) for i in range(12)]
    where = {"agent": "b"}
    with JSONLStore(tmp_path) as one, JSONLStore(tmp_path) as other:
        one.append("s", items)
        assert hits(one, "cat", where) == expected(items, "cat", where)
        other.append("s", [step(50, "b", 0, None, ["cat"])])
        with other.batch("s") as batch:
            batch.update({2: step(1, "b", 1, None, ["cat"])})
            batch.delete([1])
        now = {record.seq: record.item for record in one.records("s")}
        assert one.backend.filter_candidates("s", Filter(where).tree) == passing(now, where)
        assert hits(one, "cat", where) == expected(list(now.values()), "cat", where)


class Role(str, enum.Enum):
    """A string enum whose name is not its value: ``str()`` gives ``Role.R``, the filter compares ``"reviewer"``."""

    R = "reviewer"
    H = "host"


@pytest.mark.parametrize("url", ["memory://", "jsonl"])
def test_a_string_enum_value_passes_a_screened_filter(tmp_path: Path, url: str) -> None:
    """An item whose field holds a string enum equal to the filter's string passes, as in Memory.search (its search terms do not hold the value)."""
    items = [step(i, Role.R if i % 4 == 0 else Role.H, i, None, ["cat"]) for i in range(12)]
    where = {"agent": "reviewer"}
    store = InMemoryStore() if url == "memory://" else JSONLStore(tmp_path)
    with store:
        store.append("s", items)
        hits(store, "cat", {})
        assert hits(store, "cat", where) == expected(items, "cat", where)
        assert store.backend.filter_candidates("s", Filter(where).tree) == {1, 5, 9}


def test_a_string_spelled_with_escapes_in_a_log_is_still_found(tmp_path: Path) -> None:
    """A log line that spells a string with \\u escapes (another program's JSON) is still screened in."""
    with JSONLStore(tmp_path) as store:
        store.append("s", [step(i, "host", i, None, ["cat"]) for i in range(5)])
    log = next(path for path in tmp_path.iterdir() if path.suffix == ".jsonl")
    data = b'{"step":9,"agent":"\\u0072eviewer","text":"cat"}'
    with log.open("ab") as out:
        out.write(item_record(6, 0.0, "9", data))
    with JSONLStore(tmp_path) as store:
        where = {"agent": "reviewer"}
        found = store.search("s", "cat", 4, mode="keyword", where=where)
        assert [hit.item.to_dict() for hit in found] == [
            {"step": 9, "agent": "reviewer", "text": "cat"}
        ]
        assert store.backend.filter_candidates("s", Filter(where).tree) == {6}


CHANGE = """
import sys
from agents.memory import MemoryItem
from agents.memory.stores import InMemoryStore, JSONLStore
with JSONLStore(sys.argv[1]) as store:
    store.append("s", [MemoryItem(step=100, agent="a", x=1, text="cat zebra")])
    with store.batch("s") as batch:
        batch.update({1: MemoryItem(step=0, agent="b", x=2, text="cat")})
        batch.delete([2])
"""


def test_changes_by_another_process_reach_the_kept_values(tmp_path: Path) -> None:
    """An append, an update and a delete by another process are judged by a handle that kept values before."""
    items = [step(i, "a", 1, None, ["cat"]) for i in range(5)]
    with JSONLStore(tmp_path) as store:
        store.append("s", items)
        assert store.backend.filter_candidates("s", Filter({"agent": "a"}).tree) == {1, 2, 3, 4, 5}
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        subprocess.run([sys.executable, "-c", CHANGE, str(tmp_path)], check=True, env=env)
        now = {record.seq: record.item for record in store.records("s")}
        for where in ({"agent": "a"}, {"agent": "b"}, {"x": 1}):
            assert store.backend.filter_candidates("s", Filter(where).tree) == passing(now, where)
            assert hits(store, "cat zebra", where) == expected(
                list(now.values()), "cat zebra", where
            )


class FilterValuesMachine(TwoHandleSession):
    """Two handles and a reopened one on a JSONL store against a plain model: filters judged from kept values keep what Filter keeps."""

    def __init__(self) -> None:
        super().__init__()
        self.folder = tempfile.mkdtemp(prefix="kvmemory-filters-")
        self.a = JSONLStore(self.folder)
        self.b = JSONLStore(self.folder)

    values = st.sampled_from(VALUES)

    @rule(
        which=st.integers(0, 1),
        rows=st.lists(
            st.tuples(
                st.sampled_from(("a", "b", None)),
                st.one_of(st.just("missing"), values),
                st.sampled_from(("a", "b", None)),
                st.lists(st.sampled_from(WORDS), max_size=4),
            ),
            min_size=1,
            max_size=4,
        ),
    )
    def append(self, which: int, rows: list[tuple[Any, Any, Any, list[str]]]) -> None:
        new = []
        for agent, x, owner, words in rows:
            self.step += 1
            new.append(step(self.step, agent, x, owner, words))
        self.appended(which, new)

    @rule(which=st.integers(0, 1), pick=st.integers(0, 1000), x=values, agent=st.sampled_from("ab"))
    def update(self, which: int, pick: int, x: Any, agent: str) -> None:
        self.replaced(which, pick, step(10_000 + pick, agent, x, agent, ["cat"]))

    @rule(which=st.integers(0, 1))
    def compact(self, which: int) -> None:
        if self.model:
            self.handle(which).backend.compact("s")

    @rule()
    def reopen(self) -> None:
        self.a.close()
        self.a = JSONLStore(self.folder)

    @rule(which=st.integers(0, 1), where=st.sampled_from(WHERES), seqs=st.lists(st.integers(0, 40)))
    def judge(self, which: int, where: dict[str, Any], seqs: list[int]) -> None:
        backend = self.handle(which).backend
        if not self.model:
            return
        tree = Filter(where).tree
        expect = passing(self.model, where)
        assert backend.filter_candidates("s", tree) == expect
        assert backend.filter_among("s", tree, seqs) == expect & set(seqs)

    @rule(which=st.integers(0, 1), where=st.sampled_from(WHERES), query=st.sampled_from(WORDS))
    def search(self, which: int, where: dict[str, Any], query: str) -> None:
        if not self.model:
            return
        items = [self.model[seq] for seq in sorted(self.model)]
        assert hits(self.handle(which), f"{query} cat", where) == expected(
            items, f"{query} cat", where
        )

    def teardown(self) -> None:
        self.a.close()
        self.b.close()
        shutil.rmtree(self.folder)


FilterValuesMachine.TestCase.settings = settings(
    max_examples=40, stateful_step_count=30, deadline=None
)
TestFilterValues = FilterValuesMachine.TestCase


class SpaceFilterValuesMachine(FilterValuesMachine):
    """Two handles and a reopened one on a ``memory://NAME`` store against a plain model: filters judged from kept values keep what Filter keeps."""

    def __init__(self) -> None:
        TwoHandleSession.__init__(self)
        self.folder = ""
        self.name = f"filters-{uuid.uuid4().hex}"
        self.a = InMemoryStore(self.name)
        self.b = InMemoryStore(self.name)

    def compact(self, which: int) -> None:
        """Not a rule here: a memory:// session has no log to compact."""

    @rule()
    def reopen(self) -> None:
        self.a.close()
        self.a = InMemoryStore(self.name)

    def teardown(self) -> None:
        for handle in (self.a, self.b):
            if handle.sessions():
                handle.delete_session("s")
            handle.close()


SpaceFilterValuesMachine.TestCase.settings = settings(
    max_examples=40, stateful_step_count=30, deadline=None
)
TestSpaceFilterValues = SpaceFilterValuesMachine.TestCase
