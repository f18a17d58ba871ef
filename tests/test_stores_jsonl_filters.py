"""The values of filtered fields a JSONL handle keeps: filters judged from them keep what Memory.search keeps."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import rule
from two_handles import TwoHandleSession

from agents.memory import Memory, MemoryItem
from agents.memory.search import Filter
from agents.memory.stores import InMemoryStore, JSONLStore

WORDS = ("cat", "dog", "red", "blue", "open", "save")
VALUES = (None, True, False, 0, 1, 1.0, 2, 2.5, "a", "b", "1", [1], {"k": 1})
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
