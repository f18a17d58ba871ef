"""The keyword index beside a JSONL log: keyword search through it equals Memory.search, it follows every change, and its file is only a cache."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule
from two_handles import TwoHandleSession

from agents.memory import Memory, MemoryItem
from agents.memory.search import Tokenizer
from agents.memory.stores import JSONLStore, Store

WORDS = ("cat", "dog", "red", "blue", "open", "save", "file", "menu", "ok", "the")
QUERIES = ("cat", "red dog", "open the file", "save save menu", "ok blue cat the")


def item(words: list[str], step: int) -> MemoryItem:
    """Return a step whose text is ``words`` (split over two fields)."""
    half = len(words) // 2
    return MemoryItem(step=step, action=" ".join(words[:half]), note=" ".join(words[half:]))


def ranked(store: Store, sid: str, query: str, k: int = 5) -> list[tuple[float, dict[str, Any]]]:
    """Return a keyword search's (score, fields) through the store, best first."""
    return [(hit.score, hit.item.to_dict()) for hit in store.search(sid, query, k, mode="keyword")]


def expected(items: list[MemoryItem], query: str, k: int = 5) -> list[tuple[float, dict[str, Any]]]:
    """Return Memory.search's (score, fields) over ``items`` in order."""
    memory = Memory(items)
    return [(hit.score, hit.item.to_dict()) for hit in memory.search(query, k, mode="keyword")]


def index_file(directory: Path, sid: str = "s") -> Path:
    """Return the path of a session's keyword index file."""
    return directory / f"{sid}.keywords"


def covered(directory: Path, sid: str = "s") -> int:
    """Return the length of the log that a session's index file covers (from its header line)."""
    head = json.loads(index_file(directory, sid).read_bytes().split(b"\n", 1)[0])
    assert head["format"] == "kvmemory.jsonl-keywords"
    return int(head["offset"])


def log_size(directory: Path, sid: str = "s") -> int:
    """Return the size of a session's log in bytes."""
    return (directory / f"{sid}.jsonl").stat().st_size


def filled(directory: Path, count: int = 40) -> list[MemoryItem]:
    """Write session ``s`` of ``count`` steps to a JSONL store at ``directory``; return its items."""
    items = [
        item([WORDS[(i * j + i) % len(WORDS)] for j in range(1 + i % 6)], i) for i in range(count)
    ]
    with JSONLStore(directory) as store:
        store.append("s", items)
    return items


def test_first_keyword_search_leaves_an_index_file_beside_the_log(tmp_path: Path) -> None:
    """A keyword search writes <session>.keywords beside the log, and its ranking is Memory.search's."""
    items = filled(tmp_path / "logs")
    with JSONLStore(tmp_path / "logs") as store:
        assert store.keyword_index
        for query in QUERIES:
            assert ranked(store, "s", query) == expected(items, query)
    assert index_file(tmp_path / "logs").stat().st_size > 0


def test_a_new_handle_answers_from_the_index_file(tmp_path: Path) -> None:
    """A handle opened later ranks from the file as the first did, and leaves it as it was."""
    items = filled(tmp_path / "logs")
    with JSONLStore(tmp_path / "logs") as store:
        first = [ranked(store, "s", query) for query in QUERIES]
    saved = index_file(tmp_path / "logs").read_bytes()
    with JSONLStore(tmp_path / "logs") as store:
        assert [ranked(store, "s", query) for query in QUERIES] == first
    assert first == [expected(items, query) for query in QUERIES]
    assert index_file(tmp_path / "logs").read_bytes() == saved


def test_deleted_index_file_is_built_again(tmp_path: Path) -> None:
    """Deleting the index file is safe: the next search builds it again, with the same ranking."""
    items = filled(tmp_path / "logs")
    with JSONLStore(tmp_path / "logs") as store:
        ranked(store, "s", "cat")
    index_file(tmp_path / "logs").unlink()
    with JSONLStore(tmp_path / "logs") as store:
        assert ranked(store, "s", "red dog") == expected(items, "red dog")
    assert index_file(tmp_path / "logs").exists()


def damaged_variants(data: bytes) -> list[bytes]:
    """Return damaged copies of an index file: cut short, empty, garbage, a flipped byte in each part, another format."""
    out = [data[: len(data) // 2], b"", os.urandom(len(data)), b"{}\n" + data, b"not json\n"]
    for at in (5, data.index(b"\n") + 3, len(data) // 2, len(data) - 2):
        flipped = bytearray(data)
        flipped[at] ^= 0x41
        out.append(bytes(flipped))
    return out


def test_damaged_index_file_is_rebuilt_never_trusted(tmp_path: Path) -> None:
    """An index file cut short, of garbage, or with any byte flipped is rebuilt: the ranking stays Memory.search's."""
    items = filled(tmp_path / "logs")
    with JSONLStore(tmp_path / "logs") as store:
        ranked(store, "s", "cat")
    good = index_file(tmp_path / "logs").read_bytes()
    for bad in damaged_variants(good):
        index_file(tmp_path / "logs").write_bytes(bad)
        with JSONLStore(tmp_path / "logs") as store:
            for query in QUERIES:
                assert ranked(store, "s", query) == expected(items, query)
        # Rebuilt and written again whole (the log is the same, so is the index but for the tail hash' log).
        assert len(index_file(tmp_path / "logs").read_bytes()) == len(good)


def test_index_file_of_another_session_is_not_trusted(tmp_path: Path) -> None:
    """The index file of another session, copied over a session's, is rebuilt from the session's own log."""
    filled(tmp_path / "logs")
    with JSONLStore(tmp_path / "logs") as store:
        other = [item(["blue", "menu"], 1), item(["cat"], 2)]
        store.append("t", other)
        ranked(store, "s", "cat")
    index_file(tmp_path / "logs", "t").write_bytes(index_file(tmp_path / "logs").read_bytes())
    with JSONLStore(tmp_path / "logs") as store:
        assert ranked(store, "t", "cat blue") == expected(other, "cat blue")


def test_read_only_handle_writes_no_index_file(tmp_path: Path) -> None:
    """A read-only handle ranks from an index it builds in memory and writes no file."""
    items = filled(tmp_path / "logs")
    with JSONLStore(tmp_path / "logs", read_only=True) as store:
        assert store.read_only
        assert store.keyword_index
        assert ranked(store, "s", "open the file") == expected(items, "open the file")
    assert not index_file(tmp_path / "logs").exists()


def test_read_only_handle_follows_appends_after_the_index_file(tmp_path: Path) -> None:
    """A read-only handle reads the index file and indexes the records appended after it, writing nothing."""
    items = filled(tmp_path / "logs")
    with JSONLStore(tmp_path / "logs") as store:
        ranked(store, "s", "cat")
        more = [item(["cat", "cat", "zebra"], 100)]
        store.append("s", more)
    saved = index_file(tmp_path / "logs").read_bytes()
    with JSONLStore(tmp_path / "logs", read_only=True) as store:
        assert ranked(store, "s", "zebra cat") == expected(items + more, "zebra cat")
    assert index_file(tmp_path / "logs").read_bytes() == saved


APPEND = """
import sys
from agents.memory import MemoryItem
from agents.memory.stores import JSONLStore
with JSONLStore(sys.argv[1]) as store:
    store.append("s", [MemoryItem(step=1000 + i, action="zebra crossing", note="red " * i) for i in range(3)])
    with store.batch("s") as batch:
        batch.delete([2, 3])
"""


def test_a_second_process_appending_is_followed(tmp_path: Path) -> None:
    """Appends and deletes by another process reach the index of a handle that built it before, and of a new one."""
    items = filled(tmp_path / "logs")
    with JSONLStore(tmp_path / "logs") as store:
        assert ranked(store, "s", "red") == expected(items, "red")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        subprocess.run([sys.executable, "-c", APPEND, str(tmp_path / "logs")], check=True, env=env)
        now = [record.item for record in store.records("s")]
        assert len(now) == len(items) + 3 - 2
        for query in ("zebra red", "red", *QUERIES):
            assert ranked(store, "s", query) == expected(now, query)
    assert covered(tmp_path / "logs") < log_size(tmp_path / "logs")  # three items: not saved again
    with JSONLStore(tmp_path / "logs") as store:
        assert ranked(store, "s", "zebra red") == expected(now, "zebra red")


WITHOUT_NUMPY = """
import json, sys
sys.modules["numpy"] = None  # import numpy now fails: the index ranks in pure Python
from agents.memory.stores import JSONLStore
with JSONLStore(sys.argv[1]) as store:
    out = [
        [(hit.score, hit.item.to_dict()) for hit in store.search("s", query, k, mode="keyword")]
        for query in json.loads(sys.argv[2])
        for k in (1, 3, 8)
    ]
print(json.dumps(out))
"""


def test_ranking_without_numpy_is_memory_search(tmp_path: Path) -> None:
    """Where numpy is not installed the index ranks in pure Python (pruning common words), still as Memory.search."""
    items = filled(tmp_path / "logs", 60)
    rare = [item(["zebra", "cat", "the"], 100), item(["zebra", "zebra", "ok"], 101)]
    with JSONLStore(tmp_path / "logs") as store:
        store.append("s", rare)
    queries = [*QUERIES, "zebra the cat", "the zebra ok the", "menu zebra"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    for _ in range(2):  # built in the child, then read from the file it wrote
        done = subprocess.run(
            [sys.executable, "-c", WITHOUT_NUMPY, str(tmp_path / "logs"), json.dumps(queries)],
            check=True,
            env=env,
            capture_output=True,
            text=True,
        )
        got = [[(score, fields) for score, fields in hits] for hits in json.loads(done.stdout)]
        want = [expected(items + rare, query, k) for query in queries for k in (1, 3, 8)]
        assert got == want
        assert index_file(tmp_path / "logs").exists()


def test_compaction_keeps_the_index_current(tmp_path: Path) -> None:
    """After deletes compact the log, the index (in this handle and in the file) ranks the live items."""
    items = filled(tmp_path / "logs", 80)
    with JSONLStore(tmp_path / "logs") as store:
        ranked(store, "s", "cat")
        with store.batch("s") as batch:
            batch.delete(range(1, 61))
        live = items[60:]
        assert ranked(store, "s", "cat red") == expected(live, "cat red")
        store.compact("s")
        assert ranked(store, "s", "dog the") == expected(live, "dog the")
        assert covered(tmp_path / "logs") == log_size(tmp_path / "logs")
    with JSONLStore(tmp_path / "logs") as store:
        assert ranked(store, "s", "open ok") == expected(live, "open ok")


def test_deleting_a_session_removes_its_index_file(tmp_path: Path) -> None:
    """delete_session removes the index file with the log; a session created again is indexed afresh."""
    filled(tmp_path / "logs")
    with JSONLStore(tmp_path / "logs") as store:
        ranked(store, "s", "cat")
        assert store.delete_session("s")
        assert not index_file(tmp_path / "logs").exists()
        again = [item(["cat", "menu"], 1)]
        store.append("s", again)
        assert ranked(store, "s", "cat") == expected(again, "cat")
    assert covered(tmp_path / "logs") == log_size(tmp_path / "logs")


def test_keyword_search_over_sessions_ranks_them_as_one_memory(tmp_path: Path) -> None:
    """Store.search over several sessions ranks from their indexes as Memory.search over their items one after the other."""
    a = filled(tmp_path / "logs")
    b = [item(["cat", "zebra", "red"], 1), item(["dog"], 2)]
    with JSONLStore(tmp_path / "logs") as store:
        store.append("t", b)
        hits = store.search_sessions("cat red", 5, sessions=["s", "t"])
        assert [(hit.score, hit.item.to_dict()) for hit in hits] == expected(a + b, "cat red")
    assert covered(tmp_path / "logs", "s") == log_size(tmp_path / "logs", "s")
    assert covered(tmp_path / "logs", "t") == log_size(tmp_path / "logs", "t")


def test_index_file_is_saved_again_after_many_changes(tmp_path: Path) -> None:
    """Once hundreds of items were indexed since the file was written, it is written again, covering the whole log."""
    items = filled(tmp_path / "logs")
    with JSONLStore(tmp_path / "logs") as store:
        ranked(store, "s", "cat")
        more = [item(["zebra", WORDS[i % 10]], 100 + i) for i in range(300)]
        store.append("s", more)
        assert ranked(store, "s", "zebra cat") == expected(items + more, "zebra cat")
        assert covered(tmp_path / "logs") == log_size(tmp_path / "logs")
        with store.batch("s") as batch:
            batch.update({1: item(["zebra"] * 5, 1)})
            batch.delete([2])
        store.append("s", more)
        now = [record.item for record in store.records("s")]
        assert ranked(store, "s", "zebra cat") == expected(now, "zebra cat")
        assert covered(tmp_path / "logs") == log_size(tmp_path / "logs")
    with JSONLStore(tmp_path / "logs") as store:
        for query in ("zebra", *QUERIES):
            assert ranked(store, "s", query) == expected(now, query)


class JSONLWordSession(TwoHandleSession):
    """Two handles on a JSONL store in a folder of its own, appending and updating items of WORDS, and a reopened one; the machines below add what they check."""

    def __init__(self) -> None:
        super().__init__()
        self.folder = Path(tempfile.mkdtemp(prefix="kvmemory-keywords-"))
        self.a = JSONLStore(self.folder)
        self.b = JSONLStore(self.folder)

    @rule(
        which=st.integers(0, 1),
        texts=st.lists(st.lists(st.sampled_from(WORDS), max_size=6), min_size=1, max_size=4),
    )
    def append(self, which: int, texts: list[list[str]]) -> None:
        new = []
        for words in texts:
            self.step += 1
            new.append(item(words, self.step))
        self.appended(which, new)

    @rule(
        which=st.integers(0, 1),
        pick=st.integers(0, 1000),
        words=st.lists(st.sampled_from(WORDS), max_size=6),
    )
    def update(self, which: int, pick: int, words: list[str]) -> None:
        self.replaced(which, pick, item(words, 10_000 + pick))

    @rule()
    def reopen(self) -> None:
        self.a.close()
        self.a = JSONLStore(self.folder)

    def teardown(self) -> None:
        self.a.close()
        self.b.close()
        shutil.rmtree(self.folder)


class KeywordIndexMachine(JSONLWordSession):
    """Two handles and a reopened one on a JSONL store against a plain list model; keyword search equals Memory.search, and chosen rows score as in the ranking."""

    @rule()
    def damage_index_file(self) -> None:
        path = Path(self.folder) / "s.keywords"
        if path.exists():
            data = path.read_bytes()
            path.write_bytes(data[: len(data) // 3])

    @rule(which=st.integers(0, 1), query=st.sampled_from(QUERIES))
    def search(self, which: int, query: str) -> None:
        store = self.handle(which)
        if not self.model:
            assert store.search("s", query, 5, mode="keyword") == []
            return
        items = [self.model[seq] for seq in sorted(self.model)]
        assert ranked(store, "s", query) == expected(items, query)
        assert (Path(self.folder) / "s.keywords").exists()

    @rule(
        which=st.integers(0, 1),
        query=st.sampled_from(QUERIES),
        picks=st.lists(st.integers(0, 1000), min_size=1, max_size=6),
    )
    def among(self, which: int, query: str, picks: list[int]) -> None:
        if not self.model:
            return
        backend = self.handle(which).backend
        terms = Tokenizer()(query)
        seqs = sorted(self.model)
        picked = [*sorted({seqs[pick % len(seqs)] for pick in picks}), 10**9]
        every = backend.keyword_top("s", terms, len(seqs) + 1) or []
        want = [(score, seq) for score, seq in every if seq in picked]
        assert backend.keyword_among("s", terms, picked) == want

    @invariant()
    def same_items(self) -> None:
        if self.model:
            assert [r.seq for r in self.a.records("s")] == sorted(self.model)


KeywordIndexMachine.TestCase.settings = settings(
    max_examples=40, stateful_step_count=25, deadline=None
)
TestKeywordIndexMachine = KeywordIndexMachine.TestCase
