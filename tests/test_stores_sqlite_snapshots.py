"""An SQLite handle saves the keyword snapshots of the sessions it wrote as it closes (``_sqlite.snapshots``), and the save counts postings in numpy (``_search.snapshot``)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from search_checks import QUERY, TEXT, built, hits, item_dicts, snapshot_reads

from agents.memory import MemoryItem
from agents.memory.exceptions import InvalidStoreURLError, StoreArgumentError
from agents.memory.stores import SQLiteStore, open_store
from agents.memory.stores._search import snapshot as snapshot_module
from agents.memory.stores._search.snapshot import snapshot_bytes
from agents.memory.stores._sqlite.snapshots import FEWEST, behind_allowed

pytest.importorskip("numpy")

ROOT = Path(__file__).parent.parent


@pytest.fixture
def loaded(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Record, for each ``read_snapshot`` of ``Store.read_memory``, whether it gave a snapshot."""
    return snapshot_reads(monkeypatch)


def settled() -> None:
    """Wait for the snapshots handles closed in this process are saving."""
    for thread in threading.enumerate():
        if thread.name == "kvmemory-keyword-snapshot":
            thread.join()


def steps(first: int, n: int) -> list[MemoryItem]:
    """Return ``n`` steps from ``first``, a few words in common and one of their own each."""
    return [
        MemoryItem(step=i, thought=f"report {i % 7} window {'wide ' * (i % 3)}q{i}")
        for i in range(first, first + n)
    ]


def kept(folder: Path) -> list[Path]:
    """Return the snapshot files kept beside ``<folder>/s.db``, not a save's file before its rename (none where there is no folder)."""
    keywords = folder / "s.db.keywords"
    return sorted(path for path in keywords.glob("[!.]*")) if keywords.exists() else []


# -- the save: numpy and Python write the same bytes -------------------------------------------

# Words of 1 to 12 bytes (8 and 9 at the edge of the numbers a short term makes), non-ASCII too.
WORDS = st.sampled_from(
    ["a", "b", "ab", "abcdefg", "abcdefgh", "abcdefghi", "abcdefgh1234", "é", "中中中", "ß1", "zz"]
)
KEPT = st.lists(st.lists(WORDS, max_size=8).map(" ".join), max_size=40)


@settings(max_examples=150, deadline=None)
@given(KEPT, st.sampled_from([1, 3, 7, 2048]), st.sampled_from(["", "a  b", " a", "a ", " "]))
def test_the_numpy_save_writes_the_python_saves_bytes(
    terms: list[str], chunk: int, odd: str
) -> None:
    """Over rows with and without terms, long and non-ASCII ones, whatever the chunks, the numpy save's file is the Python save's, byte for byte (and neither saves spacing no row is kept with)."""
    for rows in (terms, [*terms, odd]):
        seqs = [2 * i + 1 for i in range(len(rows))]
        with mock.patch.object(snapshot_module, "_CHUNK", chunk):
            fast = snapshot_bytes(seqs, rows)
        assert fast == snapshot_bytes(seqs, rows, use_numpy=False)
        if odd.strip(" ") and odd in rows:
            assert fast is None


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(item_dicts(TEXT, min_size=1, max_size=30), st.lists(QUERY, min_size=1, max_size=3))
def test_a_memory_read_with_the_numpy_saves_snapshot_ranks_as_its_items(
    tmp_path_factory: pytest.TempPathFactory,
    loaded: list[bool],
    rows: list[dict[str, Any]],
    queries: list[str],
) -> None:
    """A memory read with a snapshot the numpy save wrote (chunks of 4 rows) ranks as one built from its items: the same hits and floats."""
    folder = tmp_path_factory.mktemp("fast")
    loaded.clear()
    with open_store(f"sqlite://{folder}/s.db") as store:
        store.append("s", [MemoryItem(step=i, **row) for i, row in enumerate(rows)])
        with mock.patch.object(snapshot_module, "_CHUNK", 4):
            saved = store.save_keyword_snapshot("s")
        memory = store.read_memory("s")
        model = built([{"step": i, **row} for i, row in enumerate(rows)])
        for query in queries:
            assert hits(memory, query, 8) == hits(model, query, 8)
    assert loaded == [saved]


# -- the save as a handle closes ---------------------------------------------------------------

WRITER = """
import sys
from agents.memory import MemoryItem
from agents.memory.stores import open_store
store = open_store(sys.argv[1])
store.append("s", [MemoryItem(step=i, thought=f"report {i % 7} window q{i}") for i in range(int(sys.argv[2]))])
store.close()
"""


def test_a_second_process_reads_the_snapshot_the_writers_close_saved(
    tmp_path: Path, loaded: list[bool]
) -> None:
    """A process that writes a session and closes its store leaves a snapshot (the process waits for its save), which another process's read takes and ranks by as its items."""
    url = f"sqlite://{tmp_path}/s.db"
    subprocess.run([sys.executable, "-c", WRITER, url, str(FEWEST + 200)], check=True, cwd=ROOT)
    assert len(kept(tmp_path)) == 1
    with open_store(url, read_only=True) as reader:
        memory = reader.read_memory("s")
        model = built([item.to_dict() for item in reader.read("s")])
        for query in ("report 3", "window q17 report", "q1199"):
            assert hits(memory, query, 8) == hits(model, query, 8)
    assert loaded == [True]


def test_a_handle_saves_as_it_closes_only_a_snapshot_missing_behind_or_stale(
    tmp_path: Path, loaded: list[bool]
) -> None:
    """A handle saves the snapshot of a session it wrote as it closes where none is kept, where the rows appended since are more than ``behind_allowed`` or where it changed a row; a current one is left as it is."""
    url = f"sqlite://{tmp_path}/s.db"
    with open_store(url) as store:
        store.append("s", steps(0, FEWEST))
    settled()
    [path] = kept(tmp_path)
    first = path.read_bytes()
    with open_store(url) as store:  # a few rows: the read catches them up
        store.append("s", steps(FEWEST, behind_allowed(FEWEST)))
    settled()
    assert path.read_bytes() == first
    with open_store(url) as store:  # one more: behind by more than it allows
        store.append("s", steps(2 * FEWEST, 1))
    settled()
    second = path.read_bytes()
    assert second != first
    with open_store(url) as store:  # a row changed: the snapshot no longer vouches for it
        store.delete_steps("s", [5])
    settled()
    assert path.read_bytes() != second
    with open_store(url) as store:
        memory = store.read_memory("s")
        model = built([item.to_dict() for item in store.read("s")])
        assert hits(memory, "report 5 wide", 8) == hits(model, "report 5 wide", 8)
    assert loaded == [True]


@pytest.mark.parametrize("how", ["read-only", "off", "few rows", "jsonl", "memory"])
def test_no_snapshot_is_saved_unasked_where_the_design_says_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """Read-only handles, handles opened with ``keyword_snapshot=off``, sessions under ``FEWEST`` rows, in-memory SQLite and stores that keep no snapshot write no file as they close."""
    monkeypatch.chdir(tmp_path)
    url = f"sqlite://{tmp_path}/s.db"
    if how == "read-only":
        with open_store(url + "?keyword_snapshot=off") as store:
            store.append("s", steps(0, FEWEST))
        with open_store(url, read_only=True) as reader:
            reader.read_memory("s").search("report 3")
    elif how == "off":
        with open_store(url + "?keyword_snapshot=off") as store:
            assert store.keyword_snapshot == "off"
            store.append("s", steps(0, FEWEST + 50))
    elif how == "few rows":
        with open_store(url) as store:
            store.append("s", steps(0, FEWEST - 1))
    else:
        target = f"jsonl://{tmp_path}/j" if how == "jsonl" else "memory://auto-snapshot"
        with open_store(target) as store:
            store.append("s", steps(0, FEWEST))
    settled()
    assert not [path for path in tmp_path.rglob("*") if path.parent.name.endswith(".keywords")]


KILLED = """
import os, sys
from agents.memory import MemoryItem
from agents.memory.stores import open_store
os.replace = lambda *args: os._exit(9)  # killed as its save's file is renamed in place
store = open_store(sys.argv[1])
store.append("s", [MemoryItem(step=10_000 + i, thought=f"report {i % 5} late") for i in range(int(sys.argv[2]))])
store.close()
"""


@pytest.mark.parametrize("before", [False, True])
def test_a_save_killed_midway_leaves_no_snapshot_taken_wrongly(
    tmp_path: Path, loaded: list[bool], before: bool
) -> None:
    """A process killed while it saves as it closes leaves its save's file unread and the snapshot before it (or none): a read ranks as its items, taking the old snapshot only where it vouches for the rows."""
    url = f"sqlite://{tmp_path}/s.db"
    with open_store(url + "?keyword_snapshot=off") as store:
        store.append("s", steps(0, FEWEST))
        if before:
            assert store.save_keyword_snapshot("s")
    done = subprocess.run([sys.executable, "-c", KILLED, url, "1500"], cwd=ROOT, check=False)
    assert done.returncode == 9
    left = list((tmp_path / "s.db.keywords").glob(".snapshot-*"))
    assert len(left) == 1  # the killed save's file
    assert len(kept(tmp_path)) == int(before)
    with open_store(url + "?keyword_snapshot=off") as store:
        memory = store.read_memory("s")
        model = built([item.to_dict() for item in store.read("s")])
        for query in ("report 3 late", "window report 2"):
            assert hits(memory, query, 8) == hits(model, query, 8)
    assert loaded == [False]  # 1,500 rows behind the old one: more than a read catches up


def test_a_save_removes_the_files_killed_saves_left_an_hour_ago(tmp_path: Path) -> None:
    """A save removes a killed save's file over an hour old, and keeps a newer one (a save under way)."""
    folder = tmp_path / "s.db.keywords"
    folder.mkdir()
    old, new = folder / ".snapshot-old", folder / ".snapshot-new"
    old.write_bytes(b"x")
    new.write_bytes(b"x")
    hours = time.time() - 2 * 3600
    os.utime(old, (hours, hours))
    with open_store(f"sqlite://{tmp_path}/s.db") as store:
        store.append("s", steps(0, 3))
        assert store.save_keyword_snapshot("s")
    assert not old.exists()
    assert new.exists()


def test_the_option_is_checked(tmp_path: Path) -> None:
    """``keyword_snapshot`` other than ``auto`` or ``off`` is refused, naming the option."""
    with pytest.raises(InvalidStoreURLError, match="keyword_snapshot='sometimes'"):
        open_store(f"sqlite://{tmp_path}/s.db?keyword_snapshot=sometimes")
    with pytest.raises(StoreArgumentError, match="keyword_snapshot must be 'auto' or 'off'"):
        SQLiteStore(tmp_path / "t.db", keyword_snapshot="sometimes")  # type: ignore[arg-type]  # the wrong value tested
    with open_store(f"sqlite://{tmp_path}/s.db") as store:
        assert store.keyword_snapshot == "auto"
