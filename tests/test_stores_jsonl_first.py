"""The first semantic and hybrid search of a fresh JSONL handle: from <session>.vectors, the log not read whole, never otherwise than the log read whole."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from agents.memory import Memory, MemoryItem
from agents.memory.exceptions import SkippedRecordWarning
from agents.memory.search import EmbedParts, HashingEmbedder
from agents.memory.stores import JSONLStore

EMBEDDER = HashingEmbedder(32)
WORDS = ("cat", "dog", "red", "blue", "open", "save", "file", "menu", "ok", "the")
QUERIES = ("cat", "red dog", "open the file", "save save menu", "ok blue cat the")
MODES = ("semantic", "hybrid")
PARTS = (EmbedParts(), EmbedParts.WHOLE)

Hits = list[tuple[int, float, dict[str, Any]]]


def item(words: list[str], step: int) -> MemoryItem:
    """Return a step whose text is ``words`` (split over two fields)."""
    half = len(words) // 2
    return MemoryItem(step=step, action=" ".join(words[:half]), note=" ".join(words[half:]))


def items_of(count: int, start: int = 0) -> list[MemoryItem]:
    """Return ``count`` steps of a few words each."""
    return [
        item([WORDS[(i * j + i) % len(WORDS)] for j in range(1 + i % 6)], i)
        for i in range(start, start + count)
    ]


def search(
    store: JSONLStore, query: str, mode: str, parts: EmbedParts = PARTS[0], k: int = 5
) -> Hits:
    """Return a semantic or hybrid search's (seq, score, fields) through the store, best first."""
    found = store.search("s", query, k, mode=mode, embedder=EMBEDDER, parts=parts)
    return [(hit.seq, hit.score, hit.item.to_dict()) for hit in found]


def read_whole(store: JSONLStore) -> bool:
    """Return whether the handle read session ``s``'s log whole (holds a view of it)."""
    return store.backend._logs.viewed("s")


def whole_log_hits(folder: Path, query: str, mode: str, parts: EmbedParts) -> Hits:
    """Return the search of a fresh read-only handle that reads the log whole first: the path every first query took before."""
    with JSONLStore(folder, read_only=True) as store:
        store.backend.read_rows("s")  # reads the log whole
        assert read_whole(store)
        return search(store, query, mode, parts)


def memory_hits(store: JSONLStore, query: str, mode: str) -> list[tuple[float, dict[str, Any]]]:
    """Return Memory.search's (score, fields) over the session's live items, in order."""
    memory = Memory([record.item for record in store.records("s")])
    found = memory.search(query, 5, mode=mode, embedder=EMBEDDER)  # type: ignore[arg-type]
    return [(hit.score, hit.item.to_dict()) for hit in found]


def vectors(folder: Path) -> Path:
    """Return the path of session ``s``'s vector file."""
    return folder / "s.vectors"


def indexed(folder: Path, count: int = 40) -> None:
    """Write session ``s`` of ``count`` steps with their vectors (default parts and whole), and its vector and keyword files."""
    with JSONLStore(folder) as store:
        store.append("s", items_of(count))
        for parts in PARTS:
            store.index_embeddings("s", EMBEDDER, parts=parts)
        for mode in MODES:
            for parts in PARTS:
                search(store, "cat", mode, parts)  # the files saved


def assert_fresh_equals_whole(folder: Path, *, unviewed: bool = True) -> None:
    """Assert that every query of a fresh read-only handle equals the whole-log handle's and Memory.search's (default parts), reading no log whole where ``unviewed``."""
    for mode in MODES:
        for parts in PARTS:
            for query in QUERIES:
                with JSONLStore(folder, read_only=True) as store:
                    got = search(store, query, mode, parts)
                    if unviewed:
                        assert not read_whole(store), (mode, parts, query)
                    if parts == PARTS[0]:
                        want = memory_hits(store, query, mode)
                        assert [(score, fields) for _, score, fields in got] == want
                assert got == whole_log_hits(folder, query, mode, parts), (mode, parts, query)


def test_fresh_handle_ranks_from_the_vector_file_without_reading_the_log(tmp_path: Path) -> None:
    """With a current vector file, a fresh handle's semantic and hybrid queries read no log whole and equal Memory.search and the whole-log handle."""
    indexed(tmp_path)
    assert vectors(tmp_path).stat().st_size > 0
    assert_fresh_equals_whole(tmp_path)


def test_writable_fresh_handle_reads_no_log_whole(tmp_path: Path) -> None:
    """A writable fresh handle (which embeds what lacks a vector first) reads no log whole where every item holds one."""
    indexed(tmp_path)
    for mode in MODES:
        with JSONLStore(tmp_path) as store:
            got = search(store, "red dog", mode)
            assert not read_whole(store)
        assert got == whole_log_hits(tmp_path, "red dog", mode, PARTS[0])


def test_fresh_handle_follows_the_records_appended_after_the_file(tmp_path: Path) -> None:
    """Appends, updates, deletes and new vectors after the file are followed from the log's tail, as reading the log does."""
    indexed(tmp_path)
    saved = vectors(tmp_path).read_bytes()
    with JSONLStore(tmp_path) as store:
        store.append("s", [item(["zebra", "cat"], 100), item(["red", "dog", "dog"], 101)])
        with store.batch("s") as batch:
            batch.update({3: item(["cat", "red", "dog"], 103)})
            batch.delete([4, 5])
        for parts in PARTS:
            store.index_embeddings("s", EMBEDDER, parts=parts)
        store.delete_seqs("s", [7])
    assert vectors(tmp_path).read_bytes() == saved  # not saved again: followed
    assert_fresh_equals_whole(tmp_path)


def test_a_fresh_handle_queried_again_after_another_handle_writes(tmp_path: Path) -> None:
    """A handle that answered from the file answers the next query, after another handle's writes, as the whole-log handle does."""
    indexed(tmp_path)
    for mode in MODES:
        with JSONLStore(tmp_path, read_only=True) as store:
            best = search(store, "red dog", mode)[0][0]
            with JSONLStore(tmp_path) as other:
                other.append("s", [item(["red", "dog"], 200 + len(mode))])
                other.delete_seqs("s", [best])
                other.index_embeddings("s", EMBEDDER)
            got = search(store, "red dog", mode)
            assert not read_whole(store)
        assert got == whole_log_hits(tmp_path, "red dog", mode, PARTS[0])


def test_items_changed_after_the_file_lose_their_vectors(tmp_path: Path) -> None:
    """An item updated after the file and not embedded again holds no stored vector for a fresh handle, as for the log read whole."""
    indexed(tmp_path)
    with JSONLStore(tmp_path) as store, store.batch("s") as batch:
        batch.update({3: item(["zebra"], 3)})
    for parts in PARTS:
        with JSONLStore(tmp_path, read_only=True) as store:
            fresh = store.backend.vectors_of("s", _filed(parts), range(200))
            assert not read_whole(store)
        with JSONLStore(tmp_path, read_only=True) as store:
            store.backend.read_rows("s")
            whole = store.backend.vectors_of("s", _filed(parts), range(200))
        assert fresh == whole
        assert 3 not in dict(fresh)
    assert_fresh_equals_whole(tmp_path, unviewed=False)


def _filed(parts: EmbedParts) -> str:
    """Return the fields key the vectors of ``parts`` over every field are filed under."""
    from agents.memory._vectors import fields_text

    return fields_text(None, parts)


def test_dropped_vectors_are_followed(tmp_path: Path) -> None:
    """A vdrop record after the file drops every vector and the model: a fresh handle ranks as the log read whole (embedding at the query)."""
    indexed(tmp_path)
    with (tmp_path / "s.jsonl").open("ab") as log:
        log.write(b'{"vdrop":1}\n')  # as drop_vectors writes it (which compacts a log this small)
    with JSONLStore(tmp_path, read_only=True) as store:
        assert store.backend.vector_model("s") is None
        assert not read_whole(store)
    assert_fresh_equals_whole(tmp_path, unviewed=False)
    with JSONLStore(tmp_path) as store:
        store.index_embeddings("s", EMBEDDER, parts=PARTS[1])
    assert_fresh_equals_whole(tmp_path, unviewed=False)


def test_compacted_log_makes_the_file_stale_and_it_is_saved_again(tmp_path: Path) -> None:
    """A compaction writes the log anew: the old file is not used, the next query saves one of the new log."""
    indexed(tmp_path)
    with JSONLStore(tmp_path) as store:
        store.delete_seqs("s", range(1, 39))
        store.compact("s")
    with JSONLStore(tmp_path) as store:
        search(store, "cat", "semantic")
        assert read_whole(store)
    with JSONLStore(tmp_path) as store:
        search(store, "cat", "hybrid")  # the keyword file saved again too
    assert_fresh_equals_whole(tmp_path)


def damaged_variants(data: bytes) -> list[bytes]:
    """Return damaged copies of a vector file: cut short, empty, garbage, a flipped byte in each part, another format."""
    out = [data[: len(data) // 2], data[:-8], b"", os.urandom(len(data)), b"{}\n" + data]
    head = data.index(b"\n") + 1
    for at in (5, head + 3, head + (len(data) - head) // 3, len(data) // 2, len(data) - 12):
        flipped = bytearray(data)
        flipped[at] ^= 0x41
        out.append(bytes(flipped))
    return out


def test_damaged_vector_file_is_never_trusted(tmp_path: Path) -> None:
    """A vector file cut short, of garbage, or with a byte flipped anywhere is not used once read (its vectors' blocks as a query reads them): the log is read whole."""
    indexed(tmp_path)
    good = vectors(tmp_path).read_bytes()
    for bad in damaged_variants(good):
        vectors(tmp_path).write_bytes(bad)
        with JSONLStore(tmp_path, read_only=True) as store:
            for parts in PARTS:  # a session this small: each reads its table's every vector
                search(store, "cat", "semantic", parts)
            assert read_whole(store)
        assert_fresh_equals_whole(tmp_path, unviewed=False)


def test_removed_or_foreign_file_reads_the_log_whole(tmp_path: Path) -> None:
    """A missing file, and one of another session's log, are not used; a writable handle saves the file again."""
    indexed(tmp_path / "a")
    indexed(tmp_path / "b", count=30)
    shutil.copy(vectors(tmp_path / "a"), vectors(tmp_path / "b"))
    with JSONLStore(tmp_path / "b", read_only=True) as store:
        search(store, "cat", "semantic")
        assert read_whole(store)
    assert_fresh_equals_whole(tmp_path / "b", unviewed=False)
    vectors(tmp_path / "b").unlink()
    assert_fresh_equals_whole(tmp_path / "b", unviewed=False)
    with JSONLStore(tmp_path / "b") as store:
        search(store, "cat", "semantic")
    assert_fresh_equals_whole(tmp_path / "b")


def test_a_line_cut_short_reads_the_log_whole(tmp_path: Path) -> None:
    """A log ending with a line cut short (a crash) is read whole, which warns of it; the hits are the same."""
    indexed(tmp_path)
    with (tmp_path / "s.jsonl").open("ab") as log:
        log.write(b'{"seq":999,"t":1.0,"s":"9","item":{"st')
    with JSONLStore(tmp_path, read_only=True) as store:
        with pytest.warns(SkippedRecordWarning, match="truncated"):
            got = search(store, "cat", "semantic")
        assert read_whole(store)
    with pytest.warns(SkippedRecordWarning, match="truncated"):
        whole = whole_log_hits(tmp_path, "cat", "semantic", PARTS[0])
    assert got == whole


def test_another_handle_writing_between_ranking_and_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hits deleted or changed by another handle after the ranking and before the rows are read are what the whole-log handle gives in the same race."""
    got: dict[bool, Hits] = {}
    for whole in (False, True):
        folder = tmp_path / str(whole)
        indexed(folder)
        with JSONLStore(folder, read_only=True) as store:
            if whole:
                store.backend.read_rows("s")
            backend = store.backend
            read_seqs = backend.read_seqs

            def racing(
                sid: str, seqs: Any, read_seqs: Any = read_seqs, folder: Path = folder
            ) -> Any:
                with JSONLStore(folder) as other:
                    other.delete_seqs("s", list(seqs)[:1])
                    with other.batch("s") as batch:
                        batch.update({sorted(seqs)[-1]: item(["changed"], 500)})
                    other.append("s", [item(["cat"], 501)])
                return read_seqs(sid, seqs)

            monkeypatch.setattr(backend, "read_seqs", racing)
            got[whole] = search(store, "cat", "semantic")
            assert read_whole(store) == whole
            monkeypatch.undo()
    assert got[False] == got[True]


def test_another_process_appending_is_followed(tmp_path: Path) -> None:
    """Records another process appends after the file are followed by a fresh handle of this one."""
    indexed(tmp_path)
    script = (
        "import sys\n"
        "from agents.memory import MemoryItem\n"
        "from agents.memory.search import EmbedParts, HashingEmbedder\n"
        "from agents.memory.stores import JSONLStore\n"
        "with JSONLStore(sys.argv[1]) as store:\n"
        "    store.append('s', [MemoryItem(step=900, action='cat cat', note='red')])\n"
        "    store.delete_seqs('s', [2])\n"
        "    for parts in (EmbedParts(), EmbedParts.WHOLE):\n"
        "        store.index_embeddings('s', HashingEmbedder(32), parts=parts)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    subprocess.run([sys.executable, "-c", script, str(tmp_path)], check=True, env=env)
    assert_fresh_equals_whole(tmp_path)


def test_a_followed_view_is_saved_again_past_the_threshold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writable handle that followed more than SAVE_BYTES of log saves the file again, current with the log."""
    from agents.memory.stores._jsonl import vector_views

    monkeypatch.setattr(vector_views, "SAVE_BYTES", 1)
    indexed(tmp_path)
    with JSONLStore(tmp_path) as store:
        store.append("s", items_of(20, start=100))  # past a 64th of the log
        for parts in PARTS:
            store.index_embeddings("s", EMBEDDER, parts=parts)
    before = vectors(tmp_path).read_bytes()
    with JSONLStore(tmp_path) as store:
        search(store, "cat", "semantic")
        assert not read_whole(store)
    assert vectors(tmp_path).read_bytes() != before
    assert_fresh_equals_whole(tmp_path)


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.integers(0, 20), st.floats(-1, 1, width=32)),
        min_size=1,
        max_size=40,
    )
)
def test_best_per_key_of_keys_in_order_equals_the_unordered_path(
    rows: list[tuple[int, float]],
) -> None:
    """Each key's best cosine from keys in order (a store's pages) is the one the sort-based path gives, float for float."""
    from agents.memory._vectors import best_per_key

    np = pytest.importorskip("numpy")
    rows = sorted(rows, key=lambda row: row[0])
    keys = np.array([key for key, _ in rows], dtype=np.int64)
    sims = np.array([sim for _, sim in rows], dtype=np.float32)
    got_keys, got = best_per_key(keys, sims)
    # The same rows, the first two swapped when their keys differ: the sort-based path.
    if len(rows) > 1 and rows[0][0] != rows[1][0]:
        order = [1, 0, *range(2, len(rows))]
        want_keys, want = best_per_key(keys[order], sims[order])
    else:
        reverse = np.arange(len(rows))[::-1]
        want_keys, want = best_per_key(keys[reverse], sims[reverse])
    assert got_keys.tolist() == want_keys.tolist()
    assert np.array_equal(got, want)
    assert got.dtype == want.dtype


def test_held_terms_from_the_kept_arrays_equal_the_postings(tmp_path: Path) -> None:
    """The terms each item holds, looked up in the index's arrays (a hybrid query's keyword side), are those of its postings, after deletes and appends too."""
    from agents.memory.stores._core.terms import held_by_row
    from agents.memory.stores._jsonl.keyword_ranking import held_terms

    indexed(tmp_path)
    with JSONLStore(tmp_path) as store:
        store.delete_seqs("s", [3, 4])
        store.append("s", [item(["cat", "zebra"], 300)])
    terms = ["cat", "dog", "zebra", "nope", "cat"]
    seqs = [50, *range(60), 7]
    with JSONLStore(tmp_path, read_only=True) as store:
        for follows in (False, True):
            if follows:
                store.backend.read_rows("s")  # and asked again of the index held
            index = store.backend._keywords.unviewed("s", str(tmp_path / "s.jsonl"))
            assert index is not None
            want = held_by_row(((term, index.postings(term)) for term in terms), seqs)
            assert held_terms(index, terms, seqs) == want
            assert want


def keyword_hits(store: JSONLStore, query: str, where: Any, k: int = 5) -> Hits:
    """Return a filtered keyword search's (seq, score, fields) through the store, best first."""
    found = store.search("s", query, k, mode="keyword", where=where)
    return [(hit.seq, hit.score, hit.item.to_dict()) for hit in found]


FILTERS = (
    {"step": 7},
    {"step": {"$gte": 30}},
    {"action": {"$in": ["cat", "dog red"]}},
    {"missing": 1},
    {"$or": [{"step": 3}, {"step": {"$lt": 2}}]},
)


@pytest.mark.parametrize("where", FILTERS)
def test_fresh_filtered_keyword_query_walks_the_file(tmp_path: Path, where: Any) -> None:
    """A fresh handle's filtered keyword query walks the keyword file's ranking, reading candidates by offset: the hits of the whole-log handle and Memory.search."""
    indexed(tmp_path)
    for query in QUERIES:
        with JSONLStore(tmp_path, read_only=True) as store:
            got = keyword_hits(store, query, where)
            walked = not read_whole(store)
            items = [record.item for record in store.records("s")]
        want = Memory(items).search(query, 5, mode="keyword", where=where)
        assert [(score, fields) for _, score, fields in got] == [
            (hit.score, hit.item.to_dict()) for hit in want
        ]
        with JSONLStore(tmp_path, read_only=True) as store:
            store.backend.read_rows("s")
            assert got == keyword_hits(store, query, where)
        assert walked  # 40 items: the first ranking holds every candidate


def test_filtered_queries_read_the_log_whole_once_walks_read_as_many_rows(tmp_path: Path) -> None:
    """Queries reading the same rows by offset again never read the log whole; once a handle has read every row of the session by offset, its next filtered query does (and ranks as before)."""
    indexed(tmp_path, 200)
    where = {"step": {"$gte": 0}}
    query = " ".join(WORDS)  # every item holds one: each query reads 30 rows of 200 and more
    with JSONLStore(tmp_path, read_only=True) as store:
        first = keyword_hits(store, query, where, k=30)
        assert not read_whole(store)
        second = keyword_hits(store, query, where, k=30)
        third = keyword_hits(store, query, where, k=30)
        assert not read_whole(store)  # the same rows, read again
        every = keyword_hits(store, query, where, k=200)
        assert not read_whole(store)
        assert keyword_hits(store, query, where, k=30) == first
        assert read_whole(store)
    assert first == second == third == every[:30]
    with JSONLStore(tmp_path, read_only=True) as store:
        store.backend.read_rows("s")
        assert first == keyword_hits(store, query, where, k=30)


def test_filtered_keyword_query_after_a_whole_read_is_answered_by_the_backend(
    tmp_path: Path,
) -> None:
    """A handle that read the log whole ranks filtered queries from its kept values, before and after another handle's write."""
    indexed(tmp_path)
    with JSONLStore(tmp_path, read_only=True) as store:
        store.backend.read_rows("s")
        first = keyword_hits(store, "cat", {"step": {"$gte": 30}})
        with JSONLStore(tmp_path) as other:
            other.append("s", [item(["cat", "cat"], 77)])
        again = keyword_hits(store, "cat", {"step": {"$gte": 30}})
    assert first != again
    assert again[0][2]["step"] == 77


# -- against a model: any sequence of changes, saves and damage ----------------------------


class FirstQueries(RuleBasedStateMachine):
    """Session ``s`` changed through a writable handle (appends, updates, deletes, vectors embedded and dropped, compactions, saves, damage to the file); a fresh handle's queries always equal the whole-log handle's."""

    def __init__(self) -> None:
        super().__init__()
        self._dir = tempfile.TemporaryDirectory()
        self.folder = Path(self._dir.name)
        self.store = JSONLStore(self.folder)
        self.store.append("s", items_of(12))
        self.step = 100

    def teardown(self) -> None:
        self.store.close()
        self._dir.cleanup()

    def live(self) -> list[int]:
        return [seq for seq, _ in self.store.backend.read_rows("s")]

    @rule(words=st.lists(st.sampled_from(WORDS), min_size=0, max_size=5), count=st.integers(1, 3))
    def append(self, words: list[str], count: int) -> None:
        for _ in range(count):
            self.step += 1
            self.store.append("s", [item(words, self.step)])

    @rule(pick=st.integers(0, 100), words=st.lists(st.sampled_from(WORDS), max_size=4))
    def update(self, pick: int, words: list[str]) -> None:
        live = self.live()
        if live:
            with self.store.batch("s") as batch:
                batch.update({live[pick % len(live)]: item(words, pick)})

    @rule(pick=st.integers(0, 100))
    def delete(self, pick: int) -> None:
        live = self.live()
        if live:
            self.store.delete_seqs("s", [live[pick % len(live)]])

    @rule(parts=st.sampled_from(PARTS))
    def embed(self, parts: EmbedParts) -> None:
        self.store.index_embeddings("s", EMBEDDER, parts=parts)

    @rule()
    def drop(self) -> None:
        self.store.drop_vectors("s")

    @rule()
    def compact(self) -> None:
        self.store.compact("s")

    @rule(mode=st.sampled_from(MODES), parts=st.sampled_from(PARTS))
    def save(self, mode: str, parts: EmbedParts) -> None:
        """A query of a fresh writable handle: saves the file where due."""
        with JSONLStore(self.folder) as store:
            search(store, "cat", mode, parts)

    @rule(how=st.sampled_from(["remove", "cut", "flip", "stale"]))
    def damage(self, how: str) -> None:
        path = vectors(self.folder)
        if not path.exists():
            return
        data = path.read_bytes()
        if how == "remove":
            path.unlink()
        elif how == "cut":
            path.write_bytes(data[: len(data) * 2 // 3])
        elif how == "flip":
            flipped = bytearray(data)
            flipped[len(data) * 3 // 4] ^= 0x10
            path.write_bytes(bytes(flipped))
        else:
            self.stale = data

    @rule()
    def restore_stale(self) -> None:
        """Put back a file saved earlier (of a shorter or older log)."""
        stale = getattr(self, "stale", None)
        if stale is not None:
            vectors(self.folder).write_bytes(stale)

    @invariant()
    def fresh_equals_whole(self) -> None:
        for mode in MODES:
            for parts in PARTS:
                with JSONLStore(self.folder, read_only=True) as store:
                    count = store.count("s")
                    got = search(store, "red cat", mode, parts)
                assert got == whole_log_hits(self.folder, "red cat", mode, parts), (mode, parts)
                assert count == len(self.live())
        where = {"step": {"$gte": 5}}
        with JSONLStore(self.folder, read_only=True) as store:
            got = keyword_hits(store, "red cat", where)
        with JSONLStore(self.folder, read_only=True) as store:
            store.backend.read_rows("s")
            assert got == keyword_hits(store, "red cat", where)


FirstQueries.TestCase.settings = settings(max_examples=25, stateful_step_count=12, deadline=None)
test_first_queries_equal_the_whole_log = FirstQueries.TestCase
