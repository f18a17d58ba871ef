"""The blocks of <session>.vectors: checked as they are first read, a damaged one falls back to the log read whole; a version 1 file read as it was and saved in version 2 from it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from test_stores_jsonl_first import (
    EMBEDDER,
    MODES,
    PARTS,
    assert_fresh_equals_whole,
    damaged_variants,
    indexed,
    item,
    items_of,
    read_whole,
    search,
    vectors,
    whole_log_hits,
)

from agents.memory.search import EmbedParts
from agents.memory.stores import JSONLStore
from agents.memory.stores._jsonl import vector_file

np = pytest.importorskip("numpy")

ITEMS = 600  # whole vectors of 32 floats: 128 bytes each, some five blocks of them
WHOLE = "*"  # the fields key of whole-item vectors over every field


def written(folder: Path) -> None:
    """Write session ``s`` of :data:`ITEMS` steps with their whole-item vectors, and its vector and keyword files."""
    with JSONLStore(folder) as store:
        store.append("s", items_of(ITEMS))
        store.index_embeddings("s", EMBEDDER, parts=EmbedParts.WHOLE)
        search(store, "cat", "hybrid", EmbedParts.WHOLE)  # the files saved


def head_of(data: bytes) -> tuple[dict[str, Any], int]:
    """Return a vector file's header and where its parts start."""
    end = data.index(b"\n") + 1
    head = orjson.loads(data[:end])
    sums = 8 * sum(-(-length // vector_file.CHECK_BLOCK) for length in head["parts"])
    return head, end + sums


def vector_at(data: bytes, seq: int) -> int:
    """Return where item ``seq``'s whole-item vector starts in a vector file (every vector of the table the same length)."""
    head, at = head_of(data)
    names = [name for name, _ in head["tables"]]
    number = names.index(WHOLE)
    parts = head["parts"]
    blob = at + sum(parts[: 4 + 3 * number])
    seqs = np.frombuffer(data, "=u8", parts[2 + 3 * number] // 8, at + sum(parts[: 2 + 3 * number]))
    row = int(np.searchsorted(seqs, seq))
    assert int(seqs[row]) == seq
    width = parts[4 + 3 * number] // len(seqs)
    return blob + row * width


def flipped(folder: Path, at: int) -> None:
    """Flip a byte of session ``s``'s vector file."""
    data = bytearray(vectors(folder).read_bytes())
    data[at] ^= 0x41
    vectors(folder).write_bytes(bytes(data))


def whole_vectors(folder: Path, seqs: list[int]) -> list[tuple[int, bytes]]:
    """Return the whole-item vectors of ``seqs`` as a handle that reads the log whole gets them."""
    with JSONLStore(folder, read_only=True) as store:
        store.backend.read_rows("s")
        assert read_whole(store)
        return store.backend.vectors_of("s", WHOLE, seqs)


def assert_saved_again(
    folder: Path, bad: bytes, mode: str = "semantic", *, first_call: bool = False
) -> None:
    """Put ``bad`` in place of session ``s``'s sound vector file, then check three handles in turn.

    A read-only handle's query gives the hits of the log read whole, reads
    the log whole and writes nothing; a writable handle's query (its first
    call, :meth:`~agents.memory.stores.Backend.vector_model`, where
    ``first_call``) saves the sound file again; a fresh read-only handle's
    query then answers from that file, the log not read whole.
    """
    data = vectors(folder).read_bytes()
    want = whole_log_hits(folder, "red dog", mode, EmbedParts.WHOLE)
    vectors(folder).write_bytes(bad)
    with JSONLStore(folder, read_only=True) as store:
        assert search(store, "red dog", mode, EmbedParts.WHOLE) == want
        assert read_whole(store)
    assert vectors(folder).read_bytes() == bad  # a read-only handle writes nothing
    with JSONLStore(folder) as store:
        if first_call:
            assert store.backend.vector_model("s") == (EMBEDDER.name, EMBEDDER.dimension)
            assert vectors(folder).read_bytes() == data
        assert search(store, "red dog", mode, EmbedParts.WHOLE) == want
    assert vectors(folder).read_bytes() == data  # saved again as it was before the damage
    with JSONLStore(folder, read_only=True) as store:
        assert search(store, "red dog", mode, EmbedParts.WHOLE) == want
        assert not read_whole(store)


def test_block_sums_change_with_any_word() -> None:
    """A block's sum changes when any 8-byte word of it changes; blocks swapped change both sums."""
    block = vector_file.CHECK_BLOCK
    data = bytearray(os.urandom(3 * block))
    base = vector_file.block_sums(np, bytes(data))
    assert len(base) == 3
    for at in (0, block - 1, block, 2 * block + 8, len(data) - 1):
        changed = bytearray(data)
        changed[at] ^= 1
        got = vector_file.block_sums(np, bytes(changed))
        assert (got != base).tolist() == [at // block == number for number in range(3)]
    swapped = data[block : 2 * block] + data[:block] + data[2 * block :]
    assert (vector_file.block_sums(np, bytes(swapped)) != base).tolist() == [True, True, False]


def test_a_damaged_block_no_read_touches_is_no_error(tmp_path: Path) -> None:
    """A byte flipped in a block of vectors that a handle does not read leaves its reads of other blocks answered from the file, the log not read whole."""
    written(tmp_path)
    data = vectors(tmp_path).read_bytes()
    flipped(tmp_path, vector_at(data, ITEMS))
    want = whole_vectors(tmp_path, [0, 1])
    with JSONLStore(tmp_path, read_only=True) as store:
        assert store.backend.count("s") == ITEMS
        assert store.backend.vectors_of("s", WHOLE, [0, 1]) == want
        assert not read_whole(store)


def test_a_damaged_block_read_lazily_falls_back_to_the_log(tmp_path: Path) -> None:
    """A byte flipped in a block of vectors that a read takes is found as it is first read: the call, and every one after, answers from the log read whole."""
    written(tmp_path)
    data = vectors(tmp_path).read_bytes()
    flipped(tmp_path, vector_at(data, 300) + 5)
    want = whole_vectors(tmp_path, [2, 300, 301])
    with JSONLStore(tmp_path, read_only=True) as store:
        assert store.backend.count("s") == ITEMS  # from the file: its vectors not read yet
        assert not read_whole(store)
        assert store.backend.vectors_of("s", WHOLE, [2, 300, 301]) == want
        assert read_whole(store)
        assert store.backend.vectors_of("s", WHOLE, [2, 300, 301]) == want


def pages_from_the_log(folder: Path) -> list[Any]:
    """Return the rows of ``vector_pages`` over the whole-item vectors of session ``s``, 50 a page, from the log read whole."""
    with JSONLStore(folder, read_only=True) as store:
        store.backend.read_rows("s")
        return [row for page in store.backend.vector_pages("s", WHOLE, 50) for row in page]


def test_a_damaged_block_met_while_paging_goes_on_from_the_log(tmp_path: Path) -> None:
    """Pages of vectors taken from the file go on from the log read whole at the first block that does not check out: every row once, in seq order, as the log holds them."""
    written(tmp_path)
    data = vectors(tmp_path).read_bytes()
    flipped(tmp_path, vector_at(data, 450))
    want = pages_from_the_log(tmp_path)
    with JSONLStore(tmp_path, read_only=True) as store:
        pages = store.backend.vector_pages("s", WHOLE, 50)
        got = next(pages)
        assert not read_whole(store)  # the first page's blocks check out
        got += [row for page in pages for row in page]
        assert read_whole(store)
    assert got == want
    assert [seq for seq, _ in got] == list(range(1, ITEMS + 1))


@pytest.mark.parametrize("mode", MODES)
def test_queries_over_a_damaged_block_equal_the_log_read_whole(tmp_path: Path, mode: str) -> None:
    """A query whose vectors lie in a damaged block gives the hits of the log read whole, and a writable handle saves a sound file again."""
    written(tmp_path)
    bad = bytearray(vectors(tmp_path).read_bytes())
    bad[vector_at(bytes(bad), 200) + 9] ^= 0x41
    assert_saved_again(tmp_path, bytes(bad), mode)


def test_a_file_of_another_version_is_read_whole_and_saved_again(tmp_path: Path) -> None:
    """A vector file of a version this one does not read (neither 1 nor 2) is not used (the log is read whole, the hits the same), and a writable handle's query saves it again in this one."""
    written(tmp_path)
    data = vectors(tmp_path).read_bytes()
    version = f'"version":{vector_file._VERSION},'.encode()
    older = data.replace(version, f'"version":{vector_file._VERSION + 1},'.encode(), 1)
    assert older != data
    assert_saved_again(tmp_path, older, first_call=True)


def checksum_1(part: bytes) -> list[int]:
    """Return a part's checksum in a version 1 file, as version 1's writer computed it: the sum of its words, and the sum of each 512 words' sum times its place."""
    words = np.frombuffer(part, "<u8")
    if not len(words):
        return [0, 0]
    blocks = np.add.reduceat(words, np.arange(0, len(words), 512), dtype=np.uint64)
    places = np.arange(1, len(blocks) + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        weighed = (blocks * places).sum(dtype=np.uint64)
    return [int(blocks.sum(dtype=np.uint64)), int(weighed)]


def version_1(data: bytes) -> bytes:
    """Return a version 2 vector file written as version 1's writer wrote the same: no table of sums, each part's length and checksum in the header."""
    head, at = head_of(data)
    parts = []
    for length in head["parts"]:
        parts.append(data[at : at + length])
        at += length
    assert at == len(data)
    older = {key: value for key, value in head.items() if key not in ("block", "sums")}
    older["version"] = 1
    older["parts"] = [[len(part), *checksum_1(part)] for part in parts]
    line = orjson.dumps(older)
    line += b" " * (-(len(line) + 1) % 8) + b"\n"
    return b"".join([line, *parts])


def test_a_version_1_file_is_served_to_a_read_only_handle(tmp_path: Path) -> None:
    """A vector file of version 1 answers every query of a fresh read-only handle without reading the log, as the log read whole and Memory.search do; the handle writes nothing."""
    indexed(tmp_path)
    older = version_1(vectors(tmp_path).read_bytes())
    vectors(tmp_path).write_bytes(older)
    assert_fresh_equals_whole(tmp_path)
    assert vectors(tmp_path).read_bytes() == older


@pytest.mark.parametrize("mode", MODES)
def test_a_writable_handle_saves_a_version_1_file_in_version_2_from_it(
    tmp_path: Path, mode: str
) -> None:
    """A writable handle's first query over a version 1 file is answered from it, the log not read whole, and saves the file in version 2 from it: the same bytes as one saved from the log."""
    indexed(tmp_path)
    vectors(tmp_path).unlink()
    with JSONLStore(tmp_path) as store:
        search(store, "cat", mode)  # the file saved from the log read whole, current
        assert read_whole(store)
    data = vectors(tmp_path).read_bytes()
    want = whole_log_hits(tmp_path, "red dog", mode, PARTS[0])
    vectors(tmp_path).write_bytes(version_1(data))
    with JSONLStore(tmp_path) as store:
        assert search(store, "red dog", mode) == want
        assert not read_whole(store)
        assert vectors(tmp_path).read_bytes() == data
        assert search(store, "cat", mode) == whole_log_hits(tmp_path, "cat", mode, PARTS[0])
        assert not read_whole(store)
    assert_fresh_equals_whole(tmp_path)


def search_of(folder: Path, query: str) -> list[Any]:
    """Return a semantic query's hits through a fresh read-only handle."""
    with JSONLStore(folder, read_only=True) as store:
        return search(store, query, "semantic")


def test_a_version_1_file_behind_the_log_is_saved_with_the_records_followed(
    tmp_path: Path,
) -> None:
    """A version 1 file that the log has grown past since is followed and saved in version 2 by a writable handle, the log not read whole: the bytes a save from the log gives."""
    indexed(tmp_path / "a")
    behind = version_1(vectors(tmp_path / "a").read_bytes())
    with JSONLStore(tmp_path / "a") as store:
        store.append("s", [item(["red", "dog", "cat"], 100), item(["blue", "menu"], 101)])
        store.delete_seqs("s", [3])
        for parts in PARTS:
            store.index_embeddings("s", EMBEDDER, parts=parts)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    vectors(tmp_path / "b").unlink()
    with JSONLStore(tmp_path / "b") as store:
        search(store, "cat", "semantic")  # saved from the log read whole
        assert read_whole(store)
    want = vectors(tmp_path / "b").read_bytes()
    vectors(tmp_path / "a").write_bytes(behind)
    with JSONLStore(tmp_path / "a") as store:
        assert search(store, "red dog", "semantic") == search_of(tmp_path / "b", "red dog")
        assert not read_whole(store)
    assert vectors(tmp_path / "a").read_bytes() == want
    assert_fresh_equals_whole(tmp_path / "a")


def test_a_damaged_version_1_file_falls_back_to_the_log(tmp_path: Path) -> None:
    """A version 1 file is checked whole as it is read: one cut short or with a byte flipped anywhere (where no query reads too) is not used, the log is read whole, the hits the same."""
    indexed(tmp_path)
    older = version_1(vectors(tmp_path).read_bytes())
    for bad in [older, *damaged_variants(older)]:
        vectors(tmp_path).write_bytes(bad)
        with JSONLStore(tmp_path, read_only=True) as store:
            assert store.backend.vector_model("s") == (EMBEDDER.name, EMBEDDER.dimension)
            assert read_whole(store) == (bad != older)
        assert_fresh_equals_whole(tmp_path, unviewed=bad == older)


def test_every_query_over_a_file_damaged_in_one_block_equals_the_log(tmp_path: Path) -> None:
    """With one block of the default parts' vectors damaged, every query of a fresh handle, whichever blocks it reads, equals the whole-log handle's and Memory.search."""
    with JSONLStore(tmp_path) as store:
        store.append("s", items_of(ITEMS))
        for parts in PARTS:
            store.index_embeddings("s", EMBEDDER, parts=parts)
            search(store, "cat", "semantic", parts)
    data = vectors(tmp_path).read_bytes()
    head, at = head_of(data)
    number = [name for name, _ in head["tables"]].index(f"{WHOLE}|8/0")
    blob = at + sum(head["parts"][: 4 + 3 * number])
    flipped(tmp_path, blob + head["parts"][4 + 3 * number] // 2)
    assert_fresh_equals_whole(tmp_path, unviewed=False)


def test_a_searched_store_imports_numpy_as_it_opens(tmp_path: Path) -> None:
    """A fresh process that opens a store with a vector or keyword file beside a log has numpy imported (not its first query); one never searched has not."""
    code = (
        "import sys; from agents.memory.stores import JSONLStore; "
        f"JSONLStore({str(tmp_path)!r}, read_only=True).close(); "
        "print('numpy' in sys.modules)"
    )

    def imported() -> bool:
        done = subprocess.run(
            [sys.executable, "-c", code], check=True, capture_output=True, text=True
        )
        return done.stdout.split()[-1] == "True"

    with JSONLStore(tmp_path) as store:
        store.append("s", items_of(3))
    assert not imported()
    written(tmp_path)
    assert imported()


LISTINGS = """
import os, sys
from agents.memory.stores import JSONLStore
folder = sys.argv[1]
listed = []
scandir = os.scandir
os.scandir = lambda path: (listed.append(path == folder), scandir(path))[1]
for step in sys.argv[2:]:
    if step == "numpy":
        import numpy
    elif step == "vectors":
        open(os.path.join(folder, "s.vectors"), "wb").close()
    else:
        JSONLStore(folder, read_only=True).close()
        print(sum(listed), "numpy" in sys.modules)
"""


def listings(folder: Path, *steps: str) -> list[str]:
    """Run ``steps`` in a fresh process (``open``: open and close a read-only handle; ``numpy``: import it; ``vectors``: add a vector file) and return, after each open, how many times the opens listed the store's folder and whether numpy is imported."""
    hour_ago = time.time() - 3600
    os.utime(folder, (hour_ago, hour_ago))  # the folder settled
    done = subprocess.run(
        [sys.executable, "-c", LISTINGS, str(folder), *steps],
        check=True,
        capture_output=True,
        text=True,
    )
    return done.stdout.splitlines()


def test_an_open_lists_an_unchanged_folder_once_a_process(tmp_path: Path) -> None:
    """The opens of one process list a store's folder, never searched, once while it does not change; a vector file added is seen by the next open, which imports numpy."""
    with JSONLStore(tmp_path) as store:
        store.append("s", items_of(3))
    got = listings(tmp_path, "open", "open", "open", "vectors", "open")
    assert got == ["1 False", "1 False", "1 False", "2 True"]


def test_an_open_after_numpy_is_imported_does_not_list_the_folder(tmp_path: Path) -> None:
    """An open in a process that imported numpy already does not list the store's folder: the open would only import it."""
    written(tmp_path)
    assert listings(tmp_path, "open") == ["1 True"]
    assert listings(tmp_path, "numpy", "open") == ["0 True"]


def damaged_at_load(data: bytes) -> dict[str, bytes]:
    """Return copies of a version 2 vector file damaged where its load checks (not its vectors' blocks), by name."""
    head, at = head_of(data)
    end = data.index(b"\n") + 1
    vectors_at = at + sum(head["parts"][:4])  # the first table's vectors
    assert head["parts"][4] > vector_file.CHECK_BLOCK
    out = {"cut at a block of the vectors": data[: vectors_at + vector_file.CHECK_BLOCK]}
    for name, byte in (("table of sums", end + 3), ("live seqs", at + 3)):
        damaged = bytearray(data)
        damaged[byte] ^= 0x41
        out[name] = bytes(damaged)
    line = orjson.dumps({**head, "sums": head["sums"] ^ 1})
    line += b" " * (end - 1 - len(line)) + b"\n"
    out["CRC of the table of sums"] = line + data[end:]
    return out


@pytest.mark.parametrize(
    "damage",
    ["cut at a block of the vectors", "table of sums", "live seqs", "CRC of the table of sums"],
)
def test_a_file_damaged_where_its_load_checks_is_saved_again(tmp_path: Path, damage: str) -> None:
    """A vector file whose load fails its checks (cut at a block boundary, its table of sums or that table's CRC, a part checked at load), its header line sound, is saved again by a writable handle's query: not left for every fresh process to read the log whole."""
    written(tmp_path)
    assert_saved_again(
        tmp_path, damaged_at_load(vectors(tmp_path).read_bytes())[damage], first_call=True
    )


def test_pages_over_a_damaged_block_stay_as_of_the_first_page(tmp_path: Path) -> None:
    """Pages that meet a damaged block after another handle appended and deleted since the first page go on with the rows as of the first page: not the item appended, still the one deleted."""
    written(tmp_path)
    flipped(tmp_path, vector_at(vectors(tmp_path).read_bytes(), 450))
    want = pages_from_the_log(tmp_path)
    with JSONLStore(tmp_path, read_only=True) as store:
        pages = store.backend.vector_pages("s", WHOLE, 50)
        got = next(pages)
        with JSONLStore(tmp_path) as writer:
            writer.append("s", items_of(1, ITEMS))
            writer.index_embeddings("s", EMBEDDER, parts=EmbedParts.WHOLE)
            writer.delete_seqs("s", [500])
        got += [row for page in pages for row in page]
        assert read_whole(store)
    assert [seq for seq, _ in got] == list(range(1, ITEMS + 1))
    assert got == want
