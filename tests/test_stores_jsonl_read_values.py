"""Filtered keyword queries of a JSONL handle that has not read its log: the rows read by offset judge the next filters (OffsetValues), never otherwise than the log read whole and Memory.search."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule
from test_stores_jsonl_first import QUERIES, WORDS, item, items_of, keyword_hits, read_whole

from agents.memory import Memory
from agents.memory._filter import Filter
from agents.memory.stores import JSONLStore
from agents.memory.stores._jsonl import backend as jsonl_backend
from agents.memory.stores._jsonl.offset_values import OffsetValues

FILTERS = (
    {"step": 3},
    {"step": {"$gte": 150}},
    {"step": {"$lt": 4}},
    {"action": {"$in": ["cat", "dog red"]}},
    {"$or": [{"step": 3}, {"step": {"$gt": 103}}]},
    {"step": {"$ne": 2}},  # the value index cannot judge it: the walk of before
    {"missing": 1},
)


def written(folder: Path, count: int = 300) -> None:
    """Write session ``s`` of ``count`` steps and its keyword file."""
    with JSONLStore(folder) as store:
        store.append("s", items_of(count))
        store.search("s", "cat", 5, mode="keyword")  # the keyword file saved


def reference(folder: Path, query: str, where: Any, k: int) -> tuple[Any, Any]:
    """Return the whole-log handle's hits and Memory.search's (score, fields)."""
    with JSONLStore(folder, read_only=True) as store:
        store.backend.read_rows("s")
        whole = keyword_hits(store, query, where, k)
        memory = Memory([record.item for record in store.records("s")])
    found = memory.search(query, k, mode="keyword", where=where)
    return whole, [(hit.score, hit.item.to_dict()) for hit in found]


def counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the rows the JSONL backend reads by their offsets (one entry a read)."""
    reads: list[int] = []
    rows_at = jsonl_backend.rows_at

    def counted(path: str, record_at: Any, end: int, seqs: Any) -> Any:
        found = rows_at(path, record_at, end, seqs)
        reads.append(0 if found is None else len(found))
        return found

    monkeypatch.setattr(jsonl_backend, "rows_at", counted)
    return reads


def test_a_warm_filtered_query_reads_only_the_rows_that_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second filtered query of a fresh handle reads by offset only its hits, not the failing rows the first one read; the log is never read whole."""
    written(tmp_path, 400)
    reads = counting(monkeypatch)
    where = {"step": {"$in": [3, 77, 150, 299]}}
    with JSONLStore(tmp_path, read_only=True) as store:
        first = keyword_hits(store, "cat the", where)
        walked = sum(reads)
        reads.clear()
        for _ in range(5):
            assert keyword_hits(store, "cat the", where) == first
        assert not read_whole(store)
    assert walked > 20  # the first walked past rows that fail
    assert sum(reads) <= 5 * len(first)
    assert first == reference(tmp_path, "cat the", where, 5)[0]


def test_a_filter_the_values_cannot_judge_reads_no_log_whole(tmp_path: Path) -> None:
    """After filters answered from the rows read, a filter their values cannot judge ($ne) walks the ranking, reading no log whole."""
    written(tmp_path, 400)
    where = {"step": {"$ne": 2}}
    with JSONLStore(tmp_path, read_only=True) as store:
        keyword_hits(store, "save", {"step": 3})
        keyword_hits(store, "save", {"step": 3})  # answered from the rows read
        got = keyword_hits(store, "save", where)
        assert not read_whole(store)
    assert got == reference(tmp_path, "save", where, 5)[0]


@pytest.mark.parametrize("change", ["update", "compact", "process"])
def test_a_row_changed_after_it_was_read_is_judged_anew(tmp_path: Path, change: str) -> None:
    """A row read by offset, failing a filter, then changed by another handle (or process) so that it passes: the next query of the same handle finds it."""
    written(tmp_path, 60)
    where = {"step": 3}
    with JSONLStore(tmp_path, read_only=True) as fresh:
        assert keyword_hits(fresh, "cat", where) == []  # item 3 holds no "cat": rows read, all fail
        with JSONLStore(tmp_path) as writer:
            last = keyword_hits(writer, "cat", None, 30)[-1][0]
            if change == "process":
                code = (
                    "import sys; from agents.memory.stores import JSONLStore;"
                    "from agents.memory import MemoryItem;"
                    "s = JSONLStore(sys.argv[1]); b = s.batch('s'); b.__enter__();"
                    f"b.update({{{last}: MemoryItem(step=3, action='', note='cat')}});"
                    "b.__exit__(None, None, None); s.close()"
                )
                subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True)
            else:
                with writer.batch("s") as batch:
                    batch.update({last: item(["cat"], 3)})
                if change == "compact":
                    writer.compact("s")
        got = keyword_hits(fresh, "cat", where)
    assert [hit[0] for hit in got] == [last]
    assert got == reference(tmp_path, "cat", where, 5)[0]


def test_rows_read_at_another_version_are_forgotten() -> None:
    """Rows read at one version of the log judge no filter at another."""
    kept = OffsetValues()
    kept.read("s", (b"h", 10), [(1, b'{"step": 1}'), (2, b'{"step": 2}')])
    tree = Filter({"step": 1}).tree
    assert kept.failing("s", (b"h", 10), tree, unread=False) == {2}
    assert kept.failing("s", (b"h", 11), tree, unread=True) == set()
    assert kept.failing("s", (b"h", 11), tree, unread=False) is None  # nothing read
    kept.read("s", (b"h", 11), [(2, b'{"step": 1}')])
    assert kept.failing("s", (b"h", 11), tree, unread=False) == set()
    assert not kept.read_all("s", (b"h", 11), 2)
    assert kept.read_all("s", (b"h", 11), 1)  # every row read: the log whole is read next


class ReadValues(RuleBasedStateMachine):
    """A read-only handle kept open across another handle's appends, updates, deletes and compactions and damage to the keyword file; its filtered keyword queries always equal the whole-log handle's and Memory.search's."""

    def __init__(self) -> None:
        super().__init__()
        self._dir = tempfile.TemporaryDirectory()
        self.folder = Path(self._dir.name)
        written(self.folder, 60)
        self.writer = JSONLStore(self.folder)
        self.fresh = JSONLStore(self.folder, read_only=True)
        self.step = 100

    def teardown(self) -> None:
        self.fresh.close()
        self.writer.close()
        self._dir.cleanup()

    def live(self) -> list[int]:
        return [seq for seq, _ in self.writer.backend.read_rows("s")]

    @rule(words=st.lists(st.sampled_from(WORDS), max_size=5), count=st.integers(1, 3))
    def append(self, words: list[str], count: int) -> None:
        for _ in range(count):
            self.step += 1
            self.writer.append("s", [item(words, self.step)])

    @rule(
        pick=st.integers(0, 500),
        words=st.lists(st.sampled_from(WORDS), max_size=4),
        step=st.sampled_from((2, 3, 150, 0)),  # into and out of the filters' rows
    )
    def update(self, pick: int, words: list[str], step: int) -> None:
        live = self.live()
        if live:
            with self.writer.batch("s") as batch:
                batch.update({live[pick % len(live)]: item(words, step)})

    @rule(pick=st.integers(0, 500))
    def delete(self, pick: int) -> None:
        live = self.live()
        if live:
            self.writer.delete_seqs("s", [live[pick % len(live)]])

    @rule()
    def compact(self) -> None:
        self.writer.compact("s")

    @rule()
    def save(self) -> None:
        """A fresh writable handle's query: the keyword file saved again where due."""
        with JSONLStore(self.folder) as store:
            store.search("s", "cat", 5, mode="keyword")

    @rule(how=st.sampled_from(("remove", "cut", "flip")))
    def damage(self, how: str) -> None:
        path = self.folder / "s.keywords"
        if not path.exists():
            return
        data = path.read_bytes()
        if how == "remove":
            path.unlink()
        elif how == "cut":
            path.write_bytes(data[: len(data) // 2])
        else:
            middle = len(data) // 2
            path.write_bytes(data[:middle] + bytes([data[middle] ^ 1]) + data[middle + 1 :])

    @rule(
        query=st.sampled_from(QUERIES),
        where=st.sampled_from(FILTERS),
        k=st.sampled_from((1, 5, 30)),
        new=st.sampled_from((False, False, False, True)),
    )
    def query(self, query: str, where: Any, k: int, new: bool) -> None:
        if new:  # a handle opened again: nothing read by offset
            self.fresh.close()
            self.fresh = JSONLStore(self.folder, read_only=True)
        got = keyword_hits(self.fresh, query, where, k)
        whole, memory = reference(self.folder, query, where, k)
        assert got == whole
        assert [(score, fields) for _, score, fields in got] == memory


ReadValues.TestCase.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)
test_read_values_equal_the_whole_log = ReadValues.TestCase
