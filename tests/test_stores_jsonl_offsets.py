"""The first keyword search of a fresh JSONL handle: ranked from <session>.keywords, its hits read by their offsets, never otherwise than the log read whole."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import rule
from test_stores_jsonl_keywords import (
    QUERIES,
    JSONLWordSession,
    damaged_variants,
    expected,
    filled,
    item,
)

from agents.memory import MemoryItem
from agents.memory.stores import JSONLStore
from agents.memory.stores._jsonl.backend import LogBackend


def hits(store: JSONLStore, query: str, k: int = 5) -> list[tuple[int, float, dict[str, Any]]]:
    """Return a keyword search's (seq, score, fields) through the store, best first."""
    found = store.search("s", query, k, mode="keyword")
    return [(hit.seq, hit.score, hit.item.to_dict()) for hit in found]


def read_whole(store: JSONLStore) -> bool:
    """Return whether the handle read session ``s``'s log whole (holds a view of it)."""
    return store.backend._logs.viewed("s")


def keywords(folder: Path) -> Path:
    """Return the path of session ``s``'s keyword file."""
    return folder / "s.keywords"


def viewed_hits(folder: Path, query: str, k: int = 5) -> list[tuple[int, float, dict[str, Any]]]:
    """Return the search of a fresh handle that reads the log whole first: the path every query took before."""
    with JSONLStore(folder, read_only=True) as store:
        store.count("s")  # reads the log whole
        assert read_whole(store)
        return hits(store, query, k)


def test_fresh_handle_ranks_from_the_file_without_reading_the_log(tmp_path: Path) -> None:
    """A fresh handle's unfiltered keyword search, with a current keyword file, reads no log whole and equals Memory.search."""
    items = filled(tmp_path)
    with JSONLStore(tmp_path) as store:
        hits(store, "cat")  # writes the file
    for query in QUERIES:
        with JSONLStore(tmp_path) as store:
            got = hits(store, query)
            assert not read_whole(store)
        assert [(score, fields) for _, score, fields in got] == expected(items, query)
        assert got == viewed_hits(tmp_path, query)


def test_fresh_handle_follows_records_appended_after_the_file(tmp_path: Path) -> None:
    """Appends, updates and deletes after the file are followed from the log's tail; the rows read are the current ones."""
    filled(tmp_path)
    with JSONLStore(tmp_path) as store:
        hits(store, "cat")
        store.append("s", [item(["zebra", "cat"], 100), item(["zebra"], 101)])
        with store.batch("s") as batch:
            batch.update({3: item(["zebra", "red", "dog"], 103)})
            batch.delete([4, 5])
        now = [record.item for record in store.records("s")]
    for query in ("zebra", "zebra red", *QUERIES):
        with JSONLStore(tmp_path, read_only=True) as store:
            got = hits(store, query)
            assert not read_whole(store)
        assert [(score, fields) for _, score, fields in got] == expected(now, query)
        assert got == viewed_hits(tmp_path, query)


def old_version(data: bytes) -> bytes:
    """Return a version 1 file of the same postings: its header says version 1, and it holds no record offsets."""
    head, rest = data.split(b"\n", 1)
    fields = json.loads(head)
    fields["version"] = 1
    return json.dumps(fields).encode() + b"\n" + rest[: len(rest) - 8 * fields["items"]]


def offsets_moved(data: bytes, by: int) -> bytes:
    """Return the file with every record offset moved by ``by`` bytes (the offsets carry no CRC)."""
    fields = json.loads(data.split(b"\n", 1)[0])
    cut = len(data) - 8 * fields["items"]
    moved = [
        int.from_bytes(data[at : at + 8], sys.byteorder) + by for at in range(cut, len(data), 8)
    ]
    return data[:cut] + b"".join(value.to_bytes(8, sys.byteorder) for value in moved)


def bad_files(data: bytes, first_record: int) -> Iterator[tuple[str, bytes]]:
    """Yield the keyword files no fresh handle may take as they are: damaged, cut, of the old version, offsets off."""
    for number, bad in enumerate(damaged_variants(data)):
        yield f"damaged {number}", bad
    yield "old version", old_version(data)
    yield "offsets off by one", offsets_moved(data, 1)
    yield "offsets one back", offsets_moved(data, -1)
    yield (
        "offsets at the first record",
        offsets_moved(data, 0)[: len(data) - 8] + (first_record.to_bytes(8, sys.byteorder)),
    )


@pytest.mark.parametrize("query", ["cat", "open the file", "ok blue cat the"])
def test_a_keyword_file_that_does_not_check_out_is_never_misread(
    tmp_path: Path, query: str
) -> None:
    """A file damaged, cut, of version 1 or with offsets off gives the same hits, scores and rows as the log read whole; the next handle is fast again."""
    items = filled(tmp_path)
    with JSONLStore(tmp_path) as store:
        hits(store, "cat")
    good = keywords(tmp_path).read_bytes()
    first_record = len((tmp_path / "s.jsonl").read_bytes().split(b"\n", 1)[0]) + 1
    want = viewed_hits(tmp_path, query, 40)
    assert [(score, fields) for _, score, fields in want] == expected(items, query, 40)
    for name, bad in bad_files(good, first_record):
        keywords(tmp_path).write_bytes(bad)
        with JSONLStore(tmp_path) as store:
            assert hits(store, query, 40) == want, name
        with JSONLStore(tmp_path) as store:  # built again (or still good): the fast path
            assert hits(store, query, 40) == want, name
            assert not read_whole(store), name


def test_a_removed_or_stale_keyword_file_is_never_misread(tmp_path: Path) -> None:
    """No file, a file of the log before a compaction, and one of another session: the log is read whole (or the file followed), same hits."""
    filled(tmp_path)
    with JSONLStore(tmp_path) as store:
        hits(store, "cat")
        before = keywords(tmp_path).read_bytes()
        with store.batch("s") as batch:
            batch.delete(range(1, 30))
        store.compact("s")  # a new log: the old file's offsets point into the old one
        store.append("s", [item(["cat", "zebra"], 200)])
    keywords(tmp_path).write_bytes(before)
    for query in ("cat", "zebra cat", *QUERIES):
        want = viewed_hits(tmp_path, query)
        with JSONLStore(tmp_path) as store:
            assert hits(store, query) == want
    keywords(tmp_path).unlink()
    with JSONLStore(tmp_path, read_only=True) as store:
        assert hits(store, "cat") == viewed_hits(tmp_path, "cat")


class MeanwhileBackend:
    """Run ``write`` once, between a fresh handle's ranking and its read of the hits (``LogBackend.keyword_top``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, write: Callable[[], None]) -> None:
        real = LogBackend.keyword_top
        self.calls = 0

        def keyword_top(backend: LogBackend, *args: Any) -> Any:
            ranked = real(backend, *args)
            self.calls += 1
            if self.calls == 1:
                write()
            return ranked

        monkeypatch.setattr(LogBackend, "keyword_top", keyword_top)


def meanwhile(folder: str, kind: str) -> None:
    """Write to session ``s`` through a handle of its own: update or delete the best hits of "cat", or compact; then append."""
    with JSONLStore(folder) as store:
        seqs = [hit.seq for hit in store.search("s", "cat", 3, mode="keyword")]
        if kind == "update":
            with store.batch("s") as batch:
                batch.update({seqs[0]: MemoryItem(step=900, action="changed cat")})
        elif kind == "delete":
            with store.batch("s") as batch:
                batch.delete(seqs[:2])
        elif kind == "compact":
            with store.batch("s") as batch:
                batch.delete(range(30, 41))
            store.compact("s")
        store.append("s", [MemoryItem(step=901, action="cat cat new")])


WRITE = "import sys; from test_stores_jsonl_offsets import meanwhile; meanwhile(*sys.argv[1:])"


@pytest.mark.parametrize("kind", ["update", "delete", "compact", "append"])
@pytest.mark.parametrize("by", ["handle", "process"])
def test_a_write_between_the_ranking_and_the_read_gives_the_rows_the_log_read_whole_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, by: str
) -> None:
    """Another handle or process updating, deleting, compacting or appending after the ranking: the rows read are those of the log read whole, never an old record's."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))

    def write(folder: Path) -> Callable[[], None]:
        if by == "process":
            command = [sys.executable, "-c", WRITE, str(folder), kind]
            return lambda: subprocess.run(command, check=True, env=env)
        return lambda: meanwhile(str(folder), kind)

    results = []
    for fresh in (True, False):
        folder = tmp_path / f"fresh-{fresh}"
        filled(folder)
        with JSONLStore(folder) as store:
            hits(store, "cat")
        with monkeypatch.context() as patch:
            MeanwhileBackend(patch, write(folder))
            with JSONLStore(folder) as store:
                if not fresh:
                    store.count("s")  # the log read whole first: the path taken before
                results.append(hits(store, "cat", 8))
                # A compacted log is a new one, which the file does not describe: read whole.
                assert read_whole(store) == (not fresh or kind == "compact")
        with JSONLStore(folder) as store:
            now = {record.seq: record.item.to_dict() for record in store.records("s")}
        for seq, _, fields in results[-1]:
            assert fields == now[seq]  # the item as it is now, never as it was ranked
    assert results[0] == results[1]


class FreshHandleMachine(JSONLWordSession):
    """Two writing handles, compactions and a keyword file removed, damaged or put back stale; every fresh handle's keyword search equals Memory.search and the log read whole."""

    def __init__(self) -> None:
        super().__init__()
        self.kept: bytes | None = None

    @rule(which=st.integers(0, 1))
    def compact(self, which: int) -> None:
        if self.model:
            self.handle(which).compact("s")

    @rule()
    def keep_file(self) -> None:
        if keywords(self.folder).exists():
            self.kept = keywords(self.folder).read_bytes()

    @rule(how=st.sampled_from(["remove", "cut", "stale", "old", "off by one"]))
    def spoil_file(self, how: str) -> None:
        path = keywords(self.folder)
        if not path.exists():
            return
        data = path.read_bytes()
        if how == "remove":
            path.unlink()
        elif how == "cut":
            path.write_bytes(data[: len(data) * 2 // 3])
        elif how == "stale" and self.kept is not None:
            path.write_bytes(self.kept)
        elif how in ("old", "off by one"):
            try:
                path.write_bytes(old_version(data) if how == "old" else offsets_moved(data, 1))
            except ValueError:
                return  # spoiled already (cut): not a file to rewrite

    @rule(query=st.sampled_from(QUERIES), k=st.sampled_from([1, 3, 8]))
    def fresh_search(self, query: str, k: int) -> None:
        if not self.model:
            return
        items = [self.model[seq] for seq in sorted(self.model)]
        want = viewed_hits(self.folder, query, k)
        assert [(score, fields) for _, score, fields in want] == expected(items, query, k)
        with JSONLStore(self.folder) as store:
            assert hits(store, query, k) == want
        # Whatever the file was, the search left one the next fresh handle ranks from.
        with JSONLStore(self.folder, read_only=True) as store:
            assert hits(store, query, k) == want
            assert not read_whole(store)


FreshHandleMachine.TestCase.settings = settings(
    max_examples=40, stateful_step_count=25, deadline=None
)
TestFreshHandleMachine = FreshHandleMachine.TestCase


def test_an_item_record_read_by_offset_is_the_log_s_bytes(tmp_path: Path) -> None:
    """Rows read by offset are byte for byte the rows the log read whole gives (read_seqs)."""
    filled(tmp_path)
    with JSONLStore(tmp_path) as store:
        hits(store, "cat")
        with store.batch("s") as batch:
            batch.update({7: MemoryItem(step=7, text="é\u2028 cat")})
    with JSONLStore(tmp_path, read_only=True) as fresh, JSONLStore(tmp_path) as whole:
        hits(fresh, "cat")
        seqs = [*range(45), 10**9]
        assert fresh.backend.read_seqs("s", seqs) == whole.backend.read_seqs("s", seqs)
        assert not read_whole(fresh)
