"""A JSONL session's coded part vectors beside its log: a fresh handle's first query loads them keyed from <session>.vectors (the log not read whole), catches a stale file up from the log's tail, and ranks as Memory.search; what the SQLite file shares is tested in test_stores_coded_file."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from array import array
from pathlib import Path

import pytest
from coded_sessions import (
    EMBEDDER,
    QUERIES,
    budget_of,
    coded_handle,
    coded_path,
    coded_session,
    coded_up,
    expected,
    file_of,
    found,
    kept_types,
    more_steps,
    saved,
    steps,
    written,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.memory import MemoryItem
from agents.memory.stores import JSONLStore, open_store
from agents.memory.stores._jsonl import vector_file
from agents.memory.stores._search.compact import CompactVectors

# Each test twice: the coded rows bounded by simsimd, then by numpy (simsimd refused).
pytestmark = pytest.mark.usefixtures("int8_kernel")


def url_of(folder: Path) -> str:
    """Return the URL of the JSONL store in ``folder``."""
    return f"jsonl://{folder}"


def read_whole(store: object) -> bool:
    """Return whether the handle read session ``s``'s log whole."""
    assert isinstance(store, JSONLStore)
    return store.backend._logs.viewed("s")


def first_semantic(
    url: str, items: list[MemoryItem], monkeypatch: pytest.MonkeyPatch, query: str = QUERIES[0]
) -> tuple[bool, bool]:
    """Return whether a fresh handle's first semantic query took a coded table, and whether it read the log whole; its hits checked against Memory.search."""
    with coded_handle(url, items, monkeypatch) as store:
        assert found(store, query, 9, "semantic") == expected(items, query, 9, "semantic", None)
        return kept_types(store) == [CompactVectors], read_whole(store)


def saved_at(url: str) -> object:
    """Return the version the session's file was saved at (its head)."""
    with open_store(url) as store:
        return file_of(store).saved_version()


def test_a_fresh_handles_first_semantic_query_loads_the_file_without_reading_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first semantic query of a fresh handle (writable or read-only) answers from the coded file, keyed by the first rows <session>.vectors holds: the log is not read whole."""
    url = url_of(tmp_path / "store")
    items = steps(90, 3)
    path = coded_session(url, items, monkeypatch)
    assert os.path.dirname(path) == str(tmp_path / "store" / "kvmemory-coded")
    assert first_semantic(url, items, monkeypatch) == (True, False)
    with open_store(url, read_only=True) as store:
        monkeypatch.setattr(store._vectors._cache, "_budget", budget_of(items))
        assert found(store, QUERIES[2], 9, "semantic") == expected(
            items, QUERIES[2], 9, "semantic", None
        )
        assert kept_types(store) == [CompactVectors]
        assert not read_whole(store)


def test_a_stale_file_is_caught_up_from_the_logs_tail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Steps appended, updated and deleted by another handle since the save: a fresh handle reads only the log's records after the file's version, catches the file up (not built again nor saved), and ranks as Memory.search over the steps now."""
    url = url_of(tmp_path / "store")
    items = steps(80, 4)
    coded_session(url, items, monkeypatch)
    before = saved_at(url)
    added = MemoryItem(step=500, thought="pay the invoice for March", team="red")
    changed = MemoryItem(step=61, thought="close the report window", status="FINISH")
    with open_store(url) as other:
        seqs = [record.seq for record in other.records("s")]
        other.append("s", [added])
        with other.batch("s") as batch:
            batch.update({seqs[61]: changed})
        assert other.delete_seqs("s", [seqs[70]]) == 1
        other.index_embeddings("s", EMBEDDER)
    now = [*items[:61], changed, *items[62:70], *items[71:], added]
    assert first_semantic(url, now, monkeypatch) == (True, False)
    assert first_semantic(url, now, monkeypatch, QUERIES[1]) == (True, False)
    assert saved_at(url) == before


def test_a_compacted_log_builds_the_file_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A log written anew since the save (compacted) names no changes: the file is not used, the hits stay right, and the next coding saves it again."""
    url = url_of(tmp_path / "store")
    items = steps(80, 6)
    coded_session(url, items, monkeypatch)
    with JSONLStore(tmp_path / "store") as other:
        seqs = [record.seq for record in other.records("s")]
        assert other.delete_seqs("s", seqs[40:50]) == 10
        other.compact("s")
    left = [*items[:40], *items[50:]]
    assert first_semantic(url, left, monkeypatch)[0] is False
    saved(url, left, monkeypatch)
    assert first_semantic(url, left, monkeypatch) == (True, False)


@pytest.mark.parametrize("side", ["removed", "foreign"])
def test_the_vectors_side_file_removed_or_replaced(
    side: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With <session>.vectors removed, or replaced by another store's, the log is read whole and the coded file still authenticates by the same first rows: the hits stay Memory.search's."""
    url = url_of(tmp_path / "store")
    items = steps(70, 8)
    coded_session(url, items, monkeypatch)
    vectors = tmp_path / "store" / "s.vectors"
    if side == "removed":
        vectors.unlink()
    else:
        other = url_of(tmp_path / "other")
        coded_session(other, steps(70, 9), monkeypatch)
        shutil.copyfile(tmp_path / "other" / "s.vectors", vectors)
    with open_store(url, read_only=True) as store:
        monkeypatch.setattr(store._vectors._cache, "_budget", budget_of(items))
        assert found(store, QUERIES[0], 9, "semantic") == expected(
            items, QUERIES[0], 9, "semantic", None
        )
        assert kept_types(store) == [CompactVectors]
        assert read_whole(store)


def test_a_second_process_loads_the_file_and_delete_session_removes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process's fresh handle loads the file a writer saved (the log not read whole) with Memory.search's hits; delete_session removes the file."""
    url = url_of(tmp_path / "store")
    items = steps(60, 2)
    path = coded_session(url, items, monkeypatch)
    script = f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from coded_sessions import EMBEDDER, QUERIES, budget_of, expected, found, steps
        from agents.memory.stores import open_store
        items = steps(60, 2)
        with open_store({url!r}) as store:
            store._vectors._cache._budget = budget_of(items)
            assert found(store, QUERIES[1], 8, "semantic") == expected(
                items, QUERIES[1], 8, "semantic", None
            )
            tables = [entry[1] for entry in store._vectors._cache._tables.values()]
            print(type(tables[0]).__name__, store.backend._logs.viewed("s"))
    """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], check=True, capture_output=True, text=True
    )
    assert done.stdout.split() == ["CompactVectors", "False"]
    with open_store(url) as store:
        assert coded_path(store) == path
        assert store.delete_session("s")
    assert not os.path.exists(path)


def test_a_read_only_handle_never_writes_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-only handle codes the session without saving it; a writer's close saves the file of the steps it wrote."""
    url = url_of(tmp_path / "store")
    items = steps(60, 1)
    with open_store(url) as store:
        store.append("s", items)
        store.index_embeddings("s", EMBEDDER)
    with open_store(url, read_only=True) as store:
        monkeypatch.setattr(store._vectors._cache, "_budget", budget_of(items))
        coded_up(store, QUERIES[0], 5)
        assert kept_types(store) == [CompactVectors]
    assert not (tmp_path / "store" / "kvmemory-coded").exists()
    more = more_steps(80, 5)
    with coded_handle(url, items, monkeypatch) as store:
        monkeypatch.setattr(store._vectors._cache, "_budget", budget_of([*items, *more]))
        store.append("s", more)
        store.index_embeddings("s", EMBEDDER)
    from coded_sessions import closed_saves

    closed_saves()
    assert first_semantic(url, [*items, *more], monkeypatch) == (True, False)


@settings(max_examples=60, deadline=None)
@given(
    stored=st.lists(st.integers(1, 60), unique=True).map(sorted),
    changes=st.lists(st.tuples(st.booleans(), st.integers(1, 70), st.binary(max_size=8))),
    size=st.integers(1, 7),
)
def test_a_vector_tables_pages_are_its_rows_now(
    stored: list[int], changes: list[tuple[bool, int, bytes]], size: int
) -> None:
    """A vector file's table with vectors put and dropped since pages out the rows a dict of them holds, in seq order, as of the call (what vector_pages answers from <session>.vectors)."""
    model = {seq: bytes([seq]) * (seq % 3) for seq in stored}
    blob = b"".join(model.values())
    table = vector_file._Table(
        array("Q", stored), array("Q", [len(model[seq]) for seq in stored]), memoryview(blob)
    )
    for put, seq, vector in changes:
        if put:
            table.set(seq, vector)
            model[seq] = vector
        else:
            table.drop(seq)
            model.pop(seq, None)
    pages = table.pages(size)
    table.set(999, b"later")  # after the call: not seen
    taken = list(pages)
    assert all(0 < len(page) <= size for page in taken)
    assert [row for page in taken for row in page] == sorted(model.items())


def appended(url: str, items: list[MemoryItem]) -> int:
    """Append ``items`` to session ``s`` with their part vectors; return the log's length after."""
    with open_store(url) as store:
        store.append("s", items)
        store.index_embeddings("s", EMBEDDER)
    return os.path.getsize(url.removeprefix("jsonl://") + "/s.jsonl")


@pytest.mark.parametrize("then", ["at", "past"])
def test_an_older_log_written_again_to_the_files_length_is_not_taken_for_it(
    then: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An older copy of the log put back (a backup restored), then other steps (reusing the seqs the file holds) appended until the log is exactly as long as when the coded file was saved (``at``: same header, same length, other records), or one step past it (``past``: a line ends where the file was saved, so the records after it alone would look like the changes since): the file must not be served nor caught up (hits as Memory.search over the log now)."""
    url = url_of(tmp_path / "store")
    log = tmp_path / "store" / "s.jsonl"
    items = steps(60, 3)
    written(url, items)
    shutil.copyfile(log, tmp_path / "old.jsonl")
    later = more_steps(70, 5)
    length = appended(url, later)
    saved(url, [*items, *later], monkeypatch)
    os.replace(tmp_path / "old.jsonl", log)  # the older copy put back
    now = list(items)
    while length - os.path.getsize(log) > 3000:  # other steps, on the seqs of `later`
        now.append(MemoryItem(**{**steps(1, 40 + len(now))[0].to_dict(), "step": 2000 + len(now)}))
        appended(url, now[-1:])
    before = os.path.getsize(log)
    now.append(MemoryItem(step=3000, thought="x"))
    # The bytes of a step and its vectors, less its thought; then a seq or length of one more
    # digit than guessed puts the log back and cuts the thought to fit.
    fixed = appended(url, now[-1:]) - before - 1
    wide, kept = length - os.path.getsize(log) - fixed, log.read_bytes()
    # A record's time stamp is not always as long (its float's digits): try again until it fits.
    for _ in range(50):
        pad = MemoryItem(step=3001, thought="y" * wide)
        wide += length - appended(url, [pad])
        if os.path.getsize(log) == length:
            break
        log.write_bytes(kept)
    assert os.path.getsize(log) == length
    now.append(pad)
    if then == "past":
        now.append(MemoryItem(step=3002, thought="the report dialog was closed"))
        appended(url, now[-1:])
    assert first_semantic(url, now, monkeypatch)[0] is False
