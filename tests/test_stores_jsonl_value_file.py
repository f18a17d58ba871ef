"""The value file beside a JSONL log: a fresh handle judges a rare filter from it without reading the log, with the hits of Memory.search, and falls back on any damaged, foreign or stale file."""

from __future__ import annotations

import os
import subprocess
import sys
import zlib
from array import array
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_stores_jsonl_first_filtered import (
    EMBEDDER,
    PARTS,
    memory_hits,
    read_whole,
    search,
    steps,
    whole_log_hits,
    written,
)
from test_stores_value_index import encoded, exact_items, exact_wheres, items, wheres

from agents.memory import MemoryItem
from agents.memory.search import Filter
from agents.memory.stores import JSONLStore
from agents.memory.stores._core.value_index import ValueIndex
from agents.memory.stores._jsonl import filter_reads
from agents.memory.stores._jsonl.log import apply_records, read_header
from agents.memory.stores._jsonl.value_file import SessionValueFiles, touched

RARE = {"agent": "x"}
"""One in seven of :func:`steps` passes it: under one in 16 of the rows when half are appended as ``host``."""


def session(folder: Path) -> None:
    """Write session ``s`` (few rows pass :data:`RARE`), its vector and keyword files, and its value file (a rare-filtered hybrid query reading the log whole)."""
    items = steps(40) + [
        MemoryItem(step=100 + i, action="cat open", note="red", agent="host", team="grey")
        for i in range(200)
    ]
    written(folder, items)
    with JSONLStore(folder) as store:
        search(store, "cat", "hybrid", PARTS[1], RARE)
        assert read_whole(store)
    assert values_path(folder).exists()


def values_path(folder: Path) -> Path:
    return folder / "s.values"


def assert_first_from_file(folder: Path, where: Any = RARE, *, read_only: bool = False) -> None:
    """Assert that a fresh handle's first hybrid query with ``where`` reads no log whole and equals Memory.search's and the whole-log handle's hits."""
    for query in ("cat", "red dog", "open the file"):
        with JSONLStore(folder, read_only=read_only) as store:
            got = search(store, query, "hybrid", PARTS[1], where)
            named = store.backend.filter_candidates("s", Filter(where).tree)
            assert not read_whole(store), query
        want = whole_log_hits(folder, query, "hybrid", PARTS[1], where)
        assert got == want
        with JSONLStore(folder) as store:
            store.backend.read_rows("s")
            assert named == store.backend.filter_candidates("s", Filter(where).tree)
        with JSONLStore(folder) as store:
            default = search(store, query, "hybrid", PARTS[0], where)
            assert not read_whole(store), query
        assert [(score, fields) for _, score, fields in default] == memory_hits(
            folder, query, "hybrid", where
        )


def test_reopened_handle_judges_a_rare_filter_from_the_value_file(tmp_path: Path) -> None:
    """A handle opened after the value file was saved answers its first rare-filtered hybrid query without reading the log whole."""
    session(tmp_path)
    assert_first_from_file(tmp_path)
    assert_first_from_file(tmp_path, {"team": {"$in": ["red", "blue"]}, "agent": "x"})
    assert_first_from_file(tmp_path, {"agent": "nobody"})


def test_read_only_handle_reads_the_value_file_and_never_writes_it(tmp_path: Path) -> None:
    """A read-only handle judges from the value file, and a read-only handle that reads the log whole writes none."""
    session(tmp_path)
    assert_first_from_file(tmp_path, read_only=True)
    values_path(tmp_path).unlink()
    with JSONLStore(tmp_path, read_only=True) as store:
        search(store, "cat", "hybrid", PARTS[1], RARE)
    assert not values_path(tmp_path).exists()


@pytest.mark.parametrize("change", ["append", "update", "delete"])
def test_rows_another_handle_writes_after_the_file_are_caught_up(
    tmp_path: Path, change: str
) -> None:
    """Rows added, changed or deleted after the value file was saved are judged from their current bytes: the hits equal the whole-log handle's."""
    session(tmp_path)
    with JSONLStore(tmp_path) as other:
        if change == "append":
            other.append("s", [MemoryItem(step=900, action="cat red", note="cat", agent="x")])
        elif change == "update":
            with other.batch("s") as batch:  # seq 4 (step 3) and 11 were agent x: 5 is now
                batch.update(
                    {
                        5: MemoryItem(step=4, action="cat cat", note="red", agent="x"),
                        11: MemoryItem(step=10, action="cat", note="dog", agent="host"),
                    }
                )
        else:
            other.delete_seqs("s", [4, 11, 18])
        other.index_embeddings("s", EMBEDDER, parts=PARTS[1])
        other.index_embeddings("s", EMBEDDER, parts=PARTS[0])
    assert_first_from_file(tmp_path)


def test_rows_another_process_appends_are_caught_up(tmp_path: Path) -> None:
    """Rows another process appends after the value file was saved are found by a fresh handle's rare-filtered query."""
    session(tmp_path)
    code = (
        "import sys\n"
        "from agents.memory import MemoryItem\n"
        "from agents.memory.search import EmbedParts, HashingEmbedder\n"
        "from agents.memory.stores import JSONLStore\n"
        "with JSONLStore(sys.argv[1]) as store:\n"
        "    store.append('s', [MemoryItem(step=901, action='cat', note='red', agent='x')])\n"
        "    for parts in (EmbedParts(), EmbedParts.WHOLE):\n"
        "        store.index_embeddings('s', HashingEmbedder(32), parts=parts)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, env=env)
    with JSONLStore(tmp_path) as store:
        got = search(store, "cat", "hybrid", PARTS[1], RARE)
        assert not read_whole(store)
    assert any(fields["step"] == 901 for _, _, fields in got)
    assert_first_from_file(tmp_path)


def damage(path: Path, how: str) -> None:
    """Spoil a value file: a byte of a part flipped, cut short, another format, or not JSON."""
    data = bytearray(path.read_bytes())
    if how == "retyped":  # still JSON of the right shapes: only the CRC tells
        cut = data.index(b"\n") + 1
        path.write_bytes(bytes(data[:cut] + data[cut:].replace(b'"host"', b'"hosu"', 1)))
    elif how == "flipped":
        data[-3] ^= 0x55
        path.write_bytes(bytes(data))
    elif how == "cut":
        path.write_bytes(bytes(data[: len(data) // 2]))
    elif how == "foreign":
        path.write_bytes(b'{"format": "something-else", "version": 1}\n[]')
    else:
        path.write_bytes(b"\x00garbage")


@pytest.mark.parametrize("how", ["retyped", "flipped", "cut", "foreign", "garbage"])
def test_damaged_or_foreign_value_file_reads_the_log_and_is_saved_again(
    tmp_path: Path, how: str
) -> None:
    """A value file that does not check out is not used: the log is read whole, the hits are right, and the file is written again."""
    session(tmp_path)
    damage(values_path(tmp_path), how)
    with JSONLStore(tmp_path) as store:
        got = search(store, "cat", "hybrid", PARTS[1], RARE)
        assert read_whole(store)
    assert got == whole_log_hits(tmp_path, "cat", "hybrid", PARTS[1], RARE)
    assert_first_from_file(tmp_path)


@pytest.mark.parametrize("how", ["compacted", "recreated", "cleared"])
def test_stale_value_file_is_not_used(tmp_path: Path, how: str) -> None:
    """A log written anew (compacted, deleted and created again) or cleared after the file was saved makes the file stale: the log is read whole."""
    session(tmp_path)
    saved = values_path(tmp_path).read_bytes()
    with JSONLStore(tmp_path) as store:
        if how == "compacted":
            store.delete_seqs("s", [4])
            store.backend.compact("s")
        elif how == "recreated":
            store.delete_session("s")
            store.append("s", steps(400, start=7))  # longer than the log the file covered
        else:
            store.clear("s")
            store.append("s", steps(30, start=7))
        for parts in PARTS:
            store.index_embeddings("s", EMBEDDER, parts=parts)
            store.search("s", "cat", 5, mode="semantic", embedder=EMBEDDER, parts=parts)
    values_path(tmp_path).write_bytes(saved)  # the old file, as a crash might leave it
    with JSONLStore(tmp_path) as store:
        got = search(store, "cat", "hybrid", PARTS[1], RARE)
        assert read_whole(store)
    assert got == whole_log_hits(tmp_path, "cat", "hybrid", PARTS[1], RARE)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    first=st.lists(items(enums=False), min_size=1, max_size=12),
    later=st.lists(items(enums=False), max_size=4),
    gone=st.lists(st.integers(1, 12), max_size=3),
    where=wheres(),
)
def test_fresh_handle_with_value_file_equals_memory_search(
    tmp_path_factory: pytest.TempPathFactory,
    first: list[MemoryItem],
    later: list[MemoryItem],
    gone: list[int],
    where: dict[str, Any],
) -> None:
    """Items written, a value file saved, more appended and some deleted by another handle: a fresh handle's filtered hybrid query equals Memory.search's and the whole-log handle's."""
    folder = tmp_path_factory.mktemp("values")
    written(folder, first)
    with JSONLStore(folder) as store:
        store.backend.filter_candidates("s", Filter(where).tree)  # reads the log whole: saves
    with JSONLStore(folder) as other:
        if later:
            other.append("s", later)
        live = [seq for seq in gone if seq <= len(first)]
        if live:
            other.delete_seqs("s", sorted(set(live)))
        other.index_embeddings("s", EMBEDDER, parts=PARTS[0])
    for query in ("cat", "red dog"):
        with JSONLStore(folder) as store:
            got = search(store, query, "hybrid", PARTS[0], where)
            allowed = store.backend.filter_candidates("s", Filter(where).tree)
        truly = memory_hits(folder, query, "hybrid", where)
        assert [(score, fields) for _, score, fields in got] == truly
        with JSONLStore(folder) as store:
            store.backend.read_rows("s")
            whole = store.backend.filter_candidates("s", Filter(where).tree)
        if allowed is not None and whole is not None:
            assert whole <= allowed  # every row that passes is named


@settings(max_examples=80, deadline=None)
@given(rows=st.lists(exact_items(), max_size=12), where=exact_wheres())
def test_index_read_back_path_by_path_judges_as_the_index(
    rows: list[MemoryItem], where: Any
) -> None:
    """An index packed and read back with only the paths a filter names judges the filter as the whole index does."""
    index = ValueIndex()
    for seq, item in enumerate(rows, start=1):
        index.add(seq, encoded(item))
    tree = Filter(where).tree
    packed = index.packed()
    assert packed is not None
    sets, paths = packed
    back = ValueIndex()
    assert back.take_sets(sets)
    for path in ValueIndex.paths_of(tree):
        if path in paths:
            assert back.take_path(path, paths[path])
    assert back.judged(tree) == index.judged(tree)


def test_parts_that_do_not_read_as_an_index_are_refused() -> None:
    """Parts of the right CRC but the wrong shapes (untrusted) are refused, and nothing is filed."""
    assert not ValueIndex().take_sets(b'[[1], [2], "x"]')
    assert not ValueIndex().take_sets(b'[[1], ["2"], []]')
    one, two = (1).to_bytes(4, sys.byteorder), (7).to_bytes(8, sys.byteorder)
    index = ValueIndex()
    for blob in (
        b"[]",
        b'[["a"], [], [], false]',  # no line break, no counts
        b'[["a"], [], [], false]\n' + one,  # a count and no seq
        b'[["a"], [], [], false]\n' + (0).to_bytes(4, sys.byteorder),  # a value of no seq
        b'[["a"], [], [], false]\n' + one + two + two,  # more seqs than counted
        b"[[1], [], [], false]\n" + one + two,  # a number among the strings
        b'[[], ["1"], [], false]\n' + one + two,  # a string among the numbers
        b'[[], [], ["x"], false]\n' + one + two,
        b'[["a", "a"], [], [], false]\n' + one + one + two + two,  # a value twice
        b"[[], [1, 1.0], [], false]\n" + one + one + two + two,  # one place twice
        b'[["a"], [], [], 0]\n' + one + two,
    ):
        assert not index.take_path("p", blob), blob
    assert index.candidates(Filter({"p": "a"}).tree) == set()
    assert index.take_path("p", b'[["a"], [], [], false]\n' + one + two)
    assert index.candidates(Filter({"p": "a"}).tree) == {7}


@pytest.mark.parametrize("where", ["header", "tail"])
def test_file_of_a_log_changed_in_place_judges_nothing(tmp_path: Path, where: str) -> None:
    """A value file is used only while the log starts with the header it names and holds the bytes it hashed before its offset: a log changed in place (same length) gets no answer."""
    session(tmp_path)
    log = tmp_path / "s.jsonl"
    data = log.read_bytes()
    files = SessionValueFiles(str(tmp_path), read_only=True)
    tree = Filter(RARE).tree
    header = data[: data.index(b"\n") + 1]
    assert files.judge("s", tree, str(log), header, len(data)) is not None
    if where == "header":
        changed = header[:-3] + (b"x" if header[-3:-2] != b"x" else b"y") + header[-2:]
        log.write_bytes(changed + data[len(header) :])
        header = changed
    else:
        at = len(data) - 40  # within the bytes hashed before the file's offset (the log's end)
        log.write_bytes(data[:at] + (b"A" if data[at : at + 1] != b"A" else b"B") + data[at + 1 :])
    assert (
        SessionValueFiles(str(tmp_path), read_only=True).judge(
            "s", tree, str(log), header, len(data)
        )
        is None
    )


def walks(store: JSONLStore, where: Any) -> bool:
    """Return whether the store's filtered semantic query with ``where`` walks its ranking (``Backend.walks_filtered``, one in 16 asked about)."""
    return store.backend.walks_filtered("s", Filter(where).tree, store.count("s") // 16)


@pytest.mark.parametrize(
    ("where", "walked"),
    [(RARE, False), ({"agent": "nobody"}, False), ({"team": {"$in": ["red", "blue"]}}, True)],
)
def test_semantic_query_ranks_only_the_rows_the_value_file_names(
    tmp_path: Path, where: Any, walked: bool
) -> None:
    """With a current value file a fresh handle's semantic query with a filter few rows pass does not walk (``walks_filtered``): it ranks the rows the file names; one that 1 in 12 pass walks, as without a file. The log unread, the whole-log handle's hits."""
    session(tmp_path)
    for query in ("cat", "red dog"):
        for parts in PARTS:
            with JSONLStore(tmp_path) as store:
                assert walks(store, where) is walked
                got = search(store, query, "semantic", parts, where)
                assert not read_whole(store)
            assert got == whole_log_hits(tmp_path, query, "semantic", parts, where)
            if parts == PARTS[0]:
                assert [(s, f) for _, s, f in got] == memory_hits(
                    tmp_path, query, "semantic", where
                )
    with JSONLStore(tmp_path) as other:
        other.append("s", [MemoryItem(step=902, action="cat", note="red", agent="x")])
        for parts in PARTS:
            other.index_embeddings("s", EMBEDDER, parts=parts)
    with JSONLStore(tmp_path) as store:
        assert walks(store, RARE)  # the file is behind the log: walked as before
        got = search(store, "cat", "semantic", PARTS[1], RARE)
        assert not read_whole(store)
    assert any(fields["step"] == 902 for _, _, fields in got)
    assert got == whole_log_hits(tmp_path, "cat", "semantic", PARTS[1], RARE)


def test_a_large_part_is_read_only_for_a_filter_the_sample_does_not_call_common(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A filter naming a part of the value file larger than ``SAMPLED_PART`` (a field of many distinct values) is judged by the sample of rows first: a common one walks with the part unread, a rare one reads it and ranks the rows it names; the hits are the whole-log handle's."""
    session(tmp_path)
    taken: list[str] = []
    take_path = ValueIndex.take_path

    def noted(index: ValueIndex, path: str, blob: bytes, **options: bool) -> bool:
        taken.append(path)
        return take_path(index, path, blob, **options)

    monkeypatch.setattr(ValueIndex, "take_path", noted)
    monkeypatch.setattr(filter_reads, "SAMPLED_PART", 0)  # every part counts as large
    common = {"team": {"$in": ["red", "blue"]}}
    for where, walked, read in ((common, True, []), (RARE, False, ["agent"])):
        taken.clear()
        with JSONLStore(tmp_path) as store:
            assert walks(store, where) is walked
            got = search(store, "cat", "semantic", PARTS[1], where)
            assert not read_whole(store)
        assert taken == read
        assert got == whole_log_hits(tmp_path, "cat", "semantic", PARTS[1], where)
    monkeypatch.setattr(filter_reads, "SAMPLED_PART", 1 << 40)  # no part counts as large
    taken.clear()
    with JSONLStore(tmp_path) as store:
        assert walks(store, common)  # read, then many found to pass
    assert taken == ["team"]


def test_records_after_the_file_name_the_rows_they_touch() -> None:
    """The records after a value file name the rows added, changed or deleted; a clear, or a line that is no record, gives no answer (the file is not used)."""
    item = b'{"seq":7,"t":1.0,"s":"3","item":{"agent":"x"}}\n'
    update = b'{"seq":2,"t":1.0,"s":"1","u":1,"item":{"agent":"y"}}\n'
    assert touched(item + update + b'{"del":[3,4]}\n{"vm":["m",8]}\n') == {2, 3, 4, 7}
    assert touched(b"") == set()
    assert touched(item + b'{"clear":1}\n') is None
    assert touched(item + b"not a record\n") is None
    assert touched(b'{"del":["3"]}\n') is None


def canonical(index: ValueIndex) -> tuple[bytes, dict[str, Any]]:
    """Return what ``index`` files, in no order of filing: the rows read loosely, and per path its floats flag and each value's seqs (by kind, as :meth:`ValueIndex.packed` writes them)."""
    packed = index.packed()
    assert packed is not None
    sets, paths = packed
    out: dict[str, Any] = {}
    for path, blob in paths.items():
        cut = blob.index(b"\n")
        strings, numbers, others, floats = orjson.loads(blob[:cut])
        keys = (
            [("s", k) for k in strings] + [("n", k) for k in numbers] + [("o", k) for k in others]
        )
        counts, seqs = array("I"), array("q")
        counts.frombytes(blob[cut + 1 : cut + 1 + 4 * len(keys)])
        seqs.frombytes(blob[cut + 1 + 4 * len(keys) :])
        groups, at = {}, 0
        for key, count in zip(keys, counts, strict=True):
            groups[(key[0], type(key[1]).__name__, key[1])] = list(seqs[at : at + count])
            at += count
        out[path] = (floats, groups)
    return sets, out


def filed_from_scratch(folder: Path) -> ValueIndex:
    """Return the value index of session ``s``'s log read whole with every row filed."""
    path = str(folder / "s.jsonl")
    data = (folder / "s.jsonl").read_bytes()
    log = read_header("s", path, data, newest=10**6)
    apply_records(path, log, data[log.offset :])
    return log.rows.value_index


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    first=st.lists(items(enums=False), min_size=1, max_size=10),
    later=st.lists(items(enums=False), max_size=4),
    changed=st.dictionaries(st.integers(1, 10), items(enums=False), max_size=3),
    gone=st.lists(st.integers(1, 14), max_size=3),
    cleared=st.booleans(),
    where=wheres(),
)
def test_log_read_whole_takes_the_value_file_and_files_only_the_rows_after_it(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    first: list[MemoryItem],
    later: list[MemoryItem],
    changed: dict[int, MemoryItem],
    gone: list[int],
    cleared: bool,
    where: dict[str, Any],
) -> None:
    """A handle reading the log whole takes the value file's index and files only the rows that the records after the file add, change or delete (another handle's clear, appends, updates and deletes): its index is the one filing every row builds, its filters are judged the same and its hits are Memory.search's."""
    folder = tmp_path_factory.mktemp("whole")
    written(folder, first)
    with JSONLStore(folder) as store:
        store.backend.filter_candidates("s", Filter(where).tree)  # reads the log whole: saves
    assert values_path(folder).exists()
    with JSONLStore(folder) as other:
        if cleared:
            other.clear("s")
        if later:
            other.append("s", later)
        live = {seq for seq, _ in other.backend.read_rows("s")}
        with other.batch("s") as batch:
            batch.update({seq: item for seq, item in changed.items() if seq in live})
        dropped = sorted(live.intersection(gone))
        if dropped:
            other.delete_seqs("s", dropped)
        other.index_embeddings("s", EMBEDDER, parts=PARTS[0])
    filed: list[int] = []
    add = ValueIndex.add

    def noted(index: ValueIndex, seq: int, data: bytes) -> None:
        filed.append(seq)
        add(index, seq, data)

    with JSONLStore(folder) as store:
        monkeypatch.setattr(ValueIndex, "add", noted)
        store.backend.read_rows("s")
        monkeypatch.undo()
        assert read_whole(store)
        index = store.backend._logs.current("s").rows.value_index
        scratch = filed_from_scratch(folder)
        assert canonical(index) == canonical(scratch)
        tree = Filter(where).tree
        assert index.judged(tree) == scratch.judged(tree)
        assert len(filed) <= len(later) + len(changed)  # the rows before the file: not filed
        got = search(store, "cat", "hybrid", PARTS[0], where)
    assert [(score, fields) for _, score, fields in got] == memory_hits(
        folder, "cat", "hybrid", where
    )


def test_group_out_of_order_is_refused_for_an_index_kept_as_rows_change(tmp_path: Path) -> None:
    """A group of seqs out of order (its CRC right) is taken only by an index that is asked, never unfiled from: a handle reading the log whole does not take the file, and files every row."""
    two, seven = (2).to_bytes(8, sys.byteorder), (7).to_bytes(8, sys.byteorder)
    blob = b'[["a"], [], [], false]\n' + (2).to_bytes(4, sys.byteorder) + seven + two
    assert ValueIndex().take_path("p", blob)
    assert not ValueIndex().take_path("p", blob, ordered=True)
    assert ValueIndex().take_path("p", blob[:-16] + two + seven, ordered=True)
    session(tmp_path)
    path = values_path(tmp_path)
    data = path.read_bytes()
    cut = data.index(b"\n") + 1
    head = orjson.loads(data[:cut])
    start, length, _ = head["paths"]["agent"]
    part = data[cut + start : cut + start + length]
    keys = part.index(b"\n") + 1
    values = orjson.loads(part[: keys - 1])
    counts = array("I")
    counts.frombytes(part[keys : keys + 4 * sum(map(len, values[:3]))])
    seqs = array("q")
    seqs.frombytes(part[keys + 4 * len(counts) :])
    assert counts[0] > 1
    seqs[0], seqs[counts[0] - 1] = seqs[counts[0] - 1], seqs[0]  # the first group's ends swapped
    part = part[: keys + 4 * len(counts)] + seqs.tobytes()
    head["paths"]["agent"][2] = zlib.crc32(part)
    body = data[cut:]
    path.write_bytes(orjson.dumps(head) + b"\n" + body[:start] + part + body[start + length :])
    with JSONLStore(tmp_path) as store:
        store.backend.read_rows("s")
        index = store.backend._logs.current("s").rows.value_index
        assert canonical(index) == canonical(filed_from_scratch(tmp_path))
